"""Every command the docs show runs as written, as far as its parser can tell without doing the work.

The commands come from everywhere a user copies one: README.md, CONTRIBUTING.md, docs/*.md, tests/data/README.md
(fenced blocks and inline code), the header comments of every config under ``recipes/configs/`` and the docstrings of
the repository's modules. For each ``python -m MODULE ...`` (or ``accelerate launch ... -m MODULE ...``) of a module
of this repository, the test builds that module's argument parser in this process without running the module's work
(a recipe's ``make_parser()``, or ``main()`` stopped at its first ``parse_args``) and checks that every ``--flag`` the
command passes is an option of that parser (of the subcommand's parser after a subcommand such as ``eval run``; of
the recipe's after ``cpu_lab.matrix ... --``; an abbreviation argparse would accept counts as unknown: a doc shows
the whole flag), that the subcommand exists, and that every file of the repository the command names (a
``--config``, an accelerate ``--config_file``, a test file) exists; placeholders (``<config>``, ``DIR``, ``runs/X``)
get the flag check only. Each ``make TARGET`` names a target of the Makefile, each ``bash FILE`` an existing script,
and a ``python -m`` of another project a module installed here or pinned in a requirements file. The parsers' help
has no doctest lines. The checks read the parsers' actions, not their help text.

The README, the page a user copies from first, is held to more: each module it runs answers ``python -m X --help``
(and ``X SUBCOMMAND --help``) with status 0 in a fresh process, whose help names every ``--flag`` the README passes;
each ``make T`` it shows dry-runs (``make -n T``); every repository path it names, in a command or in prose, exists,
and none climbs out of the checkout. Every Markdown link in README.md, CONTRIBUTING.md, CHANGELOG.md and docs/*.md
resolves, anchors included. The ``--help`` calls run in one subprocess (``runpy``, each module once), so TRL is
imported once.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rewards", "eval", "training_data", "recipes", "cpu_lab", "judge_lab", "reward_model_lab", "bench")
DOC_PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "tests" / "data" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
CONFIGS = sorted((ROOT / "recipes" / "configs").rglob("*.y*ml"))
SOURCES = sorted(p for package in (*PACKAGES, "tests") for p in (ROOT / package).rglob("*.py"))
PYTHON = r"(?:python3?|\.venv/bin/python3?)"
COMMAND_START = re.compile(rf"(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:{PYTHON} -m \w|make\b|accelerate launch |bash \S)")
ALTERNATIVES = "\N{BROKEN BAR}"  # `eval run\|score` in a Markdown table cell: either subcommand
ANGLED = "\u2039{}\u203a"  # `<grpo config>` read as the one word `\u2039grpo_config\u203a`, not as redirections
PLACEHOLDER = re.compile(r"[<>{}\[\]*$\u2039]|\.\.\.|(?:^|/)[A-Z][A-Z0-9_]*(?:/|$|\.(?!md$))")
# files a command creates: their folder may be in the repository, the file itself need not be
OUTPUT_FLAGS = ("--out", "--output", "--output_dir", "--save", "--report")
CONFIG_FLAGS = ("--config", "--config_file")  # their value is a file of the checkout


@dataclass(frozen=True)
class Command:
    where: str  # file:line the command was read from
    tokens: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: `{' '.join(self.tokens)}`"


# Reading commands out of text


def strip_comment(line: str) -> str:
    """The line without its shell comment: a `#` at the start or after a blank, outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def simple_commands(line: str) -> list[list[str]]:
    """One shell line -> its simple commands as token lists (split on ;, &&, ||, |; redirections dropped).

    A placeholder in angle brackets (``<grpo config>``) is one word (``ANGLED``), not two redirections.
    """
    line = re.sub(r"<([^<>\n]+)>", lambda m: ANGLED.format("_".join(m.group(1).split())), strip_comment(line))
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";|&<>")
        lexer.whitespace_split, lexer.commenters = True, ""
        tokens = list(lexer)
    except ValueError:  # an apostrophe in prose: no quoting to honour
        tokens = line.split()
    commands, current, redirect = [], [], False
    for token in tokens:
        if set(token) <= set(";|&"):
            commands.append(current)
            current, redirect = [], False
        elif set(token) <= set("<>"):
            redirect = True  # the next word is a file to read or write, not an argument
        elif redirect:
            redirect = False
        else:
            current.append(token)
    commands.append(current)
    return [c for c in commands if c]


def join_continuations(lines: list[str]) -> list[tuple[int, str]]:
    """(index of first line, logical line): a line ending in a backslash continues on the next."""
    joined, start, parts = [], None, []
    for i, line in enumerate(lines):
        start = i if start is None else start
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        joined.append((start, " ".join(p.strip() for p in parts)))
        start, parts = None, []
    if parts:
        joined.append((start, " ".join(p.strip() for p in parts)))
    return joined


def commands_in_lines(lines: list[str], first_line: int, where: str) -> list[Command]:
    """Commands that start a line (after a `$ ` prompt or an opening parenthesis), continuations joined.

    A command inside parentheses ends at the closing one: ``(python -m recipes.memory CONFIG; docs/gpu.md)``.
    """
    found = []
    for i, line in join_continuations(lines):
        text = line.strip().removeprefix("$ ")
        if text.startswith("(") and COMMAND_START.match(text[1:]):
            pieces = [text[1:].split(")")[0]]
        elif COMMAND_START.match(text):
            pieces = [text]
        else:  # a command in parentheses within a sentence
            pieces = re.findall(rf"\(((?:{PYTHON} -m |make |bash )[^)]*)\)", line)
        commands = [c for piece in pieces for c in simple_commands(piece) if COMMAND_START.match(shlex.join(c))]
        found += [Command(f"{where}:{first_line + i}", tuple(c)) for c in commands]
    return found


def inline_commands(text: str, first_line: int, where: str) -> list[Command]:
    """Commands in inline code (`x` in Markdown, ``x`` in reStructuredText) that start with a command."""
    found = []
    for match in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, flags=re.S):
        code = " ".join(match.group(2).split()).replace("\\|", ALTERNATIVES)
        if COMMAND_START.match(code):
            line = first_line + text.count("\n", 0, match.start())
            found += [Command(f"{where}:{line}", tuple(c)) for c in simple_commands(code)]
    return found


def markdown_commands(page: Path) -> list[Command]:
    where = str(page.relative_to(ROOT))
    lines = page.read_text(encoding="utf-8").splitlines()
    found, prose, block, language, start = [], [], None, "", 0
    for number, line in enumerate(lines, start=1):
        fence = line.lstrip().startswith("```")
        if fence and block is None:
            block, language, start = [], line.lstrip()[3:].strip(), number + 1
        elif fence:
            found += commands_in_lines(block, start, where) if language != "python" else []
            block = None
        elif block is not None:
            block.append(line)
        prose.append("" if fence or block is not None else line)
    found += inline_commands("\n".join(prose), 1, where)
    return found


def config_commands(config: Path) -> list[Command]:
    """The commands of a config's header: its comment lines before the first key."""
    lines = []
    for line in config.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            break
        lines.append(line[1:] if line.startswith("#") else line)
    where = str(config.relative_to(ROOT))
    return commands_in_lines(lines, 1, where) + inline_commands("\n".join(lines), 1, where)


def docstring_commands(source: Path) -> list[Command]:
    """The commands in the docstrings of a module: literal lines, and inline ``code`` that starts with one.

    Every docstring of a package's module; of a test module, the module's own (how to run it), not its helpers'.
    """
    where = str(source.relative_to(ROOT))
    kinds = (ast.Module,) if where.startswith("tests/") else (ast.Module, ast.ClassDef, ast.FunctionDef)
    found = []
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if not isinstance(node, kinds):
            continue
        body = node.body[:1]
        if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)):
            continue
        text = body[0].value.value
        if not isinstance(text, str):
            continue
        first = body[0].lineno  # close enough: the docstring's first line
        lines = [line for line in text.splitlines() if not line.lstrip().startswith((">>>", "..."))]
        found += commands_in_lines(lines, first, where) + inline_commands(text, first, where)
    return found


def all_commands() -> list[Command]:
    found = [c for page in DOC_PAGES if page.exists() for c in markdown_commands(page)]
    found += [c for config in CONFIGS for c in config_commands(config)]
    found += [c for source in SOURCES for c in docstring_commands(source)]
    return found


# What a command calls


def without_prefix(tokens: tuple[str, ...]) -> list[str]:
    """Drop leading VAR=value assignments and `time`/`nohup`."""
    tokens = list(tokens)
    while tokens and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]) or tokens[0] in ("time", "nohup")):
        tokens.pop(0)
    return tokens


def module_call(tokens: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """`python -m X args`, `python -m cProfile ... -m X args` or `accelerate launch ... -m X args` -> (X, args)."""
    words = without_prefix(tokens)
    if len(words) >= 3 and re.fullmatch(PYTHON, words[0]) and words[1] == "-m":
        if words[2] in ("cProfile", "pdb", "trace") and "-m" in words[3:-1]:  # a tool that runs the module
            i = words.index("-m", 3)
            return words[i + 1], words[i + 2 :]
        return words[2], words[3:]
    if words[:2] == ["accelerate", "launch"] and "-m" in words[:-1]:
        i = words.index("-m")
        return words[i + 1], words[i + 2 :]
    return None


@functools.cache
def pinned_modules() -> set[str]:
    """Import names of the packages the requirements files pin (`lm-eval` -> `lm_eval`): a doc may run them."""
    names = set()
    for requirements in ROOT.glob("requirements*.txt"):
        for line in requirements.read_text(encoding="utf-8").splitlines():
            if match := re.match(r"([A-Za-z0-9_.-]+)\s*[=<>~]", line):
                names.add(match.group(1).lower().replace("-", "_"))
    return names


def known_module(name: str) -> bool:
    """Whether `python -m name` can run here or after installing a pinned requirement (or the standard library's)."""
    top = name.split(".")[0]
    return top in pinned_modules() or top in sys.stdlib_module_names or importlib.util.find_spec(top) is not None


def is_placeholder(word: str) -> bool:
    return bool(PLACEHOLDER.search(word)) or ALTERNATIVES in word


def repo_files(tokens: tuple[str, ...]) -> list[str]:
    """The files of the repository a command reads: words whose first folder is a tracked one of the checkout.

    Output paths (the value after --out, --save, ...) are left out: a command creates them. The value of --config
    and --config_file is a file of the checkout wherever it points.
    """
    tracked = (*PACKAGES, "tests", "docs", ".ci")
    files, flag = [], None
    for token in without_prefix(tokens):
        if token.startswith("--"):
            flag, _, value = token.partition("=")
            if not value:
                continue
            token = value
        if flag not in OUTPUT_FLAGS and not is_placeholder(token):
            path = token.split("::")[0]  # tests/rewards/test_x.py::test_name names the file
            if flag in CONFIG_FLAGS or ("/" in path and path.split("/")[0] in tracked):
                files.append(path)
        flag = None
    return files


# Parsers, built without running a module's work


class _Parsed(Exception):
    """Raised by the patched ``parse_known_args``: the first parser a module's ``main()`` asks to parse."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _stop_at_parse(self, args=None, namespace=None):
    raise _Parsed(self)


@functools.cache
def parser_of(module_name: str) -> argparse.ArgumentParser | None:
    """The argument parser `python -m module_name` parses its command line with; None if it parses none.

    A module with ``make_parser()`` (the recipes, ``eval``) gives it; another's ``main()`` runs up to its first parse,
    which raises before reading an argument. A module that never builds an ``ArgumentParser`` is not run at all.
    """
    spec = importlib.util.find_spec(module_name)
    assert spec is not None, f"no module {module_name}"
    if spec.submodule_search_locations:  # a package: `python -m eval` runs eval/__main__.py
        module_name += ".__main__"
    module = importlib.import_module(module_name)
    if callable(getattr(module, "make_parser", None)):
        return module.make_parser()
    source = Path(module.__file__).read_text(encoding="utf-8")
    if "ArgumentParser(" not in source or not callable(getattr(module, "main", None)):
        return None
    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", _stop_at_parse):
        try:
            module.main()
        except _Parsed as parsed:
            return parsed.parser
    raise AssertionError(f"{module_name}.main() returned without parsing its arguments")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }


def reads_config_itself(parser: argparse.ArgumentParser) -> bool:
    """TRL's parser takes --config in ``parse_args_and_config``, not as one of its options."""
    return callable(getattr(parser, "parse_args_and_config", None))


def is_option(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-[\d.]+(e-?\d+)?", word)


def values_after(action: argparse.Action | None, rest: list[str]) -> int:
    """How many of the words that follow an option are its values (an unknown option: the words up to the next)."""
    nargs = action.nargs if action is not None else "*"
    if isinstance(nargs, int):
        return nargs
    if nargs is None:
        return 1
    count = 0
    while count < len(rest) and not is_option(rest[count]) and rest[count] != "--":
        count += 1
    return min(count, 1) if nargs == "?" else count


def unknown_flags(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """The options in args that the parser (or, after a subcommand, the subcommand's parser) does not have.

    Stops at a bare ``--`` (what follows goes to another program). Raises LookupError for a subcommand the parser
    does not know.
    """
    unknown, i, subs = [], 0, subparsers(parser)
    while i < len(args) and args[i] != "--":
        arg = args[i]
        i += 1
        if is_option(arg):
            flag, has_value, _ = arg.partition("=")
            action = parser._option_string_actions.get(flag)
            if action is None and not (flag == "--config" and reads_config_itself(parser)):
                unknown.append(flag)
            i += 0 if has_value else values_after(action, args[i:])
        elif subs:
            names = arg.split(ALTERNATIVES)
            missing = [n for n in names if n not in subs]
            if missing:
                raise LookupError(f"no subcommand {missing[0]!r}: it has {sorted(subs)}")
            return unknown + [f for name in names for f in unknown_flags(subs[name], args[i:])]
    return unknown


def forwarded_calls(module: str, args: list[str]) -> list[tuple[str, list[str]]]:
    """The recipe calls a command makes with the flags after its ``--``: `cpu_lab.matrix --configs A B -- FLAGS`
    runs each config's recipe with FLAGS (``--losses`` configs are GRPO ones)."""
    if module != "cpu_lab.matrix" or "--" not in args:
        return []
    from cpu_lab.matrix import recipe_for

    ours, theirs = args[: args.index("--")], args[args.index("--") + 1 :]
    recipes, option = set(), None
    for word in ours:
        option = word if is_option(word) else option
        if option == "--configs" and not is_option(word) and not is_placeholder(word):
            recipes.add(recipe_for(word))
        elif option == "--losses" and not is_option(word):
            recipes.add("recipes.grpo")
    return [(recipe, theirs) for recipe in sorted(recipes or {"recipes.grpo"})]


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set()
    for names in re.findall(r"^([^\s#:=][^:=]*?)\s*::?(?!=)", text, flags=re.M):
        targets.update(names.split())
    return targets


COMMANDS = all_commands()
CALLS = [(c, call) for c in COMMANDS if (call := module_call(c.tokens)) and not is_placeholder(call[0])]
MODULE_CALLS = [(c, call) for c, call in CALLS if call[0].split(".")[0] in PACKAGES]
OTHER_CALLS = [(c, call) for c, call in CALLS if call[0].split(".")[0] not in PACKAGES]
MAKE_CALLS = [c for c in COMMANDS if without_prefix(c.tokens)[:1] == ["make"]]
BASH_CALLS = [c for c in COMMANDS if without_prefix(c.tokens)[:1] == ["bash"]]
FILE_CALLS = [(c, path) for c in COMMANDS for path in repo_files(c.tokens)]


def test_the_docs_have_commands_from_every_kind_of_source():
    wheres = {c.where.split(":")[0] for c, _ in MODULE_CALLS}
    assert "README.md" in wheres and any(w.startswith("docs/") for w in wheres)
    assert any(w.startswith("recipes/configs/") for w in wheres), "no config header command found"
    assert any(w.endswith(".py") for w in wheres), "no docstring command found"
    assert len(MODULE_CALLS) > 100 and len(MAKE_CALLS) >= 5, (len(MODULE_CALLS), len(MAKE_CALLS))
    assert len(README_CALLS) >= 8 and len(README_MAKE_CALLS) >= 4, (README_CALLS, README_MAKE_CALLS)


@pytest.mark.parametrize("command, call", MODULE_CALLS, ids=[str(c)[:120] for c, _ in MODULE_CALLS])
def test_a_python_command_passes_only_flags_its_module_has(command, call):
    module, args = call
    assert importlib.util.find_spec(module) is not None, f"{command}: there is no module {module}"
    parser = parser_of(module)
    if parser is None:
        assert not args, f"{command}: {module} takes no arguments"
        return
    try:
        unknown = unknown_flags(parser, args)
    except LookupError as error:
        pytest.fail(f"{command}: python -m {module}: {error}")
    assert not unknown, f"{command}: python -m {module} has no option {', '.join(unknown)}"
    for recipe, forwarded in forwarded_calls(module, args):
        unknown = unknown_flags(parser_of(recipe), forwarded)
        assert not unknown, f"{command}: python -m {recipe} (after `--`) has no option {', '.join(unknown)}"


@pytest.mark.parametrize("command, call", OTHER_CALLS, ids=[str(c)[:120] for c, _ in OTHER_CALLS])
def test_a_python_command_of_another_project_names_a_module_that_exists(command, call):
    # `python -m recipe.grpo` (a typo) is no package of the checkout: it must still be a module that exists
    assert known_module(call[0]), f"{command}: there is no module {call[0]} here or in requirements*.txt"


@pytest.mark.parametrize("command", MAKE_CALLS, ids=[str(c)[:120] for c in MAKE_CALLS])
def test_a_make_command_names_a_target_of_the_makefile(command):
    words = without_prefix(command.tokens)[1:]
    targets = [w for w in words if not w.startswith("-") and "=" not in w and not is_placeholder(w)]
    missing = [t for t in targets if t not in makefile_targets()]
    assert not missing, f"{command}: the Makefile has no target {', '.join(missing)}"


@pytest.mark.parametrize("command", BASH_CALLS, ids=[str(c)[:120] for c in BASH_CALLS])
def test_a_bash_command_runs_a_script_that_exists(command):
    script = without_prefix(command.tokens)[1]
    assert is_placeholder(script) or (ROOT / script).is_file(), f"{command}: {script} does not exist"


@pytest.mark.parametrize("command, path", FILE_CALLS, ids=[f"{c.where} {p}"[:120] for c, p in FILE_CALLS])
def test_a_file_a_command_reads_exists(command, path):
    assert (ROOT / path).exists(), f"{command}: {path} does not exist"


@pytest.mark.parametrize("module", sorted({m for _, (m, _) in MODULE_CALLS}))
def test_a_modules_help_has_no_doctest_lines(module):
    parser = parser_of(module)
    if parser is None:
        return
    for sub in (parser, *subparsers(parser).values()):
        doctest_lines = [line for line in sub.format_help().splitlines() if line.lstrip().startswith(">>>")]
        assert not doctest_lines, f"`python -m {module} --help` prints doctest lines: {doctest_lines[:2]}"


def test_the_docs_count_the_gpu_configs_the_slow_tier_runs():
    # "each of the N shipped GPU configs ran one step": a config added or removed makes N stale until the docs (and
    # the run behind them) follow
    from tests.recipes.test_real_model_configs import GPU_CONFIGS

    n_gpu_configs = sum("lab_long" not in p.parts for p in GPU_CONFIGS)  # lab_long: a CPU lab that runs there too
    claims = [
        (str(page.relative_to(ROOT)), int(count))
        for page in DOC_PAGES
        if page.exists()
        for count in re.findall(r"(\d+) (?:shipped )?GPU configs", page.read_text(encoding="utf-8"))
    ]
    assert claims, "no page counts the GPU configs"
    assert all(count == n_gpu_configs for _, count in claims), (n_gpu_configs, claims)


# The README: its modules answer --help in a fresh process, its make targets dry-run, the paths it names exist; the
# docs' Markdown links resolve

README = ROOT / "README.md"
LINKED_PAGES = [README, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
REPO_DIRS = (*PACKAGES, "docs", "tests", ".ci")
TOP_FILES = re.compile(r"(requirements[\w-]*\.txt|pyproject\.toml|Makefile|LICENSE|CHANGELOG\.md|CONTRIBUTING\.md)")
README_COMMANDS = [c for c in COMMANDS if c.where.startswith("README.md:")]
README_CALLS = [(c, call) for c, call in CALLS if c.where.startswith("README.md:")]
README_MAKE_CALLS = [c for c in MAKE_CALLS if c.where.startswith("README.md:")]


def subcommand(args: list[str]) -> list[str]:
    """The candidate subcommands: a bare first word (`run`, or `run¦score¦compare`)."""
    if args and re.fullmatch(rf"[a-z_]+(?:{ALTERNATIVES}[a-z_]+)*", args[0]):
        return args[0].split(ALTERNATIVES)
    return []


def flags(args: list[str]) -> set[str]:
    """The --flags passed, up to a bare `--` (what follows goes to another program)."""
    found = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            found.add(arg.split("=", 1)[0])
    return found


HELP_RUNNER = r"""
import contextlib, importlib, io, json, runpy, sys
results = []
for module, argv in json.loads(sys.argv[1]):
    out, code = io.StringIO(), "returned without exiting: does it parse its arguments?"
    sys.argv = [module, *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else str(exit.code))
    except BaseException as error:
        code = f"{type(error).__name__}: {error}"
    takes_config = False  # TRL's parser reads --config itself, so its help does not list it
    with contextlib.suppress(Exception), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        factory, trl = getattr(importlib.import_module(module), "make_parser", None), sys.modules.get("trl")
        takes_config = bool(factory and trl and isinstance(factory(), trl.TrlParser))
    results.append([module, argv, code, out.getvalue(), takes_config])
sys.__stdout__.write("\nREADME-HELP " + json.dumps(results) + "\n")
"""


@pytest.fixture(scope="module")
def help_texts() -> dict[tuple[str, ...], tuple[object, str, bool]]:
    """`--help` of every module (and subcommand) the README calls, each once, in one subprocess."""
    wanted = []
    for _, (module, args) in README_CALLS:
        wanted.append((module, ["--help"]))
        wanted += [(module, [sub, "--help"]) for sub in subcommand(args)]
    wanted = [list(w) for w in dict.fromkeys((m, tuple(a)) for m, a in wanted)]
    proc = subprocess.run(
        [sys.executable, "-c", HELP_RUNNER, json.dumps(wanted)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("README-HELP ")), None)
    assert line, f"the --help runner failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    results = json.loads(line[len("README-HELP ") :])
    return {(module, *argv): (code, text, takes_config) for module, argv, code, text, takes_config in results}


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize("command, call", README_CALLS, ids=[str(c)[:120] for c, _ in README_CALLS])
def test_a_readme_module_answers_help_that_names_its_flags(command, call, help_texts):
    module, args = call
    code, text, takes_config = help_texts[(module, "--help")]
    assert code == 0, f"`python -m {module} --help` failed ({code}):\n{text[-1500:]}"
    subs = subcommand(args)
    choices = re.search(r"\{([\w,]+)\}", text)
    helps = [text]
    if subs and choices and subs[0] in choices.group(1).split(","):
        helps = []
        for sub in subs:
            sub_code, sub_text, _ = help_texts[(module, sub, "--help")]
            assert sub_code == 0, f"`python -m {module} {sub} --help` failed ({sub_code}):\n{sub_text[-1500:]}"
            helps.append(sub_text)
    elif subs and choices:
        pytest.fail(f"`python -m {module}` has no subcommand {subs[0]!r}: it knows {{{choices.group(1)}}}")
    for flag in sorted(flags(args) - ({"--config"} if takes_config else set())):
        for help_text in helps:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (
                f"`python -m {module}` does not know {flag} ({command})"
            )


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize("command", README_MAKE_CALLS, ids=[str(c)[:120] for c in README_MAKE_CALLS])
def test_a_readme_make_command_dry_runs(command):
    words = without_prefix(command.tokens)[1:]
    targets = [w for w in words if not w.startswith("-") and "=" not in w]
    assignments = [w for w in words if "=" in w]
    for target in targets:
        proc = subprocess.run(["make", "-n", target, *assignments], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, f"`make {target}`: {proc.stderr.strip()[-500:]}"


def is_repo_path(word: str) -> bool:
    if any(char in word for char in "<>*{}$\u2039"):
        return False
    return word.split("/")[0] in REPO_DIRS and "/" in word or bool(TOP_FILES.fullmatch(word))


def repo_paths(tokens: tuple[str, ...]) -> list[str]:
    """Tokens (and the words of VAR=value assignments) that name a file or folder of the repository."""
    words = []
    for token in tokens:
        value = token.split("=", 1)[1] if re.fullmatch(r"[A-Z_]+=.*", token) else token
        words += value.split()
    return [w for w in words if is_repo_path(w)]


def readme_named_paths() -> list[str]:
    text = README.read_text(encoding="utf-8")
    paths = [p for c in README_COMMANDS for p in repo_paths(c.tokens)]
    paths += [span for span in re.findall(r"`([^`\s]+)`", text) if is_repo_path(span)]
    return sorted(set(paths))


@pytest.mark.parametrize("path", readme_named_paths())
def test_a_path_the_readme_names_exists(path):
    assert (ROOT / path).exists(), f"README.md names {path}, which does not exist"


def test_the_readme_names_no_path_outside_the_repository():
    # a path that climbs out of the checkout ("../data", "../x/y") exists on no user's machine
    outside = re.findall(r"(?<![\w.])\.\./[\w.-]+", README.read_text(encoding="utf-8"))
    assert outside == []


def slugs(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def links() -> list[tuple[str, str]]:
    found = []
    for page in LINKED_PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        text = re.sub(r"`[^`]*`", "", text)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"[a-z]+:", target):
                found.append((str(page.relative_to(ROOT)), target))
    return found


@pytest.mark.parametrize("page, target", links(), ids=[f"{p}->{t}" for p, t in links()])
def test_a_markdown_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    resolved = (ROOT / page).parent / path if path else ROOT / page
    assert resolved.exists(), f"{page} links to {target}: {resolved.relative_to(ROOT)} does not exist"
    if anchor and resolved.suffix == ".md":
        assert anchor in slugs(resolved), f"{page} links to {target}: no heading with anchor #{anchor}"


# The reader itself, on examples


def test_the_reader_joins_continued_lines_and_splits_a_line_into_its_commands():
    text = [
        "python -m eval run --model M \\",
        "    --task gsm8k --out runs/x   # a comment --not-a-flag",
        "make lint && OMP_NUM_THREADS=2 make demo",
        "(python -m recipes.grpo --config recipes/configs/x.yaml runs the same)",
        "estimated peak 18 GB (python -m recipes.memory recipes/configs/y.yaml; docs/gpu.md)",
    ]
    assert [c.tokens for c in commands_in_lines(text, 1, "f")] == [
        ("python", "-m", "eval", "run", "--model", "M", "--task", "gsm8k", "--out", "runs/x"),
        ("make", "lint"),
        ("OMP_NUM_THREADS=2", "make", "demo"),
        ("python", "-m", "recipes.grpo", "--config", "recipes/configs/x.yaml", "runs", "the", "same"),
        ("python", "-m", "recipes.memory", "recipes/configs/y.yaml"),
    ]
    assert [c.where for c in commands_in_lines(text, 10, "f")][:2] == ["f:10", "f:12"]
    quoted = ['A=1 python -m x --y "#### 42" a#b  # note', "make t && make u"]  # a quoted or inner `#`: no comment
    assert [c.tokens for c in commands_in_lines(quoted, 1, "f")] == [
        ("A=1", "python", "-m", "x", "--y", "#### 42", "a#b"),
        ("make", "t"),
        ("make", "u"),
    ]


def test_the_reader_finds_inline_code_commands_and_table_alternatives():
    text = "Run `python -m eval run\\|score --out DIR` or ``make test``; `pytest -q` is not one."
    assert [c.tokens for c in inline_commands(text, 1, "f")] == [
        ("python", "-m", "eval", f"run{ALTERNATIVES}score", "--out", "DIR"),
        ("make", "test"),
    ]


def test_the_flag_check_follows_subcommands_values_and_trl_config():
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int)
    sub = parser.add_subparsers().add_parser("run")
    sub.add_argument("--model")
    sub.add_argument("--seeds", nargs="+")
    assert unknown_flags(parser, ["--top", "1", "run", "--model", "m", "--seeds", "0", "1", "--low", "-1"]) == ["--low"]
    assert unknown_flags(parser, ["run", "--top", "1"]) == ["--top"]  # a top option after the subcommand fails
    assert unknown_flags(parser, ["run", "--model=m", "--", "--anything"]) == []
    with pytest.raises(LookupError, match="no subcommand 'score'"):
        unknown_flags(parser, [f"run{ALTERNATIVES}score"])
    assert unknown_flags(parser, ["--config", "c.yaml", "run"]) == ["--config"]  # argparse has no --config of its own
    assert (
        unknown_flags(parser, ["--top", "-1", "run", "--seeds", "-1", "--model", "-"]) == []
    )  # numbers and `-` are values


def test_a_call_gives_its_module_flags_and_subcommands():
    assert module_call(("accelerate", "launch", "--config_file", "c.yaml", "-m", "m", "--k")) == ("m", ["--k"])
    assert flags(["--a=1", "--b", "x", "--", "--c"]) == {"--a", "--b"}
    assert subcommand([f"run{ALTERNATIVES}score", "--x"]) == ["run", "score"]


def test_the_flags_after_a_matrix_double_dash_are_checked_against_the_recipe():
    args = ["--configs", "recipes/configs/lab/sft_lab_warmstart.yaml", "--seeds", "0", "--", "--max_steps", "2"]
    assert forwarded_calls("cpu_lab.matrix", args) == [("recipes.sft", ["--max_steps", "2"])]
    assert forwarded_calls("cpu_lab.matrix", ["--losses", "grpo", "--", "--bogus"]) == [("recipes.grpo", ["--bogus"])]
    assert unknown_flags(parser_of("recipes.grpo"), ["--max_steps", "2", "--bogus", "1"]) == ["--bogus"]


def test_placeholders_skip_the_existence_check_only():
    assert all(map(is_placeholder, ["<config>", "runs/X", "DIR", "recipes/configs/*/x.yaml", "$OUT/a", "a/..."]))
    real = ["recipes/configs/lab/grpo_lab_default.yaml", "runs/lab/data", "gsm8k", "tests/data/README.md"]
    assert not any(map(is_placeholder, real))
    tokens = ("python", "-m", "x", "--config", "recipes/configs/a.yaml", "--out", "docs/new.md", "tests/t.py::t")
    assert repo_files(tokens) == ["recipes/configs/a.yaml", "tests/t.py"]


def test_a_module_of_another_project_is_known_by_its_requirement_or_its_install():
    assert known_module("pytest") and known_module("lm_eval") and known_module("venv")  # lm-eval: requirements-bench
    assert not known_module("recipe.grpo")
