"""The DPO recipe on the tiny model: the real tiny config, first loss ln 2, parameters that move, validation.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_dpo.py
"""

import json
import logging
import math
import types

import pytest
import torch
from safetensors.torch import load_file

from eval.rollouts import reference_rollouts, write_jsonl
from recipes.dpo import FirstLossCheck, main, make_parser

CONFIG = "recipes/configs/tiny/dpo_cpu.yaml"
LORA_CONFIG = "recipes/configs/tiny/dpo_cpu_lora.yaml"


@pytest.fixture(scope="module")
def reference_pairs(shared_data, tmp_path_factory):
    """Rollouts from 4 GSM8K reference solutions (correct) and the same with a wrong final answer: 4 pairs."""
    records = reference_rollouts("gsm8k_train", str(shared_data / "gsm8k" / "train.jsonl"), limit=4)
    return str(write_jsonl(records, tmp_path_factory.mktemp("rollouts") / "rollouts.jsonl"))


def parse(*flags, config=CONFIG):
    return make_parser().parse_args_and_config(["--config", config, *flags])


def run_args(model_dir, data, out, config=CONFIG):
    return parse(
        "--model_name_or_path", str(model_dir), "--build_tiny_model", "false", "--data", data,
        "--output_dir", str(out), "--max_steps", "2",
        "--per_device_train_batch_size", "2",  # 2 pairs a step
        "--eval_limit", "2", "--eval_max_new_tokens", "4",  # the before/after eval runs, briefly
        config=config,
    )  # fmt: skip


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize(
    "config",
    [
        CONFIG,  # full fine-tuning: TRL reloads the reference from the model path
        LORA_CONFIG,  # LoRA: the reference is the base with adapters disabled
    ],
)
def test_two_step_dpo_run(tiny_model_dir, reference_pairs, tmp_path, config):
    report = main(*run_args(tiny_model_dir, reference_pairs, tmp_path, config))

    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    losses = [r for r in log if "loss" in r and "train_loss" not in r]
    assert losses[0]["step"] == 1 and abs(losses[0]["loss"] - math.log(2)) < 1e-4  # policy == reference
    assert report["first_loss_ok"] is True
    assert [r["step"] for r in losses] == [1, 2]
    assert report["pairs"] == 4 and report["pair_report"]["problems_with_pairs"] == 4
    assert {"before", "after"} <= set(report) and (tmp_path / "eval_after" / "results.json").exists()

    if config == LORA_CONFIG:  # the adapter moved away from its zero start
        adapter = load_file(str(tmp_path / "adapter_model.safetensors"))
        lora_b = [v for k, v in adapter.items() if "lora_B" in k]
        assert lora_b and any(v.abs().max() > 0 for v in lora_b)
    else:
        before, after = weights(tiny_model_dir), weights(tmp_path)
        assert any(not torch.equal(before[k], after[k]) for k in before)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    "rows, flags, message",
    [
        # pairs without a rejected column
        ([{"prompt": "Q", "chosen": "good"}], [], r"no \['rejected'\] column"),
        # rollouts where every answer is wrong: no pair at all
        (
            [
                {
                    "id": 0,
                    "prompt": [],
                    "pass_rate": 0.0,
                    "completions": [{"text": "#### 1", "correct": False, "n_tokens": 3}],
                }
            ],
            [],
            "no preference pair",
        ),
        # a misspelt loss
        ([{"prompt": "Q", "chosen": "good", "rejected": "bad"}], ["--loss_type", "sigmiod"], "unknown DPO loss"),
        # an unknown eval task
        ([{"prompt": "Q", "chosen": "good", "rejected": "bad"}], ["--eval_task", "gsm9k"], "unknown task"),
    ],
)
def test_errors_before_model_load(tmp_path, rows, flags, message):
    data = write(tmp_path / "data.jsonl", rows)
    # the model path does not exist: an error naming the data/config problem proves nothing was loaded first
    args = parse("--model_name_or_path", str(tmp_path / "no_model"), "--build_tiny_model", "false", "--data", data,
                 "--output_dir", str(tmp_path / "out"), *flags)  # fmt: skip
    with pytest.raises(ValueError, match=message):
        main(*args)
    assert not (tmp_path / "out").exists()


def state(step):
    return types.SimpleNamespace(global_step=step)


@pytest.mark.parametrize(
    "step, logs, ok",
    [
        (1, {"loss": 0.693147, "rewards/chosen": 0.0, "rewards/rejected": 0.0}, True),  # the reference is the policy
        (1, {"loss": 0.70, "rewards/chosen": 0.0, "rewards/rejected": 0.0}, False),  # loss off by 7e-3
        (1, {"loss": 0.693147, "rewards/chosen": 0.05, "rewards/rejected": 0.0}, False),  # implicit reward not 0
        (5, {"loss": 0.693147}, False),  # logged after 5 steps: cannot be checked
    ],
)
def test_first_loss_check(caplog, step, logs, ok):
    check = FirstLossCheck(math.log(2))
    with caplog.at_level(logging.WARNING, logger="recipes.dpo"):
        check.on_log(None, state(step), None, logs=logs)
    assert check.ok is ok
    assert bool(caplog.records) is not ok  # a warning exactly when the check fails
    check.on_log(None, state(step + 1), None, logs={"loss": 5.0})  # later logs do not re-run the check
    assert check.ok is ok
