"""Helpers that several test files share (the shared fixtures are in tests/conftest.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType


def parse_recipe_config(recipe: ModuleType | str, config: str | Path, *overrides: str, as_run: bool = False):
    """The argument dataclasses (script, training, model) that a recipe gets from ``--config config`` followed by
    ``overrides``, parsed by the recipe's own parser (``make_parser()``).

    ``recipe`` is a recipe module (``recipes.grpo``) or its name (``"grpo"``). ``as_run=False`` parses with TRL's
    parser alone: the YAML and the flags, nothing chosen for this machine. ``as_run=True`` parses as
    ``python -m recipes.<name>`` does (``recipes.common.parse_or_explain``): a CPU run's precision when neither sets
    it, the fix added to TRL's errors, and the DeepSpeed and W&B checks.
    """
    module = importlib.import_module(f"recipes.{recipe}") if isinstance(recipe, str) else recipe
    argv = ["--config", str(config), *overrides]
    if as_run:
        from recipes import common  # the recipes' command-line checks

        return common.parse_or_explain(module.make_parser(), argv)
    return module.make_parser().parse_args_and_config(argv)
