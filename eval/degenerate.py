"""Degenerate GRPO groups: all G answers right or all wrong, so the correctness advantage is zero and the group
teaches nothing. One formula for the rollouts filter and the train-time monitors.

For a prompt of pass rate p, a fresh group of G answers is degenerate with probability p^G + (1-p)^G:

>>> expected_degenerate_share([0.5], group_size=4)  # 0.5**4 + 0.5**4
0.125

A prediction must not see the observation it is compared with: ``DegeneratePredictor`` predicts each batch from
earlier batches only, and learns from the batch after predicting it:

>>> predictor = DegeneratePredictor(group_size=2)
>>> predictor.predict(["q1"], [None])  # nothing seen yet, no prior: no prediction
([nan], ['none'])
>>> predictor.update(["q1"], [(1, 2)])  # q1's first group: one right, one wrong (not degenerate)
>>> predictor.predict(["q1", "q2"], [None, 0.5])  # q1 from its visit; q2 from its pass_rate prior
([0.0, 0.5], ['prompt', 'prior'])
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

SOURCES = ("prompt", "prior", "pool", "none")  # where a group's prediction came from, in order of preference


def expected_degenerate_share(pass_rates: Sequence[float], group_size: int) -> float:
    """Mean over prompts of ``p**G + (1-p)**G``; NaN when there are no prompts (undefined, not zero).

    >>> round(expected_degenerate_share([0.9], 4), 4), round(expected_degenerate_share([0.97], 4), 4)
    (0.6562, 0.8853)
    >>> round(expected_degenerate_share([0.9], 16), 4), expected_degenerate_share([0.0, 1.0], 8)
    (0.1853, 1.0)
    >>> math.isnan(expected_degenerate_share([], 8))
    True
    """
    if group_size < 1:
        raise ValueError(f"group_size={group_size}: use the GRPO recipe's num_generations (a positive number)")
    if not pass_rates:
        return math.nan
    return sum(p**group_size + (1 - p) ** group_size for p in pass_rates) / len(pass_rates)


def degenerate_estimate(n_correct: int, n: int, group_size: int) -> float:
    """Estimate of p^G + (1-p)^G from n earlier answers to one prompt, ``n_correct`` of them right.

    With n >= G, the unbiased C(k, G)/C(n, G) + C(n-k, G)/C(n, G) (plugging in k/n would make a prompt seen once
    often look degenerate); with n < G, that plug-in.

    >>> degenerate_estimate(4, 4, 4), degenerate_estimate(3, 4, 4), degenerate_estimate(4, 8, 4)
    (1.0, 0.0, 0.02857142857142857)
    >>> degenerate_estimate(1, 2, 4)  # too few answers: plug-in 0.5**4 + 0.5**4
    0.125
    """
    if n < 1 or not 0 <= n_correct <= n:
        raise ValueError(f"need 0 <= n_correct <= n and n >= 1, got n_correct={n_correct}, n={n}")
    if n < group_size:
        return expected_degenerate_share([n_correct / n], group_size)
    return (math.comb(n_correct, group_size) + math.comb(n - n_correct, group_size)) / math.comb(n, group_size)


@dataclass
class DegeneratePredictor:
    """Predicts, before seeing a batch, the chance that each of its groups is degenerate.

    Sources, in order: the prompt's last ``visits_kept`` visits, a ``pass_rate`` given with the data, the mean estimate
    of the last ``pool_groups`` groups of any prompt (the formula of a mean pass rate would under-predict), else NaN.
    """

    group_size: int
    visits_kept: int = 4
    pool_groups: int = 256
    _visits: dict[str, deque] = field(default_factory=dict, init=False)
    _pool: deque = field(default_factory=deque, init=False)

    def __post_init__(self):
        if self.group_size < 1:
            raise ValueError(f"group_size={self.group_size}: use the GRPO recipe's num_generations")
        self._pool = deque(maxlen=self.pool_groups)

    def predict(self, keys: Sequence[str], priors: Sequence[float | None]) -> tuple[list[float], list[str]]:
        """Per group (prompt key, prior pass rate or None): the predicted chance it is degenerate, and its source."""
        predictions, sources = [], []
        pool = sum(self._pool) / len(self._pool) if self._pool else math.nan
        for key, prior in zip(keys, priors, strict=True):
            visits = self._visits.get(key)
            if visits:
                k, n = sum(v[0] for v in visits), sum(v[1] for v in visits)
                predictions.append(degenerate_estimate(k, n, self.group_size))
                sources.append("prompt")
            elif prior is not None:
                predictions.append(expected_degenerate_share([prior], self.group_size))
                sources.append("prior")
            elif self._pool:
                predictions.append(pool)
                sources.append("pool")
            else:
                predictions.append(math.nan)
                sources.append("none")
        return predictions, sources

    def update(self, keys: Sequence[str], counts: Sequence[tuple[int, int]]) -> None:
        """Learn from a batch's groups: per group, its prompt key and (answers correct, answers)."""
        for key, (k, n) in zip(keys, counts, strict=True):
            self._visits.setdefault(key, deque(maxlen=self.visits_kept)).append((k, n))
            self._pool.append(degenerate_estimate(k, n, self.group_size))


__all__ = ["SOURCES", "DegeneratePredictor", "degenerate_estimate", "expected_degenerate_share"]
