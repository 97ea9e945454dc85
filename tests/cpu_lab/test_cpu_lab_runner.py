"""The labs' one runner (cpu_lab/runner.py): every lab launches recipe runs through it, and it goes through the
recipe's own command-line checks.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_runner.py
"""

import subprocess
import sys
from pathlib import Path

import pytest

from cpu_lab import runner

ROOT = Path(__file__).resolve().parents[2]
LABS = ("cpu_lab", "judge_lab", "reward_model_lab")
# what launching a recipe another way looks like: parsing its config, or a pool of processes of one's own
OTHER_LAUNCHES = ("parse_args_and_config(", "parse_or_explain(", "ProcessPoolExecutor", "subprocess.Popen(")


def test_the_labs_launch_recipes_only_through_the_runner():
    found = [
        f"{path.relative_to(ROOT)}: {pattern}"
        for lab in LABS
        for path in sorted((ROOT / lab).rglob("*.py"))
        if path.name != "runner.py"
        for pattern in OTHER_LAUNCHES
        if pattern in path.read_text(encoding="utf-8")
    ]
    assert not found, found


def test_a_run_goes_through_the_recipes_checks(monkeypatch, tmp_path):
    """DeepSpeed asked for where it is not installed: the recipe's check (parse_or_explain) refuses it in one line,
    before the config is parsed; a bare parse would fail inside transformers instead."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    config = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"
    with pytest.raises(ValueError, match="--deepspeed asks for DeepSpeed, which is not installed"):
        runner.run_one(config, 0, tmp_path / "out", ["--deepspeed", "ds_config.json"])
    assert not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.parametrize(
    "name, recipe",
    [
        ("grpo_lab_default.yaml", "recipes.grpo"),
        ("judge_lab_tiny_judge_b0.04.yaml", "recipes.grpo"),  # a judge-lab config is a GRPO config
        ("dpo_real.yaml", "recipes.dpo"),
        ("sft_lab_warmstart.yaml", "recipes.sft"),
        ("reward_model_lab_rm.yaml", "recipes.reward_model"),
    ],
)
def test_the_file_name_prefix_names_the_recipe(name, recipe):
    assert runner.recipe_for(f"recipes/configs/x/{name}") == recipe


def test_run_at_once_refuses_no_jobs():
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        runner.run_at_once([], jobs=0)


@pytest.mark.heavy  # starts a process
def test_a_logging_handler_made_during_one_in_process_run_still_writes_during_the_next(tmp_path):
    """Runs in turn in one process (``--jobs 1``): a library that makes its logging handler on ``sys.stderr`` during the
    first run (transformers does) must write into the second run's log, not fail on the first run's closed file."""
    script = f"""
import logging, sys
from cpu_lab.runner import output_to
with output_to({str(tmp_path / "one.log")!r}):
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger("library").addHandler(handler)
    logging.getLogger("library").warning("first run")
with output_to({str(tmp_path / "two.log")!r}):
    logging.getLogger("library").warning("second run")
    print("printed in the second run")
print("back on the terminal")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "one.log").read_text() == "first run\n"
    assert (tmp_path / "two.log").read_text() == "second run\nprinted in the second run\n"
    assert "Logging error" not in done.stderr and done.stdout == "back on the terminal\n"
