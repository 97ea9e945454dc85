"""A recipe's command line (``recipes.parser.RecipeParser`` through ``recipes.common.run_cli``): a one-screen
``--help``, one line for a typo'd option, W&B's login checked before any model loads, leash's line first.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_recipe_cli.py

The in-process tests run ``run_cli`` as a recipe's command line would; the subprocess ones check what only a fresh
interpreter shows (the libraries' import-time warnings, the environment W&B reads).
"""

from __future__ import annotations

import argparse
import doctest
import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import recipes.parser
from recipes import checks, common, sft
from tests.helpers import parse_recipe_config

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "configs" / "tiny"
RECIPES = ["recipes.grpo", "recipes.sft", "recipes.dpo", "recipes.reward_model"]


def test_module_doctests():
    assert doctest.testmod(recipes.parser).failed == 0


def run_recipe(module: str, argv: list[str], monkeypatch) -> int:
    """``python -m module argv`` in this process: the exit status (0 when it returns)."""
    recipe = importlib.import_module(module)
    monkeypatch.setattr(sys, "argv", [module, *argv])
    try:
        common.run_cli(recipe.make_parser, recipe.main)
    except SystemExit as exit:
        return exit.code
    return 0


def error_line(capsys) -> str:
    """The one line a refused command prints to stderr (no traceback, no usage block)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    return lines[0]


# --- --help and --help-all -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", RECIPES)
def test_help_is_one_screen_with_the_description_and_config(module, monkeypatch, capsys):
    assert run_recipe(module, ["--help"], monkeypatch) == 0
    out = capsys.readouterr().out
    first_line_of_doc = importlib.import_module(module).__doc__.strip().splitlines()[0]
    assert first_line_of_doc in out  # what the recipe does
    assert "--config CONFIG.yaml" in out and "--help-all" in out
    assert "--model_name_or_path" in out and "--learning_rate" in out  # the TRL options runs set
    assert "--torch_compile" not in out  # TRL's other ~200 options wait for --help-all
    assert len(out.splitlines()) < 135, len(out.splitlines())  # TRL's parser printed ~1,400 lines


def test_help_all_lists_every_trl_option(monkeypatch, capsys):
    assert run_recipe("recipes.grpo", ["--help-all"], monkeypatch) == 0
    out = capsys.readouterr().out
    for flag in ("--torch_compile", "--vllm_mode", "--lora_r", "--reward_funcs", "--judge_backend"):
        assert flag in out


def test_the_lab_and_eval_options_all_have_help():
    from eval.__main__ import make_parser as eval_parser
    from reward_model_lab.overoptimisation import make_parser as lab_parser

    def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
        return {a.option_strings[-1] if a.option_strings else a.dest: a for a in parser._actions}

    lab = options(lab_parser())
    assert all(action.help for action in lab.values()), [name for name, a in lab.items() if not a.help]
    commands = next(a for a in eval_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command, flag in [("run", "--seed"), ("run", "--batch-size"), ("score", "--completion-field")]:
        assert options(commands[command])[flag].help, (command, flag)


# --- a typo'd option, a value argparse cannot read ------------------------------------------------------------------


def test_a_typod_config_key_names_the_key_the_closest_option_and_the_file(tmp_path, monkeypatch, capsys):
    config = tmp_path / "sft.yaml"
    config.write_text((TINY / "sft_cpu.yaml").read_text().replace("\nlearning_rate:", "\nlearnig_rate:"))
    monkeypatch.chdir(ROOT)
    assert run_recipe("recipes.sft", ["--config", str(config)], monkeypatch) == 2
    line = error_line(capsys)
    assert "learnig_rate" in line and "did you mean learning_rate?" in line and str(config) in line, line


def test_a_typod_flag_names_the_flag_and_the_closest_one(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    argv = ["--config", str(TINY / "sft_cpu.yaml"), "--learnig_rate", "1e-5"]
    assert run_recipe("recipes.sft", argv, monkeypatch) == 2
    line = error_line(capsys)
    assert "--learnig_rate on the command line" in line and "did you mean --learning_rate?" in line, line


def test_a_value_that_does_not_parse_is_one_line(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    argv = ["--config", str(TINY / "dpo_cpu.yaml"), "--learning_rate", "fast"]
    assert run_recipe("recipes.dpo", argv, monkeypatch) == 2
    assert "'fast'" in error_line(capsys)


def nowhere(tmp_path: Path) -> list[str]:
    """Flags that keep a run that should have been refused from training: no model to load, a scratch folder."""
    return [
        "--model_name_or_path",
        str(tmp_path / "no_model"),
        "--build_tiny_model",
        "false",
        "--output_dir",
        str(tmp_path),
    ]


@pytest.mark.parametrize("steps", ["-3", "0"])
def test_max_steps_is_a_number_of_steps_or_minus_one(steps, tmp_path, monkeypatch, capsys):
    # transformers trains num_train_epochs for any max_steps <= 0: only -1 asks for that
    monkeypatch.chdir(ROOT)
    argv = ["--config", str(TINY / "sft_cpu.yaml"), "--max_steps", steps, *nowhere(tmp_path)]
    assert run_recipe("recipes.sft", argv, monkeypatch) == 2
    line = error_line(capsys)
    assert f"max_steps {steps}" in line and "-1" in line and "num_train_epochs" in line, line


def test_a_malformed_yaml_is_one_line_with_its_file_line_and_column(tmp_path, monkeypatch, capsys):
    config = tmp_path / "broken.yaml"
    config.write_text("max_steps: 4\nreward_funcs: [gsm8k_correctness\nseed: 0\n")  # an unclosed list
    monkeypatch.chdir(ROOT)
    assert run_recipe("recipes.grpo", ["--config", str(config)], monkeypatch) == 2
    line = error_line(capsys)
    assert str(config) in line and "line 3, column 5" in line and "\n" not in line, line


def test_a_config_value_of_the_wrong_type_names_the_file(tmp_path, monkeypatch, capsys):
    config = tmp_path / "sft.yaml"
    config.write_text((TINY / "sft_cpu.yaml").read_text().replace("\nmax_steps: 4", "\nmax_steps: two"))
    monkeypatch.chdir(ROOT)
    assert run_recipe("recipes.sft", ["--config", str(config), *nowhere(tmp_path)], monkeypatch) == 2
    line = error_line(capsys)
    assert "max_steps" in line and "'two'" in line and str(config) in line, line


def test_an_abbreviated_flag_is_not_taken_for_the_option_it_begins(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    argv = ["--config", str(TINY / "sft_cpu.yaml"), "--max_step", "1", *nowhere(tmp_path)]
    assert run_recipe("recipes.sft", argv, monkeypatch) == 2
    line = error_line(capsys)
    assert "--max_step " in line and "did you mean --max_steps?" in line, line
    assert all(not recipe.make_parser().allow_abbrev for recipe in map(importlib.import_module, RECIPES))


@pytest.mark.parametrize("module", RECIPES)
def test_a_recipe_with_no_arguments_prints_its_usage_and_starts_nothing(module, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a default run would write runs/ here
    assert run_recipe(module, [], monkeypatch) == 2
    captured = capsys.readouterr()
    assert f"usage: python -m {module} --config CONFIG.yaml" in captured.err, captured.err
    assert "--help" in captured.err and not list(tmp_path.iterdir()), captured.err


@pytest.mark.parametrize(
    "names, weights",
    [(["gsm8k_format"], None), (["gsm8k_correctness", "gsm8k_format"], [1.0, 20.0])],
    ids=["format only", "format outweighs"],
)
def test_the_reward_refusal_names_the_config_key_not_the_python_argument(names, weights):
    with pytest.raises(ValueError) as refused:
        checks.check_rewards(names, weights)
    message = str(refused.value)
    assert "reward_check: warn" in message and "--reward_check warn" in message, message
    assert "on_violation" not in message, message


# --- the tiny model is built only where it is meant to be -----------------------------------------------------------


def test_a_hub_id_under_a_tiny_config_is_refused_and_builds_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: the model is not there
    monkeypatch.chdir(tmp_path)  # a folder built at the hub id would land here
    data = str(ROOT / "tests" / "data" / "gsm8k")
    argv = ["--config", str(TINY / "sft_cpu.yaml"), "--model_name_or_path", "HuggingFaceTB/SmolLM2-135M"]
    argv += ["--data", f"{data}/train.jsonl", "--eval_data", f"{data}/test.jsonl"]
    argv += ["--validation_data", f"{data}/train.jsonl", "--output_dir", str(tmp_path / "out")]
    assert run_recipe("recipes.sft", argv, monkeypatch) == 2
    assert "HuggingFaceTB/SmolLM2-135M" in error_line(capsys)
    assert not (tmp_path / "HuggingFaceTB").exists()


def test_a_missing_model_path_given_under_a_tiny_config_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    typo = tmp_path / "my_sft_modle"
    argv = ["--config", str(TINY / "grpo_cpu.yaml"), "--model_name_or_path", str(typo)]
    argv += ["--output_dir", str(tmp_path / "out")]
    assert run_recipe("recipes.grpo", argv, monkeypatch) == 2
    line = error_line(capsys)
    assert str(typo) in line and "--build_tiny_model true" in line, line
    assert not typo.exists()


# --- gradient_checkpointing under transformers' new name ------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, expected", [([], False), (["--gradient_checkpointing"], True), (["--gradient_checkpointing", "true"], True)]
)
def test_gradient_checkpointing_is_passed_without_a_deprecation_warning(flags, expected):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, training_args, _ = parse_recipe_config(sft, TINY / "sft_cpu.yaml", *flags)  # the config sets it false
    assert training_args.gradient_checkpointing is expected and training_args.activation_checkpointing is expected
    assert not [w for w in caught if "checkpointing" in str(w.message)], [str(w.message) for w in caught]


def test_a_config_without_gradient_checkpointing_gets_trls_default(tmp_path):
    """TRL 1.16 defaults gradient_checkpointing to True: a config that does not set it gets True under the new name
    (the --no_gradient_checkpointing flag's own default, False, is not the option's)."""
    text = (TINY / "sft_cpu.yaml").read_text()
    config = tmp_path / "sft.yaml"
    config.write_text("\n".join(line for line in text.splitlines() if not line.startswith("gradient_checkpointing")))
    _, training_args, _ = parse_recipe_config(sft, config)
    assert training_args.activation_checkpointing is True and training_args.gradient_checkpointing is True


# --- subprocesses: W&B's login, leash's line first -----------------------------------------------------------------


def recipe_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a bare ``python -m`` run (no ``make``), with no W&B login anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"NETRC": str(tmp_path / "no_netrc"), "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return env


@pytest.mark.heavy  # starts a process
def test_wandb_without_a_login_stops_before_the_model_with_one_line(tmp_path):
    model = tmp_path / "tiny"
    argv = ["--config", str(TINY / "grpo_cpu.yaml"), "--report_to", "wandb", "--output_dir", str(tmp_path / "out")]
    argv += ["--model_name_or_path", str(model), "--build_tiny_model", "true"]  # a model it may build
    done = subprocess.run(
        [sys.executable, "-m", "recipes.grpo", *argv],
        cwd=ROOT,
        env=recipe_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,  # W&B used to stop the run only after the model loaded and the first evaluation ran
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    for fix in ("wandb login", "WANDB_API_KEY", "WANDB_MODE=offline"):
        assert fix in lines[0], lines[0]
    assert not model.exists() and not (tmp_path / "out" / "log.jsonl").exists()


@pytest.mark.heavy  # starts a process
def test_a_run_prints_leashs_line_first_and_no_library_warnings(tmp_path):
    argv = ["--config", str(TINY / "sft_cpu.yaml"), "--max_steps", "1", "--eval_limit", "0", "--validation_limit", "0"]
    argv += ["--model_name_or_path", str(tmp_path / "tiny"), "--build_tiny_model", "true"]
    argv += ["--output_dir", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "recipes.sft", *argv],
        cwd=ROOT,
        env=recipe_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order the lines were printed
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines[0].startswith("python -m recipes.sft: "), lines[:5]
    assert str(tmp_path / "out") in lines[0]
    for noise in ("FutureWarning", "kernels", "Map:"):
        assert noise not in done.stdout, [line for line in lines if noise in line]
