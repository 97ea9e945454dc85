"""Every command answers ``--help``, and refuses an option it does not know, before torch, transformers, TRL or any
other heavy library loads: a command parses its arguments first and imports those libraries in the functions that
need them, after parsing.

The commands are found, not listed: every module of the packages with an ``if __name__ == "__main__":`` block, and
``python -m eval`` (``eval/__main__.py``). One process runs them in turn with ``runpy``, as ``python -m`` would, and
notes after each which heavy library it newly imported; after one that imported any, a fresh process runs the rest, so
that each command answers for its own imports.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/project/test_help_is_light.py
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import parser

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rewards", "eval", "training_data", "recipes", "cpu_lab", "judge_lab", "reward_model_lab", "bench")
HEAVY = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "vllm", "deepspeed", "bitsandbytes")
NOT_COMMANDS = {"rewards._verify_worker"}  # rewards.verify's worker process: requests on stdin, no options
ANSWERS = {"--help": 0, "--no-such-option": 2}  # what each command is asked, and the exit status it answers with

# Runs the commands of argv[1] in turn, each asked every question of argv[2], and notes which libraries of argv[3] each
# newly imported: one JSON line per answer and one per command, in the file argv[4]. Stops after a command that
# imported one: it would hide that library from the commands after it.
RUNNER = """
import contextlib, io, json, runpy, sys, traceback, warnings
modules, questions, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
with open(sys.argv[4], "a", buffering=1) as log:  # a line is on disk when written: a process may die
    for module in modules:
        before = {name for name in heavy if name in sys.modules}
        for question in questions:
            out, err, status = io.StringIO(), io.StringIO(), 0
            sys.argv = [module, question]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # runpy's warning for a module an earlier command imported
                try:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                except SystemExit as exit:
                    status = 0 if exit.code is None else exit.code
                except Exception:
                    status, err = "raised", io.StringIO(traceback.format_exc())
            record = {"module": module, "question": question, "status": status, "stdout": out.getvalue()[:200]}
            log.write(json.dumps(record | {"stderr": err.getvalue()[-1500:]}) + "\\n")
        loaded = sorted(name for name in heavy if name in sys.modules and name not in before)
        log.write(json.dumps({"module": module, "loaded": loaded}) + "\\n")
        if loaded:
            break
"""


def has_main_block(path: Path) -> bool:
    """Whether the module runs as a command: an ``if __name__ == "__main__":`` statement at its top level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'" for node in tree.body)


def commands() -> list[str]:
    """``python -m`` names of every command of the packages (``eval``, not ``eval.__main__``)."""
    found = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        if has_main_block(path):
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__main__"))
    return [name for name in found if name not in NOT_COMMANDS]


def ask(modules: list[str], log: Path) -> tuple[list[dict], list[dict]]:
    """Every command of ``modules`` asked every question of ``ANSWERS``, as few processes as the imports allow:
    (the answers, what each command newly imported). A command whose process died answers with that process's end."""
    answers, imports, left = [], [], list(modules)
    while left:
        log.unlink(missing_ok=True)
        argv = [json.dumps(left), json.dumps(list(ANSWERS)), json.dumps(HEAVY), str(log)]
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        answers += [r for r in records if "question" in r]
        finished = [r for r in records if "loaded" in r]
        imports += finished
        left = left[len(finished) :]
        if left and not (finished and finished[-1]["loaded"]):  # the process ended inside left[0]
            asked = [r["question"] for r in answers if r["module"] == left[0]]
            question = next(q for q in ANSWERS if q not in asked)
            end = f"the process ended (exit {done.returncode}): {done.stderr[-1500:]}"
            answers.append({"module": left[0], "question": question, "status": "died", "stderr": end})
            left = left[1:]
    return answers, imports


def test_the_search_finds_the_commands():
    found = commands()
    assert {"eval", "recipes.grpo", "recipes.tiny_model", "bench.real_step", "reward_model_lab.overoptimisation"} <= (
        set(found)
    )
    assert "recipes.common" not in found  # its docstring shows a __main__ block; the module has none
    assert not NOT_COMMANDS & set(found)


@pytest.mark.heavy  # starts a process
def test_every_command_answers_help_before_a_heavy_library_loads(tmp_path):
    # A recipe answers from the table of options leash ships while the table describes the checkout; a stale one
    # (a source changed, other library versions) makes its first command build the full parser, as designed, and
    # tests/recipes/test_option_tables.py fails with the command that writes the tables again.
    stale = {module for module in parser.RECIPES if parser.shipped_parser(module) is None}
    answers, imports = ask([module for module in commands() if module not in stale], tmp_path / "answers.jsonl")
    heavy = {r["module"]: r["loaded"] for r in imports if r["loaded"]}
    assert not heavy, f"these commands load heavy libraries before they parse their arguments: {heavy}"
    wrong = [
        f"python -m {r['module']} {r['question']}: exit {r['status']}, not {ANSWERS.get(r['question'])}\n{r['stderr']}"
        for r in answers
        if r["status"] != ANSWERS.get(r["question"])
    ]
    assert not wrong, "\n".join(wrong)
    no_usage = [r["module"] for r in answers if r["question"] == "--help" and "usage:" not in r["stdout"]]
    assert not no_usage, f"--help printed no usage line: {no_usage}"
