"""One arm of ``bench.real_step`` in its own process: the GRPO recipe with TRL's trainer clocked around its own
methods, each finished step's seconds by phase written to JSON at once. Imports torch, transformers and TRL.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import trl
from transformers import TrainerCallback

from bench.grpo_arms import trl_trainer_replaced_by
from recipes import grpo
from recipes.common import parse_or_explain
from recipes.cpu_speed import completion_positions_only

if TYPE_CHECKING:
    from bench.real_step import Arm


class StepClock(TrainerCallback):
    """Per optimizer step: its wall time and seconds inside each timed method, written at once, so an arm stopped by
    ``--arm-timeout`` keeps the steps it made.
    """

    def __init__(self, out_json: Path | None = None):
        self.steps: list[dict] = []
        self.current: dict = {}
        self.started = 0.0
        self.out_json = out_json

    def add(self, key: str, seconds: float) -> None:
        self.current[key] = self.current.get(key, 0.0) + seconds

    def on_step_begin(self, args, state, control, **kwargs):
        self.current, self.started = {}, time.perf_counter()
        self.save(bf16=bool(args.bf16), running_since=time.time())  # a stopped arm: how long this step had run

    def on_step_end(self, args, state, control, **kwargs):
        self.current["wall"] = time.perf_counter() - self.started
        self.steps.append(self.current)
        self.save(bf16=bool(args.bf16))

    def save(self, **extra) -> None:
        if self.out_json is not None:
            record = {"steps": self.steps, "threads": os.environ.get("OMP_NUM_THREADS"), **extra}
            self.out_json.write_text(json.dumps(record))


def timed(method, clock: StepClock, key: str):
    """``method`` (a function taking ``self`` first, or a bound method) with its seconds added to ``clock[key]``."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            clock.add(key, time.perf_counter() - start)

    return wrapper


def clocked_trainer_class(base, clock: StepClock):
    """``base`` with clocks around the methods each phase is made of."""

    class Clocked(base):
        def __init__(self, *args, callbacks=None, **kwargs):
            super().__init__(*args, callbacks=[*(callbacks or []), clock], **kwargs)

        _generate = timed(base._generate, clock, "generate")
        _calculate_rewards = timed(base._calculate_rewards, clock, "rewards")
        _prepare_inputs = timed(base._prepare_inputs, clock, "prepare_inputs")
        training_step = timed(base.training_step, clock, "training_step")

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)
            finally:
                if not getattr(self, "_in_loss", False):  # the policy's own forward is part of the loss
                    clock.add("scoring_logps", time.perf_counter() - start)

        def compute_loss(self, *args, **kwargs):
            self._in_loss = True
            try:
                return super().compute_loss(*args, **kwargs)
            finally:
                self._in_loss = False

    Clocked.__name__ = base.__name__
    return Clocked


class MonitorClock(TrainerCallback):
    """The monitors' reward-wrapper seconds, read per step from the recipe's reward monitor."""

    def __init__(self, clock: StepClock, trainer_ref: list):
        self.clock, self.trainer_ref, self.seen = clock, trainer_ref, 0.0

    def on_step_end(self, args, state, control, **kwargs):
        callback = getattr(self.trainer_ref[0], "monitor_callback", None) if self.trainer_ref else None
        if callback is not None:
            total = callback.monitor.seconds
            self.clock.add("monitor_wrappers", total - self.seen)
            self.seen = total


def worker(config: str, model: str, data: str, steps: int, arm: Arm, out_json: Path) -> None:
    """One arm, in this process: the recipe on ``config`` with clocked trainer, its per-step seconds to ``out_json``."""

    clock, trainer_ref = StepClock(out_json), []
    base = clocked_trainer_class(trl.GRPOTrainer, clock)
    if "completion_head" in arm.patches:
        completion_positions_only().__enter__()  # for the whole process: this arm's every scoring

    class WithMonitorClock(base):
        def __init__(self, *args, callbacks=None, **kwargs):
            monitor_clock = MonitorClock(clock, trainer_ref)
            super().__init__(*args, callbacks=[*(callbacks or []), monitor_clock], **kwargs)
            trainer_ref.append(self)
            for cb in self.callback_handler.callbacks:  # the recipe's own callbacks, timed at each log
                if type(cb).__module__ in ("recipes.common", "recipes.monitors") and hasattr(cb, "on_log"):
                    cb.on_log = timed(cb.on_log, clock, "monitor_callbacks")

    WithMonitorClock.__name__ = base.__name__
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            *("--config", config, "--model_name_or_path", model, "--data", data, "--output_dir", tmp),
            *("--max_steps", str(steps), "--eval_limit", "0", "--monitor_eval_steps", "0", "--probe_problems", "0"),
            *("--logging_steps", "1", *arm.flags),
        ]
        parsed = parse_or_explain(grpo.make_parser(), argv)
        with trl_trainer_replaced_by(WithMonitorClock):
            grpo.main(*parsed[:3])
    clock.save(bf16=bool(parsed[1].bf16))
