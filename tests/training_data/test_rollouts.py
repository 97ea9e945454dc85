"""Verified rollouts on the tiny model: sampling, scoring, resuming, pass-rate filtering and the CLI.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/training_data/test_rollouts.py
"""

import pytest

import eval.__main__
import eval.run
import recipes.monitors
from eval.generate import Generation
from eval.jsonl import write_jsonl
from eval.tasks import get_task, load_rows, to_prompt_rows
from tests.eval.test_run import folder_locked_by_another_process
from training_data.rollouts import filter_by_pass_rate, grpo_rows, main, read_rollouts, sample_rollouts


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def gsm8k_test(data_dir):
    return str(data_dir / "gsm8k" / "test.jsonl")


def test_sample_on_the_tiny_model(tiny, gsm8k_test, tmp_path):
    model, tokenizer = tiny
    records = sample_rollouts(model, tokenizer, "gsm8k", tmp_path, data=gsm8k_test, limit=3, k=2, max_new_tokens=6)
    gold = to_prompt_rows(get_task("gsm8k"), load_rows(get_task("gsm8k"), gsm8k_test))
    assert [r["id"] for r in records] == [0, 1, 2]
    for r in records:
        assert r["question"] == gold[r["id"]]["question"] and r["answer"] == gold[r["id"]]["answer"]
        assert r["prompt"] == gold[r["id"]]["prompt"]  # the eval prompt, not a second copy
        assert len(r["completions"]) == 2
        assert all(1 <= c["n_tokens"] <= 6 and isinstance(c["correct"], bool) for c in r["completions"])
        assert r["pass_rate"] == sum(c["correct"] for c in r["completions"]) / 2
    assert read_rollouts(tmp_path) == read_rollouts(tmp_path / "rollouts.jsonl") == records


def fake_generate(texts_for_prompt):
    """A stand-in for eval.generate.generate that answers each prompt with the given texts."""
    calls = []

    def generate(model, tokenizer, prompts, *, num_samples, **kwargs):
        calls.append(len(prompts))
        return [[Generation(t, len(t), False) for t in texts_for_prompt(p)][:num_samples] for p in prompts]

    return generate, calls


def test_scores_and_resume(monkeypatch, gsm8k_test, tmp_path):
    golds = {
        row["prompt"][0]["content"]: row["answer"]
        for row in to_prompt_rows(get_task("gsm8k"), load_rows(get_task("gsm8k"), gsm8k_test)).select(range(6))
    }
    # one right, one wrong answer per problem: pass rate 0.5 everywhere
    generate, calls = fake_generate(lambda p: [f"#### {golds[p[0]['content']]}", "#### -1"])
    monkeypatch.setattr(eval.run, "generate", generate)
    # 2 problems per generate call; no model: its fingerprint is given as the CLI gives a vLLM model's
    kwargs = {"data": gsm8k_test, "k": 2, "batch_size": 4, "run_info": {"model_fingerprint": "fake-model"}}
    sample_rollouts(None, None, "gsm8k", tmp_path, limit=3, **kwargs)
    assert calls == [2, 1]
    # a kill in the middle of writing the third problem leaves half a line
    samples = tmp_path / "samples.jsonl"
    samples.write_text(samples.read_text()[:-40])
    records = sample_rollouts(None, None, "gsm8k", tmp_path, limit=6, **kwargs)
    assert calls == [2, 1, 2, 2]  # only problems 2..5 were sampled again
    assert [r["id"] for r in records] == list(range(6))  # each problem once
    assert all(r["pass_rate"] == 0.5 and [c["correct"] for c in r["completions"]] == [True, False] for r in records)

    with pytest.raises(ValueError, match="other settings"):  # other settings cannot extend the same run
        sample_rollouts(None, None, "gsm8k", tmp_path, limit=6, **{**kwargs, "k": 4})


def test_filter_report():
    records = [{"pass_rate": p} for p in (0.0, 0.0, 0.125, 0.25, 0.5, 0.75, 0.875, 1.0)]
    kept, report = filter_by_pass_rate(records, low=0.2, high=0.8, group_size=4)
    assert [r["pass_rate"] for r in kept] == [0.25, 0.5, 0.75]
    assert (report["dropped_too_hard"], report["dropped_too_easy"], report["kept"]) == (3, 2, 3)
    by_hand = sum(p**4 + (1 - p) ** 4 for p in (0.0, 0.0, 0.125, 0.25, 0.5, 0.75, 0.875, 1.0)) / 8
    assert report["degenerate_share_before"] == pytest.approx(by_hand)
    assert report["degenerate_share_after"] == pytest.approx((0.25**4 + 0.75**4) * 2 / 3 + 2 * 0.5**4 / 3)
    assert report["degenerate_share_after"] < report["degenerate_share_before"]


def test_filter_and_monitors_share_one_degenerate_formula_and_its_empty_result():
    import math

    import eval.degenerate
    import training_data.rollouts

    # one formula for both: the filter's report and the monitors' predictor cannot disagree (one None, one NaN)
    assert training_data.rollouts.expected_degenerate_share is eval.degenerate.expected_degenerate_share
    assert recipes.monitors.DegeneratePredictor is eval.degenerate.DegeneratePredictor
    _, report = filter_by_pass_rate([{"pass_rate": 0.0}, {"pass_rate": 1.0}], low=0.2, high=0.8, group_size=3)
    assert report["kept"] == 0 and math.isnan(report["degenerate_share_after"])  # nothing left: undefined, not 0
    assert report["degenerate_share_before"] == 1.0


@pytest.mark.parametrize(
    "low, high, group_size",
    [
        (0.8, 0.2, 8),  # range upside down
        (-0.1, 0.5, 8),  # below 0
        (0.2, 0.8, 0),  # no group
    ],
)
def test_filter_rejects_bad_options(low, high, group_size):
    with pytest.raises(ValueError):
        filter_by_pass_rate([{"pass_rate": 0.5}], low, high, group_size)


@pytest.mark.parametrize("task_name", ["gsm8k_train", "math_train"])
def test_filtered_rows_load_like_the_task_data(tmp_path, task_name):
    task = get_task(task_name)
    record = {
        "id": 7,
        "question": "What is 2+3?",
        "answer": "5",
        "prompt": task.prompt("What is 2+3?"),
        "pass_rate": 0.5,
    }
    path = tmp_path / "edge.jsonl"
    write_jsonl(grpo_rows([record], task_name), path)
    rows = to_prompt_rows(task, load_rows(task, str(path)))  # what the recipes do with a --data file
    assert (rows[0]["prompt"], rows[0]["answer"], rows[0]["question"]) == (record["prompt"], "5", "What is 2+3?")


def test_cli_sample_filter_pairs(tiny_model_dir, gsm8k_test, tmp_path, capsys):
    """The commands of docs/dpo.md, on the tiny model."""
    rollouts = tmp_path / "rollouts"
    main(
        ["sample", "--model", str(tiny_model_dir), "--task", "gsm8k", "--data", gsm8k_test, "--limit", "2"]
        + ["--k", "2", "--max-new-tokens", "4", "--out", str(rollouts)]
    )
    assert len(read_rollouts(rollouts)) == 2
    assert (rollouts / "results.json").exists()  # eval's report of the same samples

    main(["filter", str(rollouts), "--low", "0.0", "--high", "1.0", "--out", str(tmp_path / "edge.jsonl")])
    assert "kept: 2" in capsys.readouterr().out  # the whole range keeps every problem
    assert len((tmp_path / "edge.jsonl").read_text().splitlines()) == 2

    with pytest.raises(SystemExit, match="no problem has a pass rate"):  # the random tiny model solves nothing
        main(["filter", str(rollouts), "--out", str(tmp_path / "none.jsonl")])
    assert not (tmp_path / "none.jsonl").exists()

    main(["pairs", str(rollouts), "--out", str(tmp_path / "pairs.jsonl")])
    report = capsys.readouterr().out
    assert "problems: 2" in report and "pairs:" in report


def test_cli_sample_into_a_busy_folder_is_refused_before_the_model_loads(
    tiny_model_dir, gsm8k_test, tmp_path, monkeypatch, capsys
):
    def load_model(*args):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(eval.__main__, "load_model", load_model)
    out = tmp_path / "rollouts"
    model = str(tiny_model_dir)  # a model that passes the source check: the busy folder is what is refused
    with folder_locked_by_another_process(out) as holder, pytest.raises(SystemExit) as exit_info:
        main(["sample", "--model", model, "--task", "gsm8k", "--data", gsm8k_test, "--limit", "2", "--out", str(out)])
    assert exit_info.value.code == 2
    assert f"{out} is being written by another process (pid {holder.pid})" in capsys.readouterr().err
    assert not (out / "samples.jsonl").exists()
