"""Two exact speed-ups of TRL's ``GRPOTrainer`` on a CPU that trains under bf16 autocast.

Neither changes a number the trainer computes; both remove work TRL 1.16 does on a CPU and not on a GPU:

- **The head scores only the completion tokens.** TRL's fused LM head (log-probabilities and entropy over the
  vocabulary, 49,152 tokens for SmolLM2) projects every position, prompt included, on any device without Triton,
  to keep the shapes static for a compiler; on a GPU it gathers the positions that have a label first (``compact``).
  A prompt position has no label and is never scored, so gathering first gives the same log-probabilities for the
  completion tokens with about a third of the head's work on the lab's shapes. :func:`completion_positions_only`
  answers TRL's one question (``_use_triton(device)``: gather first?) with yes on a CPU while the policy is scored.
- **Each weight is cast to bf16 once per generation.** Under autocast every forward casts the float32 weights to
  bf16; accelerate opens a fresh autocast region around each forward, so a generation of 32 tokens casts every
  weight 32 times. Inside one outer region torch keeps the casts until the region ends: the same casts, once.

``fast_cpu_trainer(GRPOTrainer)`` is the trainer with both; ``recipes.grpo_setup`` uses it on a CPU run with
``bf16`` (where the speed was measured: ``python -m bench.real_step --arms fp32_t2 autocast_t2
autocast_head_cache_t2``, docs/LOG.md); float32 runs and GPU runs get TRL's trainer unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import trl.trainer.utils as trl_utils


@contextlib.contextmanager
def completion_positions_only() -> Iterator[None]:
    """While open, TRL's fused head gathers the labelled positions before projecting them on a CPU too.

    ``trl.trainer.utils`` reads ``_use_triton`` at each call for one thing, gather-first or not; TRL's kernels keep
    their own copy of the test (``trl.kernels.chunked_logprob``), untouched, so the CPU still folds tiles in torch.
    """
    on_gpu = trl_utils._use_triton
    trl_utils._use_triton = lambda device: device.type == "cpu" or on_gpu(device)
    try:
        yield
    finally:
        trl_utils._use_triton = on_gpu


def fast_cpu_trainer(trainer_class: type) -> type:
    """``trainer_class`` (a ``GRPOTrainer``) scoring only completion positions and generating in one autocast region."""

    class FastCPU(trainer_class):
        def _generate(self, *args, **kwargs):
            if not self.args.bf16:
                return super()._generate(*args, **kwargs)
            with torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16):
                return super()._generate(*args, **kwargs)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            with completion_positions_only():
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)

    FastCPU.__name__ = FastCPU.__qualname__ = trainer_class.__name__  # TRL names the model card after it
    return FastCPU
