"""A recipe's command line read once (``recipes.parser.RecipeParser.read_command``): the ``--config`` YAML with its
``base:`` resolved, and the options given as argparse reads them; every check before the parse reads that reading.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_parser_command.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from recipes import common, grpo, parser

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "configs" / "tiny"


@pytest.fixture(scope="module")
def grpo_parser():
    return grpo.make_parser()


@pytest.mark.parametrize(
    "argv, given",
    [
        (["--seed", "3", "--use_cpu"], {"seed": "3", "use_cpu": True}),  # a bare truth value: its const
        (["--seed=3", "--use-vllm=false"], {"seed": "3", "use_vllm": "false"}),  # =, dashes: the option's name
        (["--seed", "1", "--seed", "2"], {"seed": "2"}),  # the last one given
        (["--no_resume"], {"resume": False}),
        (["--reward_funcs", "a", "b"], {"reward_funcs": ["a", "b"]}),
        (["--max_step", "1", "--learnig_rate", "x"], {}),  # an abbreviation or a typo is no option
        # nothing is converted or checked here: the parse refuses these
        (
            ["--learning_rate", "fast", "--lr_scheduler_type", "wobbly"],
            {"learning_rate": "fast", "lr_scheduler_type": "wobbly"},
        ),
        (["--help-all"], {"help": True}),
    ],
)
def test_the_options_given_are_read_by_argparse_as_the_parse_reads_them(grpo_parser, argv, given):
    command = grpo_parser.read_command(argv)
    assert command.given == given and command.args == argv and command.path is None and command.config == {}


def test_the_config_is_read_with_its_base_and_the_file_of_each_key(grpo_parser, tmp_path):
    (tmp_path / "_base.yaml").write_text("seed: 0\nmax_steps: 4\n")
    (tmp_path / "run.yaml").write_text("base: _base.yaml\nmax_steps: 9\n")
    run = str(tmp_path / "run.yaml")
    command = grpo_parser.read_command(["--seed", "1", f"--config={run}", "--use_cpu"])
    assert command.path == run and command.config == {"seed": 0, "max_steps": 9}
    assert command.sources == {"seed": str(tmp_path / "_base.yaml"), "max_steps": run}
    assert command.args == ["--seed", "1", "--use_cpu"] and command.given == {"seed": "1", "use_cpu": True}


@pytest.mark.parametrize("argv", [["--config"], ["--config", "--seed", "1"]])
def test_config_without_a_path_is_one_line(grpo_parser, argv):
    with pytest.raises(ValueError, match="^--config needs the path of a YAML file, e.g. python -m recipes.grpo"):
        grpo_parser.read_command(argv)


def test_a_missing_config_is_one_line(grpo_parser):
    with pytest.raises(FileNotFoundError, match="^config file no/such.yaml does not exist"):
        grpo_parser.read_command(["--config", "no/such.yaml"])


def test_a_flag_without_its_value_is_refused_as_the_parse_refuses_it(grpo_parser):
    with pytest.raises(ValueError, match=r"^argument --seed: expected one argument \(python -m recipes.grpo --help"):
        grpo_parser.read_command(["--seed"])


def test_a_run_reads_its_config_once(grpo_parser, tmp_path, monkeypatch, capsys):
    """``run_cli`` with a table of the options, then TRL's configs: one reading of the YAML serves the DeepSpeed
    check, the precision, both parses and the printed line."""
    reads, real, table = [], parser.config_sources, parser.table_of(grpo_parser)

    def counted(path, _chain=()):
        if not _chain:
            reads.append(str(path))
        return real(path, _chain)

    monkeypatch.setattr(parser, "config_sources", counted)
    monkeypatch.setattr(common, "command_module", lambda make_parser: "recipes.grpo")
    monkeypatch.setattr(common, "table_parser", lambda module: parser.parser_from_table(table))
    monkeypatch.setattr(common, "save_table", lambda module, made: None)
    config = str(TINY / "grpo_cpu.yaml")
    argv = ["--config", config, "--model_name_or_path", str(tmp_path / "none"), "--build_tiny_model", "false"]
    monkeypatch.setattr(sys, "argv", ["recipes.grpo", *argv, "--output_dir", str(tmp_path / "out")])
    seen = {}
    common.run_cli(grpo.make_parser, lambda *args: seen.setdefault("args", args))
    assert reads == [config] and len(seen["args"]) == 3
    assert f"python -m recipes.grpo: {config} -> {tmp_path / 'out'}" in capsys.readouterr().out


def test_a_parser_parses_a_second_command_from_the_options_own_defaults(tmp_path):
    """A config's values are the defaults of its own parse only: a second command parsed by the same parser, from a
    config without that key, gets the option's default, not the first config's value."""
    from recipes import sft

    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    base = Path("recipes/configs/tiny/sft_cpu.yaml").read_text()
    first.write_text(base + "\neval_limit: 7\n")
    second.write_text("\n".join(line for line in base.splitlines() if not line.startswith("eval_limit:")) + "\n")
    made = sft.make_parser()
    default = made.get_default("eval_limit")
    assert made.parse_command(made.read_command(["--config", str(first)]))[0].eval_limit == 7
    assert made.parse_command(made.read_command(["--config", str(second)]))[0].eval_limit == default != 7
