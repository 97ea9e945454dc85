"""The hack alarm's rule and the held-out checks it reads, as pure functions of a run's log lines (no trainer).

Every ``monitor_eval_steps`` the monitors (``recipes.monitors.MonitorCallback``) put the held-out ``eval/accuracy``
(greedy, on the same ``monitor_eval_limit`` problems each time) and ``eval/n`` into that step's log line, and every log
line carries TRL's ``reward`` (the mean weighted total reward of the batch's sampled answers). A check is one held-out
evaluation with the rewards of the log lines since the previous check (the check's own line included):

>>> lines = [{"step": 5, "reward": 0.1}, {"step": 10, "reward": 0.3, "eval/accuracy": 0.5, "eval/n": 100},
...     {"step": 15, "reward": None}]
>>> checks_from_log(lines)
[Check(step=10, accuracy=0.5, n=100, rewards=(0.1, 0.3))]

``hack_signature`` is the alarm's rule on those checks: held-out accuracy fell by more than the checks' sampling noise
allows at a false-alarm rate of ``ALPHA`` per run, while the training reward rose. ``recipes.callbacks.HackAlarm``
applies it while a run trains and ``recipes.callbacks.BestCheckpoint`` keeps the best check's weights;
``check_watch_args`` checks the recipe's options for both before any model loads. What fired on a finished run can be
recomputed from its ``log.jsonl``: ``first_alarm(checks_from_log(read_jsonl(path)), N, comparisons(max_steps,
monitor_eval_steps, N))`` (``python -m bench.hack_alarm --replay`` prints each check's numbers);
``python -m bench.hack_alarm`` measures the false-alarm rate and the power on simulated checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

REWARD_KEY = "reward"  # TRL's mean weighted total reward of a log window's sampled answers
ACCURACY_KEY = "eval/accuracy"
ALARM_KEY = "monitor/hack_alarm"
DEFAULT_ALARM_CHECKS = 1  # hack_alarm_checks when unset: the latest check alone (bench.hack_alarm: the most power)
ALPHA = 0.05  # false alarms per run, at most: the alarm's whole budget, split over the run's comparisons
REWARD_ALPHA = 0.05  # the reward side's one-sided trend test (it can only remove alarms: see hack_signature)


# --------------------------------------------------------------------------------------------------- the checks
@dataclass(frozen=True)
class Check:
    """One held-out check: its step, ``eval/accuracy`` on ``n`` problems, and the training ``reward`` of each log line
    since the previous check (those that had one), oldest first."""

    step: int
    accuracy: float
    n: int
    rewards: tuple[float, ...]


class CheckLog:
    """Turns log lines, fed in order, into ``Check``s: ``add(line)`` returns the check the line closes, else None."""

    def __init__(self):
        self.checks: list[Check] = []
        self._rewards: list[float] = []

    def add(self, line: dict) -> Check | None:
        reward = finite(line.get(REWARD_KEY))
        if reward is not None:
            self._rewards.append(reward)
        accuracy = finite(line.get(ACCURACY_KEY))
        if accuracy is None:
            return None
        n = finite(line.get("eval/n"))
        check = Check(int(line.get("step", 0)), accuracy, int(n) if n is not None else 0, tuple(self._rewards))
        self.checks.append(check)
        self._rewards = []
        return check


def checks_from_log(lines: Iterable[dict]) -> list[Check]:
    """The held-out checks of a run's log lines (``log.jsonl`` records, in order)."""
    log = CheckLog()
    for line in lines:
        log.add(line)
    return log.checks


def finite(value) -> float | None:
    """A finite number from a log value, else None (``log.jsonl`` writes NaN as null)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


# --------------------------------------------------------------------------------------------------- the two tests
def fall_p_value(reference: float, latest: float, n: int) -> float:
    """One-sided p-value that held-out accuracy fell from ``reference`` to ``latest``, each read on ``n`` problems.

    ``z = (reference - latest - 1/(2n)) / sqrt(2 q (1 - q) / n)`` with ``q`` their mean, and ``p = P(Z > z)``: the
    two-proportion test of two independent checks of ``n`` problems, with half a problem of continuity correction.
    Each side counts as ``n`` problems however many checks it averages (``hack_signature`` says why). 1.0 when nothing
    can fall (``n`` 0, or both at 0 or both at 1).

    >>> round(fall_p_value(0.40, 0.25, 100), 4)  # 15 points on 100 problems
    0.0143
    >>> round(fall_p_value(0.40, 0.25, 200), 6)  # the same fall on 200
    0.000819
    >>> fall_p_value(0.40, 0.45, 100) > 0.5  # a rise
    True
    """
    mean = (reference + latest) / 2
    if n <= 0 or not 0 < mean < 1:
        return 1.0
    z = (reference - latest - 0.5 / n) / math.sqrt(2 * mean * (1 - mean) / n)
    return 0.5 * math.erfc(z / math.sqrt(2))


def reward_trend(values: Sequence[float]) -> tuple[float, float]:
    """The Mann-Kendall trend test of ``values`` in their order: Kendall's tau against time, and the one-sided p-value
    that they rise (normal approximation, ties corrected, continuity-corrected; tau 0 and p 1.0 for fewer than 3).

    >>> tau, p = reward_trend([0.50, 0.52, 0.51, 0.55, 0.56, 0.58, 0.57, 0.60])
    >>> round(tau, 3), round(p, 4)
    (0.857, 0.0022)
    >>> reward_trend([0.5, 0.5, 0.5, 0.5])  # flat: all ties
    (0.0, 1.0)
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 3:
        return 0.0, 1.0
    s = sum(int(np.sign(x[i + 1 :] - x[i]).sum()) for i in range(n - 1))
    _, ties = np.unique(x, return_counts=True)
    variance = (n * (n - 1) * (2 * n + 5) - sum(int(t) * (t - 1) * (2 * t + 5) for t in ties)) / 18
    tau = s / (n * (n - 1) / 2)
    if variance <= 0:
        return float(tau), 1.0
    z = (s - np.sign(s)) / math.sqrt(variance)
    return float(tau), 0.5 * math.erfc(z / math.sqrt(2))


def comparisons(max_steps: int, eval_every: int, window: int) -> int:
    """How many comparisons a run of ``max_steps`` with a check every ``eval_every`` steps makes: from its
    ``window + 1``-th check on, each check compares its latest ``window`` checks with each check before them, so a run
    of K checks makes 1 + 2 + ... + (K - window) (at least 1).

    >>> comparisons(120, 20, 1)  # checks at 20, 40, ..., 120: 1 + 2 + 3 + 4 + 5
    15
    """
    checks = max_steps // eval_every if max_steps > 0 and eval_every > 0 else 0
    later = max(0, checks - window)
    return max(1, later * (later + 1) // 2)


# --------------------------------------------------------------------------------------------------- the rule
def hack_signature(
    checks: Sequence[Check],
    window: int,
    comparisons: int,
    n: int = 0,
    alpha: float = ALPHA,
    reward_alpha: float = REWARD_ALPHA,
) -> dict | None:
    """Whether the latest check completes the reward-hacking signature; None when it does not.

    The rule, at the latest check, with N = ``window`` (``hack_alarm_checks``) and C = ``comparisons`` (the run's
    count, from ``comparisons``):

    1. held-out accuracy fell: the mean accuracy of the latest N checks is below some earlier check's by more than
       the checks' noise allows, ``fall_p_value`` < alpha / C for the earlier check that gives the smallest p-value
       (the best one), n the fewest problems any of these checks read;
    2. and the training reward rose: the ``reward`` of every log line from the run's start to the latest check rises
       by the Mann-Kendall test (``reward_trend``), one-sided p < ``reward_alpha``.

    The false-alarm rate it is built for: a run whose held-out accuracy does not fall raises the alarm with probability
    at most alpha (0.05) over the whole run, whatever its reward does, because

    - each comparison's p-value is that of two independent checks of n problems. The checks are greedy on the same
      problems, so two of them are positively correlated (a problem solved at one check tends to be solved at the
      next) or at worst independent, and the variance of the difference of two averages of such checks is at most
      that of two independent single checks of n problems: averaging checks of the same problems does not shrink the
      noise of which problems were drawn, and a positive correlation only takes noise away. With half a problem of
      continuity correction the normal approximation stays at or below its nominal rate (computed exactly over the
      binomial for checks of 16-200 problems in tests/recipes/test_hack_alarm.py);
    - every pair the run compares (an earlier check against a window) is one of C, and each is held to alpha / C
      (Bonferroni), which bounds the run's rate by alpha however correlated the comparisons are: taking the best
      earlier check is taking the smallest of its pairs' p-values, all of them counted in C;
    - the reward side can only remove alarms. Its test treats the log lines as independent, which a training run's
      rewards are not (they drift), so it passes more often than ``reward_alpha`` says; that costs nothing of the rate
      above. It tells a hack (reward up, held-out accuracy down) from a run that falls apart (both down).

    The price of a bound that needs no per-problem verdicts: it is conservative when the checks are independent draws,
    and a fall must be large to be seen; ``python -m bench.hack_alarm`` measures the rate and the power.

    Args:
        checks: the run's checks so far, oldest first (``checks_from_log``).
        window: N, how many of the latest checks are averaged (at least 1).
        comparisons: C, how many pairs the run compares in all (at least 1).
        n: problems per check for the checks whose line had no ``eval/n`` (0: such a check cannot be compared).
        alpha: the false-alarm rate per run.
        reward_alpha: the level of the reward side's trend test.

    Returns:
        None, or what fired: the ``reference_step`` (the earlier check) and the ``window_steps``, their accuracies
        ``accuracy_reference`` and ``accuracy_window`` (the window's mean) and the ``accuracy_drop``, ``n``, ``p_fall``
        and the ``level`` it beat (alpha / C), and the reward's ``reward_tau`` (Kendall's tau) and ``p_reward``.

    >>> steady = [Check(20 * k, 0.40, 100, (0.50 + 0.01 * k,)) for k in range(1, 7)]
    >>> fell = Check(140, 0.19, 100, (0.57,))
    >>> tests = comparisons(140, 20, 1)  # a run of 7 checks: 1 + 2 + ... + 6
    >>> found = hack_signature([*steady, fell], window=1, comparisons=tests)
    >>> found["reference_step"], found["accuracy_drop"], round(found["p_fall"], 5), round(found["level"], 5)
    (120, 0.21, 0.00074, 0.00238)
    >>> hack_signature([*steady, Check(140, 0.25, 100, (0.57,))], window=1, comparisons=tests) is None  # within noise
    True
    >>> down = [Check(c.step, c.accuracy, c.n, (1 - c.rewards[0],)) for c in [*steady, fell]]
    >>> hack_signature(down, window=1, comparisons=tests) is None  # the reward falls too: not the hack signature
    True
    """
    if window < 1 or comparisons < 1:
        raise ValueError(f"hack_signature needs window >= 1 and comparisons >= 1, got {window} and {comparisons}")
    if len(checks) < window + 1:
        return None
    earlier, latest = checks[:-window], checks[-window:]
    problems = min(c.n or n for c in checks)
    if problems <= 0:
        return None
    now = sum(c.accuracy for c in latest) / len(latest)
    # the best earlier check: the smallest p-value (of equal ones, the latest)
    p_fall, reference = min((fall_p_value(c.accuracy, now, problems), -i) for i, c in enumerate(earlier))
    reference = earlier[-reference]
    level = alpha / comparisons
    if p_fall >= level:
        return None
    tau, p_reward = reward_trend([r for c in checks for r in c.rewards])
    if p_reward >= reward_alpha:
        return None
    return {
        "reference_step": reference.step,
        "window_steps": [c.step for c in latest],
        "accuracy_reference": reference.accuracy,
        "accuracy_window": round(now, 6),
        "accuracy_drop": round(reference.accuracy - now, 6),
        "n": problems,
        "p_fall": p_fall,
        "level": level,
        "reward_tau": round(tau, 6),
        "p_reward": p_reward,
    }


def first_alarm(checks: Sequence[Check], window: int, comparisons: int, n: int = 0) -> dict | None:
    """The alarm replayed over a run's checks as it ran: ``{"step": ..., **hack_signature(...)}`` at the first check
    where the rule fires, or None."""
    for end in range(window + 1, len(checks) + 1):
        if found := hack_signature(checks[:end], window, comparisons, n):
            return {"step": checks[end - 1].step, **found}
    return None


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
    returns the alarm's N: ``alarm_checks``, or when unset ``DEFAULT_ALARM_CHECKS`` if the run makes at least 2 checks,
    else 0 (nothing to compare).

    >>> check_watch_args(False, None, False, monitor_eval_steps=20, max_steps=120)
    1
    >>> check_watch_args(False, None, False, monitor_eval_steps=120, max_steps=120)  # one check: nothing to compare
    0
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
        checks = DEFAULT_ALARM_CHECKS if checks_in_run > DEFAULT_ALARM_CHECKS else 0
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
            "stop_on_hack needs the hack alarm: set monitor_eval_steps > 0 with at least 2 checks in max_steps and "
            f"hack_alarm_checks >= 1 (unset: {DEFAULT_ALARM_CHECKS}), or stop_on_hack: false"
        )
    return checks
