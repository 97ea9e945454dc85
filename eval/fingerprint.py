"""Which model made an evaluation's samples: a fingerprint in ``run_config.json``, so that only the same model's run
resumes there. From a model's files (``source_fingerprint``) or, in memory, its parameters (``weights_fingerprint``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import huggingface_hub

# Files transformers and peft load a model, an adapter and a tokenizer from (not the run files beside them).
MODEL_FILE_PATTERNS = (
    "*.safetensors",
    "*.bin",
    "*.gguf",
    "*.model",
    "*.tiktoken",
    "*.index.json",
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    "tokenizer*.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "chat_template.*",
)
NOT_MODEL_FILES = {"training_args.bin"}  # saved beside the weights, but the run's settings, not the model


def sha256_of_file(path: Path) -> str:
    """The sha256 of a file's bytes, read a MB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _source_digest(source: str) -> str:
    """A local folder: the sha256 of each model file (``MODEL_FILE_PATTERNS``) by name; a hub id: its commit."""
    folder = Path(source)
    if folder.is_dir():
        files = sorted({f for pattern in MODEL_FILE_PATTERNS for f in folder.glob(pattern) if f.is_file()})
        files = [f for f in files if f.name not in NOT_MODEL_FILES]
        if not files:
            raise ValueError(f"{source} holds no model files ({', '.join(MODEL_FILE_PATTERNS[:3])}, ...)")
        return ";".join(f"{f.name}={sha256_of_file(f)}" for f in files)
    cached = huggingface_hub.try_to_load_from_cache(source, "config.json")
    if isinstance(cached, str):  # <cache>/models--org--name/snapshots/<commit>/config.json
        return f"hub:{source}@{Path(cached).parent.name}"
    return f"hub:{source}@{huggingface_hub.HfApi().model_info(source).sha}"


def source_fingerprint(model: str, adapter: str | None = None) -> str:
    """The sha256 of a model's weight, config and tokenizer files (not logs) or its hub commit, and its adapter's."""
    parts = [f"model={_source_digest(model)}"]
    if adapter:
        parts.append(f"adapter={_source_digest(adapter)}")
    return "files:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def weights_fingerprint(model) -> str:
    """The sha256 of every parameter's name, dtype, shape and bytes: any changed element changes it, another device does
    not. Under ZeRO-3 or FSDP it reads this process's shard, gathering nothing (about a second a GB).
    """
    import torch  # loaded already where a model is; `eval score` imports this module without torch

    if not hasattr(model, "named_parameters"):
        raise ValueError(
            f"cannot fingerprint the model, a {type(model).__name__} with no parameters to read: pass "
            "run_info={'model_fingerprint': eval.fingerprint.source_fingerprint(model_path, adapter)}"
        )
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        t = getattr(p, "ds_tensor", None)  # ZeRO-3: the local partition (p itself is empty between forwards)
        if t is None:
            t = p.to_local() if hasattr(p, "to_local") else p  # DTensor (FSDP2): the local shard
        t = t.detach()
        h.update(f"{name}:{t.dtype}:{tuple(getattr(p, 'ds_shape', p.shape))}\n".encode())
        if t.device.type != "meta":
            h.update(memoryview(t.contiguous().reshape(-1).view(torch.uint8).cpu().numpy()))
    return "weights:" + h.hexdigest()[:32]
