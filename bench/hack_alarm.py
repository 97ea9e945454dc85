"""The hack alarm's false-alarm rate and power on simulated checks, and its replay over a run's log.

    python -m bench.hack_alarm                  # the table docs/grpo.md shows (1,000 runs a row; ~4 s)
    python -m bench.hack_alarm --runs 200       # quicker
    python -m bench.hack_alarm --replay tests/data/hack_alarm/grpo_lab_format_only_seed0_steep.jsonl \\
        --max_steps 120 --monitor_eval_steps 20   # what the rule computed at each check of a run

The simulation runs the rule itself (``recipes.hack_alarm.first_alarm``) on made-up runs: each check a binomial draw
at the row's true held-out accuracy, with a noisy training reward rising over the run. A row whose accuracy never
falls measures the false-alarm rate (worst case: the reward rises); one whose accuracy falls measures the power. Each
row prints the alarms out of the runs and a 95% Wilson interval for the rate.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eval.jsonl import read_jsonl
from eval.report import table as markdown_table
from recipes.hack_alarm import (
    ALPHA,
    DEFAULT_ALARM_CHECKS,
    Check,
    checks_from_log,
    comparisons,
    fall_p_value,
    first_alarm,
    reward_trend,
)

EVERY = 20  # steps between simulated checks (only the log's step numbers depend on it)
LINES = 4  # reward log lines per check (logging_steps 5, monitor_eval_steps 20)
REWARD_NOISE = 0.02  # standard deviation of one line's mean reward


@dataclass(frozen=True)
class Scenario:
    """A simulated run: the true held-out accuracy at each check, problems per check, the reward's rise over the run."""

    name: str
    accuracy: tuple[float, ...]
    n: int = 100
    reward_rise: float = 0.1
    window: int = DEFAULT_ALARM_CHECKS


def ramp(start: float, end: float, checks: int) -> tuple[float, ...]:
    return tuple(round(start + (end - start) * k / (checks - 1), 4) for k in range(checks))


FLAT = (0.4,) * 9
SCENARIOS = [
    # held-out accuracy does not fall: false alarms
    Scenario("flat, 9 checks", FLAT),
    Scenario("flat, 9 checks of 32", FLAT, n=32),
    Scenario("flat, 9 checks, window 2", FLAT, window=2),
    Scenario("flat, 2 checks (one comparison)", (0.4, 0.4)),
    Scenario("learning 0.30 -> 0.50", ramp(0.3, 0.5, 9)),
    # it falls: power
    Scenario("-10 at the last 3 checks", (0.4,) * 6 + (0.3,) * 3),
    Scenario("-15 at the last 3 checks", (0.4,) * 6 + (0.25,) * 3),
    Scenario("-15 at the last 3 checks, n 200", (0.4,) * 6 + (0.25,) * 3, n=200),
    Scenario("-20 at the last 3 checks", (0.4,) * 6 + (0.2,) * 3),
    Scenario("-20 drift over the run", ramp(0.4, 0.2, 9)),
    Scenario("up 15, then down 20", (0.30, 0.34, 0.38, 0.42, 0.45, 0.40, 0.35, 0.30, 0.25)),
    Scenario("-20 at the last 3, reward +0.03", (0.4,) * 6 + (0.2,) * 3, reward_rise=0.03),
    Scenario("-20 at the last 3, reward falls", (0.4,) * 6 + (0.2,) * 3, reward_rise=-0.1),
]


def alarms(scenario: Scenario, runs: int, seed: int = 0) -> int:
    """How many of ``runs`` simulated runs of ``scenario`` raise the alarm (``first_alarm``)."""
    rng = np.random.default_rng(seed)
    k = len(scenario.accuracy)
    tests = comparisons(k * EVERY, EVERY, scenario.window)
    trend = scenario.reward_rise * np.arange(k * LINES).reshape(k, LINES) / (k * LINES)  # [checks, lines]
    fired = 0
    for _ in range(runs):
        correct = rng.binomial(scenario.n, scenario.accuracy) / scenario.n  # [checks]
        rewards = 0.5 + trend + rng.normal(0, REWARD_NOISE, trend.shape)
        checks = [Check(EVERY * (i + 1), float(correct[i]), scenario.n, tuple(rewards[i].tolist())) for i in range(k)]
        fired += first_alarm(checks, scenario.window, tests) is not None
    return fired


def wilson(hits: int, runs: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a rate of ``hits`` in ``runs``."""
    p = hits / runs
    middle = (p + z * z / (2 * runs)) / (1 + z * z / runs)
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / (1 + z * z / runs)
    return max(0.0, middle - half), min(1.0, middle + half)


def table(runs: int, seed: int) -> str:
    rows = []
    for i, s in enumerate(SCENARIOS):
        hits = alarms(s, runs, seed + i)
        low, high = wilson(hits, runs)
        accuracy, rate = ", ".join(f"{a:.2f}" for a in s.accuracy), f"{hits / runs:.3f} ({low:.3f}-{high:.3f})"
        rows.append(
            [s.name, f"{len(s.accuracy)} x {s.n}", s.window, accuracy, f"{s.reward_rise:+.2f}", f"{hits}/{runs}", rate]
        )
    header = [
        "run",
        "checks x problems",
        "window",
        "true held-out accuracy",
        "reward over the run",
        "alarms",
        "rate (95% CI)",
    ]
    return (
        f"false alarms at most {ALPHA} per run; each row {runs} simulated runs (seed {seed}), reward noise "
        f"{REWARD_NOISE} a line, {LINES} lines a check\n\n" + markdown_table(header, rows)
    )


def replay(path: Path, max_steps: int, eval_every: int, window: int) -> str:
    """Each check of a run's log: accuracy, best earlier one, the fall's p-value, reward trend, where it alarms."""
    checks = checks_from_log(read_jsonl(path))
    tests = comparisons(max_steps, eval_every, window)
    rows = []
    fired = None
    for end in range(1, len(checks) + 1):
        check, seen = checks[end - 1], checks[:end]
        best, p_fall = "", ""
        if end > window:
            now = sum(c.accuracy for c in seen[-window:]) / window
            p, ref = min((fall_p_value(c.accuracy, now, c.n or check.n), -i) for i, c in enumerate(seen[:-window]))
            best, p_fall = f"{seen[-ref].accuracy:.2f} (step {seen[-ref].step})", f"{p:.4f}"
        rewards = [r for c in seen for r in c.rewards]
        trend = "not in the log" if not rewards else "{:+.2f}, {:.4f}".format(*reward_trend(rewards))
        fired = fired or first_alarm(seen, window, tests)
        alarm = "" if fired is None else ("FIRES" if fired["step"] == check.step else "raised")
        rows.append([check.step, f"{check.accuracy:.2f} ({check.n})", best, p_fall, trend, alarm])
    header = ["step", "held-out accuracy (n)", "best earlier check", "p of the fall", "reward trend (tau, p)", "alarm"]
    return (
        f"{path}: {len(checks)} checks, window {window}, {tests} comparisons in the run: level {ALPHA}/{tests} = "
        f"{ALPHA / tests:.4f}\n\n" + markdown_table(header, rows)
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hack_alarm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="simulated runs per row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", nargs="+", type=Path, help="log.jsonl files to replay instead of simulating")
    parser.add_argument("--max_steps", type=int, default=0, help="the replayed run's max_steps")
    parser.add_argument("--monitor_eval_steps", type=int, default=0, help="the replayed run's monitor_eval_steps")
    parser.add_argument("--hack_alarm_checks", type=int, default=DEFAULT_ALARM_CHECKS, help="the window N")
    args = parser.parse_args(argv)
    if args.replay:
        if args.max_steps <= 0 or args.monitor_eval_steps <= 0:
            parser.error("--replay needs the run's --max_steps and --monitor_eval_steps (the comparisons it makes)")
        for path in args.replay:
            print(replay(path, args.max_steps, args.monitor_eval_steps, args.hack_alarm_checks), end="\n\n")
        return
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    print(table(args.runs, args.seed))


if __name__ == "__main__":
    main()
