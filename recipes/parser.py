"""A recipe's parser: TRL's reading of a command line (a YAML ``--config``, flags after it win) with a one-screen
``--help``, config keys checked by name and value, one-line errors, and configs built on a ``base:`` (``load_config``).

TRL's configs import torch, transformers and peft, several seconds, so ``recipes.common.run_cli`` first reads a command
line with a table of the recipe's options (``parser_from_table``): ``--help`` and what the table can refuse are
answered before those libraries load, in the full parser's words. The table is the one the full parser saved in the
cache (``save_table``), else the one leash ships in ``recipes/options/``; each is keyed by the Python, the versions of
``VERSIONED`` and the contents of the files the options are written in, so that a stale one is never read.
``python -m recipes.parser --write-tables`` writes the shipped ones again (``tests/recipes/test_option_tables.py``
fails while one is stale).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, fields
from importlib import metadata
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLE_FORMAT = 1  # the layout of a saved table: a table of another layout is not read
# the libraries whose versions a table was made with: TRL's and transformers' configs, and the two their options read
# when the configs are defined (transformers' default optim is adamw_torch_fused from torch 2.8 on, its
# parallelism_config takes accelerate's ParallelismConfig from accelerate 1.10.1 on)
VERSIONED = ("trl", "transformers", "torch", "accelerate")
RECIPES = ("recipes.dpo", "recipes.grpo", "recipes.reward_model", "recipes.sft")  # the modules that run run_cli
SHIPPED = ROOT / "recipes" / "options"  # the tables leash ships, one a recipe
WRITE_TABLES = "python -m recipes.parser --write-tables"  # writes them

RENAMED = {  # TRL's names (TRL 1.16 defaults gradient_checkpointing to True) -> transformers >= 5.2x's
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}


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
    """An option's help up to its first ``;`` outside brackets: what the option does, for the summary (the fine print
    waits for ``--help-all``).

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
    """One line for an option the recipe does not have: the closest known name, written as it was given (a config key or
    a ``--flag``), and where it was given.

    >>> unknown_option_message("learnig_rate", ["learning_rate", "lr_scheduler_type"], "in a.yaml", "recipes.grpo")
    'unknown option learnig_rate in a.yaml: did you mean learning_rate? (python -m recipes.grpo --help-all lists every option)'
    >>> unknown_option_message("--learnig-rate", ["learning_rate"], "on the command line", "recipes.grpo")[:70]
    'unknown option --learnig-rate on the command line: did you mean --lear'
    """  # noqa: E501
    flag = "--" if name.startswith("--") else ""
    close = difflib.get_close_matches(name.removeprefix("--").replace("-", "_"), known, n=1, cutoff=0.6)
    guess = f"did you mean {flag}{close[0]}?" if close else f"python -m {module} has no such option"
    return f"unknown option {name} {where}: {guess} (python -m {module} --help-all lists every option)"


BASE_KEY = "base"  # a config's key that names the config it starts from (never an option of a recipe)


def is_base_config(path: str | Path) -> bool:
    """A ``_*.yaml`` file holds what some configs of its folder share, for their ``base:``; no recipe runs it alone.

    >>> is_base_config("recipes/configs/lab/_base.yaml"), is_base_config("recipes/configs/lab/grpo_lab_default.yaml")
    (True, False)
    """
    return Path(path).name.startswith("_")


def recipe_configs(root: str | Path = ROOT / "recipes" / "configs") -> list[Path]:
    """Every config a recipe runs under ``root``, without the bases."""
    found = [*Path(root).rglob("*.yaml"), *Path(root).rglob("*.yml")]
    return sorted(p for p in found if not is_base_config(p))


FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml (C) where installed: the same values, faster


def read_yaml_options(path: str, base_of: str | None = None) -> dict:
    """The ``option: value`` lines of one YAML file, as written; anything else is one ValueError naming the file (and,
    for a base, the config whose ``base:`` names it)."""
    of = f" (the base of {base_of})" if base_of else ""
    try:
        text = Path(path).read_text()
        try:
            config = yaml.load(text, Loader=FAST_LOADER)
        except yaml.YAMLError:
            config = yaml.safe_load(text)  # a bad file: PyYAML's own reading names the problem more plainly
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(str(getattr(error, "problem", None) or error).split())
        context, opened = getattr(error, "context", None), getattr(error, "context_mark", None)
        if context and opened and opened is not mark:
            what += f" ({context} opened at line {opened.line + 1}, column {opened.column + 1})"
        raise ValueError(f"config file {path}{of} is not valid YAML{where}: {what}: fix the file") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        kind = type(config).__name__
        if base_of:
            raise ValueError(
                f"config file {base_of}: its base {path} holds a {kind}, not option: value lines: point base: at a "
                "config file"
            )
        raise ValueError(f"config file {path} must hold option: value lines, not {kind}")
    return config


def load_config(path: str | Path) -> dict:
    """The options of the YAML config ``path``: those of the config its ``base:`` names (relative to this file's folder;
    a base may have a base), each replaced whole by this file's keys. Every reader of a recipe config reads it here; a
    bad file or ``base:`` is one ValueError that names the file.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    ...     _ = f.write("max_steps: 4\\nreward_funcs: [a\\nseed: 0\\n")
    >>> load_config(f.name)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: config file ... is not valid YAML at line 3, column 5: expected ',' or ']', but got ':' (while parsing a flow sequence opened at line 2, column 15): fix the file
    """  # noqa: E501
    return config_sources(path)[0]


def config_sources(path: str | Path, _chain: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """``load_config(path)``, and for each option the file that sets it (``path`` or a base of it)."""
    path = str(path)
    config = read_yaml_options(path, base_of=_chain[-1] if _chain else None)
    if BASE_KEY not in config:
        return config, dict.fromkeys(config, path)
    base = config.pop(BASE_KEY)
    folder = os.path.dirname(path) or "."
    if not isinstance(base, str) or not base.strip():
        raise ValueError(
            f"config file {path}: base: must name a config file by its path relative to {folder}/, not {base!r}"
        )
    base_path = os.path.normpath(os.path.join(folder, base))
    chain = (*_chain, path)
    if os.path.realpath(base_path) in {os.path.realpath(p) for p in chain}:
        loop = " -> ".join([*chain, base_path])
        raise ValueError(f"config file {path}: base: {base} makes a cycle ({loop}): remove one of these base: lines")
    if not os.path.isfile(base_path):
        raise ValueError(
            f"config file {path}: base: {base} names no file ({base_path} does not exist): give the path of a config "
            f"relative to {folder}/"
        )
    options, sources = config_sources(base_path, chain)
    return {**options, **config}, {**sources, **dict.fromkeys(config, path)}


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
    """``max_steps`` is 1 or more, or -1: transformers would train ``num_train_epochs`` for -3 as for -1.

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


@dataclass
class Command:
    """A recipe's command line read once, for the checks before the parse and the parse itself.

    >>> parser = RecipeParser(module="recipes.x", doc="")
    >>> _ = parser.add_argument("--use_vllm", "--use-vllm", nargs="?", const=True, default=False)
    >>> command = parser.read_command(["--use-vllm", "--seed=1", "--use_vllm=false"])
    >>> command.path, command.given, command.args
    (None, {'use_vllm': 'false'}, ['--use-vllm', '--seed=1', '--use_vllm=false'])
    """

    path: str | None
    config: dict
    sources: dict
    given: dict
    args: list[str]


class RecipeParser(argparse.ArgumentParser):
    """A recipe's parser with leash's help, errors and renames, built from TRL's configs (``from_dataclasses``) or
    from a saved table of their options (``parser_from_table``). ``--help`` names the ``folded`` groups (options few
    runs set) in one paragraph each, so that it stays on one screen."""

    def __init__(
        self,
        *,
        module: str,
        doc: str,
        groups: dict[str, Sequence[str]] | None = None,
        common: Sequence[str] = (),
        folded: Sequence[str] = (),
        docs: str = "",
        script_fields: Sequence[str] = (),
        trl_parts: Sequence[tuple[str, Sequence[str]]] = (),
    ):
        self.module, self.doc, self.docs = module, doc.strip(), docs
        self.groups, self.common, self.folded = dict(groups or {}), tuple(common), tuple(folded)
        self.script_fields = list(script_fields)
        self.trl_parts = [(name, list(names)) for name, names in trl_parts]
        self.dataclass_types: tuple | None = None  # TRL's configs; None when built from a saved table
        prog = f"python -m {module}"
        super().__init__(
            prog=prog,
            usage=f"{prog} --config CONFIG.yaml [--OPTION VALUE ...]",
            description=docs_summary(doc),
            formatter_class=RecipeHelpFormatter,
            allow_abbrev=False,  # --max_step is an unknown option, not --max_steps
        )
        self.add_argument("--help-all", action=HelpAllAction, help="every option, TRL's included")

    @classmethod
    def from_dataclasses(cls, dataclass_types: Sequence[type], **layout) -> RecipeParser:
        """The parser of the recipe's script arguments (first), TRL's config and ``ModelConfig``, with the options TRL's
        own parser makes from their fields. The help's groups are the parts of the script arguments that name one
        (``_argument_group_name``, as TRL reads it), those with ``_help_folded`` folded."""
        from trl import TrlParser

        script_type, *trl_types = dataclass_types
        groups: dict[str, list[str]] = {}  # each part of the script arguments that names its group, in their order
        for part in [kind for kind in script_type.__mro__ if "_argument_group_name" in vars(kind)]:
            own = vars(part).get("__annotations__", {})
            groups.setdefault(part._argument_group_name, []).extend(f.name for f in fields(part) if f.name in own)
        folded = [kind._argument_group_name for kind in script_type.__mro__ if vars(kind).get("_help_folded")]
        parser = cls(
            **layout,
            groups=groups,
            folded=folded,
            script_fields=[f.name for f in fields(script_type)],
            trl_parts=[(t.__name__, [f.name for f in fields(t) if f.init]) for t in trl_types],
        )
        for action in TrlParser(list(dataclass_types))._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                parser._add_action(action)
        parser.dataclass_types = tuple(dataclass_types)
        return parser

    # --- help: the screens are built by help_screen (below the class), which a run never reads ------------------------

    def format_help(self) -> str:
        """The one-screen summary ``--help`` prints."""
        return help_screen(self, full=False).format_help()

    def format_full_help(self) -> str:
        """Every option, by group, as ``--help-all`` prints it."""
        return help_screen(self, full=True).format_help()

    # --- parsing -----------------------------------------------------------------------------------------------------

    def error(self, message: str):
        """argparse's refusal of a value (``invalid float value``) as one line instead of usage + message + exit."""
        raise ValueError(f"{message} ({self.prog} --help lists the options)")

    def read_command(self, args: Sequence[str] | None = None) -> Command:
        """The command line ``args`` read once, for every check before the parse and for the parse itself."""
        args = list(sys.argv[1:] if args is None else args)
        split = argparse.ArgumentParser(prog=self.prog, add_help=False, allow_abbrev=False, exit_on_error=False)
        split.add_argument("--config")
        try:
            found, rest = split.parse_known_args(args)
        except argparse.ArgumentError:
            raise ValueError(f"--config needs the path of a YAML file, e.g. {self.prog} --config CONFIG.yaml") from None
        config, sources = {}, {}
        if found.config is not None:
            if not os.path.isfile(found.config):
                raise FileNotFoundError(
                    f"config file {found.config} does not exist: pass a YAML of options (recipes/configs/ holds them)"
                )
            config, sources = config_sources(found.config)
        return Command(found.config, config, sources, self.given_options(rest), rest)

    def given_options(self, args: Sequence[str]) -> dict:
        """The options ``args`` give, by name and as written, read with unconverting copies of this parser's options so
        that every spelling (``--a=b``, ``--a-b``, ``--no_a``) reads as in the parse."""
        reader = argparse.ArgumentParser(prog=self.prog, add_help=False, allow_abbrev=False, exit_on_error=False)
        for action in self._actions:
            if isinstance(action, argparse._HelpAction | HelpAllAction):
                action = argparse._StoreTrueAction(action.option_strings, dest="help")
            elif action.option_strings:
                action = copy.copy(action)
            else:
                continue
            action.default, action.required, action.type, action.choices = argparse.SUPPRESS, False, None, None
            reader._add_action(action)
        try:
            return vars(reader.parse_known_args(args)[0])
        except argparse.ArgumentError as error:
            self.error(str(error))

    def parse_args_and_config(self, args: Sequence[str] | None = None):
        """TRL's ``parse_args_and_config``, as ``parse_command(read_command(args))``."""
        return self.parse_command(self.read_command(args))

    def parse_command(self, command: Command, before: Sequence[str] = ()) -> tuple:
        """The dataclasses of a command line, its flags (after ``before``, those chosen for this machine) over its
        config; TRL's ``gradient_checkpointing*`` reach transformers under their new names, so that it warns about
        nothing."""
        config, sources = dict(command.config), command.sources
        actions = {a.dest: a for a in self._actions if a.option_strings and a.dest != argparse.SUPPRESS}
        known = list(actions)
        for key, value in config.items():
            if key != "env" and key not in known:
                raise ValueError(unknown_option_message(str(key), known, f"in {sources[key]}", self.module))
            if key != "env":
                check_config_value(key, value, actions[key], sources[key])
        for key, value in (config.pop("env", None) or {}).items():
            os.environ[key] = str(value)
        renamed = {old: new for old, new in RENAMED.items() if old in known and new in known}
        config = {renamed.get(k, k): v for k, v in config.items()}
        for old, new in renamed.items():  # TRL's default (True) under the new name, so that the old one stays unset
            config.setdefault(new, self.get_default(old))  # the option's own default, not its --no_ twin's (False)
        overridden = [a for a in self._actions if a.dest in config]
        saved = [(a.default, a.required) for a in overridden]
        try:  # the config's values are the defaults that flags override, for this parse only
            for action in overridden:
                action.default, action.required = config[action.dest], False
            namespace, remaining = self.parse_known_args([*before, *command.args])
        finally:  # a second command parsed by this parser starts from the options' own defaults
            for action, (default, required) in zip(overridden, saved, strict=True):
                action.default, action.required = default, required
        for old, new in renamed.items():  # a flag under TRL's name: its value under the new name, the old one unset
            if old in command.given:
                setattr(namespace, new, getattr(namespace, old))
                setattr(namespace, old, self.get_default(old))
        flags = [a for a in remaining if a.startswith("-")]
        if flags:
            flag = flags[0].lstrip("-").split("=", 1)[0]
            raise ValueError(unknown_option_message(f"--{flag}", known, "on the command line", self.module))
        if remaining:
            raise ValueError(
                f"unexpected value(s) {remaining} on the command line: give each option as --name value "
                f"({self.prog} --help lists them)"
            )
        check_max_steps([namespace])
        parsed = self.parts(vars(namespace))
        self.settle_tiny_model(parsed, command.given)
        return tuple(parsed)

    def parts(self, values: dict) -> list:
        """The parsed values as TRL's dataclasses (their own checks run here), or one namespace per dataclass when built
        from a table."""
        names = [self.script_fields, *(part_names for _, part_names in self.trl_parts)]  # the fields each one takes
        kinds = self.dataclass_types or [types.SimpleNamespace] * len(names)
        return [kind(**{n: values[n] for n in part if n in values}) for kind, part in zip(kinds, names, strict=True)]

    @staticmethod
    def settle_tiny_model(parsed: Sequence, given: Collection[str]) -> None:
        """``build_tiny_model`` switched off at a hub id, and refused where the command line moved the model path of a
        config that builds (``recipes.tiny_model.may_build_at``); ``parsed``: the recipe's options first, then TRL's
        config and ``ModelConfig``."""
        script, *_, model = parsed
        path = model.model_name_or_path
        if not script.build_tiny_model or not path or os.path.exists(path):
            return
        from recipes.tiny_model import may_build_at  # torch and transformers: only for a tiny model still to build

        script.build_tiny_model = may_build_at(path, "build_tiny_model" in given, "model_name_or_path" in given)


# -------------------------------------------------------------------------------------------------- the help screens
def shown_actions(parser: RecipeParser, name: str, short: bool) -> list[argparse.Action]:
    """Copies of the actions of field ``name`` with short value names (the summary drops ``--no_*`` twins)."""
    found = []
    for action in parser._actions:
        if action.dest != name or (short and isinstance(action, argparse._StoreFalseAction)):
            continue
        shown = copy.copy(action)
        shown.metavar = metavar(action)
        shown.option_strings = action.option_strings[:1]  # --name, not its --dashed-name twin as well
        if short and name in parser.common:
            shown.help = first_sentence(action.help).replace("%%", "%").replace("%", "%%")
        elif short:
            shown.help = first_clause(action.help)
        found.append(shown)
    return found


def leash_groups(parser: RecipeParser) -> list[tuple[str, list[str]]]:
    """The script arguments' fields by group title, in order; unnamed ones last."""
    names = parser.script_fields
    grouped = [(title, [n for n in members if n in names]) for title, members in parser.groups.items()]
    placed = {n for _, members in grouped for n in members}
    rest = [n for n in names if n not in placed]
    return [(title, members) for title, members in [*grouped, ("other options of the recipe", rest)] if members]


def help_screen(parser: RecipeParser, full: bool) -> argparse.ArgumentParser:
    """The parser whose help is the recipe's screen: the summary, or (``full``) every option by group."""
    shown = argparse.ArgumentParser(
        prog=parser.prog,
        usage=parser.usage,
        description=parser.doc if full else parser.description,
        formatter_class=RecipeHelpFormatter,
        add_help=False,
    )
    start = shown.add_argument_group("start here")
    start.add_argument(
        "--config", metavar="CONFIG.yaml", help="option: value lines (recipes/configs/); flags after it win"
    )
    start.add_argument("-h", "--help", action="store_true", help="this summary")
    start.add_argument("--help-all", action="store_true", help="every option, TRL's included")
    for title, names in leash_groups(parser):
        if title in parser.folded and not full:
            listed = ", ".join(f"--{name}" for name in names) + " (--help-all describes them)"
            shown.add_argument_group(title, textwrap.fill(listed, 74))  # argparse indents it by 2
            continue
        group = shown.add_argument_group(title)
        for name in names:
            for action in shown_actions(parser, name, short=not full):
                group._add_action(action)
    count = sum(len(names) for _, names in parser.trl_parts)
    pointer = f"{parser.prog} --help-all lists all {count} options of {trl_title(parser)}"
    pointer += f";\n{parser.docs} explains the recipe's own options" if parser.docs else ""
    if full:
        for kind, names in parser.trl_parts:
            group = shown.add_argument_group(f"TRL's {kind}")
            for name in names:
                for action in shown_actions(parser, name, short=False):
                    group._add_action(action)
    else:
        group = shown.add_argument_group(f"options of {trl_title(parser)} that runs often set")
        for name in parser.common:
            for action in shown_actions(parser, name, short=True):
                group._add_action(action)
        shown.epilog = pointer
    return shown


def trl_title(parser: RecipeParser) -> str:
    """``TRL's GRPOConfig and ModelConfig``."""
    return "TRL's " + " and ".join(name for name, _ in parser.trl_parts)


# --------------------------------------------------------------------------------------------------- the saved table
def string_to_bool(value):
    """TRL's ``string_to_bool`` (``trl.scripts._hf_argparser``), refusals worded the same, for a parser built from a
    table."""
    if isinstance(value, bool):
        return value
    if value.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if value.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {value} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


def _named(function: Callable, name: str) -> Callable:
    function.__name__ = name  # argparse names the type in its refusal ("invalid int value"), metavar() reads it
    return function


def _accepting_none(inner: Callable) -> Callable:
    return _named(lambda value: None if value.lower() in ("none", "null") else inner(value), inner.__name__)


def _choosing(choices: Sequence) -> Callable:
    by_text = {str(choice): choice for choice in choices}
    return lambda value: by_text.get(value, value)


BUILTIN_TYPES = {"int": int, "float": float, "str": str}


def type_spec(kind: Callable | None, choices) -> dict | None:
    """How a TRL option reads its value, as JSON; ``opaque`` for a type a table cannot rebuild (any text passes here,
    TRL's configs check it).

    >>> type_spec(int, None), type_spec(string_to_bool, None), type_spec(lambda v: v, ["a", "b"])
    ({'name': 'int'}, {'name': 'bool'}, {'name': 'choice'})
    >>> type_spec(dict, None)
    {'name': 'opaque', 'shown': 'dict'}
    """
    if kind is None:
        return None
    if kind in BUILTIN_TYPES.values():
        return {"name": kind.__name__}
    if kind.__name__ == "string_to_bool":
        return {"name": "bool"}
    if choices:
        return {"name": "choice"}
    if kind.__qualname__.endswith("_accept_none.<locals>.parse"):  # TRL's reader of ``X | None`` options
        inner = next((c.cell_contents for c in kind.__closure__ or () if callable(c.cell_contents)), None)
        if inner in BUILTIN_TYPES.values():
            return {"name": "none_or", "inner": inner.__name__}
    return {"name": "opaque", "shown": kind.__name__}


def type_from_spec(spec: dict | None, choices) -> Callable | None:
    if spec is None:
        return None
    name = spec["name"]
    if name in BUILTIN_TYPES:
        return BUILTIN_TYPES[name]
    if name == "bool":
        return string_to_bool
    if name == "choice":
        return _choosing(choices)
    if name == "none_or":
        return _accepting_none(BUILTIN_TYPES[spec["inner"]])
    return _named(lambda value: value, spec["shown"])


def as_json(value):
    """``value`` when JSON gives it back as it is; else the text the help shows for it (``str``)."""
    try:
        back = json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)
    return value if type(back) is type(value) and back == value else str(value)


STORED = {"store": argparse._StoreAction, "store_true": argparse._StoreTrueAction}
STORED |= {"store_false": argparse._StoreFalseAction}


def action_spec(action: argparse.Action) -> dict:
    """One option of the parser as JSON values (``action_from_spec`` rebuilds it); ValueError for a kind of option
    a table does not hold."""
    kind = next((name for name, cls in STORED.items() if type(action) is cls), None)
    if kind is None:
        raise ValueError(f"option {action.option_strings[0]}: a {type(action).__name__} cannot be saved in a table")
    choices = None if action.choices is None else list(action.choices)
    if choices is not None and as_json(choices) != choices:
        raise ValueError(f"option {action.option_strings[0]}: choices {choices} do not survive JSON")
    spec = {
        "kind": kind,
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "default": as_json(action.default),
        "required": action.required,
        "help": action.help,
    }
    if kind == "store":
        spec |= {"nargs": action.nargs, "const": as_json(action.const), "choices": choices}
        spec |= {"type": type_spec(action.type, choices), "metavar": action.metavar}
    return spec


def action_from_spec(spec: dict) -> argparse.Action:
    """The option ``action_spec`` described."""
    common = {k: spec[k] for k in ("option_strings", "dest", "default", "required", "help")}
    if spec["kind"] != "store":
        return STORED[spec["kind"]](**common)
    kind = type_from_spec(spec["type"], spec["choices"])
    return argparse._StoreAction(
        **common, nargs=spec["nargs"], const=spec["const"], choices=spec["choices"], type=kind, metavar=spec["metavar"]
    )


def table_of(parser: RecipeParser) -> dict:
    """Everything ``parser_from_table`` needs, as JSON values; ValueError for an option it could not rebuild."""
    layout = {
        "module": parser.module,
        "doc": parser.doc,
        "groups": parser.groups,
        "common": list(parser.common),
        "folded": list(parser.folded),
        "docs": parser.docs,
        "script_fields": parser.script_fields,
        "trl_parts": parser.trl_parts,
    }
    own = (argparse._HelpAction, HelpAllAction)
    actions = [action_spec(a) for a in parser._actions if a.option_strings and not isinstance(a, own)]
    return {"format": TABLE_FORMAT, "layout": layout, "actions": actions}


def parser_from_table(table: dict) -> RecipeParser:
    """The parser ``table_of`` describes, without TRL's configs: it prints the same help and refuses the same command
    lines in the same words; its ``parse_args_and_config`` returns one namespace per dataclass."""
    parser = RecipeParser(**table["layout"])
    for spec in table["actions"]:
        parser._add_action(action_from_spec(spec))
    return parser


PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"  # a shipped table's Python


def table_path(module: str) -> Path:
    """Where the table of ``module``'s options is saved, for this checkout."""
    caches = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    leash = Path(os.environ.get("LEASH_CACHE_DIR") or caches / "leash")
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    return leash / "options" / f"{module}-{checkout}.json"


def _own(path: Path) -> bool:
    """Whether ``path`` is one of leash's files: in the checkout, not in a hidden folder (.venv) nor a site-packages."""
    if not path.is_relative_to(ROOT):
        return False
    relative = path.relative_to(ROOT)
    return not relative.parts[0].startswith(".") and "site-packages" not in relative.parts


def table_sources(parser: RecipeParser, module: str | None = None) -> list[Path]:
    """The files a parser's options are written in: the recipe, this module, ``recipes/common.py`` and the config
    dataclasses' modules. A constant elsewhere that a default reads is not followed:
    ``tests/recipes/test_option_tables.py`` catches such a change instead of a user's command."""
    import inspect

    found = {Path(__file__).resolve(), (ROOT / "recipes" / "common.py").resolve()}
    recipe = sys.modules.get(module) if module else None
    if recipe is not None and getattr(recipe, "__file__", None):
        found.add(Path(recipe.__file__).resolve())
    for kind in parser.dataclass_types or ():
        for base in kind.__mro__[:-1]:
            with_source = inspect.getsourcefile(base)
            if with_source and os.path.isabs(with_source):
                found.add(Path(with_source).resolve())
    return sorted(found)


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _distributions() -> dict[str, metadata.Distribution | None]:
    found = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _versions(distributions: dict[str, metadata.Distribution | None] | None = None) -> dict[str, str | None]:
    """The installed versions of ``VERSIONED`` without a build's local label: torch's CPU and CUDA builds define the
    same options."""
    distributions = _distributions() if distributions is None else distributions
    return {name: found.version.split("+")[0] if found else None for name, found in distributions.items()}


def save_table(module: str, parser: RecipeParser, sources: Sequence[Path] | None = None) -> Path | None:
    """Saves ``table_of(parser)`` for ``module`` in the cache, keyed by the Python, the library versions and the
    contents of ``sources``; None when it cannot, which costs the next command only its speed."""
    try:
        table = table_of(parser)
    except ValueError:
        return None
    files = sources if sources is not None else table_sources(parser, module)
    key = {"python": sys.version, "versions": _versions(), "sources": {str(p): _digest(Path(p)) for p in files}}
    try:
        path = table_path(module)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"key": key, "table": table}))
        os.replace(temporary, path)  # whole or not at all, whatever another process writes beside it
    except (OSError, RuntimeError):  # RuntimeError: no home folder to find
        return None
    return path


def saved_parser(module: str) -> RecipeParser | None:
    """The parser of ``module`` from the cache's table while that still describes this checkout and these libraries;
    else None."""
    try:
        saved = json.loads(table_path(module).read_text())
        key, table = saved["key"], saved["table"]
        if key["python"] != sys.version or key["versions"] != _versions() or table["format"] != TABLE_FORMAT:
            return None
        if any(_digest(Path(path)) != digest for path, digest in key["sources"].items()):
            return None
        return parser_from_table(table)
    except Exception:  # a table that cannot be read, whatever is wrong with it, costs the command only its speed
        return None


def table_parser(module: str) -> RecipeParser | None:
    """The parser of ``module`` from the cache's table, else from the one leash ships; None when neither is current."""
    saved = saved_parser(module)
    return saved if saved is not None else shipped_parser(module)


# ------------------------------------------------------------------------------------------------ the shipped tables
def shipped_table_path(module: str) -> Path:
    """The table of ``module``'s options that leash ships (``write_tables`` writes it)."""
    return SHIPPED / f"{module}.json"


def pinned_versions() -> dict[str, str | None]:
    """The versions of ``VERSIONED`` that requirements.txt pins: those the shipped tables are made with."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, _, version = line.split("#")[0].partition("==")
        pins[name.strip().lower()] = version.strip()
    return {name: pins.get(name) for name in VERSIONED}


def _library_file(path: Path, distributions: dict) -> tuple[str, str]:
    """The library of ``VERSIONED`` that installed ``path``, and the path of the file inside its installation."""
    for name, found in distributions.items():
        base = Path(found.locate_file("")).resolve() if found else None
        if base and path.is_relative_to(base) and path.relative_to(base).as_posix() in map(str, found.files or ()):
            return name, path.relative_to(base).as_posix()
    raise ValueError(f"{path}: a source of the options from a library other than {', '.join(VERSIONED)}: add it there")


def shipped_key(sources: Sequence[Path]) -> dict:
    """A shipped table's key: the Python's version (the options come from the configs' type hints, which Python reads),
    those of ``VERSIONED`` and the digests of ``sources`` by their path in the checkout or the library, so that it holds
    wherever leash and its libraries are installed."""
    distributions = _distributions()
    own, libraries = {}, {}
    for path in sorted(Path(p).resolve() for p in sources):
        if _own(path):
            own[path.relative_to(ROOT).as_posix()] = _digest(path)
        else:
            name, inside = _library_file(path, distributions)
            libraries.setdefault(name, {})[inside] = _digest(path)
    return {"python": PYTHON, "versions": _versions(distributions), "sources": own, "libraries": libraries}


def changed_sources(key: dict) -> list[str]:
    """The files of leash in a shipped table's ``key`` whose contents changed since the table was written."""
    return [path for path, digest in key["sources"].items() if _digest(ROOT / path) != digest]


def stale_parts(key: dict) -> list[str]:
    """What no longer holds of a shipped table's ``key``, one phrase each (``recipes/grpo.py changed``); empty while the
    table is current."""
    distributions = _distributions()
    versions = _versions(distributions)
    stale = [] if key["python"] == PYTHON else [f"made with Python {key['python']}, not {PYTHON}"]
    made = key["versions"]
    stale += [
        f"made with {name} {made.get(name)}, not {versions[name]}"
        for name in VERSIONED
        if made.get(name) != versions[name]
    ]
    stale += [f"{path} changed" for path in changed_sources(key)]
    for name, files in key["libraries"].items():
        found = distributions.get(name)
        for inside, digest in files.items():
            if found is None or _digest(Path(found.locate_file(inside))) != digest:
                stale.append(f"{name}'s {inside} changed")
    return stale


def shipped_parser(module: str) -> RecipeParser | None:
    """The parser of ``module`` from the table leash ships, while ``stale_parts`` finds nothing; else None."""
    try:
        shipped = json.loads(shipped_table_path(module).read_text())
        if shipped["table"]["format"] != TABLE_FORMAT or stale_parts(shipped["key"]):
            return None
        return parser_from_table(shipped["table"])
    except Exception:  # a table that cannot be read, whatever is wrong with it, costs the command only its speed
        return None


def write_table(module: str, folder: Path | str = SHIPPED) -> Path:
    """Writes the table of recipe ``module``'s options, with its shipped key, into ``folder``; run in a process that
    imported nothing else of leash, so that the key names just the files the recipe's command loads."""
    made = importlib.import_module(module).make_parser()
    key, path = shipped_key(table_sources(made, module)), Path(folder) / f"{module}.json"
    path.write_text(json.dumps({"key": key, "table": table_of(made)}, indent=1) + "\n")
    if stale_parts(key):  # a file changed while the table was made
        raise RuntimeError(f"{path}: {', '.join(stale_parts(key))} while it was written: run {WRITE_TABLES} again")
    return path


def write_tables(folder: Path | str = SHIPPED, modules: Sequence[str] = RECIPES) -> list[Path]:
    """Writes the tables of ``modules``, each in a process of its own, with the library versions requirements.txt pins
    (``make venv`` installs them)."""
    pins, installed = pinned_versions(), _versions()
    if installed != pins:
        raise ValueError(f"the shipped tables are made with requirements.txt's versions {pins}, not {installed}")
    Path(folder).mkdir(parents=True, exist_ok=True)
    for module in modules:
        code = f"from recipes.parser import write_table; write_table({module!r}, {str(folder)!r})"
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    return [Path(folder) / f"{module}.json" for module in modules]


def main() -> None:
    cli = argparse.ArgumentParser(
        prog="python -m recipes.parser",
        description="The tables of the recipes' options that leash ships: --help and the options a recipe's parser "
        "refuses are answered from them before torch, transformers or TRL load.",
    )
    cli.add_argument(
        "--write-tables",
        action="store_true",
        help=f"write recipes/options/<recipe>.json for {', '.join(RECIPES)} from TRL's configs and this checkout "
        "(with the library versions requirements.txt pins)",
    )
    if not cli.parse_args().write_tables:
        cli.error("nothing to do: --write-tables writes the tables")
    try:
        written = write_tables()
    except (ValueError, subprocess.CalledProcessError) as error:
        sys.exit(f"error: {error}")
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
