"""A settings dataclass on a lab's command line: its fields become flags and the parsed flags build it back, so each
setting is declared once, in the dataclass.

``--eval-every`` for ``eval_every`` (``sep="_"`` keeps the underscore); a bool that defaults to True becomes
``--no-name``; a field with no default is a required flag. Only the standard library is imported, so ``--help`` stays
free of torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence

NEGATED = "no_"  # the namespace's name of a ``--no-name`` switch: no_<field>


def add_fields(parser, cls: type, names: Sequence[str], sep: str = "-") -> None:
    """Add the fields ``names`` of the dataclass ``cls`` to ``parser`` (or an argument group), in that order.

    >>> @dataclasses.dataclass
    ... class Run:
    ...     steps: int = dataclasses.field(default=60, metadata={"help": "GRPO steps per run"})
    ...     seeds: list[int] = dataclasses.field(default_factory=lambda: [0, 1], metadata={"help": "seeds"})
    ...     control: bool = dataclasses.field(default=True, metadata={"help": "leave out the control arm"})
    >>> parser = argparse.ArgumentParser(prog="run")
    >>> add_fields(parser, Run, ["steps", "seeds", "control"])
    >>> print(parser.format_usage().strip())
    usage: run [-h] [--steps STEPS] [--seeds SEEDS [SEEDS ...]] [--no-control]
    >>> from_args(Run, parser.parse_args(["--seeds", "3", "4", "--no-control"]))
    Run(steps=60, seeds=[3, 4], control=False)
    """
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for name in names:
        if name not in known:
            raise ValueError(f"{cls.__name__} has no field {name!r}: its fields are {sorted(known)}")
        flag, options = _flag(known[name], hints[name], sep, cls.__name__)
        parser.add_argument(flag, **options)


def from_args(cls: type, args: argparse.Namespace, **values):
    """The dataclass ``cls`` from the parsed ``args`` and ``values``; fields in neither keep their defaults."""
    for f in dataclasses.fields(cls):
        if not f.init or f.name in values:
            continue
        if hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
        elif hasattr(args, NEGATED + f.name):
            values[f.name] = not getattr(args, NEGATED + f.name)
    return cls(**values)


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _flag(f: dataclasses.Field, hint, sep: str, owner: str) -> tuple[str, dict]:
    """(the flag, ``add_argument``'s keywords) of one field."""
    default, help_text = _default(f), f.metadata.get("help")
    flag = "--" + f.name.replace("_", sep)
    if hint is bool:
        if default is True:  # stored as no_<name>, so that --help gives the switch's own default, False
            return "--" + (NEGATED + f.name).replace("_", sep), {
                "action": "store_true",
                "dest": NEGATED + f.name,
                "help": help_text,
            }
        return flag, {"action": "store_true", "help": help_text}
    options = {"help": help_text}
    if default is dataclasses.MISSING:
        options["required"] = True
    else:
        options["default"] = default
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and len(args) == 1 and args[0] in (int, float, str):
        return flag, {**options, "type": args[0], "nargs": "+"}
    if origin is typing.Literal:
        return flag, {**options, "type": type(args[0]), "choices": list(args)}
    if hint in (int, float, str):
        return flag, {**options, "type": hint}
    raise TypeError(
        f"{owner}.{f.name}: a field of type {hint} has no flag; give it int, float, str, bool, X | None, list[X] or a "
        "Literal, or set it in code"
    )
