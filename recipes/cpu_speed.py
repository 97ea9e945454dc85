"""Two exact speed-ups of TRL's ``GRPOTrainer`` on a CPU that trains under bf16 autocast.

Neither changes a number; both remove work TRL 1.16 does on a CPU and not on a GPU. The fused LM head projects only
the completion positions (about a third of its work on the lab's shapes), and each weight is cast to bf16 once per
generation, not once per generated token. Float32 and GPU runs get TRL's trainer unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import trl.trainer.utils as trl_utils


@contextlib.contextmanager
def completion_positions_only() -> Iterator[None]:
    """While open, TRL's fused head gathers the labelled positions before projecting them on a CPU too.

    Only ``trl.trainer.utils``' gather-first test changes; TRL's kernels keep their own copy of it, untouched.
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
