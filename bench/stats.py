"""The size of the project, as a maintainer reads it: what a GRPO run's code spans, the product code, the config keys
and the README.

    python -m bench.stats          # or: make stats

- **A GRPO run within two hops**, as a reader follows it: ``recipes/grpo.py``, every definition of the project it
  names (a function, a class, a module-level constant: hop 1) and every definition those name (hop 2), by lines; a
  class counts whole. Also, coarser: every module within two imports of it (top-level and lazy imports alike).
  Those lines by kind (``KINDS``): what any GRPO run needs (arguments, data, rewards, trainer, evaluation, the run
  folder), leash's instruments (monitors, hack alarm, best checkpoint), checks before the model loads, and glue
  (command line, help, naming, printed summaries).
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


def module_path(name: str, root: Path = ROOT) -> Path | None:
    """The file of a project module named ``a.b.c`` (a module or a package's ``__init__.py``), or None."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
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


def docstring_lines(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found |= set(range(body[0].lineno, body[0].end_lineno + 1))
    return found


def code_lines(text: list[str], first: int, last: int, docstrings: set[int]) -> int:
    """Lines ``first``..``last`` (from 1) that are code: not blank, not a comment alone, not in a docstring."""
    return sum(
        1
        for number in range(first, last + 1)
        if text[number - 1].strip() and not text[number - 1].strip().startswith("#") and number not in docstrings
    )


def lines(path: Path) -> int:
    """Lines of code: not blank, not a comment alone, not in a docstring."""
    text = path.read_text()
    return code_lines(text.splitlines(), 1, len(text.splitlines()), docstring_lines(ast.parse(text)))


class Module:
    """A project module as the call graph reads it: its top-level definitions (functions, classes, constants) and
    what each name it imports stands for (a project module, or a definition in one)."""

    def __init__(self, path: Path, root: Path = ROOT):
        text = path.read_text()
        self.path, self.tree, self.text = path, ast.parse(text), text.splitlines()
        self.docstrings = docstring_lines(self.tree)
        self.units: dict[str, ast.stmt] = {}
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.units[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        self.units[target.id] = node
        self.modules: dict[str, Path] = {}  # alias -> a project module
        self.imported: dict[str, tuple[Path, str]] = {}  # name -> (module, its name there)
        for node in ast.walk(self.tree):  # lazy imports too: a reader follows them
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (found := module_path(alias.name, root)) and alias.asname:
                        self.modules[alias.asname] = found
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    name = alias.asname or alias.name
                    if sub := module_path(f"{node.module}.{alias.name}", root):
                        self.modules[name] = sub
                    elif found := module_path(node.module, root):
                        self.imported[name] = (found, alias.name)

    def size(self, name: str) -> int:
        node = self.units[name]
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        return code_lines(self.text, first, node.end_lineno, self.docstrings)

    def named_in(self, node: ast.AST) -> set[tuple[Path, str]]:
        """The project definitions ``node`` names: its own module's, imported ones, and ``module.name``."""
        found = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in self.units and self.units[n.id] is not node:
                found.add((self.path, n.id))
            elif isinstance(n, ast.Name) and n.id in self.imported:
                found.add(self.imported[n.id])
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in self.modules:
                found.add((self.modules[n.value.id], n.attr))
        return found


def reached_within(start: Path, hops: int, root: Path = ROOT) -> dict[tuple[Path, str], int]:
    """The definitions a reader of ``start`` reaches within ``hops`` names, each with its lines of code (a name
    re-exported by another module is followed to its definition)."""
    modules: dict[Path, Module] = {}

    def module(path: Path) -> Module:
        if path not in modules:
            modules[path] = Module(path, root)
        return modules[path]

    def definition(path: Path, name: str) -> tuple[Path, str] | None:
        seen = set()
        while (path, name) not in seen:
            seen.add((path, name))
            if name in module(path).units:
                return path, name
            if name not in module(path).imported:
                return None
            path, name = module(path).imported[name]
        return None

    reached = {}
    named = module(start).named_in(module(start).tree)
    for _ in range(hops):
        found = {d for path, name in named if (d := definition(path, name)) and d[0] != start} - set(reached)
        reached |= {d: module(d[0]).size(d[1]) for d in found}
        named = {n for path, name in found for n in module(path).named_in(module(path).units[name])}
    return reached


# The kind of each definition a GRPO run reaches: its module's kind, or its own where it is of another kind. A
# definition in neither is "unclassified" (and printed so).
MODULE_KINDS = {
    "recipes/grpo.py": "run",
    "recipes/grpo_setup.py": "run",
    "recipes/common.py": "run",
    "recipes/run_folder.py": "run",
    "eval/tasks.py": "run",
    "rewards/registry.py": "run",
    "recipes/callbacks.py": "instruments",
    "recipes/monitors.py": "instruments",
    "recipes/checks.py": "checks",
    "recipes/tracked.py": "checks",
    "recipes/hack_alarm.py": "checks",  # what a run reaches of it: check_watch_args
    "recipes/dynamic_sampling.py": "checks",  # likewise: check_dynamic_sampling
    "eval/sources.py": "checks",  # check_model_source
    "recipes/parser.py": "glue",
    "recipes/console.py": "glue",
}
DEFINITION_KINDS = {
    "recipes/grpo.py": {"summary": "glue", "make_parser": "glue"},
    "recipes/grpo_setup.py": {
        **dict.fromkeys(("check_args", "uses_zero3", "held_out_limit"), "checks"),
        **dict.fromkeys(
            ("build_monitors", "reward_monitor", "reward_stats", "held_out_watch", "make_tracker"), "instruments"
        ),
        "watch_lines": "glue",
    },
    "recipes/common.py": dict.fromkeys(
        (
            *("COMMON_OPTIONS", "command_module", "full_parser", "held_out_lines", "parse_or_explain", "run_cli"),
            *("quiet_library_noise", "quiet_wandb_notice", "recipe_parser", "run_identity", "short_model_name"),
            "wandb_line",
        ),
        "glue",
    ),
    "recipes/console.py": {"JsonlLogCallback": "run"},  # it writes log.jsonl
}
KIND_ORDER = ("run", "instruments", "checks", "glue", "unclassified")


def kind_of(path: str, name: str | None) -> str:
    """The kind of definition ``name`` of module ``path`` (relative, e.g. ``recipes/common.py``); None: the module's
    own lines outside its definitions (its imports)."""
    return DEFINITION_KINDS.get(path, {}).get(name) or MODULE_KINDS.get(path, "unclassified")


def by_kind(start: Path, reached: dict[tuple[Path, str], int], root: Path = ROOT) -> dict[str, int]:
    """The lines of ``start`` (each of its definitions, and the rest) and of the ``reached`` definitions, by kind."""
    kinds = dict.fromkeys(KIND_ORDER, 0)
    own = Module(start, root)
    rel = start.relative_to(root).as_posix()
    for name in own.units:
        kinds[kind_of(rel, name)] += own.size(name)
    kinds[kind_of(rel, None)] += lines(start) - sum(own.size(name) for name in own.units)
    for (path, name), n in reached.items():
        kinds[kind_of(path.relative_to(root).as_posix(), name)] += n
    return kinds


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
    grpo = ROOT / "recipes" / "grpo.py"
    reached = reached_within(grpo, 2)
    by_file = {str(grpo.relative_to(ROOT)): lines(grpo)}
    for (path, _), n in reached.items():
        key = str(path.relative_to(ROOT))
        by_file[key] = by_file.get(key, 0) + n
    run = within_hops(grpo, 2)
    product = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    readme = (ROOT / "README.md").read_text()
    return {
        "grpo_two_hops": by_file,
        "grpo_two_hops_definitions": len(reached),
        "grpo_two_hops_by_kind": by_kind(grpo, reached),
        "grpo_two_imports": {str(p.relative_to(ROOT)): lines(p) for p in sorted(run)},
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
    print(
        f"a GRPO run within two hops of recipes/grpo.py (the file, and {s['grpo_two_hops_definitions']} definitions "
        f"it names or they name): {sum(files.values()):,} lines in {len(files)} files"
    )
    for path, n in sorted(files.items(), key=lambda item: -item[1]):
        print(f"  {n:6,d}  {path}")
    kinds, total = s["grpo_two_hops_by_kind"], sum(files.values())
    shares = ", ".join(f"{kind} {n:,} ({n / total:.0%})" for kind, n in kinds.items() if n or kind != "unclassified")
    print(f"  by kind (bench/stats.py KINDS): {shares}")
    modules = s["grpo_two_imports"]
    print(f"the modules within two imports of it, whole: {sum(modules.values()):,} lines in {len(modules)} files")
    print(
        f"product code ({', '.join(PACKAGES)}): {s['product_lines']:,} lines of code, "
        f"{s['product_physical_lines']:,} lines in all"
    )
    print(f"config keys: {s['config_keys']:,} in {s['configs']} files")
    print(f"README: {s['readme_lines']} lines, longest table cell {s['readme_longest_cell']} characters")
    return s


if __name__ == "__main__":
    main()
