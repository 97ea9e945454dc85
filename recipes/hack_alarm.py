"""The hack alarm's rule and the held-out checks it reads, as pure functions of a run's log lines (no trainer).

A check is one held-out evaluation (``eval/accuracy``, ``eval/n``) with TRL's ``reward`` of the log lines since the
previous check, its own line included:

>>> lines = [{"step": 5, "reward": 0.1}, {"step": 10, "reward": 0.3, "eval/accuracy": 0.5, "eval/n": 100},
...     {"step": 15, "reward": None}]
>>> checks_from_log(lines)
[Check(step=10, accuracy=0.5, n=100, rewards=(0.1, 0.3))]

``hack_signature`` is the rule: held-out accuracy fell by more than the checks' noise allows at a false-alarm rate of
``ALPHA`` per run, while the training reward rose. ``python -m bench.hack_alarm`` measures its rate and power on
simulated checks; ``--replay`` recomputes a finished run's checks from its ``log.jsonl``.
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
    """One held-out check: its step, ``eval/accuracy`` on ``n`` problems, and the training rewards logged since the
    previous check, oldest first."""

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

    The two-proportion test of two independent checks with half a problem of continuity correction; each side counts
    as ``n`` problems however many checks it averages. 1.0 when nothing can fall.

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
    that they rise (tau 0 and p 1.0 for fewer than 3).

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
    """How many comparisons a run makes: 1 + 2 + ... + (K - window) for K checks (at least 1), each check's latest
    ``window`` checks against every check before them.

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
    """What fired when the latest check completes the reward-hacking signature; None when it does not.

    The mean accuracy of the latest ``window`` checks must fall below the best earlier check's with ``fall_p_value``
    < alpha / ``comparisons`` (Bonferroni over the run), and the rewards of every log line so far must rise
    (``reward_trend`` p < ``reward_alpha``). Checks of the same problems are positively correlated, so treating them
    as independent keeps a run's false-alarm rate at most alpha; the reward side can only remove alarms. The full
    argument is in docs/grpo.md.

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
    """The alarm replayed over a run's checks as it ran: what fired at the first check where it fires, or None."""
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
    """Check ``keep_best_checkpoint``, ``hack_alarm_checks`` and ``stop_on_hack``; returns the alarm's N (unset: the
    default if the run makes at least 2 checks, else 0).

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
