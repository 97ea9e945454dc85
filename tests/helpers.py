"""Helpers that several test files share (the shared fixtures are in tests/conftest.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

# a short GRPO run of a tiny config: two steps of 8-token completions, no evaluation before and after, the held-out
# monitor on 2 problems and the hack probes on 1 (recipes/configs/tiny/grpo_cpu.yaml sets the rest)
TINY_RUN = {
    "max_steps": 2,
    "eval_limit": 0,
    "monitor_eval_limit": 2,
    "probe_problems": 1,
    "max_completion_length": 8,
    "eval_max_new_tokens": 8,
}


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


def as_flags(**options: object) -> list[str]:
    """Recipe options as command-line flags, in order (a bool as ``true``/``false``, a path as its text).

    >>> as_flags(max_steps=3, use_peft=True, output_dir=Path("runs/x"))
    ['--max_steps', '3', '--use_peft', 'true', '--output_dir', 'runs/x']
    """
    flags = []
    for name, value in options.items():
        flags += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags


def tiny_run_flags(**overrides: object) -> list[str]:
    """The command-line flags of TINY_RUN, each of ``overrides`` in place of its value or added after them.

    >>> tiny_run_flags(max_steps=3, beta=0.04, use_peft=True)[:2], tiny_run_flags(beta=0.04, use_peft=True)[-4:]
    (['--max_steps', '3'], ['--beta', '0.04', '--use_peft', 'true'])
    """
    return as_flags(**(TINY_RUN | overrides))


def write_reference_pairs(data_dir: Path, folder: Path, limit: int) -> str:
    """Rollouts of the first ``limit`` GSM8K training problems, each answered by its reference solution (correct) and
    by the same with the final answer raised by one (wrong): ``limit`` preference pairs for DPO and the reward model.
    Written to ``folder/rollouts.jsonl``; returns its path."""
    from eval.jsonl import write_jsonl
    from training_data.rollouts import reference_rollouts

    records = reference_rollouts("gsm8k_train", str(data_dir / "gsm8k" / "train.jsonl"), limit=limit)
    return str(write_jsonl(records, Path(folder) / "rollouts.jsonl"))
