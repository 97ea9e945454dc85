"""Every shipped GPU config, run for one step on a real pretrained model (SmolLM2-135M-Instruct) on CPU.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -m slow tests/recipes/test_real_model_configs.py`` (needs
``make real-model``; skips with that command when the model is absent).

Each config is read from the same YAML file a GPU user runs; only these overrides are added, and each says why:
the model path (the real model in place of the hub model), the local data, float32 on CPU, one optimizer step on a
tiny batch and a short completion, brief before/after evals, no W&B, no checkpoint. The QLoRA config keeps
``load_in_4bit`` (bitsandbytes NF4 runs on CPU). What cannot run on CPU is named in ``SKIPPED_ON_CPU``.
The real tokenizer (49,152 tokens, ChatML template, ``<|im_end|>`` as end of turn) goes through every recipe: a
config that breaks on it fails here. ``tiny/`` and ``lab/`` configs are CPU configs with tests of their own.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

from eval.jsonl import read_jsonl, write_jsonl
from recipes.parser import recipe_configs
from tests.helpers import parse_recipe_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "recipes" / "configs"
CPU_FOLDERS = {"tiny", "lab", "lab_rm", "real_lab"}  # tested elsewhere (test_grpo, test_dpo, test_judge_lab,
# test_reward_model_lab, test_cpu_lab_real)
GPU_CONFIGS = [p for p in recipe_configs(CONFIGS) if not CPU_FOLDERS & set(p.relative_to(CONFIGS).parts)]
SKIPPED_ON_CPU = {
    # what a GPU config asks for that this test turns off, and why
    "use_vllm_if_available / vllm_mode colocate": "vLLM needs a CUDA GPU (and is not installed here): HF generate",
    "bf16 autocast": "no bf16 autocast on this CPU path: float32 throughout (use_cpu, dtype float32)",
    "judge server (vllm serve Qwen2.5-1.5B-Instruct)": "no server on CPU: SmolLM2 judges in-process, log-probability"
    " mode (it never writes a parseable score: docs/judge_lab.md)",
}
COMMON = [
    "--use_cpu",
    "true",  # no GPU: TRL refuses bf16 otherwise
    "--bf16",
    "false",
    "--dtype",
    "float32",  # the configs load bf16/float32 weights for GPU kernels; CPU runs float32
    "--max_steps",
    "1",  # one optimizer step: the path, not the result
    "--gradient_accumulation_steps",
    "1",  # the GPU configs accumulate 4-16 micro-batches
    "--logging_steps",
    "1",
    "--save_strategy",
    "no",
    "--report_to",
    "none",
]


def recipe_of(config: Path) -> str:
    """The recipe the labs' runner launches ``config`` with (its file-name prefix; none matching is an error)."""
    from cpu_lab.runner import recipe_for

    return recipe_for(config)


def overrides(config: Path, model: Path, out: Path, shared: Path, pairs: Path) -> list[str]:
    """The CPU overrides for one config (on top of COMMON)."""
    recipe = recipe_of(config)
    flags = ["--model_name_or_path", str(model), "--output_dir", str(out)]
    if config.name.startswith("judge_lab_"):  # a GRPO config with its one question: no data to pass
        flags += ["--num_generations", "2", "--per_device_train_batch_size", "2", "--max_completion_length", "16"]
        if "judge_lab_judge" in config.name:  # SKIPPED_ON_CPU: the judge server
            flags += ["--judge_backend", "hf", "--judge_model", str(model), "--judge_mode", "logprob"]
    elif recipe == "recipes.grpo":
        math_task = "math" in config.parts
        train = shared / ("math_train/train.jsonl" if math_task else "gsm8k/train.jsonl")
        held_out = shared / ("math500/test.jsonl" if math_task else "gsm8k/test.jsonl")
        flags += [
            "--data",
            str(train),
            "--train_limit",
            "8",
            "--eval_data",
            str(held_out),
            "--use_vllm_if_available",
            "false",  # SKIPPED_ON_CPU
            "--num_generations",
            "2",
            "--per_device_train_batch_size",
            "2",  # one prompt, G = 2
            "--max_completion_length",
            "16",
            "--eval_limit",
            "2",
            "--eval_max_new_tokens",
            "8",  # before/after evals run, briefly
            "--monitor_eval_steps",
            "0",
            "--probe_problems",
            "1",
        ]
    elif recipe in ("recipes.dpo", "recipes.reward_model"):
        flags += ["--data", str(pairs), "--per_device_train_batch_size", "2", "--max_length", "512"]
        if recipe == "recipes.dpo":
            flags += [
                "--eval_data",
                str(shared / "gsm8k/test.jsonl"),
                "--eval_limit",
                "2",
                "--eval_max_new_tokens",
                "8",
            ]
        else:
            flags += ["--eval_fraction", "0.25", "--per_device_eval_batch_size", "2", "--eval_strategy", "no"]
    elif recipe == "recipes.sft":
        flags += ["--data", str(shared / "gsm8k/train.jsonl"), "--train_limit", "8", "--eval_data"]
        flags += [str(shared / "gsm8k/test.jsonl"), "--eval_limit", "2", "--eval_max_new_tokens", "8"]
        flags += ["--per_device_train_batch_size", "2", "--max_length", "512"]
    return COMMON + flags


@pytest.fixture(scope="module")
def real_model() -> Path:
    from recipes.real_model import require_real_model

    return require_real_model()


@pytest.fixture(scope="module")
def rollouts(data_dir, tmp_path_factory) -> Path:
    """Rollouts from 8 GSM8K reference solutions and the same with a wrong final answer: pairs for DPO and the RM."""
    from training_data.rollouts import reference_rollouts

    records = reference_rollouts("gsm8k_train", str(data_dir / "gsm8k" / "train.jsonl"), limit=8)
    return write_jsonl(records, tmp_path_factory.mktemp("rollouts") / "rollouts.jsonl")


def test_every_gpu_config_has_a_recipe_and_the_matrix_is_all_here():
    names = [str(p.relative_to(CONFIGS)) for p in GPU_CONFIGS]
    assert all(recipe_of(p) for p in GPU_CONFIGS)
    # GSM8K GRPO matrices of both models, MATH, QLoRA, DPO and the judge lab are among them
    expected = [
        "gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.04.yaml",  # the GSM8K matrix
        "gsm8k/qwen2.5-1.5b-instruct/grpo_qlora_drgrpo_b0.yaml",  # QLoRA
        "math/qwen2.5-1.5b-instruct/grpo_lora_drgrpo_b0.yaml",  # MATH
        "gsm8k/qwen2.5-1.5b-instruct/dpo_lora.yaml",  # DPO
        "judge_lab/qwen2.5-0.5b-instruct/judge_lab_judge_b0.yaml",  # the judge lab
    ]
    for name in expected:
        assert name in names


@pytest.mark.slow
@pytest.mark.parametrize("config", GPU_CONFIGS, ids=[str(p.relative_to(CONFIGS)) for p in GPU_CONFIGS])
def test_gpu_config_runs_one_step_on_the_real_model(config, real_model, rollouts, data_dir, tmp_path, capsys):
    module = importlib.import_module(recipe_of(config))
    out = tmp_path / "run"
    parsed = parse_recipe_config(module, config, *overrides(config, real_model, out, data_dir, rollouts))
    script_args, training_args, model_args = parsed
    assert model_args.load_in_4bit == ("qlora" in config.name)  # QLoRA stays 4-bit (bitsandbytes on CPU)
    module.main(*parsed)
    log = read_jsonl(out / "log.jsonl")
    steps = [r for r in log if "loss" in r and "train_loss" not in r]
    assert steps and steps[0].get("step", 1) == 1 and math.isfinite(steps[0]["loss"]), log
    if recipe_of(config) == "recipes.grpo":
        assert steps[0]["completions/mean_length"] > 0  # the real model wrote something, through the real template
    if recipe_of(config) == "recipes.dpo":
        assert steps[0]["loss"] == pytest.approx(math.log(2), abs=1e-3)  # policy == reference at step 1
    if "judge_lab_judge" in config.name:  # the log-probability judge scored answers: no reward was None
        assert steps[0]["judge/low_mass_frac"] == 0.0 and steps[0]["judge/score_mass_mean"] > 0.5
