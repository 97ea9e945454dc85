"""The trainers' scripts (``python -m recipes.grpo``, ``sft``, ``dpo``, ``reward_model``), their glue and configs.

Importing the package quiets bitsandbytes' import-time note about the ``kernels`` package (printed on CPUs with
AVX512-BF16 whether or not the run quantizes); a QLoRA run on a CPU gets ``check_quantization``'s warning instead.
"""

import logging

logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
