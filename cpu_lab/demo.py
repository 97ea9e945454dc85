"""The CPU lab demo (`make demo`): GRPO that measurably teaches a tiny model, and the controls that prove it.

From one cached SFT warm start, one GRPO run per config under ``recipes/configs/lab/``, two at a time:
``grpo_lab_default`` should raise held-out accuracy clearly, the ``grpo_lab_random`` control must move it by at most
±3 points, the hackable ``grpo_lab_format_only`` raises reward but not accuracy, and ``grpo_lab_dr_grpo`` compares
the loss. ``report.md`` puts them side by side with the exact commands; each stage's detail goes to its log under
``<out>`` (with ``--verbose``, to the terminal).

    OMP_NUM_THREADS=2 python -m cpu_lab.demo                 # what `make demo` runs (120 steps per run, 2 at a time)
    OMP_NUM_THREADS=2 python -m cpu_lab.demo --seed 1 --configs grpo_lab_default grpo_lab_random   # another seed
    python -m cpu_lab.demo --seed-table runs/lab/demo/seed0 runs/lab/demo/seed1   # before/after/gain per seed
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from tqdm import tqdm

from cpu_lab import matrix
from cpu_lab.report import (
    CONTROL_BAND,
    MISSING,
    command_line,
    mean_std,
    mean_std_text,
    number,
    paired_gain,
    pyplot,
    recipe_command,
    reproduce,
    save_figure,
    table,
    write_markdown,
)
from cpu_lab.warmstart import DEFAULT_CACHE_ROOT, LAB_ROOT, WarmStartSettings, prepare_lab, recipe_flags

CONFIG_DIR = Path("recipes/configs/lab")
DEMO_CONFIGS = ["grpo_lab_default", "grpo_lab_random", "grpo_lab_format_only", "grpo_lab_dr_grpo"]
DEFAULT_STEPS = 120  # per GRPO run: +15 points needs ~75-150 (docs/cpu_lab.md); 120 keeps a cold demo under 10 minutes
DEFAULT_JOBS = 2  # GRPO runs at once, one process and cpu_count // jobs threads each (two 1-thread runs on 2 cores)
TARGET_GAIN = 0.15  # held-out accuracy gain the default reward set should reach (fraction); the report says if it did
WARM_START_LOG = "warmstart.log"  # in the demo's folder: the warm start's full output


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        prog="python -m cpu_lab.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the warm start and of every GRPO run")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="GRPO steps per run")
    parser.add_argument("--configs", nargs="*", default=DEMO_CONFIGS, help="config names under recipes/configs/lab")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="GRPO runs at once (1: in turn, in-process)")
    parser.add_argument("--out", default=None, help="report folder (default runs/lab/demo/<time>)")
    parser.add_argument("--cache-root", default=str(DEFAULT_CACHE_ROOT))
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print everything the stages print (trainer logs, progress bars, warnings) instead of a line per stage",
    )
    parser.add_argument(
        "--seed-table", nargs="+", metavar="DEMO_DIR", help="print only the per-seed table of finished demo folders"
    )
    args = parser.parse_args(argv)
    if args.seed_table:
        table = seed_table(args.seed_table)
        print(table)
        return table
    logging.basicConfig(format="%(message)s")
    logging.getLogger("cpu_lab.warmstart").setLevel(logging.INFO)  # its validation accuracy as it trains
    configs = [CONFIG_DIR / f"{name}.yaml" for name in args.configs]
    missing = [str(c) for c in configs if not c.exists()]
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if missing:
        known = sorted(p.stem for p in CONFIG_DIR.glob("grpo_*.yaml"))
        parser.error(f"configs not found: {missing}; the lab's GRPO configs are {known}")
    out = Path(args.out or LAB_ROOT / "demo" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    detail = "everything printed here (--verbose)" if args.verbose else "detail in each stage's log"
    print(
        f"[demo] seed {args.seed}: a warm start, then {len(configs)} GRPO run(s) of {args.steps} steps, {args.jobs} at "
        f"a time ({', '.join(args.configs)}); output in {out}; {detail}",
        flush=True,
    )

    # 1. Warm start (cached) and the lab's data, in the demo's own folder: two demos (two seeds) at once must not
    # rewrite each other's training set (runs/lab/{warmstart,data} are `python -m cpu_lab.warmstart`'s)
    t0 = time.monotonic()
    settings = WarmStartSettings(seed=args.seed)
    how = "reused from the cache" if _cached(settings, args.cache_root) else "trained"
    paths = run_warm_start(settings, args.cache_root, out, verbose=args.verbose)
    warm = json.loads((paths["model"] / "warmstart.json").read_text())
    warm_seconds = time.monotonic() - t0
    print(
        f"[demo] warm start {how}: SFT stopped at step {warm['steps']} with validation accuracy "
        f"{number(warm['validation_accuracy'])} (threshold {settings.stop_at_accuracy}); held-out accuracy "
        f"{number(warm['heldout_accuracy'])}; {warm_seconds:.0f} s (model: {paths['model']})",
        flush=True,
    )

    # 2. One GRPO run per config, all from the same start, through the recipe (cpu_lab.matrix: each in its own process,
    # or in turn in this one with --jobs 1)
    extra = [
        *recipe_flags(paths),
        "--max_steps",
        str(args.steps),
    ]
    t0 = time.monotonic()
    quiet = not args.verbose  # each run's output in its run.log, a bar of the steps on a terminal
    matrix.run_matrix(
        [str(c) for c in configs], [args.seed], out, extra, jobs=args.jobs, run_logs=quiet, progress=quiet
    )
    seconds = {"GRPO runs": time.monotonic() - t0}

    # 3. The report
    report = write_report(out, args, warm, paths, extra, seconds, warm_seconds, time.monotonic() - started)
    print(f"[demo] report: {report} ({time.monotonic() - started:.0f} s in all)", flush=True)
    return report


def run_warm_start(settings: WarmStartSettings, cache_root, out: Path, verbose: bool = False) -> dict[str, Path]:
    """``prepare_lab`` with its output in ``<out>/warmstart.log`` (printed instead with ``verbose``)."""
    if verbose:
        return prepare_lab(settings, cache_root, root=out)
    log = out / WARM_START_LOG
    with matrix.output_to(log) as terminal:
        if not _cached(settings, cache_root):
            terminal.write(
                f"[demo] warm start: SFT until validation accuracy >= {settings.stop_at_accuracy} (at most "
                f"{settings.max_steps} steps, a validation every {settings.eval_every}; log: {log})\n"
            )
            terminal.flush()
        progress = WarmStartProgress(terminal, settings.max_steps)
        logger = logging.getLogger("cpu_lab.warmstart")
        logger.addHandler(progress)
        try:
            return prepare_lab(settings, cache_root, root=out)
        except BaseException:
            progress.close()
            terminal.write(f"[demo] warm start FAILED: its output is in {log}; the error follows\n")
            raise
        finally:
            logger.removeHandler(progress)
            progress.close()


class WarmStartProgress(logging.Handler):
    """The warm start's validations: a bar of SFT steps on a terminal, a line per validation elsewhere."""

    def __init__(self, terminal, max_steps: int):
        super().__init__(logging.INFO)
        self.terminal, self.bar = terminal, None
        if terminal.isatty():
            self.bar = tqdm(
                total=max_steps, desc="warm start", unit="step", leave=False, file=terminal, dynamic_ncols=True
            )

    def emit(self, record: logging.LogRecord) -> None:
        step = getattr(record, "step", None)
        if step is not None:
            accuracy = f"validation accuracy {record.validation_accuracy:.3f}"
            if self.bar is None:
                self.line(f"[demo] warm start: step {step}, {accuracy}")
            else:
                self.bar.n = step
                self.bar.set_postfix_str(accuracy)  # redraws the bar
        elif record.levelno >= logging.WARNING:
            self.line(f"[demo] warm start: {record.getMessage().removeprefix('warm start ')}")

    def line(self, text: str) -> None:
        if self.bar is None:
            self.terminal.write(text + "\n")
            self.terminal.flush()
        else:
            self.bar.write(text, file=self.terminal)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        super().close()


def _cached(settings: WarmStartSettings, cache_root) -> bool:
    return (Path(cache_root) / f"warmstart-{settings.key()}" / "warmstart.json").exists()  # as warm_start looks


def write_report(out: Path, args, warm: dict, paths: dict, extra, seconds, warm_seconds, total) -> Path:
    """``report.md`` with the headline numbers, the controls, grpo vs dr_grpo, the table, plots and commands."""
    groups = matrix.collect(out)
    runs = {name: rs[0] for name, rs in groups.items()}
    pngs = matrix.plot_matrix(out, groups)
    warm_png = plot_warm_start(warm, out / "warmstart.png")
    lines = [f"# CPU lab demo (seed {args.seed}, {args.steps} GRPO steps per run)", ""]
    lines += [
        f"Warm start: {warm['params']:,}-parameter Qwen2, SFT stopped at step {warm['steps']} with validation "
        f"accuracy {warm['validation_accuracy']:.3f} (threshold {warm['settings']['stop_at_accuracy']}, on "
        f"{warm['settings']['validation_n']} validation problems); held-out accuracy of that model "
        f"{warm['heldout_accuracy']:.3f} (the held-out set plays no part in the stop: it is read before training "
        f"and after; {warm['seconds']:.0f} s to train, {warm_seconds:.0f} s in this demo: "
        f"{'reused from the cache' if warm_seconds < 0.5 * warm['seconds'] else 'trained now'}).",
        "",
    ]
    lines += findings(runs, out)
    lines += ["", "## All runs", "", matrix.comparison_table(groups), ""]
    lines += [
        "Accuracy: greedy, on the 200-problem held-out set. Lengths: mean tokens of held-out answers after "
        "training. Degenerate groups: share of GRPO groups all right or all wrong. Gap: mean training reward "
        "minus share of correct training answers, over the last quarter of steps.",
        "",
    ]
    lines += [f"![{p.stem}]({p.name})" for p in [*pngs, warm_png]]
    lines += ["", "## Time", ""]
    lines += [f"- {name}: {s:.0f} s" for name, s in seconds.items()]
    lines += [f"  - {name}: {r.seconds:.0f} s" for name, r in runs.items() if r.seconds is not None]  # own clocks
    lines += [f"- warm start in this demo: {warm_seconds:.0f} s; whole demo: {total:.0f} s", ""]
    lines += reproduce(
        [
            f"OMP_NUM_THREADS=2 python -m cpu_lab.demo --seed {args.seed} --steps {args.steps} --jobs {args.jobs}",
            "# the same, step by step:",
            f"python -m cpu_lab.warmstart --seed {args.seed}",
            *(
                recipe_command(CONFIG_DIR / f"{name}.yaml", args.seed, out / name / f"seed{args.seed}", extra)
                for name in runs
            ),
            f"python -m cpu_lab.matrix --out {out} --table-only",
        ]
    )
    lines += [
        "",
        f"Each run's folder holds report.json, log.jsonl (monitors), probes.json, eval_before/ and eval_after/. "
        f"Command line of this demo: `{command_line()}`.",
    ]
    return write_markdown(out / "report.md", lines)


def findings(runs: dict, out: Path) -> list[str]:
    """The experiment's verdicts in words, each from the measured numbers (a missing run is said to be missing)."""
    lines = ["## What happened", ""]

    def acc(name):
        r = runs.get(name)
        return (r.accuracy_before, r.accuracy_after) if r and r.accuracy_after is not None else (None, None)

    before, after = acc("grpo_lab_default")
    if after is not None:
        gain = after - before
        verdict = "meets" if gain >= TARGET_GAIN else "MISSES"
        lines.append(
            f"- **Default rewards (grpo)**: held-out accuracy {before:.3f} → {after:.3f} "
            f"({gain * 100:+.1f} points; {verdict} the +{TARGET_GAIN * 100:.0f}-point target)."
        )
    lines += curriculum_lines(
        out / "grpo_lab_default" / f"seed{runs['grpo_lab_default'].seed}" / "log.jsonl"
        if "grpo_lab_default" in runs
        else None
    )
    before, after = acc("grpo_lab_random")
    if after is not None:
        moved = (after - before) * 100
        if abs(moved) <= CONTROL_BAND:
            verdict = f"held ({moved:+.1f} points, within ±{CONTROL_BAND:.0f})"
        else:
            verdict = (
                f"MOVED {moved:+.1f} points (outside ±{CONTROL_BAND:.0f}): this rate moves the model by itself, so "
                "the default's gain is not shown to be the reward's signal"
            )
        gain = paired_gain(out / "grpo_lab_random" / f"seed{runs['grpo_lab_random'].seed}")
        if gain:  # on few test problems the interval outgrows the band, and the verdict says little either way
            low, high = (bound * 100 for bound in gain["ci"])
            verdict += f"; paired 95% interval [{low:+.1f}, {high:+.1f}]"
            if high - low > 2 * CONTROL_BAND:
                verdict += (
                    f", wider than the ±{CONTROL_BAND:.0f} band: too few test problems to tell a control that holds "
                    "from one that does not (docs/cpu_lab.md, Results)"
                )
        lines.append(f"- **Random reward (control)**: {before:.3f} → {after:.3f}: accuracy {verdict}.")
    hack = runs.get("grpo_lab_format_only")
    if hack and hack.accuracy_after is not None:
        rose = hack.reward_end is not None and hack.reward_start is not None and hack.reward_end > hack.reward_start
        flat = hack.accuracy_after <= hack.accuracy_before + 0.035
        signature = "the hacking signature" if rose and flat else "NOT the hacking signature in this run"
        lines.append(
            f"- **Format-only reward (hackable)**: training reward {hack.reward_start:.3f} → "
            f"{hack.reward_end:.3f}, held-out accuracy {hack.accuracy_before:.3f} → "
            f"{hack.accuracy_after:.3f}: {signature}."
        )
        lines += probe_lines(out / "grpo_lab_format_only" / f"seed{hack.seed}" / "probes.json")
    a, b = runs.get("grpo_lab_default"), runs.get("grpo_lab_dr_grpo")
    if a and b and a.accuracy_after is not None and b.accuracy_after is not None:
        lines.append(
            f"- **grpo vs dr_grpo**: accuracy {a.accuracy_after:.3f} vs {b.accuracy_after:.3f}; mean length "
            f"of wrong answers {number(a.length_wrong, '.1f')} vs {number(b.length_wrong, '.1f')} tokens, of correct "
            f"ones {number(a.length_correct, '.1f')} vs {number(b.length_correct, '.1f')}."
        )
    return lines


def curriculum_lines(log_path: Path | None) -> list[str]:
    """The default run's difficulty path and degenerate shares, from its ``curriculum/...`` log (none: no lines)."""
    rows = matrix.read_log(log_path) if log_path is not None and log_path.exists() else []
    rows = [r for r in rows if r.get("curriculum/next_difficulty") is not None]
    if not rows:
        return []
    path, level = [f"{rows[0]['curriculum/difficulty']:g}"], rows[0]["curriculum/difficulty"]
    for r in rows:
        if r["curriculum/next_difficulty"] != level:
            level = r["curriculum/next_difficulty"]
            path.append(f"{level} (step {r['step']})")
    counts = {
        lvl: sum(r["curriculum/difficulty"] == lvl for r in rows)
        for lvl in sorted({r["curriculum/difficulty"] for r in rows})
    }
    measured, predicted, monitors = (
        number(mean_std(r.get(key) for r in rows)[0], ".2f")
        for key in (
            "monitor/degenerate_share",
            "curriculum/degenerate_predicted_share",
            "monitor/degenerate_expected_share",
        )
    )
    return [
        f"  - curriculum (`cpu_lab/curriculum.py`): difficulty level {' → '.join(path)}; steps per level "
        f"{', '.join(f'{lvl:g}: {n}' for lvl, n in counts.items())}; degenerate groups {measured} "
        f"measured, {predicted} predicted from the running pass rate (p^G + (1-p)^G), "
        f"{monitors} predicted by the monitors per prompt."
    ]


def seed_table(demo_dirs: list[str | Path]) -> str:
    """Per seed: held-out accuracy before, and after with the gain, of each demo run; then mean ± std over seeds."""
    names = {
        "grpo_lab_default": "default",
        "grpo_lab_dr_grpo": "dr_grpo",
        "grpo_lab_random": "random",
        "grpo_lab_format_only": "format only",
    }
    by_seed: dict[int, dict] = {}
    for folder in demo_dirs:
        for name, runs in matrix.collect(folder).items():
            for run in runs:
                if name in names and run.accuracy_after is not None and run.accuracy_before is not None:
                    by_seed.setdefault(run.seed, {})[name] = run
    if not by_seed:
        raise SystemExit(f"no finished demo runs under {[str(d) for d in demo_dirs]}: pass demo folders (--out)")
    header = ["seed", "before", *(f"{label} after (gain)" for label in names.values())]

    def gain(run):
        return (run.accuracy_after - run.accuracy_before) * 100

    def cell(run):
        return MISSING if run is None else f"{run.accuracy_after:.3f} ({gain(run):+.1f})"

    rows = [
        [seed, f"{next(iter(runs.values())).accuracy_before:.3f}", *(cell(runs.get(n)) for n in names)]
        for seed, runs in sorted(by_seed.items())
    ]
    stats = []
    for name in names:
        seeds = [r[name] for r in by_seed.values() if name in r]
        after = mean_std_text([r.accuracy_after for r in seeds], one="")  # one seed: no spread to give
        stats.append(f"{after} ({mean_std_text(map(gain, seeds), '+.1f', one='; 1 seed')})" if seeds else MISSING)
    befores = [next(iter(r.values())).accuracy_before for r in by_seed.values()]
    rows.append([f"mean ± std ({len(by_seed)} seeds)", mean_std_text(befores, one=" ± 0.000"), *stats])
    lines = [table(header, rows)]
    met = sum(
        1
        for r in by_seed.values()
        if "grpo_lab_default" in r
        and r["grpo_lab_default"].accuracy_after - r["grpo_lab_default"].accuracy_before >= TARGET_GAIN
    )
    lines += ["", f"Default gain >= +{TARGET_GAIN * 100:.0f} points on {met} of {len(by_seed)} seeds."]
    return "\n".join(lines)


def probe_lines(path: Path) -> list[str]:
    """The hack probes that the run's reward set pays at least as well as a genuine answer (from probes.json)."""
    if not path.exists():
        return ["  - (no probes.json: the recipe ran without probe problems)"]
    probes = json.loads(path.read_text())
    correct = probes["genuine_correct"]["score"]
    hits = [(n, p) for n, p in probes.items() if p.get("violation")]
    if not hits:
        return [f"  - hack probes: none passes under this reward set (genuine correct scores {correct:.3f})"]
    return [
        f"  - hack probe `{n}` scores {p['score']:.3f} vs genuine correct {correct:.3f}: {p['description']}"
        for n, p in hits
    ]


def plot_warm_start(warm: dict, path: Path) -> Path:
    """Validation accuracy against SFT step, and the held-out accuracy of the model it stopped at."""
    fig, ax = pyplot().subplots(figsize=(5, 3))
    steps = [c["step"] for c in warm["curve"]]
    ax.plot(steps, [c["validation_accuracy"] for c in warm["curve"]], marker=".", label="validation")
    if warm["heldout_accuracy"] is not None:
        ax.scatter([warm["steps"]], [warm["heldout_accuracy"]], color="black", zorder=3, label="held-out, at the stop")
    ax.axhline(warm["settings"]["stop_at_accuracy"], color="gray", linestyle="--", label="stop threshold")
    ax.set(xlabel="SFT step", ylabel="accuracy", title="warm start", ylim=(0, 1))
    ax.legend()
    return save_figure(fig, path)


if __name__ == "__main__":
    main()
