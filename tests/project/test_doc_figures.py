"""A figure's command still parses to the settings the figure was measured with.

A doc marks the fenced block that holds a figure's command with an HTML comment on the line above it:

    <!-- measured-with: use_peft=false learning_rate=1e-6; now-differs: gradient_accumulation_steps=4 -->

Every recipe run the block's commands make is resolved by that recipe's own parser (the config's YAML, then the
command's flags; nothing chosen for this machine): a ``python -m recipes.<name> --config <config>``, each config of a
``cpu_lab.matrix --configs ... -- FLAGS``, and each arm of a ``bench.real_step`` run (the real-model lab's GRPO config
with the arm's flags; ``--pair ARM``, ``--arms A B``, or its default arms). Each ``key=value`` of ``measured-with`` must
be what every run resolves to; ``ARM:key=value`` holds for that bench arm only. ``now-differs`` lists settings of the
measurement that the command no longer reproduces (the doc says so beside it): each must resolve to something else,
so the note goes stale loudly once the command reproduces them again. A key that no argument dataclass of the recipe
has, a marker on a block without a recipe run, and an unreadable marker fail too. The real-model lab's figures are
marked: every fenced block of the experiment log (docs/LOG.md) and of docs/real_model_lab.md that runs a
``recipes/configs/real_lab/`` config, directly or through a bench arm, carries a marker.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/project/test_doc_figures.py
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import parse_recipe_config
from tests.project.test_doc_commands import commands_in_lines, is_option, module_call

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LOG = "docs/LOG.md"  # the dated experiment log: where the measured figures and their commands live
MARKED_PAGES = (LOG, "docs/real_model_lab.md")  # every real-lab run there must carry a marker
MARKER = re.compile(r"^\s*<!--\s*measured-with:(?P<body>.*?)-->\s*$")


@dataclass(frozen=True)
class Setting:
    key: str
    value: object  # as read: bool, int, float or str (a list as a comma-separated str)
    arm: str | None = None  # a bench.real_step arm, or None for every run of the block


@dataclass(frozen=True)
class Block:
    where: str  # page:line of the block's first line
    lines: tuple[str, ...]
    marker: str | None  # the marker's body, or None for an unmarked block


@dataclass(frozen=True)
class Run:
    label: str  # how the run is named in a failure
    recipe: str  # "grpo", "sft", ...
    config: str
    flags: tuple[str, ...]
    arm: str | None = None


def read_value(text: str) -> object:
    """A marker's value: ``true``/``false``, an int, a float (``1e-6``), else the text.

    >>> read_value("false"), read_value("8"), read_value("1e-6"), read_value("runs/x.jsonl")
    (False, 8, 1e-06, 'runs/x.jsonl')
    """
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_marker(body: str) -> tuple[list[Setting], list[Setting]]:
    """(measured-with settings, now-differs settings) of a marker's body. Raises ValueError on a word that is not
    ``key=value`` or ``arm:key=value``.

    >>> read_marker(" use_peft=false full_t1:bf16=true; now-differs: gradient_accumulation_steps=4 ")[0]
    [Setting(key='use_peft', value=False, arm=None), Setting(key='bf16', value=True, arm='full_t1')]
    """
    same, _, rest = body.partition(";")
    differs = rest.strip()
    if differs and not differs.startswith("now-differs:"):
        raise ValueError(f"after ';' a marker takes 'now-differs: key=value ...', not {differs!r}")

    def settings(text: str) -> list[Setting]:
        out = []
        for word in text.split():
            match = re.fullmatch(r"(?:(?P<arm>\w+):)?(?P<key>[a-z_][a-z0-9_]*)=(?P<value>\S+)", word)
            if not match:
                raise ValueError(f"{word!r} is not key=value or arm:key=value")
            out.append(Setting(match["key"], read_value(match["value"]), match["arm"]))
        return out

    return settings(same), settings(differs.removeprefix("now-differs:"))


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page that are not ``python`` or ``text``, each with the marker on the line above it."""
    where = str(page.relative_to(ROOT))
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = lines[i].lstrip()
        if not fence.startswith("```"):
            i += 1
            continue
        language = fence[3:].strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```")), len(lines))
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        if language not in ("python", "text"):
            body = marker["body"] if marker else None
            found.append(Block(f"{where}:{i + 2}", tuple(lines[i + 1 : end]), body))
        i = end + 1
    return found


def stray_markers(page: Path) -> list[str]:
    """Markers that are unreadable as one comment line or not on the line right above a fence."""
    lines = page.read_text(encoding="utf-8").splitlines()
    where = str(page.relative_to(ROOT))
    stray = []
    for n, line in enumerate(lines):
        if "measured-with" not in line:
            continue
        above_fence = n + 1 < len(lines) and lines[n + 1].lstrip().startswith("```")
        if not (MARKER.match(line) and above_fence):
            stray.append(f"{where}:{n + 1}")
    return stray


def config_and_flags(args: list[str]) -> tuple[str | None, list[str]]:
    """A recipe command's ``--config`` value and its other words."""
    config, rest, i = None, [], 0
    while i < len(args):
        if args[i] == "--config" and i + 1 < len(args):
            config, i = args[i + 1], i + 2
        elif args[i].startswith("--config="):
            config, i = args[i].partition("=")[2], i + 1
        else:
            rest.append(args[i])
            i += 1
    return config, rest


def option_values(args: list[str], option: str) -> list[str]:
    """The words after ``option`` up to the next option (``--arms A B`` -> ``[A, B]``)."""
    if option not in args:
        return []
    values = []
    for word in args[args.index(option) + 1 :]:
        if is_option(word):
            break
        values.append(word)
    return values


def arm_flags(args: list[str]) -> bool:
    """Whether a ``bench.real_step`` command names arms (``--arms`` or ``--pair``): with ``--matmul`` or
    ``--agreement`` and neither, it runs no step arm."""
    return "--arms" in args or "--pair" in args


def runs_of(block: Block) -> list[Run]:
    """The recipe runs the block's commands make."""
    from bench import real_step  # torch and TRL: imported only when a doc has a bench command

    runs = []
    for command in commands_in_lines(list(block.lines), 0, block.where):
        call = module_call(command.tokens)
        if call is None:
            continue
        module, args = call
        shown = "`" + " ".join(command.tokens) + "`"
        if module.startswith("recipes.") and "--config" in " ".join(args):
            config, flags = config_and_flags(args)
            runs.append(Run(shown, module.split(".")[1], config, tuple(flags)))
        elif module == "cpu_lab.matrix" and "--" in args:
            from cpu_lab.matrix import recipe_for

            forwarded = args[args.index("--") + 1 :]
            for config in option_values(args[: args.index("--")], "--configs"):
                runs.append(Run(f"{shown} ({config})", recipe_for(config).split(".")[1], config, tuple(forwarded)))
        elif module == "bench.real_step" and not ({"--matmul", "--agreement"} & set(args) and not arm_flags(args)):
            arms = option_values(args, "--pair") or option_values(args, "--arms") or real_step.DEFAULT_ARMS
            for arm in arms:
                flags = tuple(real_step.ARMS[arm].flags)
                runs.append(Run(f"{shown} (arm {arm})", "grpo", real_step.CONFIG, flags, arm))
    return runs


def resolved(run: Run) -> dict[str, object]:
    """Every setting the run's recipe parser gives it, by name (script, training and model arguments)."""
    parsed = parse_recipe_config(run.recipe, ROOT / run.config, *run.flags)
    values = {}
    for arguments in parsed:
        if arguments is not None and hasattr(arguments, "__dataclass_fields__"):
            values |= {name: getattr(arguments, name) for name in arguments.__dataclass_fields__}
    return values


def same(actual: object, recorded: object) -> bool:
    """Whether a resolved setting equals a marker's value (an enum by its value, a list by its comma-joined items).

    >>> same(1e-06, 1e-6), same(False, False), same(["a", "b"], "a,b"), same(8, 4), same(None, "x")
    (True, True, True, False, False)
    """
    if isinstance(actual, enum.Enum):
        actual = actual.value
    if isinstance(actual, (list, tuple)):
        return ",".join(map(str, actual)) == str(recorded)
    if isinstance(actual, bool) or isinstance(recorded, bool):
        return actual is recorded
    if isinstance(actual, (int, float)) and isinstance(recorded, (int, float)):
        return math.isclose(actual, recorded, rel_tol=1e-9, abs_tol=0.0)
    return str(actual) == str(recorded)


def problems(block: Block) -> list[str]:
    """What is wrong with a marked block: a mismatch per run and setting, a key no run has, no run at all."""
    try:
        measured, differs = read_marker(block.marker)
    except ValueError as error:
        return [f"{block.where}: unreadable marker: {error}"]
    runs = runs_of(block)
    if not runs:
        return [f"{block.where}: a measured-with marker on a block that runs no recipe"]
    found = []
    for run in runs:
        values = resolved(run)
        for setting, measured_now in [(s, True) for s in measured] + [(s, False) for s in differs]:
            if setting.arm is not None and setting.arm != run.arm:
                continue
            if setting.key not in values:
                found.append(f"{block.where}: {run.label}: the recipe has no setting {setting.key!r}")
                continue
            actual = values[setting.key]
            if measured_now and not same(actual, setting.value):
                found.append(
                    f"{block.where}: {run.label}: {setting.key} resolves to {actual!r}, but the figure was measured "
                    f"with {setting.value!r}: the command no longer reproduces it (fix the command, or say so)"
                )
            if not measured_now and same(actual, setting.value):
                found.append(
                    f"{block.where}: {run.label}: {setting.key} resolves to the measured {actual!r} again: drop it "
                    "from now-differs and from the note beside the figure that says the command differs"
                )
    arms = {run.arm for run in runs}
    found += [
        f"{block.where}: the marker names arm {s.arm!r}, which no command of the block runs"
        for s in (*measured, *differs)
        if s.arm is not None and s.arm not in arms
    ]
    return found


def real_lab_runs(block: Block) -> bool:
    """Whether a block runs a real-model lab config (directly, through cpu_lab.matrix or through bench arms)."""
    return any("configs/real_lab/" in str(run.config) for run in runs_of(block))


MARKED = [b for page in PAGES if page.exists() for b in blocks(page) if b.marker is not None]


def test_the_docs_mark_the_figures_whose_settings_changed_under_them():
    pages = {b.where.split(":")[0] for b in MARKED}
    assert LOG in pages, pages
    commands = " ".join(" ".join(b.lines) for b in MARKED)
    markers = " ".join(b.marker for b in MARKED)
    assert "bench.real_step" in commands, "the step-time figures' commands carry no marker"
    assert "use_peft=false" in markers and "use_peft=true" in markers, "no full fine-tuning or no LoRA figure marked"


@pytest.mark.parametrize("block", MARKED, ids=[b.where for b in MARKED])
def test_a_marked_command_resolves_to_the_settings_its_figure_was_measured_with(block):
    found = problems(block)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("page", MARKED_PAGES)
def test_every_real_lab_run_on_the_results_pages_is_marked(page):
    unmarked = [b.where for b in blocks(ROOT / page) if b.marker is None and real_lab_runs(b)]
    assert not unmarked, f"blocks that run a real-lab config with no measured-with marker: {unmarked}"


@pytest.mark.parametrize("page", [p for p in PAGES if p.exists()], ids=lambda p: p.name)
def test_a_marker_sits_right_above_a_fence(page):
    assert not stray_markers(page), stray_markers(page)


# The check itself, on examples


GRPO = "OMP_NUM_THREADS=1 python -m recipes.grpo --config recipes/configs/real_lab/grpo_real_default.yaml"


def example(marker: str, *lines: str) -> Block:
    return Block("example:1", lines, marker)


def test_dropping_use_peft_false_from_a_full_fine_tuning_command_fails():
    full = example("use_peft=false learning_rate=1e-6", f"{GRPO} --use_peft false --learning_rate 1e-6")
    assert problems(full) == []
    dropped = example("use_peft=false learning_rate=1e-6", f"{GRPO} --learning_rate 1e-6")
    (problem,) = problems(dropped)
    assert "use_peft resolves to True" in problem and "measured with False" in problem


def test_now_differs_must_still_differ_and_keys_and_arms_must_exist():
    note = "use_peft=true; now-differs: gradient_accumulation_steps=8"
    assert problems(example(note, GRPO)) == []  # the config's 4 micro-batches: the note holds
    stale = problems(example(note, f"{GRPO} --gradient_accumulation_steps 8"))
    assert len(stale) == 1 and "again" in stale[0]
    assert "no setting 'no_such_key'" in problems(example("no_such_key=1", GRPO))[0]
    assert "runs no recipe" in problems(example("use_peft=true", "python -m eval compare a b"))[0]
    assert "unreadable" in problems(example("use_peft", GRPO))[0]


def test_a_bench_arm_resolves_to_the_lab_config_with_its_flags():
    pair = example("use_peft=false full_t1:use_peft=false", "python -m bench.real_step --pair full_t1")
    assert problems(pair) == []
    arms = example("fp32_t2:bf16=false lora_t2:use_peft=true", "python -m bench.real_step --arms fp32_t2 lora_t2")
    assert problems(arms) == []
    wrong = example("full_t2:use_peft=true", "python -m bench.real_step --arms full_t2")
    assert len(problems(wrong)) == 1
    assert (
        "no command of the block runs"
        in problems(example("cb_t2:bf16=true", "python -m bench.real_step --pair full_t1"))[-1]
    )
    assert runs_of(example(None, "python -m bench.real_step --matmul")) == []
    assert [r.arm for r in runs_of(example(None, "python -m bench.real_step --pair full_t1 --agreement"))] == [
        "full_t1"
    ]


def test_a_matrix_command_checks_the_flags_after_its_double_dash():
    line = (
        "python -m cpu_lab.matrix --configs recipes/configs/real_lab/grpo_real_default.yaml --seeds 0 "
        "--out runs/x -- --use_peft false --max_steps 72"
    )
    assert problems(example("use_peft=false max_steps=72", line)) == []
    assert len(problems(example("use_peft=false", line.replace(" --use_peft false", "")))) == 1
