"""Draw a judge-lab run (or several side by side): judge score vs share correct vs answer length over steps.

    python -m judge_lab.report runs/judge_lab_judge_b0 runs/judge_lab_checker_b0 --out runs/judge_lab_report

Reads each run's ``steps.jsonl`` (written by ``judge_lab.tracker.LabStepLogger``) and writes ``lab_report.png`` (four
panels: mean judge score, share of answers correct, mean answer length in tokens, tracked answers' log-probability
under the policy) and ``lab_report.md`` (one table per run: per step the mean reward and judge score, correct/n, mean
length, the most frequent answer and the tracked log-probabilities and KL).

>>> steps = [{"step": 1, "n_answers": 2, "n_correct": 1, "mean_reward": 0.5, "mean_judge_score": 5.0,
...           "mean_n_tokens": 10.0, "kl": 0.0, "answers": [{"text": "Answer: 3."}, {"text": "Answer: 3."}],
...           "tracked": {"short": {"logp_policy": -2.0, "logp_ref": -2.0, "kl": 0.0}}}]
>>> print(markdown_table(steps).splitlines()[2])
| 1 | 0.5 | 5 | 1/2 | 10 | 2x `Answer: 3.` | short -2 (ref -2, KL 0) |
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from eval.jsonl import read_jsonl


def read_steps(run_dir: str | Path) -> list[dict]:
    """The per-step records of a run (the after-training tracker line left out); a clear error if there are none."""
    path = Path(run_dir) / "steps.jsonl"
    steps = read_jsonl(path, "pass the output_dir of a judge_lab.train run")
    steps = [s for s in steps if not s.get("after_training")]
    if not steps:
        raise ValueError(f"{path} holds no steps yet: the run logged nothing")
    return steps


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def markdown_table(steps: list[dict]) -> str:
    """One row per step; the most frequent answer shows a collapse onto one short reply."""
    rows = [
        "| step | mean reward | mean judge score | correct | mean tokens | most frequent answer | tracked logp |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in steps:
        texts = Counter(a["text"].strip() for a in s["answers"])
        text, count = texts.most_common(1)[0] if texts else ("", 0)
        short = text.replace("\n", " ").replace("|", "/")[:40]
        tracked = ", ".join(
            f"{name} {_fmt(v['logp_policy'])} (ref {_fmt(v['logp_ref'])}, KL {_fmt(v['kl'])})"
            for name, v in s.get("tracked", {}).items()
        )
        rows.append(
            f"| {s['step']} | {_fmt(s['mean_reward'])} | {_fmt(s.get('mean_judge_score'))} | "
            f"{s['n_correct']}/{s['n_answers']} | {_fmt(s['mean_n_tokens'])} | {count}x `{short}` | {tracked} |"
        )
    return "\n".join(rows)


def draw(runs: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    for name, steps in runs.items():
        x = [s["step"] for s in steps]
        judge = [s.get("mean_judge_score") for s in steps]
        if any(v is not None for v in judge):
            axes[0].plot(x, [float("nan") if v is None else v for v in judge], marker="o", label=name)
        axes[1].plot(x, [s["n_correct"] / s["n_answers"] for s in steps], marker="o", label=name)
        axes[2].plot(
            x,
            [float("nan") if s["mean_n_tokens"] is None else s["mean_n_tokens"] for s in steps],
            marker="o",
            label=name,
        )
        for tracked in steps[0].get("tracked", {}):
            values = [s.get("tracked", {}).get(tracked, {}).get("logp_policy", float("nan")) for s in steps]
            axes[3].plot(x, values, marker=".", label=f"{name}: {tracked}")
    titles = [
        "mean judge score (0-10)",
        "share of answers correct",
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_line(name: str, steps: list[dict]) -> str:
    first, last = steps[0], steps[-1]
    judge = f", judge score {_fmt(first.get('mean_judge_score'))} -> {_fmt(last.get('mean_judge_score'))}"
    return (
        f"- **{name}**: steps {first['step']}-{last['step']}; correct {first['n_correct']}/{first['n_answers']} -> "
        f"{last['n_correct']}/{last['n_answers']}; mean length {_fmt(first['mean_n_tokens'])} -> "
        f"{_fmt(last['mean_n_tokens'])} tokens" + (judge if last.get("mean_judge_score") is not None else "")
    )


def write_report(run_dirs: list[str | Path], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``lab_report.png`` and ``lab_report.md`` for the runs to ``out_dir``; returns both paths."""
    runs = {Path(d).name: read_steps(d) for d in run_dirs}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png, md = out / "lab_report.png", out / "lab_report.md"
    draw(runs, png)
    parts = ["# Judge lab report", "", f"![judge score, share correct, length, tracked log p]({png.name})", ""]
    parts += [summary_line(name, steps) for name, steps in runs.items()]
    for name, steps in runs.items():
        parts += ["", f"## {name}", "", markdown_table(steps)]
    md.write_text("\n".join(parts) + "\n")
    return png, md


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="output_dir of one or more judge_lab.train runs")
    parser.add_argument("--out", required=True, help="folder for lab_report.png and lab_report.md")
    args = parser.parse_args(argv)
    png, md = write_report(args.runs, args.out)
    print(f"wrote {png} and {md}")


if __name__ == "__main__":
    main()
