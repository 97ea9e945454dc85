"""The over-optimisation experiment's report (``report.md``, ``overoptimisation.png``) from its finished runs."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path

from cpu_lab.report import mean_std_text, number, pyplot, save_figure, table, write_markdown
from eval.probe_matrix import reward_model_scores
from reward_model_lab.kl import CURVE_FILE, read_rows
from reward_model_lab.settings import CHECKER, Settings, arms
from rewards.reward_model import RewardModelReward

LAB_INSTRUCTION = "End with #### and the number."  # eval.tasks.TASKS["lab"].instruction: the prompt the RM reads
GAP = "monitor/reward_correctness_gap"  # recipes.monitors: training reward minus the checker's verdict, per window


def finished_runs(out: Path, settings: Settings) -> dict[str, list[Path]]:
    """{arm: the folders of its runs that reached ``settings.steps``}; a run still in progress is left out."""
    finished = {}
    for arm, _ in arms(settings):
        folders = []
        for seed in settings.seeds:
            path = out / arm / f"seed{seed}" / CURVE_FILE
            rows = read_rows(path) if path.exists() else []
            if rows and rows[-1]["step"] == settings.steps:
                folders.append(path.parent)
        if folders:
            finished[arm] = folders
    return finished


def read_curves(out: Path, settings: Settings) -> dict[str, list[list[dict]]]:
    """{arm: one curve (list of rows) per seed whose run reached ``settings.steps``}."""
    return {arm: [read_rows(f / CURVE_FILE) for f in folders] for arm, folders in finished_runs(out, settings).items()}


def read_gaps(out: Path, settings: Settings) -> dict[str, list[dict[int, float]]]:
    """{arm: per finished run, {step: the monitors' reward-correctness gap}} from the run's ``log.jsonl``."""
    return {
        arm: [{r["step"]: r[GAP] for r in read_rows(f / "log.jsonl") if r.get(GAP) is not None} for f in folders]
        for arm, folders in finished_runs(out, settings).items()
    }


def mean_gap(per_seed: list[dict[int, float]], step: int) -> float | None:
    """Mean over seeds of the gap logged at ``step`` (None where no seed logged one)."""
    values = [g[step] for g in per_seed if step in g]
    return statistics.fmean(values) if values else None


def mean_curve(runs: list[list[dict]], key: str) -> list[float]:
    """Mean over seeds at each evaluation (curves of one arm share their evaluation steps)."""
    return [statistics.fmean(run[i][key] for run in runs) for i in range(min(len(r) for r in runs))]


def std_curve(runs: list[list[dict]], key: str) -> list[float]:
    """Standard deviation over seeds at each evaluation (0 with one seed)."""
    return [statistics.stdev(r[i][key] for r in runs) if len(runs) > 1 else 0.0 for i in range(min(map(len, runs)))]


def plot(curves: dict[str, list[list[dict]]], gaps: dict[str, list[dict[int, float]]], settings: Settings, path: Path):
    """Proxy reward and true accuracy against sqrt(KL), sqrt(KL) and the monitors' gap by step, per arm (mean ± std
    over its finished seeds)."""
    fig, axes = pyplot().subplots(1, 4, figsize=(20, 4))
    for arm, runs in curves.items():
        x = mean_curve(runs, "rm/sqrt_kl")
        for ax, key in zip(axes[:2], ("rm/proxy_reward", "rm/true_accuracy"), strict=True):
            ax.errorbar(x, mean_curve(runs, key), yerr=std_curve(runs, key), marker="o", capsize=2, label=arm)
        axes[2].errorbar(
            [row["step"] for row in runs[0][: len(x)]],
            x,
            yerr=std_curve(runs, "rm/sqrt_kl"),
            marker="o",
            capsize=2,
            label=arm,
        )
        logged = sorted({step for g in gaps[arm] for step in g})
        axes[3].plot(logged, [mean_gap(gaps[arm], step) for step in logged], marker=".", label=arm)
    titles = (
        "proxy reward (reward model)",
        "true held-out accuracy (checker, greedy)",
        "the leash: sqrt KL by step",
        "monitor/reward_correctness_gap (training batches)",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xlabel("sqrt(KL(policy || warm start))" if ax in axes[:2] else "GRPO step")
        ax.set_title(title)
        ax.legend(fontsize=8)
    axes[2].set_ylabel("sqrt(KL)")
    finished = ", ".join(f"{arm} {len(runs)}" for arm, runs in curves.items())
    fig.suptitle(f"mean ± std over the finished seeds (of {len(settings.seeds)}): {finished}", fontsize=9)
    return save_figure(fig, path, dpi=110)


def write_report(out: Path, settings: Settings, paths: dict, prepared_s: float | None, total_s: float) -> Path:
    """``report.md`` (the tables and the probes), ``overoptimisation.png`` and ``probes.json`` in ``out``."""
    curves = read_curves(out, settings)
    gaps = read_gaps(out, settings)
    plot(curves, gaps, settings, out / "overoptimisation.png")
    rm_report = json.loads((paths["rm"] / "report.json").read_text())
    lines = [
        "# The leash, measured: GRPO against a learned reward model (CPU lab)",
        "",
        f"Command: `python -m reward_model_lab.overoptimisation` with settings `{json.dumps(asdict(settings))}`",
        "",
        f"Time: {total_s:.0f} s in all ({prepared_s:.0f} s for warm start, pairs and reward model)."
        if prepared_s is not None
        else f"Report written {total_s:.0f} s after the run started (--report-only).",
        "",
        f"Reward model: {rm_report['train_pairs']} train / {rm_report['heldout_pairs']} held-out pairs, held-out "
        f"pairwise accuracy {rm_report['heldout_pairwise_accuracy']:.3f}, first loss {rm_report['first_loss']:.4f} "
        f"(ok: {rm_report['first_loss_ok']}).",
        "",
        "Finished runs per arm: " + ", ".join(f"{a} {len(r)}" for a, r in curves.items()) + f" (of "
        f"{len(settings.seeds)} seeds); evaluations on {settings.eval_n} held-out problems every "
        f"{settings.eval_every} steps. Values are mean ± std over seeds.",
        "",
        "![proxy and truth against sqrt KL](overoptimisation.png)",
        "",
    ]
    rows = []
    for arm, runs in curves.items():
        acc = mean_curve(runs, "rm/true_accuracy")
        peak = max(range(len(acc)), key=acc.__getitem__)
        sqrt_kl = mean_curve(runs, "rm/sqrt_kl")
        first, end = (
            {
                k: mean_std_text([r[i][k] for r in runs], one="")
                for k in ("rm/true_accuracy", "rm/proxy_reward", "rm/sqrt_kl")
            }
            for i in (0, -1)
        )
        rows.append(
            [
                *(
                    arm,
                    first["rm/true_accuracy"],
                    f"{acc[peak]:.3f} (step {runs[0][peak]['step']}, {sqrt_kl[peak]:.2f})",
                ),
                *(
                    end["rm/true_accuracy"],
                    f"{first['rm/proxy_reward']} -> {end['rm/proxy_reward']}",
                    end["rm/sqrt_kl"],
                ),
            ]
        )
    header = ["arm", "accuracy at 0", "peak mean accuracy (step, sqrt KL)", "accuracy at the end", "proxy 0 -> end"]
    lines.append(table([*header, "sqrt KL at the end"], rows))
    steps = [row["step"] for row in next(iter(curves.values()))[0]] if curves else []
    by_step = ["arm", *(f"step {k}" for k in steps)]
    lines += ["", "Mean true accuracy at each evaluation (does it rise before it falls?):", ""]
    lines.append(
        table(
            by_step,
            ([arm, *(f"{a:.3f}" for a in mean_curve(runs, "rm/true_accuracy"))] for arm, runs in curves.items()),
        )
    )
    lines += [
        "",
        f"The monitors' `{GAP}` (the run's training reward minus the checker's verdict, mean over the training "
        "batches of the logging window that ends at the step; the same value a user's own run of the arm logs), mean "
        "over seeds (step 0: no batch yet):",
        "",
        table(by_step, ([arm, *(number(mean_gap(gaps[arm], k), missing="-") for k in steps)] for arm in curves)),
    ]
    heldout = read_rows(paths["heldout"], settings.probe_n)
    problems = [{"question": p["question"], "answer": p["answer"].split("####")[-1].strip()} for p in heldout]
    probes = reward_model_scores(RewardModelReward(paths["rm"]), "gsm8k", problems, LAB_INSTRUCTION)
    paid = [f"`{name}` {cell['score']:.2f}" for name, cell in probes.items() if cell["violation"]]
    lines += [
        "",
        f"## What the reward model pays (hack probes on {len(problems)} held-out problems, normalised: "
        "genuine correct 1, genuine wrong 0)",
        "",
        f"Raw mean scores: genuine correct {probes['genuine_correct']['raw']:.3f}, genuine wrong "
        f"{probes['genuine_wrong']['raw']:.3f} (the normalised values divide by their difference).",
        "",
        "Probes that break their rule: " + (", ".join(paid) or "none") + ".",
        "",
    ]
    rm_arms = [arm for arm in curves if arm != CHECKER]
    if rm_arms:  # the RM does not change in GRPO; what changes is how its probes compare with the policy's answers
        arm = rm_arms[0]
        before, after = (statistics.fmean(r[i]["rm/proxy_reward"] for r in curves[arm]) for i in (0, -1))
        lines += [
            f"Before and after: does a probe score above the policy's own sampled answers (mean RM score "
            f"{before:.3f} at step 0, {after:.3f} at the end of {arm}, mean over seeds)?",
            "",
        ]
        header = ["probe", "kind", "raw score", "normalised", "breaks its rule", "above the policy at step 0"]
        rows = [
            [
                *(f"`{name}`", cell["kind"], f"{cell['raw']:.3f}", f"{cell['score']:.2f}"),
                *("yes" if yes else "" for yes in (cell["violation"], cell["raw"] > before, cell["raw"] > after)),
            ]
            for name, cell in probes.items()
        ]
        lines += [table([*header, f"above {arm} at the end"], rows), ""]
    lines += ["## Highest-scored WRONG answers, at step 0 and at the last evaluation (first finished seed)", ""]
    if curves:  # step 0: every arm's policy is the warm start, sampled alike
        first_row = next(iter(curves.values()))[0][0]
        lines += [
            f"- step 0 (every arm): {score:.2f} `{text.strip()[:80]!r}`" for score, text in first_row["top_wrong"][:3]
        ]
    for arm, runs in curves.items():
        lines += [
            f"- {arm}, step {runs[0][-1]['step']}: {score:.2f} `{text.strip()[:80]!r}`"
            for score, text in runs[0][-1]["top_wrong"][:3]
        ]
    (out / "probes.json").write_text(json.dumps(probes, indent=1))
    return write_markdown(out / "report.md", lines)
