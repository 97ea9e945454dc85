"""A LoRA run merged into a full model folder, for the tools that load one folder (vLLM, ``eval run --backend vllm``).

    python -m eval merge --adapter runs/gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.04 --out runs/merged/grpo_lora
    python -m eval run --model runs/merged/grpo_lora --task gsm8k --backend vllm --out runs/eval/grpo_vllm

The base (the adapter's own unless ``--base``) is merged in float32 on the CPU (about 4 bytes a parameter) and saved
in ``--dtype`` (default: the base's) with the run's tokenizer, else the base's. The files are moved into ``--out`` at
the end, so an interrupted merge leaves no half model there.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

from eval.fingerprint import MODEL_FILE_PATTERNS
from eval.folder import training_run_marker
from eval.jsonl import new_file_mode
from eval.sources import _looks_like_path, check_model_source

logger = logging.getLogger(__name__)

MERGE_DTYPES = ("float32", "bfloat16", "float16")
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")  # a folder holding one has its own tokenizer


def adapter_base(adapter: str | Path) -> str | None:
    """The base model an adapter names (``base_model_name_or_path``), None when it names none."""
    config = json.loads((Path(adapter) / "adapter_config.json").read_text())
    return config.get("base_model_name_or_path") or None


def check_merge(adapter: str, base: str | None, out: str, dtype: str | None, overwrite: bool) -> str:
    """Refuse in one line what ``merge_adapter`` cannot do, before any weight is read; returns the base to merge."""
    if dtype is not None and dtype not in MERGE_DTYPES:
        raise ValueError(f"--dtype {dtype}: pass one of {', '.join(MERGE_DTYPES)}")
    folder = Path(adapter)
    if not folder.is_dir():
        raise FileNotFoundError(f"--adapter {adapter}: no such folder; pass the run folder peft saved the adapter in")
    if not (folder / "adapter_config.json").exists():
        raise FileNotFoundError(f"--adapter {adapter}: no adapter_config.json there; pass the folder peft saved")
    if base is None:
        base = adapter_base(folder)
        if base is None:
            raise ValueError(f"--adapter {adapter}: its adapter_config.json names no base model: pass --base")
        if not Path(base).expanduser().exists() and _looks_like_path(base):
            raise FileNotFoundError(
                f"--adapter {adapter} names its base model {base}, which does not exist here: pass --base with that "
                "model's folder (or its hub id)"
            )
        check_model_source(base, f"the base model of --adapter {adapter} (pass --base to name another)")
    else:
        check_model_source(base, "--base")
    target = Path(out)
    for flag, source in (("--adapter", folder), ("--base", Path(base).expanduser())):
        if source.exists() and target.resolve() == source.resolve():
            what = "adapter" if flag == "--adapter" else "base model"
            raise ValueError(
                f"--out {out} is the {what}'s folder: pass another folder (the merge must not write over it)"
            )
    if target.exists() and not target.is_dir():
        raise ValueError(f"--out {out} is a file: pass a folder")
    if target.is_dir() and any(target.iterdir()):
        held = "adapter_config.json" if (target / "adapter_config.json").exists() else training_run_marker(target)
        if held:  # --overwrite would remove the run's weights (its *.safetensors)
            raise ValueError(
                f"--out {out} holds a run ({held}): pass a folder of its own, e.g. --out {target / 'merged'}"
            )
        if not overwrite:
            names = sorted(p.name for p in target.iterdir())
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise ValueError(
                f"--out {out} is not empty (it holds {shown}): pass --overwrite to replace the model files there, or "
                "another --out"
            )
    return base


def base_dtype(base: str) -> str:
    """The dtype the base model's config names, float32 when it names none that ``--dtype`` takes."""
    from transformers import AutoConfig  # seconds: paid by a merge only

    config = AutoConfig.from_pretrained(base)
    named = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(named).removeprefix("torch.")
    return name if name in MERGE_DTYPES else "float32"


def merge_adapter(adapter: str, base: str, out: str, dtype: str | None = None) -> list[str]:
    """Merge the LoRA ``adapter`` into ``base``, saved in ``dtype`` with the tokenizer to ``out``; returns the files
    written. Call ``check_merge`` first."""
    import torch  # seconds each, as in eval.__main__.load_model
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or base_dtype(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model = model.to(getattr(torch, dtype))
    model.config.dtype = getattr(torch, dtype)
    has_own = any((Path(adapter) / name).exists() for name in TOKENIZER_FILES)
    tokenizer = AutoTokenizer.from_pretrained(adapter if has_own else base)
    if has_own:
        base_template = AutoTokenizer.from_pretrained(base).chat_template
        if base_template != tokenizer.chat_template:
            logger.warning("%s: its chat template is not the base model's; the merged folder gets the run's", adapter)

    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".merging", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        written = sorted(p.name for p in staging.iterdir())
        for name in written:  # safetensors writes its files 600: give them a new file's mode, as the rest
            (staging / name).chmod(new_file_mode())
        target.mkdir(exist_ok=True)
        for pattern in MODEL_FILE_PATTERNS:  # an earlier merge's shards must not mix with this one's
            for old in target.glob(pattern):
                if old.is_file():
                    old.unlink()
        for name in written:
            (staging / name).replace(target / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written
