"""Where a real-model GRPO step's time goes on this machine, and what makes it faster without changing what is
learned: one settings arm at a time, each in its own process, side by side in one run.

    OMP_NUM_THREADS=2 python -m bench.real_step                       # SmolLM2 after the lab's SFT, 4 steps per arm
    python -m bench.real_step --model runs/real_model/model --steps 3 --arms full_t2 lora_t2

Every arm runs the real-model lab's default config (``recipes/configs/real_lab/grpo_real_default.yaml``: 4 prompts x
G 8, 32 new tokens) through ``recipes.grpo`` with its monitors on, no held-out evaluation and no probes, for
``--steps`` optimizer steps; the first step (warm-up: allocations, first kernels) is left out of the medians. The
trainer is TRL's ``GRPOTrainer`` with clocks around its own methods, so each phase is what its name says:

- generation: ``_generate`` (tokenising the prompts, ``generate`` or continuous batching, decoding);
- reward: ``_calculate_rewards`` minus the monitors' own code inside the reward wrappers;
- monitors: the reward wrappers' own code (``RewardMonitor.seconds``) and the recipe's log callbacks (the JSON-lines
  log); the held-out evaluation is off, and the monitors' step-end work falls in "the rest";
- old/ref log-probabilities: ``_get_per_token_logps_and_entropies`` while scoring the batch (none at beta 0 with
  one update per generation);
- loss and backward: ``training_step`` minus ``_prepare_inputs`` (the policy's forward, the loss, backward);
- optimizer and the rest: the step's wall time minus all of the above.

Arms (``--arms``): ``full_t2`` full fine-tuning on 2 threads (the lab's setting); ``full_t1`` the same on 1 thread
(what each of the lab's two runs at a time gets); ``lora_t2`` LoRA r 16 on every linear layer; ``cb_t2`` TRL's
``use_transformers_continuous_batching``. Threads and continuous batching change only the speed; LoRA changes what
is learned (fewer parameters move), so its ratio is reported, not adopted without a run of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

CONFIG = "recipes/configs/real_lab/grpo_real_default.yaml"
ARMS = {  # name: (threads, extra recipe flags)
    "full_t2": (2, []),
    "full_t1": (1, []),
    "lora_t2": (
        2,
        ["--use_peft", "true", "--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", "all-linear"],
    ),
    "cb_t2": (2, ["--use_transformers_continuous_batching", "true"]),
}
PHASES = ["generation", "reward", "monitors", "old/ref log-probabilities", "loss and backward", "optimizer and rest"]


class StepClock(TrainerCallback):
    """Per optimizer step: its wall time and the seconds inside each timed method (``add``)."""

    def __init__(self):
        self.steps: list[dict] = []
        self.current: dict = {}
        self.started = 0.0

    def add(self, key: str, seconds: float) -> None:
        self.current[key] = self.current.get(key, 0.0) + seconds

    def on_step_begin(self, args, state, control, **kwargs):
        self.current, self.started = {}, time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.current["wall"] = time.perf_counter() - self.started
        self.steps.append(self.current)


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


def phases(step: dict) -> dict[str, float]:
    """One step's seconds by phase. The monitors' callbacks run at the log after the step (outside its wall time):
    their seconds are added to it; the rest is the wall time minus the named parts inside it."""
    wrappers, callbacks = step.get("monitor_wrappers", 0.0), step.get("monitor_callbacks", 0.0)
    out = {
        "generation": step.get("generate", 0.0),
        "reward": step.get("rewards", 0.0) - wrappers,
        "monitors": wrappers + callbacks,
        "old/ref log-probabilities": step.get("scoring_logps", 0.0),
        "loss and backward": step.get("training_step", 0.0) - step.get("prepare_inputs", 0.0),
    }
    out["optimizer and rest"] = step["wall"] - sum(out.values()) + callbacks
    out["total"] = step["wall"] + callbacks
    return out


def worker(model: str, data: str, steps: int, flags: list[str], out_json: Path) -> None:
    """One arm, in this process: the recipe with clocked trainer, its per-step seconds to ``out_json``."""
    import trl

    from bench.grpo_overhead import parse_recipe_args, trl_trainer_replaced_by
    from recipes import grpo

    clock, trainer_ref = StepClock(), []
    base = clocked_trainer_class(trl.GRPOTrainer, clock)

    class WithMonitorClock(base):
        def __init__(self, *args, callbacks=None, **kwargs):
            monitor_clock = MonitorClock(clock, trainer_ref)
            super().__init__(*args, callbacks=[*(callbacks or []), monitor_clock], **kwargs)
            trainer_ref.append(self)
            for cb in self.callback_handler.callbacks:  # the recipe's own callbacks, timed at each log
                if type(cb).__module__.startswith("eval.") and hasattr(cb, "on_log"):
                    cb.on_log = timed(cb.on_log, clock, "monitor_callbacks")

    WithMonitorClock.__name__ = base.__name__
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            *("--model_name_or_path", model, "--data", data, "--output_dir", tmp, "--max_steps", str(steps)),
            *("--eval_limit", "0", "--monitor_eval_steps", "0", "--probe_problems", "0", "--logging_steps", "1"),
            *flags,
        ]
        with trl_trainer_replaced_by(WithMonitorClock):
            grpo.main(*parse_recipe_args(CONFIG, overrides))
    out_json.write_text(json.dumps({"steps": clock.steps, "threads": os.environ.get("OMP_NUM_THREADS")}))


def run_arm(name: str, model: str, data: str, steps: int, tmp: Path) -> dict:
    threads, flags = ARMS[name]
    out_json = tmp / f"{name}.json"
    cmd = [sys.executable, "-m", "bench.real_step", "--worker", name, "--model", model, "--data", data]
    cmd += ["--steps", str(steps)]
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(tmp / f"{name}.log", "w") as log:
        rc = subprocess.run([*cmd, "--worker-out", str(out_json)], env=env, stdout=log, stderr=subprocess.STDOUT)
    if rc.returncode != 0:
        tail = (tmp / f"{name}.log").read_text()[-2000:]
        raise RuntimeError(f"arm {name} failed (exit {rc.returncode}):\n{tail}")
    return json.loads(out_json.read_text())


def table(results: dict[str, dict], warmup: int) -> str:
    """Median seconds per step and per phase for each arm, and each arm's step time against the first arm's."""
    medians = {}
    for name, result in results.items():
        steps = result["steps"][warmup:] or result["steps"]
        per_phase = [phases(s) for s in steps]
        medians[name] = {
            "wall": statistics.median(x["total"] for x in per_phase),
            **{p: statistics.median(x[p] for x in per_phase) for p in PHASES},
            "n": len(steps),
        }
    first = next(iter(medians))
    lines = [
        "| arm | threads | steps timed | seconds per step | vs " + first + " | " + " | ".join(PHASES) + " |",
        "|" + "---|" * (5 + len(PHASES)),
    ]
    for name, m in medians.items():
        lines.append(
            f"| {name} | {ARMS[name][0]} | {m['n']} | {m['wall']:.2f} | {m['wall'] / medians[first]['wall']:.2f}x | "
            + " | ".join(f"{m[p]:.3f} ({m[p] / m['wall']:.1%})" for p in PHASES)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="runs/real_lab/sft/sft_smollm2/seed0", help="the lab's SFT model")
    parser.add_argument("--data", default="runs/real_lab/data/train.jsonl", help="the lab's training problems")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per arm (the first is warm-up)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--worker", choices=list(ARMS), help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.model, args.data, args.steps, ARMS[args.worker][1], Path(args.worker_out))
        return ""
    if not (Path(args.model) / "config.json").exists():
        parser.error(f"no model at {args.model}: run `python -m cpu_lab.real` (its SFT stage) or pass --model")
    if not Path(args.data).is_file():
        parser.error(
            f"no training problems at {args.data}: `python -m cpu_lab.problems runs/real_lab/data` writes them"
        )
    if args.steps < 2:
        parser.error("--steps must be >= 2: the first step is warm-up")
    results, started = {}, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.arms:
            print(f"[bench] {name} ...", flush=True)
            results[name] = run_arm(name, args.model, args.data, args.steps, Path(tmp))
    text = table(results, warmup=1)
    load = os.getloadavg()
    print(text)
    print(
        f"\n{args.steps} steps per arm (first left out), model {args.model}, {time.time() - started:.0f} s in all; "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}"
    )
    return text


if __name__ == "__main__":
    main()
