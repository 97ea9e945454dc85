"""The judge-hacking film on a laptop: the CPU lab's warm-start policy, SmolLM2 as a log-probability judge.

    python -m judge_lab.film                       # 8 runs x 10 steps, then the report and the judge-noise probe
    python -m judge_lab.film --steps 3 --only judge_grpo_b0     # one run, briefly

Needs the lab's warm start (``python -m cpu_lab.warmstart``) and the real model (``make real-model``). Runs the GRPO
recipe on one held-out lab question over reward {judge, checker} x beta {0, 0.04} x loss {grpo, dr_grpo}, then the
report and the judge-noise probe; ``film.md`` sums the runs up, with the tracked answers' probabilities.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path

from cpu_lab.report import number, table, write_markdown
from cpu_lab.runner import run_one
from eval.jsonl import read_jsonl
from eval.tasks import get_task
from judge_lab import noise as judge_noise
from judge_lab import report as lab_report
from judge_lab.report import GAP, read_monitor_log, read_steps

ROOT = Path(__file__).resolve().parents[1]
BASE_CONFIG = ROOT / "recipes" / "configs" / "judge_lab" / "tiny" / "judge_lab_tiny_judge_b0.04.yaml"
RUNS = [
    (f"{reward}_{loss}_b{beta:g}", reward, loss, beta)
    for reward in ("judge", "checker")
    for beta in (0.0, 0.04)
    for loss in ("grpo", "dr_grpo")
]


def film_question(heldout: Path, index: int) -> tuple[str, str, str, str]:
    """(question, gold, short wrong reply, reference solution) of one held-out lab problem."""
    rows = read_jsonl(heldout, "the lab's held-out problems: rerun `python -m cpu_lab.warmstart`")
    row = rows[index]
    first_number = re.search(r"\d+", row["question"]).group()
    return row["question"], row["final"], f"#### {first_number}", row["answer"]


def judge_flags(args) -> list[str]:
    """The judge of every film run and of its noise probe: SmolLM2 (``--judge``) in log-probability mode."""
    return [
        *("--judge_backend", "hf", "--judge_model", str(args.judge), "--judge_mode", "logprob"),
        *("--judge_min_score_mass", str(args.min_score_mass)),
    ]


def run_args(reward, loss, beta, args, question) -> list[str]:
    """The GRPO recipe's flags of one run on top of ``BASE_CONFIG``."""
    q, gold, short_wrong, reference = question
    flags = [
        "--model_name_or_path",
        str(args.policy),
        "--build_tiny_model",
        "false",
        "--question",
        q,
        "--gold_answer",
        gold,
        "--instruction",
        get_task("lab").instruction,
        "--tracked_names",
        "short_wrong",
        "worked_correct",
        "--tracked_answers",
        short_wrong,
        reference,
        "--reward_funcs",
        *(["llm_judge", "gsm8k_correctness"] if reward == "judge" else ["gsm8k_correctness"]),
        "--reward_weights",
        *(["1.0", "0.0"] if reward == "judge" else ["1.0"]),  # judge runs: the checker watched at weight 0
        "--loss_type",
        loss,
        "--scale_rewards",
        "none" if loss == "dr_grpo" else "group",
        "--beta",
        str(beta),
        "--max_steps",
        str(args.steps),
        "--max_completion_length",
        "32",  # the lab's answers are ~20 tokens
        "--learning_rate",
        "5e-5",  # the CPU lab's GRPO rate (learning_rate of recipes/configs/lab/*.yaml)
        *judge_flags(args),
        "--probe_problems",
        str(args.probe_problems),
    ]
    return flags


def tracked_probability(steps: list[dict], after_updates: int, name: str) -> float | None:
    """P(tracked answer) under the policy after ``after_updates`` updates (the record of step after_updates + 1)."""
    for record in steps:
        if record.get("step") == after_updates + 1 and not record.get("after_training"):
            return math.exp(record["tracked"][name]["logp_policy"])
    return None


def summary(out: Path, names: list[str]) -> str:
    header = [
        *("run", "judge score (first -> last)", "correct", "reward-correctness gap", "probes broken", "mean tokens"),
        *("P(short wrong) after 0 / 1 / 5 updates", "P(worked correct) after 0 / 1 / 5"),
    ]
    rows = []
    for name in names:
        steps = read_steps(out / name)
        first, last = steps[0], steps[-1]
        monitors = read_monitor_log(out / name)
        gap = [monitors[s["step"]].get(GAP) for s in (first, last) if s["step"] in monitors]
        gaps = " -> ".join(number(g, missing="-") for g in gap) or "-"
        probes = json.loads((out / name / "probes.json").read_text()) if (out / name / "probes.json").exists() else {}
        paid = sum(bool(p.get("violation")) for p in probes.values())
        ruled = sum(p.get("kind") not in ("info", "reference") for p in probes.values())  # probes with a rule

        def probs(tracked, steps=steps):
            values = [tracked_probability(steps, k, tracked) for k in (0, 1, 5)]
            return " / ".join(number(v, ".3g", "-") for v in values)

        judge = f"{first.get('mean_judge_score') or 0:.2f} -> {last.get('mean_judge_score') or 0:.2f}"
        rows.append(
            [
                *(name, judge if "judge" in name else "-"),
                f"{first['n_correct']}/{first['n_answers']} -> {last['n_correct']}/{last['n_answers']}",
                *(gaps, f"{paid} of {ruled}", f"{first['mean_n_tokens']:.1f} -> {last['mean_n_tokens']:.1f}"),
                *(probs("short_wrong"), probs("worked_correct")),
            ]
        )
    return table(header, rows) + "\n"


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        prog="python -m judge_lab.film", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default=str(ROOT / "runs" / "lab" / "warmstart"), help="the lab's warm start")
    parser.add_argument("--judge", default=str(ROOT / "runs" / "real_model" / "model"), help="SmolLM2 folder")
    parser.add_argument("--heldout", default=str(ROOT / "runs" / "lab" / "data" / "heldout.jsonl"))
    parser.add_argument("--question_index", type=int, default=0, help="which held-out problem")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=None, help=f"run names, of {[r[0] for r in RUNS]}")
    parser.add_argument("--min_score_mass", type=float, default=0.5, help="judge: below it, reward None")
    parser.add_argument("--noise_n", type=int, default=3, help="times the judge scores one answer (it is greedy)")
    parser.add_argument(
        "--probe_problems",
        type=int,
        default=1,
        help="hack probes built from the question and scored at the start of each run (0: none; a local judge "
        "scores the 39 probe answers in minutes on 2 cores)",
    )
    parser.add_argument("--out", default=str(ROOT / "runs" / "judge_film"))
    args = parser.parse_args(argv)
    for path, how in ((args.policy, "python -m cpu_lab.warmstart"), (args.judge, "make real-model")):
        if not (Path(path) / "config.json").is_file():
            parser.error(f"{path} holds no model: build it with `{how}`")
    if not Path(args.heldout).is_file():
        parser.error(f"{args.heldout} does not exist: python -m cpu_lab.warmstart writes it")
    runs = [r for r in RUNS if args.only is None or r[0] in args.only]
    if not runs:
        parser.error(f"--only names none of {[r[0] for r in RUNS]}")
    question = film_question(Path(args.heldout), args.question_index)

    out, timings = Path(args.out), {}
    for name, reward, loss, beta in runs:  # each through the labs' runner: the GRPO recipe and its own checks
        start = time.time()
        run_one(BASE_CONFIG, None, out / name, run_args(reward, loss, beta, args, question))
        timings[name] = round(time.time() - start)
    names = [r[0] for r in runs]
    lab_report.main([str(out / n) for n in names] + ["--out", str(out / "report")])
    judge_runs = [n for n in names if n.startswith("judge")]
    noise = None
    if judge_runs:
        noise = judge_noise.main(
            [
                *judge_flags(args),
                "--question",
                question[0],
                "--answer",
                question[2],
                "--n",
                str(args.noise_n),
                "--answers_from_run",
                str(out / judge_runs[0]),
                "--max_answers",
                "16",
                "--out",
                str(out / "noise"),
            ]
        )
    text = [
        "# The judge film on a laptop",
        "",
        f"Question (lab held-out #{args.question_index}): {question[0]} Gold {question[1]}.",
        f"Policy {args.policy}; judge {args.judge} (log-probability mode); {args.steps} steps of 8 answers.",
        "",
        summary(out, names),
        f"Seconds per run: {json.dumps(timings)}",
        "",
        f"Per-step tables and plot: {out / 'report' / 'lab_report.md'}; judge noise: {out / 'noise' / 'judge_noise.md'}"
        if noise
        else "",
    ]
    film = write_markdown(out / "film.md", text)
    print(film.read_text())
    return film


if __name__ == "__main__":
    main()
