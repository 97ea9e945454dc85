"""``--help`` and a refused option answer before any library loads: a recipe module imports no torch, transformers,
TRL, peft or datasets, and a command line is first checked against a table of the recipe's options
(``recipes.parser.table_parser``: one an earlier command saved, else the one leash ships), which says the same as TRL's
configs would, in the same words.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_cli_speed.py

Here, in this process: a table against TRL's configs, and a saved table retired by a change. The commands themselves,
timed from an empty cache, and a clone whose sources changed: tests/recipes/test_option_tables.py.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_lab import runner
from recipes import common, parser

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("torch", "transformers", "trl", "peft", "datasets")  # loaded only where a run starts
RECIPES = ["recipes.grpo", "recipes.sft", "recipes.dpo", "recipes.reward_model"]
CONFIGS = parser.recipe_configs(ROOT / "recipes" / "configs")


@pytest.mark.heavy  # starts a process
def test_importing_a_recipe_loads_no_library():
    code = f"import sys, {', '.join(RECIPES)}; print(sorted(set({LIBRARIES!r}) & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


# --- the table against TRL's configs, in this process ---------------------------------------------------------------


def light(module: str) -> tuple[parser.RecipeParser, parser.RecipeParser]:
    """The recipe's parser and the one the saved table (through JSON, as on disk) gives."""
    full = importlib.import_module(module).make_parser()
    return full, parser.parser_from_table(json.loads(json.dumps(parser.table_of(full))))


@pytest.mark.parametrize("module", RECIPES)
def test_the_table_prints_the_same_help(module):
    full, table = light(module)
    assert table.format_help() == full.format_help()
    assert table.format_full_help() == full.format_full_help()
    assert table.format_usage() == full.format_usage() and table.description == full.description


REFUSED = [  # command lines the parser refuses (each: one line naming the problem)
    ["--max_steps", "-3"],  # no number of steps
    ["--learnig_rate", "0.1"],  # a typo
    ["--learning_rate", "fast"],  # not a number
    ["--use_peft", "maybe"],  # not a truth value
    ["--lr_scheduler_type", "wobbly"],  # not one of the choices
    ["--max_step", "3"],  # an abbreviation
    ["--seed", "1", "2"],  # a stray value
    ["--config"],  # no file
    ["--config", "no/such.yaml"],  # a file that is not there
]


@pytest.fixture
def environ():
    """``env:`` of a config is exported while it is parsed: put back what was there."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.parametrize("argv", REFUSED, ids=[" ".join(a) for a in REFUSED])
@pytest.mark.parametrize("module", ["recipes.sft", "recipes.grpo"])
def test_the_table_refuses_what_the_configs_refuse_in_the_same_words(module, argv, environ):
    full, table = light(module)
    with pytest.raises((ValueError, FileNotFoundError)) as expected:
        common.parse_or_explain(full, argv)
    with pytest.raises(type(expected.value)) as got:
        common.parse_or_explain(table, argv)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c.relative_to(ROOT / "recipes" / "configs")) for c in CONFIGS])
def test_the_table_passes_every_shipped_config(config, environ):
    _, table = light(runner.recipe_for(config))
    common.parse_or_explain(table, ["--config", str(config), "--seed", "3", "--use_peft", "--no_resume"])


def test_a_changed_source_file_retires_the_saved_table(tmp_path, monkeypatch):
    monkeypatch.setenv("LEASH_CACHE_DIR", str(tmp_path / "cache"))
    full = importlib.import_module("recipes.sft").make_parser()
    source = tmp_path / "options_source.py"
    source.write_text("X = 1\n")
    parser.save_table("recipes.sft", full, [source])
    assert parser.saved_parser("recipes.sft").format_help() == full.format_help()
    source.write_text("X = 2\n")
    assert parser.saved_parser("recipes.sft") is None  # rebuilt from TRL's configs, and saved again, by the next run
    assert parser.saved_parser("recipes.grpo") is None  # never saved
    parser.table_path("recipes.grpo").write_text('{"key": {"python": ')  # cut short
    assert parser.saved_parser("recipes.grpo") is None
