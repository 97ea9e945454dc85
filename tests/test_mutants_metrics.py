"""Behaviour of eval.metrics that mutation testing (`make mutate`, docs/mutation.md) found unpinned: seeds reach
the intervals, the unpaired interval is an interval of B - A over every problem, and mixed K picks the bootstrap.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_metrics.py
"""

import numpy as np
import pytest

from eval.metrics import _unpaired_bootstrap, accuracy_block, bootstrap_ci, compare_records, summarize, wilson_interval


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
