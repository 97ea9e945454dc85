"""The arithmetic of GRPO's groups: what one batch of scored completions says about wasted groups, length bias,
reward hacking and collapse. Pure functions, fed each generation batch by the GRPO recipe's monitors.

>>> groups = [[Sample(True, 1.1, 10), Sample(True, 1.1, 12)], [Sample(False, 0.1, 30), Sample(True, 1.0, 9)]]
>>> m = group_metrics(groups, group_size=2)
>>> m["monitor/degenerate_share"], m["monitor/degenerate_all_correct_share"], m["monitor/correct_rate"]
(0.5, 0.5, 0.75)
>>> m["monitor/length_wrong"], round(m["monitor/reward_correctness_gap"], 4)
(30.0, 0.075)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rewards.totals import mean_total


@dataclass(frozen=True)
class Sample:
    """One scored completion: correctness of its final answer, weighted total reward, length in tokens."""

    correct: bool
    reward: float
    n_tokens: int
    truncated: bool = False
    text: str = ""


def mean_or_nan(values: Sequence[float]) -> float:
    """The mean, NaN for no values (TRL's logger skips NaN when averaging a window).

    >>> mean_or_nan([1.0, 2.0]), math.isnan(mean_or_nan([]))
    (1.5, True)
    """
    return sum(values) / len(values) if values else math.nan


def group_metrics(groups: Sequence[Sequence[Sample]], group_size: int | None = None) -> dict[str, float]:
    """The observed ``monitor/...`` metrics of one batch of groups (each group: the G completions for one prompt).

    A group is degenerate when all its answers are correct or all wrong: its advantage is zero whatever the format
    rewards say (TRL's ``frac_reward_zero_std`` misses it). NaN for an empty class (TRL's logger skips NaN). With
    ``group_size``, per-group metrics use only whole groups (a shorter one is partly held by another process).

    >>> m = group_metrics([[Sample(False, 0.0, 8, True, "a"), Sample(False, 0.0, 8, True, "a")]])
    >>> m["monitor/degenerate_all_wrong_share"], m["monitor/duplicate_share"], m["monitor/truncated_rate"]
    (1.0, 1.0, 1.0)
    >>> math.isnan(m["monitor/length_correct"])
    True
    """
    groups = [list(g) for g in groups if len(g) > 0]
    if not groups:
        raise ValueError("group_metrics needs at least one non-empty group")
    samples = [s for g in groups for s in g]
    whole = groups if group_size is None else [g for g in groups if len(g) == group_size]
    pass_rates = [sum(s.correct for s in g) / len(g) for g in whole]
    all_correct = mean_or_nan([float(p == 1.0) for p in pass_rates])
    all_wrong = mean_or_nan([float(p == 0.0) for p in pass_rates])
    # duplicates: 0 when every answer in the group differs, 1 when the group is one answer repeated
    duplicate = [(len(g) - len({s.text for s in g})) / (len(g) - 1) if len(g) > 1 else 0.0 for g in whole]
    scorable = [s for s in samples if not math.isnan(s.reward)]
    correct_rate = mean_or_nan([float(s.correct) for s in samples])
    return {
        "monitor/correct_rate": correct_rate,
        "monitor/reward_mean": mean_total([s.reward for s in samples]),
        "monitor/reward_correctness_gap": mean_or_nan([s.reward - s.correct for s in scorable]),
        "monitor/unscorable_rate": 1.0 - len(scorable) / len(samples),
        "monitor/degenerate_share": all_correct + all_wrong,
        "monitor/degenerate_all_correct_share": all_correct,
        "monitor/degenerate_all_wrong_share": all_wrong,
        "monitor/length_correct": mean_or_nan([s.n_tokens for s in samples if s.correct]),
        "monitor/length_wrong": mean_or_nan([s.n_tokens for s in samples if not s.correct]),
        "monitor/length_truncated": mean_or_nan([s.n_tokens for s in samples if s.truncated]),
        "monitor/truncated_rate": mean_or_nan([float(s.truncated) for s in samples]),
        "monitor/duplicate_share": mean_or_nan(duplicate),
        "monitor/collapsed_group_share": mean_or_nan([float(d == 1.0) for d in duplicate]),
    }


def split_groups(keys: Sequence, items: Sequence, group_size: int | None = None) -> list[list]:
    """Split ``items`` into runs of consecutive equal ``keys``, each cut into pieces of ``group_size``.

    >>> split_groups(["a", "a", "b", "b", "a"], [1, 2, 3, 4, 5])
    [[1, 2], [3, 4], [5]]
    >>> split_groups(["a"] * 4 + ["b"] * 2, [1, 2, 3, 4, 5, 6], group_size=2)
    [[1, 2], [3, 4], [5, 6]]
    """
    runs: list[list] = []
    previous = object()
    for key, item in zip(keys, items, strict=True):
        if not runs or key != previous:
            runs.append([])
        runs[-1].append(item)
        previous = key
    if group_size is None:
        return runs
    return [run[i : i + group_size] for run in runs for i in range(0, len(run), group_size)]


__all__ = ["Sample", "group_metrics", "mean_or_nan", "split_groups"]
