"""The precision a CPU run trains in when neither its config nor its command line sets ``bf16`` or ``fp16``.

bf16 autocast over float32 weights where the CPU has bf16 units (``avx512_bf16``, ``amx_bf16``) that oneDNN may use;
float32 where it has none, as emulated bf16 matmuls are ~8x slower there (docs/real_model_lab.md). On a GPU TRL's own
default stands.

>>> cpu_bf16_choice({"avx2", "avx512f", "avx512_bf16"}, None)
(True, 'the CPU has bf16 units (avx512_bf16)')
>>> cpu_bf16_choice({"avx2", "avx512f", "avx512_bf16"}, "AVX512_CORE")
(False, 'ONEDNN_MAX_CPU_ISA=AVX512_CORE caps oneDNN below AVX512_CORE_BF16 (no bf16 units in use)')
>>> cpu_bf16_choice({"avx2", "fma"}, None)
(False, 'the CPU has no bf16 units (no avx512_bf16 or amx_bf16 flag)')
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from recipes.parser import Command

logger = logging.getLogger(__name__)

CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of native bf16 matmul units
# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA), lowest first; from AVX512_CORE_BF16 up, oneDNN uses the bf16 units
ONEDNN_ISAS = (
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX10_1_512",
    "AVX512_CORE_FP16",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16",
    "AVX512_CORE_AMX_FP16",
    "AVX10_2_512",
    "AVX10_2_512_AMX_2",
    "ALL",
)
FIRST_BF16_ISA = ONEDNN_ISAS.index("AVX512_CORE_BF16")
ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # oneDNN reads the first one set


def cpu_flags(cpuinfo: Path | None = None) -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo``, else (e.g. macOS) from torch's own bf16 checks."""
    path = CPUINFO if cpuinfo is None else cpuinfo
    try:
        text = path.read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    checks = {"avx512_bf16": "_is_avx512_bf16_supported", "amx_bf16": "_is_amx_tile_supported"}
    return {flag for flag, check in checks.items() if getattr(torch.cpu, check, lambda: False)()}


def onednn_isa_cap(environ: Mapping[str, str] | None = None) -> str | None:
    """The ISA oneDNN is capped to, upper-case; None when unset, ``ALL``, or a value oneDNN ignores too.

    >>> onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": "avx2"}), onednn_isa_cap({"DNNL_MAX_CPU_ISA": "junk"}), onednn_isa_cap({})
    ('AVX2', None, None)
    """
    environ = os.environ if environ is None else environ
    value = next((environ[name] for name in ISA_VARIABLES if environ.get(name)), "").strip().upper()
    return value if value in ONEDNN_ISAS and value != "ALL" else None


def cpu_bf16_choice(flags: set[str], isa_cap: str | None) -> tuple[bool, str]:
    """Whether a CPU run trains under bf16 autocast (True) or in float32 (False), and why."""
    units = [flag for flag in BF16_FLAGS if flag in flags]
    if not units:
        return False, "the CPU has no bf16 units (no avx512_bf16 or amx_bf16 flag)"
    if isa_cap is not None and ONEDNN_ISAS.index(isa_cap) < FIRST_BF16_ISA:
        return False, f"ONEDNN_MAX_CPU_ISA={isa_cap} caps oneDNN below AVX512_CORE_BF16 (no bf16 units in use)"
    return True, f"the CPU has bf16 units ({', '.join(units)})"


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "y", "t")


def accelerator_available() -> bool:
    """A CUDA (or other torch accelerator) device is present: TRL would train on it."""
    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def precision_flags(command: Command, fields: set[str]) -> tuple[list[str], str | None]:
    """The ``--bf16`` flags for a CPU run whose config and command line leave its precision unset, and the line that
    says why; none (and None) otherwise."""
    if "bf16" not in fields or "help" in command.given:
        return [], None  # no precision to choose; under --help the help comes first and alone
    given, config = command.given, command.config
    if {"bf16", "fp16"} & (config.keys() | given.keys()):
        return [], None
    on_cpu = _truthy(given["use_cpu"]) if "use_cpu" in given else bool(config.get("use_cpu"))
    if not on_cpu and accelerator_available():
        return [], None
    bf16, why = cpu_bf16_choice(cpu_flags(), onednn_isa_cap())
    precision = "bf16 autocast over float32 weights" if bf16 else "float32"
    line = f"precision: {precision} ({why}; set bf16: true/false in the config or --bf16 to choose)"
    return ["--bf16", "true" if bf16 else "false"], line
