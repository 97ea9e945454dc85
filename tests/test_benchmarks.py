"""The benchmarks measure what they say: bench/grpo_overhead.py (CPU, recipe vs plain TRL) and bench/grpo_gpu.py.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_benchmarks.py              # fast + integration
OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -m slow tests/test_benchmarks.py      # the lab warm start's answers
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import grpo_gpu, grpo_overhead
from eval.jsonl import read_jsonl

ROOT = Path(__file__).resolve().parents[1]

# Runs a module with some installed packages made to look absent, as on the GPU machine: find_spec says None (the
# availability checks of transformers, TRL and peft use it) and importing raises.
ABSENT = """
import importlib.abc, importlib.util, runpy, sys
from eval.jsonl import read_jsonl
BLOCKED = {blocked!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in BLOCKED else _find_spec(name, package))
sys.argv = [{module!r}, *{argv!r}]
runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
"""


def run_without(blocked: tuple[str, ...], module: str, argv: list[str]) -> subprocess.CompletedProcess:
    code = ABSENT.format(blocked=set(blocked), module=module, argv=argv)
    env = os.environ | {"OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_gpu_bench_model_has_the_tokenizers_vocabulary(tmp_path):
    # the defect: a 151,936-row model decoded by a 400-token tokenizer, so sampled ids decoded to nothing
    import torch
    from transformers import AutoModelForCausalLM

    from recipes.tiny_model import build_tokenizer

    tokenizer = build_tokenizer()
    folder = grpo_gpu.build_model(tmp_path / "model", "toy", tokenizer, "cpu")
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.vocab_size == len(tokenizer) and model.config.eos_token_id == tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1 + 2?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    torch.manual_seed(0)
    out = model.generate(**prompt, do_sample=True, max_new_tokens=16, num_return_sequences=8)
    texts = tokenizer.batch_decode(out[:, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert sum(bool(t.strip()) for t in texts) >= 7, texts


def test_gpu_bench_shapes_are_qwen25s():
    # Qwen/Qwen2.5-0.5B-Instruct and -1.5B-Instruct config.json; vocab_size deliberately absent (the tokenizer's)
    assert grpo_gpu.SHAPES["0.5b"] == dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    )
    assert grpo_gpu.SHAPES["1.5b"] == dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    )
    assert {(s, g, n) for s, g, n in grpo_gpu.MATRIX} == {("0.5b", g, n) for g in (4, 8) for n in (256, 512)} | {
        ("1.5b", 8, 512)
    }
    assert all(path.exists() for path in grpo_gpu.CONFIG_OF.values())


@pytest.mark.parametrize(
    "completions, share",
    [
        (["2 + 3 = 5\n#### 5", "#### 5", "#### 5"], 1.0),  # committed answers
        (["2 + 3 = 5\n#### 5", "I think it is 5"], 0.5),  # no marker: not an answer
        (["#### 5 or 6", "", [{"role": "assistant", "content": "#### 7"}]], 1 / 3),  # hedge, empty, conversational
    ],
)
def test_answer_share_counts_what_the_extractor_accepts(completions, share):
    assert grpo_overhead.answer_share(completions, "gsm8k") == pytest.approx(share)


@pytest.mark.integration
def test_gpu_bench_smoke_runs_both_arms_without_wandb_or_bitsandbytes(tmp_path):
    # the GPU machine has neither (nor vllm, matplotlib): the code path must not need them
    out = tmp_path / "gpu.json"
    blocked = ("wandb", "bitsandbytes", "vllm", "matplotlib")
    proc = run_without(blocked, "bench.grpo_gpu", ["--smoke", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["optional_modules_imported"] == []
    assert record["failed"] == [] and [row["shape"] for row in record["results"]] == ["toy", "toy_gc"]
    for row in record["results"]:  # the 0.5B config's path, then the 1.5B config's (gradient checkpointing)
        for arm in ("plain", "ours"):
            assert row[f"{arm}_steps"] == 2 and row[f"{arm}_median_s_per_step"] > 0
            assert row[f"{arm}_nonempty_share"] >= 0.9  # completions decode to text: rewards are timed on something


@pytest.mark.integration
def test_overhead_bench_runs_the_recipe_with_probes_and_heldout_eval(tmp_path, data_dir):
    # the defect: a benchmark of "the monitors" with probes and held-out evaluation switched off
    data = [
        "--data",
        str(data_dir / "gsm8k" / "train.jsonl"),
        "--eval_data",
        str(data_dir / "gsm8k" / "test.jsonl"),
        "--num_generations",
        "3",
        "--per_device_train_batch_size",
        "6",
    ]
    config = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"  # probes on 2 problems, eval every 2 steps
    result = grpo_overhead.main(
        ["--config", str(config), "--rounds", "1", "--steps", "2", "--warmup", "0", "--", *data]
    )
    assert result["monitor_eval_steps"] == 2 and result["probe_problems"] == 2
    ours_log = read_jsonl(Path(result["output_dirs"]["ours"][0]) / "log.jsonl")
    assert any("eval/accuracy" in record for record in ours_log)  # held-out eval ran inside the timed training
    assert any("probe/violations" in record for record in ours_log)  # probes too
    assert not (Path(result["output_dirs"]["plain"][0]) / "log.jsonl").exists()  # plain TRL: no monitors
    assert result["ours_callback_s"]["on_step_end"] > 0 and result["ours_callback_s"]["on_train_begin"] > 0
    assert result["completions_seen"] == {"plain": 12, "ours": 12}  # 2 steps x 2 prompts x G=3, every one read
    assert result["ratio_all_in"] > 0 and result["steps_timed_each"] == 2


@pytest.mark.slow
def test_overhead_bench_on_the_lab_warm_start_scores_real_answers():
    # the CPU lab's warm start answers most prompts, so the rewards parse and verify answers while timed
    result = grpo_overhead.main(["--rounds", "1", "--steps", "3", "--warmup", "1"])
    assert result["answer_share"]["plain"] > 0.5 and result["answer_share"]["ours"] > 0.5
    assert result["probe_problems"] > 0 and result["monitor_eval_steps"] > 0


def test_checker_drift_runs_on_the_shipped_data_and_says_what_it_skips(tmp_path, capsys):
    from bench import checker_drift

    assert checker_drift.main(["--save", str(tmp_path / "v.json")]) == 0  # default --data: tests/data
    out = capsys.readouterr().out
    assert "qwen25math_math: skipped" in out and "--data DIR" in out  # the Qwen2.5-Math samples are not shipped
    assert set(json.loads((tmp_path / "v.json").read_text())) == {
        "mathcoder_gsm8k",
        "gpt3_gsm8k",
        "math500_references",
        "math_train_references",
    }
    assert checker_drift.main(["--compare", str(tmp_path / "v.json")]) == 0  # the same checkout: nothing flips
    with pytest.raises(SystemExit) as exit_info:
        checker_drift.main(["--data", str(tmp_path / "nothing")])
    assert exit_info.value.code == 2 and "pass --data DIR" in capsys.readouterr().err


def test_rewards_speed_falls_back_to_math500_references_when_the_samples_are_absent(data_dir):
    from bench import rewards_speed

    assert rewards_speed.math_source(data_dir) == rewards_speed.MATH500
    items = rewards_speed.realistic_completions(40, 0, data_dir)
    assert len(items) == 44 and {task for task, _, _ in items} == {"math", "gsm8k"}  # 40 + 4 runaway
    with pytest.raises(ValueError, match="lower --n"):
        rewards_speed.realistic_completions(5000, 0, data_dir)


def test_bench_data_flags_name_a_missing_folder_in_one_line(tmp_path):
    for module in ("bench.eval_speed", "bench.rewards_speed"):
        done = subprocess.run(
            [sys.executable, "-m", module, "--data", str(tmp_path / "nothing")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stderr.startswith("error: ") and "--data" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1
