"""What a run calls itself and what it says it left out: the SFT run's name has no beta, and the reward-model recipe
says how many pairs did not fit ``max_length``, in one printed line and in ``report.json``.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_run_reports.py
"""

from __future__ import annotations

import functools
import json

import pytest
from trl import ModelConfig

from recipes import common, reward_model, sft
from tests.helpers import parse_recipe_config, write_reference_pairs


class Named(Exception):
    """Raised by the stand-in ``start_run``: the run's identity, before any model loads."""


def test_the_sft_run_name_has_no_beta(tiny_model_dir, tmp_path, monkeypatch):
    def start_run(script_args, training_args, model_args, identity):
        raise Named(identity)

    monkeypatch.setattr(common, "start_run", start_run)
    args = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(tmp_path / "out"), "--seed", "2"]
    with pytest.raises(Named) as named:
        sft.main(*parse_recipe_config(sft, "recipes/configs/tiny/sft_cpu.yaml", *args))
    identity = named.value.args[0]
    assert identity["name"] == f"gsm8k_train-{tiny_model_dir.name}-sft-reference_solutions-full-s2"
    assert not any(tag.startswith("beta=") for tag in identity["tags"])


def test_a_method_with_a_beta_keeps_it_in_the_name():
    model = ModelConfig(model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct")
    identity = common.run_identity("gsm8k", model, "grpo", 0.0, ["gsm8k_correctness"], 1)
    assert identity["group"] == "gsm8k-qwen2.5-0.5b-instruct-grpo-b0-gsm8k_correctness-full"


@pytest.fixture(scope="module")
def pairs(data_dir, tmp_path_factory):
    return write_reference_pairs(data_dir, tmp_path_factory.mktemp("rollouts"), limit=24)


@pytest.mark.integration
def test_the_reward_model_says_how_many_pairs_were_too_long(tiny_model_dir, pairs, tmp_path, capsys):
    parse = functools.partial(parse_recipe_config, reward_model, "recipes/configs/tiny/reward_model_cpu.yaml")
    flags = ["--model_name_or_path", str(tiny_model_dir), "--build_tiny_model", "false", "--data", pairs]
    flags += ["--output_dir", str(tmp_path), "--max_steps", "1", "--eval_strategy", "no", "--max_length", "380"]
    report = reward_model.main(*parse(*flags, as_run=True))
    dropped = report["dropped_over_max_length"]
    total = dropped["train"] + dropped["heldout"]
    assert dropped["max_length"] == 380 and 0 < total < report["pairs"], dropped
    assert report["train_pairs"] + report["heldout_pairs"] + total == report["pairs"]
    assert json.loads((tmp_path / "report.json").read_text())["dropped_over_max_length"] == dropped
    lines = [line for line in capsys.readouterr().out.splitlines() if "max_length=380" in line]
    assert len(lines) == 1 and lines[0].startswith(f"{total} of {report['pairs']} pairs dropped"), lines
    assert "longer than max_length=380 tokens" in lines[0] and "raise max_length" in lines[0]
