"""The GRPO recipe's callback hook (``callbacks: ['module:function']``, recipes/grpo_setup.py): imported and called
before any model loads, its callbacks attached to the trainer, what they log in the run's log; a bad spec is one line.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_hooks.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from transformers import TrainerCallback

from eval.jsonl import read_jsonl
from recipes import grpo
from recipes.checks import ConfigError
from recipes.common import run_cli
from tests.helpers import parse_recipe_config, tiny_run_flags

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"
SEEN: dict = {}  # what the hook below was called with, for the test to read


class StepCounter(TrainerCallback):
    """Logs hook/steps every step through the context; remembers the trainer it was attached to."""

    def __init__(self, context):
        self.context, self.trainer, self.steps = context, None, 0
        self.run_files = ("hook_steps.txt",)

    def attach(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.steps += 1
        self.context.log({"hook/steps": self.steps})
        if state.global_step == 2:  # the monitors' own evaluation of this step, not a second one
            SEEN["held_out"] = self.context.held_out(model, processing_class, 2)
            SEEN["monitor_eval"] = self.context.monitor_callback.last_eval


def counting_hook(context):
    SEEN.update(rows=len(context.rows), rewards=[f.__name__ for f in context.reward_funcs], out=context.output_dir)
    SEEN["callback"] = StepCounter(context)
    return [SEEN["callback"]]


def not_a_callback(context):
    return object()


def refusing_hook(context):
    raise ValueError("this hook wants monitor_eval_steps: 5")


def parse(tmp_path, *overrides: str, model: str | None = None):
    flags = ["--output_dir", str(tmp_path / "run"), "--build_tiny_model", "false"]
    flags += ["--model_name_or_path", model or str(tmp_path / "no_model_here")]  # loading it would fail differently
    return parse_recipe_config(grpo, TINY_CONFIG, *flags, *overrides)


@pytest.mark.integration
def test_a_hook_is_called_with_the_context_and_its_callback_logs_into_the_run(tiny_model_dir, tmp_path):
    SEEN.clear()
    overrides = ["--callbacks", "tests.recipes.test_hooks:counting_hook", *tiny_run_flags(train_limit=6)]
    grpo.main(*parse(tmp_path, *overrides, model=str(tiny_model_dir)))
    assert SEEN["rows"] == 6 and SEEN["out"] == tmp_path / "run"
    assert SEEN["rewards"] == ["gsm8k_correctness_reward", "gsm8k_format_reward"]  # the run's own, in order
    assert SEEN["callback"].trainer is not None and SEEN["callback"].trainer.monitor_callback is not None
    steps = [r for r in read_jsonl(tmp_path / "run" / "log.jsonl") if "loss" in r]
    assert [r["hook/steps"] for r in steps] == [1, 2]  # context.log reaches the step's log line
    assert SEEN["held_out"] is SEEN["monitor_eval"][1] and SEEN["monitor_eval"][0] == 2  # monitor_eval_steps: 2
    assert steps[1]["eval/accuracy"] == SEEN["held_out"]["eval/accuracy"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("tests.recipes.test_hooks.counting_hook", "must read 'module:function'"),
        ("no_such_module_here:hook", "cannot be imported"),
        ("tests.recipes.test_hooks:no_such_function", "cannot be imported"),
        ("tests.recipes.test_hooks:not_a_callback", "not TrainerCallback"),
        ("tests.recipes.test_hooks:refusing_hook", "this hook wants monitor_eval_steps: 5"),
    ],
)
def test_a_bad_hook_is_one_line_before_any_model_loads(spec, message, tmp_path, monkeypatch, capsys):
    with pytest.raises(ConfigError, match=message):  # the missing model is never reached
        grpo.main(*parse(tmp_path, "--callbacks", spec))
    argv = ["--config", str(TINY_CONFIG), "--model_name_or_path", str(tmp_path / "none"), "--callbacks", spec]
    argv += ["--build_tiny_model", "true"]  # a tiny model there, were the checks to pass (they must not)
    monkeypatch.setattr(sys, "argv", ["recipes.grpo", *argv, "--output_dir", str(tmp_path / "o")])
    with pytest.raises(SystemExit) as exit_status:
        run_cli(grpo.make_parser, grpo.main)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_status.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not (tmp_path / "none").exists() and not (tmp_path / "o").exists()  # nothing built, nothing written


def test_one_prompt_options_are_checked_before_any_model_loads(tmp_path):
    for overrides, message in [
        (["--question", "How many?"], "gold_answer is not"),
        (["--gold_answer", "3"], "without question"),
        (["--question", "How many?", "--gold_answer", "3"], "question and data"),  # the config names data
        (
            [
                "--question",
                "How?",
                "--gold_answer",
                "3",
                "--data",
                "",
                "--train_limit",
                "0",
                "--curriculum",
                "json:dumps",
            ],
            "and curriculum",
        ),
        (["--question", "How?", "--gold_answer", "3", "--data", "", "--train_limit", "4"], "and train_limit"),
        (["--tracked_names", "a", "--tracked_answers", "x", "y"], "parallel"),
        (["--one_update_per_group", "true", "--num_iterations", "2"], "one update per group"),
        (["--reward_weights", "0", "0"], "are all 0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            grpo.main(*parse(tmp_path, *overrides))
