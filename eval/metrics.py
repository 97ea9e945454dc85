"""Metrics over scored samples: accuracy with a 95% interval, pass@k, length by correctness, format/truncation rates.

Confidence intervals:

- one answer per problem (K = 1): the **Wilson score interval** for a binomial proportion -- it stays inside
  [0, 1] and keeps its coverage near 0% and 100%, where the normal ("Wald") interval collapses to a point;
- K > 1 samples per problem: samples of one problem are not independent, so the interval is a **percentile
  bootstrap over problems** (10,000 resamples, fixed seed) of the per-problem mean;
- a difference between two runs (``compare``): a **paired bootstrap over the problems both runs answered**,
  or Newcombe's hybrid score interval (from two Wilson intervals) when the runs share no problems.

pass@k is the unbiased estimator of Chen et al. 2021 (Codex paper, eq. 1): ``1 - C(n-c, k) / C(n, k)`` per problem
for n samples of which c are correct, averaged over problems.

>>> [round(x, 4) for x in wilson_interval(8, 10)]
[0.4902, 0.9433]
>>> round(pass_at_k(n=5, c=1, k=1), 4), pass_at_k(n=5, c=1, k=5), pass_at_k(n=5, c=0, k=3)
(0.2, 1.0, 0.0)
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

Z95 = 1.959963984540054  # two-sided 95% normal quantile
BOOTSTRAP_RESAMPLES = 10_000


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (``(0, 1)`` when n is 0).

    >>> wilson_interval(0, 10)[0], round(wilson_interval(0, 10)[1], 4)
    (0.0, 0.2775)
    """
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At k = 0 and k = n a bound is exactly 0 or 1; rounding would leave it a hair inside.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: the chance that k of the n samples, drawn without replacement, hold a
    correct one. Computed as a product to avoid huge binomials (Chen et al. 2021, Fig. 3).

    >>> round(pass_at_k(n=10, c=3, k=2), 4)  # 1 - C(7,2)/C(10,2) = 1 - 21/45
    0.5333
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def bootstrap_ci(values: list[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``values``.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    import numpy as np

    if not values:
        return 0.0, 1.0
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def newcombe_difference(k_a: int, n_a: int, k_b: int, n_b: int) -> tuple[float, float, float]:
    """Difference p_b - p_a of two independent proportions and its Newcombe (1998, method 10) 95% interval.

    >>> [round(x, 4) for x in newcombe_difference(5, 10, 5, 10)]
    [0.0, -0.3725, 0.3725]
    """
    p_a, p_b = k_a / n_a, k_b / n_b
    l_a, u_a = wilson_interval(k_a, n_a)
    l_b, u_b = wilson_interval(k_b, n_b)
    d = p_b - p_a
    low = d - math.sqrt((p_b - l_b) ** 2 + (u_a - p_a) ** 2)
    high = d + math.sqrt((u_b - p_b) ** 2 + (p_a - l_a) ** 2)
    return d, low, high


def sample_list(record: dict) -> list[dict]:
    """The scored samples of one problem record: ``record["samples"]`` when K > 1, else the record itself."""
    return record.get("samples", [record])


def problem_score(record: dict) -> float:
    """Fraction of a problem's samples that are correct (0 or 1 when K = 1)."""
    samples = sample_list(record)
    return sum(bool(s["correct"]) for s in samples) / len(samples)


def length_stats(lengths: list[int]) -> dict | None:
    """Mean and median of token lengths (None when there are none to summarise).

    >>> length_stats([10, 20, 60])
    {'n': 3, 'mean': 30.0, 'median': 20.0}
    """
    if not lengths:
        return None
    return {"n": len(lengths), "mean": statistics.fmean(lengths), "median": float(statistics.median(lengths))}


def accuracy_block(records: list[dict], seed: int = 0) -> dict:
    """n, n_correct, accuracy and its 95% interval for problem records (Wilson when K = 1, bootstrap when K > 1)."""
    samples = [s for r in records for s in sample_list(r)]
    n_correct = sum(bool(s["correct"]) for s in samples)
    k = max((len(sample_list(r)) for r in records), default=1)
    if k == 1:
        low, high = wilson_interval(n_correct, len(samples))
        method = "wilson"
    else:
        low, high = bootstrap_ci([problem_score(r) for r in records], seed=seed)
        method = "bootstrap over problems"
    return {
        "n": len(records),
        "n_samples": len(samples),
        "n_correct": n_correct,
        "accuracy": n_correct / len(samples) if samples else 0.0,
        "ci95": [low, high],
        "ci_method": method,
    }


def _rate(samples: list[dict], key: str) -> float | None:
    known = [bool(s[key]) for s in samples if s.get(key) is not None]
    return sum(known) / len(known) if known else None


def summarize(records: list[dict], seed: int = 0) -> dict:
    """The metrics of results.json for scored problem records (see the module docstring for the intervals).

    Each record holds ``correct``, ``format_ok``, ``empty``, ``reason``, ``n_tokens`` (or None) and ``truncated``
    (or None), either directly (K = 1) or in a ``samples`` list; optional ``subject`` and ``level`` give the
    per-group breakdowns.
    """
    samples = [s for r in records for s in sample_list(r)]
    k = max((len(sample_list(r)) for r in records), default=1)
    result = accuracy_block(records, seed=seed)
    result["num_samples"] = k
    if k > 1:
        result["pass_at_k"] = {
            str(j): statistics.fmean(
                pass_at_k(len(sample_list(r)), sum(bool(s["correct"]) for s in sample_list(r)), j) for r in records
            )
            for j in _powers_of_two_up_to(k)
        }
    by_correct = {"correct": [s for s in samples if s["correct"]], "wrong": [s for s in samples if not s["correct"]]}
    result["length_tokens"] = {
        name: length_stats([s["n_tokens"] for s in group if s.get("n_tokens") is not None])
        for name, group in {"all": samples, **by_correct}.items()
    }
    result["truncated_share"] = {name: _rate(group, "truncated") for name, group in by_correct.items()}
    result["format_rate"] = _rate(samples, "format_ok")
    result["empty_rate"] = _rate(samples, "empty")
    result["truncation_rate"] = _rate(samples, "truncated")
    result["reasons"] = dict(Counter(s["reason"] for s in samples).most_common())
    for field in ("subject", "level"):
        if any(r.get(field) is not None for r in records):
            groups = defaultdict(list)
            for r in records:
                groups[str(r.get(field))].append(r)
            result[f"by_{field}"] = {name: accuracy_block(group, seed=seed) for name, group in sorted(groups.items())}
    return result


def _powers_of_two_up_to(k: int) -> list[int]:
    """``[1, 2, 4, ..., k]`` (k itself always included).

    >>> _powers_of_two_up_to(6)
    [1, 2, 4, 6]
    """
    ks = [1 << i for i in range(k.bit_length()) if (1 << i) < k]
    return ks + [k]


def compare_records(records_a: list[dict], records_b: list[dict], seed: int = 0) -> dict:
    """Accuracy difference B - A with a 95% interval: paired bootstrap over shared problems, else Newcombe."""
    by_index_a = {r["index"]: problem_score(r) for r in records_a}
    by_index_b = {r["index"]: problem_score(r) for r in records_b}
    shared = sorted(set(by_index_a) & set(by_index_b))
    if shared:
        diffs = [by_index_b[i] - by_index_a[i] for i in shared]
        low, high = bootstrap_ci(diffs, seed=seed)
        a = [by_index_a[i] for i in shared]
        b = [by_index_b[i] for i in shared]
        return {
            "n_shared": len(shared),
            "accuracy_a": statistics.fmean(a),
            "accuracy_b": statistics.fmean(b),
            "difference": statistics.fmean(diffs),
            "ci95": [low, high],
            "ci_method": "paired bootstrap over shared problems",
            "only_a_correct": sum(x > y for x, y in zip(a, b, strict=True)),
            "only_b_correct": sum(y > x for x, y in zip(a, b, strict=True)),
        }
    acc_a, acc_b = accuracy_block(records_a), accuracy_block(records_b)
    d, low, high = newcombe_difference(acc_a["n_correct"], acc_a["n_samples"], acc_b["n_correct"], acc_b["n_samples"])
    return {
        "n_shared": 0,
        "accuracy_a": acc_a["accuracy"],
        "accuracy_b": acc_b["accuracy"],
        "difference": d,
        "ci95": [low, high],
        "ci_method": "Newcombe hybrid score (independent samples)",
    }
