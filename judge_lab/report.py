"""Draw a judge-lab run (or several side by side): judge score vs share correct vs the monitors' reward-correctness gap
vs answer length over steps.

    python -m judge_lab.report runs/judge_lab_judge_b0 runs/judge_lab_checker_b0 --out runs/judge_lab_report

Reads each run's ``steps.jsonl`` and ``log.jsonl``; writes ``lab_report.png`` and ``lab_report.md`` (a table per run).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from cpu_lab.report import number, pyplot, save_figure, table, write_markdown
from eval.jsonl import read_jsonl

GAP = "monitor/reward_correctness_gap"  # recipes.monitors: mean of (total reward - 1 if correct else 0) in the step


def read_steps(run_dir: str | Path) -> list[dict]:
    """The per-step records of a run (the after-training tracker line left out); a clear error if there are none."""
    path = Path(run_dir) / "steps.jsonl"
    steps = read_jsonl(path, "pass the output_dir of a judge-lab run (python -m recipes.grpo)")
    steps = [s for s in steps if not s.get("after_training")]
    if not steps:
        raise ValueError(f"{path} holds no steps yet: the run logged nothing")
    return steps


def read_monitor_log(run_dir: str | Path) -> dict[int, dict]:
    """The recipe's training log lines by step (``log.jsonl``: the monitors' values); empty when there is none."""
    path = Path(run_dir) / "log.jsonl"
    if not path.exists():
        return {}
    return {r["step"]: r for r in read_jsonl(path) if "reward" in r}


def _fmt(x) -> str:
    return number(x, ".3g", "-")  # three significant digits: log-probabilities and scores of any size


def markdown_table(steps: list[dict], monitors: dict[int, dict] | None = None) -> str:
    """One row per step; the most frequent answer shows a collapse onto one short reply.

    >>> steps = [{"step": 1, "n_answers": 2, "n_correct": 1, "mean_reward": 0.5, "mean_judge_score": 5.0,
    ...           "mean_n_tokens": 10.0, "kl": 0.0, "answers": [{"text": "Answer: 3."}, {"text": "Answer: 3."}],
    ...           "tracked": {"short": {"logp_policy": -2.0, "logp_ref": -2.0, "kl": 0.0}}}]
    >>> print(markdown_table(steps, {1: {GAP: 0.25}}).splitlines()[2])
    | 1 | 0.5 | 5 | 1/2 | 0.25 | 10 | 2x `Answer: 3.` | short -2 (ref -2, KL 0) |
    """
    monitors = monitors or {}
    header = [
        *("step", "mean reward", "mean judge score", "correct", "reward-correctness gap", "mean tokens"),
        *("most frequent answer", "tracked logp"),
    ]
    rows = []
    for s in steps:
        texts = Counter(a["text"].strip() for a in s["answers"])
        text, count = texts.most_common(1)[0] if texts else ("", 0)
        short = text.replace("\n", " ").replace("|", "/")[:40]
        tracked = ", ".join(
            f"{name} {_fmt(v['logp_policy'])} (ref {_fmt(v['logp_ref'])}, KL {_fmt(v['kl'])})"
            for name, v in s.get("tracked", {}).items()
        )
        rows.append(
            [
                *(
                    s["step"],
                    _fmt(s["mean_reward"]),
                    _fmt(s.get("mean_judge_score")),
                    f"{s['n_correct']}/{s['n_answers']}",
                ),
                *(_fmt(monitors.get(s["step"], {}).get(GAP)), _fmt(s["mean_n_tokens"]), f"{count}x `{short}`", tracked),
            ]
        )
    return table(header, rows)


def _nan(v) -> float:
    return float("nan") if v is None else v


def draw(runs: dict[str, list[dict]], monitors: dict[str, dict[int, dict]], path: Path) -> None:
    fig, axes = pyplot().subplots(1, 5, figsize=(25, 4.5))
    for name, steps in runs.items():
        x = [s["step"] for s in steps]
        judge = [s.get("mean_judge_score") for s in steps]
        if any(v is not None for v in judge):
            axes[0].plot(x, [_nan(v) for v in judge], marker="o", label=name)
        axes[1].plot(x, [s["n_correct"] / s["n_answers"] for s in steps], marker="o", label=name)
        gap = [monitors[name].get(s["step"], {}).get(GAP) for s in steps]
        if any(v is not None for v in gap):
            axes[2].plot(x, [_nan(v) for v in gap], marker="o", label=name)
        axes[3].plot(
            x,
            [_nan(s["mean_n_tokens"]) for s in steps],
            marker="o",
            label=name,
        )
        for tracked in steps[0].get("tracked", {}):
            values = [s.get("tracked", {}).get(tracked, {}).get("logp_policy", float("nan")) for s in steps]
            axes[4].plot(x, values, marker=".", label=f"{name}: {tracked}")
    titles = [
        "mean judge score (0-10)",
        "share of answers correct",
        "monitor/reward_correctness_gap (reward - correct)",
        "mean answer length (tokens)",
        "tracked answers: log p under the policy",
    ]
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    axes[1].set_ylim(-0.05, 1.05)
    save_figure(fig, path, dpi=110)


def summary_line(name: str, steps: list[dict], monitors: dict[int, dict] | None = None) -> str:
    first, last = steps[0], steps[-1]
    monitors = monitors or {}
    judge = f", judge score {_fmt(first.get('mean_judge_score'))} -> {_fmt(last.get('mean_judge_score'))}"
    gaps = [monitors.get(s["step"], {}).get(GAP) for s in (first, last)]
    gap = f", reward-correctness gap {_fmt(gaps[0])} -> {_fmt(gaps[1])}" if any(g is not None for g in gaps) else ""
    return (
        f"- **{name}**: steps {first['step']}-{last['step']}; correct {first['n_correct']}/{first['n_answers']} -> "
        f"{last['n_correct']}/{last['n_answers']}; mean length {_fmt(first['mean_n_tokens'])} -> "
        f"{_fmt(last['mean_n_tokens'])} tokens" + (judge if last.get("mean_judge_score") is not None else "") + gap
    )


def write_report(run_dirs: list[str | Path], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``lab_report.png`` and ``lab_report.md`` for the runs to ``out_dir``; returns both paths."""
    runs = {Path(d).name: read_steps(d) for d in run_dirs}
    monitors = {Path(d).name: read_monitor_log(d) for d in run_dirs}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png, md = out / "lab_report.png", out / "lab_report.md"
    draw(runs, monitors, png)
    parts = ["# Judge lab report", "", f"![judge score, share correct, gap, length, tracked log p]({png.name})", ""]
    parts += [summary_line(name, steps, monitors[name]) for name, steps in runs.items()]
    for name, steps in runs.items():
        parts += ["", f"## {name}", "", markdown_table(steps, monitors[name])]
    return png, write_markdown(md, parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m judge_lab.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="output_dir of one or more judge-lab runs (recipes.grpo)")
    parser.add_argument("--out", required=True, help="folder for lab_report.png and lab_report.md")
    args = parser.parse_args(argv)
    png, md = write_report(args.runs, args.out)
    print(f"wrote {png} and {md}")


if __name__ == "__main__":
    main()
