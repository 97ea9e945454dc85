"""Human-readable results (markdown summary, before/after comparison, PNG of lengths by correctness) and ``table``,
the one way leash writes a markdown table.

>>> print(format_pct(0.5), format_ci([0.25, 0.75]))
50.0% [25.0, 75.0]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from eval.metrics import level_label, sample_list

MAX_LISTED_TIMEOUTS = 20  # summary.md lists this many timed-out samples; results.json holds them all


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table.

    >>> print(table(["run", "accuracy"], [["a", "0.5"], ["b", ""]]))
    | run | accuracy |
    |---|---|
    | a | 0.5 |
    | b |  |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def format_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def format_ci(ci) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def ci_label(block: dict) -> str:
    """``95% CI`` for a results (or comparison) dict, from the level its interval was computed at.

    >>> ci_label({"ci": [0.1, 0.2], "ci_level": 0.9})
    '90% CI'
    """
    return f"{level_label(block['ci_level'])} CI"


def format_timeouts(timeouts: list[dict], limit: int = MAX_LISTED_TIMEOUTS) -> str:
    """Timed-out samples as ``problem/sample`` pairs, the first ``limit`` of them.

    >>> format_timeouts([{"index": 3, "sample": 0}, {"index": 7, "sample": 2}], limit=1)
    '3/0 (and 1 more)'
    """
    listed = ", ".join(f"{t['index']}/{t['sample']}" for t in timeouts[:limit])
    return listed + (f" (and {len(timeouts) - limit} more)" if len(timeouts) > limit else "")


def _length_cell(stats: dict | None) -> str:
    return "n/a" if stats is None else f"{stats['mean']:.0f} / {stats['median']:.0f} (n={stats['n']})"


def format_points(x: float | None) -> str:
    """A difference of two shares in percentage points.

    >>> format_points(0.04), format_points(-0.015), format_points(None)
    ('+4.0 points', '-1.5 points', 'n/a')
    """
    return "n/a" if x is None else f"{100 * x:+.1f} points"


def lenient_rows(results: dict) -> list[list[str]]:
    """The lenient accuracy and the gap lenient - strict, as summary.md rows (none for results without them)."""
    if results.get("lenient_accuracy") is None:
        return []
    rule = results.get("lenient_rule") or "lenient rule"
    rows = [
        [
            f"lenient accuracy: {rule}",
            f"{format_pct(results['lenient_accuracy'])} {format_ci(results['lenient_ci'])} {ci_label(results)}",
        ],
        [
            "lenient - strict gap",
            f"{format_points(results['lenient_gap'])} (right only by the lenient rule: "
            f"{results['lenient_only_correct']}; only by the strict one: {results['strict_only_correct']})",
        ],
    ]
    if results.get("lenient_from"):
        rows.append(["lenient answer read from", ", ".join(f"{k}: {v}" for k, v in results["lenient_from"].items())])
    if results.get("lenient_timeout_rate"):
        rows.append(["lenient scoring timeout rate (wrong)", format_pct(results["lenient_timeout_rate"])])
    return rows


def summary_markdown(results: dict) -> str:
    """A short markdown report of one results.json dict."""
    lengths, accuracy = results["length_tokens"], format_pct(results["accuracy"])
    rows = [
        ["accuracy", f"{accuracy} {format_ci(results['ci'])} {ci_label(results)} ({results['ci_method']})"],
        ["problems (n) / samples", f"{results['n']} / {results['n_samples']}"],
        ["n_correct", results["n_correct"]],
        *lenient_rows(results),
        *([f"pass@{k}", format_pct(v)] for k, v in results.get("pass_at_k", {}).items()),
        ["tokens, correct (mean / median)", _length_cell(lengths["correct"])],
        ["tokens, wrong (mean / median)", _length_cell(lengths["wrong"])],
        [
            "truncated share, correct / wrong",
            f"{format_pct(results['truncated_share']['correct'])} / {format_pct(results['truncated_share']['wrong'])}",
        ],
        ["format rate (one final answer found)", format_pct(results["format_rate"])],
        ["empty-answer rate", format_pct(results["empty_rate"])],
        ["truncation rate (no EOS within budget)", format_pct(results["truncation_rate"])],
        ["answer extraction", ", ".join(f"{k}: {v}" for k, v in results["reasons"].items())],
    ]
    if results.get("timeout_rate"):
        rows += [
            ["scoring timeout rate (scored as wrong)", format_pct(results["timeout_rate"])],
            ["timed out (problem/sample)", format_timeouts(results["timeouts"])],
        ]
    lines = [f"# {results['task']}: {accuracy} correct", "", table(["metric", "value"], rows)]
    for field in ("subject", "level"):
        groups = results.get(f"by_{field}")
        if groups:
            by_group = ([name, g["n"], format_pct(g["accuracy"]), format_ci(g["ci"])] for name, g in groups.items())
            lines += ["", table([field, "n", "accuracy", ci_label(results)], by_group)]
    settings = {k: results.get(k) for k in ("model", "adapter", "data", "max_new_tokens", "temperature", "seed")}
    known = [f"{k}={v}" for k, v in settings.items() if v is not None]
    if known:  # an `eval score` has none of them
        lines += ["", "Settings: " + ", ".join(known)]
    return "\n".join(lines) + "\n"


def compare_markdown(
    name_a: str, results_a: dict, name_b: str, results_b: dict, diff: dict, lenient_diff: dict | None = None
) -> str:
    """A before/after table of accuracy (difference with its interval), lengths, format, truncation and timeout
    rates, and of the lenient accuracy when ``lenient_diff`` is given.
    """

    def row(label, a, b, fmt=format_pct):
        return [label, fmt(a), fmt(b)]

    def mean_len(results, group):
        stats = results["length_tokens"][group]
        return None if stats is None else stats["mean"]

    def tokens(x):
        return "n/a" if x is None else f"{x:.0f}"

    d = diff["difference"]
    rows = [
        row("accuracy", results_a["accuracy"], results_b["accuracy"]),
        row("lenient accuracy", results_a.get("lenient_accuracy"), results_b.get("lenient_accuracy")),
        row("lenient - strict gap", results_a.get("lenient_gap"), results_b.get("lenient_gap"), format_points),
        row("n", results_a["n"], results_b["n"], str),
        row("mean tokens, correct", mean_len(results_a, "correct"), mean_len(results_b, "correct"), tokens),
        row("mean tokens, wrong", mean_len(results_a, "wrong"), mean_len(results_b, "wrong"), tokens),
        row("format rate", results_a["format_rate"], results_b["format_rate"]),
        row("empty-answer rate", results_a["empty_rate"], results_b["empty_rate"]),
        row("truncation rate", results_a["truncation_rate"], results_b["truncation_rate"]),
        row("scoring timeout rate", results_a.get("timeout_rate"), results_b.get("timeout_rate")),
    ]
    lines = [
        table(["metric", f"A: {name_a}", f"B: {name_b}"], rows),
        "",
        f"B - A accuracy: {100 * d:+.1f} points, {ci_label(diff)} {format_ci(diff['ci'])} ({diff['ci_method']}"
        + (f", {diff['n_shared']} shared problems" if diff["n_shared"] else "")
        + ")",
    ]
    if diff["n_shared"] and diff["n_shared"] != max(results_a["n"], results_b["n"]):
        # the difference is over the shared problems only: say which accuracies it is the difference of
        lines.append(
            f"On the {diff['n_shared']} shared problems: A {format_pct(diff['accuracy_a'])}, "
            f"B {format_pct(diff['accuracy_b'])} (the accuracies above are over each run's own problems)"
        )
    if diff["n_shared"]:
        lines.append(f"Problems only A got right: {diff['only_a_correct']}; only B got right: {diff['only_b_correct']}")
    if lenient_diff is None:
        lines.append(
            "B - A lenient accuracy: n/a (a run's samples have no lenient verdict: rerun its `eval run` command in its "
            "folder, or `eval score` its completions, to add it)"
        )
    else:
        lines.append(
            f"B - A lenient accuracy: {format_points(lenient_diff['difference'])}, {ci_label(lenient_diff)} "
            f"{format_ci(lenient_diff['ci'])} ({lenient_diff['ci_method']})"
        )
    return "\n".join(lines) + "\n"


def plot_lengths(records: list[dict], path: str | Path, title: str = "completion length by correctness") -> Path:
    """Length distributions (tokens) of correct vs wrong samples, each normalised to its own count so the shapes
    compare; the x axis stops at the 99th percentile.
    """
    # matplotlib: about a second to import, for this plot alone (the GPU machine has none). A bare Figure needs
    # neither pyplot nor a backend: savefig draws with Agg.
    from matplotlib.figure import Figure

    samples = [s for r in records for s in sample_list(r) if s.get("n_tokens") is not None]
    lengths = np.array([s["n_tokens"] for s in samples])
    x_max = max(1.0, float(np.percentile(lengths, 99)))
    edges = np.linspace(0, x_max, 41)
    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.subplots()
    for label, correct, colour in (("correct", True, "tab:green"), ("wrong", False, "tab:red")):
        values = np.array([s["n_tokens"] for s in samples if bool(s["correct"]) == correct])
        if len(values) == 0:
            continue
        known = [s["truncated"] for s in samples if bool(s["correct"]) == correct and s.get("truncated") is not None]
        beyond = int((values > x_max).sum())
        legend = f"{label}: n={len(values)}, median {np.median(values):.0f}"
        legend += f", truncated {sum(map(bool, known))}" if known else ""
        legend += f", {beyond} beyond axis" if beyond else ""
        ax.hist(np.clip(values, 0, x_max), bins=edges, density=True, alpha=0.5, color=colour, label=legend)
        ax.axvline(float(np.median(values)), color=colour, linestyle="--", linewidth=1)
    ax.set_xlabel("completion length (tokens)")
    ax.set_ylabel("share of samples per token (density)")
    ax.set_title(title, fontsize=10, wrap=True)  # long file names must not run off the figure
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return Path(path)
