"""Metrics of eval on hand-made samples: Wilson and bootstrap intervals, pass@k, lengths, rates, comparisons.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_metrics.py
"""

import itertools
import math
import statistics

import numpy as np
import pytest

from eval.metrics import (
    _unpaired_bootstrap,
    accuracy_block,
    bootstrap_ci,
    compare_records,
    newcombe_difference,
    pass_at_k,
    summarize,
    wilson_interval,
)
from eval.report import compare_markdown, summary_markdown


def sample(correct, n_tokens=10, truncated=False, reason="ok", format_ok=True, empty=False, timeout=None):
    s = {
        "correct": correct,
        "n_tokens": n_tokens,
        "truncated": truncated,
        "reason": reason,
        "format_ok": format_ok,
        "empty": empty,
    }
    if timeout is not None:  # records scored before timeouts were reported have no such field
        s["timeout"] = timeout
    return s


def binomial_quantile(n: int, p: float, q: float) -> int:
    """Smallest x with P(Binomial(n, p) <= x) >= q, by summing the exact probabilities."""
    cdf = 0.0
    for x in range(n + 1):
        cdf += math.comb(n, x) * p**x * (1 - p) ** (n - x)
        if cdf >= q:
            return x
    return n


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


def test_wilson_interval_at_90_percent_is_the_90_percent_interval():
    # By hand, 8 of 10 at 90%: z = 1.644854, z^2 = 2.705543, p = 0.8, denominator 1 + z^2/n = 1.270554;
    # centre (0.8 + z^2/20) / 1.270554 = 0.935277 / 1.270554 = 0.736117;
    # half-width z * sqrt(0.8 * 0.2 / 10 + z^2 / 400) / 1.270554 = 1.644854 * 0.150876 / 1.270554 = 0.195325;
    # -> [0.5408, 0.9314]. (At 95% it is [0.4902, 0.9433], the module's doctest.)
    low, high = wilson_interval(8, 10, level=0.9)
    assert (round(low, 4), round(high, 4)) == (0.5408, 0.9314)
    low95, high95 = wilson_interval(8, 10)
    assert low95 < low and high < high95


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_bootstrap_ci_percentiles_are_the_binomial_quantiles_of_the_level(level):
    # Resampling n values of which c are 1 gives a mean distributed exactly as Binomial(n, c/n) / n, so the
    # percentile interval must sit on that distribution's (1 -+ level) / 2 quantiles (to one step, 1/n, for the
    # 10,000 resamples' noise). At n = 400 the 90% and 95% quantiles lie 2-3 steps apart, so a 90% interval
    # reported as 95% (or the reverse) fails.
    n, c = 400, 120
    low, high = bootstrap_ci([1.0] * c + [0.0] * (n - c), seed=3, level=level)
    expected_low = binomial_quantile(n, c / n, (1 - level) / 2) / n
    expected_high = binomial_quantile(n, c / n, (1 + level) / 2) / n
    assert low == pytest.approx(expected_low, abs=1 / n)
    assert high == pytest.approx(expected_high, abs=1 / n)


def test_reported_level_is_the_computed_level():
    # 40 problems, 13 correct: the 90% interval is narrower than the 95% one, by the ratio of the normal quantiles
    # for Wilson to within a few per cent; results and summary.md name the level that was computed.
    records = [{"index": i, **sample(i < 13)} for i in range(40)]
    r90, r95 = ({"task": "gsm8k", **summarize(records, level=level)} for level in (0.9, 0.95))
    assert (r90["ci_level"], r95["ci_level"]) == (0.9, 0.95)
    assert r90["ci"] == list(wilson_interval(13, 40, level=0.9))
    width90, width95 = r90["ci"][1] - r90["ci"][0], r95["ci"][1] - r95["ci"][0]
    assert width90 / width95 == pytest.approx(1.6449 / 1.9600, rel=0.03)
    assert "90% CI" in summary_markdown(r90) and "95% CI" not in summary_markdown(r90)
    assert "95% CI" in summary_markdown(r95)
    # K > 1 (bootstrap) and the per-subject blocks carry the level too
    multi = [{"index": i, "subject": "AB"[i % 2], "samples": [sample(i < 13), sample(i < 20)]} for i in range(40)]
    m90, m95 = summarize(multi, level=0.9), summarize(multi, level=0.95)
    assert m90["ci"][1] - m90["ci"][0] < m95["ci"][1] - m95["ci"][0]
    assert m90["by_subject"]["A"]["ci_level"] == 0.9


@pytest.mark.parametrize("level", [0.0, 1.0, 95])
def test_impossible_levels_are_refused(level):
    with pytest.raises(ValueError, match="confidence level"):
        wilson_interval(3, 10, level=level)
    with pytest.raises(ValueError, match="confidence level"):
        bootstrap_ci([0.0, 1.0], level=level)


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
    assert r["ci"] == list(wilson_interval(2, 4)) and r["ci_method"] == "wilson"
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
    # A has 24 problems, B 20 of them (B was run with a smaller --limit): only the 20 shared ones are compared.
    a = [{"index": i, **sample(i < 5 or i >= 20)} for i in range(24)]
    b = [{"index": i, **sample(i < 9 and i != 0)} for i in range(20)]
    d = compare_records(a, b)
    assert d["n_shared"] == 20
    assert (d["accuracy_a"], d["accuracy_b"]) == (5 / 20, 8 / 20)
    assert d["difference"] == pytest.approx((8 - 5) / 20)
    assert (d["only_a_correct"], d["only_b_correct"]) == (1, 4)
    assert d["ci"][0] < d["difference"] < d["ci"][1]
    # the table shows each run's own accuracy (9/24 and 8/20) and says what the +15 points are the difference of
    table = compare_markdown("a", {"task": "gsm8k", **summarize(a)}, "b", {"task": "gsm8k", **summarize(b)}, d)
    assert "| accuracy | 37.5% | 40.0% |" in table and "B - A accuracy: +15.0 points" in table
    assert "On the 20 shared problems: A 25.0%, B 40.0%" in table
    same_size = compare_records(a[:20], b)
    assert "shared problems:" not in compare_markdown("a", summarize(a[:20]), "b", summarize(b), same_size)


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_compare_paired_interval_matches_normal_theory(level):
    # 400 shared problems; B - A per problem: +1 on 60, -1 on 20, 0 on 320. The bootstrap interval of the mean
    # difference must match mean +- z * sd / sqrt(n) (the central limit theorem holds well at n = 400).
    n = 400
    a = [{"index": i, **sample(60 <= i < 80 or i >= 300)} for i in range(n)]
    b = [{"index": i, **sample(i < 60 or i >= 300)} for i in range(n)]
    d = compare_records(a, b, seed=5, level=level)
    diffs = [1.0] * 60 + [-1.0] * 20 + [0.0] * 320
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    half = z * statistics.pstdev(diffs) / math.sqrt(n)
    assert d["difference"] == pytest.approx(0.1) and d["ci_level"] == level
    assert d["ci"][0] == pytest.approx(0.1 - half, abs=0.004)
    assert d["ci"][1] == pytest.approx(0.1 + half, abs=0.004)


@pytest.mark.parametrize(
    "k_a, n_a, k_b, n_b, expected",
    [
        # Newcombe (1998), table II, method 10, written as p1 - p2 there and B - A here (B = his p1):
        (48, 80, 56, 70, (0.2000, 0.0524, 0.3339)),  # 56/70 - 48/80: unequal n, unequal accuracy
        (3, 10, 9, 10, (0.6000, 0.1705, 0.8090)),  # 9/10 - 3/10
        (2, 7, 6, 7, (0.5714, 0.0582, 0.8062)),  # 6/7 - 2/7
        (0, 29, 5, 56, (0.0893, -0.0381, 0.1926)),  # 5/56 - 0/29: a zero count, unequal n
    ],
)
def test_newcombe_difference_matches_published_values(k_a, n_a, k_b, n_b, expected):
    assert tuple(round(x, 4) for x in newcombe_difference(k_a, n_a, k_b, n_b)) == expected


def test_compare_unpaired_runs_of_unequal_size_use_newcombe():
    # A: 48 of 80 problems, B: 56 of 70 other problems (Newcombe's example (a), so the interval is known).
    a = [{"index": i, **sample(i < 48)} for i in range(80)]
    b = [{"index": 100 + i, **sample(i < 56)} for i in range(70)]
    d = compare_records(a, b)
    assert d["n_shared"] == 0 and d["ci_method"].startswith("Newcombe")
    assert (d["accuracy_a"], d["accuracy_b"]) == (0.6, 0.8)
    assert round(d["difference"], 4) == 0.2
    assert [round(x, 4) for x in d["ci"]] == [0.0524, 0.3339]
    # at 90% it is Newcombe's formula on the two 90% Wilson intervals, written out here from their definitions
    d90 = compare_records(a, b, level=0.9)
    z = statistics.NormalDist().inv_cdf(0.95)

    def wilson(k, n):  # centre -+ half-width of the Wilson score interval
        p, z2 = k / n, z * z
        centre = (p + z2 / (2 * n)) / (1 + z2 / n)
        half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        return centre - half, centre + half

    (l_a, u_a), (l_b, u_b) = wilson(48, 80), wilson(56, 70)
    low = 0.2 - math.sqrt((0.8 - l_b) ** 2 + (u_a - 0.6) ** 2)
    high = 0.2 + math.sqrt((u_b - 0.8) ** 2 + (0.6 - l_a) ** 2)
    assert d90["ci"] == pytest.approx([low, high], abs=1e-12)
    assert d["ci"][0] < d90["ci"][0] < 0.2 < d90["ci"][1] < d["ci"][1]
    assert "90% CI" in compare_markdown("a", summarize(a), "b", summarize(b), d90)


def test_compare_unpaired_multi_sample_runs_resample_problems_not_samples():
    # K = 4 samples per problem, 30 problems per run, no shared problem; each problem is all right or all wrong,
    # so there are 30 independent outcomes per run, not 120: the interval must be as wide as for 30 vs 30 (Newcombe
    # on problems), not as narrow as Newcombe on 120 vs 120 samples treated as independent.
    a = [{"index": i, "samples": [sample(i < 12)] * 4} for i in range(30)]
    b = [{"index": 100 + i, "samples": [sample(i < 18)] * 4} for i in range(30)]
    d = compare_records(a, b, seed=2)
    assert d["n_shared"] == 0 and d["ci_method"].startswith("bootstrap over each run")
    assert d["difference"] == pytest.approx(0.2)
    width = d["ci"][1] - d["ci"][0]
    per_problem = newcombe_difference(12, 30, 18, 30)
    per_sample = newcombe_difference(48, 120, 72, 120)
    assert width == pytest.approx(per_problem[2] - per_problem[1], rel=0.1)
    assert width > 1.5 * (per_sample[2] - per_sample[1])


def test_timeouts_are_counted_listed_and_shown():
    # K = 1: 5 problems; problem 1 timed out; problem 4 has no field (scored before timeouts were reported), so it
    # did not time out.
    single = [{"index": i, **sample(i == 0, timeout=i == 1)} for i in range(4)] + [{"index": 4, **sample(True)}]
    r1 = summarize(single)
    assert r1["timeouts"] == [{"index": 1, "sample": 0}] and r1["timeout_rate"] == pytest.approx(1 / 5)
    # K = 3: 3 problems, sample 1 of problem 10 and sample 0 of problem 17 timed out: 2 of 9 samples.
    multi = [
        {"index": 10, "samples": [sample(True, timeout=False), sample(False, timeout=True), sample(True)]},
        {"index": 17, "samples": [sample(False, timeout=True), sample(False, timeout=False), sample(False)]},
        {"index": 20, "samples": [sample(False, timeout=False)] * 3},
    ]
    r = {"task": "math500", **summarize(multi)}
    assert r["timeouts"] == [{"index": 10, "sample": 1}, {"index": 17, "sample": 0}]
    assert r["timeout_rate"] == pytest.approx(2 / 9)
    text = summary_markdown(r)
    assert "| scoring timeout rate (scored as wrong) | 22.2% |" in text and "| 10/1, 17/0 |" in text
    # none timed out: the rate is 0 and summary.md does not mention timeouts
    clean = {"task": "math500", **summarize(single[:1] + single[2:])}
    assert clean["timeout_rate"] == 0.0 and clean["timeouts"] == []
    assert "timeout" not in summary_markdown(clean)
    # compare shows both runs' rates
    table = compare_markdown("a", clean, "b", r, compare_records(single, multi))
    assert "| scoring timeout rate | 0.0% | 22.2% |" in table


# --- empty inputs, Wilson's exact ends, seeds and levels reaching every interval, the bootstrap percentiles ---


def record(index: int, *correct: bool) -> dict:
    """A problem with one scored sample per flag (K = len(correct)); K = 1 is a flat record."""
    samples = [{"correct": c, "n_tokens": 10, "truncated": False, "format_ok": True, "reason": "ok"} for c in correct]
    return {"index": index, **samples[0]} if len(samples) == 1 else {"index": index, "samples": samples}


def test_an_empty_sample_gives_the_widest_interval():
    assert bootstrap_ci([]) == (0.0, 1.0)


PAIRED = ([record(i, i < 9) for i in range(30)], [record(i, i < 15) for i in range(30)])
UNPAIRED_K2 = ([record(i, i < 9, i < 5) for i in range(30)], [record(100 + i, i < 15, i < 12) for i in range(30)])
# K = 7, so that problem scores (sevenths) give intervals that move with the seed
K7_A = [record(i, *[(i * j) % 5 == 0 for j in range(7)]) for i in range(30)]
K7_B = [record(i, *[(i + j) % 3 == 0 for j in range(7)]) for i in range(30)]
K7_B_OTHER_PROBLEMS = [{**r, "index": 100 + r["index"]} for r in K7_B]


@pytest.mark.parametrize("b", [K7_B, K7_B_OTHER_PROBLEMS], ids=["paired", "unpaired"])
def test_intervals_are_reproducible_and_follow_the_seed(b):
    assert compare_records(K7_A, b, seed=5)["ci"] == compare_records(K7_A, b, seed=5)["ci"]
    assert compare_records(K7_A, b)["ci"] == compare_records(K7_A, b, seed=0)["ci"]
    assert len({tuple(compare_records(K7_A, b, seed=seed)["ci"]) for seed in range(5)}) > 1
    assert summarize(K7_A, seed=5)["ci"] == summarize(K7_A, seed=5)["ci"]


def test_the_paired_interval_says_how_it_was_made():
    d = compare_records(*PAIRED)
    assert d["ci_method"] == "paired bootstrap over shared problems" and d["n_shared"] == 30
    assert (d["only_a_correct"], d["only_b_correct"]) == (0, 6)


def test_the_unpaired_interval_brackets_b_minus_a():
    a, b = UNPAIRED_K2
    d = compare_records(a, b, seed=1)
    assert d["difference"] == pytest.approx((27 / 60) - (14 / 60))
    low, high = d["ci"]
    assert low < d["difference"] < high and high - low < 0.5  # around B - A, not B + A


def test_the_unpaired_bootstrap_draws_every_problem():
    # A's only solved problem is its first; B solves none. If the first problem could not be drawn, A would always
    # score 0 and the interval of B - A would be [0, 0].
    a = [record(0, True, True)] + [record(i, False, False) for i in range(1, 10)]
    b = [record(100 + i, False, False) for i in range(10)]
    low, high = compare_records(a, b)["ci"]
    assert low < 0 and high == 0


def test_one_run_with_k_1_and_one_with_k_2_resample_problems():
    # the samples of a K = 2 run are not independent, so Newcombe (for independent samples) is not used for either
    a = [record(i, i < 10) for i in range(30)]
    b = [record(100 + i, i < 15, i < 15) for i in range(30)]
    for x, y in ((a, b), (b, a)):
        assert compare_records(x, y)["ci_method"].startswith("bootstrap over each run")


def test_wilson_bounds_are_exact_only_at_the_ends():
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no trials: nothing known
    low, high = wilson_interval(14, 14, level=0.9)  # the formula's own upper bound rounds to 0.9999999999999999 here
    assert high == 1.0 and 0.7 < low < 1.0  # all successes: the upper bound is 1 exactly, the lower is not
    low, high = wilson_interval(11, 12, level=0.9)
    assert 0.6 < low < 11 / 12 < high < 1.0  # one failure: neither bound at an end


def test_no_records_summarise_to_nothing_measured():
    block = accuracy_block([], seed=3, level=0.9)
    assert block == {
        "n": 0,
        "n_samples": 0,
        "n_correct": 0,
        "accuracy": 0.0,
        "ci": [0.0, 1.0],
        "ci_level": 0.9,
        "ci_method": "wilson",
    }
    result = summarize([], seed=3, level=0.9)
    assert result["n"] == 0 and result["num_samples"] == 1 and "pass_at_k" not in result
    assert result["timeout_rate"] == 0.0 and result["timeouts"] == [] and result["reasons"] == {}
    assert result["length_tokens"] == {"all": None, "correct": None, "wrong": None}
    assert result["format_rate"] is None and "by_subject" not in result


def test_two_samples_per_problem_report_pass_at_1_and_2():
    records = [record(i, i < 4, i < 2) for i in range(8)]  # 2 problems both right, 2 half right, 4 none
    assert summarize(records)["pass_at_k"] == {"1": pytest.approx(3 / 8), "2": pytest.approx(4 / 8)}


def test_the_seed_and_level_reach_the_interval_of_every_group(monkeypatch):
    # bootstrap intervals of sevenths over 10,000 resamples rarely move with the seed, so the calls are watched
    import eval.metrics

    calls, real = [], eval.metrics.bootstrap_ci
    monkeypatch.setattr(eval.metrics, "bootstrap_ci", lambda v, seed, level: calls.append((seed, level)) or real(v))
    subjects = [{**r, "subject": "algebra" if r["index"] % 2 else "geometry", "level": r["index"] % 3} for r in K7_A]
    result = summarize(subjects, seed=11, level=0.8)
    assert sorted(result["by_subject"]) == ["algebra", "geometry"] and sorted(result["by_level"]) == ["0", "1", "2"]
    assert calls == [(11, 0.8)] * (1 + 2 + 3)  # the whole run, two subjects, three levels
    calls.clear()
    accuracy_block(K7_A, seed=11, level=0.8)
    assert calls == [(11, 0.8)]


def bootstrap_means(values: list[float], seed: int, resamples: int) -> list[float]:
    """The sorted means of the resamples the interval is read from (the same generator and draws)."""
    rng = np.random.default_rng(seed)
    data = np.asarray(values)
    return sorted(data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1))


def test_the_bootstrap_interval_is_the_level_s_percentiles_of_the_resampled_means():
    # 41 resamples: the 2.5th and 97.5th percentiles are exactly the 2nd smallest and 2nd largest of 41 means
    values = [0.0, 0.25, 1.0, 1.0, 0.5, 0.0, 0.75]
    means = bootstrap_means(values, seed=4, resamples=41)
    assert len(set(means[:3])) == 3 and len(set(means[-3:])) == 3  # neighbours differ: an off-by-a-bit shows
    assert bootstrap_ci(values, seed=4, resamples=41) == pytest.approx((means[1], means[39]), rel=0, abs=1e-12)


def test_the_unpaired_interval_is_the_level_s_percentiles_of_b_minus_a():
    a, b = [0.0, 0.5, 1.0, 0.5], [1.0, 0.5, 1.0, 0.0, 0.5]
    rng = np.random.default_rng(8)
    mean_a = np.asarray(a)[rng.integers(0, len(a), size=(41, len(a)))].mean(axis=1)
    mean_b = np.asarray(b)[rng.integers(0, len(b), size=(41, len(b)))].mean(axis=1)
    diffs = sorted(mean_b - mean_a)
    assert len(set(diffs[:3])) == 3 and len(set(diffs[-3:])) == 3
    interval = _unpaired_bootstrap(a, b, seed=8, level=0.95, resamples=41)
    assert interval == pytest.approx((diffs[1], diffs[39]), rel=0, abs=1e-12)
