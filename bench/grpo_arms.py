"""The two clocked arms ``bench.grpo_overhead`` and ``bench.grpo_gpu`` time: ours, ``recipes.grpo.main`` on a config,
and plain TRL ``GRPOTrainer`` from the same parsed config, both the same ``GRPOTrainer`` subclass. Imports torch,
transformers and TRL: the benchmarks import it after parsing their arguments.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from pathlib import Path

import trl
from transformers import TrainerCallback

from eval.tasks import get_task, load_rows, to_prompt_rows
from recipes import grpo
from rewards import get_reward


class Clock(TrainerCallback):
    """Put LAST in the callback list: step boundaries, and (with ``ClockStart`` put first) time spent in between."""

    def __init__(self):
        self.marks: list[float] = []  # each step's start, then the end of training
        self.callback_seconds: dict[str, float] = defaultdict(float)
        self.callback_calls: dict[str, int] = defaultdict(int)
        self.train_seconds = 0.0
        # this process's CPU time in train(), which other processes' load changes less than the wall clock; the
        # math-verify workers' is not in it (the lab's GSM8K rewards and evaluation compare decimals, not in them)
        self.train_cpu_seconds = 0.0
        self.monitor_seconds = 0.0  # RewardMonitor.seconds: the reward wrappers' own code
        self.prompts: list = []
        self.completions: list = []
        self._opened = 0.0

    def open(self) -> None:
        self._opened = time.perf_counter()

    def _close(self, event: str) -> None:
        self.callback_seconds[event] += time.perf_counter() - self._opened
        self.callback_calls[event] += 1

    def on_train_begin(self, args, state, control, **kwargs):
        self._close("on_train_begin")

    def on_step_begin(self, args, state, control, **kwargs):
        self.marks.append(time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        self._close("on_step_end")

    def on_log(self, args, state, control, **kwargs):
        self._close("on_log")

    def on_train_end(self, args, state, control, **kwargs):
        self.marks.append(time.perf_counter())

    @property
    def step_seconds(self) -> list[float]:
        """Whole steps: generation, rewards, loss, backward, optimizer, callbacks, logging, evaluation."""
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


class ClockStart(TrainerCallback):
    """Put FIRST among the user callbacks: opens the clock's interval for each timed event."""

    def __init__(self, clock: Clock):
        self.clock = clock

    def on_train_begin(self, args, state, control, **kwargs):
        self.clock.open()

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.open()

    def on_log(self, args, state, control, **kwargs):
        self.clock.open()


def timed_trainer_class(base, clock: Clock):
    """``base`` (TRL's ``GRPOTrainer``) with ``clock`` around the user callbacks and around ``train()``."""

    class Timed(base):
        def __init__(self, *args, callbacks=None, **kwargs):
            super().__init__(*args, callbacks=[ClockStart(clock), *(callbacks or []), clock], **kwargs)

        def train(self, *args, **kwargs):
            start, cpu_start = time.perf_counter(), time.process_time()
            try:
                return super().train(*args, **kwargs)
            finally:
                clock.train_seconds += time.perf_counter() - start
                clock.train_cpu_seconds += time.process_time() - cpu_start
                monitor_callback = getattr(self, "monitor_callback", None)  # set by the recipe on its trainer
                if monitor_callback is not None:
                    clock.monitor_seconds += monitor_callback.monitor.seconds

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            clock.prompts.extend(self._logs["prompt"])  # the batch just generated (deques of its size)
            clock.completions.extend(self._logs["completion"])
            return output

    Timed.__name__ = base.__name__  # the recipe names its class Monitored<base name>
    return Timed


@contextlib.contextmanager
def trl_trainer_replaced_by(cls):
    """``from trl import GRPOTrainer`` (as the recipe does inside ``main``) gives ``cls`` while this is open."""
    saved = trl.GRPOTrainer
    trl.GRPOTrainer = cls
    try:
        yield
    finally:
        trl.GRPOTrainer = saved


def parse_recipe_args(config: str | Path, overrides: list[str]):
    return grpo.make_parser().parse_args_and_config(["--config", str(config), *overrides])


def run_recipe(config: str | Path, overrides: list[str], clock: Clock) -> None:
    """Ours: the recipe's own ``main`` on the config, its trainer carrying the clock."""
    with trl_trainer_replaced_by(timed_trainer_class(trl.GRPOTrainer, clock)):
        grpo.main(*parse_recipe_args(config, overrides))


def run_plain(config: str | Path, overrides: list[str], clock: Clock) -> None:
    """Plain TRL on the same parsed config: same model, data rows, rewards and weights, LoRA; no monitors."""
    script_args, training_args, model_args = parse_recipe_args(config, overrides)
    task = get_task(script_args.task)
    rows = load_rows(task, script_args.data)
    if script_args.train_limit:
        rows = rows.select(range(min(script_args.train_limit, len(rows))))
    training_args.model_init_kwargs = (training_args.model_init_kwargs or {}) | {"dtype": model_args.dtype}
    trainer = timed_trainer_class(trl.GRPOTrainer, clock)(
        model=model_args.model_name_or_path,
        reward_funcs=[get_reward(name) for name in script_args.reward_funcs],
        args=training_args,
        train_dataset=to_prompt_rows(task, rows),
        peft_config=trl.get_peft_config(model_args),
        quantization_config=trl.get_quantization_config(model_args),
    )
    trainer.train()
