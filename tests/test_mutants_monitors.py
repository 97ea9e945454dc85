"""The monitor's callbacks and reward wrapper on fakes: the paths only a GRPO training run reached (docs/mutation.md).

Each test pins a behaviour the training run relies on: when the held-out evaluation runs, what the next log gets, where
the top-reward table goes, which prompts share a group, which pass rates count as a prior.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_monitors.py
"""

import functools
import json
import logging
import math
import types

import pytest
from test_monitors import call_batch, fake_correctness, fake_format

import eval.run
from eval.monitors import (
    JsonlLogCallback,
    MonitorCallback,
    RewardMonitor,
    Sample,
    group_metrics,
    held_out_metrics,
    make_monitored_trainer_class,
    split_groups,
)


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
    trainer = trainer_class(training=True)
    steps = []
    trainer.monitor_callback = types.SimpleNamespace(
        pop_pending=lambda step, main: steps.append((step, main)) or {"probe/violations": 1}
    )
    trainer.log({"loss": 0.5}, start_time=3.0)
    assert trainer.logged == [({"loss": 0.5, "probe/violations": 1}, 3.0)] and steps == [(21, False)]

    evaluating = trainer_class(training=False)  # TRL's own evaluation logs: the pending values wait
    evaluating.monitor_callback = trainer.monitor_callback
    evaluating.log({"eval_loss": 0.7})
    assert evaluating.logged == [({"eval_loss": 0.7}, None)] and len(steps) == 1

    bare = trainer_class(training=True)  # no callback attached: the log passes through
    bare.log({"loss": 0.1})
    assert bare.logged == [({"loss": 0.1}, None)]


def probe_callback(tmp_path, **kwargs) -> MonitorCallback:
    from rewards import get_reward

    monitor = RewardMonitor([get_reward("gsm8k_format")], [2.0], "gsm8k", 100, group_size=4)
    problems = [{"question": "Ann has 4 pens and gets 9 more. How many now?", "answer": "13"}]
    return MonitorCallback(monitor, tmp_path, probe_problems=problems, answer_style="gsm8k", **kwargs)


def test_probes_at_train_start_count_violations_warn_and_write_probes_json(tmp_path, caplog):
    callback = probe_callback(tmp_path / "runs" / "out")  # two folders that do not exist yet
    with caplog.at_level(logging.WARNING, logger="eval.monitors"):
        callback.on_train_begin(None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None)
    hacks = [name for name, info in callback.probes.items() if info["violation"]]
    assert hacks  # a format-only reward pays the format hacks: the case this test is about
    assert callback.pending["probe/violations"] == len(hacks)
    assert all(callback.pending[f"probe/{n}"] == info["score"] for n, info in callback.probes.items())
    warning = f"REWARD HACK PROBES pass under this reward set: {hacks} (see probes.json)"
    assert [r.getMessage() for r in caplog.records if r.name == "eval.monitors"] == [warning]
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
    with caplog.at_level(logging.WARNING, logger="eval.monitors"):
        callback.on_train_begin(None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None)
    assert callback.pending["probe/violations"] == 0 and "REWARD HACK" not in caplog.text


def test_the_resolved_config_goes_to_the_wandb_run(tmp_path, monkeypatch):
    import wandb

    updates = []
    monkeypatch.setattr(wandb, "run", object())
    monkeypatch.setattr(wandb, "config", types.SimpleNamespace(update=lambda d, **kw: updates.append((d, kw))))
    config = {"learning_rate": 3e-6, "reward_funcs": ["gsm8k_correctness"]}
    MonitorCallback(monitor_with_top(), tmp_path, report_to=["wandb"], resolved_config=config).on_train_begin(
        None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None
    )
    assert updates == [({"leash": config}, {"allow_val_change": True})]
    MonitorCallback(monitor_with_top(), tmp_path, report_to=["tensorboard"], resolved_config=config).on_train_begin(
        None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None
    )
    monkeypatch.setattr(wandb, "run", None)  # wandb not started: nothing to update
    MonitorCallback(monitor_with_top(), tmp_path, report_to=["wandb"], resolved_config=config).on_train_begin(
        None, types.SimpleNamespace(global_step=0, is_world_process_zero=True), None
    )
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
    monkeypatch.setattr("eval.monitors.time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
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
