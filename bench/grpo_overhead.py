"""Training time of the GRPO recipe (every monitor on: reward wrappers, hack probes, held-out evaluation at the
config's cadence, JSON-lines log, top-completions table) vs plain TRL ``GRPOTrainer`` on the same config.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.grpo_overhead      # lab default config, 12 paired rounds of 40 steps
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.grpo_overhead --rounds 8 --steps 20    # what docs/grpo.md reports
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.grpo_overhead --rounds 1 --steps 20    # quick look, no interval

Ours is ``recipes.grpo.main`` on ``--config`` (default: the lab's warm-start model, whose answers parse, so the
rewards really verify them); plain is TRL's ``GRPOTrainer`` built from the same parsed config with no monitors. Both
are the same clocked subclass (``bench.grpo_arms``), which times each ``train()`` call, the steady-state step, and
the recipe's callbacks and reward wrappers. Runs alternate (plain, ours, ours, plain, ...) so that other load hits
both alike; the share of completions that committed to an answer shows the reward path was exercised.

The headline is the ratio ours / plain of each round's ``train()`` time (wall and CPU), over the paired rounds: their
geometric mean and its 95% interval (Student's t on the log-ratios), and whether that decides the 5% goal.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from eval.tasks import get_task
from recipes.tiny_model import save_tiny_model
from rewards.answers import extract_answer
from rewards.completions import completion_text

if TYPE_CHECKING:
    from bench.grpo_arms import Clock

ROOT = Path(__file__).resolve().parents[1]
LAB_CONFIG = ROOT / "recipes" / "configs" / "lab" / "grpo_lab_default.yaml"
ROUNDS = 12  # paired rounds by default; the last lines say whether the 95% interval came out narrower than ±5%
GOAL = 1.05  # the recipe may take at most 5% longer than plain TRL
TIMED_EVENTS = ("on_train_begin", "on_step_end", "on_log")  # the events the recipe's callbacks do work in


def answer_share(completions: list, answer_style: str) -> float:
    """Share of completions that commit to a final answer (``rewards.answers.extract_answer``).

    >>> answer_share(["2 + 3 = 5\\n#### 5", "I think 5", [{"role": "assistant", "content": "#### 7"}]], "gsm8k")
    0.6666666666666666
    """
    if not completions:
        return float("nan")
    return sum(extract_answer(completion_text(c), answer_style).ok for c in completions) / len(completions)


def prepare(config: Path, tmp: Path) -> list[str]:
    """Overrides that make ``config`` runnable here: the lab's warm start and data, or the tiny model in ``tmp``."""
    from bench.grpo_arms import parse_recipe_args

    script_args, _, model_args = parse_recipe_args(config, [])
    if Path(config).resolve() == LAB_CONFIG.resolve():
        from cpu_lab import warmstart  # the lab imports matplotlib, absent on the GPU machine (bench.grpo_gpu runs us)

        paths = warmstart.prepare_lab(warmstart.WarmStartSettings())  # trains the warm start if it is not cached
        return warmstart.recipe_flags(paths)
    if script_args.build_tiny_model:  # the plain arm may run first, and it builds nothing
        return ["--model_name_or_path", str(save_tiny_model(tmp / "tiny_model"))]
    return []


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for ``p`` > 0.5: bisection on the CDF, integrated by Simpson's rule (no scipy here).

    >>> round(t_quantile(0.975, 1), 2), round(t_quantile(0.975, 9), 3), round(t_quantile(0.975, 30), 3)
    (12.71, 2.262, 2.042)
    """
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x: float, n: int = 4000) -> float:
        h = x / n
        f = [scale * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    low, high = 0.0, 1.0
    while cdf(high) < p:
        low, high = high, 2 * high
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def paired_ratio(plain: list[float], ours: list[float], level: float = 0.95) -> dict:
    """The ratio ours / plain over paired runs: the geometric mean of the per-pair ratios and its t interval at
    ``level`` (on the log-ratios, exponentiated).

    >>> r = paired_ratio([100.0, 120.0, 90.0, 110.0], [103.0, 122.0, 94.0, 113.0])
    >>> round(r["ratio"], 4), round(r["low"], 4), round(r["high"], 4), round(r["half_width_pct"], 2), r["pairs"]
    (1.0295, 1.0115, 1.0479, 1.78, 4)
    """
    logs = [math.log(o / p) for p, o in zip(plain, ours, strict=True)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return {
            "pairs": len(logs),
            "ratio": math.exp(mean),
            "low": math.nan,
            "high": math.nan,
            "half_width_pct": math.nan,
        }
    half = t_quantile(0.5 + level / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {
        "pairs": len(logs),
        "ratio": math.exp(mean),
        "low": math.exp(mean - half),
        "high": math.exp(mean + half),
        "half_width_pct": 100 * (math.exp(half) - 1),
        "log_ratio_sd": statistics.stdev(logs),
    }


def same_inputs(clocks: dict[str, list[Clock]]) -> dict:
    """Per round, whether the two arms were given the same prompts, and the share of identical completions."""

    def key(x) -> str:
        return json.dumps(x, sort_keys=True)

    rounds = list(zip(clocks["plain"], clocks["ours"], strict=True))
    return {
        "same_prompts_every_round": all(list(map(key, p.prompts)) == list(map(key, o.prompts)) for p, o in rounds),
        "same_completion_share": round(
            statistics.fmean(
                [key(a) == key(b) for p, o in rounds for a, b in zip(p.completions, o.completions, strict=False)]
                or [math.nan]
            ),
            4,
        ),
    }


def summarize(clocks: dict[str, list[Clock]], warmup: int) -> dict:
    steps = {kind: [s for c in cs for s in c.step_seconds[warmup:]] for kind, cs in clocks.items()}
    train = {kind: sum(c.train_seconds for c in cs) for kind, cs in clocks.items()}
    n_steps = {kind: sum(len(c.step_seconds) for c in cs) for kind, cs in clocks.items()}
    ours = clocks["ours"]
    callbacks = {e: round(sum(c.callback_seconds[e] for c in ours), 3) for e in TIMED_EVENTS}
    plain_median, ours_median = statistics.median(steps["plain"]), statistics.median(steps["ours"])
    paired = {
        "all_in": paired_ratio([c.train_seconds for c in clocks["plain"]], [c.train_seconds for c in ours]),
        "all_in_cpu": paired_ratio([c.train_cpu_seconds for c in clocks["plain"]], [c.train_cpu_seconds for c in ours]),
        "median_step": paired_ratio(
            [statistics.median(c.step_seconds[warmup:]) for c in clocks["plain"]],
            [statistics.median(c.step_seconds[warmup:]) for c in ours],
        ),
    }
    return {
        "paired_ratio_all_in": {k: round(v, 4) for k, v in paired["all_in"].items()},
        "paired_ratio_all_in_cpu": {k: round(v, 4) for k, v in paired["all_in_cpu"].items()},
        "paired_ratio_median_step": {k: round(v, 4) for k, v in paired["median_step"].items()},
        "round_ratios_all_in": [
            round(o.train_seconds / p.train_seconds, 4) for p, o in zip(clocks["plain"], ours, strict=True)
        ],
        "round_ratios_all_in_cpu": [
            round(o.train_cpu_seconds / p.train_cpu_seconds, 4) for p, o in zip(clocks["plain"], ours, strict=True)
        ],
        "plain_s_per_step_all_in": round(train["plain"] / n_steps["plain"], 4),
        "ours_s_per_step_all_in": round(train["ours"] / n_steps["ours"], 4),
        "ratio_all_in": round(train["ours"] / train["plain"], 4),
        "plain_median_s_per_step": round(plain_median, 4),
        "ours_median_s_per_step": round(ours_median, 4),
        "ratio_median_step": round(ours_median / plain_median, 4),
        "steps_timed_each": len(steps["plain"]),
        "ours_train_s": round(train["ours"], 2),
        "plain_train_s": round(train["plain"], 2),
        "ours_callback_s": callbacks,  # on_train_begin: probes; on_step_end: held-out evals; on_log: JSON log
        "ours_reward_wrapper_s": round(sum(c.monitor_seconds for c in ours), 3),
        "ours_share_in_monitors": round(
            (sum(callbacks.values()) + sum(c.monitor_seconds for c in ours)) / train["ours"], 4
        ),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.grpo_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(LAB_CONFIG), help="a recipes.grpo YAML (default: the lab's default)")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help="paired rounds: both arms, the order flipped every round"
    )
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per run (the lab evaluates every 20)")
    parser.add_argument("--warmup", type=int, default=2, help="steps of each run left out of the median")
    parser.add_argument("overrides", nargs="*", help="more recipe flags for both arms, after --")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)

    if args.rounds < 1:
        parser.error("--rounds must be at least 1 (2 or more for an interval)")
    from bench.grpo_arms import Clock, parse_recipe_args, run_plain, run_recipe  # torch, transformers, TRL

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    tmp = Path(tempfile.mkdtemp(prefix="grpo_overhead_"))
    base = prepare(Path(args.config), tmp) + ["--max_steps", str(args.steps), "--eval_limit", "0"]
    if parse_recipe_args(args.config, base)[0].curriculum:
        # plain TRL has no curriculum, and it changes which problems the recipe trains on: both arms go without it
        base += ["--curriculum", ""]
        print("the config's curriculum is off in both arms, so that both train on the same problems", flush=True)
    base += args.overrides
    script_args, training_args, _ = parse_recipe_args(args.config, base)
    clocks: dict[str, list[Clock]] = {"plain": [], "ours": []}
    output_dirs: dict[str, list[str]] = {"plain": [], "ours": []}
    for round_index in range(args.rounds):
        order = ("plain", "ours") if round_index % 2 == 0 else ("ours", "plain")
        for kind in order:
            clock = Clock()
            output_dirs[kind].append(str(tmp / f"{kind}_{round_index}"))
            overrides = [*base, "--output_dir", output_dirs[kind][-1]]
            (run_plain if kind == "plain" else run_recipe)(args.config, overrides, clock)
            clocks[kind].append(clock)
        plain, ours = clocks["plain"][-1], clocks["ours"][-1]
        print(
            f"round {round_index}: plain {plain.train_seconds:.1f} s (CPU {plain.train_cpu_seconds:.1f} s), ours "
            f"{ours.train_seconds:.1f} s (CPU {ours.train_cpu_seconds:.1f} s), {len(ours.step_seconds)} steps each; "
            f"ratio {ours.train_seconds / plain.train_seconds:.4f} (CPU "
            f"{ours.train_cpu_seconds / plain.train_cpu_seconds:.4f})",
            flush=True,
        )

    style = get_task(script_args.task).answer_style
    completions = {kind: [x for c in cs for x in c.completions] for kind, cs in clocks.items()}
    result = {
        "command": "OMP_NUM_THREADS=1 python -m bench.grpo_overhead " + " ".join(argv),
        "config": str(args.config),
        "settings": {k: v for k, v in vars(args).items() if k != "config"},
        "monitor_eval_steps": script_args.monitor_eval_steps,
        "monitor_eval_limit": script_args.monitor_eval_limit,
        "probe_problems": script_args.probe_problems,
        "logging_steps": training_args.logging_steps,
        **summarize(clocks, args.warmup),
        **same_inputs(clocks),
        "completions_seen": {kind: len(c) for kind, c in completions.items()},
        "answer_share": {kind: round(answer_share(c, style), 4) for kind, c in completions.items()},
        "load_average_1_5_15_min_at_start": load_at_start,
        "load_average_1_5_15_min_at_end": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "output_dirs": output_dirs,
    }
    print(json.dumps(result, indent=1))
    print(verdict_line(result["paired_ratio_all_in_cpu"], "CPU time"))
    print(verdict_line(result["paired_ratio_all_in"], "wall-clock time"))
    return result


def verdict_line(paired: dict, what: str, goal: float = GOAL) -> str:
    """The all-in ratio, its interval, and whether the interval is narrow enough to decide the goal and decides it.

    >>> verdict_line({"pairs": 12, "ratio": 1.02, "low": 1.0, "high": 1.04, "half_width_pct": 2.0}, "CPU time")
    'CPU time, ratio all in (ours / plain), geometric mean of 12 paired rounds: 1.020, 95% interval 1.000-1.040 (x/÷ 1.020, narrower than the ±5% goal); goal ratio <= 1.05: met'
    """  # noqa: E501
    if paired["pairs"] < 2:
        return f"{what}, ratio all in (ours / plain), 1 round: {paired['ratio']:.3f}; no interval: --rounds 2 or more"
    narrow = "narrower" if paired["half_width_pct"] < 100 * (goal - 1) else "NOT narrower"
    decided = "met" if paired["high"] <= goal else "NOT met" if paired["low"] > goal else "undecided"
    factor = 1 + paired["half_width_pct"] / 100
    return (
        f"{what}, ratio all in (ours / plain), geometric mean of {paired['pairs']} paired rounds: "
        f"{paired['ratio']:.3f}, 95% interval {paired['low']:.3f}-{paired['high']:.3f} (x/÷ {factor:.3f}, {narrow} "
        f"than the ±{100 * (goal - 1):.0f}% goal); goal ratio <= {goal}: {decided}"
    )


if __name__ == "__main__":
    main()
