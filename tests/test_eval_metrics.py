"""Metrics of eval on hand-made samples: Wilson and bootstrap intervals, pass@k, lengths, rates, comparisons.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_eval_metrics.py
"""

import itertools
import math

import pytest

from eval.metrics import (
    bootstrap_ci,
    compare_records,
    newcombe_difference,
    pass_at_k,
    summarize,
    wilson_interval,
)


def sample(correct, n_tokens=10, truncated=False, reason="ok", format_ok=True, empty=False):
    return {
        "correct": correct,
        "n_tokens": n_tokens,
        "truncated": truncated,
        "reason": reason,
        "format_ok": format_ok,
        "empty": empty,
    }


@pytest.mark.parametrize(
    "k, n",
    [
        (8, 10),  # typical
        (0, 10),  # no successes: lower bound exactly 0, upper bound > 0 (Wald would give [0, 0])
        (10, 10),  # all successes
        (1, 1),  # a single trial
        (450, 1319),  # GSM8K size
    ],
)
def test_wilson_interval_matches_closed_form_and_coverage_equation(k, n):
    low, high = wilson_interval(k, n)
    z = 1.959963984540054
    # Wilson's bounds are the roots p of (p_hat - p)^2 = z^2 p (1 - p) / n.
    p_hat = k / n
    for bound in (low, high):
        if 0 < bound < 1:
            assert (p_hat - bound) ** 2 == pytest.approx(z * z * bound * (1 - bound) / n, rel=1e-9)
    assert 0 <= low <= p_hat <= high <= 1
    assert high - low > 0


def test_wilson_interval_known_value():
    # Textbook value (Newcombe 1998, table I: 81/263 -> 0.2553 to 0.3662).
    low, high = wilson_interval(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)


@pytest.mark.parametrize("n, c, k", [(5, 2, 1), (5, 2, 2), (5, 2, 3), (8, 1, 4), (8, 0, 2), (8, 8, 8), (10, 3, 7)])
def test_pass_at_k_equals_enumeration_over_subsets(n, c, k):
    # The estimator is the share of k-subsets of the n samples that hold at least one correct sample.
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    expected = sum(any(s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(expected)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n=4, c=5, k=1)


def test_bootstrap_ci_brackets_mean_and_is_seeded():
    values = [1.0] * 30 + [0.0] * 70
    low, high = bootstrap_ci(values, seed=1)
    assert low < 0.3 < high
    assert (low, high) == bootstrap_ci(values, seed=1)
    # For a proportion the bootstrap and Wilson intervals roughly agree at n=100.
    w_low, w_high = wilson_interval(30, 100)
    assert abs(low - w_low) < 0.03 and abs(high - w_high) < 0.03


def test_summarize_single_sample_metrics():
    records = [
        {**sample(True, 10), "subject": "Algebra", "level": 1},
        {**sample(True, 30), "subject": "Algebra", "level": 2},
        {**sample(False, 100, truncated=True, reason="no_marker", format_ok=False), "subject": "Geometry", "level": 2},
        {**sample(False, 50, reason="empty", format_ok=False, empty=True), "subject": "Geometry", "level": 2},
    ]
    r = summarize(records)
    assert (r["n"], r["n_correct"], r["accuracy"]) == (4, 2, 0.5)
    assert r["ci95"] == list(wilson_interval(2, 4)) and r["ci_method"] == "wilson"
    assert r["length_tokens"]["correct"] == {"n": 2, "mean": 20.0, "median": 20.0}
    assert r["length_tokens"]["wrong"] == {"n": 2, "mean": 75.0, "median": 75.0}
    assert r["truncated_share"] == {"correct": 0.0, "wrong": 0.5}
    assert (r["format_rate"], r["empty_rate"], r["truncation_rate"]) == (0.5, 0.25, 0.25)
    assert r["reasons"] == {"ok": 2, "no_marker": 1, "empty": 1}
    assert r["by_subject"]["Algebra"]["accuracy"] == 1.0 and r["by_subject"]["Geometry"]["n_correct"] == 0
    assert r["by_level"]["2"]["n"] == 3
    assert "pass_at_k" not in r


def test_summarize_without_token_counts_reports_none():
    # eval score without --tokenizer: no lengths, no truncation info.
    records = [{**sample(True), "n_tokens": None, "truncated": None}]
    r = summarize(records)
    assert r["length_tokens"]["all"] is None and r["truncation_rate"] is None


def test_summarize_multi_sample_pass_at_k_and_bootstrap():
    records = [
        {"index": 0, "samples": [sample(True), sample(False), sample(False), sample(False)]},
        {"index": 1, "samples": [sample(False)] * 4},
        {"index": 2, "samples": [sample(True)] * 4},
    ]
    r = summarize(records)
    assert r["num_samples"] == 4 and r["n_samples"] == 12 and r["n_correct"] == 5
    assert r["accuracy"] == pytest.approx(5 / 12)
    assert r["ci_method"] == "bootstrap over problems"
    assert r["pass_at_k"]["1"] == pytest.approx(5 / 12)  # pass@1 is the mean accuracy
    assert r["pass_at_k"]["4"] == pytest.approx(2 / 3)  # any correct among all 4
    assert r["pass_at_k"]["2"] == pytest.approx((0.5 + 0 + 1) / 3)  # 1 - C(3,2)/C(4,2) = 0.5 for problem 0


def test_compare_paired_counts_and_interval():
    a = [{"index": i, **sample(i < 5)} for i in range(20)]
    b = [{"index": i, **sample(i < 9 and i != 0)} for i in range(20)]
    d = compare_records(a, b)
    assert d["n_shared"] == 20
    assert d["difference"] == pytest.approx((8 - 5) / 20)
    assert (d["only_a_correct"], d["only_b_correct"]) == (1, 4)
    assert d["ci95"][0] < d["difference"] < d["ci95"][1]


def test_compare_unpaired_uses_newcombe():
    a = [{"index": i, **sample(i < 5)} for i in range(10)]
    b = [{"index": 100 + i, **sample(i < 8)} for i in range(10)]
    d = compare_records(a, b)
    assert d["n_shared"] == 0 and d["ci_method"].startswith("Newcombe")
    assert d["difference"] == pytest.approx(0.3)
    assert [d["difference"], *d["ci95"]] == list(newcombe_difference(5, 10, 8, 10))
    # Newcombe's interval is wider than zero and contains the point estimate
    assert d["ci95"][0] < 0.3 < d["ci95"][1]
