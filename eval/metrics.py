"""Metrics over scored samples: accuracy with a confidence interval, pass@k, lengths, format, truncation, timeouts.

Intervals: Wilson for one sample per problem (it keeps its coverage near 0% and 100%); a percentile bootstrap over
problems for K > 1 samples per problem (which are not independent); a paired bootstrap over the shared problems for
a difference of two runs. pass@k is the unbiased estimator of Chen et al. 2021.

>>> [round(x, 4) for x in wilson_interval(8, 10)]
[0.4902, 0.9433]
>>> round(pass_at_k(n=5, c=1, k=1), 4), pass_at_k(n=5, c=1, k=5), pass_at_k(n=5, c=0, k=3)
(0.2, 1.0, 0.0)
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

import numpy as np

CI_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 10_000


def normal_quantile(level: float) -> float:
    """The two-sided normal quantile z of a confidence level (1.96 for 0.95).

    >>> round(normal_quantile(0.95), 4), round(normal_quantile(0.9), 4)
    (1.96, 1.6449)
    """
    if not 0 < level < 1:
        raise ValueError(f"a confidence level is a fraction between 0 and 1 (0.95 for 95%), got {level}")
    return statistics.NormalDist().inv_cdf(0.5 + level / 2)


def level_label(level: float) -> str:
    """How a report names a level: ``95%``, ``90%``, ``99.5%``.

    >>> level_label(0.95), level_label(0.9), level_label(0.995)
    ('95%', '90%', '99.5%')
    """
    return f"{100 * level:g}%"


def wilson_interval(k: int, n: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials at confidence ``level`` (``(0, 1)`` when n is 0).

    >>> wilson_interval(0, 10)[0], round(wilson_interval(0, 10)[1], 4)
    (0.0, 0.2775)
    """
    if n == 0:
        return 0.0, 1.0
    z = normal_quantile(level)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At k = 0 and k = n a bound is exactly 0 or 1; rounding would leave it a hair inside.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: the chance that k of n samples, drawn without replacement, hold a correct one.

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


def problem_pass_at_k(record: dict, k: int, key: str = "correct") -> float:
    """pass@k of one problem record from its n samples, c of them correct by the verdict ``key``.

    >>> round(problem_pass_at_k({"samples": [{"correct": True}, {"correct": False}, {"correct": False}]}, 2), 4)
    0.6667
    """
    samples = sample_list(record)
    return pass_at_k(len(samples), sum(bool(s[key]) for s in samples), k)


def pass_at_k_curve(records: list[dict], key: str = "correct") -> list[float]:
    """pass@k for k = 1..K averaged over problems, K being the fewest samples a problem has (pass@k needs n >= k).

    >>> one_of_two = {"samples": [{"correct": True}, {"correct": False}]}
    >>> pass_at_k_curve([one_of_two, {"samples": [{"correct": False}] * 2}])
    [0.25, 0.5]
    """
    k_max = min((len(sample_list(r)) for r in records), default=0)
    return [statistics.fmean(problem_pass_at_k(r, k, key) for r in records) for k in range(1, k_max + 1)]


def compare_pass_at_k(
    records_a: list[dict], records_b: list[dict], k: int, seed: int = 0, level: float = CI_LEVEL
) -> dict:
    """pass@k difference B - A over the problems both runs answered, with the paired bootstrap interval of accuracy.

    >>> a = [{"index": 0, "samples": [{"correct": False}] * 2}, {"index": 1, "samples": [{"correct": True}] * 2}]
    >>> b = [{"index": 0, "samples": [{"correct": True}, {"correct": False}]}, a[1]]
    >>> diff = compare_pass_at_k(a, b, k=2)
    >>> diff["pass_at_k_a"], diff["pass_at_k_b"], diff["difference"], diff["n_shared"]
    (0.5, 1.0, 0.5, 2)
    """
    by_index_a = {r["index"]: problem_pass_at_k(r, k) for r in records_a}
    by_index_b = {r["index"]: problem_pass_at_k(r, k) for r in records_b}
    shared = sorted(set(by_index_a) & set(by_index_b))
    if not shared:
        raise ValueError("the two runs share no problem: pass@k is compared over the same problems")
    diffs = [by_index_b[i] - by_index_a[i] for i in shared]
    low, high = bootstrap_ci(diffs, seed=seed, level=level)
    return {
        "k": k,
        "n_shared": len(shared),
        "pass_at_k_a": statistics.fmean(by_index_a[i] for i in shared),
        "pass_at_k_b": statistics.fmean(by_index_b[i] for i in shared),
        "difference": statistics.fmean(diffs),
        "ci": [low, high],
        "ci_level": level,
        "ci_method": "paired bootstrap over shared problems",
    }


def bootstrap_ci(
    values: list[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES, level: float = CI_LEVEL
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` at confidence ``level``.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    if not values:
        return 0.0, 1.0
    normal_quantile(level)  # the same check of the level as the other intervals
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    low, high = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def newcombe_difference(k_a: int, n_a: int, k_b: int, n_b: int, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """Difference p_b - p_a of two independent proportions and its Newcombe (1998, method 10) interval at ``level``.

    >>> [round(x, 4) for x in newcombe_difference(5, 10, 5, 10)]
    [0.0, -0.3725, 0.3725]
    """
    p_a, p_b = k_a / n_a, k_b / n_b
    l_a, u_a = wilson_interval(k_a, n_a, level)
    l_b, u_b = wilson_interval(k_b, n_b, level)
    d = p_b - p_a
    low = d - math.sqrt((p_b - l_b) ** 2 + (u_a - p_a) ** 2)
    high = d + math.sqrt((u_b - p_b) ** 2 + (p_a - l_a) ** 2)
    return d, low, high


def sample_list(record: dict) -> list[dict]:
    """The scored samples of one problem record: ``record["samples"]`` when K > 1, else the record itself."""
    return record.get("samples", [record])


def problem_score(record: dict, key: str = "correct") -> float:
    """Fraction of a problem's samples that are correct by the verdict ``key``."""
    samples = sample_list(record)
    return sum(bool(s[key]) for s in samples) / len(samples)


def length_stats(lengths: list[int]) -> dict | None:
    """Mean and median of token lengths (None when there are none to summarise).

    >>> length_stats([10, 20, 60])
    {'n': 3, 'mean': 30.0, 'median': 20.0}
    """
    if not lengths:
        return None
    return {"n": len(lengths), "mean": statistics.fmean(lengths), "median": float(statistics.median(lengths))}


def accuracy_block(records: list[dict], seed: int = 0, level: float = CI_LEVEL, key: str = "correct") -> dict:
    """n, n_correct, accuracy and its interval for problem records, by the verdict ``key`` of each sample."""
    samples = [s for r in records for s in sample_list(r)]
    n_correct = sum(bool(s[key]) for s in samples)
    k = max((len(sample_list(r)) for r in records), default=1)
    if k == 1:
        low, high = wilson_interval(n_correct, len(samples), level)
        method = "wilson"
    else:
        low, high = bootstrap_ci([problem_score(r, key) for r in records], seed=seed, level=level)
        method = "bootstrap over problems"
    return {
        "n": len(records),
        "n_samples": len(samples),
        "n_correct": n_correct,
        "accuracy": n_correct / len(samples) if samples else 0.0,
        "ci": [low, high],
        "ci_level": level,
        "ci_method": method,
    }


def _rate(samples: list[dict], key: str) -> float | None:
    known = [bool(s[key]) for s in samples if s.get(key) is not None]
    return sum(known) / len(known) if known else None


def timed_out(records: list[dict]) -> list[dict]:
    """Where each timed-out sample is; records without a ``timeout`` field count as not timed out.

    >>> timed_out([{"index": 3, "timeout": True}, {"index": 4, "samples": [{"timeout": False}, {"timeout": True}]}])
    [{'index': 3, 'sample': 0}, {'index': 4, 'sample': 1}]
    """
    return [
        {"index": r.get("index"), "sample": j}
        for r in records
        for j, s in enumerate(sample_list(r))
        if s.get("timeout", False)
    ]


LENIENT_KEYS = ("lenient_accuracy", "lenient_n_correct", "lenient_ci", "lenient_gap", "lenient_only_correct")
LENIENT_KEYS += ("strict_only_correct", "lenient_from", "lenient_timeout_rate")


def has_lenient(records: list[dict]) -> bool:
    """Every sample carries a lenient verdict (older scorings have none).

    >>> has_lenient([{"correct": True, "lenient_correct": True}]), has_lenient([{"correct": True}]), has_lenient([])
    (True, False, False)
    """
    samples = [s for r in records for s in sample_list(r)]
    return bool(samples) and all("lenient_correct" in s for s in samples)


def lenient_block(records: list[dict], seed: int = 0, level: float = CI_LEVEL) -> dict:
    """Lenient accuracy with its interval and the gap lenient - strict; None unless every sample has a lenient verdict.

    >>> block = lenient_block([{"correct": False, "lenient_correct": True}, {"correct": True, "lenient_correct": True}])
    >>> block["lenient_accuracy"], block["lenient_gap"], block["lenient_only_correct"], block["strict_only_correct"]
    (1.0, 0.5, 1, 0)
    """
    if not has_lenient(records):
        return dict.fromkeys(LENIENT_KEYS)
    samples = [s for r in records for s in sample_list(r)]
    lenient = accuracy_block(records, seed, level, key="lenient_correct")
    strict_accuracy = sum(bool(s["correct"]) for s in samples) / len(samples)
    return {
        "lenient_accuracy": lenient["accuracy"],
        "lenient_n_correct": lenient["n_correct"],
        "lenient_ci": lenient["ci"],
        "lenient_gap": lenient["accuracy"] - strict_accuracy,
        "lenient_only_correct": sum(bool(s["lenient_correct"]) and not s["correct"] for s in samples),
        "strict_only_correct": sum(bool(s["correct"]) and not s["lenient_correct"] for s in samples),
        "lenient_from": dict(Counter(s.get("lenient_from") or "nothing" for s in samples).most_common()),
        "lenient_timeout_rate": sum(bool(s.get("lenient_timeout")) for s in samples) / len(samples),
    }


def summarize(records: list[dict], seed: int = 0, level: float = CI_LEVEL) -> dict:
    """The metrics of results.json for scored problem records. A timed-out sample counts as wrong and is listed in
    ``timeouts``, so that two scorings of one file that differ can be told apart by what timed out.
    """
    samples = [s for r in records for s in sample_list(r)]
    k = max((len(sample_list(r)) for r in records), default=1)
    result = accuracy_block(records, seed=seed, level=level)
    result["num_samples"] = k
    if k > 1:
        result["pass_at_k"] = {
            str(j): statistics.fmean(problem_pass_at_k(r, j) for r in records) for j in _powers_of_two_up_to(k)
        }
        result["pass_at_k_curve"] = pass_at_k_curve(records)
    by_correct = {"correct": [s for s in samples if s["correct"]], "wrong": [s for s in samples if not s["correct"]]}
    result["length_tokens"] = {
        name: length_stats([s["n_tokens"] for s in group if s.get("n_tokens") is not None])
        for name, group in {"all": samples, **by_correct}.items()
    }
    result["truncated_share"] = {name: _rate(group, "truncated") for name, group in by_correct.items()}
    result["format_rate"] = _rate(samples, "format_ok")
    result["empty_rate"] = _rate(samples, "empty")
    result["truncation_rate"] = _rate(samples, "truncated")
    result["timeouts"] = timed_out(records)
    result["timeout_rate"] = len(result["timeouts"]) / len(samples) if samples else 0.0
    result["reasons"] = dict(Counter(s["reason"] for s in samples).most_common())
    result.update(lenient_block(records, seed=seed, level=level))
    for field in ("subject", "level"):
        if any(r.get(field) is not None for r in records):
            groups = defaultdict(list)
            for r in records:
                groups[str(r.get(field))].append(r)
            result[f"by_{field}"] = {
                name: accuracy_block(group, seed=seed, level=level) for name, group in sorted(groups.items())
            }
    return result


def _powers_of_two_up_to(k: int) -> list[int]:
    """``[1, 2, 4, ..., k]`` (k itself always included).

    >>> _powers_of_two_up_to(6)
    [1, 2, 4, 6]
    """
    ks = [1 << i for i in range(k.bit_length()) if (1 << i) < k]
    return ks + [k]


def compare_records(
    records_a: list[dict], records_b: list[dict], seed: int = 0, level: float = CI_LEVEL, key: str = "correct"
) -> dict:
    """Accuracy difference B - A with an interval: a paired bootstrap over shared problems, else an unpaired one."""
    by_index_a = {r["index"]: problem_score(r, key) for r in records_a}
    by_index_b = {r["index"]: problem_score(r, key) for r in records_b}
    shared = sorted(set(by_index_a) & set(by_index_b))
    if shared:
        diffs = [by_index_b[i] - by_index_a[i] for i in shared]
        low, high = bootstrap_ci(diffs, seed=seed, level=level)
        a = [by_index_a[i] for i in shared]
        b = [by_index_b[i] for i in shared]
        return {
            "n_shared": len(shared),
            "accuracy_a": statistics.fmean(a),
            "accuracy_b": statistics.fmean(b),
            "difference": statistics.fmean(diffs),
            "ci": [low, high],
            "ci_level": level,
            "ci_method": "paired bootstrap over shared problems",
            "only_a_correct": sum(x > y for x, y in zip(a, b, strict=True)),
            "only_b_correct": sum(y > x for x, y in zip(a, b, strict=True)),
        }
    acc_a, acc_b = accuracy_block(records_a, level=level, key=key), accuracy_block(records_b, level=level, key=key)
    if acc_a["n_samples"] == acc_a["n"] and acc_b["n_samples"] == acc_b["n"]:
        d, low, high = newcombe_difference(acc_a["n_correct"], acc_a["n"], acc_b["n_correct"], acc_b["n"], level)
        method = "Newcombe hybrid score (independent samples)"
    else:  # samples of one problem are not independent: resample problems, each run on its own
        d = acc_b["accuracy"] - acc_a["accuracy"]
        low, high = _unpaired_bootstrap(list(by_index_a.values()), list(by_index_b.values()), seed, level)
        method = "bootstrap over each run's problems (independent runs)"
    return {
        "n_shared": 0,
        "accuracy_a": acc_a["accuracy"],
        "accuracy_b": acc_b["accuracy"],
        "difference": d,
        "ci": [low, high],
        "ci_level": level,
        "ci_method": method,
    }


def _unpaired_bootstrap(
    scores_a: list[float], scores_b: list[float], seed: int, level: float, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """Percentile interval of mean(B) - mean(A), resampling the problems of A and of B independently."""
    rng = np.random.default_rng(seed)
    means = {}
    for name, scores in (("a", scores_a), ("b", scores_b)):
        data = np.asarray(scores, dtype=float)
        means[name] = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    low, high = np.percentile(means["b"] - means["a"], [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def plateau_stop(checks: list[dict], patience: int) -> tuple[dict | None, dict | None]:
    """The plateau rule on a curve of checks (``{"step", "accuracy"}`` rows in order): the check at which it stops
    (the ``patience``-th after the best without a new best; None: it goes on) and the best check by then.

    >>> curve = [{"step": s, "accuracy": a} for s, a in [(25, 0.4), (50, 0.6), (75, 0.5), (100, 0.6), (125, 0.7)]]
    >>> plateau_stop(curve, 2)
    ({'step': 100, 'accuracy': 0.6}, {'step': 50, 'accuracy': 0.6})
    >>> plateau_stop(curve, 3)
    (None, {'step': 125, 'accuracy': 0.7})
    """
    best, since = None, 0
    for row in checks:
        if best is None or row["accuracy"] > best["accuracy"]:
            best, since = row, 0
        elif (since := since + 1) >= patience:
            return row, best
    return None, best
