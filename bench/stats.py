"""The size of the project, as a maintainer reads it: what a GRPO run's code spans, the product code, the config keys
and the README.

    python -m bench.stats          # or: make stats

- **A GRPO run within two hops**: ``recipes/grpo.py`` and every module of the project it imports, and every module
  those import (top-level and lazy imports alike: a reader follows both), by lines.
- **Product code**: the lines of the packages (rewards, eval, training_data, recipes, the labs, bench); tests not
  counted.
- **Config keys**: the option lines the YAML configs write themselves (a variant's own keys; what it takes from its
  ``base:`` is counted once, in the base).
- **README**: its lines and its longest table cell.

Lines are lines of code: blank lines, comment lines and docstrings are not counted (the product code is also given
in lines of its files, everything counted).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rewards", "eval", "training_data", "recipes", "cpu_lab", "judge_lab", "reward_model_lab", "bench")


def module_path(name: str) -> Path | None:
    """The file of a project module named ``a.b.c`` (a module or a package's ``__init__.py``), or None."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    for candidate in (ROOT.joinpath(*parts).with_suffix(".py"), ROOT.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(path: Path) -> set[Path]:
    """The project's modules a file imports anywhere in it (``import a.b``, ``from a.b import c``, ``from a import b``
    where ``b`` is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {p for name in names if (p := module_path(name)) is not None}
    return found - {path}


def within_hops(start: Path, hops: int) -> set[Path]:
    """``start`` and the project modules reachable from it in at most ``hops`` imports."""
    seen, frontier = {start}, {start}
    for _ in range(hops):
        frontier = {m for f in frontier for m in imported_modules(f)} - seen
        seen |= frontier
    return seen


def lines(path: Path) -> int:
    """Lines of code: not blank, not a comment alone, not in a docstring."""
    text = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings |= set(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(
        1
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and number not in docstrings
    )


def config_keys(folder: Path) -> int:
    """Top-level option lines of every YAML config under ``folder`` (``base:`` lines included: they are read too)."""
    count = 0
    for path in sorted(folder.rglob("*.yaml")):
        count += sum(1 for line in path.read_text().splitlines() if line[:1].isalpha() and ":" in line)
    return count


def longest_cell(markdown: str) -> int:
    cells = [cell.strip() for line in markdown.splitlines() if line.startswith("|") for cell in line.split("|")]
    return max((len(cell) for cell in cells), default=0)


def physical_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def stats() -> dict:
    run = within_hops(ROOT / "recipes" / "grpo.py", 2)
    product = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    readme = (ROOT / "README.md").read_text()
    return {
        "grpo_two_hops": {str(p.relative_to(ROOT)): lines(p) for p in sorted(run)},
        "product_lines": sum(lines(p) for p in product),
        "product_physical_lines": sum(physical_lines(p) for p in product),
        "config_keys": config_keys(ROOT / "recipes" / "configs"),
        "configs": len(list((ROOT / "recipes" / "configs").rglob("*.yaml"))),
        "readme_lines": len(readme.splitlines()),
        "readme_longest_cell": longest_cell(readme),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m bench.stats", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args(argv)
    s = stats()
    files = s["grpo_two_hops"]
    print(f"a GRPO run within two hops of recipes/grpo.py: {sum(files.values()):,} lines in {len(files)} files")
    for path, n in sorted(files.items(), key=lambda item: -item[1]):
        print(f"  {n:6,d}  {path}")
    print(
        f"product code ({', '.join(PACKAGES)}): {s['product_lines']:,} lines of code, "
        f"{s['product_physical_lines']:,} lines in all"
    )
    print(f"config keys: {s['config_keys']:,} in {s['configs']} files")
    print(f"README: {s['readme_lines']} lines, longest table cell {s['readme_longest_cell']} characters")
    return s


if __name__ == "__main__":
    main()
