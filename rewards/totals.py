"""The weighted total reward of a completion, exactly as TRL 1.16's ``GRPOTrainer`` forms it: one copy for the probes,
the train-time monitors and the judge lab.

A ``None`` score counts 0 next to another function's real score, but a completion EVERY function scored ``None`` is
unscorable: NaN (not 0), advantage 0, out of the logged mean. A weight-0 (watched) score never makes one scorable.

>>> weighted_total([1.0, 0.1], [10.0, 0.5]), weighted_total([None, 0.1], [10.0, 0.5])
(10.05, 0.05)
>>> math.isnan(weighted_total([None, None], [10.0, 0.5]))  # unscorable: not 0
True
>>> math.isnan(weighted_total([None, 1.0], [1.0, 0.0]))  # only a watched (weight 0) score: still unscorable
True
>>> mean_total([10.0, float("nan"), 0.5])  # TRL's logged `reward`: the mean over scorable completions
5.25
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def is_missing(score) -> bool:
    """None or NaN: a reward function that could not score the completion."""
    return score is None or math.isnan(score)


def weighted_total(scores: Sequence[float | None], weights: Sequence[float]) -> float:
    """One completion's total: sum of ``weight * score`` over the present scores; NaN when none has a non-zero weight.

    >>> weighted_total([0.0, float("nan")], [10.0, 0.5])
    0.0
    """
    if len(scores) != len(weights):
        raise ValueError(f"{len(scores)} scores but {len(weights)} weights: give one weight per reward function")
    present = [(w, s) for w, s in zip(weights, scores, strict=True) if not is_missing(s)]
    return sum(w * s for w, s in present) if any(w != 0 for w, _ in present) else math.nan


def weighted_totals(scores_per_func: Sequence[Sequence[float | None]], weights: Sequence[float] | None) -> list[float]:
    """Per-completion totals from one list of scores per function; ``weights`` None gives 1.0 each, as in TRL.

    >>> weighted_totals([[1.0, None, None], [0.1, 0.1, None]], [10.0, 0.5])[:2]
    [10.05, 0.05]
    """
    weights = [1.0] * len(scores_per_func) if weights is None else list(weights)
    if len(weights) != len(scores_per_func):
        raise ValueError(
            f"{len(scores_per_func)} reward functions but {len(weights)} weights: give one weight per function"
        )
    if not scores_per_func:
        return []
    return [weighted_total(row, weights) for row in zip(*scores_per_func, strict=True)]


def mean_total(totals: Sequence[float]) -> float:
    """Mean over the scorable totals (TRL's ``torch.nanmean``): NaN when there are none.

    >>> math.isnan(mean_total([float("nan")])), math.isnan(mean_total([]))
    (True, True)
    """
    scorable = [t for t in totals if not math.isnan(t)]
    return sum(scorable) / len(scorable) if scorable else math.nan


__all__ = ["is_missing", "mean_total", "weighted_total", "weighted_totals"]
