"""What the recipes pass to TRL's model loading: ``GRPOConfig/DPOConfig.model_init_kwargs`` built from ``ModelConfig``.

TRL's trainers load a model named by a string with ``from_pretrained(name, **model_init_kwargs)`` and its tokenizer
with ``revision=model_init_kwargs["revision"]``; ``ModelConfig``'s ``dtype``, ``attn_implementation`` and
``model_revision`` reach the model only through these kwargs, so a recipe that sets ``dtype`` alone silently drops
the other two. Every recipe builds its kwargs here (one line each).

>>> from trl import ModelConfig
>>> model_init_kwargs(ModelConfig(model_name_or_path="m", dtype="bfloat16", attn_implementation="sdpa",
...                                model_revision="v1"), {"device_map": None})
{'device_map': None, 'dtype': 'bfloat16', 'attn_implementation': 'sdpa', 'revision': 'v1'}
>>> model_init_kwargs(ModelConfig(model_name_or_path="m"))  # defaults: float32, main, the model's own attention
{'dtype': 'float32', 'revision': 'main'}
"""

from __future__ import annotations


def model_init_kwargs(model_args, existing: dict | None = None) -> dict:
    """``existing`` (a config's own ``model_init_kwargs``) plus dtype, attention implementation and revision of
    ``model_args``; the attention key is left out when unset, so transformers picks its default."""
    kwargs = dict(existing or {}) | {"dtype": model_args.dtype}
    if model_args.attn_implementation is not None:
        kwargs["attn_implementation"] = model_args.attn_implementation
    kwargs["revision"] = model_args.model_revision
    return kwargs
