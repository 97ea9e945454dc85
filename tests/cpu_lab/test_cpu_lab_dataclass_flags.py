"""A settings dataclass on a lab's command line (cpu_lab/dataclass_flags.py): each field's type, default and help reach
its flag, the parsed flags build the dataclass back, and the commands built on it take the flags they always took.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_dataclass_flags.py
"""

import argparse
import sys
from dataclasses import dataclass, field
from typing import Literal

import pytest

from cpu_lab import problems, warmstart
from cpu_lab.dataclass_flags import add_fields, from_args
from cpu_lab.problems import Difficulty
from cpu_lab.warmstart import WarmStartSettings
from reward_model_lab.overoptimisation import make_parser
from reward_model_lab.settings import Settings


@dataclass(frozen=True)
class Run:
    steps: int = field(default=60, metadata={"help": "GRPO steps per run"})
    rate: float = field(default=0.5, metadata={"help": "a share"})
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"help": "seeds of every arm"})
    policy: str | None = field(default=None, metadata={"help": "a model folder"})
    pairs: Literal["policy", "reference"] = field(default="policy", metadata={"help": "where pairs come from"})
    control: bool = field(default=True, metadata={"help": "leave out the control"})
    verbose: bool = field(default=False, metadata={"help": "say more"})
    out_of_sight: str = "kept"  # no flag asked for it: keeps its default

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")


FLAGGED = ["steps", "rate", "seeds", "policy", "pairs", "control", "verbose"]


def parser_of(cls=Run, names=FLAGGED, sep="-") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run")
    add_fields(parser, cls, names, sep)
    return parser


def actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_a_fields_type_default_and_help_reach_its_flag():
    flags = actions(parser_of())
    assert (flags["--steps"].type, flags["--steps"].default, flags["--steps"].help) == (int, 60, "GRPO steps per run")
    assert (flags["--rate"].type, flags["--rate"].default) == (float, 0.5)
    assert (flags["--seeds"].type, flags["--seeds"].nargs, flags["--seeds"].default) == (int, "+", [0, 1])
    assert (flags["--policy"].type, flags["--policy"].default) == (str, None)  # X | None: one X
    assert flags["--pairs"].choices == ["policy", "reference"]  # a Literal: its values
    assert flags["--no-control"].help == "leave out the control"  # True by default: the switch turns it off
    assert flags["--verbose"].default is False  # False by default: the switch turns it on
    assert "--out-of-sight" not in flags and "--control" not in flags


def test_the_flags_spelling_follows_sep():
    names = ["eval_every", "checker_control"]
    assert {"--eval-every", "--no-checker-control"} <= set(actions(parser_of(Settings, names)))  # the default
    assert {"--eval_every", "--no_checker_control"} <= set(actions(parser_of(Settings, names, sep="_")))


def test_the_namespace_builds_the_dataclass():
    parser = parser_of()
    assert from_args(Run, parser.parse_args([])) == Run()  # every default is the dataclass's
    args = parser.parse_args(["--steps", "3", "--seeds", "4", "5", "--pairs", "reference", "--no-control", "--verbose"])
    assert from_args(Run, args) == Run(steps=3, seeds=[4, 5], pairs="reference", control=False, verbose=True)
    assert from_args(Run, args, out_of_sight="set in code").out_of_sight == "set in code"  # a field with no flag


def test_a_field_without_a_default_is_a_required_flag(capsys):
    @dataclass
    class Needs:
        model: str = field(metadata={"help": "a model folder"})

    parser = parser_of(Needs, ["model"])
    assert from_args(Needs, parser.parse_args(["--model", "m"])) == Needs("m")
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "the following arguments are required: --model" in capsys.readouterr().err


def test_the_dataclass_checks_run_as_it_is_built():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        from_args(Run, parser_of().parse_args(["--steps", "0"]))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),  # an unknown flag, as any argparse parser
        (["--out-of-sight", "x"], "unrecognized arguments: --out-of-sight"),  # a field not asked for
        (["--control"], "unrecognized arguments: --control"),  # only its --no- switch
        (["--steps", "two"], "argument --steps: invalid int value: 'two'"),  # the annotation reads the value
        (["--pairs", "both"], "argument --pairs: invalid choice: 'both'"),  # a Literal's values only
        (["--seeds"], "argument --seeds: expected at least one argument"),  # a list: one or more
    ],
)
def test_a_bad_flag_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        parser_of().parse_args(argv)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_a_field_without_a_flag_type_or_name_is_refused_when_the_parser_is_built():
    with pytest.raises(TypeError, match="WarmStartSettings.difficulty"):  # a nested dataclass
        parser_of(WarmStartSettings, ["difficulty"])
    with pytest.raises(ValueError, match="Run has no field 'step'"):
        parser_of(Run, ["step"])


# --- the commands built on it ----------------------------------------------------------------------------------------


def test_the_overoptimisation_options_are_the_settings_fields_with_their_defaults():
    parser = make_parser()
    assert from_args(Settings, parser.parse_args([])) == Settings()
    flagged = {"--seeds", "--betas", "--no-checker-control", "--steps", "--eval-every", "--eval-n", "--jobs"}
    flagged |= {"--pairs", "--pair-problems", "--pair-k", "--policy", "--train-data", "--heldout-data", "--report-to"}
    assert flagged <= set(actions(parser))
    args = parser.parse_args(["--seeds", "0", "--betas", "0", "0.2", "--no-checker-control", "--pairs", "reference"])
    settings = from_args(Settings, args)
    assert (settings.seeds, settings.betas, settings.checker_control, settings.pairs) == (
        [0],
        [0.0, 0.2],
        False,
        "reference",
    )


def test_the_warm_start_command_refuses_bad_settings_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["python -m cpu_lab.warmstart", "--stop-at-accuracy", "1.5"])
    with pytest.raises(SystemExit) as exit:
        warmstart.main()
    assert exit.value.code == 2
    assert "error: stop_at_accuracy must be in (0, 1], got 1.5" in capsys.readouterr().err


class Written(Exception):
    """What the stand-in for ``write_lab_data`` raises: the Difficulty it was given."""


def test_the_problems_command_takes_the_difficulty_flags(monkeypatch, tmp_path):
    def stand_in(out_dir, n_train, seed, difficulty, *sizes):
        raise Written(difficulty)

    monkeypatch.setattr(problems, "write_lab_data", stand_in)
    argv = ["python -m cpu_lab.problems", str(tmp_path), "--min-steps", "2", "--max-steps", "3", "--max-number", "20"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(Written) as written:
        problems.main()
    assert written.value.args[0] == Difficulty(min_steps=2, max_steps=3, max_number=20)
