"""The hack alarm's rule and the held-out checks it reads, as pure functions of a run's log lines (no trainer).

Every ``monitor_eval_steps`` the monitors (``recipes.monitors.MonitorCallback``) put the held-out ``eval/accuracy`` into
that step's log line, and every log line carries ``monitor/reward_correctness_gap`` (mean total reward minus
correctness of the sampled answers). A check is one held-out evaluation with the gap averaged over the log lines since
the previous check (the check's own line included), so each check's gap describes the training that led to it:

>>> lines = [{"step": 5, "monitor/reward_correctness_gap": 0.1}, {"step": 10, "monitor/reward_correctness_gap": 0.3,
...     "eval/accuracy": 0.5, "eval/n": 100}, {"step": 15, "monitor/reward_correctness_gap": None}]
>>> checks_from_log(lines)
[Check(step=10, accuracy=0.5, n=100, gap=0.2, gap_lines=2)]

``hack_signature`` is the alarm's rule on those checks; ``recipes.callbacks.HackAlarm`` applies it while a run trains
and ``recipes.callbacks.BestCheckpoint`` keeps the best check's weights. ``check_watch_args`` checks the recipe's
options for both before any model loads. What fired on a finished run can be recomputed from its ``log.jsonl``:
``hack_signature`` over ``checks_from_log(read_jsonl(path))``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

GAP_KEY = "monitor/reward_correctness_gap"
ACCURACY_KEY = "eval/accuracy"
ALARM_KEY = "monitor/hack_alarm"
DEFAULT_ALARM_CHECKS = 2  # hack_alarm_checks when unset and monitor evaluations run
MIN_GAP_RISE = 0.02  # the gap must sit this much above the best check's (reward units: correctness pays 1.0)
MIN_ACCURACY_DROP = 0.02  # and held-out accuracy this much below it (and more than 2 problems of those checked)
MIN_PROBLEMS_DROP = 2


# --------------------------------------------------------------------------------------------------- pure rule
@dataclass(frozen=True)
class Check:
    """One held-out check: its step, ``eval/accuracy`` on ``n`` problems, and the mean
    ``monitor/reward_correctness_gap`` of the ``gap_lines`` log lines since the previous check (NaN when none had a
    gap)."""

    step: int
    accuracy: float
    n: int
    gap: float
    gap_lines: int


class CheckLog:
    """Turns log lines, fed in order, into ``Check``s: ``add(line)`` returns the check the line closes, else None."""

    def __init__(self):
        self.checks: list[Check] = []
        self._gaps: list[float] = []

    def add(self, line: dict) -> Check | None:
        gap = finite(line.get(GAP_KEY))
        if gap is not None:
            self._gaps.append(gap)
        accuracy = finite(line.get(ACCURACY_KEY))
        if accuracy is None:
            return None
        mean = sum(self._gaps) / len(self._gaps) if self._gaps else math.nan
        n = finite(line.get("eval/n"))
        check = Check(int(line.get("step", 0)), accuracy, int(n) if n is not None else 0, mean, len(self._gaps))
        self.checks.append(check)
        self._gaps = []
        return check


def checks_from_log(lines: Iterable[dict]) -> list[Check]:
    """The held-out checks of a run's log lines (``log.jsonl`` records, in order)."""
    log = CheckLog()
    for line in lines:
        log.add(line)
    return log.checks


def hack_signature(
    gaps: Sequence[float],
    accuracies: Sequence[float],
    checks: int,
    n: int = 0,
    min_gap_rise: float = MIN_GAP_RISE,
    min_accuracy_drop: float = MIN_ACCURACY_DROP,
) -> dict | None:
    """Whether the latest ``checks`` held-out checks show the reward-hacking signature; None when they do not.

    The rule. The reference is the best check before the latest ``checks`` (the highest held-out accuracy; of equals,
    the latest). The signature is there when, at EACH of the latest ``checks`` checks, both hold:

    1. the reward-correctness gap is above the reference's by more than ``min_gap_rise``;
    2. held-out accuracy is below the reference's by more than ``min_accuracy_drop`` and by more than
       ``MIN_PROBLEMS_DROP`` problems of ``n``.

    Measuring from the best check, not from the check before, catches a slow drift whose gap zigzags on the way up
    (0.778, 0.810, 0.802, 0.829 while accuracy goes 0.34, 0.31, 0.31, 0.30); asking it at every check of the window
    keeps one noisy check from firing it. A gap that rises while accuracy rises too (a format bonus being learned
    beside correct answers) never fires: no check falls below the best. On a flat run the best accuracy is a lucky
    check and later ones fall below it by noise alone, so the gap is what guards a run that is not hacking: it must
    stay more than ``min_gap_rise`` above the reference's at every check of the window, which a gap that jitters by
    less than ``min_gap_rise / 2`` cannot do.

    Args:
        gaps: each check's mean reward-correctness gap, oldest first (NaN: that window had none; no signature).
        accuracies: each check's held-out accuracy, parallel to ``gaps``.
        checks: N, the number of consecutive checks the signature must hold at (at least 1).
        n: problems in each held-out check (0: unknown, only ``min_accuracy_drop`` applies).
        min_gap_rise: the least rise of the gap above the reference's (in reward units).
        min_accuracy_drop: the least fall of held-out accuracy below the reference's (a fraction).

    Returns:
        None, or what fired: ``{"reference": i, "gap": [...], "accuracy": [...], "gap_rise": ..., "accuracy_drop":
        ...}``: the reference's index in ``gaps``, then the reference's and the window's values, oldest first, and the
        latest check's rise and drop from the reference.

    >>> hack_signature([0.1, 0.15, 0.2], [0.5, 0.45, 0.4], checks=2)["accuracy_drop"]
    0.1
    >>> hack_signature([0.1, 0.15, 0.2], [0.5, 0.52, 0.4], checks=2) is None  # accuracy recovered on the way
    True
    >>> hack_signature([0.1, 0.15, 0.2], [0.4, 0.45, 0.5], checks=2) is None  # gap up, accuracy up: learning
    True
    >>> hack_signature([0.3, 0.1, 0.15, 0.2], [0.5, 0.55, 0.45, 0.4], checks=2)["reference"]  # the best check before
    1
    """
    if checks < 1:
        raise ValueError(f"hack_signature needs checks >= 1, got {checks}")
    if len(gaps) != len(accuracies):
        raise ValueError(f"{len(gaps)} gaps but {len(accuracies)} accuracies")
    if len(gaps) < checks + 1:
        return None

    def usable(i: int) -> bool:
        return not (math.isnan(gaps[i]) or math.isnan(accuracies[i]))

    window = range(len(gaps) - checks, len(gaps))
    if not all(usable(i) for i in window):
        return None
    before = [i for i in range(window.start) if usable(i)]
    if not before:
        return None
    reference = max(before, key=lambda i: (accuracies[i], i))
    least_drop = max(min_accuracy_drop, MIN_PROBLEMS_DROP / n if n > 0 else 0.0)
    # rounded, so that 0.50 - 0.48 is the 0.02 it reads as, not 0.020000000000000018
    held = all(
        round(gaps[i] - gaps[reference], 9) > min_gap_rise
        and round(accuracies[reference] - accuracies[i], 9) > least_drop
        for i in window
    )
    if not held:
        return None
    return {
        "reference": reference,
        "gap": [gaps[reference], *(gaps[i] for i in window)],
        "accuracy": [accuracies[reference], *(accuracies[i] for i in window)],
        "gap_rise": round(gaps[-1] - gaps[reference], 6),
        "accuracy_drop": round(accuracies[reference] - accuracies[-1], 6),
    }


def finite(value) -> float | None:
    """A finite number from a log value, else None (``log.jsonl`` writes NaN as null)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


# --------------------------------------------------------------------------------------------------- recipe options
def check_watch_args(
    keep_best: bool,
    alarm_checks: int | None,
    stop_on_hack: bool,
    monitor_eval_steps: int,
    max_steps: int,
    zero3: bool = False,
) -> int:
    """The checks of ``keep_best_checkpoint``, ``hack_alarm_checks`` and ``stop_on_hack`` (one-line ``ValueError``s);
    returns the alarm's N: ``alarm_checks``, or when unset ``DEFAULT_ALARM_CHECKS`` if monitor evaluations run, else 0.

    >>> check_watch_args(False, None, False, monitor_eval_steps=20, max_steps=120)
    2
    >>> check_watch_args(False, None, False, monitor_eval_steps=0, max_steps=120)
    0
    >>> check_watch_args(True, None, False, monitor_eval_steps=0, max_steps=120)
    Traceback (most recent call last):
    ...
    ValueError: keep_best_checkpoint needs monitor_eval_steps > 0 (the best checkpoint is chosen at the monitors' held-out checks): set monitor_eval_steps, e.g. 20, or keep_best_checkpoint: false
    """  # noqa: E501
    checks_in_run = monitor_eval_steps and (max_steps // monitor_eval_steps if max_steps > 0 else math.inf)
    if keep_best:
        if monitor_eval_steps <= 0:
            raise ValueError(
                "keep_best_checkpoint needs monitor_eval_steps > 0 (the best checkpoint is chosen at the monitors' "
                "held-out checks): set monitor_eval_steps, e.g. 20, or keep_best_checkpoint: false"
            )
        if not checks_in_run:
            raise ValueError(
                f"keep_best_checkpoint: monitor_eval_steps {monitor_eval_steps} is beyond max_steps {max_steps}, so no "
                f"held-out check runs: set monitor_eval_steps to at most {max_steps}"
            )
        if zero3:
            raise ValueError(
                "keep_best_checkpoint cannot save under DeepSpeed ZeRO-3 (the weights are sharded across processes): "
                "use recipes/accelerate/zero2.yaml or ddp.yaml, or keep_best_checkpoint: false"
            )
    if alarm_checks is None:
        checks = DEFAULT_ALARM_CHECKS if monitor_eval_steps > 0 else 0
    elif alarm_checks < 0:
        raise ValueError(f"hack_alarm_checks must be >= 0 (0: off), got {alarm_checks}")
    elif alarm_checks > 0 and monitor_eval_steps <= 0:
        raise ValueError(
            f"hack_alarm_checks {alarm_checks} needs monitor_eval_steps > 0 (the alarm reads the held-out checks): "
            "set monitor_eval_steps, e.g. 20, or hack_alarm_checks: 0"
        )
    elif alarm_checks > 0 and checks_in_run < alarm_checks + 1:
        raise ValueError(
            f"hack_alarm_checks {alarm_checks} compares {alarm_checks + 1} held-out checks but max_steps {max_steps} "
            f"with monitor_eval_steps {monitor_eval_steps} runs {checks_in_run}: lower hack_alarm_checks or "
            "monitor_eval_steps"
        )
    else:
        checks = alarm_checks
    if stop_on_hack and checks == 0:
        raise ValueError(
            "stop_on_hack needs the hack alarm: set monitor_eval_steps > 0 and hack_alarm_checks >= 1 (unset: "
            f"{DEFAULT_ALARM_CHECKS}), or stop_on_hack: false"
        )
    return checks
