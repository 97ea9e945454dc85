"""The two install sets agree: requirements.txt (CPU, `make venv`) and requirements-gpu.txt (CUDA, `make venv-gpu`)
pin the same packages at the same versions, but for the transformers that vLLM needs; the GPU pins lie inside the
ranges the installed TRL states in its metadata; the recipes' messages name the same pins.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/project/test_install.py
"""

from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from recipes.checks import DEEPSPEED_PIN

ROOT = Path(__file__).resolve().parents[2]
GPU_ONLY = {"vllm", "deepspeed"}  # in requirements-gpu.txt only
DIFFERENT = {"transformers"}  # vllm 0.31.0 needs transformers<5.18; the CPU set runs the newer one


def pins(name: str) -> dict[str, Version]:
    """``package -> version`` of a requirements file whose every line is ``name==version`` (comments aside)."""
    found = {}
    for number, raw in enumerate((ROOT / name).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        specs = list(requirement.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{name}:{number}: {raw!r} is not an exact name==version"
        key = canonicalize_name(requirement.name)
        assert key not in found, f"{name}:{number}: {requirement.name} is pinned twice"
        found[key] = Version(specs[0].version)
    return found


CPU, GPU = pins("requirements.txt"), pins("requirements-gpu.txt")


def trl_requirements(extra: str | None = None) -> dict[str, Requirement]:
    """The installed TRL's requirements (its metadata), the base set or one extra's."""
    out = {}
    for line in requires("trl") or []:
        requirement = Requirement(line)
        in_extra = requirement.marker is not None and requirement.marker.evaluate({"extra": extra or ""})
        if (extra is None and requirement.marker is None) or (extra is not None and in_extra):
            out[canonicalize_name(requirement.name)] = requirement
    return out


def test_the_gpu_set_is_the_cpu_set_plus_vllm_and_deepspeed():
    assert set(GPU) - set(CPU) == GPU_ONLY, "requirements-gpu.txt must hold every CPU package, plus vllm and deepspeed"
    assert set(CPU) <= set(GPU)
    differ = {name: (str(CPU[name]), str(GPU[name])) for name in CPU if CPU[name] != GPU[name]}
    assert set(differ) == DIFFERENT, f"pins that differ between the two files (only transformers may): {differ}"
    assert CPU["torch"] == GPU["torch"] and CPU["trl"] == GPU["trl"]


def test_the_installed_trl_is_the_pinned_one():
    assert Version(version("trl")) == CPU["trl"], "the checks below read the installed TRL's metadata: make venv"


@pytest.mark.parametrize("pinned", sorted({"torch", "transformers", "accelerate", "datasets", "peft", "math-verify"}))
def test_the_gpu_pins_lie_in_trls_ranges(pinned):
    """TRL's base requirements and its peft / math-verify / deepspeed extras accept both files' pins; torch, for which
    TRL states no range, lies in the range of accelerate (TRL's requirement that brings it)."""
    wanted = [trl_requirements().get(pinned)]
    wanted += [trl_requirements(extra).get(pinned) for extra in ("peft", "math-verify", "deepspeed")]
    if pinned == "torch":
        wanted += [r for r in map(Requirement, requires("accelerate") or []) if r.name == "torch" and r.marker is None]
    wanted = [requirement for requirement in wanted if requirement is not None]
    assert wanted, f"no range for {pinned} in the installed TRL's metadata: this test would check nothing"
    for requirement in wanted:
        for name, chosen in (("requirements-gpu.txt", GPU), ("requirements.txt", CPU)):
            why = f"{name} pins {pinned}=={chosen[pinned]}: TRL {version('trl')} requires {requirement}"
            assert requirement.specifier.contains(chosen[pinned]), why


@pytest.mark.parametrize("extra", sorted(GPU_ONLY))
def test_vllm_and_deepspeed_pins_lie_in_trls_extras(extra):
    requirement = trl_requirements(extra)[extra]
    assert requirement.specifier.contains(GPU[extra]), f"vllm/deepspeed pin {GPU[extra]}: TRL needs {requirement}"


def test_the_recipes_name_the_files_pins():
    """What the recipes refuse or tell people to install is what requirements-gpu.txt installs."""
    from eval.generate import VLLM_INSTALL, VLLM_RANGE

    assert f"deepspeed=={GPU['deepspeed']}" == DEEPSPEED_PIN
    assert f"vllm=={GPU['vllm']}" in VLLM_INSTALL
    trl_range = {(spec.operator, spec.version) for spec in trl_requirements("vllm")["vllm"].specifier}
    assert trl_range == {(">=", VLLM_RANGE[0]), ("<=", VLLM_RANGE[1])}, f"TRL's vllm range {trl_range}, VLLM_RANGE"


@pytest.mark.parametrize("package", sorted(GPU_ONLY))
def test_what_vllm_and_deepspeed_require_is_pinned(package):
    """Where vLLM or DeepSpeed is installed (a GPU venv), the file's torch and transformers pins satisfy them."""
    try:
        needs = [Requirement(line) for line in requires(package) or []]
    except PackageNotFoundError:
        pytest.skip(f"{package} is not installed (make venv-gpu installs it)")
    for requirement in needs:
        name = canonicalize_name(requirement.name)
        if name in ("torch", "transformers") and requirement.marker is None:
            assert requirement.specifier.contains(GPU[name]), (
                f"{package} needs {requirement}, the file pins {GPU[name]}"
            )
