"""Validation that runs before any model is loaded: each error names the problem and the fix.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_checks.py

The recipe-level tests call ``recipes.grpo.main`` with a model path that does not exist: an error raised by a check
therefore proves the check ran before any model load.
"""

import doctest
import importlib.util
import json
from pathlib import Path

import pytest

from eval.jsonl import write_jsonl
from recipes import checks, common, dpo, grpo
from tests.helpers import parse_recipe_config

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"
NO_MODEL = "/nonexistent/model/never/loaded"


def test_module_doctests():
    assert doctest.testmod(checks).failed == 0
    assert doctest.testmod(common).failed == 0


NO_MODEL_FLAGS = ("--model_name_or_path", NO_MODEL, "--build_tiny_model", "false")


def run_main(tmp_path, data_dir, *overrides: str):
    data = ["--data", str(data_dir / "gsm8k" / "train.jsonl"), "--output_dir", str(tmp_path / "out")]
    return grpo.main(*parse_recipe_config(grpo, TINY_CONFIG, *NO_MODEL_FLAGS, *data, *overrides))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--loss_type", "drgrpo"], "loss_type 'drgrpo' is not a GRPO loss"),  # typo: TRL would fail in step 1
        (["--scale_rewards", "std"], "scale_rewards 'std' is unknown"),  # not group/batch/none
        (["--reward_funcs", "gsm8k_corectness"], r"unknown reward\(s\) \['gsm8k_corectness'\]"),  # typo in a name
        (["--reward_weights", "1.0"], "reward_weights has 1 values"),  # two rewards, one weight
        (["--reward_weights", "1.0", "20.0"], "non-correctness terms can pay a wrong answer"),  # format outweighs
        (["--reward_funcs", "math_correctness", "--reward_weights", "1.0"], "use gsm8k_correctness"),  # wrong style
        (["--task", "gsm9k"], "unknown task 'gsm9k'"),  # task typo
        (["--monitor_eval_steps", "3", "--logging_steps", "2"], "not a multiple of logging_steps"),  # logged late
        (["--load_in_4bit", "true"], "without use_peft"),  # quantized weights cannot be trained without LoRA
    ],
)
def test_bad_settings_fail_before_model_load(tmp_path, data_dir, overrides, message):
    with pytest.raises(ValueError, match=message):
        run_main(tmp_path, data_dir, *overrides)
    assert not (tmp_path / "out" / "log.jsonl").exists()


def test_format_only_reward_set_needs_explicit_warn(tmp_path, data_dir, caplog):
    with pytest.raises(ValueError, match="reward_check: warn"):  # the recipe's config key (test_recipe_cli.py)
        checks.check_rewards(["gsm8k_format"], None)
    checks.check_rewards(["gsm8k_format"], None, on_violation="warn")  # a hack study: trains, loudly
    assert "REWARD HACK RISK" in caplog.text


def test_dataset_without_answer_column(tmp_path, data_dir):
    data = tmp_path / "questions_only.jsonl"
    write_jsonl([{"question": "What is 1 + 1?"}], data)
    with pytest.raises(ValueError, match="no \\['answer'\\] column"):  # eval.tasks.load_rows names the gold field
        run_main(tmp_path, data_dir, "--data", str(data))
    with pytest.raises(ValueError, match="has no 'answer' column"):  # rows handed to the trainer
        checks.check_answer_column(["prompt", "question"], "my_data.jsonl")


@pytest.mark.parametrize(
    "flags, message",
    [
        # 4 completions a generation, groups of 8: TRL's GRPOConfig refuses it; the reworded error says what to set
        (
            ["--num_generations", "8", "--steps_per_generation", "1"],
            "is 4 completions, not a multiple of "
            "num_generations 8 .* Set steps_per_generation to 2 times its value .* per_device_train_batch_size: 8",
        ),
        # groups of 3 in 4 completions: 3 times the steps
        (["--num_generations", "3", "--steps_per_generation", "1"], "Set steps_per_generation to 3 times"),
        # a group of one has no advantage: TRL's error, with the fix added
        (["--num_generations", "1"], "at least 2 generations per prompt.*\n.*num_generations: 2 or more"),
    ],
)
def test_group_size_errors_at_parse_time_say_what_to_change(flags, message):
    args = ["--per_device_train_batch_size", "4", *flags]
    with pytest.raises(ValueError, match=message):
        parse_recipe_config(grpo, TINY_CONFIG, *args, as_run=True)
    ok = parse_recipe_config(
        grpo, TINY_CONFIG, *args, "--steps_per_generation", "6", "--num_generations", "8", as_run=True
    )
    assert ok[1].generation_batch_size == 24 and ok[1].num_generations == 8  # whole groups: accepted


def test_dpo_loss_weights_length_is_trls_check_with_the_fix():
    flags = ["--loss_type", "sigmoid", "robust", "--loss_weights", "1"]
    with pytest.raises(ValueError, match="same length as `loss_type`.*\n.*one loss_weights value per loss_type"):
        parse_recipe_config(dpo, "recipes/configs/tiny/dpo_cpu.yaml", *flags, as_run=True)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm installed here")
def test_vllm_without_vllm_installed(tmp_path, data_dir):
    with pytest.raises(ValueError, match="vllm is not installed"):
        run_main(tmp_path, data_dir, "--use_vllm", "true")


def test_vllm_without_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # pretend vllm is installed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        checks.check_vllm(True, "colocate")
    checks.check_vllm(True, "server")  # server mode: generation runs on another machine


def test_qlora_on_cpu_warns_but_runs(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="QLoRA on CPU"):
        checks.check_quantization(load_in_4bit=True, load_in_8bit=False, use_peft=True)


def test_redaction_of_secrets_in_the_resolved_config():
    _, training_args, model_args = parse_recipe_config(
        grpo, TINY_CONFIG, *NO_MODEL_FLAGS, "--hub_token", "hf_secret_value"
    )
    config = common.resolved_config(training_args, model_args)  # what run_folder.prepare writes beside the run
    text = json.dumps(config)
    assert "hf_secret_value" not in text and config["hub_token"] == "<redacted>"
    assert config["max_completion_length"] == 16  # numbers under *token*-like keys are not secrets


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize(
    "recipe, flags, message",
    [
        # unknown loss type: one line naming the valid ones, exit status 2, no traceback
        ("recipes.grpo", ["--config", "recipes/configs/tiny/grpo_cpu.yaml", "--loss_type", "drgrpo"], "dr_grpo"),
        # a missing data file, in the DPO recipe
        ("recipes.dpo", ["--config", "recipes/configs/tiny/dpo_cpu.yaml", "--data", "missing.jsonl"], "missing.jsonl"),
        # a missing config file
        ("recipes.grpo", ["--config", "missing.yaml"], "missing.yaml"),
    ],
)
def test_cli_prints_bad_input_as_one_line(recipe, flags, message):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", recipe, *flags], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1 and message in error_lines[0], done.stderr[-2000:]
