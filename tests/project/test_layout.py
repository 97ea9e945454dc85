"""The import stack: each package imports only packages on its own floor or below (CONTRIBUTING.md).

rewards (bottom: knows no benchmark, no trainer) < eval (benchmarks, generation, scoring, the group arithmetic the
monitors log, model and data-set sources, JSONL I/O; no trainer callback) <
training_data (rollouts, pairs) < recipes (the trainers' scripts and their glue, the model builders) < cpu_lab (the
CPU lab) < judge_lab, reward_model_lab (experiments, the reward-model lab built on the CPU lab) < bench. Imports
inside functions count too: a lazy import is still a dependency.

Inside recipes/, a run reads in at most four files: its recipe, ``recipes/common.py`` (what the recipes share: the
command line, the run's setup, the end of a run), ``recipes/checks.py`` (the checks before a model loads) and one module
of its own (GRPO's setup, SFT's validation stop, the DPO and reward-model first-loss check). The checks import nothing
of recipes/; the shared module no recipe and no training callback.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


TRAINER_CALL = "GRPOTrainer" + "("  # spelled in two parts, so that this file holds no such call either


RECIPE_READS = {  # the modules of recipes/ each recipe imports, besides itself
    "grpo": {"common", "checks", "grpo_setup"},
    "sft": {"common", "checks", "monitors"},
    "dpo": {"common", "checks", "first_loss"},
    "reward_model": {"common", "checks", "first_loss"},
}


def recipes_modules(path: Path) -> set[str]:
    """The modules of recipes/ a file imports (``from recipes import x``, ``from recipes.x import ...``, ``import
    recipes.x``), anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "recipes":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("recipes."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("recipes."))
    return found


@pytest.mark.parametrize("recipe", sorted(RECIPE_READS))
def test_a_run_reads_in_four_files_of_recipes(recipe):
    assert recipes_modules(ROOT / "recipes" / f"{recipe}.py") == RECIPE_READS[recipe]


def test_the_checks_and_the_shared_module_stay_below_the_recipes():
    assert recipes_modules(ROOT / "recipes" / "checks.py") == set()
    # the command line's parser, the console, the CPU's precision, the output folder's life and the tiny model are what
    # the shared module builds on
    shared = {"checks", "console", "parser", "precision", "run_folder", "tiny_model"}
    assert recipes_modules(ROOT / "recipes" / "common.py") <= shared
    assert recipes_modules(ROOT / "recipes" / "run_folder.py") <= {"checks"}
    assert "grpo" not in recipes_modules(ROOT / "recipes" / "grpo_setup.py")


def test_the_recipes_module_check_sees_every_form(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from recipes import common, checks\nimport recipes.tracked\ndef f():\n    from recipes.x import y\n"
    )
    assert recipes_modules(module) == {"common", "checks", "tracked", "x"}


def grpo_trainer_calls(path: Path) -> list[int]:
    """Lines where a module calls TRL's GRPOTrainer (by name or as ``trl.GRPOTrainer``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name == "GRPOTrainer":
                lines.append(node.lineno)
    return lines


def test_every_grpo_run_goes_through_the_recipe():
    """No module outside recipes/ and bench/ builds TRL's GRPOTrainer: the labs run ``recipes.grpo`` (configs), tests
    get the recipe's trainer from ``recipes.grpo_setup.grpo_trainer``, so every run has the monitors users see."""
    skipped = ("recipes", "bench", "runs", "data", "mutants")  # and hidden folders (.venv, .git)
    tops = [p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in skipped]
    outside = sorted([*ROOT.glob("*.py"), *(path for top in tops for path in top.rglob("*.py"))])
    calls = [f"{p.relative_to(ROOT)}:{n}" for p in outside for n in grpo_trainer_calls(p)]
    calls += [f"{p.relative_to(ROOT)} (text)" for p in outside if TRAINER_CALL in p.read_text(encoding="utf-8")]
    assert not calls, calls


def test_the_trainer_check_sees_a_call(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(f"import trl\ntrainer = trl.{TRAINER_CALL}model='m')\nfrom trl import GRPOTrainer as T\n")
    assert grpo_trainer_calls(module) == [2]


def trainer_callbacks(path: Path) -> list[str]:
    """Where a module imports transformers' ``TrainerCallback`` or defines a class deriving from it (by name, or as
    ``transformers.TrainerCallback``): ``"<line>: <what>"`` for each."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers"):
            if any(alias.name == "TrainerCallback" for alias in node.names):
                found.append(f"{node.lineno}: imports TrainerCallback from {node.module}")
        elif isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: imports {a.name}" for a in node.names if a.name == "transformers.trainer_callback"
            ]
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
                if name == "TrainerCallback":
                    found.append(f"{node.lineno}: class {node.name}({ast.unparse(base)})")
    return found


def test_eval_holds_no_trainer_callback():
    """eval/ evaluates; what the trainers log and watch while they train lives in recipes/ (monitors, tracked answers,
    the hack alarm and the best checkpoint)."""
    found = [
        f"{p.relative_to(ROOT)}:{hit}" for p in sorted((ROOT / "eval").rglob("*.py")) for hit in trainer_callbacks(p)
    ]
    assert not found, f"move trainer callbacks to recipes/ (e.g. recipes/monitors.py): {found}"


def test_the_callback_check_sees_imports_and_subclasses(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import transformers\nimport transformers.trainer_callback\n"
        "from transformers.trainer_callback import TrainerCallback as Base\n"
        "class A(transformers.TrainerCallback):\n    pass\n"
        "def f():\n    from transformers import TrainerCallback\n\n    class B(TrainerCallback):\n        pass\n"
    )
    assert trainer_callbacks(module) == [
        "2: imports transformers.trainer_callback",
        "3: imports TrainerCallback from transformers.trainer_callback",
        "4: class A(transformers.TrainerCallback)",
        "7: imports TrainerCallback from transformers",
        "9: class B(TrainerCallback)",
    ]


@pytest.mark.heavy  # starts a process
def test_the_monitors_arithmetic_imports_without_transformers():
    """The group arithmetic and the degenerate-group formula load without a trainer library (the rollouts filter and
    the tests of the monitors' numbers need no transformers)."""
    heavy = "('transformers', 'trl', 'torch')"
    code = f"import sys, eval.group_metrics, eval.degenerate; print(sorted(m for m in sys.modules if m in {heavy}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
