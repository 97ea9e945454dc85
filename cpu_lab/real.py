"""The real-model lab: SFT, then GRPO and its controls, on SmolLM2-135M-Instruct and 2 CPU cores.

1. Data: the CPU lab's problems (``cpu_lab.problems``) in ``<out>/data``: training, validation and held-out splits.
2. SFT (``recipes.sft`` with ``recipes/configs/real_lab/sft_smollm2.yaml``): full fine-tuning on the worked
   solutions until the validation accuracy reaches the config's ``stop_at_accuracy``; the held-out set is read before
   and after only.
3. GRPO from that model (LoRA), through ``recipes.grpo`` with its monitors and probes (``recipes/configs/real_lab/``):
   - ``grpo_real_default``: correctness + format bonus, on every seed of ``--seeds``;
   - ``grpo_real_random``: a reward that pays at random (accuracy must not rise);
   - ``grpo_real_format_only``: the hackable format bonus alone (reward rises, accuracy need not).
   Two runs at a time by default (``cpu_lab.matrix``: a process and one thread each on 2 cores).
4. With ``--dpo``: DPO from the same SFT model on pairs from its own verified rollouts (``training_data.rollouts
   sample``: K answers to each of the first training problems at the GRPO arms' temperature and length; a pair is a
   right and a wrong answer to one problem), through ``recipes.dpo`` with ``recipes/configs/real_lab/dpo_real.yaml``
   (its first loss is checked against ln 2), evaluated on the same held-out problems.
5. ``<out>/report.md`` with PNGs: held-out accuracy before -> after with 95% intervals for every arm and seed, the
   paired gain with its interval, the monitors' curves (correctness, format, degenerate share on correctness, length
   by correctness), the probes, the times and the commands that reproduce each stage.

Finished stages are reused when their settings match (a killed lab continues where it stopped). Needs the model of
``make real-model`` (``runs/real_model/model``).

    make real-model && OMP_NUM_THREADS=2 python -m cpu_lab.real        # the default lab (docs/real_model_lab.md)
    python -m cpu_lab.real --steps 2 --sft-steps 2 --eval-limit 8 --out /tmp/real   # its mechanics in minutes
    python -m cpu_lab.real --dpo                                   # the lab, then the DPO arm (reuses finished stages)
    python -m cpu_lab.real --report-only --out runs/real_lab       # rewrite the report
    python -m cpu_lab.real --summarize runs/real_lab/grpo_gsm8k_smollm2   # one GRPO run's monitors, start vs end
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from cpu_lab import matrix
from cpu_lab.demo import probe_lines
from cpu_lab.problems import check_disjoint, write_lab_data
from cpu_lab.report import (
    MISSING,
    accuracy,
    command_line,
    gain_points,
    number,
    paired_gain,
    pyplot,
    recipe_command,
    reproduce,
    save_figure,
    table,
    write_markdown,
)

CONFIG_DIR = Path("recipes/configs/real_lab")
SFT_CONFIG = CONFIG_DIR / "sft_smollm2.yaml"
DEFAULT_ARM = "grpo_real_default"
CONTROLS = ["grpo_real_random", "grpo_real_format_only"]
DPO_CONFIG = CONFIG_DIR / "dpo_real.yaml"
ROLLOUT_PROBLEMS, ROLLOUT_K = 128, 4  # 512 sampled answers: a ninth of a GRPO arm's 4,608 (72 steps x 64)
CONTROL_BAND = 3.0  # points: a random-reward control that moves held-out accuracy further is moved by step size alone
CURVES = [  # (log key, title) of the curves drawn per arm: the monitors' view of each run
    ("monitor/correct_rate", "correct answers (monitors' checker)"),
    ("rewards/gsm8k_format_reward/mean", "format reward (0.1 = formatted)"),
    ("monitor/degenerate_share", "degenerate groups on correctness"),
    ("monitor/length_correct", "length of correct answers (tokens)"),
    ("monitor/length_wrong", "length of wrong answers (tokens)"),
    ("monitor/reward_correctness_gap", "reward - correctness gap"),
]


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/real_lab", help="the lab's folder (data, sft/, grpo/, report.md)")
    parser.add_argument("--model", default="runs/real_model/model", help="the pretrained model (make real-model)")
    parser.add_argument(
        "--seeds", default="0", help="seeds of the default arm, e.g. 0,1,2 (one run each; the SFT stage uses the first)"
    )
    parser.add_argument("--control-seed", type=int, default=0, help="seed of the random and format-only controls")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the configs')")
    parser.add_argument("--sft-steps", type=int, default=None, help="most SFT steps (default: the config's)")
    parser.add_argument(
        "--eval-limit", type=int, default=None, help="held-out problems per eval (default: the configs' eval_limit)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="GRPO runs at once (1: in turn, in this process)")
    parser.add_argument("--dpo", action="store_true", help="also the DPO arm (rollouts from the SFT model, then DPO)")
    parser.add_argument(
        "--summarize", metavar="RUN_DIR", help="print a GRPO run's monitors at the start and the end (any config)"
    )
    parser.add_argument("--report-only", action="store_true", help="only (re)write the report of finished runs")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in matrix.split_list([args.seeds])]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give whole numbers, e.g. --seeds 0,1")
    for name in ("steps", "sft_steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    out = Path(args.out)
    if args.summarize:
        text = run_summary(Path(args.summarize))
        print(text)
        return text
    if args.report_only:
        return write_report(out, {})
    if not (Path(args.model) / "config.json").exists():
        parser.error(f"no model at {args.model}: run `make real-model` first (or pass --model DIR)")
    if args.jobs < 1 or not seeds:
        parser.error("--jobs must be >= 1 and --seeds must name at least one seed")
    started, started_wall, seconds = time.monotonic(), time.time(), {}
    print(f"[real] SmolLM2 lab in {out}: data, SFT, then GRPO default (seeds {seeds}) and 2 controls", flush=True)

    # 1. Data (written once: the runs' settings name these files)
    data = out / "data"
    if (data / "heldout.jsonl").exists() and not (data / "test.jsonl").exists():
        parser.error(f"{data} holds data split on the question text alone: pass a new --out (or delete {data})")
    if not (data / "test.jsonl").exists():
        write_lab_data(data, test_n=default_arm_config()["eval_limit"])  # the whole test set, before and after
    check_disjoint({split: data / f"{split}.jsonl" for split in ("train", "dev", "test", "ood")})
    limits = [] if args.eval_limit is None else ["--eval_limit", str(args.eval_limit)]

    # 2. SFT until the validation stop, through the recipe (reused when finished with the same settings)
    t0 = time.monotonic()
    sft_flags = [
        *("--model_name_or_path", args.model, "--data", str(data / "train.jsonl")),
        *("--eval_data", str(data / "test.jsonl"), "--validation_data", str(data / "dev.jsonl")),
        *limits,
        *([] if args.sft_steps is None else ["--max_steps", str(args.sft_steps)]),
    ]
    if args.eval_limit is not None:
        sft_flags += ["--validation_limit", str(args.eval_limit)]
    (sft_dir,) = matrix.run_matrix([str(SFT_CONFIG)], seeds[:1], out / "sft", sft_flags, jobs=1, run_logs=True)
    seconds["SFT" if (sft_dir / "report.json").stat().st_mtime >= started_wall else "SFT (reused)"] = (
        time.monotonic() - t0
    )
    sft = json.loads((sft_dir / "report.json").read_text())
    print(f"[real] SFT: {sft['steps']} steps, held-out {accuracy(sft.get('before'))} -> {accuracy(sft.get('after'))}")

    # 3. GRPO from the SFT model: the default arm on every seed, then the controls, `jobs` at a time
    t0 = time.monotonic()
    grpo_flags = [
        *("--model_name_or_path", str(sft_dir), "--data", str(data / "train.jsonl")),
        *("--eval_data", str(data / "test.jsonl")),
        *limits,
        *([] if args.steps is None else ["--max_steps", str(args.steps)]),
    ]
    grpo = out / "grpo"
    runs = [(str(CONFIG_DIR / f"{DEFAULT_ARM}.yaml"), seed) for seed in seeds]
    runs[1:1] = [(str(CONFIG_DIR / f"{c}.yaml"), args.control_seed) for c in CONTROLS]  # a control beside seed 0
    matrix.run_pairs(runs, grpo, grpo_flags, jobs=args.jobs, run_logs=True, progress=True)
    seconds["GRPO runs"] = time.monotonic() - t0

    # 4. DPO on pairs from the SFT model's own verified rollouts, measured on the same held-out problems
    if args.dpo:
        t0 = time.monotonic()
        rollouts = sample_rollouts(sft_dir, data, out / "rollouts", args.eval_limit)
        dpo_flags = [
            *("--model_name_or_path", str(sft_dir), "--data", str(rollouts)),
            *("--eval_data", str(data / "test.jsonl")),
            *limits,
        ]
        matrix.run_matrix([str(DPO_CONFIG)], seeds[:1], out / "dpo", dpo_flags, jobs=1, run_logs=True)
        seconds["DPO (rollouts and training)"] = time.monotonic() - t0
    seconds["whole lab"] = time.monotonic() - started

    # 5. The report
    report = write_report(out, seconds)
    print(f"[real] report: {report} ({seconds['whole lab']:.0f} s in all)", flush=True)
    return report


def default_arm_config() -> dict:
    """The default GRPO arm's config: the held-out size and the rollouts' temperature and length follow it."""
    return yaml.safe_load((CONFIG_DIR / f"{DEFAULT_ARM}.yaml").read_text())


def sample_rollouts(model: Path, data: Path, out: Path, limit: int | None) -> Path:
    """``training_data.rollouts sample`` from the SFT model at the GRPO arms' temperature and length (once)."""
    grpo = default_arm_config()
    path = out / "rollouts.jsonl"
    if path.exists():
        print(f"[real] rollouts: {path} exists, reused")
        return path
    problems = ROLLOUT_PROBLEMS if limit is None else limit
    cmd = [sys.executable, "-m", "training_data.rollouts", "sample", "--model", str(model), "--task", "lab"]
    cmd += ["--data", str(data / "train.jsonl"), "--limit", str(problems), "--k", str(ROLLOUT_K)]
    cmd += ["--temperature", str(grpo["temperature"]), "--max-new-tokens", str(grpo["max_completion_length"])]
    cmd += ["--out", str(out)]
    out.mkdir(parents=True, exist_ok=True)
    print(f"[real] rollouts: {problems} training problems x {ROLLOUT_K} answers (log: {out}/sample.log)", flush=True)
    (out / "command.txt").write_text(shlex.join(["python", *cmd[1:]]) + "\n")  # for the report's Reproduce list
    with open(out / "sample.log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    return path


def _reward_funcs(folder: Path) -> list[str]:
    path = folder / "resolved_config.json"
    return json.loads(path.read_text()).get("reward_funcs", []) if path.exists() else []


def _logged_steps(folder: Path) -> str:
    rows = matrix.read_log(folder / "log.jsonl")
    return str(max(r.get("step", 0) for r in rows)) if rows else MISSING


def _gains(folders: list[Path], arm: str) -> list[tuple[Path, dict]]:
    return [(f, g) for f in folders if f.parent.name == arm and (g := paired_gain(f)) is not None]


def _points(gain: dict) -> tuple[float, float, float]:
    return gain["difference"] * 100, gain["ci"][0] * 100, gain["ci"][1] * 100


def verdict(folders: list[Path]) -> list[str]:
    """The report's first lines: did GRPO lift held-out accuracy, by how much on each seed, and did the controls
    behave (the random reward within ``CONTROL_BAND`` points; the format-only reward's rise beside its accuracy)."""
    default = _gains(folders, DEFAULT_ARM)
    if not default:
        return ["**Did RL help?** Not measured yet: no default-reward run has held-out evals before and after."]
    gains = [_points(g) for _, g in default]
    mean = sum(d for d, _, _ in gains) / len(gains)
    seeds = ", ".join(f"{f.name} {gain_points(g)}" for f, g in default)
    lifted = all(low > 0 for _, low, _ in gains)
    random = _gains(folders, "grpo_real_random")
    controls = []
    if not random:
        answer = "Not shown: the random-reward control has not run, so step size alone could explain any change."
    else:
        r = [_points(g)[0] for _, g in random]
        held = all(abs(d) <= CONTROL_BAND for d in r)
        controls.append(
            f"the random-reward control moved it {', '.join(f'{d:+.1f}' for d in r)} points "
            + (
                f"(within ±{CONTROL_BAND:.0f}: the rate alone does not move the model)"
                if held
                else f"(outside ±{CONTROL_BAND:.0f}: this rate moves the model by itself; lower it)"
            )
        )
        if not held:
            answer = "No verdict: the control moved as much as a real reward could, so the rate is too high."
        elif lifted:
            answer = f"Yes: {mean:+.1f} points on average, every seed's paired interval above 0."
        elif mean > 0:
            answer = f"Not shown: {mean:+.1f} points on average, but not every seed's paired interval is above 0."
        else:
            answer = f"No: {mean:+.1f} points on average."
    for folder, gain in _gains(folders, "grpo_real_format_only"):
        rows = matrix.read_log(folder / "log.jsonl")
        start, end = matrix.window(rows, "reward", start=True), matrix.window(rows, "reward", start=False)
        rise = "" if start is None or end is None else f", its reward {start:.3f} → {end:.3f} (first → last quarter)"
        controls.append(f"the format-only reward moved it {gain_points(gain)} points{rise}")
    lines = [
        f"**Did RL help?** {answer} Held-out accuracy (greedy, paired over the same problems) under the default "
        f"rewards: {seeds}."
    ]
    if controls:
        lines.append("Controls: " + "; ".join(controls) + ".")
    return [" ".join(lines), ""]


def accuracy_table(folders: list[Path]) -> str:
    """One table row per run: accuracy before and after with intervals, the paired gain, format rates, lengths."""
    header = [
        *("run", "seed", "steps", "before [95% CI]", "after [95% CI]", "gain, points [95% CI]"),
        *("format before → after", "length correct / wrong after", "seconds"),
    ]
    rows = []
    for folder in folders:
        report = json.loads((folder / "report.json").read_text()) if (folder / "report.json").exists() else {}
        before, after = report.get("before"), report.get("after")
        fmt = MISSING if not (before and after) else f"{before['format_rate']:.2f} → {after['format_rate']:.2f}"
        lengths = MISSING
        if after:
            lengths = " / ".join(
                number((after["length_tokens"].get(k) or {}).get("mean"), ".1f") for k in ("correct", "wrong")
            )
        seconds = report.get("seconds")
        rows.append(
            [
                *(folder.parent.name, folder.name.removeprefix("seed"), report.get("steps") or _logged_steps(folder)),
                *(accuracy(before), accuracy(after), gain_points(paired_gain(folder)), fmt, lengths),
                number(seconds if isinstance(seconds, int | float) else None, ".0f"),
            ]
        )
    return table(header, rows)


def run_summary(folder: Path) -> str:
    """A GRPO run's monitors over its first and its last quarter of logged steps, and its held-out accuracy."""
    rows = matrix.read_log(folder / "log.jsonl")
    if not rows:
        raise SystemExit(f"{folder} has no log.jsonl with training rows: pass a GRPO run's output_dir")
    keys = [*(k for k, _ in CURVES), "monitor/degenerate_all_wrong_share", "monitor/truncated_rate", "reward"]
    windows = [(key, matrix.window(rows, key, start=True), matrix.window(rows, key, start=False)) for key in keys]
    lines = [f"{folder}: {max(r.get('step', 0) for r in rows)} steps"]
    lines.append(
        table(
            ["metric", "first quarter", "last quarter"],
            ([key, f"{start:.3f}", f"{end:.3f}"] for key, start, end in windows if start is not None),
        )
    )
    report = json.loads((folder / "report.json").read_text()) if (folder / "report.json").exists() else {}
    lines.append(f"held-out accuracy {accuracy(report.get('before'))} -> {accuracy(report.get('after'))}")
    if report.get("before") and report.get("after"):
        lines.append(
            f"held-out format rate {report['before']['format_rate']:.3f} -> {report['after']['format_rate']:.3f}"
        )
    return "\n".join(lines)


def plot_curves(grpo: Path, folders: list[Path], path: Path) -> Path:
    """The monitors' per-step curves of every GRPO run (a 5-step running mean; thin: each step)."""
    fig, axes = pyplot().subplots(2, 3, figsize=(13, 6.5))
    for folder in folders:
        rows = matrix.read_log(folder / "log.jsonl")
        label = f"{folder.parent.name} {folder.name}"
        for ax, (key, title) in zip(axes.flat, CURVES, strict=True):
            points = [
                (r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float) and not math.isnan(r[key])
            ]
            if not points:
                continue
            steps, values = zip(*points, strict=True)
            smooth = [
                sum(values[max(0, i - 4) : i + 1]) / len(values[max(0, i - 4) : i + 1]) for i in range(len(values))
            ]
            (line,) = ax.plot(steps, smooth, label=label)
            ax.plot(steps, values, color=line.get_color(), alpha=0.25, linewidth=0.8)
            ax.set(title=title, xlabel="GRPO step")
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, path)


def write_report(out: Path, seconds: dict) -> Path:
    """``report.md``: the SFT stage, every GRPO run's accuracy with intervals, the table, curves, probes, commands."""
    sft_dirs = sorted((out / "sft").glob("*/seed*"))
    dpo_dirs = sorted((out / "dpo").glob("*/seed*"))
    grpo = out / "grpo"
    folders = sorted(grpo.glob("*/seed*"), key=lambda f: (f.parent.name != DEFAULT_ARM, f.parent.name, f.name))
    if not sft_dirs and not folders:
        raise SystemExit(f"no finished stages under {out}: run `python -m cpu_lab.real --out {out}` first")
    lines = ["# Real-model lab: SmolLM2-135M-Instruct, SFT then GRPO on 2 CPU cores", "", *verdict(folders)]
    for sft_dir in sft_dirs:
        sft = json.loads((sft_dir / "report.json").read_text())
        v = sft.get("validation") or {}
        lines += [
            f"**SFT** ({sft['rows']} worked solutions): stopped at step {sft['steps']} "
            f"({v.get('why', 'no validation check')}; validation accuracy {v.get('last')}); held-out accuracy "
            f"{accuracy(sft.get('before'))} before → {accuracy(sft.get('after'))} after.",
            "",
        ]
    lines += ["## Held-out accuracy of every run", "", accuracy_table(sft_dirs + folders + dpo_dirs), ""]
    for dpo_dir in dpo_dirs:
        dpo = json.loads((dpo_dir / "report.json").read_text())
        lines += [
            f"DPO: {dpo.get('pairs', '–')} pairs; first loss {dpo.get('first_loss')} (expected "
            f"{dpo.get('first_loss_expected')}: {'ok' if dpo.get('first_loss_ok') else 'NOT ok'}).",
            "",
        ]
    lines += [
        "Greedy decoding on the held-out problems (never trained on, never used to stop). Intervals: Wilson 95% for an "
        "accuracy, paired bootstrap 95% over the same problems for a gain. A GRPO run's 'before' is the SFT model.",
        "",
        "## What the monitors saw during GRPO",
        "",
        matrix.comparison_table(matrix.collect(grpo)) if folders else "(no GRPO runs yet)",
        "",
    ]
    if folders:
        lines.append(f"![curves]({plot_curves(grpo, folders, out / 'curves.png').name})")
        lines += ["", "## Hack probes (scored under each run's own rewards at the start)", ""]
        for folder in folders:
            lines.append(f"- {folder.parent.name} {folder.name}:")
            if "lab_random" in _reward_funcs(folder):
                lines.append("  - (a coin-flip reward: its probe scores are draws, not a verdict on the probes)")
                continue
            lines += probe_lines(folder / "probes.json")
    lines += ["", "## Time", ""]
    lines += [f"- {name}: {s:.0f} s" for name, s in seconds.items()] or ["- (report rewritten; times in run folders)"]
    lines += ["- each run's own clock (report.json `seconds`: evaluations, training, saving) is in the table above"]
    commands = [
        f"OMP_NUM_THREADS=2 python -m cpu_lab.real --out {out}" + (" --dpo" if dpo_dirs else ""),
        "# stage by stage:",
    ]
    rollouts_cmd = out / "rollouts" / "command.txt"
    for folder in [*sft_dirs, *folders, rollouts_cmd, *dpo_dirs]:
        if folder == rollouts_cmd:
            commands += [rollouts_cmd.read_text().strip()] if rollouts_cmd.exists() else []
            continue
        settings_path = folder / matrix.SETTINGS_FILE
        if settings_path.exists():
            s = json.loads(settings_path.read_text())
            commands.append(recipe_command(s["config"], s["seed"], folder, s["extra_args"]))
    lines += ["", *reproduce(commands), "", f"Command line of this report: `{command_line()}`."]
    return write_markdown(out / "report.md", lines)


if __name__ == "__main__":
    main()
