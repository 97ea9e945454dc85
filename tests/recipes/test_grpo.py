"""End-to-end GRPO runs of the real recipe on the tiny local model (CPU, no download).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_grpo.py

Every combination {grpo, dr_grpo} x {beta 0, 0.04} x {LoRA, full} runs 2 optimizer steps of the tiny config with
command-line overrides, then we check that the weights moved, that the monitor metrics were logged and finite, and
that the JSON-lines log was written. A random tiny model never writes a correct GSM8K answer, so every group would
be all-wrong and every advantage zero; the runs therefore add a toy reward with variance (registered for the test
only) so that gradients are non-zero.
"""

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from eval.jsonl import read_jsonl, write_jsonl
from recipes import grpo, grpo_setup
from rewards import registry
from rewards.completions import completion_text
from tests.helpers import parse_recipe_config, tiny_run_flags

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"
ALWAYS_FINITE = [  # monitor metrics defined for every batch (lengths by class are null when the class is empty)
    "monitor/correct_rate",
    "monitor/reward_mean",
    "monitor/reward_correctness_gap",
    "monitor/degenerate_share",
    "monitor/degenerate_all_correct_share",
    "monitor/degenerate_all_wrong_share",
    "monitor/duplicate_share",
    "monitor/truncated_rate",
]


def even_length_reward(completions, **kwargs):
    """Toy reward with variance: 1.0 for completions of even character length."""
    return [float(len(completion_text(c)) % 2 == 0) for c in completions]


@pytest.fixture
def toy_reward(monkeypatch):
    monkeypatch.setitem(
        registry.REGISTRY, "toy_even_length", registry.RewardInfo(even_length_reward, "correctness", 1.0)
    )
    return "toy_even_length"


def run_recipe(tiny_model_dir, data_dir, out: Path, *overrides: str):
    args = ["--model_name_or_path", str(tiny_model_dir), "--build_tiny_model", "false", "--output_dir", str(out)]
    args += ["--data", str(data_dir / "gsm8k" / "train.jsonl"), "--eval_data", str(data_dir / "gsm8k" / "test.jsonl")]
    return grpo.main(*parse_recipe_config(grpo, TINY_CONFIG, *args, *tiny_run_flags(), *overrides))


def read_log(out: Path) -> list[dict]:
    return read_jsonl(out / "log.jsonl")


@pytest.mark.integration
@pytest.mark.parametrize("adapter", ["lora", "full"])
@pytest.mark.parametrize("beta", ["0.0", "0.04"])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_two_step_run_trains_and_logs_monitors(
    tiny_model_dir, data_dir, tmp_path, toy_reward, loss_type, beta, adapter
):
    out = tmp_path / "run"
    scale = "none" if loss_type == "dr_grpo" else "group"
    overrides = ["--loss_type", loss_type, "--beta", beta, "--scale_rewards", scale]
    overrides += ["--reward_funcs", toy_reward, "gsm8k_format", "--reward_weights", "1.0", "1.0"]
    overrides += ["--learning_rate", "0.05"]  # large: one step must visibly move the tiny model's weights
    if adapter == "lora":
        overrides += ["--use_peft", "true", "--lora_r", "4"]
    run_recipe(tiny_model_dir, data_dir, out, *overrides)

    # the weights moved: LoRA's B matrices start at zero; full fine-tuning differs from the saved tiny model
    if adapter == "lora":
        lora_b = [t for name, t in load_file(out / "adapter_model.safetensors").items() if "lora_B" in name]
        assert lora_b and any(t.abs().max() > 0 for t in lora_b)
    else:
        before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
        changed = [name for name in before if not torch.equal(before[name], after[name])]
        assert len(changed) > len(before) // 2, f"only {changed} changed"

    # monitor, probe and held-out metrics are in the JSON-lines log, finite
    log = read_log(out)
    steps = [r for r in log if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        for name in ALWAYS_FINITE:
            assert math.isfinite(record[name]), (name, record[name])
    # the expected degenerate share is predicted from earlier batches: none before step 1 (no pass_rate prior)
    assert steps[0]["monitor/degenerate_expected_share"] is None and steps[0]["monitor/degenerate_expected_source/none"]
    assert 0 <= steps[1]["monitor/degenerate_expected_share"] <= 1
    assert steps[1]["monitor/degenerate_expected_source/none"] == 0.0
    assert math.isfinite(steps[0]["probe/genuine_correct"]) and steps[0]["probe/violations"] >= 0  # scored at start
    assert math.isfinite(steps[1]["eval/accuracy"])  # monitor_eval_steps: 2
    assert ("kl" in steps[0]) == (beta != "0.0")
    assert 0 < steps[0]["train_seconds"] <= steps[1]["train_seconds"]  # the optimizer steps' own clock
    top = read_jsonl(out / "top_completions.jsonl")
    assert len(top) == 2 and 0 < len(top[0]["rows"]) <= 20
    assert top[0]["rows"][0]["reward"] == max(r["reward"] for r in top[0]["rows"])


def says_right(completions, **kwargs):
    """A correctness reward whose verdict differs from eval's scorer: 'right' anywhere is correct."""
    return [float("right" in completion_text(c)) for c in completions]


def test_recipe_wires_the_monitor_to_the_runs_weights_g_budget_and_correctness(monkeypatch):
    from tests.recipes.test_monitors import call_batch

    monkeypatch.setitem(registry.REGISTRY, "toy_says_right", registry.RewardInfo(says_right, "correctness", 1.0))
    args = ["--reward_funcs", "gsm8k_format", "toy_says_right"]
    args += ["--reward_weights", "0.5", "10.0"]  # not 1.0, and the correctness reward second
    args += ["--num_generations", "4", "--per_device_train_batch_size", "8"]  # 2 groups per batch, G = 4
    args += ["--max_completion_length", "6", "--logging_steps", "3"]  # not the defaults (512, 10)
    script_args, training_args, _ = parse_recipe_config(grpo, TINY_CONFIG, *args)
    names = script_args.reward_funcs
    monitor = grpo_setup.reward_monitor(names, grpo_setup.build_rewards(names, script_args), training_args, "gsm8k")

    texts = ["right #### 1", "right", "no", "no #### 2"] + ["right"] * 4  # eval's scorer: none is correct (gold 7)
    ids = [[1] * 6, [1] * 2, [1] * 6, [1] * 3] + [[1] * 2] * 4
    _, logged, _ = call_batch(monitor, texts, ["7"] * 8, ["p"] * 4 + ["q"] * 4, ids, pass_rate=[0.5] * 8)
    assert logged["monitor/correct_rate"] == 0.75  # the run's correctness reward decides, not eval's scorer
    assert logged["monitor/reward_mean"] == pytest.approx((10.05 + 10.0 + 0.0 + 0.05 + 40.0) / 8)  # weighted
    assert logged["monitor/truncated_rate"] == 0.25  # two completions used the whole budget of 6 tokens
    assert logged["monitor/degenerate_expected_share"] == pytest.approx(0.125)  # 0.5**4 + 0.5**4, G = 4 not 2


@pytest.mark.parametrize("monitor_data", [None, "tests/data/gsm8k/train.jsonl"])
def test_monitor_checks_read_monitor_eval_data_when_given(data_dir, monitor_data):
    from datasets import Dataset

    from eval.tasks import get_task

    args = ["--eval_data", str(data_dir / "gsm8k" / "test.jsonl"), "--monitor_eval_steps", "2"]
    args += ["--monitor_eval_data", monitor_data] if monitor_data else []
    script_args, training_args, _ = parse_recipe_config(grpo, TINY_CONFIG, *args)
    rewards = grpo_setup.build_rewards(script_args.reward_funcs, script_args)
    rows = Dataset.from_list([{"question": "q", "answer": "1"}])
    task = get_task(script_args.task)
    monitors = grpo_setup.build_monitors(script_args, training_args, rows, rewards, task, get_task("gsm8k"))
    # the checks (and so the hack alarm and the best checkpoint) read the dev set; before/after stay on eval_data
    assert monitors.eval_kwargs["data"] == (monitor_data or str(data_dir / "gsm8k" / "test.jsonl"))
    assert grpo_setup.eval_settings(script_args, training_args)["data"] == str(data_dir / "gsm8k" / "test.jsonl")


def test_a_missing_monitor_eval_data_file_is_named_before_a_model_loads(tmp_path, monkeypatch):
    import trl

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the error")

    monkeypatch.setattr(trl, "GRPOTrainer", no_model)
    args = ["--monitor_eval_steps", "2", "--monitor_eval_data", str(tmp_path / "no_dev.jsonl")]
    args += ["--model_name_or_path", str(tmp_path / "no_model"), "--build_tiny_model", "true"]
    with pytest.raises(ValueError, match=r"no_dev.jsonl does not exist: pass --monitor_eval_data"):
        grpo.main(*parse_recipe_config(grpo, TINY_CONFIG, *args, "--output_dir", str(tmp_path / "out")))


def maybe_unscorable(completions, **kwargs):
    """Toy correctness: 1.0 for an even length, None (cannot score) when the length is a multiple of 3."""
    return [None if len(completion_text(c)) % 3 == 0 else float(len(completion_text(c)) % 2 == 0) for c in completions]


def flaky_judge(completions, **kwargs):
    """Toy judge: a score from the length, None (judge failed) where maybe_unscorable gives None too."""
    return [None if len(completion_text(c)) % 3 == 0 else len(completion_text(c)) % 5 / 5 for c in completions]


@pytest.mark.integration
def test_monitor_reward_mean_and_truncation_equal_trls_own_logs(tiny_model_dir, data_dir, tmp_path, monkeypatch):
    # completions every reward scores None are unscorable for TRL (left out of `reward`): the monitor must agree
    monkeypatch.setitem(registry.REGISTRY, "toy_unscorable", registry.RewardInfo(maybe_unscorable, "correctness", 1))
    monkeypatch.setitem(registry.REGISTRY, "toy_flaky_judge", registry.RewardInfo(flaky_judge, "judge", 1.0))
    monitors, make_monitor = [], grpo_setup.reward_monitor
    keep = lambda *args: monitors.append(make_monitor(*args)) or monitors[-1]  # noqa: E731
    monkeypatch.setattr(grpo_setup, "reward_monitor", keep)
    # training rows with the pass_rate column `training_data.rollouts filter` writes: the monitor's prior for unseen
    # prompts
    rows = read_jsonl(data_dir / "gsm8k" / "train.jsonl")[:16]
    data = write_jsonl([row | {"pass_rate": 0.25} for row in rows], tmp_path / "filtered.jsonl")
    out = tmp_path / "run"
    overrides = ["--reward_funcs", "toy_flaky_judge", "toy_unscorable", "--reward_weights", "0.5", "10.0"]
    overrides += ["--max_steps", "4", "--logging_steps", "2", "--monitor_eval_steps", "0", "--probe_problems", "0"]
    run_recipe(tiny_model_dir, data_dir, out, *overrides, "--data", str(data))
    # truncation as TRL counts it: the recipe hands the monitor TRL's end-of-sequence ids (a completion that ends
    # with one exactly at the budget is not cut off; this run happens to have none, so the log check alone is blind)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tokenizer.eos_token_id in monitors[0].stop_token_ids
    steps = [r for r in read_log(out) if "loss" in r]
    assert [r["step"] for r in steps] == [2, 4]  # each log averages two generation batches
    assert any(r["monitor/unscorable_rate"] > 0 for r in steps)  # the case this test is about happened
    # with priors even the first batch has a prediction (without them its source is 'none' and the first log's share
    # of 'none' would be 0.5)
    assert steps[0]["monitor/degenerate_expected_source/none"] == 0.0
    assert steps[0]["monitor/degenerate_expected_source/prior"] > 0
    for record in steps:
        assert record["monitor/reward_mean"] == pytest.approx(record["reward"], rel=1e-5)
        assert record["monitor/truncated_rate"] == pytest.approx(record["completions/clipped_ratio"])


@pytest.mark.integration
def test_resume_after_kill_continues_from_last_checkpoint(tiny_model_dir, data_dir, tmp_path, toy_reward, capsys):
    out = tmp_path / "run"
    common = ["--reward_funcs", toy_reward, "--reward_weights", "1.0", "--monitor_eval_steps", "0"]
    run_recipe(tiny_model_dir, data_dir, out, *common, "--save_strategy", "steps", "--save_steps", "1")
    assert (out / "checkpoint-2").is_dir()
    run_recipe(tiny_model_dir, data_dir, out, *common, "--max_steps", "3", "--save_strategy", "no")
    assert f"resuming from {out / 'checkpoint-2'}" in capsys.readouterr().out
    assert [r["step"] for r in read_log(out) if "loss" in r] == [1, 2, 3]  # step 3 only, appended


@pytest.mark.integration
def test_a_resumed_run_logs_each_step_once(tiny_model_dir, data_dir, tmp_path, toy_reward, capsys):
    out = tmp_path / "run"
    common = ["--reward_funcs", toy_reward, "--reward_weights", "1.0", "--monitor_eval_steps", "0"]
    run_recipe(tiny_model_dir, data_dir, out, *common, "--save_strategy", "steps", "--save_steps", "1")
    shutil.rmtree(out / "checkpoint-2")  # as if killed after logging step 2, before saving it, mid-line
    with open(out / "log.jsonl", "a") as log:
        log.write('{"step": 3, "loss"')
    run_recipe(tiny_model_dir, data_dir, out, *common, "--max_steps", "3", "--save_strategy", "no")
    assert re.search(r"dropped \d+ log row\(s\) written after step 1 by the run that stopped", capsys.readouterr().out)
    assert [r["step"] for r in read_log(out) if "loss" in r] == [1, 2, 3]  # step 2 once: the resumed run's
    completions = [json.loads(line)["step"] for line in (out / "top_completions.jsonl").read_text().splitlines()]
    assert completions == sorted(set(completions))


@pytest.mark.integration
def test_wandb_offline_run_has_identity_and_redacted_config(
    tiny_model_dir, data_dir, tmp_path, toy_reward, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    for name in ("WANDB_RUN_GROUP", "WANDB_TAGS"):  # set then delete: monkeypatch removes what the recipe sets
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    out = tmp_path / "run"
    run_recipe(
        tiny_model_dir,
        data_dir,
        out,
        "--report_to",
        "wandb",
        "--reward_funcs",
        toy_reward,
        "--reward_weights",
        "1.0",
        "--max_steps",
        "1",
        "--monitor_eval_steps",
        "0",
        "--hub_token",
        "hf_do_not_leak",
    )
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # offline runs keep config, tags and group in the binary run-*.wandb log until synced: search its bytes
    files = "".join(p.read_bytes().decode("utf-8", "ignore") for p in runs[0].rglob("*") if p.is_file())
    assert "hf_do_not_leak" not in files and "hf_do_not_leak" not in (out / "resolved_config.json").read_text()
    assert "monitor_eval_limit" in files  # the recipe's own arguments are saved, not only TrainingArguments
    group = f"gsm8k_train-{tiny_model_dir.name.lower()}-grpo-b0-toy_even_length-full"
    assert f"'run_name': '{group}-s0'" in files  # W&B's group and tags come from the environment the recipe sets
    assert os.environ["WANDB_RUN_GROUP"] == group and "rewards=toy_even_length" in os.environ["WANDB_TAGS"]
    config = json.loads((out / "resolved_config.json").read_text())
    assert config["run_name"] == f"{group}-s0"


@pytest.mark.integration
def test_qlora_runs_on_cpu_with_a_warning(tiny_model_dir, data_dir, tmp_path, toy_reward):
    # bitsandbytes 4-bit works on CPU (slowly): the recipe warns and trains the LoRA adapters
    out = tmp_path / "run"
    overrides = ["--use_peft", "true", "--lora_r", "4", "--load_in_4bit", "true", "--monitor_eval_steps", "0"]
    overrides += ["--reward_funcs", toy_reward, "--reward_weights", "1.0", "--learning_rate", "0.05"]
    with pytest.warns(UserWarning, match="QLoRA on CPU"):
        run_recipe(tiny_model_dir, data_dir, out, *overrides)
    lora_b = [t for name, t in load_file(out / "adapter_model.safetensors").items() if "lora_B" in name]
    assert lora_b and any(t.abs().max() > 0 for t in lora_b)
