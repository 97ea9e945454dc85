"""Peak GPU memory of a GRPO config, estimated from its YAML before anything runs: weights, gradients and optimizer
state, saved activations, logits, the vLLM share, and a fixed overhead.

    python -m recipes.memory recipes/configs/gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.yaml     # one config
    python -m recipes.memory recipes/configs                                                    # every GPU config

vLLM (colocate) reserves ``vllm_gpu_memory_utilization`` of the GPU up front; a 4-bit model generates with
transformers and pays for its KV cache instead. The activation and logits terms match CPU-measured peaks for small
shapes (tests/recipes/test_memory.py); GPU peaks can only be measured there (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from recipes.parser import is_base_config, load_config

GB = 1024**3
ACT_PER_HIDDEN, ACT_PER_MLP = 14, 4  # saved elements per token per layer (counted for a Qwen2/Llama decoder layer)
OVERHEAD_GB = 1.5
PROMPT_TOKENS = {"gsm8k": 200, "math": 250}  # chat-templated prompt length, generous (Qwen2.5: ~120-180 for GSM8K)
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
HEADER_RE = re.compile(r"sized for a (\d+) GB GPU: estimated peak ([\d.]+) GB", re.IGNORECASE)


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    tied: bool

    @property
    def linear_params(self) -> int:
        kv = self.hidden // self.heads * self.kv_heads
        attention = self.hidden * (self.hidden + 2 * kv) + (self.hidden + 2 * kv) + self.hidden * self.hidden
        return self.layers * (attention + 3 * self.hidden * self.intermediate)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def params(self) -> int:
        return self.linear_params + self.embedding_params + self.layers * 2 * self.hidden + self.hidden

    def lora_params(self, rank: int) -> int:
        """LoRA parameters on every linear layer of the decoder (``all-linear``; not the LM head)."""
        kv = self.hidden // self.heads * self.kv_heads
        shapes = [(self.hidden, self.hidden), (self.hidden, kv), (self.hidden, kv), (self.hidden, self.hidden)]
        shapes += [(self.hidden, self.intermediate)] * 2 + [(self.intermediate, self.hidden)]
        return self.layers * sum(rank * (i + o) for i, o in shapes)


SHAPES = {  # from each model's config.json
    "Qwen/Qwen2.5-0.5B-Instruct": Shape(151936, 896, 4864, 24, 14, 2, True),
    "Qwen/Qwen2.5-1.5B-Instruct": Shape(151936, 1536, 8960, 28, 12, 2, True),
}


def activation_bytes(shape: Shape, tokens: int, act_bytes: int, checkpointing: bool) -> int:
    per_layer = act_bytes * (ACT_PER_HIDDEN * shape.hidden + ACT_PER_MLP * shape.intermediate) * tokens
    if checkpointing:  # layer inputs kept, one layer's activations alive during its recomputation
        return act_bytes * shape.hidden * tokens * shape.layers + per_layer
    return per_layer * shape.layers


def logits_bytes(shape: Shape, sequences: int, completion: int, act_bytes: int) -> int:
    return sequences * completion * shape.vocab * (2 * act_bytes + 8)


def estimate(config: dict, gpu_gb: float) -> dict:
    """Each term in GB and their sum ``total``, for a GRPO config (its YAML as a dict) on a GPU of ``gpu_gb``."""
    shape = SHAPES.get(config["model_name_or_path"])
    if shape is None:
        raise ValueError(f"no shape for {config['model_name_or_path']!r}: add its config.json values to SHAPES")
    dtype = config.get("dtype", "float32")
    four_bit = bool(config.get("load_in_4bit"))
    if four_bit:
        weights = shape.linear_params * 0.53 + (shape.params - shape.linear_params) * 2
    else:
        weights = shape.params * BYTES[dtype]
    trainable = shape.lora_params(config["lora_r"]) if config.get("use_peft") else shape.params
    act_bytes = 2 if config.get("bf16") else BYTES[dtype]
    batch = config["per_device_train_batch_size"]
    completion = config["max_completion_length"]
    tokens = batch * (PROMPT_TOKENS[config.get("task", "gsm8k").split("_")[0]] + completion)
    checkpointing = config.get("gradient_checkpointing", True)  # TRL's default is true
    use_vllm = (config.get("use_vllm") or config.get("use_vllm_if_available")) and not four_bit
    kv_dim = shape.hidden // shape.heads * shape.kv_heads
    generation_batch = batch * config.get("gradient_accumulation_steps", 1)
    kv_cache = 0 if use_vllm else generation_batch * tokens // batch * shape.layers * 2 * kv_dim * 2
    terms = {
        "weights": weights / GB,
        "training_state": trainable * 12 / GB,
        "activations": activation_bytes(shape, tokens, act_bytes, checkpointing) / GB,
        "logits": logits_bytes(shape, batch, completion, act_bytes) / GB,
        "vllm": config.get("vllm_gpu_memory_utilization", 0.3) * gpu_gb if use_vllm else 0.0,
        "generation_kv_cache": kv_cache / GB,
        "overhead": OVERHEAD_GB,
    }
    terms["total"] = sum(terms.values())
    return {k: round(v, 1) for k, v in terms.items()}


def sized_for(path: Path) -> tuple[int, float] | None:
    """(GPU GB, stated estimate GB) from a config's header line ``# Sized for a 24 GB GPU: estimated peak 14.1 GB``."""
    header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    match = HEADER_RE.search(header)
    return (int(match.group(1)), float(match.group(2))) if match else None


def gpu_configs(root: Path) -> list[Path]:
    """The GPU configs: every GRPO-trained config under ``root`` for a model in ``SHAPES``."""
    paths = sorted([*root.rglob("grpo_*.yaml"), *root.rglob("judge_lab_*.yaml")]) if root.is_dir() else [root]
    return [p for p in paths if not is_base_config(p) and load_config(p).get("model_name_or_path") in SHAPES]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", help="a GRPO config, or a folder of them")
    parser.add_argument("--gpu-gb", type=float, default=None, help="default: the GPU the config's header names")
    args = parser.parse_args(argv)
    for path in gpu_configs(Path(args.path)):
        stated = sized_for(path)
        gpu = args.gpu_gb or (stated[0] if stated else None)
        if gpu is None:
            sys.exit(f"{path}: its header names no GPU ('# Sized for a N GB GPU: ...'): pass --gpu-gb")
        terms = estimate(load_config(path), gpu)
        parts = ", ".join(f"{k} {v}" for k, v in terms.items() if k != "total")
        print(f"{path}: {terms['total']} GB of {gpu:g} GB ({parts})")


if __name__ == "__main__":
    main()
