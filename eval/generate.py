"""Generate completions for chat prompts: Hugging Face ``generate`` (batched, left-padded) or vLLM.

Both backends use the same token ids and the same sampling: greedy at temperature 0, else pure temperature sampling
(the model's own ``generation_config`` defaults are overridden so that runs compare across models). A generation
is *truncated* when it stopped at ``max_new_tokens`` without an end-of-sequence token. Generation leaves the
caller's random state alone (``forked_rng``), so a trainer's sampling continues after a monitor eval as if unrun.

>>> from recipes.tiny_model import build_model, build_tokenizer
>>> tokenizer = build_tokenizer(); model = build_model(tokenizer)
>>> [[g]] = generate(model, tokenizer, [[{"role": "user", "content": "1+1?"}]], max_new_tokens=4)
>>> g.n_tokens <= 4, isinstance(g.text, str)
(True, True)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version

BACKENDS = ("hf", "vllm")
# Prompts per vLLM call: its scheduler batches hundreds of sequences itself, and a call waits for its slowest one, so
# evaluate() hands it large chunks (results are written after each chunk; per-prompt seeds keep a resume exact).
VLLM_PROMPTS_PER_CALL = 512
VLLM_RANGE = ("0.22.0", "0.31.0")  # TRL 1.16 supports these (its `vllm` extra); requirements-gpu.txt pins 0.31.0
VLLM_INSTALL = 'pip install "vllm==0.31.0"'


def vllm_version_problem() -> str | None:
    """Why the installed vLLM cannot serve leash, or None when it can (a vllm without metadata, in tests, is fine)."""
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed: make venv-gpu (requirements-gpu.txt), or {VLLM_INSTALL}, on a CUDA machine"
    try:
        installed = Version(Version(version("vllm")).base_version)
    except PackageNotFoundError:
        return None
    low, high = VLLM_RANGE
    if not Version(low) <= installed <= Version(high):
        return f"vLLM {installed} is outside the range TRL 1.16 supports ({low} to {high}): {VLLM_INSTALL}"
    return None


@dataclass(frozen=True)
class Generation:
    text: str  # decoded completion, special tokens removed
    n_tokens: int  # generated tokens, the end-of-sequence token included when there is one
    truncated: bool  # hit max_new_tokens without an end-of-sequence token


def check_backend(backend: str, adapter: str | None = None) -> None:
    """Refuse a ``backend`` that is unknown or cannot run here, and vLLM with a LoRA ``adapter`` (it samples the base).

    >>> check_backend("hf")
    >>> check_backend("tgi")
    Traceback (most recent call last):
    ...
    ValueError: unknown backend 'tgi': choose one of ('hf', 'vllm')
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {BACKENDS}")
    if backend == "vllm" and adapter:
        raise ValueError(
            f"--adapter {adapter} with --backend vllm: the vllm backend loads the base model only and would sample it, "
            "not the adapter. Use --backend hf, or merge the adapter into the model first (peft merge_and_unload, "
            "save_pretrained) and pass the merged folder as --model"
        )
    if backend == "vllm":
        problem = vllm_version_problem()
        if problem:
            raise RuntimeError(f"--backend vllm: {problem}; or use --backend hf")
        import torch  # seconds to import; eval.generate is imported by `eval score`, which needs no torch

        if not torch.cuda.is_available():
            raise RuntimeError("--backend vllm needs a CUDA GPU and none is visible: use --backend hf")


def eos_token_ids(model, tokenizer) -> set[int]:
    """Every token id that ends a generation: the model's generation config plus the tokenizer's EOS."""
    ids = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if configured is not None:
        ids.update(configured if isinstance(configured, list | tuple) else [configured])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def encode_prompts(tokenizer, prompts: list[list[dict]]) -> list[list[int]]:
    """Token ids of each chat prompt for both backends, without added special tokens: the template writes them, and a
    tokenizer that adds BOS would add a second one.
    """
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


@contextmanager
def forked_rng(seed: int, device=None):
    """Seed torch's generators inside a fork of their state: the caller's streams continue where they were.

    >>> import torch
    >>> _ = torch.manual_seed(1); expected = torch.rand(2)
    >>> _ = torch.manual_seed(1)
    >>> with forked_rng(0):
    ...     _ = torch.rand(3)
    >>> torch.equal(torch.rand(2), expected)
    True
    """
    import torch  # as in check_backend

    cuda = [device] if device is not None and torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.default_generator.manual_seed(seed)
        for d in cuda:
            with torch.cuda.device(d):
                torch.cuda.manual_seed(seed)  # this device only: other GPUs of the machine are not touched
        yield


def _check_sampling(temperature: float, num_samples: int) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if num_samples > 1 and temperature == 0:
        raise ValueError("num_samples > 1 with greedy decoding gives K identical answers: set --temperature > 0")


def generate(
    model,
    tokenizer,
    prompts: list[list[dict]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    num_samples: int = 1,
    batch_size: int = 16,
    seed: int = 0,
    backend: str = "hf",
    prompt_seeds: Sequence[int] | None = None,
    share_prompts: bool = True,
) -> list[list[Generation]]:
    """``num_samples`` completions for each chat prompt, in prompt order. ``prompt_seeds`` (vLLM) make a prompt's
    samples independent of the other prompts of the call, so a resumed run gives the same samples. ``share_prompts``
    (hf): a prompt's samples share one reading of it (``generate_batch``).
    """
    _check_sampling(temperature, num_samples)
    check_backend(backend)
    if not prompts:
        return []
    ids = encode_prompts(tokenizer, prompts)
    if backend == "vllm":
        seeds = list(prompt_seeds) if prompt_seeds is not None else [seed + i for i in range(len(prompts))]
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} prompt_seeds for {len(prompts)} prompts: give one seed per prompt")
        return _generate_vllm(model, ids, max_new_tokens, temperature, num_samples, seeds)
    return _generate_hf(
        model, tokenizer, ids, max_new_tokens, temperature, num_samples, batch_size, seed, share_prompts
    )


def generate_batch(model, enc: dict, num_samples: int, share_prompts: bool = True, **generate_kwargs):
    """``model.generate`` of ``num_samples`` answers to each left-padded prompt of ``enc``, as ``[B * K, T]`` ids with
    each prompt's K answers together. With K > 1 and ``share_prompts``, each prompt is read once and its key/value
    cache copied K times, instead of K copies of the prompt being read (``num_return_sequences``): at the lab's
    prompts of ~80 tokens and answers of 32, most of the work (``bench/eval_speed.py --samples`` times both)."""
    import torch  # as in check_backend

    ids, mask = enc["input_ids"], enc["attention_mask"]
    if num_samples == 1 or not share_prompts or ids.shape[1] < 2:
        return model.generate(**enc, num_return_sequences=num_samples, **generate_kwargs)  # keeps no gradient
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # as generate places left-padded prompts
    with torch.no_grad():  # the prompt but its last token, whose step generate takes from the cache
        read = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1], use_cache=True)
    name = "cache" if hasattr(read, "cache") else "past_key_values"  # transformers >= 5.2x's name, else 5.17's
    cache = getattr(read, name)
    cache.batch_repeat_interleave(num_samples)
    return model.generate(
        input_ids=ids.repeat_interleave(num_samples, dim=0),
        attention_mask=mask.repeat_interleave(num_samples, dim=0),
        **{name: cache},
        **generate_kwargs,
    )


def _generate_hf(model, tokenizer, ids, max_new_tokens, temperature, num_samples, batch_size, seed, share_prompts):
    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
        if temperature > 0
        else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    )
    # Longest prompts first: batches hold prompts of similar length (less padding), and memory errors come early.
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    results: list[list[Generation] | None] = [None] * len(ids)
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    try:
        with forked_rng(seed, model.device):
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                enc = tokenizer.pad({"input_ids": [ids[i] for i in batch]}, return_tensors="pt").to(model.device)
                out = generate_batch(
                    model,
                    enc,
                    num_samples,
                    share_prompts=share_prompts,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=sorted(eos_ids),
                    pad_token_id=pad_id,
                    repetition_penalty=1.0,
                    **sampling,
                )
                new_tokens = out[:, enc["input_ids"].shape[1] :].tolist()  # [B * K, T]
                for row, i in enumerate(batch):
                    results[i] = [
                        _to_generation(tokenizer, t, eos_ids)
                        for t in new_tokens[row * num_samples : (row + 1) * num_samples]
                    ]
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return results


def _to_generation(tokenizer, tokens: list[int], eos_ids: set[int]) -> Generation:
    end = next((j for j, t in enumerate(tokens) if t in eos_ids), None)
    kept = tokens if end is None else tokens[: end + 1]
    return Generation(tokenizer.decode(kept, skip_special_tokens=True), len(kept), end is None)


def _generate_vllm(llm, ids, max_new_tokens, temperature, num_samples, seeds):
    from vllm import SamplingParams  # installed on GPU machines only (requirements-gpu.txt)

    params = [
        SamplingParams(n=num_samples, temperature=temperature, top_p=1.0, top_k=-1, max_tokens=max_new_tokens, seed=s)
        for s in seeds
    ]
    # Token ids, not text: vLLM would encode a text prompt with the tokenizer's special tokens (a second BOS)
    outputs = llm.generate([{"prompt_token_ids": prompt} for prompt in ids], params)
    return [
        [Generation(o.text, len(o.token_ids), o.finish_reason == "length") for o in request.outputs]
        for request in outputs
    ]
