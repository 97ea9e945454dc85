"""Generate completions for chat prompts: Hugging Face ``generate`` (batched, left-padded) or vLLM.

Both backends apply the tokenizer's chat template with ``add_generation_prompt=True`` and use the same sampling:
greedy when ``temperature == 0``, else pure temperature sampling (top-p 1, top-k off, no repetition penalty --
the model's own ``generation_config`` sampling defaults are overridden so that runs compare across models).
A generation is *truncated* when it stopped at ``max_new_tokens`` without an end-of-sequence token.

>>> from lab.tiny_model import build_model, build_tokenizer
>>> tokenizer = build_tokenizer(); model = build_model(tokenizer)
>>> [[g]] = generate(model, tokenizer, [[{"role": "user", "content": "1+1?"}]], max_new_tokens=4)
>>> g.n_tokens <= 4, isinstance(g.text, str)
(True, True)
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

BACKENDS = ("hf", "vllm")


@dataclass(frozen=True)
class Generation:
    text: str  # decoded completion, special tokens removed
    n_tokens: int  # generated tokens, the end-of-sequence token included when there is one
    truncated: bool  # hit max_new_tokens without an end-of-sequence token


def check_backend(backend: str) -> None:
    """Raise a clear error when ``backend`` is unknown or cannot run here (vLLM missing, no GPU).

    >>> check_backend("hf")
    >>> check_backend("tgi")
    Traceback (most recent call last):
    ...
    ValueError: unknown backend 'tgi': choose one of ('hf', 'vllm')
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {BACKENDS}")
    if backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise RuntimeError("--backend vllm needs vLLM: `pip install vllm` on a CUDA machine, or use --backend hf")
        import torch

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
) -> list[list[Generation]]:
    """``num_samples`` completions for each chat prompt, in prompt order.

    Args:
        model: a transformers causal LM (peft-wrapped is fine) for ``hf``; a ``vllm.LLM`` for ``vllm``.
        tokenizer: its tokenizer, with a chat template.
        prompts: chat messages per prompt, e.g. ``[[{"role": "user", "content": "..."}]]``.
        max_new_tokens: generation budget per completion.
        temperature: 0 for greedy, else sampling temperature.
        num_samples: completions per prompt (needs temperature > 0 when above 1).
        batch_size: prompts per ``generate`` call (hf).
        seed: torch / vLLM seed, set once per call.
        backend: ``"hf"`` or ``"vllm"``.
    Returns:
        one list of ``num_samples`` ``Generation`` per prompt.
    """
    _check_sampling(temperature, num_samples)
    check_backend(backend)
    if not prompts:
        return []
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    if backend == "vllm":
        return _generate_vllm(model, texts, max_new_tokens, temperature, num_samples, seed)
    return _generate_hf(model, tokenizer, texts, max_new_tokens, temperature, num_samples, batch_size, seed)


def _generate_hf(model, tokenizer, texts, max_new_tokens, temperature, num_samples, batch_size, seed):
    import torch

    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
        if temperature > 0
        else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    )
    # Longest prompts first: batches hold prompts of similar length (less padding), and memory errors come early.
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    results: list[list[Generation] | None] = [None] * len(texts)
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    try:
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            enc = tokenizer([texts[i] for i in batch], return_tensors="pt", padding=True, add_special_tokens=False).to(
                model.device
            )
            with torch.no_grad():
                out = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    num_return_sequences=num_samples,
                    eos_token_id=sorted(eos_ids),
                    pad_token_id=pad_id,
                    repetition_penalty=1.0,
                    **sampling,
                )
            new_tokens = out[:, enc["input_ids"].shape[1] :].tolist()  # [B * K, T]
            for row, i in enumerate(batch):
                gens = [
                    _to_generation(tokenizer, t, eos_ids)
                    for t in new_tokens[row * num_samples : (row + 1) * num_samples]
                ]
                results[i] = gens
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return results


def _to_generation(tokenizer, tokens: list[int], eos_ids: set[int]) -> Generation:
    end = next((j for j, t in enumerate(tokens) if t in eos_ids), None)
    kept = tokens if end is None else tokens[: end + 1]
    return Generation(tokenizer.decode(kept, skip_special_tokens=True), len(kept), end is None)


def _generate_vllm(llm, texts, max_new_tokens, temperature, num_samples, seed):
    from vllm import SamplingParams

    params = SamplingParams(
        n=num_samples, temperature=temperature, top_p=1.0, top_k=-1, max_tokens=max_new_tokens, seed=seed
    )
    outputs = llm.generate(texts, params)
    return [
        [Generation(o.text, len(o.token_ids), o.finish_reason == "length") for o in request.outputs]
        for request in outputs
    ]
