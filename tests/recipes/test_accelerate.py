"""The multi-process launcher path on CPU: ``accelerate launch --num_processes 2`` runs the GRPO recipe on the tiny
model (two CPU ranks, gloo backend), and the shipped accelerate configs load. A run that asks for DeepSpeed where it
is not installed stops before anything is parsed or loaded, with one line naming the install.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_accelerate.py
"""

import importlib
import json
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import yaml

from eval.jsonl import read_jsonl
from recipes import checks, common
from tests.helpers import tiny_run_flags

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE_CONFIGS = sorted((ROOT / "recipes" / "accelerate").glob("*.yaml"))
ZERO_CONFIGS = [p for p in ACCELERATE_CONFIGS if p.name.startswith("zero")]
TINY_CONFIGS = {"grpo": "grpo_cpu.yaml", "dpo": "dpo_cpu.yaml", "reward_model": "reward_model_cpu.yaml"}


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_config_loads(path):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(path))
    assert config.num_processes >= 1 and config.mixed_precision == "bf16"
    assert "accelerate launch --config_file recipes/accelerate/" in path.read_text()  # header gives the command
    assert {p.name for p in ACCELERATE_CONFIGS} >= {"ddp.yaml", "zero2.yaml", "zero3.yaml"}
    if "zero" in path.name:
        assert yaml.safe_load(path.read_text())["deepspeed_config"]["zero_stage"] == int(path.stem[-1])


@pytest.mark.integration
def test_two_process_launch_on_cpu(tiny_model_dir, data_dir, tmp_path):
    out = tmp_path / "run"
    # --multi_gpu picks accelerate's torchrun launcher (--cpu would start ONE process); the config's use_cpu: true
    # then puts both ranks on the CPU with the gloo backend
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    command += ["--num_machines", "1"]
    command += ["--mixed_precision", "no", "--dynamo_backend", "no", "-m", "recipes.grpo"]
    command += ["--config", "recipes/configs/tiny/grpo_cpu.yaml", "--model_name_or_path", str(tiny_model_dir)]
    command += ["--output_dir", str(out), "--data", str(data_dir / "gsm8k" / "train.jsonl")]
    command += ["--eval_data", str(data_dir / "gsm8k" / "test.jsonl"), "--build_tiny_model", "false"]
    command += tiny_run_flags(eval_limit=2)  # an evaluation after training: its accuracy is printed once
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("held-out accuracy") == 1  # one process reports
    assert json.loads((out / "report.json").read_text())["processes"] == 2
    log = read_jsonl(out / "log.jsonl")
    assert [r["step"] for r in log if "loss" in r] == [1, 2]  # one line per log, not one per process
    assert all("monitor/degenerate_share" in r for r in log if "loss" in r)
    assert len(read_jsonl(out / "top_completions.jsonl")) == 2


@pytest.mark.parametrize("path", ZERO_CONFIGS, ids=lambda p: p.name)
def test_zero_configs_hold_what_accelerate_launch_reads(path):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils import DistributedType

    config = load_config_from_file(str(path))
    assert config.distributed_type == DistributedType.DEEPSPEED
    zero = config.deepspeed_config
    # accelerate launch copies each key onto the launch option of that name: a key that is no option is never read
    assert set(zero) <= {action.dest for action in launch_command_parser()._actions}
    assert {"zero_stage", "offload_optimizer_device", "offload_param_device", "zero3_init_flag"} <= set(zero)
    assert zero["zero3_init_flag"] == (zero["zero_stage"] == 3)  # ZeRO-3 builds the model sharded
    assert zero.get("zero3_save_16bit_model", False) == (zero["zero_stage"] == 3)
    assert "make venv-gpu" in path.read_text() and checks.DEEPSPEED_PIN in path.read_text()  # the header's install


@pytest.mark.parametrize("route", ["--deepspeed", "ACCELERATE_USE_DEEPSPEED", "deepspeed: in"])
@pytest.mark.parametrize("recipe", sorted(TINY_CONFIGS))
def test_deepspeed_asked_for_but_not_installed_is_one_line_before_parsing(recipe, route, monkeypatch, tmp_path):
    """Without the check, transformers' TrainingArguments fails inside the config parse with a traceback."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # `import deepspeed` fails, find_spec says not installed
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    config = ROOT / "recipes" / "configs" / "tiny" / TINY_CONFIGS[recipe]
    args = ["--config", str(config)]
    if route == "--deepspeed":
        args += ["--deepspeed", "ds_config.json"]
    elif route == "ACCELERATE_USE_DEEPSPEED":
        monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # what accelerate launch sets for a ZeRO config
    else:
        (tmp_path / config.name).write_text(config.read_text() + "\ndeepspeed: ds_config.json\n")
        args = ["--config", str(tmp_path / config.name)]
    parser = importlib.import_module(f"recipes.{recipe}").make_parser()
    with pytest.raises(ValueError) as error:
        common.parse_or_explain(parser, args)
    message = str(error.value)
    assert "\n" not in message and route in message.split(" asks for ")[0]
    assert "DeepSpeed, which is not installed" in message
    assert "make venv-gpu" in message and f"pip install {checks.DEEPSPEED_PIN}" in message


def test_deepspeed_in_a_base_config_names_the_base(monkeypatch, tmp_path):
    """A variant that takes ``deepspeed:`` from its ``base:``: the refusal names the file that sets it."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    config = ROOT / "recipes" / "configs" / "tiny" / TINY_CONFIGS["grpo"]
    base, variant = tmp_path / "base.yaml", tmp_path / "variant.yaml"
    base.write_text(config.read_text() + "\ndeepspeed: ds_config.json\n")
    variant.write_text("base: base.yaml\nseed: 3\n")
    parser = importlib.import_module("recipes.grpo").make_parser()
    with pytest.raises(ValueError, match=f"deepspeed: in {re.escape(str(base))} asks for DeepSpeed"):
        common.parse_or_explain(parser, ["--config", str(variant)])


def test_deepspeed_check_lets_runs_through_when_nothing_asks_or_it_is_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    argv = ["--config", "recipes/configs/tiny/grpo_cpu.yaml"]
    parser = importlib.import_module("recipes.grpo").make_parser()
    assert common.deepspeed_request(parser.read_command(argv)) is None and not checks.deepspeed_installed()
    # nothing asks: the checked parse goes through without DeepSpeed, and the run it parses uses none
    training_args = common.parse_or_explain(parser, argv)[1]
    assert training_args.deepspeed is None and not checks.uses_deepspeed(training_args)
    with pytest.raises(ValueError, match="asks for DeepSpeed"):  # the same check, asked and not installed, refuses
        checks.check_deepspeed("--deepspeed")
    monkeypatch.setitem(sys.modules, "deepspeed", types.ModuleType("deepspeed"))  # a stand-in counts as installed
    assert checks.deepspeed_installed()
    checks.check_deepspeed("--deepspeed")  # installed: the request passes (raising would fail this test)


@pytest.fixture
def env_without_deepspeed(tmp_path):
    """Environment for a subprocess in which ``import deepspeed`` fails, whether or not this venv has it."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import sys\n\nsys.modules['deepspeed'] = None\n")
    return os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]), "OMP_NUM_THREADS": "1"}


@pytest.mark.heavy  # starts a process
def test_the_recipe_cli_asked_for_deepspeed_without_it_exits_with_one_line(env_without_deepspeed):
    command = [sys.executable, "-m", "recipes.grpo", "--config", "recipes/configs/tiny/grpo_cpu.yaml"]
    command += ["--deepspeed", "ds_config.json"]
    result = subprocess.run(command, cwd=ROOT, env=env_without_deepspeed, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "make venv-gpu" in errors[0], result.stderr[-3000:]


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize("path", ZERO_CONFIGS, ids=lambda p: p.name)
def test_accelerate_launch_with_a_zero_config_stops_at_once_without_deepspeed(path, env_without_deepspeed):
    """What the ZeRO configs' headers say: the launcher refuses before the recipe (or any model) starts."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(path), "-m", "recipes.grpo"]
    command += ["--config", "recipes/configs/tiny/grpo_cpu.yaml"]
    start = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env_without_deepspeed, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and time.monotonic() - start < 60
    assert "DeepSpeed is not installed" in result.stderr.strip().splitlines()[-1], result.stderr[-3000:]
    assert "recipes/grpo.py" not in result.stderr  # the recipe never ran


def test_a_refused_bf16_gets_the_hint_of_the_machine(monkeypatch):
    """On a machine with no GPU the hint is the CPU; on a GPU without bf16, fp16; transformers' refusal of bf16 and
    fp16 together already says what to change and gets no hint (it once got "this machine has no GPU")."""
    import torch

    parser = importlib.import_module("recipes.sft").make_parser()
    argv = ["--config", "recipes/configs/tiny/sft_cpu.yaml"]
    with pytest.raises(ValueError) as error:
        common.parse_or_explain(parser, [*argv, "--use_cpu", "false", "--bf16", "true"])
    assert str(error.value).endswith("-> this machine has no GPU: set use_cpu: true (or bf16: false) for CPU runs")
    with pytest.raises(ValueError) as error:
        common.parse_or_explain(parser, [*argv, "--use_cpu", "true", "--bf16", "true", "--fp16", "true"])
    assert str(error.value) == "At most one of fp16 and bf16 can be True, but not both"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    hint = common.precision_hint("Your setup doesn't support bf16/gpu. You need Ampere+ GPU with cuda>=11.0.")
    assert hint.startswith("this GPU has no bf16") and "fp16: true" in hint
