"""A recipe's parser: the help a reader needs first, config keys checked by name, and quiet libraries.

``RecipeParser`` is TRL's ``TrlParser`` (a YAML ``--config`` sets the options, flags after it override them) with:

- ``--help``: what the recipe does, ``--config``, leash's own options in named groups and the TRL options most runs
  set, on one screen; ``--help-all`` adds every option of TRL's config and ``ModelConfig`` (some 250 for GRPO).
- an unknown key in the config or flag on the command line: one line that names it, the closest known option and the
  file, where TRL says "add them to the dataclass, or set fail_with_unknown_args=False". A value argparse cannot read
  (``--learning_rate fast``, or ``max_steps: two`` in the config, named with its file) is one line too, not a usage
  block of 300 options; so is a config that is not valid YAML (its file, line and column: ``load_config``). A flag is
  never read as the option it begins (argparse's ``allow_abbrev``: ``--max_step`` is refused, not ``--max_steps``).
- ``max_steps``: a number of optimizer steps, or -1 to train ``num_train_epochs`` (transformers reads every value
  below 1 as -1; ``check_max_steps`` refuses the others).
- ``gradient_checkpointing`` and ``gradient_checkpointing_kwargs`` (TRL's names, in the configs) passed to
  transformers under their new names ``activation_checkpointing*`` where it has them, so it warns about nothing.
- ``build_tiny_model: true`` settled against the model path (``recipes.tiny_model.may_build_at``).

Recipes build it through ``recipes.common.recipe_parser`` (the TRL options every recipe shows first) and run it
through ``recipes.common.run_cli``.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import fields

import yaml
from trl import TrlParser

from recipes.tiny_model import may_build_at

RENAMED = {  # TRL's names (TRL 1.16 defaults gradient_checkpointing to True) -> transformers >= 5.2x's
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}


BESIDE = {"resume": ("overwrite",)}  # options every recipe has, shown beside the one they go with


class RecipeHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written (it holds commands); a default after each option's help where it says something."""

    def __init__(self, prog, indent_increment=2, max_help_position=34, width=None):
        super().__init__(prog, indent_increment, max_help_position, width)

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or action.default in (None, [], "", argparse.SUPPRESS) or not action.option_strings:
            return text
        if isinstance(action, argparse._StoreFalseAction | argparse._StoreTrueAction):
            return text
        return f"{text} (default: %(default)s)"


class HelpAllAction(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(parser.format_full_help(), sys.stdout)
        parser.exit()


def first_sentence(text: str | None) -> str:
    """The first sentence of an option's help, for the one-screen summary.

    >>> first_sentence("The initial learning rate for AdamW. Defaults to 1e-6, which is lower than 2e-5.")
    'The initial learning rate for AdamW.'
    """
    text = " ".join((text or "").split())
    found = re.search(r"(?<=[.:;])\s+(?=[A-Z`(])", text)
    return text[: found.start()] if found else text


def first_clause(text: str | None) -> str | None:
    """An option's help up to its first ``;`` outside brackets: what the option does, for the summary (the rest,
    the fine print, is in ``--help-all``).

    >>> first_clause("generate with vLLM when a GPU is present; an explicit --use_vllm wins (default: off; or not)")
    'generate with vLLM when a GPU is present'
    >>> first_clause("names from rewards/ (a; b)")
    'names from rewards/ (a; b)'
    """
    depth = 0
    for i, char in enumerate(text or ""):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ";" and depth == 0:
            return text[:i]
    return text


def metavar(action: argparse.Action) -> str | None:
    """A short name for an option's value (``INT``, ``FLOAT``, ``BOOL``...) instead of its name in capitals."""
    if action.choices:
        return None  # argparse lists them
    kind = getattr(action.type, "__name__", "")
    return {"int": "INT", "float": "FLOAT", "str": "TEXT", "string_to_bool": "BOOL"}.get(kind, "VALUE")


def docs_summary(doc: str) -> str:
    """A recipe docstring's first paragraph and its first block of commands: what the recipe does and how to run it."""
    paragraphs = [p for p in doc.strip().split("\n\n") if p.strip()]
    commands = next((p for p in paragraphs[1:] if p.startswith("    ")), "")
    return "\n\n".join(p for p in (paragraphs[0] if paragraphs else "", commands) if p)


def unknown_option_message(name: str, known: Sequence[str], where: str, module: str) -> str:
    """One line for an option no dataclass of the recipe has: the closest known name, written as it was given (a
    config key, or a ``--flag``), and where it was given.

    >>> unknown_option_message("learnig_rate", ["learning_rate", "lr_scheduler_type"], "in a.yaml", "recipes.grpo")
    'unknown option learnig_rate in a.yaml: did you mean learning_rate? (python -m recipes.grpo --help-all lists every option)'
    >>> unknown_option_message("--learnig-rate", ["learning_rate"], "on the command line", "recipes.grpo")[:70]
    'unknown option --learnig-rate on the command line: did you mean --lear'
    """  # noqa: E501
    flag = "--" if name.startswith("--") else ""
    close = difflib.get_close_matches(name.removeprefix("--").replace("-", "_"), known, n=1, cutoff=0.6)
    guess = f"did you mean {flag}{close[0]}?" if close else f"python -m {module} has no such option"
    return f"unknown option {name} {where}: {guess} (python -m {module} --help-all lists every option)"


def load_config(path: str) -> dict:
    """The options of the YAML file ``path``; a file that is not YAML, or not ``option: value`` lines, is one
    ValueError naming the file, line and column.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    ...     _ = f.write("max_steps: 4\\nreward_funcs: [a\\nseed: 0\\n")
    >>> load_config(f.name)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: config file ... is not valid YAML at line 3, column 5: expected ',' or ']', but got ':' (while parsing a flow sequence opened at line 2, column 15): fix the file
    """  # noqa: E501
    try:
        with open(path) as file:
            config = yaml.safe_load(file) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(str(getattr(error, "problem", None) or error).split())
        context, opened = getattr(error, "context", None), getattr(error, "context_mark", None)
        if context and opened and opened is not mark:
            what += f" ({context} opened at line {opened.line + 1}, column {opened.column + 1})"
        raise ValueError(f"config file {path} is not valid YAML{where}: {what}: fix the file") from None
    if not isinstance(config, dict):
        raise ValueError(f"config file {path} must hold option: value lines, not {type(config).__name__}")
    return config


def check_config_value(key: str, value, action: argparse.Action, path: str) -> None:
    """A number option's value in a config file must read as one (argparse would refuse it without naming the file).

    >>> check_config_value("max_steps", "two", argparse.Action(["--max_steps"], "max_steps", type=int), "a.yaml")
    Traceback (most recent call last):
    ...
    ValueError: max_steps: 'two' in a.yaml is not a whole number: write e.g. max_steps: 100
    """
    kind = action.type
    if kind not in (int, float) or value is None or action.nargs not in (None, "?"):
        return
    try:
        ok = not isinstance(value, bool | list | dict) and (kind(value) == value or isinstance(value, str))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        what, example = ("a whole number", 100) if kind is int else ("a number", 0.001)
        raise ValueError(f"{key}: {value!r} in {path} is not {what}: write e.g. {key}: {example}")


def check_max_steps(parsed: Sequence) -> None:
    """``max_steps`` is a number of steps (1 or more) or -1: transformers would train ``num_train_epochs`` epochs
    for -3 as for -1.

    >>> import types
    >>> check_max_steps([types.SimpleNamespace(max_steps=-3)])
    Traceback (most recent call last):
    ...
    ValueError: max_steps -3 is no number of steps: give the optimizer steps to train (1 or more), or -1 to train num_train_epochs epochs
    """  # noqa: E501
    for part in parsed:
        steps = getattr(part, "max_steps", -1)
        if steps != -1 and steps < 1:
            raise ValueError(
                f"max_steps {steps} is no number of steps: give the optimizer steps to train (1 or more), or -1 to "
                "train num_train_epochs epochs"
            )


def rename_flags(args: Sequence[str], renamed: dict[str, str]) -> list[str]:
    """Command-line flags under their new names: ``--old[=v]`` -> ``--new[=v]`` and a bare boolean ``--old`` or
    ``--no_old`` -> ``--new true`` or ``--new false`` (the new boolean takes a value).

    >>> rename_flags(["--gradient_checkpointing", "--seed", "1", "--no_gradient_checkpointing"], RENAMED)
    ['--activation_checkpointing', 'true', '--seed', '1', '--activation_checkpointing', 'false']
    """
    out: list[str] = []
    for i, arg in enumerate(args):
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        key = name.replace("-", "_")
        if key in renamed:
            bare = not eq and (i + 1 == len(args) or args[i + 1].startswith("--")) and not key.endswith("_kwargs")
            out += [f"--{renamed[key]}", "true"] if bare else [f"--{renamed[key]}{eq}{value}"]
        elif key.startswith("no_") and key[3:] in renamed:
            out += [f"--{renamed[key[3:]]}", "false"]
        else:
            out.append(arg)
    return out


class RecipeParser(TrlParser):
    """TRL's parser for a recipe (module docstring at the top of its help), with leash's help, errors and renames.

    Args:
        dataclass_types: the recipe's script arguments first, then TRL's config and ``ModelConfig``.
        module: the recipe's module (``recipes.grpo``), as a user runs it with ``python -m``.
        doc: the recipe's module docstring.
        groups: titles of the script arguments' option groups, each with its field names, in the order shown (fields
            left out go under "other options of the recipe").
        common: the TRL options most runs set, shown on the first screen.
        folded: titles of groups that ``--help`` names in one paragraph (options few runs set, such as the LLM
            judge's), so that the summary stays on one screen; ``--help-all`` shows them in full.
        docs: the page that explains the options (``docs/grpo.md``).
    """

    def __init__(
        self,
        dataclass_types,
        *,
        module: str,
        doc: str,
        groups: dict[str, Sequence[str]] | None = None,
        common: Sequence[str] = (),
        folded: Sequence[str] = (),
        docs: str = "",
    ):
        self.module, self.doc, self.docs = module, doc.strip(), docs
        self.script_type, *self.trl_types = dataclass_types
        self.groups, self.common, self.folded = dict(groups or {}), tuple(common), tuple(folded)
        prog = f"python -m {module}"
        super().__init__(
            dataclass_types,
            prog=prog,
            usage=f"{prog} --config CONFIG.yaml [--OPTION VALUE ...]",
            description=docs_summary(doc),
            formatter_class=RecipeHelpFormatter,
            allow_abbrev=False,  # --max_step is an unknown option, not --max_steps
        )
        self.add_argument("--help-all", action=HelpAllAction, help="every option, TRL's included")

    # --- help --------------------------------------------------------------------------------------------------------

    def _actions_of(self, name: str, short: bool) -> list[argparse.Action]:
        """Copies of the actions of field ``name`` with short value names (the summary drops ``--no_*`` twins)."""
        found = []
        for action in self._actions:
            if action.dest != name or (short and isinstance(action, argparse._StoreFalseAction)):
                continue
            shown = copy.copy(action)
            shown.metavar = metavar(action)
            shown.option_strings = action.option_strings[:1]  # --name, not its --dashed-name twin as well
            if short and name in self.common:
                shown.help = first_sentence(action.help).replace("%%", "%").replace("%", "%%")
            elif short:
                shown.help = first_clause(action.help)
            found.append(shown)
        return found

    def leash_groups(self) -> list[tuple[str, list[str]]]:
        """The script arguments' fields by group title, in order (``BESIDE``'s after the field they go with);
        unnamed ones last."""
        names = [f.name for f in fields(self.script_type)]
        grouped = [
            (title, [m for n in members if n in names for m in (n, *BESIDE.get(n, ())) if m in names])
            for title, members in self.groups.items()
        ]
        placed = {n for _, members in grouped for n in members}
        rest = [n for n in names if n not in placed]
        return [(title, members) for title, members in [*grouped, ("other options of the recipe", rest)] if members]

    def _display(self, full: bool) -> argparse.ArgumentParser:
        shown = argparse.ArgumentParser(
            prog=self.prog,
            usage=self.usage,
            description=self.doc if full else self.description,
            formatter_class=RecipeHelpFormatter,
            add_help=False,
        )
        start = shown.add_argument_group("start here")
        start.add_argument(
            "--config", metavar="CONFIG.yaml", help="option: value lines (recipes/configs/); flags after it win"
        )
        start.add_argument("-h", "--help", action="store_true", help="this summary")
        start.add_argument("--help-all", action="store_true", help="every option, TRL's included")
        for title, names in self.leash_groups():
            if title in self.folded and not full:
                listed = ", ".join(f"--{name}" for name in names) + " (--help-all describes them)"
                shown.add_argument_group(title, textwrap.fill(listed, 74))  # argparse indents it by 2
                continue
            group = shown.add_argument_group(title)
            for name in names:
                for action in self._actions_of(name, short=not full):
                    group._add_action(action)
        trl_names = [[f.name for f in fields(t) if f.init] for t in self.trl_types]
        count = sum(len(n) for n in trl_names)
        pointer = f"{self.prog} --help-all lists all {count} options of {self.trl_title()}"
        pointer += f";\n{self.docs} explains the recipe's own options" if self.docs else ""
        if full:
            for kind, names in zip(self.trl_types, trl_names, strict=True):
                group = shown.add_argument_group(f"TRL's {kind.__name__}")
                for name in names:
                    for action in self._actions_of(name, short=False):
                        group._add_action(action)
        else:
            group = shown.add_argument_group(f"options of {self.trl_title()} that runs often set")
            for name in self.common:
                for action in self._actions_of(name, short=True):
                    group._add_action(action)
            shown.epilog = pointer
        return shown

    def trl_title(self) -> str:
        """``TRL's GRPOConfig and ModelConfig``."""
        return "TRL's " + " and ".join(t.__name__ for t in self.trl_types)

    def format_help(self) -> str:
        """The one-screen summary ``--help`` prints."""
        return self._display(full=False).format_help()

    def format_full_help(self) -> str:
        """Every option, by group, as ``--help-all`` prints it."""
        return self._display(full=True).format_help()

    # --- parsing -----------------------------------------------------------------------------------------------------

    def error(self, message: str):
        """argparse's refusal of a value (``invalid float value``) as one line instead of usage + message + exit."""
        raise ValueError(f"{message} ({self.prog} --help lists the options)")

    def parse_args_and_config(
        self,
        args: Sequence[str] | None = None,
        return_remaining_strings: bool = False,
        fail_with_unknown_args: bool = True,
        separate_remaining_strings: bool = False,
    ):
        """TRL's ``parse_args_and_config`` (YAML from ``--config``, its ``env:`` exported, flags win), with unknown
        keys and flags named, the renames of ``RENAMED`` and the tiny model settled. Returns the dataclasses."""
        args = list(sys.argv[1:] if args is None else args)
        config_path, config = None, {}
        for i, arg in enumerate(args):
            if arg == "--config" and (i + 1 == len(args) or args[i + 1].startswith("--")):
                raise ValueError(f"--config needs the path of a YAML file, e.g. {self.prog} --config CONFIG.yaml")
            if arg == "--config" or arg.startswith("--config="):
                config_path = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else None)
                del args[i : i + (1 if "=" in arg else 2)]
                break
        if config_path is not None:
            if not os.path.isfile(config_path):
                raise FileNotFoundError(
                    f"config file {config_path} does not exist: pass a YAML of options (recipes/configs/ holds them)"
                )
            config = load_config(config_path)
        known = [a.dest for a in self._actions if a.option_strings and a.dest != argparse.SUPPRESS]
        actions = {a.dest: a for a in self._actions if a.option_strings}
        for key, value in config.items():
            if key != "env" and key not in known:
                raise ValueError(unknown_option_message(str(key), known, f"in {config_path}", self.module))
            if key != "env":
                check_config_value(key, value, actions[key], config_path)
        for key, value in (config.pop("env", None) or {}).items():
            os.environ[key] = str(value)
        renamed = {old: new for old, new in RENAMED.items() if old in known and new in known}
        config = {renamed.get(k, k): v for k, v in config.items()}
        args = rename_flags(args, renamed)
        if renamed:  # TRL's default (True) under the new name, so that the old one stays unset
            defaults = {a.dest: a.default for a in self._actions}
            for old, new in renamed.items():
                config.setdefault(new, defaults[old])
        self.set_defaults_with_config(**config)
        *parsed, remaining = self.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
        flags = [a for a in remaining if a.startswith("-")]
        if flags:
            flag = flags[0].lstrip("-").split("=", 1)[0]
            raise ValueError(unknown_option_message(f"--{flag}", known, "on the command line", self.module))
        if remaining:
            raise ValueError(
                f"unexpected value(s) {remaining} on the command line: give each option as --name value "
                f"({self.prog} --help lists them)"
            )
        self.settle_tiny_model(parsed, args)
        check_max_steps(parsed)
        return tuple(parsed)

    @staticmethod
    def settle_tiny_model(parsed: Sequence, args: Sequence[str]) -> None:
        """``build_tiny_model`` switched off where ``recipes.tiny_model.may_build_at`` says no (a hub id), and a
        ValueError where the command line moved the model path of a config that builds."""
        script = next((p for p in parsed if getattr(p, "build_tiny_model", False)), None)
        model = next((p for p in parsed if hasattr(p, "model_name_or_path")), None)
        if script is None or model is None or not model.model_name_or_path:
            return
        path = model.model_name_or_path
        if os.path.exists(path):
            return
        given = {a[2:].split("=", 1)[0].replace("-", "_") for a in args if a.startswith("--")}
        script.build_tiny_model = may_build_at(path, "build_tiny_model" in given, "model_name_or_path" in given)
