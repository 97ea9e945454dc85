"""What every lab's report is made of: numbers and intervals as text, mean ± std over seeds, tables, the paired gain
of a run, the "Reproduce" block, figures and the report file, written once here so a figure reads the same everywhere.
"""

from __future__ import annotations

import shlex
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib

from cpu_lab.runner import recipe_for
from eval.jsonl import read_jsonl
from eval.metrics import compare_records
from eval.report import table  # noqa: F401 (the labs' reports take their tables from here)

MISSING = "–"  # a number a report has no value for (the judge lab's tables write "-")
# points: a random-reward control whose held-out accuracy moves further, up or down, is moved by the step size alone,
# and the lab gives no verdict on its reward (both labs' rule)
CONTROL_BAND = 3.0


def number(value: float | None, spec: str = ".3f", missing: str = MISSING) -> str:
    """``value`` in the format ``spec``, or ``missing`` when there is none.

    >>> number(0.12345), number(None), number(3.14159, ".1f"), number(None, ".3g", "-")
    ('0.123', '–', '3.1', '-')
    """
    return missing if value is None else format(value, spec)


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None, int]:
    """Mean, sample standard deviation (None for one value) and count of the non-missing values.

    >>> mean_std([0.5, 0.6, None])
    (0.55, 0.07071067811865474, 2)
    """
    values = [v for v in values if v is not None]
    if not values:
        return None, None, 0
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None), len(values)


def mean_std_text(values: Iterable[float | None], spec: str = ".3f", one: str = " (1 seed)") -> str:
    """``mean ± std`` of the non-missing values in ``spec``; ``mean`` + ``one`` for a single value, ``–`` for none.

    >>> mean_std_text([0.5, 0.6]), mean_std_text([0.5, None]), mean_std_text([12.5, 2.5], "+.1f"), mean_std_text([])
    ('0.550 ± 0.071', '0.500 (1 seed)', '+7.5 ± 7.1', '–')
    """
    mean, std, _ = mean_std(values)
    if mean is None:
        return MISSING
    if std is None:
        return f"{mean:{spec}}{one}"
    return f"{mean:{spec}} ± {std:{spec.lstrip('+')}}"


def interval(value: float, bounds: Sequence[float], spec: str = ".3f") -> str:
    """A value with its interval: ``value [low, high]``.

    >>> interval(0.25, (0.142, 0.402)), interval(22.5, (10, 35), "+.1f")
    ('0.250 [0.142, 0.402]', '+22.5 [+10.0, +35.0]')
    """
    low, high = bounds
    return f"{value:{spec}} [{low:{spec}}, {high:{spec}}]"


def accuracy(result: dict | None) -> str:
    """An evaluation's accuracy with its 95% interval (``eval.run``'s ``accuracy`` and ``ci``), ``–`` for none."""
    return MISSING if not result else interval(result["accuracy"], result["ci"])


def paired_gain(folder: Path) -> dict | None:
    """A recipe run's held-out accuracy after minus before, with a paired-bootstrap 95% interval; None without both."""
    before, after = folder / "eval_before" / "samples.jsonl", folder / "eval_after" / "samples.jsonl"
    if not (before.exists() and after.exists()):
        return None
    return compare_records(read_jsonl(before), read_jsonl(after))


def gain_points(gain: dict | None) -> str:
    """A paired gain (``paired_gain``) in accuracy points with its interval, ``–`` for none.

    >>> gain_points({"difference": 0.225, "ci": [0.1, 0.35]}), gain_points(None)
    ('+22.5 [+10.0, +35.0]', '–')
    """
    if not gain:
        return MISSING
    return interval(gain["difference"] * 100, [bound * 100 for bound in gain["ci"]], "+.1f")


def mean_by_step(per_seed: Iterable[Iterable[tuple[int, float]]]) -> tuple[list[int], list[float]]:
    """Steps logged by any seed, and at each the mean of the seeds' values there.

    >>> mean_by_step([[(1, 1.0), (2, 3.0)], [(1, 3.0)]])
    ([1, 2], [2.0, 3.0])
    """
    by_step: dict[int, list[float]] = {}
    for points in per_seed:
        for step, value in points:
            by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    return steps, [statistics.fmean(by_step[s]) for s in steps]


def recipe_command(config: str | Path, seed: int, output_dir: str | Path, extra_args: Iterable[str] = ()) -> str:
    """The command that runs one recipe run by hand (the recipe named by the config's file name).

    >>> recipe_command("configs/sft_lab.yaml", 1, "runs/x", ["--max_steps", "3"])
    'python -m recipes.sft --config configs/sft_lab.yaml --seed 1 --output_dir runs/x --max_steps 3'
    """
    cmd = ["python", "-m", recipe_for(config), "--config", str(config), "--seed", str(seed)]
    return shlex.join([*cmd, "--output_dir", str(output_dir), *map(str, extra_args)])


def reproduce(commands: Iterable[str]) -> list[str]:
    return ["## Reproduce", "", "```", *commands, "```"]


def command_line() -> str:
    return shlex.join(sys.argv)


def pyplot():
    """matplotlib's pyplot, drawing to files only (no display on a server or in CI)."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # ~0.5 s that the labs' --help and a report without figures do not pay

    return plt


def save_figure(fig, path: str | Path, dpi: int = 100) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def write_markdown(path: str | Path, lines: Iterable[str]) -> Path:
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path
