"""Step time of the GRPO recipe's trainer with every per-step monitor vs plain TRL ``GRPOTrainer``, same rewards,
same config, tiny local model, one process; reported as a ratio (goal: at most 5% overhead).

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.grpo_overhead            # ~2 minutes on a 2-core machine
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.grpo_overhead --rounds 2 --steps 6   # quick look

Both trainers run alternately (plain, monitored, plain, monitored, ...) so that load from other processes hits
both alike; each round trains ``--steps`` optimizer steps and the first ``--warmup`` of each round are dropped. The
monitored trainer has the recipe's reward wrappers (monitor/* metrics, top-completions table), the JSON-lines log and
the probe/config callback, logging every step. The held-out evaluation (``monitor_eval_steps``) is a generation run
by design, so its cost is reported separately, per evaluation, rather than folded into the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "gsm8k"


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step (generation, rewards, loss, backward, optimizer, logging callbacks)."""

    def __init__(self):
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_log(self, args, state, control, **kwargs):  # after on_step_end; put this callback last to time the others
        if self._start:
            self.times.append(time.perf_counter() - self._start)
            self._start = 0.0


def make_config(out: Path, steps: int, group_size: int, completion_length: int, **overrides):
    """The benchmarks' GRPO config: 2 prompts per step, no reference model, every step logged; ``overrides`` win."""
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(out),
        use_cpu=True,
        loss_type="grpo",
        beta=0.0,
        scale_rewards="group",
        num_generations=group_size,
        per_device_train_batch_size=2 * group_size,  # 2 prompts per step
        max_completion_length=completion_length,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        max_steps=steps,
        logging_steps=1,  # the monitors' worst case: metrics, table and JSON line every step
        save_strategy="no",
        gradient_checkpointing=False,
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    return GRPOConfig(**(settings | overrides))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per round")
    parser.add_argument("--warmup", type=int, default=2, help="steps dropped at the start of each round")
    parser.add_argument("--group_size", type=int, default=4)
    parser.add_argument("--completion_length", type=int, default=32)
    parser.add_argument("--eval_limit", type=int, default=8, help="problems in the timed held-out evaluation")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)

    from trl import GRPOTrainer

    from eval.monitors import JsonlLogCallback, MonitorCallback, RewardMonitor, held_out_metrics
    from eval.monitors import make_monitored_trainer_class as monitored
    from eval.tasks import get_task, load_rows, to_prompt_rows
    from lab.tiny_model import save_tiny_model
    from rewards import get_reward

    tmp = Path(tempfile.mkdtemp(prefix="grpo_overhead_"))
    model_dir = save_tiny_model(tmp / "tiny_model")
    task = get_task("gsm8k_train")
    rows = to_prompt_rows(task, load_rows(task, str(DATA / "train.jsonl")).select(range(64)))
    names, weights = ["gsm8k_correctness", "gsm8k_format"], [1.0, 1.0]
    funcs = [get_reward(n) for n in names]

    times: dict[str, list[float]] = {"plain": [], "monitored": []}
    monitor_seconds, monitor_steps = 0.0, 0
    for round_index in range(args.rounds):
        for kind in ("plain", "monitored"):
            out = tmp / f"{kind}_{round_index}"
            config = make_config(out, args.steps, args.group_size, args.completion_length)
            timer = StepTimer()
            if kind == "plain":
                trainer = GRPOTrainer(str(model_dir), funcs, args=config, train_dataset=rows, callbacks=[timer])
            else:
                monitor = RewardMonitor(funcs, weights, "gsm8k", args.completion_length, correctness_index=0)
                callback = MonitorCallback(monitor, out, probe_problems=[], report_to=[])
                callbacks = [JsonlLogCallback(out / "log.jsonl"), callback, timer]
                trainer = monitored(GRPOTrainer)(
                    str(model_dir), monitor.wrapped(), args=config, train_dataset=rows, callbacks=callbacks
                )
                trainer.monitor_callback = callback
            trainer.train()
            times[kind] += timer.times[args.warmup :]
            if kind == "monitored":
                monitor_seconds += monitor.seconds
                monitor_steps += len(timer.times)

    eval_start = time.perf_counter()
    held_out_metrics(
        trainer.model, trainer.processing_class, task_name="gsm8k", data=str(DATA / "test.jsonl"),
        limit=args.eval_limit, max_new_tokens=args.completion_length, progress=False,
    )  # fmt: skip
    eval_seconds = time.perf_counter() - eval_start

    plain, mon = statistics.median(times["plain"]), statistics.median(times["monitored"])
    result = {
        "command": "OMP_NUM_THREADS=1 python -m bench.grpo_overhead " + " ".join(argv),
        "settings": vars(args),
        "steps_timed_each": len(times["plain"]),
        "plain_median_s_per_step": round(plain, 4),
        "monitored_median_s_per_step": round(mon, 4),
        "ratio_monitored_over_plain": round(mon / plain, 4),
        "plain_mean_s_per_step": round(statistics.mean(times["plain"]), 4),
        "monitored_mean_s_per_step": round(statistics.mean(times["monitored"]), 4),
        "monitor_code_s_per_step": round(monitor_seconds / max(monitor_steps, 1), 5),
        "monitor_code_share_of_step": round(monitor_seconds / max(monitor_steps, 1) / mon, 4),
        "held_out_eval_s": round(eval_seconds, 3),
        "held_out_eval_problems": args.eval_limit,
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
