"""The long-answer lab: can GRPO's per-answer length normalisation make wrong answers longer than Dr. GRPO's?

GRPO divides each answer's token loss by its own length, so a long wrong answer is pushed down less per token than a
short one; the CPU lab's 32-token answers leave no room for that to show. Here problems of 3-6 operations have worked
solutions of 60-120 tokens and a 160-token budget, and ``grpo`` and ``dr_grpo`` run from a warm start trained on them.

    python -m cpu_lab.long_answers prepare             # the warm start (cached) and runs/lab_long/data
    python -m cpu_lab.long_answers run --seeds 0 1     # both configs x seeds, then the report and the plot
    python -m cpu_lab.long_answers report              # re-read finished runs: report.md and lengths.png

Measured times and the results are in docs/cpu_lab_long_answers.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

from cpu_lab.matrix import run_matrix
from cpu_lab.problems import GAIN, ITEMS, LOSS, NAMES, Difficulty
from cpu_lab.report import mean_by_step, mean_std_text, pyplot, save_figure, table, write_markdown
from cpu_lab.warmstart import WarmStartSettings, prepare_lab
from eval.jsonl import read_jsonl

logger = logging.getLogger(__name__)

ROOT = Path("runs/lab_long")  # the configs read runs/lab_long/warmstart and runs/lab_long/data/*.jsonl
CONFIG_DIR = Path(__file__).resolve().parents[1] / "recipes" / "configs" / "lab_long"
CONFIGS = [CONFIG_DIR / "grpo_lab_long_grpo.yaml", CONFIG_DIR / "grpo_lab_long_dr_grpo.yaml"]
# The verbs of the solution lines, in the order of the question's (cpu_lab.problems.GAIN / LOSS): one token or two.
SHORT_GAIN = ["buys", "finds", "gets", "is given"]
SHORT_LOSS = ["gives away", "loses", "sells", "uses"]
LENGTH_KEYS = {
    "correct": "monitor/length_correct",
    "wrong": "monitor/length_wrong",
    "truncated": "monitor/length_truncated",
}
TRUNCATED_RATE = "monitor/truncated_rate"
WINDOW = 0.25  # "start" and "end" of a run: its first and last quarter of logged steps


@dataclass(frozen=True)
class LongDifficulty(Difficulty):
    """3-6 operations on amounts of 1-9 with running totals at most ``max_total``, one solution line per operation.

    Small numbers keep a solution's length nearly linear in its operations: 60-120 tokens for 3-6 of them.

    >>> p = LongDifficulty().make_problem(random.Random(3))
    >>> print(p["question"])
    Ava has 9 stamps. Ava gives away 8 stamps. Then Ava gets 8 more stamps. Then Ava is given 4 more stamps. Then Ava is given 9 more stamps. How many stamps does Ava have now?
    >>> print(p["answer"])
    Ava starts with 9 stamps.
    Ava gives away 8: 9 - 8 = 1.
    Ava gets 8: 1 + 8 = 9.
    Ava is given 4: 9 + 4 = 13.
    Ava is given 9: 13 + 9 = 22.
    So Ava has 22 stamps now.
    #### 22
    """  # noqa: E501

    min_steps: int = 3
    max_steps: int = 6
    max_number: int = 9
    max_total: int = 99  # an addition that would pass it becomes a subtraction
    story: str = "long_worked"  # names the generator in the warm start's settings hash

    def __post_init__(self):
        super().__post_init__()
        if self.max_total <= self.max_number:
            raise ValueError(
                f"LongDifficulty needs max_total > max_number, got {self.max_total} <= {self.max_number}: "
                "raise max_total"
            )

    def make_problem(self, rng: random.Random) -> dict:
        """One problem: ``question``, ``answer`` (a worked line per operation, then ``#### N``) and ``final``."""
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        total = rng.randint(1, self.max_number)
        question, solution = [f"{name} has {total} {item}."], [f"{name} starts with {total} {item}."]
        for step in range(rng.randint(self.min_steps, self.max_steps)):
            subtract = total >= 1 and (total + 1 > self.max_total or rng.random() < 0.5)
            amount = rng.randint(
                1, min(total, self.max_number) if subtract else min(self.max_number, self.max_total - total)
            )
            verb = rng.randrange(len(GAIN))
            question.append(
                f"{'Then ' if step else ''}{name} {(LOSS if subtract else GAIN)[verb].format(n=amount, item=item)}."
            )
            new_total = total - amount if subtract else total + amount
            solution.append(
                f"{name} {(SHORT_LOSS if subtract else SHORT_GAIN)[verb]} {amount}: "
                f"{total} {'-' if subtract else '+'} {amount} = {new_total}."
            )
            total = new_total
        question.append(f"How many {item} does {name} have now?")
        solution.append(f"So {name} has {total} {item} now.")
        return {"question": " ".join(question), "answer": "\n".join([*solution, f"#### {total}"]), "final": str(total)}


# The lab's warm start (same model, tokenizer recipe, SFT and stopping rule) on the long problems; its greedy checks
# may write up to 160 tokens, as GRPO may.
WARMSTART = WarmStartSettings(difficulty=LongDifficulty(), max_new_tokens=160)


def prepare(seed: int = 0, root: str | Path = ROOT) -> dict[str, Path]:
    """The warm start for ``seed`` (cached), linked at ``<root>/warmstart``, and the GRPO data under ``<root>/data``."""
    return prepare_lab(replace(WARMSTART, seed=seed), root=root)


def run(seeds: list[int], steps: int, out: str | Path, jobs: int = 2, warm_start_seed: int = 0) -> Path:
    """Both configs x ``seeds`` (finished runs are skipped), then the report; returns the report's path."""
    prepare(warm_start_seed)
    run_matrix([str(c) for c in CONFIGS], seeds, out, ["--max_steps", str(steps)], jobs=jobs)
    return write_report(out)


# ----------------------------------------------------------------------------------------------- reading the runs
def _number(value) -> float | None:
    """A logged value as a float; None for a missing or NaN one (an empty class: no correct answer in that step)."""
    return None if value is None or value != value else float(value)


def length_curves(folder: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Per logged step, the mean length of correct, wrong and truncated sampled answers and the truncated share;
    steps where a class was empty are left out of its curve."""
    keys = {**LENGTH_KEYS, "truncated_rate": TRUNCATED_RATE}
    curves: dict[str, list[tuple[int, float]]] = {name: [] for name in keys}
    for row in read_jsonl(Path(folder) / "log.jsonl"):
        for name, key in keys.items():
            if _number(row.get(key)) is not None and "step" in row:
                curves[name].append((int(row["step"]), float(row[key])))
    return curves


def _window_mean(points: list[tuple[int, float]], start: bool) -> float | None:
    # round, not cpu_lab.matrix's ceil: the figures in docs/cpu_lab_long_answers.md were measured with this window
    if not points:
        return None
    n = max(1, round(len(points) * WINDOW))
    return statistics.fmean(v for _, v in (points[:n] if start else points[-n:]))


def excess_tokens(folder: str | Path, when: str) -> dict[str, float | None]:
    """Mean tokens beyond the gold solution of the greedy held-out answers of ``eval_<when>``, wrong and correct:
    wrong answers belong to longer problems, so only the excess shows a length bias."""
    folder = Path(folder)
    samples_path = folder / f"eval_{when}" / "samples.jsonl"
    if not samples_path.exists():
        return {"wrong": None, "correct": None}
    from transformers import AutoTokenizer  # ~3 s that the lab's --help and its argument errors do not pay

    config = json.loads((folder / "resolved_config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(config["model_name_or_path"])
    gold = {row["question"]: row["answer"] for row in read_jsonl(config["eval_data"])}
    excess: dict[str, list[int]] = {"wrong": [], "correct": []}
    for sample in read_jsonl(samples_path):
        solution_tokens = len(tokenizer(gold[sample["question"]])["input_ids"])
        excess["correct" if sample["correct"] else "wrong"].append(sample["n_tokens"] - solution_tokens)
    return {name: statistics.fmean(values) if values else None for name, values in excess.items()}


def summarize(folder: str | Path) -> dict:
    """One run's numbers: each curve's start and end means, held-out accuracy and excess tokens before and after."""
    folder = Path(folder)
    summary = {}
    for name, points in length_curves(folder).items():
        summary[f"{name}_start"], summary[f"{name}_end"] = _window_mean(points, True), _window_mean(points, False)
    report = json.loads((folder / "report.json").read_text()) if (folder / "report.json").exists() else {}
    for when in ("before", "after"):
        result = report.get(when) or {}
        summary[f"accuracy_{when}"] = result.get("accuracy")
        summary[f"excess_wrong_{when}"] = excess_tokens(folder, when)["wrong"]
    summary["seconds"] = report.get("seconds")
    return summary


def _runs(out: Path) -> dict[str, dict[int, Path]]:
    runs: dict[str, dict[int, Path]] = {}
    for config in CONFIGS:
        for folder in sorted((out / config.stem).glob("seed*")):
            if (folder / "log.jsonl").exists():
                runs.setdefault(config.stem, {})[int(folder.name.removeprefix("seed"))] = folder
    return runs


def report_table(runs: dict[str, dict[int, Path]]) -> str:
    """The markdown table: per config, mean ± sample std over seeds of each number (start -> end of training)."""
    rows = [
        ("sampled wrong answers, tokens", "wrong", 1),
        ("sampled correct answers, tokens", "correct", 1),
        ("truncated share, %", "truncated_rate", 100),
    ]
    header = [
        *("config", "seeds", *(f"{label}: start → end" for label, _, _ in rows)),
        *(
            "greedy held-out wrong answers, tokens beyond the gold solution: before → after",
            "held-out accuracy, %: before → after",
        ),
    ]
    lines = []
    for config, by_seed in runs.items():
        summaries = [summarize(folder) for folder in by_seed.values()]
        cells = []
        for _, name, scale in rows:
            start = [s[f"{name}_start"] * scale if s[f"{name}_start"] is not None else None for s in summaries]
            end = [s[f"{name}_end"] * scale if s[f"{name}_end"] is not None else None for s in summaries]
            cells.append(f"{mean_std_text(start, '.1f')} → {mean_std_text(end, '.1f')}")
        greedy = [mean_std_text((s[f"excess_wrong_{w}"] for s in summaries), ".1f") for w in ("before", "after")]
        accuracy = [
            mean_std_text(
                (100 * s[f"accuracy_{w}"] if s[f"accuracy_{w}"] is not None else None for s in summaries), ".1f"
            )
            for w in ("before", "after")
        ]
        lines.append([config, ", ".join(map(str, by_seed)), *cells, " → ".join(greedy), " → ".join(accuracy)])
    return table(header, lines)


def paired_difference(runs: dict[str, dict[int, Path]], name: str = "wrong") -> dict[int, list[tuple[int, float]]]:
    """Per seed and step: ``name`` under grpo minus under dr_grpo; the same seed draws the same prompts, so the
    step-to-step mix of easy and hard problems (±10 tokens) cancels."""
    grpo, dr_grpo = (runs.get(config.stem, {}) for config in CONFIGS)
    differences = {}
    for seed in sorted(set(grpo) & set(dr_grpo)):
        other = dict(length_curves(dr_grpo[seed])[name])
        differences[seed] = [
            (step, value - other[step]) for step, value in length_curves(grpo[seed])[name] if step in other
        ]
    return differences


def paired_summary(runs: dict[str, dict[int, Path]], name: str = "wrong") -> str:
    """``grpo - dr_grpo`` of ``name`` over the first and the last quarter of the steps, mean ± std over seeds."""
    differences = paired_difference(runs, name).values()
    start = [_window_mean(points, True) for points in differences]
    end = [_window_mean(points, False) for points in differences]
    return f"{mean_std_text(start, '.1f')} → {mean_std_text(end, '.1f')} tokens ({len(start)} seed(s))"


def _plot_seeds_and_mean(ax, per_seed: list[list[tuple[int, float]]], colour, label: str, smooth: int, alpha: float):
    """One thin line per seed, and a thick one: the mean over the seeds at each step, smoothed over ``smooth`` steps."""
    for points in per_seed:
        ax.plot(*zip(*points, strict=True), color=colour, alpha=alpha, lw=0.8) if points else None
    steps, means = mean_by_step(per_seed)
    smoothed = [statistics.fmean(means[max(0, i - smooth + 1) : i + 1]) for i in range(len(means))]
    ax.plot(steps, smoothed, color=colour, lw=2, label=label)


def plot_lengths(runs: dict[str, dict[int, Path]], path: str | Path, smooth: int = 5) -> Path:
    """Lengths of correct and wrong answers, the truncated share and the paired grpo - dr_grpo difference per step."""
    panels = [
        ("correct", "correct answers: mean tokens"),
        ("wrong", "wrong answers: mean tokens"),
        ("truncated_rate", "truncated share (cut at the budget)"),
    ]
    fig, axes = pyplot().subplots(1, 4, figsize=(18, 3.8))
    for colour, (config, by_seed) in zip(("tab:red", "tab:blue", "tab:green"), runs.items(), strict=False):
        curves = [length_curves(folder) for folder in by_seed.values()]
        for ax, (name, title) in zip(axes[:3], panels, strict=True):
            _plot_seeds_and_mean(
                ax, [curve[name] for curve in curves], colour, f"{config} ({len(curves)} seed(s))", smooth, alpha=0.25
            )
            ax.set(title=title, xlabel="GRPO step")
    differences = paired_difference(runs)
    if differences:
        _plot_seeds_and_mean(
            axes[3], list(differences.values()), "black", f"mean of {len(differences)} seed(s)", smooth, alpha=0.3
        )
        axes[3].legend(fontsize=7)
    axes[3].axhline(0, color="grey", lw=0.8)
    axes[3].set(title="wrong answers: grpo minus dr_grpo, same seed", xlabel="GRPO step", ylabel="tokens")
    axes[0].legend(fontsize=7)
    return save_figure(fig, path)


def write_report(out: str | Path) -> Path:
    """``<out>/report.md`` (the table, each run's seconds) and ``<out>/lengths.png``; returns the report's path."""
    out = Path(out)
    runs = _runs(out)
    if not runs:
        raise FileNotFoundError(f"no runs under {out}: expected <config>/seed<k>/log.jsonl (run `run` first)")
    png = plot_lengths(runs, out / "lengths.png")
    seconds = [
        f"{config} seed {seed}: {summarize(folder)['seconds']} s"
        for config, by_seed in runs.items()
        for seed, folder in by_seed.items()
    ]
    text = [
        "# Long-answer lab: GRPO vs Dr. GRPO answer lengths",
        "",
        f"Start = first {WINDOW:.0%} of the logged steps, end = last {WINDOW:.0%}; mean ± sample std over seeds.",
        "",
        report_table(runs),
        "",
        f"Wrong sampled answers, grpo minus dr_grpo for the same seed (same prompts), start → end: "
        f"{paired_summary(runs)}.",
        "",
        f"![lengths]({png.name})",
        "",
        "Wall time per run (evaluations included): " + "; ".join(seconds),
    ]
    return write_markdown(out / "report.md", text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cpu_lab.long_answers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="the warm start (cached) and the GRPO data under runs/lab_long")
    prep.add_argument("--seed", type=int, default=0)
    go = sub.add_parser("run", help="both configs x seeds, then the report")
    go.add_argument("--seeds", nargs="+", type=int, default=[0])
    go.add_argument("--steps", type=int, default=80)
    go.add_argument("--jobs", type=int, default=4, help="runs at once, each its own process")
    go.add_argument("--out", default=str(ROOT / "matrix"))
    go.add_argument("--warm-start-seed", type=int, default=0)
    rep = sub.add_parser("report", help="re-read finished runs: report.md and lengths.png")
    rep.add_argument("--out", default=str(ROOT / "matrix"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.monotonic()
    if args.command == "prepare":
        paths = prepare(args.seed)
        record = json.loads((paths["model"] / "warmstart.json").read_text())
        print(
            f"warm start: {paths['model']} (step {record['steps']}, validation accuracy "
            f"{record['validation_accuracy']} at the stop, held-out accuracy {record['heldout_accuracy']}, "
            f"{record['seconds']} s when trained); GRPO data: {paths['train']}, {paths['heldout']}"
        )
    else:
        if args.command == "run" and (args.steps < 1 or args.jobs < 1):
            parser.error(f"--steps and --jobs must be >= 1, got {args.steps} and {args.jobs}")
        path = (
            run(args.seeds, args.steps, args.out, args.jobs, args.warm_start_seed)
            if args.command == "run"
            else write_report(args.out)
        )
        print(path.read_text())
        print(f"report: {path}")
    print(f"{args.command} took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
