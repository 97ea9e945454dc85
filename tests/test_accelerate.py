"""The multi-process launcher path on CPU: ``accelerate launch --num_processes 2`` runs the GRPO recipe on the tiny
model (two CPU ranks, gloo backend), and the shipped accelerate configs load.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_accelerate.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from eval.jsonl import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE_CONFIGS = sorted((ROOT / "recipes" / "accelerate").glob("*.yaml"))


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
    command += ["--max_steps", "2", "--eval_limit", "2", "--monitor_eval_limit", "2", "--max_completion_length", "8"]
    command += ["--eval_max_new_tokens", "8", "--probe_problems", "1"]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("held-out accuracy") == 1  # one process reports
    assert json.loads((out / "report.json").read_text())["processes"] == 2
    log = read_jsonl(out / "log.jsonl")
    assert [r["step"] for r in log if "loss" in r] == [1, 2]  # one line per log, not one per process
    assert all("monitor/degenerate_share" in r for r in log if "loss" in r)
    assert len(read_jsonl(out / "top_completions.jsonl")) == 2
