"""GPU step time and peak memory of the GRPO recipe's trainer (all per-step monitors) vs plain TRL ``GRPOTrainer``:
the Qwen2.5-0.5B architecture with RANDOM weights (no hub needed), LoRA, G in {4, 8} x completion length {256, 512}.

    python -m bench.grpo_gpu                 # one CUDA GPU; about 5-8 minutes on an H100-class GPU (estimate)
    python -m bench.grpo_gpu --smoke         # CPU check of the code path: toy sizes, 1 setting, 2 steps

NOT RUN YET: no GPU was available when this was written (see docs/grpo.md). Random weights rarely emit EOS, so every
completion runs to the length limit: the numbers are the worst case for a given length, which is what a memory
budget needs. Prompts are synthetic sums (the offline data may not be on the GPU machine), tokenized by the local
tiny tokenizer (ids < 400 of Qwen's 151,936-row embedding).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench.grpo_overhead import StepTimer, make_config

QWEN25_05B = dict(  # Qwen/Qwen2.5-0.5B-Instruct config.json
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
TOY = dict(
    QWEN25_05B, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
)


def build_model(folder: Path, smoke: bool) -> Path:
    """Random-weight Qwen2 with the 0.5B shape, saved with the local tiny tokenizer (TRL loads models by path)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from lab.tiny_model import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2Config(**(TOY if smoke else QWEN25_05B), bos_token_id=None, eos_token_id=tokenizer.eos_token_id)
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.float32 if smoke else torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def rows(n: int):
    from datasets import Dataset

    from eval.tasks import get_task

    task = get_task("gsm8k_train")
    data = [{"question": f"Tom has {a} apples and buys {b} more. How many now?", "answer": str(a + b)} for a, b in
            zip(range(3, 3 + n), range(5, 5 + n), strict=True)]  # fmt: skip
    return Dataset.from_list([{"prompt": task.prompt(r["question"]), **r} for r in data])


def run_one(model_dir: Path, out: Path, kind: str, group_size: int, length: int, steps: int, smoke: bool) -> dict:
    import torch
    from peft import LoraConfig
    from trl import GRPOTrainer

    from eval.monitors import JsonlLogCallback, MonitorCallback, RewardMonitor, make_monitored_trainer_class
    from rewards import get_reward

    names, weights = ["gsm8k_correctness", "gsm8k_format"], [1.0, 1.0]
    funcs = [get_reward(n) for n in names]
    config = make_config(out, steps, group_size, length, use_cpu=smoke, bf16=not smoke, learning_rate=1e-5,
                         lr_scheduler_type="linear")  # fmt: skip
    peft = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    timer = StepTimer()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    if kind == "plain":
        trainer = GRPOTrainer(str(model_dir), funcs, args=config, train_dataset=rows(64), peft_config=peft,
                              callbacks=[timer])  # fmt: skip
    else:
        monitor = RewardMonitor(funcs, weights, "gsm8k", length, correctness_index=0)
        callback = MonitorCallback(monitor, out, report_to=[])
        trainer = make_monitored_trainer_class(GRPOTrainer)(
            str(model_dir), monitor.wrapped(), args=config, train_dataset=rows(64), peft_config=peft,
            callbacks=[JsonlLogCallback(out / "log.jsonl"), callback, timer],
        )  # fmt: skip
        trainer.monitor_callback = callback
    trainer.train()
    timed = timer.times[1:] or timer.times  # drop the first step (kernel compilation, allocator warm-up)
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    del trainer
    return {"s_per_step": round(statistics.median(timed), 3), "peak_gib": round(peak, 2), "steps_timed": len(timed)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--smoke", action="store_true", help="toy sizes on CPU, one setting, to test the code path")
    parser.add_argument("--out", default=None, help="write the results as JSON here too")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    import torch

    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("bench.grpo_gpu needs a CUDA GPU (use --smoke to check the code path on CPU)")
    tmp = Path(tempfile.mkdtemp(prefix="grpo_gpu_"))
    model_dir = build_model(tmp / "model", args.smoke)
    settings = [(2, 8)] if args.smoke else [(g, n) for g in (4, 8) for n in (256, 512)]
    steps = 2 if args.smoke else args.steps
    results = []
    for group_size, length in settings:
        row = {"G": group_size, "completion_length": length}
        for kind in ("plain", "monitored"):
            stats = run_one(
                model_dir, tmp / f"{kind}_{group_size}_{length}", kind, group_size, length, steps, args.smoke
            )
            row |= {f"{kind}_{k}": v for k, v in stats.items()}
        row["ratio"] = round(row["monitored_s_per_step"] / row["plain_s_per_step"], 3)
        results.append(row)
        print(json.dumps(row), flush=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"\n{device}; command: python -m bench.grpo_gpu {' '.join(argv)}")
    print("| G | completion length | plain s/step | ours s/step | ratio | plain peak GiB | ours peak GiB |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['G']} | {r['completion_length']} | {r['plain_s_per_step']} | {r['monitored_s_per_step']} | "
              f"{r['ratio']} | {r['plain_peak_gib']} | {r['monitored_peak_gib']} |")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps({"device": device, "results": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
