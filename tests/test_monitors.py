"""Monitor arithmetic on hand-made groups, the reward-side recorder, and the JSON-lines logger (no model needed).

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_monitors.py
"""

import json
import math
import types

import pytest

from eval.monitors import (
    JsonlLogCallback,
    RewardMonitor,
    Sample,
    expected_degenerate_share,
    group_metrics,
    split_groups,
)


@pytest.mark.parametrize(
    "p, group_size, expected, tolerance",
    [
        (0.5, 4, 0.125, 1e-12),  # the curriculum's coin-flip prompt: 1/16 + 1/16
        (0.9, 4, 0.66, 0.005),  # an easy prompt wastes two groups in three at G=4
        (0.97, 4, 0.89, 0.005),  # a nearly solved prompt: almost every group is wasted
        (0.9, 16, 0.19, 0.005),  # a larger group recovers most of the signal
        (0.0, 8, 1.0, 0.0),  # never solved: every group all-wrong
        (1.0, 8, 1.0, 0.0),  # always solved: every group all-correct
    ],
)
def test_expected_degenerate_share_matches_curriculum_numbers(p, group_size, expected, tolerance):
    assert abs(expected_degenerate_share([p], group_size) - expected) <= tolerance


def test_expected_degenerate_share_is_a_mean_over_groups():
    assert expected_degenerate_share([0.5, 1.0], 4) == pytest.approx((0.125 + 1.0) / 2)
    assert math.isnan(expected_degenerate_share([], 4))  # no groups: undefined, not zero
    with pytest.raises(ValueError, match="group_size"):
        expected_degenerate_share([0.5], 0)


def group(pattern: str, reward_if_correct=1.1, reward_if_wrong=0.1, lengths=None, texts=None) -> list[Sample]:
    """'CCW.' -> correct, correct, wrong; lengths and texts per sample (defaults 10 and distinct)."""
    lengths = lengths or [10] * len(pattern)
    texts = texts or [f"t{i}" for i in range(len(pattern))]
    return [
        Sample(c == "C", reward_if_correct if c == "C" else reward_if_wrong, n, False, t)
        for c, n, t in zip(pattern, lengths, texts, strict=True)
    ]


def test_degenerate_groups_split_into_all_correct_and_all_wrong():
    metrics = group_metrics([group("CCCC"), group("WWWW"), group("WWWW"), group("CWCW")])
    assert metrics["monitor/degenerate_all_correct_share"] == 0.25
    assert metrics["monitor/degenerate_all_wrong_share"] == 0.5
    assert metrics["monitor/degenerate_share"] == 0.75
    # expected from each group's pass rate: (1 + 1 + 1 + 0.125) / 4
    assert metrics["monitor/degenerate_expected_share"] == pytest.approx(3.125 / 4)


def test_format_bonus_does_not_hide_an_all_wrong_group():
    # TRL's frac_reward_zero_std sees rewards 0.1 vs 0.0 here and calls the group informative; on correctness it is not
    samples = [Sample(False, 0.1, 10), Sample(False, 0.0, 10), Sample(False, 0.1, 10), Sample(False, 0.0, 10)]
    assert group_metrics([samples])["monitor/degenerate_all_wrong_share"] == 1.0


def test_lengths_by_correctness_and_truncation():
    samples = [Sample(True, 1.0, 20), Sample(False, 0.0, 100), Sample(False, 0.0, 512, True), Sample(True, 1.0, 40)]
    metrics = group_metrics([samples])
    assert metrics["monitor/length_correct"] == 30.0
    assert metrics["monitor/length_wrong"] == 306.0  # wrong answers include the truncated one
    assert metrics["monitor/length_truncated"] == 512.0
    assert metrics["monitor/truncated_rate"] == 0.25


def test_reward_correctness_gap_is_what_non_correctness_terms_pay():
    # a format-only hack: every answer wrong but paid 0.1; the gap is the whole reward
    hacked = group_metrics([group("WWWW", reward_if_wrong=0.1)])
    assert hacked["monitor/reward_correctness_gap"] == pytest.approx(0.1)
    honest = group_metrics([group("CCWW", reward_if_correct=1.0, reward_if_wrong=0.0)])
    assert honest["monitor/reward_correctness_gap"] == 0.0


@pytest.mark.parametrize(
    "texts, duplicate_share, collapsed",
    [
        (["a", "b", "c", "d"], 0.0, 0.0),  # all different
        (["a", "a", "c", "d"], 1 / 3, 0.0),  # one repeat out of G-1 possible
        (["a", "a", "a", "a"], 1.0, 1.0),  # the group collapsed onto one answer
    ],
)
def test_identical_completions_within_a_group(texts, duplicate_share, collapsed):
    metrics = group_metrics([group("WWWW", texts=texts)])
    assert metrics["monitor/duplicate_share"] == pytest.approx(duplicate_share)
    assert metrics["monitor/collapsed_group_share"] == collapsed


def test_identical_texts_in_different_groups_are_not_duplicates():
    metrics = group_metrics([group("WW", texts=["a", "b"]), group("WW", texts=["a", "b"])])
    assert metrics["monitor/duplicate_share"] == 0.0


def test_empty_input_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        group_metrics([[], []])


def test_split_groups_keeps_consecutive_runs():
    assert split_groups(["p", "p", "q", "q"], [1, 2, 3, 4]) == [[1, 2], [3, 4]]
    assert split_groups([], []) == []


def fake_correctness(completions, answer, **kwargs):
    return [1.0 if c[-1]["content"].endswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)]


def fake_format(completions, **kwargs):
    return [0.1 if "####" in c[-1]["content"] else 0.0 for c in completions]


def call_batch(monitor: RewardMonitor, texts: list[str], answers: list[str], prompts: list[str], ids: list[list[int]]):
    logged, extra = {}, {}
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    kwargs = dict(
        prompts=prompts, completion_ids=ids, answer=answers, trainer_state=types.SimpleNamespace(global_step=4)
    )
    kwargs |= dict(log_metric=lambda name, value: logged.setdefault(name, value), log_extra=extra.__setitem__)
    outputs = [f(completions=completions, **kwargs) for f in monitor.wrapped()]
    return outputs, logged, extra


def test_reward_monitor_records_a_batch_and_logs_through_trl_hooks():
    monitor = RewardMonitor(
        [fake_correctness, fake_format], [1.0, 1.0], "gsm8k", max_completion_length=5, correctness_index=0
    )
    texts = ["#### 8", "#### 7", "so 8", "#### 3"]  # group 1 (gold 8): correct+format, wrong+format; group 2 (gold 3)
    outputs, logged, extra = call_batch(
        monitor, texts, ["8", "8", "3", "3"], ["p1", "p1", "p2", "p2"], [[1] * 2, [1] * 5, [1] * 3, [1] * 2]
    )
    assert outputs == [[1.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.0, 0.1]]  # the wrapped rewards return what they wrap
    assert [f.__name__ for f in monitor.wrapped()] == ["fake_correctness", "fake_format"]  # TRL's keys unchanged
    assert logged["monitor/correct_rate"] == 0.5
    assert logged["monitor/reward_mean"] == pytest.approx((1.1 + 0.1 + 0.0 + 1.1) / 4)
    assert logged["monitor/degenerate_share"] == 0.0
    assert logged["monitor/length_truncated"] == 5.0  # only the 5-token completion hit max_completion_length
    assert extra == {"correct": [True, False, False, True], "n_tokens": [2, 5, 3, 2]}
    top = monitor.pop_top()
    assert [row["reward"] for row in top] == pytest.approx([1.1, 1.1, 0.1, 0.0])
    assert top[0]["step"] == 5 and top[0]["correct"] and monitor.pop_top() == []  # popped: the next window starts empty


def test_reward_monitor_scores_correctness_itself_when_the_reward_set_has_none():
    # a format-only run: correctness must still be measured, with eval's scorer
    monitor = RewardMonitor([fake_format], None, "gsm8k", max_completion_length=100)
    _, logged, _ = call_batch(monitor, ["#### 8", "#### 9"], ["8", "8"], ["p", "p"], [[1], [1]])
    assert logged["monitor/correct_rate"] == 0.5
    assert logged["monitor/reward_correctness_gap"] == pytest.approx(0.1 - 0.5)


def test_top_table_keeps_the_20_best():
    monitor = RewardMonitor([fake_format], None, "gsm8k", max_completion_length=100, correctness_index=None, top_k=3)
    texts = ["#### 1", "x", "#### 2", "y", "#### 3"]
    call_batch(monitor, texts, ["1"] * 5, ["p"] * 5, [[1]] * 5)
    assert [row["completion"] for row in monitor.pop_top()] == ["#### 1", "#### 2", "#### 3"]


def test_jsonl_log_callback_appends_one_line_per_log(tmp_path):
    path = tmp_path / "sub" / "log.jsonl"
    callback = JsonlLogCallback(path)
    for step in (1, 2):
        state = types.SimpleNamespace(global_step=step, epoch=step / 10, is_world_process_zero=True)
        callback.on_log(None, state, None, logs={"loss": 0.5, "monitor/length_correct": float("nan")})
    other_rank = types.SimpleNamespace(global_step=3, epoch=0.3, is_world_process_zero=False)
    callback.on_log(None, other_rank, None, logs={"loss": 0.1})  # only the main process writes
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records == [
        {"loss": 0.5, "monitor/length_correct": None, "step": 1, "epoch": 0.1},
        {"loss": 0.5, "monitor/length_correct": None, "step": 2, "epoch": 0.2},
    ]
