"""The SFT recipe on the tiny model: the real configs, rows with the solution as the reply, loss on the reply only,
parameters that move, the validation stop, resuming, and the errors that come before a model loads.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_sft.py
"""

import json

import pytest
import torch
from safetensors.torch import load_file

import recipes.monitors
from recipes.sft import main, sft_rows
from tests.helpers import parse_recipe_config

CONFIG = "recipes/configs/tiny/sft_cpu.yaml"


def run(model_dir, out, *extra, config=CONFIG):
    return main(
        *parse_recipe_config("sft", config, "--model_name_or_path", str(model_dir), "--output_dir", str(out), *extra)
    )


def test_rows_are_the_prompt_eval_uses_and_the_solution_without_calculator_annotations(data_dir):
    from datasets import Dataset

    from eval.jsonl import read_jsonl
    from eval.tasks import get_task

    task = get_task("gsm8k_train")
    rows = read_jsonl(data_dir / "gsm8k" / "train.jsonl")[:3]
    converted = sft_rows(task, Dataset.from_list(rows))
    for row, source in zip(converted, rows, strict=True):
        assert row["prompt"] == task.prompt(source["question"])
        [reply] = row["completion"]
        assert reply["role"] == "assistant" and "<<" not in reply["content"]
        assert reply["content"].endswith(source["answer"].split("####")[-1].strip())  # the gold stays at the end
    math = sft_rows(get_task("math_train"), Dataset.from_list(read_jsonl(data_dir / "math_train" / "train.jsonl")[:2]))
    assert "\\boxed" in math[0]["completion"][0]["content"]  # MATH's reply is the worked solution


def test_two_step_run_trains_on_the_reply_and_reports_before_after(tiny_model_dir, tmp_path):
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    report = run(tiny_model_dir, tmp_path / "out")
    after = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)  # training moved the weights
    assert report["steps"] == 4 and report["rows"] == 16
    assert {"before", "after"} <= set(report) and report["after"]["n"] == 8
    logged = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    assert any("loss" in row for row in logged)
    checks = [json.loads(line) for line in (tmp_path / "out" / "validation.jsonl").read_text().splitlines()]
    assert [c["step"] for c in checks] == [2, 4] and all(c["n"] == 4 for c in checks)
    assert report["validation"]["why"] == "max_steps"


def test_the_loss_is_on_the_reply_only(tiny_model_dir, tmp_path):
    # TRL 1.16 labels prompt/completion rows with -100 over the prompt: its tokens carry no loss
    from trl import SFTTrainer

    script_args, training_args, model_args = parse_recipe_config(
        "sft", CONFIG, "--model_name_or_path", str(tiny_model_dir)
    )
    assert training_args.completion_only_loss in (None, True)  # None: on for prompt/completion data
    from eval.tasks import get_task, load_rows

    task = get_task(script_args.task)
    rows = sft_rows(task, load_rows(task, script_args.data).select(range(2)))
    trainer = SFTTrainer(model=str(tiny_model_dir), args=training_args, train_dataset=rows)
    example = trainer.train_dataset[0]
    learned = [label != -100 for label in example["labels"]]
    assert not learned[0] and learned[-1] and 0 < sum(learned) < len(learned)  # the prompt masked, the reply not
    reply = trainer.processing_class.decode([i for i, keep in zip(example["input_ids"], learned, strict=True) if keep])
    assert "#### 72" in reply and "Natalia sold clips" not in reply


def test_training_stops_when_the_validation_accuracy_is_reached(tiny_model_dir, tmp_path):
    report = run(tiny_model_dir, tmp_path / "out", "--stop_at_accuracy", "0.0001", "--eval_limit", "0")
    # the untrained tiny model scores 0, so it never reaches it and runs to max_steps
    assert report["steps"] == 4 and report["validation"]["why"] == "max_steps before 0.0001"


def test_a_reached_threshold_stops_at_that_check(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(recipes.monitors, "held_out_metrics", lambda *a, **k: {"eval/accuracy": 0.75, "eval/n": 4})
    report = run(tiny_model_dir, tmp_path / "out", "--stop_at_accuracy", "0.5", "--eval_limit", "0")
    assert report["steps"] == 2 and report["validation"]["why"] == "reached 0.5"


def test_the_plateau_stop_ends_after_patience_checks_and_keeps_the_best_weights(tiny_model_dir, tmp_path, monkeypatch):
    accuracies, weights = iter([0.2, 0.5, 0.4, 0.45, 0.9, 0.9]), []

    def check(model, *args, **kwargs):  # a scripted validation curve; the weights each check saw
        weights.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return {"eval/accuracy": next(accuracies), "eval/n": 4}

    monkeypatch.setattr(recipes.monitors, "held_out_metrics", check)
    out = tmp_path / "out"
    flags = ["--stop_patience", "2", "--validation_steps", "1", "--max_steps", "6", "--eval_limit", "0"]
    report = run(tiny_model_dir, out, *flags)
    v = report["validation"]
    # best 0.5 at step 2; steps 3 and 4 do not beat it, so training stops at step 4, before the later 0.9
    assert report["steps"] == 4 and v["why"] == "plateau: 2 checks without a new best"
    assert (v["best"], v["best_step"], v["last"]) == (0.5, 2, 0.45)
    saved = load_file(str(out / "model.safetensors"))
    best, last = weights[1], weights[3]
    assert all(torch.equal(saved[k], best[k]) for k in saved)  # the model saved is the best check's
    assert any(not torch.equal(saved[k], last[k]) for k in saved)


def test_train_seconds_leave_out_the_checks_and_a_budget_stops_training(tiny_model_dir, tmp_path, monkeypatch):
    import time

    skipped = [0.0]  # the clock TrainSeconds reads jumps 100 s inside each check: counted, it would show

    def slow_check(*args, **kwargs):
        skipped[0] += 100.0
        return {"eval/accuracy": 0.0, "eval/n": 4}

    monkeypatch.setattr(recipes.monitors, "held_out_metrics", slow_check)
    monkeypatch.setattr(recipes.monitors.TrainSeconds, "clock", staticmethod(lambda: time.monotonic() + skipped[0]))
    flags = ["--validation_steps", "1", "--max_steps", "4", "--eval_limit", "0", "--logging_steps", "1"]
    report = run(tiny_model_dir, tmp_path / "full", *flags)
    logged = [json.loads(line) for line in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]
    seconds = [row["train_seconds"] for row in logged if "loss" in row]
    assert len(seconds) == 4 and seconds == sorted(seconds) and seconds[0] > 0
    assert skipped[0] == 400 and report["train_seconds"] < 100  # four checks ran between the steps, none counted
    # a budget smaller than one step: training stops at the first step's end, and says so
    budget = run(tiny_model_dir, tmp_path / "budget", *flags, "--max_train_seconds", "0.000001")
    assert budget["steps"] == 1 and budget["stopped_on_seconds"]


def test_validation_limit_0_makes_no_checks(tiny_model_dir, tmp_path):
    report = run(tiny_model_dir, tmp_path / "out", "--validation_limit", "0", "--eval_limit", "0")
    assert report["steps"] == 4 and "validation" not in report  # the config checks every 2 steps otherwise
    assert not (tmp_path / "out" / "validation.jsonl").exists()


@pytest.mark.parametrize("logging_steps", ["1", "3"])  # a checkpoint at a logged step, and one between log lines
def test_a_killed_run_resumes_from_its_checkpoint_with_its_train_seconds(
    tiny_model_dir, tmp_path, capsys, monkeypatch, logging_steps
):
    """The resumed run goes on from the checkpoint's steps and from its count of train seconds (a count that started
    again from 0 would give a more-SFT twin too small a budget). The clock TrainSeconds reads moves 5 s a step."""
    ticks = iter(range(0, 1000, 5))  # the clock is read twice a step (its start and its end): 5 s apart
    monkeypatch.setattr(recipes.monitors.TrainSeconds, "clock", staticmethod(lambda: float(next(ticks))))
    out = tmp_path / "out"
    common = ["--eval_limit", "0", "--save_strategy", "steps", "--save_steps", "2", "--logging_steps", logging_steps]
    first = run(tiny_model_dir, out, *common, "--max_steps", "2")
    report = run(tiny_model_dir, out, *common, "--max_steps", "4")
    assert "resuming from" in capsys.readouterr().out and report["steps"] == 4
    assert first["train_seconds"] == 10.0 and report["train_seconds"] == 20.0  # 4 steps of 5 s, not 2 after resume


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--stop_at_accuracy", "0.5", "--validation_data", ""], "stop_at_accuracy needs validation_data"),
        (["--stop_at_accuracy", "1.5"], "give a fraction in"),
        (["--stop_patience", "0"], "give a number of validation checks >= 1"),
        (["--max_train_seconds", "0"], "give a number of seconds > 0"),
        (["--validation_limit", "-1"], "give a number of validation problems, or 0"),
        (["--validation_limit", "0", "--stop_patience", "2"], "nothing can stop on them"),
        (["--stop_patience", "3", "--validation_data", ""], "stop_patience needs validation_data"),
        (["--validation_data", "tests/data/gsm8k/test.jsonl"], "validation_data is the held-out eval_data"),
        (["--solution_field", "worked"], "no 'worked' column"),
        (["--data", "no/such/file.jsonl"], "does not exist"),
    ],
)
def test_bad_settings_fail_before_a_model_loads(tmp_path, flags, message, monkeypatch):
    import trl

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the error")

    monkeypatch.setattr(trl, "SFTTrainer", no_model)
    with pytest.raises(ValueError, match=message):
        run(tmp_path / "no_model_needed", tmp_path / "out", "--build_tiny_model", "true", *flags)
