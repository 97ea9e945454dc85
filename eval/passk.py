"""pass@k curves of several ``eval run`` / ``eval score`` folders side by side.

    python -m eval passk runs/eval/sft runs/eval/grpo --ks 1,2,4,8,16,32,64 --png runs/eval/passk.png

One row per k, one column per folder, and each later folder's paired difference with the first (B - A, ...) with
the interval ``eval compare`` gives accuracy. The folders must hold the same problems; pass@k beyond a folder's K
samples per problem is ``n/a``.
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

from eval.metrics import (
    BOOTSTRAP_RESAMPLES,
    CI_LEVEL,
    _powers_of_two_up_to,
    compare_pass_at_k,
    level_label,
    pass_at_k_curve,
    sample_list,
)
from eval.report import format_ci, format_pct, table


def parse_ks(text: str) -> list[int]:
    """``--ks``: a comma-separated list of k >= 1, sorted, each once.

    >>> parse_ks("8,1,2,2")
    [1, 2, 8]
    """
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--ks takes whole numbers separated by commas (1,2,4,8), got {text!r}") from e
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"--ks takes k >= 1 (1,2,4,8), got {text!r}")
    return ks


def problem_key(record: dict) -> tuple:
    """What makes two folders' records the same problem: its index, question and gold answer."""
    return record["index"], record.get("question"), record.get("gold")


def check_same_problems(runs: dict[str, tuple[dict, list[dict]]]) -> None:
    """Raise a one-line error unless every folder holds the first one's task and problems.

    >>> a = ({"task": "gsm8k"}, [{"index": 0, "question": "1+1?", "gold": "2"}])
    >>> b = ({"task": "gsm8k"}, [{"index": 0, "question": "2+2?", "gold": "4"}])
    >>> check_same_problems({"A": a, "B": b})
    Traceback (most recent call last):
    ...
    ValueError: B and A hold different problems (1 only in B, 1 only in A): pass folders of runs on the same --data and --limit
    """  # noqa: E501
    (first, (results_first, records_first)), *others = runs.items()
    keys_first = {problem_key(r) for r in records_first}
    for name, (results, records) in others:
        if results.get("task") != results_first.get("task"):
            raise ValueError(
                f"{name} holds task {results.get('task')!r} and {first} task {results_first.get('task')!r}: "
                "pass folders of the same task"
            )
        keys = {problem_key(r) for r in records}
        if keys != keys_first:
            raise ValueError(
                f"{name} and {first} hold different problems ({len(keys - keys_first)} only in {name}, "
                f"{len(keys_first - keys)} only in {first}): pass folders of runs on the same --data and --limit"
            )


def samples_per_problem(records: list[dict]) -> int:
    """K: the fewest samples a problem of the folder has (pass@k needs k <= K)."""
    return min((len(sample_list(r)) for r in records), default=0)


def passk_markdown(runs: dict[str, list[dict]], ks: list[int] | None = None, level: float = CI_LEVEL) -> str:
    """The pass@k table with a line on how to read it; ``ks`` defaults to powers of two up to the largest K."""
    names = list(runs)
    letters = string.ascii_uppercase
    if len(names) > len(letters):
        raise ValueError(f"{len(names)} folders: pass at most {len(letters)}")
    k_of = {name: samples_per_problem(records) for name, records in runs.items()}
    curves = {name: pass_at_k_curve(records) for name, records in runs.items()}
    ks = ks or _powers_of_two_up_to(max(k_of.values()))
    base = names[0]
    header = [f"{letters[i]}: {name}" for i, name in enumerate(names)]
    header += [f"{letters[i]} - A, {level_label(level)} CI" for i in range(1, len(names))]
    rows = []
    for k in ks:
        cells = [format_pct(curves[name][k - 1]) if k <= k_of[name] else "n/a" for name in names]
        for name in names[1:]:
            if k > min(k_of[name], k_of[base]):
                cells.append("n/a")
                continue
            diff = compare_pass_at_k(runs[base], runs[name], k, level=level)
            cells.append(f"{100 * diff['difference']:+.1f} points {format_ci(diff['ci'])}")
        rows.append([k, *cells])
    counts = ", ".join(f"{letters[i]} {k_of[name]}" for i, name in enumerate(names))
    lines = [
        table(["k", *header], rows),
        "",
        f"pass@k over the same {len(runs[base])} problems (unbiased estimator; n/a: k above the folder's samples per "
        f"problem). Samples per problem: {counts}.",
    ]
    if len(names) > 1:
        lines.append(
            f"Differences in points with their {level_label(level)} interval: paired bootstrap over the problems "
            f"({BOOTSTRAP_RESAMPLES:,} resamples), as `eval compare`."
        )
    return "\n".join(lines) + "\n"


def plot_pass_at_k(runs: dict[str, list[dict]], path: str | Path, title: str = "pass@k") -> Path:
    """Every folder's pass@k for k = 1..K as a line against k (log-2 axis), one line per folder."""
    # matplotlib: about a second to import, for the plot alone; a bare Figure draws with Agg (as plot_lengths)
    from matplotlib.figure import Figure
    from matplotlib.ticker import ScalarFormatter

    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.subplots()
    for letter, (name, records) in zip(string.ascii_uppercase, runs.items(), strict=False):
        curve = pass_at_k_curve(records)
        ax.plot(range(1, len(curve) + 1), [100 * x for x in curve], marker="o", markersize=3, label=f"{letter}: {name}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())  # 1, 2, 4, ... rather than 2^0, 2^1, ...
    ax.set_xlabel("k (samples drawn)")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(title, fontsize=10, wrap=True)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return Path(path)
