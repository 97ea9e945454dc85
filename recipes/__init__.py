"""The trainers' scripts (``python -m recipes.grpo``, ``sft``, ``dpo``, ``reward_model``), their glue and configs.

Importing the package quiets one library message before any recipe imports TRL: bitsandbytes (which peft, and so TRL,
imports) looks for the ``kernels`` package for 4-bit matmuls on a CPU with AVX512-BF16 and says so at import, whether
or not the run quantizes. A QLoRA run on a CPU gets ``recipes.checks.check_quantization``'s warning instead.
"""

import logging

logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
