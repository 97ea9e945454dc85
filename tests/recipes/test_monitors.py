"""Monitor arithmetic on hand-made groups (``eval.group_metrics``, ``eval.degenerate``), the reward-side recorder,
and the JSON-lines logger (no model needed).

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_monitors.py
"""

import functools
import json
import logging
import math
import types

import pytest

import eval.run
from eval.degenerate import expected_degenerate_share
from eval.group_metrics import Sample, group_metrics, split_groups
from eval.jsonl import read_jsonl
from recipes.common import JsonlLogCallback
from recipes.monitors import (
    MonitorCallback,
    RewardMonitor,
    WandbConfigCallback,
    held_out_metrics,
    make_monitored_trainer_class,
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
    assert "monitor/degenerate_expected_share" not in metrics  # a prediction needs earlier batches: RewardMonitor's


def test_group_metrics_count_only_whole_groups_of_g():
    # a 2-answer piece of a group whose other answers another process holds is not an all-correct group
    metrics = group_metrics([group("CC"), group("WWCW"), group("WWWW")], group_size=4)
    assert metrics["monitor/degenerate_share"] == 0.5 and metrics["monitor/degenerate_all_correct_share"] == 0.0
    assert metrics["monitor/correct_rate"] == 0.3  # per-answer metrics still count every answer


def test_unscorable_completions_are_left_out_of_reward_mean_as_trl_does():
    nan = float("nan")
    samples = [Sample(True, 10.05, 5), Sample(False, nan, 5), Sample(False, 0.05, 5), Sample(False, nan, 5)]
    metrics = group_metrics([samples])
    assert metrics["monitor/reward_mean"] == pytest.approx(5.05)  # TRL: nanmean; a 0 for the failed judge: 2.525
    assert metrics["monitor/unscorable_rate"] == 0.5
    assert metrics["monitor/reward_correctness_gap"] == pytest.approx((9.05 + 0.05) / 2)  # over scorable answers


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
    # the same prompt twice in a row (duplicate rows, the judge lab's copies) is two groups of G, not one of 2G
    assert split_groups(["p"] * 4 + ["q"] * 2, [1, 2, 3, 4, 5, 6], group_size=2) == [[1, 2], [3, 4], [5, 6]]


def fake_correctness(completions, answer, **kwargs):
    return [1.0 if c[-1]["content"].endswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)]


def fake_format(completions, **kwargs):
    return [0.1 if "####" in c[-1]["content"] else 0.0 for c in completions]


def call_batch(monitor: RewardMonitor, texts, answers, prompts, ids, **columns):
    """One generation batch through the wrapped rewards, as TRL calls them; returns outputs, metrics, extra columns."""
    logged, extra = {}, {}
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    kwargs = dict(
        prompts=prompts, completion_ids=ids, answer=answers, trainer_state=types.SimpleNamespace(global_step=4)
    )
    kwargs |= dict(log_metric=lambda name, value: logged.setdefault(name, value), log_extra=extra.__setitem__)
    outputs = [f(completions=completions, **kwargs, **columns) for f in monitor.wrapped()]
    return outputs, logged, extra


def test_reward_monitor_records_a_batch_and_logs_through_trl_hooks():
    funcs, weights = [fake_correctness, fake_format], [10.0, 0.5]  # not 1.0: an unweighted total would show
    monitor = RewardMonitor(funcs, weights, "gsm8k", max_completion_length=5, correctness_index=0, group_size=2)
    texts = ["#### 8", "#### 7", "so 8", "#### 3"]  # group 1 (gold 8): correct+format, wrong+format; group 2 (gold 3)
    outputs, logged, extra = call_batch(
        monitor, texts, ["8", "8", "3", "3"], ["p1", "p1", "p2", "p2"], [[1] * 2, [1] * 5, [1] * 3, [1] * 2]
    )
    assert outputs == [[1.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.0, 0.1]]  # the wrapped rewards return what they wrap
    assert [f.__name__ for f in monitor.wrapped()] == ["fake_correctness", "fake_format"]  # TRL's keys unchanged
    assert logged["monitor/correct_rate"] == 0.5
    assert logged["monitor/reward_mean"] == pytest.approx((10.05 + 0.05 + 0.0 + 10.05) / 4)
    assert logged["monitor/degenerate_share"] == 0.0
    assert logged["monitor/length_truncated"] == 5.0  # only the 5-token completion hit max_completion_length
    assert logged["monitor/truncated_rate"] == 0.25
    assert extra == {"correct": [True, False, False, True], "n_tokens": [2, 5, 3, 2]}
    top = monitor.pop_top()
    assert [row["reward"] for row in top] == pytest.approx([10.05, 10.05, 0.05, 0.0])
    assert top[0]["step"] == 5 and top[0]["correct"] and monitor.pop_top() == []  # popped: the next window starts empty


def test_truncation_follows_trls_stop_tokens_when_known():
    # TRL's clipped_ratio: a completion is cut off when its last token is not an end-of-sequence or pad token
    monitor = RewardMonitor([fake_format], None, "gsm8k", 4, correctness_index=None, group_size=3)
    monitor.stop_token_ids = [0, 9]
    ids = [[5, 5, 5, 0], [5, 5, 5, 5], [5, 9]]  # ends at EOS at the budget; cut at the budget; ends at pad early
    _, logged, _ = call_batch(monitor, ["#### 1"] * 3, ["1"] * 3, ["p"] * 3, ids)
    assert logged["monitor/truncated_rate"] == pytest.approx(1 / 3) and logged["monitor/length_truncated"] == 4.0


def test_reward_monitor_scores_correctness_itself_when_the_reward_set_has_none():
    # a format-only run: correctness must still be measured, with eval's scorer
    monitor = RewardMonitor([fake_format], [10.0], "gsm8k", max_completion_length=100, group_size=2)
    _, logged, _ = call_batch(monitor, ["#### 8", "#### 9"], ["8", "8"], ["p", "p"], [[1], [1]])
    assert logged["monitor/correct_rate"] == 0.5
    assert logged["monitor/reward_correctness_gap"] == pytest.approx(1.0 - 0.5)  # format weighted 10: 10 x 0.1


def says_right(completions, **kwargs):
    """A correctness reward whose verdict differs from eval's scorer: 'right' is correct, whatever the gold."""
    return [1.0 if "right" in c[-1]["content"] else 0.0 for c in completions]


def test_reward_monitor_takes_the_verdict_of_the_runs_correctness_reward_wherever_it_is():
    # correctness at index 1, not 0; score_completion would call all four wrong (no '####'), the run's reward not
    monitor = RewardMonitor([fake_format, says_right], [0.5, 10.0], "gsm8k", 100, correctness_index=1, group_size=2)
    texts = ["right", "wrong", "right", "right"]
    _, logged, extra = call_batch(monitor, texts, ["8"] * 4, ["p", "p", "q", "q"], [[1]] * 4)
    assert extra["correct"] == [True, False, True, True] and logged["monitor/correct_rate"] == 0.75
    assert logged["monitor/degenerate_all_correct_share"] == 0.5


def test_timeout_rate_counts_timeouts_during_the_batchs_reward_calls(monkeypatch):
    import rewards.verify

    clock = {"timeout": 100, "refused": 7, "checker_error": 0}  # comparisons before the batch must not count
    monkeypatch.setattr(rewards.verify, "no_verdict_counts", lambda: dict(clock))

    def slow_correctness(completions, **kwargs):
        clock["timeout"] += 2  # two comparisons given up during this reward call
        clock["refused"] += 1  # and one refused from its text
        return [0.0] * len(completions)

    def slow_format(completions, **kwargs):
        clock["timeout"] += 1
        return [0.1] * len(completions)

    monitor = RewardMonitor([slow_correctness, slow_format], [10.0, 0.5], "gsm8k", 100, 0, group_size=3)
    _, logged, _ = call_batch(monitor, ["#### 1"] * 6, ["2"] * 6, ["p"] * 3 + ["q"] * 3, [[1]] * 6)
    assert logged["monitor/timeout_rate"] == pytest.approx(3 / 6)
    assert logged["monitor/refused_rate"] == pytest.approx(1 / 6)
    assert logged["monitor/no_verdict_rate"] == pytest.approx(4 / 6)
    clock["timeout"] += 50  # e.g. a held-out evaluation between batches
    clock["checker_error"] += 3
    _, logged, _ = call_batch(monitor, ["#### 1"] * 6, ["2"] * 6, ["p"] * 3 + ["q"] * 3, [[1]] * 6)
    assert logged["monitor/timeout_rate"] == pytest.approx(3 / 6)
    assert logged["monitor/no_verdict_rate"] == pytest.approx(4 / 6)


def test_the_monitor_counts_a_static_refusal_and_a_timeout_as_no_verdict(scripted_pool):
    # the real checker: a product of 20,000 ones is 1, but is refused from its text; the other pair times out twice
    from rewards import get_reward
    from rewards.verify import Verdict

    scripted_pool(Verdict.TIMEOUT, Verdict.TIMEOUT)
    monitor = RewardMonitor([get_reward("math_correctness")], None, "math", 100, 0, group_size=2)
    texts = ["\\boxed{\\prod_{k=1}^{20000} 1}", "\\boxed{\\frac{5}{7}}", "\\boxed{1}", "\\boxed{2}"]
    outputs, logged, _ = call_batch(monitor, texts, ["1", "\\frac{10}{14}", "1", "1"], ["p", "p", "q", "q"], [[1]] * 4)
    assert outputs == [[0.0, 0.0, 1.0, 0.0]]  # no verdict is paid 0
    assert logged["monitor/timeout_rate"] == pytest.approx(1 / 4)
    assert logged["monitor/refused_rate"] == pytest.approx(1 / 4)
    assert logged["monitor/no_verdict_rate"] == pytest.approx(2 / 4)


def run_batch(monitor: RewardMonitor, groups: dict[str, str], **columns) -> dict:
    """One batch of groups {prompt: 'CCWW'}: 'C' answers the gold, 'W' does not. Returns the logged metrics."""
    prompts = [p for p, pattern in groups.items() for _ in pattern]
    texts = ["#### 8" if c == "C" else "#### 9" for pattern in groups.values() for c in pattern]
    return call_batch(monitor, texts, ["8"] * len(texts), prompts, [[1]] * len(texts), **columns)[1]


def test_expected_degenerate_share_is_predicted_from_earlier_batches_only():
    monitor = RewardMonitor([fake_correctness], [10.0], "gsm8k", 100, correctness_index=0, group_size=4)
    first = run_batch(monitor, {"p1": "CCWW", "p2": "WWWW"})
    assert first["monitor/degenerate_share"] == 0.5
    assert math.isnan(first["monitor/degenerate_expected_share"])  # nothing earlier, no prior: no prediction
    assert first["monitor/degenerate_expected_source/none"] == 1.0
    # p1 again, now all wrong: predicted from its first visit (2 of 4 right: C(2,4) + C(2,4) = 0, not degenerate);
    # p3 is new: predicted from the earlier groups of other prompts (p1 not degenerate, p2 degenerate: 0.5)
    second = run_batch(monitor, {"p1": "WWWW", "p3": "CWCW"})
    assert second["monitor/degenerate_share"] == 0.5  # observed: p1 degenerate, p3 not
    assert second["monitor/degenerate_expected_share"] == pytest.approx((0.0 + 0.5) / 2)  # predicted: they differ
    assert second["monitor/degenerate_expected_source/prompt"] == 0.5
    assert second["monitor/degenerate_expected_source/pool"] == 0.5


def test_expected_degenerate_share_uses_g_and_a_pass_rate_prior():
    # 2 groups per batch, G = 4: the prior pass rate 0.5 predicts 0.5**4 + 0.5**4 (with the number of groups, 2,
    # in place of G it would be 0.5)
    monitor = RewardMonitor([fake_correctness], None, "gsm8k", 100, correctness_index=0, group_size=4)
    logged = run_batch(monitor, {"p1": "CCWW", "p2": "CWWW"}, pass_rate=[0.5] * 8)
    assert logged["monitor/degenerate_expected_share"] == pytest.approx(0.125)
    assert logged["monitor/degenerate_expected_source/prior"] == 1.0


def test_reward_monitor_cuts_a_repeated_prompt_into_groups_of_g():
    # the same prompt in two rows of the batch (duplicate data rows, the judge lab's copies): two groups of G = 4
    monitor = RewardMonitor([fake_correctness], [10.0], "gsm8k", 100, correctness_index=0, group_size=4)
    texts = ["#### 8"] * 4 + ["#### 9"] * 4  # first group all right, second all wrong (one group of 8: not degenerate)
    _, logged, _ = call_batch(monitor, texts, ["8"] * 8, ["p"] * 8, [[1]] * 8)
    assert logged["monitor/degenerate_share"] == 1.0 and logged["monitor/degenerate_all_correct_share"] == 0.5


def test_top_table_keeps_the_20_best():
    monitor = RewardMonitor([fake_format], None, "gsm8k", max_completion_length=100, top_k=3, group_size=5)
    texts = ["#### 1", "x", "#### 2", "y", "#### 3"]
    call_batch(monitor, texts, ["1"] * 5, ["p"] * 5, [[1]] * 5)
    assert [row["completion"] for row in monitor.pop_top()] == ["#### 1", "#### 2", "#### 3"]


def test_unscorable_completions_stay_out_of_the_monitors_totals_and_top_table():
    def judge(completions, **kwargs):  # a judge that failed on the second answer
        return [0.8, None, 0.2, 0.4]

    def format_if_scored(completions, **kwargs):
        return [0.1, None, 0.1, 0.1]

    monitor = RewardMonitor([judge, format_if_scored], [10.0, 0.5], "gsm8k", 100, group_size=2)
    _, logged, _ = call_batch(monitor, ["a", "b", "c", "d"], ["8"] * 4, ["p", "p", "q", "q"], [[1]] * 4)
    assert logged["monitor/reward_mean"] == pytest.approx((8.05 + 2.05 + 4.05) / 3)  # as TRL's `reward`
    assert logged["monitor/unscorable_rate"] == 0.25
    assert [row["completion"] for row in monitor.pop_top()] == ["a", "d", "c"]


def test_probes_at_train_start_use_the_runs_weights(tmp_path):
    from rewards import get_reward

    monitor = RewardMonitor(
        [get_reward("gsm8k_correctness"), get_reward("gsm8k_format")], [10.0, 0.5], "gsm8k", 100, 0, group_size=4
    )
    problems = [{"question": "Tom has 3 apples and buys 5 more. How many now?", "answer": "8"}]
    callback = MonitorCallback(monitor, tmp_path, probe_problems=problems, answer_style="gsm8k")
    state = types.SimpleNamespace(global_step=0, is_world_process_zero=True)
    callback.on_train_begin(None, state, None)
    assert callback.pending["probe/genuine_correct"] == pytest.approx(10.05)  # 10 x 1.0 + 0.5 x 0.1
    assert callback.pending["probe/bare_wrong"] == pytest.approx(0.05)


def test_jsonl_log_callback_appends_one_line_per_log(tmp_path):
    path = tmp_path / "sub" / "log.jsonl"
    callback = JsonlLogCallback(path)
    for step in (1, 2):
        state = types.SimpleNamespace(global_step=step, epoch=step / 10, is_world_process_zero=True)
        callback.on_log(None, state, None, logs={"loss": 0.5, "monitor/length_correct": float("nan")})
    other_rank = types.SimpleNamespace(global_step=3, epoch=0.3, is_world_process_zero=False)
    callback.on_log(None, other_rank, None, logs={"loss": 0.1})  # only the main process writes
    records = read_jsonl(path)
    assert records == [
        {"loss": 0.5, "monitor/length_correct": None, "step": 1, "epoch": 0.1},
        {"loss": 0.5, "monitor/length_correct": None, "step": 2, "epoch": 0.2},
    ]


def test_held_out_metrics_carry_the_eval_timeout_rate(monkeypatch):
    """A held-out evaluation whose checker timed out says so on the dashboard (eval/timeout_rate), not only in files."""
    import eval.run

    result = {"accuracy": 0.25, "n": 8, "timeout_rate": 0.125, "timeouts": [{"index": 3, "sample": 0}]}
    result |= {"length": {"correct": 5.0}, "format_rate": 0.5, "ci": [0.1, 0.5]}
    monkeypatch.setattr(eval.run, "evaluate", lambda model, tokenizer, **kw: result)
    model = types.SimpleNamespace(training=True, eval=lambda: None, train=lambda mode: None)
    out = held_out_metrics(model, None, task_name="gsm8k")
    assert out["eval/timeout_rate"] == 0.125
    assert out["eval/accuracy"] == 0.25 and out["eval/length/correct"] == 5.0 and out["eval/format_rate"] == 0.5
    assert "eval/timeouts" not in out and "eval/ci" not in out  # lists are not scalars for a dashboard


# --- callbacks and reward wrapper on fakes: held-out evaluation, pending metrics, top table, probes, groups ---


class FakeModel:
    """Records the train/eval switches held_out_metrics makes."""

    def __init__(self, training: bool):
        self.training = training
        self.calls = []

    def eval(self):
        self.calls.append("eval")
        self.training = False

    def train(self, mode: bool):
        self.calls.append(f"train({mode})")
        self.training = mode


@pytest.fixture
def fake_evaluate(monkeypatch):
    """eval.run.evaluate replaced by a recorder returning a fixed result (its keyword arguments are kept)."""
    seen = []

    def evaluate(model, tokenizer, **kwargs):
        seen.append({"training": model.training, "tokenizer": tokenizer, **kwargs})
        result = {"accuracy": 0.375, "n": 16, "length": {"correct": 12.0, "wrong": 30.0}, "empty_rate": 0.0625}
        return result | {"truncation_rate": 0.125, "format_rate": 0.5, "timeout_rate": 0.25, "reasons": {"ok": 6}}

    monkeypatch.setattr(eval.run, "evaluate", evaluate)
    return seen


def monitor_with_top(top_k: int = 2) -> RewardMonitor:
    return RewardMonitor([fake_format], [3.0], "gsm8k", 50, correctness_index=None, top_k=top_k, group_size=3)


@pytest.mark.parametrize(
    "eval_every, step, model_given, runs",
    [
        (3, 6, True, True),  # a multiple of eval_every
        (1, 7, True, True),  # eval_every 1: every step
        (3, 7, True, False),  # not a multiple
        (0, 6, True, False),  # eval_every 0: never
        (3, 6, False, False),  # no model handed to the callback: nothing to evaluate
    ],
)
def test_held_out_evaluation_runs_every_n_steps_only(tmp_path, fake_evaluate, eval_every, step, model_given, runs):
    callback = MonitorCallback(
        monitor_with_top(), tmp_path, eval_every=eval_every, eval_kwargs={"task_name": "math500", "limit": 7}
    )
    state = types.SimpleNamespace(global_step=step)
    model = FakeModel(training=True) if model_given else None
    callback.on_step_end(None, state, None, model=model, processing_class="tok")
    assert bool(fake_evaluate) == runs
    if runs:
        assert fake_evaluate[0]["task_name"] == "math500" and fake_evaluate[0]["limit"] == 7
        assert fake_evaluate[0]["tokenizer"] == "tok" and not fake_evaluate[0]["training"]  # greedy, eval mode
        assert callback.pending["eval/accuracy"] == 0.375 and callback.pending["eval/n"] == 16
    else:
        assert callback.pending == {}


def test_held_out_metrics_restore_the_models_mode_and_keep_only_dashboard_scalars(fake_evaluate):
    for training in (True, False):
        model = FakeModel(training)
        out = held_out_metrics(model, None, task_name="gsm8k")
        assert model.calls == ["eval", f"train({training})"] and model.training == training
    assert out == {
        "eval/accuracy": 0.375,
        "eval/n": 16,
        "eval/length/correct": 12.0,
        "eval/length/wrong": 30.0,
        "eval/empty_rate": 0.0625,
        "eval/truncation_rate": 0.125,
        "eval/format_rate": 0.5,
        "eval/timeout_rate": 0.25,
    }


def test_a_held_out_evaluation_keeps_the_metrics_already_waiting(tmp_path, fake_evaluate):
    callback = MonitorCallback(monitor_with_top(), tmp_path, eval_every=2)
    callback.pending = {"probe/violations": 3}
    callback.on_step_end(None, types.SimpleNamespace(global_step=4), None, model=FakeModel(training=True))
    assert callback.pending["probe/violations"] == 3 and callback.pending["eval/accuracy"] == 0.375


def test_held_out_metrics_restore_train_mode_when_the_evaluation_fails(monkeypatch):
    def broken(model, tokenizer, **kwargs):
        raise RuntimeError("generation failed")

    monkeypatch.setattr(eval.run, "evaluate", broken)
    model = FakeModel(training=True)
    with pytest.raises(RuntimeError, match="generation failed"):
        held_out_metrics(model, None)
    assert model.training


def test_pop_pending_hands_over_the_pending_metrics_once_and_writes_the_window_table(tmp_path):
    monitor = monitor_with_top(top_k=2)
    call_batch(monitor, ["#### 1", "no", "#### 3"], ["1", "2", "3"], ["p"] * 3, [[1]] * 3)
    callback = MonitorCallback(monitor, tmp_path / "run")
    callback.pending = {"probe/violations": 2}
    assert callback.pop_pending(step=11) == {"probe/violations": 2}
    assert callback.pop_pending(step=12) == {}  # handed over once
    lines = (tmp_path / "run" / "top_completions.jsonl").read_text().splitlines()
    assert len(lines) == 1  # the second window saw no completions: no line
    record = json.loads(lines[0])
    assert record["step"] == 11 and [r["completion"] for r in record["rows"]] == ["#### 1", "#### 3"]
    assert [r["correct"] for r in record["rows"]] == [True, True]


def test_only_the_main_process_writes_the_top_table(tmp_path):
    monitor = monitor_with_top()
    call_batch(monitor, ["#### 1", "no", "#### 3"], ["1", "2", "3"], ["p"] * 3, [[1]] * 3)
    callback = MonitorCallback(monitor, tmp_path)
    callback.pending = {"eval/accuracy": 0.5}
    assert callback.pop_pending(step=4, main_process=False) == {"eval/accuracy": 0.5}
    assert not (tmp_path / "top_completions.jsonl").exists()
    assert monitor.pop_top() == []  # the other process forgets its window too


def test_the_top_table_goes_to_wandb_when_reported_there(tmp_path, monkeypatch):
    import wandb

    logged = []
    monkeypatch.setattr(wandb, "run", object())
    monkeypatch.setattr(wandb, "log", lambda data, commit=True: logged.append((data, commit)))
    monitor = monitor_with_top()
    call_batch(monitor, ["#### 1", "no", "#### 3"], ["1", "2", "3"], ["p"] * 3, [[1]] * 3)
    MonitorCallback(monitor, tmp_path, report_to=("wandb",)).pop_pending(step=9)
    [(data, commit)] = logged
    table = data["monitor/top_completions"]
    assert commit is False  # rides on the trainer's next log (wandb commits on None)
    assert table.columns == ["step", "reward", "correct", "n_tokens", "truncated", "gold", "completion"]
    assert [row[6] for row in table.data] == ["#### 1", "#### 3"] and table.data[0][0] == 5  # trainer_state step + 1

    monkeypatch.setattr(wandb, "run", None)  # no wandb run: nothing logged
    call_batch(monitor, ["#### 1", "no", "#### 3"], ["1", "2", "3"], ["p"] * 3, [[1]] * 3)
    MonitorCallback(monitor, tmp_path, report_to=("wandb",)).pop_pending(step=10)
    assert len(logged) == 1


class FakeTrainer:
    """Stands in for GRPOTrainer: records what reaches its log."""

    def __init__(self, training: bool):
        self.model = types.SimpleNamespace(training=training)
        self.state = types.SimpleNamespace(global_step=21)
        self.logged = []

    def is_world_process_zero(self):
        return False

    def log(self, logs, start_time=None):
        self.logged.append((dict(logs), start_time))


def test_the_monitored_trainer_adds_pending_metrics_to_training_logs_only(tmp_path):
    trainer_class = make_monitored_trainer_class(FakeTrainer)
    assert trainer_class.__name__ == "MonitoredFakeTrainer" and issubclass(trainer_class, FakeTrainer)
    steps = []
    callback = types.SimpleNamespace(
        pop_pending=lambda step, main: steps.append((step, main)) or {"probe/violations": 1}
    )
    trainer = trainer_class(training=True, monitor_callback=callback)
    trainer.log({"loss": 0.5}, start_time=3.0)
    assert trainer.logged == [({"loss": 0.5, "probe/violations": 1}, 3.0)] and steps == [(21, False)]

    evaluating = trainer_class(training=False, monitor_callback=callback)  # TRL's evaluation logs: the values wait
    evaluating.log({"eval_loss": 0.7})
    assert evaluating.logged == [({"eval_loss": 0.7}, None)] and len(steps) == 1

    bare = trainer_class(training=True)  # built without a callback: the log passes through
    bare.log({"loss": 0.1})
    assert bare.logged == [({"loss": 0.1}, None)]


def probe_callback(tmp_path, **kwargs) -> MonitorCallback:
    from rewards import get_reward

    monitor = RewardMonitor([get_reward("gsm8k_format")], [2.0], "gsm8k", 100, group_size=4)
    problems = [{"question": "Ann has 4 pens and gets 9 more. How many now?", "answer": "13"}]
    return MonitorCallback(monitor, tmp_path, probe_problems=problems, answer_style="gsm8k", **kwargs)


def test_probes_at_train_start_count_violations_warn_and_write_probes_json(tmp_path, caplog):
    callback = probe_callback(tmp_path / "runs" / "out")  # two folders that do not exist yet
    with caplog.at_level(logging.WARNING, logger="recipes.monitors"):
        callback.on_train_begin(None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None)
    hacks = [name for name, info in callback.probes.items() if info["violation"]]
    assert hacks  # a format-only reward pays the format hacks: the case this test is about
    assert callback.pending["probe/violations"] == len(hacks)
    assert all(callback.pending[f"probe/{n}"] == info["score"] for n, info in callback.probes.items())
    warning = f"REWARD HACK PROBES pass under this reward set: {hacks} (see probes.json)"
    assert [r.getMessage() for r in caplog.records if r.name == "recipes.monitors"] == [warning]
    written = json.loads((tmp_path / "runs" / "out" / "probes.json").read_text())
    assert sorted(written) == sorted(callback.probes)


def test_probes_are_not_rerun_on_resume_nor_written_by_other_processes(tmp_path):
    resumed = probe_callback(tmp_path / "a")
    resumed.on_train_begin(None, types.SimpleNamespace(global_step=1, is_world_process_zero=True), None)
    assert resumed.pending == {} and not (tmp_path / "a").exists()
    other_rank = probe_callback(tmp_path / "b")
    other_rank.on_train_begin(None, types.SimpleNamespace(global_step=0, is_world_process_zero=False), None)
    assert "probe/violations" in other_rank.pending and not (tmp_path / "b").exists()


def test_honest_rewards_raise_no_probe_warning(tmp_path, caplog):
    from rewards import get_reward

    monitor = RewardMonitor([get_reward("gsm8k_correctness")], [1.0], "gsm8k", 100, group_size=4)
    problems = [{"question": "Ann has 4 pens and gets 9 more. How many now?", "answer": "13"}]
    callback = MonitorCallback(monitor, tmp_path, probe_problems=problems)
    with caplog.at_level(logging.WARNING, logger="recipes.monitors"):
        callback.on_train_begin(None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None)
    assert callback.pending["probe/violations"] == 0 and "REWARD HACK" not in caplog.text


def test_the_resolved_config_goes_to_the_wandb_run(tmp_path, monkeypatch):
    import wandb

    updates = []
    monkeypatch.setattr(wandb, "run", object())
    monkeypatch.setattr(wandb, "config", types.SimpleNamespace(update=lambda d, **kw: updates.append((d, kw))))
    config = {"learning_rate": 3e-6, "reward_funcs": ["gsm8k_correctness"]}
    state = types.SimpleNamespace(global_step=0, is_world_process_zero=True)
    WandbConfigCallback(config, report_to=["wandb"]).on_train_begin(None, state, None)
    assert updates == [({"leash": config}, {"allow_val_change": True})]
    WandbConfigCallback(config, report_to=["tensorboard"]).on_train_begin(None, state, None)
    monkeypatch.setattr(wandb, "run", None)  # wandb not started: nothing to update
    WandbConfigCallback(config, report_to=["wandb"]).on_train_begin(None, state, None)
    assert len(updates) == 1


@pytest.mark.parametrize(
    "prior, source",
    [
        (0.0, "prior"),  # never solved: a usable prior at the edge
        (1.0, "prior"),  # always solved
        (0.25, "prior"),
        (1.5, "none"),  # outside [0, 1]
        (-0.25, "none"),
        (True, "none"),  # a bool is not a pass rate
        ("0.5", "none"),  # nor is text
        (None, "none"),
    ],
)
def test_which_pass_rates_count_as_a_prior(prior, source):
    monitor = RewardMonitor([fake_correctness], [2.0], "gsm8k", 100, correctness_index=0, group_size=3)
    _, logged, _ = call_batch(monitor, ["#### 8"] * 3, ["8"] * 3, ["p"] * 3, [[1]] * 3, pass_rate=[prior] * 3)
    assert logged[f"monitor/degenerate_expected_source/{source}"] == 1.0
    if source == "prior":
        assert logged["monitor/degenerate_expected_share"] == pytest.approx(prior**3 + (1 - prior) ** 3)


def test_groups_follow_the_question_column_when_there_are_no_prompts():
    monitor = RewardMonitor([fake_correctness], [2.0], "gsm8k", 100, correctness_index=0, group_size=2)
    completions = [[{"role": "assistant", "content": t}] for t in ["#### 8", "#### 8", "#### 8", "#### 9"]]
    logged = {}
    kwargs = dict(answer=["8"] * 4, question=["q1", "q1", "q2", "q2"], log_metric=logged.__setitem__)
    for f in monitor.wrapped():
        f(completions=completions, **kwargs)
    assert logged["monitor/degenerate_all_correct_share"] == 0.5  # q1 all right, q2 split
    assert monitor.pop_top()[0]["step"] is None  # no trainer_state: no step to name


def test_rows_without_prompts_or_questions_are_groups_of_one():
    monitor = RewardMonitor([fake_correctness], [2.0], "gsm8k", 100, correctness_index=0, group_size=1)
    completions = [[{"role": "assistant", "content": t}] for t in ["#### 8", "#### 9", "#### 8"]]
    logged = {}
    for f in monitor.wrapped():
        f(completions=completions, answer=["8"] * 3, log_metric=logged.__setitem__)
    assert logged["monitor/degenerate_share"] == 1.0 and logged["monitor/correct_rate"] == pytest.approx(2 / 3)


def test_without_an_answer_column_nothing_is_correct():
    monitor = RewardMonitor([fake_format], [2.0], "gsm8k", 100, group_size=2)
    logged = {}
    completions = [[{"role": "assistant", "content": "#### 8"}]] * 2
    for f in monitor.wrapped():
        f(completions=completions, prompts=["p", "p"], log_metric=logged.__setitem__)
    assert logged["monitor/correct_rate"] == 0.0 and logged["monitor/degenerate_all_wrong_share"] == 1.0


def test_the_last_reward_function_closes_the_batch_and_monitor_time_adds_up(monkeypatch):
    monitor = RewardMonitor([fake_correctness, fake_format], [2.0, 1.0], "gsm8k", 100, 0, group_size=2)
    batches = []
    record = monitor._record_batch
    monkeypatch.setattr(monitor, "_record_batch", lambda *a: batches.append(len(monitor._outputs)) or record(*a))
    ticks = iter(range(0, 1000, 2))  # each perf_counter call 2 s later: each batch costs 2 s
    monkeypatch.setattr("recipes.monitors.time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    for _ in range(3):
        call_batch(monitor, ["#### 8", "#### 9"], ["8", "8"], ["p", "p"], [[1], [1]])
    assert batches == [2, 2, 2]  # once per batch, after both functions
    assert monitor.seconds == 6


def test_a_reward_without_a_name_is_named_by_its_position():
    scaled = functools.partial(fake_format)  # a partial has no __name__
    monitor = RewardMonitor([fake_correctness, scaled], None, "gsm8k", 100, 0, group_size=2)
    names = [(f.__name__, f.__qualname__) for f in monitor.wrapped()]
    assert names == [("fake_correctness", "fake_correctness"), ("reward_1", "reward_1")]


def test_weights_must_match_the_reward_functions():
    with pytest.raises(ValueError, match="2 reward functions but 3 weights"):
        RewardMonitor([fake_correctness, fake_format], [1.0, 2.0, 3.0], "gsm8k", 100, group_size=2)


def test_the_jsonl_log_turns_odd_values_into_json(tmp_path):
    import numpy as np

    path = tmp_path / "log.jsonl"
    callback = JsonlLogCallback(path)
    state = types.SimpleNamespace(global_step=7, epoch=1.5, is_world_process_zero=True)
    callback.on_log(None, state, None, logs={})  # nothing to log: no line
    assert not path.exists()
    logs = {"lr": np.float32(0.25), "inf": float("inf"), "name": ("a", "b"), "ok": True, "none": None}
    callback.on_log(None, state, None, logs=logs)
    record = json.loads(path.read_text())
    assert record == {"lr": 0.25, "inf": None, "name": "('a', 'b')", "ok": True, "none": None, "step": 7, "epoch": 1.5}
    assert not math.isnan(record["lr"])


def test_probes_json_is_written_for_rewards_that_return_numpy_scores(tmp_path):
    import numpy as np

    def numpy_reward(completions, **kwargs):  # a reward model's scores, as numpy gives them
        return [np.float32(0.25) if "####" in c else np.float32(0.0) for c in completions]

    monitor = RewardMonitor([numpy_reward], None, "gsm8k", 100, group_size=4)
    problems = [{"question": "Ann has 4 pens and gets 9 more. How many now?", "answer": "13"}]
    callback = MonitorCallback(monitor, tmp_path, probe_problems=problems)
    callback.on_train_begin(None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None)
    written = json.loads((tmp_path / "probes.json").read_text())
    assert float(written["bare_wrong"]["score"]) == 0.25 and float(written["empty"]["score"]) == 0.0


def test_group_metrics_refuses_an_empty_batch_by_name():
    with pytest.raises(ValueError) as raised:
        group_metrics([])
    assert str(raised.value) == "group_metrics needs at least one non-empty group"


def test_a_group_of_one_answer_is_not_a_duplicate():
    metrics = group_metrics([[Sample(True, 1.0, 4, False, "same")], [Sample(False, 0.0, 4, False, "same")]])
    assert metrics["monitor/duplicate_share"] == 0.0 and metrics["monitor/collapsed_group_share"] == 0.0


def test_split_groups_refuses_keys_and_items_of_different_lengths():
    with pytest.raises(ValueError):
        split_groups(["p", "p", "q"], [1, 2])


def test_an_answer_column_of_the_wrong_length_is_an_error_not_a_shorter_table():
    # the run's correctness comes from the reward outputs, so only the top table reads the answers
    monitor = RewardMonitor([fake_format], [2.0], "gsm8k", 100, correctness_index=0, group_size=2)
    completions = [[{"role": "assistant", "content": "#### 8"}]] * 4
    with pytest.raises(ValueError):
        monitor.wrapped()[0](completions=completions, answer=["8"] * 3, prompts=["p", "p", "q", "q"])


def test_the_piece_of_a_group_another_process_holds_is_not_a_group():
    # G = 4: this process holds p's whole group and two answers of q's; q's two are both right but not a group
    monitor = RewardMonitor([fake_correctness], [2.0], "gsm8k", 100, correctness_index=0, group_size=4)
    texts = ["#### 8", "#### 9", "#### 8", "#### 9", "#### 8", "#### 8"]
    _, logged, _ = call_batch(monitor, texts, ["8"] * 6, ["p"] * 4 + ["q"] * 2, [[1]] * 6)
    assert logged["monitor/degenerate_share"] == 0.0 and logged["monitor/correct_rate"] == pytest.approx(4 / 6)


def test_a_watched_reward_never_makes_an_unscorable_completion_scorable():
    # a judge (trained) that fails on the first answer, the checker beside it at weight 0 (watched): TRL must get no
    # checker score there, so TRL's own total (NaN: unscorable) is the monitor's, and the verdict is still the checker's
    from rewards.totals import weighted_totals
    from tests.rewards.test_probes import trl_total_and_reward

    def judge(completions, **kwargs):
        return [None, 0.7, 0.2, None]

    def checker(completions, **kwargs):
        return [1.0, 0.0, 1.0, None]

    weights = [1.0, 0.0]
    monitor = RewardMonitor([judge, checker], weights, "gsm8k", 8, correctness_index=1, group_size=4)
    assert monitor.watched == [1]
    outputs, logged, extra = call_batch(monitor, ["a", "b", "c", "d"], ["1"] * 4, ["p"] * 4, [[1]] * 4)
    assert outputs == [[None, 0.7, 0.2, None], [None, 0.0, 1.0, None]]
    trl_totals, trl_reward = trl_total_and_reward(outputs, weights)
    ours = weighted_totals([judge([]), checker([])], weights)  # from the unmasked scores, as the monitor records them
    assert [math.isnan(t) for t in trl_totals] == [math.isnan(t) for t in ours] == [True, False, False, True]
    assert logged["monitor/reward_mean"] == pytest.approx(trl_reward) and logged["monitor/unscorable_rate"] == 0.5
    assert extra["correct"] == [True, False, True, False]  # the checker's verdict, on every answer
    assert logged["monitor/reward_correctness_gap"] == pytest.approx(((0.7 - 0) + (0.2 - 1)) / 2)


def test_a_watched_reward_listed_before_a_trained_one_is_refused():
    with pytest.raises(ValueError, match="watched"):
        RewardMonitor([fake_correctness, fake_format], [0.0, 1.0], "gsm8k", 8, group_size=2)
