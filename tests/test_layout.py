"""The import stack: each package imports only packages on its own floor or below (CONTRIBUTING.md).

rewards (bottom: knows no benchmark, no trainer) < eval (benchmarks, generation, scoring, monitors, JSONL I/O) <
training_data (rollouts, pairs) < recipes (the trainers' scripts and their glue, the model builders) < cpu_lab (the
CPU lab) < judge_lab, reward_model_lab (experiments, the reward-model lab built on the CPU lab) < bench. Imports
inside functions count too: a lazy import is still a dependency.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {
    "rewards": 0,
    "eval": 1,
    "training_data": 2,
    "recipes": 3,
    "cpu_lab": 4,
    "judge_lab": 5,
    "reward_model_lab": 5,
    "bench": 6,
}


def project_imports(path: Path) -> set[str]:
    """The project packages a module imports, anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in FLOORS)
    return found


def test_every_top_level_package_has_a_floor():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages == set(FLOORS), "a new package needs its floor here (and in CONTRIBUTING.md's stack)"


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_no_package_imports_one_above_it(package):
    upward = {
        f"{path.relative_to(ROOT)} imports {imported}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for imported in project_imports(path)
        if FLOORS[imported] > FLOORS[package]
    }
    assert not upward, sorted(upward)


def test_the_checker_catches_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from recipes.grpo import main\n    import eval.run\n")
    assert project_imports(module) == {"recipes", "eval"}
