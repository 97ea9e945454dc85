"""The weighted total reward of a completion, exactly as TRL 1.16's ``GRPOTrainer`` forms it: one copy for the probes,
the train-time monitors and the judge lab.

TRL turns every ``None`` score into NaN, then (``grpo_trainer.py``, ``_generate_and_score_completions``)::

    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan  # exclude unscorable rows from the logged reward stats
    self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())

So a ``None`` (or NaN) score counts 0 next to a real score of another function, but a completion for which EVERY
function returned ``None`` is unscorable: its total is NaN (not 0), its advantage is forced to 0, and it is left out of
the logged ``reward`` mean. ``tests/rewards/test_probes.py`` checks these functions against TRL's own lines.

A reward with weight 0 is watched, not trained on (a checker beside a judge, say): its score never makes a completion
scorable that the trained rewards could not score. TRL alone would count it (its row is then not all NaN, and the
judge's failure becomes a total of 0); the GRPO recipe's monitor hands TRL ``None`` from a watched reward on exactly
those completions (``recipes.monitors.RewardMonitor.watched``), so TRL forms the totals these functions give.

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
    """One completion's total: sum of ``weight * score`` over the scores that are not None/NaN; NaN when none of the
    scores with a non-zero weight is.

    >>> weighted_total([0.0, float("nan")], [10.0, 0.5])
    0.0
    """
    if len(scores) != len(weights):
        raise ValueError(f"{len(scores)} scores but {len(weights)} weights: give one weight per reward function")
    present = [(w, s) for w, s in zip(weights, scores, strict=True) if not is_missing(s)]
    return sum(w * s for w, s in present) if any(w != 0 for w, _ in present) else math.nan


def weighted_totals(scores_per_func: Sequence[Sequence[float | None]], weights: Sequence[float] | None) -> list[float]:
    """Per-completion totals from each function's list of scores (the order TRL calls them in).

    Args:
        scores_per_func: one list per reward function, one score (or None) per completion.
        weights: parallel weights; None gives 1.0 each, as TRL does without ``reward_weights``.

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
