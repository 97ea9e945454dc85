"""The first lines a user reads: every command's usage line is the command they type (``python -m <module>``), no
module's docstring (its ``--help``) defends the module's size, and ``make help`` lists the Makefile's targets.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/project/test_usage_lines.py
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rewards", "eval", "training_data", "recipes", "cpu_lab", "judge_lab", "reward_model_lab", "bench")
SOURCES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)


def parsers(path: Path) -> list[ast.Call]:
    """The ``ArgumentParser(...)`` calls of a module."""
    calls = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)]
    return [c for c in calls if getattr(c.func, "attr", getattr(c.func, "id", None)) == "ArgumentParser"]


PARSERS = [(path, call) for path in SOURCES for call in parsers(path)]


@pytest.mark.parametrize("path, call", PARSERS, ids=[f"{p.relative_to(ROOT)}:{c.lineno}" for p, c in PARSERS])
def test_a_usage_line_names_the_command_a_user_types(path, call):
    prog = next((k.value for k in call.keywords if k.arg == "prog"), None)
    if isinstance(prog, ast.Attribute) and prog.attr == "prog":  # a parser shown with another parser's name
        return
    expected = f"python -m {module_name(path)}"
    assert isinstance(prog, ast.Constant) and prog.value == expected, (
        f"{path.relative_to(ROOT)}:{call.lineno}: ArgumentParser(prog={expected!r}, ...) so that its usage line is "
        f"the command, not {path.name}"
    )


def test_the_check_finds_the_parsers():
    assert len(PARSERS) >= 25, len(PARSERS)


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_no_docstring_defends_the_size_of_its_module(path):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    defended = [p for p in doc.split("\n\n") if re.match(r"Over [\d,]+ lines", p.strip())]
    assert not defended, f"{path.relative_to(ROOT)}: {defended[0][:80]!r}"


@pytest.mark.heavy  # starts a process
def test_make_help_lists_every_target_with_its_line():
    makefile = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-z][\w-]*):(?!=)", makefile, flags=re.MULTILINE)
    done = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert set(targets) <= set(listed), sorted(set(targets) - set(listed))
    for target in targets:
        assert len(listed[target].split(None, 1)) == 2, f"make help: {target} has no line"
    assert "OMP_NUM_THREADS" not in done.stdout  # targets, not the variables
    assert ".venv/.installed" not in listed and "mutate" in listed


def test_a_docstring_keeps_its_line_continuations():
    """A command split over lines with ``\\`` in a module's docstring is printed by ``--help`` as written only in a raw
    docstring; in a plain one the backslash and the newline vanish and the two lines run together."""
    joined = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
        if doc is None or not isinstance(doc.value, ast.Constant) or not isinstance(doc.value.value, str):
            continue
        source = ast.get_source_segment(path.read_text(), doc.value) or ""
        if source[:1] not in "rR" and re.search(r"(?<!\\)(?:\\\\)*\\\n", source):  # an odd run of \ ends a line
            joined.append(str(path.relative_to(ROOT)))
    assert not joined, f"docstrings whose \\-continued lines --help joins (make them r-strings): {joined}"
