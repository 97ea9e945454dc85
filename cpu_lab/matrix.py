"""Run configs x seeds, then compare them in a table from the recipes' own logs (no W&B needed).

Each run goes to ``<out>/<config name>/seed<k>``; a finished run is skipped when its recorded settings match this call
(so an interrupted matrix continues; an unfinished run resumes from its last checkpoint, as the recipe does) and
refused when they differ in anything trained. ``--losses grpo,dr_grpo,...`` adds
``recipes/configs/lab/grpo_lab_loss_<loss>.yaml`` for each name.

    python -m cpu_lab.matrix --configs recipes/configs/lab/grpo_lab_default.yaml recipes/configs/lab/grpo_lab_dr_grpo.yaml \\
        --seeds 0 1 2 --out runs/lab/matrix -- --max_steps 60
    python -m cpu_lab.matrix --out runs/lab/matrix --table-only      # just (re)write the table and plots
    python -m cpu_lab.matrix --losses grpo,dr_grpo,dapo,bnpo,cispo,sapo,gspo --seeds 0,1,2 --jobs 2 --out runs/lab/losses70

Everything after ``--`` is passed to every run (flags of the recipe, e.g. ``--model_name_or_path``).
"""  # noqa: E501

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# every run starts through the labs' one runner (the recipe's own checks); cpu_lab.demo, real and warmstart call it here
from cpu_lab.report import mean_by_step, mean_std, mean_std_text, number, pyplot, save_figure, table, write_markdown
from cpu_lab.runner import Run, output_to, recipe_for, run_at_once, run_one
from eval.jsonl import read_jsonl
from recipes.parser import load_config
from recipes.run_folder import MAY_CHANGE_ON_RESUME

# config options a finished run may be reused under when only they differ: how it saved, logged and resumed, which
# change nothing it trained (the run folder's own list, less the length of training)
REUSABLE_ACROSS = MAY_CHANGE_ON_RESUME - {"max_steps", "num_train_epochs"}

END_FRACTION = 0.25  # "end of training" = the last quarter of the logged steps
LOSS_CONFIG = "recipes/configs/lab/grpo_lab_loss_{}.yaml"  # the loss axis: one config per TRL loss variant
LOSSES = (
    "grpo",
    "dr_grpo",
    "dapo",
    "bnpo",
    "cispo",
    "sapo",
    "gspo",
)  # gspo: grpo, importance_sampling_level sequence


@dataclass(frozen=True)
class RunSummary:
    """One run's numbers, read from its folder."""

    config: str
    seed: int
    accuracy_before: float | None
    accuracy_after: float | None
    length_correct: float | None  # mean tokens of correct held-out answers after training
    length_wrong: float | None
    degenerate_share: float | None  # mean over the run's logged steps
    reward_start: float | None  # mean of TRL's `reward` over the first quarter of logged steps
    reward_end: float | None  # ... over the last quarter
    gap_end: float | None  # monitor/reward_correctness_gap over the last quarter
    steps: int
    seconds: float | None = None  # the run's wall time, evaluations included (report.json)
    step_time: float | None = None  # mean seconds per optimizer step (TRL's logged step_time; no evaluations)
    finished: bool = True  # False: no report.json yet (running, or killed): its numbers are so far, not final


def loss_configs(losses: list[str]) -> list[str]:
    """The loss axis: the config of each named loss variant, checked before anything runs.

    >>> loss_configs(["grpo", "gspo"])
    ['recipes/configs/lab/grpo_lab_loss_grpo.yaml', 'recipes/configs/lab/grpo_lab_loss_gspo.yaml']
    >>> loss_configs(["drgrpo"])
    Traceback (most recent call last):
    ...
    ValueError: unknown loss(es) ['drgrpo']: --losses takes names from grpo,dr_grpo,dapo,bnpo,cispo,sapo,gspo
    """
    unknown = [name for name in losses if name not in LOSSES]
    if unknown:
        raise ValueError(f"unknown loss(es) {unknown}: --losses takes names from {','.join(LOSSES)}")
    return [LOSS_CONFIG.format(name) for name in losses]


def split_list(values: list[str]) -> list[str]:
    """Command-line lists written either way: ``a,b c`` -> ``['a', 'b', 'c']``.

    >>> split_list(["0,1", "2"])
    ['0', '1', '2']
    """
    return [item for value in values for item in value.split(",") if item]


def run_dir(out: str | Path, config: str | Path, seed: int) -> Path:
    """``<out>/<config stem>/seed<seed>``.

    >>> run_dir("runs/m", "recipes/configs/lab/grpo_lab_default.yaml", 2).as_posix()
    'runs/m/grpo_lab_default/seed2'
    """
    return Path(out) / Path(config).stem / f"seed{seed}"


def _accuracies(folder: Path) -> str:
    """A finished run's held-out accuracy before -> after, from its report; a run that read no held-out set (the
    real-model lab reads its models itself) gives its last in-training check instead, named as such."""
    run = summarize_run(folder)
    path = folder / "report.json"
    if path.exists() and "after" not in (report := json.loads(path.read_text())):
        checks = report.get("validation") or {}  # an SFT run's dev checks; a GRPO run's are in its log
        last = checks.get("last", run.accuracy_after)
        return f"no held-out reading of its own; last in-training check {number(last)}"
    return f"held-out accuracy {number(run.accuracy_before)} -> {number(run.accuracy_after)}"


SETTINGS_FILE = "matrix_run.json"  # what a run was started with: a finished run is reused only for the same settings


def run_settings(config: str | Path, seed: int, extra_args) -> dict:
    """What makes two runs the same: the config's path and parsed options (not its text), the seed and extra flags."""
    return {
        "config": str(config),
        "config_settings": load_config(str(config)),
        "seed": seed,
        "extra_args": [str(a) for a in extra_args],
    }


def _recorded_matches_text(recorded: dict, config: str) -> bool:
    """A record written before runs recorded their config's settings holds the sha256 of its text instead."""
    return recorded.get("config_sha256") == hashlib.sha256(Path(config).read_bytes()).hexdigest()


def _change(key: str, then, now) -> str:
    """One changed setting in words; for the config's settings, only the options that differ.

    >>> _change("config_settings", {"max_steps": 30, "seed": 0}, {"max_steps": 80, "seed": 0})
    'config option max_steps: 30 then, 80 now'
    """
    if key == "config_settings" and isinstance(then, dict):
        options = sorted(k for k in then.keys() | now.keys() if then.get(k) != now.get(k))
        return "; ".join(f"config option {k}: {then.get(k)!r} then, {now.get(k)!r} now" for k in options)
    return f"{key}: {then!r} then, {now!r} now"


def check_finished(folder: Path, settings: dict) -> None:
    """Refuse to reuse a finished run whose recorded settings differ: it would enter the new table unnoticed. Config
    options that change nothing trained (``REUSABLE_ACROSS``: checkpoints, logging) may differ, and are named."""
    path = folder / SETTINGS_FILE
    if not path.exists():
        print(f"[matrix] {folder}: finished earlier, skipped (made before runs recorded their settings: not checked)")
        return
    recorded = json.loads(path.read_text())
    if "config_settings" not in recorded:  # recorded before the settings were: the sha256 of the config's text
        same_text = _recorded_matches_text(recorded, settings["config"])
        recorded["config_settings"] = settings["config_settings"] if same_text else "(a config text since changed)"
    then, now = recorded.get("config_settings"), settings["config_settings"]
    harmless = []
    if isinstance(then, dict):  # options that change nothing trained (save_steps) are compared as equal, and named
        harmless = sorted(k for k in then.keys() | now.keys() if k in REUSABLE_ACROSS and then.get(k) != now.get(k))
        kept = {k: v for k, v in then.items() if k not in harmless}
        recorded["config_settings"] = {**kept, **{k: now[k] for k in harmless if k in now}}
    changed = sorted(k for k in settings if recorded.get(k) != settings[k])
    if changed:
        diff = "; ".join(_change(k, recorded.get(k), settings[k]) for k in changed)
        raise ValueError(
            f"{folder} finished with other settings ({diff}): pass another --out, or delete that folder to run it again"
        )
    differs = f" (it differs only in {', '.join(harmless)}, which change nothing it trained)" if harmless else ""
    print(f"[matrix] {folder}: finished earlier with the same settings, skipped{differs}")


def run_matrix(configs: list[str], seeds: list[int], out: str | Path, extra_args: list[str] = (), **options):
    """Run every config with every seed, skipping finished runs; returns the folders. ``options`` are ``run_pairs``'s:
    ``jobs=N`` runs N processes at once (for small models, N one-thread runs get more done than one N-thread run:
    ``bench/matrix_jobs.py``), ``run_logs``, ``progress``."""
    return run_pairs([(config, seed) for config in configs for seed in seeds], out, extra_args, **options)


def run_pairs(
    pairs: list[tuple[str, int]],
    out: str | Path,
    extra_args: list[str] = (),
    jobs: int = 1,
    run_logs: bool = False,
    progress: bool = True,
) -> list[Path]:
    """``run_matrix`` for any list of (config, seed) runs: arms with different seeds share one queue of ``jobs``."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    for config in dict.fromkeys(config for config, _ in pairs):  # fail on a bad name before the first (long) run
        recipe_for(config)
        if not Path(config).exists():
            raise FileNotFoundError(f"config {config} does not exist: pass paths like recipes/configs/lab/*.yaml")
    folders, todo = [], []
    for config, seed in pairs:
        folder = run_dir(out, config, seed)
        folders.append(folder)
        settings = run_settings(config, seed, extra_args)
        if (folder / "report.json").exists():
            check_finished(folder, settings)  # before any run starts: a refusal costs nothing
        else:
            todo.append((config, seed, folder, settings))
    for _, _, folder, settings in todo:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SETTINGS_FILE).write_text(json.dumps(settings, indent=1))
    if jobs == 1:
        for config, seed, folder, _ in todo:
            if not run_logs:
                print(f"[matrix] running {config} seed {seed} -> {folder}")
                run_one(config, seed, folder, list(extra_args))
                continue
            print(f"[matrix] running {config} seed {seed} (log: {folder}/run.log)", flush=True)
            started = time.monotonic()
            try:
                with output_to(folder / "run.log"):
                    run_one(config, seed, folder, list(extra_args))
            except BaseException:
                print(f"[matrix] FAILED {folder}, see {folder}/run.log", flush=True)
                raise
            print(f"[matrix] finished {folder} in {time.monotonic() - started:.0f} s: {_accuracies(folder)}")
        return folders
    runs = [Run(config, seed, folder, list(extra_args)) for config, seed, folder, _ in todo]
    run_at_once(runs, jobs, label="matrix", describe=_accuracies, progress=progress)
    return folders


# ------------------------------------------------------------------------------------------------ reading the logs
def read_log(path: Path) -> list[dict]:
    """The training log rows (JSON lines) that carry training metrics, in step order; [] if there is no log."""
    if not path.exists():
        return []
    rows = read_jsonl(path, "a run killed while it wrote its log leaves a torn last line: delete that line")
    return [r for r in rows if "reward" in r or any(k.startswith("monitor/") for k in r)]


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.fmean(values) if values else None


def window(rows: list[dict], key: str, start: bool) -> float | None:
    """Mean of ``key`` over the first (``start``) or the last quarter of the rows that log it (at least one)."""
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return None
    n = max(1, math.ceil(len(values) * END_FRACTION))
    return _mean(values[:n] if start else values[-n:])


def _length(result: dict | None, which: str) -> float | None:
    stats = ((result or {}).get("length_tokens") or {}).get(which)
    return stats["mean"] if stats else None


def summarize_run(folder: str | Path) -> RunSummary:
    """Read one run folder (``report.json`` + ``log.jsonl``); missing pieces become None."""
    folder = Path(folder)
    report = json.loads((folder / "report.json").read_text()) if (folder / "report.json").exists() else {}
    rows = read_log(folder / "log.jsonl")
    before, after = report.get("before"), report.get("after")
    accuracy_after = after["accuracy"] if after else _last(rows, "eval/accuracy")
    return RunSummary(
        config=folder.parent.name,
        seed=int(folder.name.removeprefix("seed")) if folder.name.startswith("seed") else 0,
        accuracy_before=before["accuracy"] if before else None,
        accuracy_after=accuracy_after,
        length_correct=_length(after, "correct"),
        length_wrong=_length(after, "wrong"),
        degenerate_share=_mean(r.get("monitor/degenerate_share") for r in rows),
        reward_start=window(rows, "reward", start=True),
        reward_end=window(rows, "reward", start=False),
        gap_end=window(rows, "monitor/reward_correctness_gap", start=False),
        steps=max((r.get("step", 0) for r in rows), default=0),
        seconds=report.get("seconds"),
        step_time=_mean(r.get("step_time") for r in rows),
        finished=bool(report),
    )


def _last(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return values[-1] if values else None


def collect(out: str | Path) -> dict[str, list[RunSummary]]:
    """Every run under ``out`` (``<config>/seed<k>`` folders with a log or a report), grouped by config."""
    groups: dict[str, list[RunSummary]] = {}
    for folder in sorted(Path(out).glob("*/seed*")):
        if (folder / "report.json").exists() or (folder / "log.jsonl").exists():
            run = summarize_run(folder)
            groups.setdefault(run.config, []).append(run)
    return groups


def comparison_table(groups: dict[str, list[RunSummary]]) -> str:
    """The markdown comparison table, one row per config (values across seeds)."""
    header = [
        *("config", "seeds", "accuracy before", "accuracy after (mean ± std)", "length correct", "length wrong"),
        *("degenerate groups", "reward start → end", "reward-accuracy gap (end)", "seconds per step"),
    ]
    rows = []
    for config, runs in groups.items():
        m = lambda attr, runs=runs: _mean(getattr(r, attr) for r in runs)  # noqa: E731
        rows.append(
            [
                config,
                ", ".join(str(r.seed) if r.finished else f"{r.seed} (unfinished, step {r.steps})" for r in runs),
                number(m("accuracy_before")),
                mean_std_text([r.accuracy_after for r in runs]),
                number(m("length_correct"), ".1f"),
                number(m("length_wrong"), ".1f"),
                number(m("degenerate_share"), ".2f"),
                f"{number(m('reward_start'))} → {number(m('reward_end'))}",
                number(m("gap_end")),
                mean_std_text([r.step_time for r in runs], ".2f"),
            ]
        )
    return table(header, rows)


def plot_matrix(out: str | Path, groups: dict[str, list[RunSummary]]) -> list[Path]:
    """``accuracy.png`` (final accuracy per config, std across seeds) and ``curves.png`` (reward and accuracy)."""
    plt = pyplot()
    out = Path(out)
    names = list(groups)
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(names)), 3.5))
    after = [mean_std(r.accuracy_after for r in groups[n]) for n in names]
    before = [_mean(r.accuracy_before for r in groups[n]) for n in names]
    ax.bar(names, [a[0] or 0 for a in after], yerr=[a[1] or 0 for a in after], capsize=4, label="after")
    ax.scatter(names, [b if b is not None else math.nan for b in before], color="black", zorder=3, label="before")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1)
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    accuracy_png = save_figure(fig, out / "accuracy.png")

    fig, (ax_reward, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.5))
    for name in names:
        for ax, key in ((ax_reward, "reward"), (ax_acc, "eval/accuracy")):
            logs = [read_log(out / name / f"seed{r.seed}" / "log.jsonl") for r in groups[name]]
            steps, values = mean_by_step(
                [(row["step"], row[key]) for row in rows if row.get(key) is not None] for rows in logs
            )
            if steps:
                ax.plot(steps, values, marker=".", label=name)
    ax_reward.set(title="training reward (mean across seeds)", xlabel="step")
    ax_acc.set(title="held-out accuracy during training", xlabel="step")
    ax_reward.legend(fontsize=7)
    return [accuracy_png, save_figure(fig, out / "curves.png")]


def write_table(out: str | Path, plots: bool = True) -> Path:
    """Write ``<out>/matrix.md`` (the table, plus the plots unless ``plots=False``); return its path."""
    out = Path(out)
    groups = collect(out)
    if not groups:
        raise FileNotFoundError(
            f"no runs under {out}: expected <config>/seed<k>/ folders with report.json or log.jsonl"
        )
    text = ["# Matrix: configs x seeds", "", comparison_table(groups), ""]
    if plots:
        for png in plot_matrix(out, groups):
            text.append(f"![{png.stem}]({png.name})")
    return write_markdown(out / "matrix.md", text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cpu_lab.matrix", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="*", default=[], help="config YAML paths")
    parser.add_argument("--losses", nargs="*", default=[], help=f"loss axis, any of {','.join(LOSSES)} (adds configs)")
    parser.add_argument("--seeds", nargs="*", default=["0"], help="seeds: 0 1 2 or 0,1,2")
    parser.add_argument("--out", default="runs/lab/matrix")
    parser.add_argument("--table-only", action="store_true", help="only (re)write the table and plots")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each its own process (default 1: in turn)")
    argv = list(argv) if argv is not None else sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if not args.table_only:
        try:
            configs = args.configs + loss_configs(split_list(args.losses))
        except ValueError as error:
            parser.error(str(error))
        seeds = split_list(args.seeds)
        if not all(seed.isdigit() for seed in seeds):
            parser.error(f"--seeds takes whole numbers (0 1 2 or 0,1,2), got {args.seeds}")
        seeds = [int(seed) for seed in seeds]
        if not configs:
            parser.error("give --configs or --losses (or --table-only to re-read finished runs)")
        if args.jobs < 1:
            parser.error(f"--jobs must be >= 1, got {args.jobs}")
        run_matrix(configs, seeds, args.out, extra, jobs=args.jobs)
    path = write_table(args.out)
    print(path.read_text())
    print(f"matrix table: {path}")


if __name__ == "__main__":
    main()
