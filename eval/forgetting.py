"""How far a fine-tuned model moved away from its base on text that is not the task.

    python -m eval forgetting --base runs/real_model/model --model runs/gsm8k/smollm2/grpo_lora \\
        --data chat.jsonl --field messages --limit 200 --out runs/eval/forgetting

Both models predict every next token of each reference document (no generation). Per document, in nats per token:
``kl``, KL(base || model) of the next-token distributions (0 for the same weights), and ``delta_log_likelihood``,
log p_model - log p_base of the actual next tokens (negative when the model lost the text). Reported: their means
over documents with a bootstrap interval over documents. Both models read the base's tokenizer.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from eval.jsonl import read_jsonl
from eval.metrics import BOOTSTRAP_RESAMPLES, CI_LEVEL, bootstrap_ci, level_label

FORGETTING_FILE = "forgetting.json"
DEFAULT_MAX_LENGTH = 512
DEFAULT_BATCH_SIZE = 4  # logits are batch x length x vocab floats per model: ~0.4 GB at 4 x 512 x 49k


def read_reference(path: str | Path, field: str, limit: int | None = None) -> list[str | list[dict]]:
    """The ``field`` values of the first ``limit`` rows of a JSONL file: non-empty strings or chat message lists.

    >>> import json, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "reference.jsonl"
    >>> _ = path.write_text(json.dumps({"text": "Paris is in France."}) + "\\n")
    >>> read_reference(path, "text")
    ['Paris is in France.']
    >>> read_reference(path, "messages")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ... row 1 has no field 'messages' (its fields: ['text']): pass --field with the field holding the text
    """
    if limit is not None and limit < 1:
        raise ValueError(f"--limit {limit}: pass a number of documents >= 1 (or no --limit for all of them)")
    rows = read_jsonl(path, "pass a JSONL file, one document per line")
    if not rows:
        raise ValueError(f"{path} holds no rows: pass a JSONL file with one document per line")
    values = []
    for n, row in enumerate(rows[:limit], start=1):
        if field not in row:
            raise ValueError(
                f"{path} row {n} has no field {field!r} (its fields: {sorted(row)}): pass --field with the field "
                "holding the text"
            )
        value = row[field]
        if isinstance(value, str):
            if not value.strip():
                raise ValueError(f"{path} row {n}: field {field!r} is empty: drop the row or pass another --field")
        elif not (
            isinstance(value, list)
            and value
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in value)
        ):
            raise ValueError(
                f"{path} row {n}: field {field!r} is neither text nor a list of chat messages "
                '({"role": ..., "content": ...}): pass --field with a text or messages field'
            )
        values.append(value)
    return values


def check_same_vocabulary(base: str, model: str, base_tokenizer) -> None:
    """Refuse a ``model`` whose vocabulary differs from ``base``'s: the distributions would be over other tokens."""
    from transformers import AutoConfig, AutoTokenizer  # seconds: paid by `eval forgetting` alone

    sizes = {name: AutoConfig.from_pretrained(name).vocab_size for name in (base, model)}
    if sizes[base] != sizes[model]:
        raise ValueError(
            f"--model {model} has a vocabulary of {sizes[model]} tokens and --base {base} one of {sizes[base]}: "
            "pass a model fine-tuned from --base (the same tokenizer)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError):  # a model folder without tokenizer files reads the base's
        return
    if tokenizer.get_vocab() != base_tokenizer.get_vocab():
        raise ValueError(
            f"--model {model} has a tokenizer of its own that differs from --base {base}'s: pass a model fine-tuned "
            "from --base (the same tokenizer)"
        )


def encode_documents(tokenizer, values: list[str | list[dict]], max_length: int) -> tuple[list[list[int]], int]:
    """Token ids of each document, cut to ``max_length``, and how many were cut; a document needs 2 tokens."""
    if max_length < 2:
        raise ValueError(f"--max-length {max_length}: pass at least 2 tokens (one predicted token)")
    ids, n_cut = [], 0
    for n, value in enumerate(values, start=1):
        if isinstance(value, str):
            tokens = tokenizer(value, add_special_tokens=True)["input_ids"]
        else:
            text = tokenizer.apply_chat_template(value, tokenize=False)
            tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(tokens) < 2:
            raise ValueError(f"document {n} has {len(tokens)} token(s): it needs 2 or more; drop it")
        n_cut += len(tokens) > max_length
        ids.append(tokens[:max_length])
    return ids, n_cut


def document_scores(base, model, documents: list[list[int]], batch_size: int = DEFAULT_BATCH_SIZE) -> list[dict]:
    """Per document: tokens predicted, mean KL(base || model) and next-token log-likelihoods, in nats per token."""
    import torch  # seconds to import: `eval passk` and --help need none

    device = next(base.parameters()).device
    order = sorted(range(len(documents)), key=lambda i: -len(documents[i]))
    scores: dict[int, dict] = {}
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            width = len(documents[batch[0]])
            input_ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros(len(batch), width, dtype=torch.long)
            for row, i in enumerate(batch):
                input_ids[row, : len(documents[i])] = torch.tensor(documents[i])
                mask[row, : len(documents[i])] = 1
            input_ids, mask = input_ids.to(device), mask.to(device)
            log_p = torch.log_softmax(base(input_ids=input_ids, attention_mask=mask).logits[:, :-1].float(), dim=-1)
            if model is base:
                log_q = log_p
            else:
                log_q = torch.log_softmax(model(input_ids=input_ids, attention_mask=mask).logits[:, :-1].float(), -1)
            kl = (log_p.exp() * (log_p - log_q)).sum(-1)  # [B, T-1]
            targets = input_ids[:, 1:].unsqueeze(-1)  # [B, T-1, 1]: the next token at each position
            ll_base = log_p.gather(-1, targets).squeeze(-1)  # [B, T-1]
            ll_model = log_q.gather(-1, targets).squeeze(-1)
            predicted = mask[:, 1:].to(kl.dtype)  # [B, T-1]: 1 where the next token is text, not padding
            n = predicted.sum(-1)
            for row, i in enumerate(batch):
                means = [float((x[row] * predicted[row]).sum() / n[row]) for x in (kl, ll_base, ll_model)]
                scores[i] = {
                    "n_tokens": int(n[row]),
                    "kl": means[0],
                    "base_log_likelihood": means[1],
                    "model_log_likelihood": means[2],
                    "delta_log_likelihood": means[2] - means[1],
                }
    return [scores[i] for i in range(len(documents))]


def summarize_forgetting(documents: list[dict], level: float = CI_LEVEL, seed: int = 0) -> dict:
    """Means over documents, each difference with its bootstrap interval over documents at ``level``.

    >>> docs = [{"n_tokens": 3, "kl": 0.0, "base_log_likelihood": -2.0, "model_log_likelihood": -1.5,
    ...          "delta_log_likelihood": 0.5}] * 2
    >>> block = summarize_forgetting(docs)
    >>> block["kl"], block["delta_log_likelihood"], block["n_tokens"]
    ({'mean': 0.0, 'ci': [0.0, 0.0]}, {'mean': 0.5, 'ci': [0.5, 0.5]}, 6)
    """
    result = {"n_documents": len(documents), "n_tokens": sum(d["n_tokens"] for d in documents)}
    for key in ("kl", "delta_log_likelihood"):
        values = [d[key] for d in documents]
        result[key] = {"mean": statistics.fmean(values), "ci": list(bootstrap_ci(values, seed=seed, level=level))}
    for key in ("base_log_likelihood", "model_log_likelihood"):
        result[key] = statistics.fmean(d[key] for d in documents)
    result["ci_level"] = level
    result["ci_method"] = f"percentile bootstrap over documents ({BOOTSTRAP_RESAMPLES:,} resamples)"
    return result


def forgetting_lines(result: dict) -> str:
    """The two lines the command prints.

    >>> print(forgetting_lines({"kl": {"mean": 0.01, "ci": [0.008, 0.012]}, "delta_log_likelihood": {"mean": -0.05,
    ...     "ci": [-0.07, -0.03]}, "ci_level": 0.95, "n_documents": 2, "n_tokens": 90, "n_truncated": 0,
    ...     "max_length": 512, "base_log_likelihood": -2.0, "model_log_likelihood": -2.05}))
    KL(base || model) 0.0100 nats/token [0.0080, 0.0120]; log-likelihood model - base -0.0500 nats/token [-0.0700, -0.0300] (95% CI)
    over 2 documents, 90 predicted tokens (0 cut to 512); log-likelihood base -2.0000, model -2.0500 nats/token
    """  # noqa: E501
    kl, delta = result["kl"], result["delta_log_likelihood"]
    return (
        f"KL(base || model) {kl['mean']:.4f} nats/token [{kl['ci'][0]:.4f}, {kl['ci'][1]:.4f}]; "
        f"log-likelihood model - base {delta['mean']:+.4f} nats/token [{delta['ci'][0]:+.4f}, {delta['ci'][1]:+.4f}] "
        f"({level_label(result['ci_level'])} CI)\n"
        f"over {result['n_documents']} documents, {result['n_tokens']} predicted tokens ({result['n_truncated']} cut "
        f"to {result['max_length']}); log-likelihood base {result['base_log_likelihood']:.4f}, model "
        f"{result['model_log_likelihood']:.4f} nats/token"
    )
