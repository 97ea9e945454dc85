"""The precision a CPU run gets when its config and command line leave it unset: bf16 autocast on a CPU with bf16
units, float32 on one without (or with oneDNN capped below them); an explicit ``bf16``/``fp16`` always wins.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_precision.py

The CPU is simulated: a ``/proc/cpuinfo`` written to a temporary file (``precision.CPUINFO``) and the oneDNN cap in
the environment, so each case runs the same on any machine.
"""

import doctest
from pathlib import Path

import pytest
import yaml

from cpu_lab import matrix
from cpu_lab.runner import recipe_module
from recipes import common, grpo, precision
from recipes.parser import load_config, recipe_configs
from tests.helpers import parse_recipe_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "recipes" / "configs"
NO_MODEL = "/nonexistent/model/never/loaded"
AMX_CPU = "fpu sse2 avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8"  # a Xeon with AMX
ZEN_CPU = "fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16"  # bf16 units, no AMX
AVX512_CPU = "fpu sse2 avx2 avx512f avx512bw avx512_vnni"  # AVX-512 without bf16
LAPTOP_CPU = "fpu sse2 avx avx2 fma"  # AVX2 only


def test_module_doctests():
    assert doctest.testmod(precision).failed == 0


@pytest.fixture(scope="module")
def read():
    """``read(argv)``: GRPO's command line ``argv`` as its parser reads it (``RecipeParser.read_command``)."""
    return grpo.make_parser().read_command


@pytest.fixture
def cpu(tmp_path, monkeypatch):
    """``cpu(flags, isa=None)``: this process sees a CPU with ``flags`` and oneDNN capped at ``isa``."""

    def simulate(flags: str, isa: str | None = None, variable: str = "ONEDNN_MAX_CPU_ISA"):
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        monkeypatch.setattr(precision, "CPUINFO", cpuinfo)
        for name in precision.ISA_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        if isa is not None:
            monkeypatch.setenv(variable, isa)

    monkeypatch.setattr(precision, "accelerator_available", lambda: False)
    return simulate


@pytest.mark.parametrize(
    "flags, isa, variable, bf16",
    [
        (AMX_CPU, None, "ONEDNN_MAX_CPU_ISA", True),  # AMX: the fastest bf16
        (ZEN_CPU, None, "ONEDNN_MAX_CPU_ISA", True),  # avx512_bf16 alone is a bf16 unit
        (AVX512_CPU, None, "ONEDNN_MAX_CPU_ISA", False),  # AVX-512 emulates bf16
        (LAPTOP_CPU, None, "ONEDNN_MAX_CPU_ISA", False),  # AVX2 emulates bf16, ~60x slower than float32
        (ZEN_CPU, "AVX2", "ONEDNN_MAX_CPU_ISA", False),  # the cap simulates a laptop
        (ZEN_CPU, "AVX512_CORE", "ONEDNN_MAX_CPU_ISA", False),  # the cap simulates AVX-512 without bf16
        (AMX_CPU, "avx512_core_vnni", "ONEDNN_MAX_CPU_ISA", False),  # lower case, as oneDNN accepts it
        (ZEN_CPU, "AVX512_CORE_BF16", "ONEDNN_MAX_CPU_ISA", True),  # the cap keeps the bf16 units
        (AMX_CPU, "AVX512_CORE_AMX", "ONEDNN_MAX_CPU_ISA", True),  # a cap above them too
        (ZEN_CPU, "ALL", "ONEDNN_MAX_CPU_ISA", True),  # ALL is no cap
        (ZEN_CPU, "NOT_AN_ISA", "ONEDNN_MAX_CPU_ISA", True),  # oneDNN ignores an unknown value, so do we
        (ZEN_CPU, "AVX2", "DNNL_MAX_CPU_ISA", False),  # oneDNN's older name for the same variable
        (LAPTOP_CPU, "ALL", "ONEDNN_MAX_CPU_ISA", False),  # no cap gives a CPU bf16 units it lacks
    ],
)
def test_cpu_default_follows_the_cpu_flags_and_the_onednn_cap(cpu, read, flags, isa, variable, bf16):
    cpu(flags, isa, variable)
    added, line = precision.precision_flags(read(["--use_cpu", "true"]), {"bf16"})
    assert added == ["--bf16", "true" if bf16 else "false"]
    assert line.startswith("precision: bf16 autocast" if bf16 else "precision: float32")


def test_the_new_onednn_variable_wins_over_the_old_one(cpu, read, monkeypatch):
    cpu(ZEN_CPU, "AVX512_CORE_BF16")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")  # oneDNN reads ONEDNN_MAX_CPU_ISA first
    assert precision.precision_flags(read(["--use_cpu"]), {"bf16"})[0] == ["--bf16", "true"]


def config_without_precision(tmp_path, source: Path, **extra) -> Path:
    """A copy of ``source`` with its ``bf16``/``fp16`` keys dropped and ``extra`` keys set."""
    values = {k: v for k, v in load_config(source).items() if k not in ("bf16", "fp16")}
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump({**values, **extra}))
    return path


NO_MODEL_FLAGS = ("--model_name_or_path", NO_MODEL, "--build_tiny_model", "false")


@pytest.mark.parametrize("flags, bf16", [(ZEN_CPU, True), (LAPTOP_CPU, False)])
def test_a_config_without_bf16_gets_the_cpus_precision_in_its_resolved_config(tmp_path, cpu, capsys, flags, bf16):
    cpu(flags)
    config = config_without_precision(tmp_path, CONFIGS / "tiny" / "grpo_cpu.yaml", build_tiny_model=False)
    parsed = parse_recipe_config(grpo, config, *NO_MODEL_FLAGS, as_run=True)
    assert parsed[1].bf16 is bf16
    assert common.resolved_config(*parsed)["bf16"] is bf16  # what resolved_config.json records
    printed = capsys.readouterr().out
    assert ("precision: bf16 autocast over float32 weights" if bf16 else "precision: float32 (") in printed


@pytest.mark.parametrize(
    "cpu_flags, isa, yaml_bf16, cli, expected",
    [
        (ZEN_CPU, None, False, [], False),  # bf16: false in the YAML wins on a bf16 CPU
        (LAPTOP_CPU, None, True, [], True),  # bf16: true in the YAML wins on a laptop
        (ZEN_CPU, None, None, ["--bf16", "false"], False),  # the command line wins, YAML silent
        (LAPTOP_CPU, None, None, ["--bf16", "true"], True),
        (ZEN_CPU, "AVX2", None, ["--bf16=true"], True),  # the --name=value form
        (LAPTOP_CPU, None, None, ["--bf16", "1"], True),  # TRL reads 1 as true
        (LAPTOP_CPU, None, False, ["--bf16", "true"], True),  # the command line beats the YAML
        (ZEN_CPU, None, True, ["--bf16", "false"], False),  # the float32 path is one flag away
    ],
)
def test_an_explicit_bf16_wins(tmp_path, cpu, capsys, cpu_flags, isa, yaml_bf16, cli, expected):
    cpu(cpu_flags, isa)
    extra = {"build_tiny_model": False} | ({} if yaml_bf16 is None else {"bf16": yaml_bf16})
    config = config_without_precision(tmp_path, CONFIGS / "tiny" / "grpo_cpu.yaml", **extra)
    assert parse_recipe_config(grpo, config, *NO_MODEL_FLAGS, *cli, as_run=True)[1].bf16 is expected
    assert "precision:" not in capsys.readouterr().out  # nothing chosen, nothing said


def test_fp16_given_leaves_bf16_alone(cpu, read):
    cpu(ZEN_CPU)
    assert precision.precision_flags(read(["--use_cpu", "--fp16"]), {"bf16"}) == ([], None)  # a bare flag is given too
    assert precision.precision_flags(read(["--use_cpu", "true", "--fp16", "false"]), {"bf16", "fp16"}) == ([], None)


def test_on_a_gpu_trls_default_stands(cpu, read, monkeypatch, tmp_path):
    cpu(LAPTOP_CPU)
    monkeypatch.setattr(precision, "accelerator_available", lambda: True)
    config = config_without_precision(tmp_path, CONFIGS / "tiny" / "grpo_cpu.yaml", use_cpu=False)
    assert precision.precision_flags(read(["--config", str(config)]), {"bf16"}) == ([], None)
    # use_cpu on a GPU machine is a CPU run: it gets the CPU's precision
    assert precision.precision_flags(read(["--config", str(config), "--use_cpu", "true"]), {"bf16"})[0] == [
        "--bf16",
        "false",
    ]


def test_a_parser_without_bf16_gets_nothing(cpu, read):
    cpu(ZEN_CPU)
    assert precision.precision_flags(read(["--use_cpu", "true"]), {"model_name_or_path"}) == ([], None)


def test_cpu_flags_read_the_first_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : sse2 avx512_bf16\n\nprocessor : 1\nflags : sse2\n")
    assert precision.cpu_flags(cpuinfo) == {"sse2", "avx512_bf16"}


CPU_CONFIGS = [p for p in recipe_configs(CONFIGS) if load_config(p).get("use_cpu")]
AUTOMATIC = [p for p in CPU_CONFIGS if "bf16" not in load_config(p)]


# No CPU config fixes bf16: true (autocast even on a CPU without bf16 units, ~8x slower a matmul on an AVX2 CPU):
# each leaves bf16 to the CPU or fixes float32, which is never the slow path.
FIXED_AUTOCAST = set()


def test_a_cpu_config_fixes_float32_or_leaves_bf16_to_the_cpu():
    fixed = {p.relative_to(CONFIGS).as_posix(): load_config(p).get("bf16") for p in CPU_CONFIGS}
    assert {name for name, bf16 in fixed.items() if bf16 not in (None, False)} == FIXED_AUTOCAST


def test_the_real_model_configs_leave_the_precision_to_the_cpu():
    names = {p.relative_to(CONFIGS).as_posix() for p in AUTOMATIC}
    for stage in ("sft_smollm2", "grpo_real_default", "grpo_real_random", "grpo_real_format_only", "dpo_real"):
        assert f"real_lab/{stage}.yaml" in names


@pytest.mark.parametrize("path", AUTOMATIC, ids=lambda p: p.relative_to(CONFIGS).as_posix())
@pytest.mark.parametrize("flags, isa, bf16", [(AMX_CPU, None, True), (ZEN_CPU, "AVX2", False)])
def test_every_automatic_cpu_config_runs_in_the_cpus_precision(cpu, path, flags, isa, bf16):
    cpu(flags, isa)
    module = recipe_module(path)  # the labs' one map from config to recipe
    assert parse_recipe_config(module, path, *NO_MODEL_FLAGS, as_run=True)[1].bf16 is bf16


def test_the_lab_runs_get_the_cpus_precision(cpu, tmp_path, monkeypatch):
    """cpu_lab.matrix.run_one (the labs' runner) parses through parse_or_explain: a lab config that leaves bf16 unset
    runs in the CPU's precision."""
    cpu(LAPTOP_CPU)
    seen = {}

    def main(script_args, training_args, model_args):
        seen["bf16"] = training_args.bf16
        return {}

    monkeypatch.setattr(grpo, "main", main)
    config = config_without_precision(tmp_path, CONFIGS / "real_lab" / "grpo_real_default.yaml")
    config = config.rename(tmp_path / "grpo_x.yaml")
    matrix.run_one(config, 0, tmp_path / "out", ["--model_name_or_path", NO_MODEL])
    assert seen == {"bf16": False}


@pytest.mark.parametrize("help_flag", ["-h", "--help", "--help-all"])
def test_help_prints_no_precision_line(tmp_path, cpu, read, capsys, help_flag):
    """The precision line belongs to a run; ``--help`` output comes first and alone."""
    cpu(LAPTOP_CPU)
    config = config_without_precision(tmp_path, CONFIGS / "tiny" / "grpo_cpu.yaml", build_tiny_model=False)
    argv = ["--config", str(config), "--model_name_or_path", NO_MODEL]
    assert precision.precision_flags(read(argv), {"bf16"})[1].startswith("precision: float32")  # a run would say it
    assert precision.precision_flags(read([*argv, help_flag]), {"bf16"}) == ([], None)
    with pytest.raises(SystemExit) as stopped:
        common.parse_or_explain(grpo.make_parser(), [*argv, help_flag])
    assert stopped.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("usage:")
    assert "precision:" not in printed
