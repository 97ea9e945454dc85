"""The real-model lab: what GRPO adds after SFT on SmolLM2-135M-Instruct and 2 CPU cores, and what it does not.

1. Data (``cpu_lab.problems``): train, dev, test and OOD splits in ``<out>/data``, kept apart on the worked solution.
   Dev decides (the SFT stops); test is read once per model (the pretrained model, each start, each arm: a run's
   'before' is its start's reading, in ``<model>/eval_test``); OOD (more steps, larger numbers, new words) is read by
   no run and no choice.
2. Two SFT starts (``recipes.sft``, full fine-tuning): ``early`` stops once dev accuracy reaches the config's
   ``stop_at_accuracy`` (room for RL); ``plateau`` runs until dev accuracy stops rising, keeping its best check.
3. From each start, the arms (``recipes.grpo``, LoRA, with its monitors and probes; every start's in one queue,
   ``--jobs`` at a time):
   - ``grpo_real_default``: correctness + format bonus, on every seed of ``--seeds``;
   - ``sft_smollm2_more``: SFT continued from the start for the optimizer-step seconds the default arm took on that
     seed, as soon as that run has finished, in the same queue (as many threads, beside another run);
   - ``grpo_real_random``: a coin-flip reward (accuracy must not move by more than ``CONTROL_BAND``);
   - ``grpo_real_format_only``: the hackable format bonus alone (``--controls`` picks the controls);
   - with ``--sampling-arms``, on the first seed: ``grpo_real_dynamic`` (online dynamic sampling: groups whose
     answers all score alike are replaced by fresh prompts) and ``grpo_real_filtered`` (the training pool filtered
     offline to the problems the start solves sometimes but not always, from ``FILTER_K`` answers to each of
     ``--filter-problems`` problems): two answers to a start whose groups are mostly all right.
4. Every model (the starts and the arms) on the test set and the OOD set, greedy, each OOD shift on its own; with
   ``--passk K``, K samples per test and OOD problem at temperature 1 (pass@1..K: sharpening or new coverage?); with
   ``--forgetting-data``, how far each arm moved from its start on text outside the task (``eval forgetting``). An
   arm's evaluations run in its place in the queue, as soon as it has trained, with its threads; a start's come first,
   before its arms train, so that a lab stopped part way can read what its arms gained.
With ``--screen``, the lab chooses before it measures: from the first start, the default arm and the random control
with each setting's recipe options, read before and after on dev only (``<out>/screen/screen.md``, per start); then it
stops.

5. ``<out>/report.md`` leads with the answers: does GRPO beat its start, does it beat more SFT for the same compute,
   in-distribution (test) and out of distribution, and is it sharpening or new coverage; then the controls, every
   run's table, curves, probes, times and the commands that reproduce each stage (``cpu_lab.real_report``).

Finished stages are reused when their settings match (a killed lab continues where it stopped). Needs the model of
``make real-model`` (``runs/real_model/model``).

    make real-model && OMP_NUM_THREADS=2 python -m cpu_lab.real       # the default lab (docs/real_model_lab.md)
    python -m cpu_lab.real --steps 1 --sft-steps 2 --eval-limit 4 --out /tmp/real   # its mechanics in minutes
    python -m cpu_lab.real --seeds 0,1,2 --passk 64                 # three seeds, pass@1..64 on the test set
    python -m cpu_lab.real --starts plateau --sampling-arms dynamic,filtered   # online against offline filtering
    python -m cpu_lab.real --starts early --controls random         # one start, the random control alone
    python -m cpu_lab.real --starts early --screen '' --screen beta=0.3 --screen learning_rate=1e-5   # choose on dev
    python -m cpu_lab.real --report-only --out runs/real_lab        # rewrite the report
    python -m cpu_lab.real --summarize runs/real_lab/early/grpo/grpo_real_default/seed0   # one run's monitors
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime
from itertools import zip_longest
from pathlib import Path

from cpu_lab import matrix, runner
from cpu_lab.problems import OOD_SIZE, check_disjoint, write_lab_data
from cpu_lab.real_report import (
    BASE,
    LAB_INPUTS,
    SCREEN,
    STARTS,
    TEST_EVAL,
    TIMES,
    run_summary,
    screen_folder,
    test_result,
    train_seconds,
    write_report,
    write_screen_report,
)
from eval.jsonl import read_jsonl, write_jsonl
from recipes.parser import load_config

CONFIG_DIR = Path("recipes/configs/real_lab")
SFT_CONFIG = CONFIG_DIR / "sft_smollm2.yaml"
MORE_SFT_CONFIG = CONFIG_DIR / "sft_smollm2_more.yaml"
DEFAULT_ARM = "grpo_real_default"
CONTROLS = {"random": "grpo_real_random", "format_only": "grpo_real_format_only"}  # --controls
SAMPLING_ARMS = {  # --sampling-arms: GRPO arms that keep the groups informative where most are all right or all wrong
    "dynamic": "grpo_real_dynamic",  # online: DAPO's dynamic sampling (recipes/dynamic_sampling.py)
    "filtered": "grpo_real_filtered",  # offline: the training pool filtered by the start's pass rate
}
# --arm-options' defaults: a start's GRPO setting where dev chose one other than the configs'. From the plateau, 3e-5
# moved the random control -3.0 on dev (-3.4 on test); 1.5e-5 lifted dev +4.0 with the control at -1.5 (docs/LOG.md)
ARM_OPTIONS = {"plateau": "learning_rate=1.5e-5"}
FILTER_K = 8  # answers the start samples to each training problem before the filtered arm (its pass rate)
DPO_CONFIG = CONFIG_DIR / "dpo_real.yaml"
ROLLOUT_PROBLEMS, ROLLOUT_K = 128, 4  # 512 sampled answers: under half of a GRPO arm's 1,152 (36 steps x 32)
DEV_SIZE = 200
PROGRESS_SECONDS = 600  # between the lines naming the runs in training, each with its step
OOD_MAX_NEW_TOKENS = 96  # four equations of three-digit numbers fit; the test set's answers need 32
FORGETTING_DATA = ("tests/data/gsm8k/test.jsonl", "answer")  # GSM8K's reference solutions: outside the lab's task


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(  # no abbreviations: --control-seed is not --control-seeds
        prog="python -m cpu_lab.real",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--out", default="runs/real_lab", help="the lab's folder (data, sft/, one folder a start)")
    parser.add_argument("--model", default="runs/real_model/model", help="the pretrained model (make real-model)")
    parser.add_argument("--seeds", default="0", help="seeds of the default arm and its more-SFT twin, e.g. 0,1,2")
    parser.add_argument("--starts", default="early,plateau", help=f"SFT starts to run arms from: {', '.join(STARTS)}")
    parser.add_argument(
        "--controls",
        default=",".join(CONTROLS),
        help="controls run beside the default arm: random (a coin-flip reward), format_only (the format bonus alone), "
        "or both: random,format_only (the default); '' for none",
    )
    parser.add_argument(
        "--control-seeds",
        help="seeds of the random and format-only controls, e.g. 0,1,2 (default: the first of --seeds); a gain "
        "claimed on several seeds wants its control on each",
    )
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the configs')")
    parser.add_argument("--sft-steps", type=int, default=None, help="most SFT steps of a start (default: the config's)")
    parser.add_argument(
        "--eval-limit", type=int, default=None, help="test and dev problems per eval (default: the configs')"
    )
    parser.add_argument("--ood-limit", type=int, default=3 * OOD_SIZE, help="OOD problems per model (0: skip)")
    parser.add_argument("--passk", type=int, default=0, help="K samples per test problem for pass@1..K (0: skip)")
    parser.add_argument("--passk-limit", type=int, default=200, help="test (and OOD) problems sampled for pass@k")
    parser.add_argument(
        "--forgetting-data",
        default=FORGETTING_DATA[0],
        help="a .jsonl of text outside the task for `eval forgetting` ('' to skip)",
    )
    parser.add_argument("--forgetting-field", default=FORGETTING_DATA[1], help="its text field")
    parser.add_argument("--forgetting-limit", type=int, default=100, help="documents of it")
    parser.add_argument(
        "--sampling-arms",
        default="",
        help="also, from each start on the first seed: dynamic (online dynamic sampling), filtered (the training pool "
        "filtered offline by the start's pass rate), or both: dynamic,filtered",
    )
    parser.add_argument(
        "--filter-problems", type=int, default=512, help=f"training problems the start samples {FILTER_K} answers to"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (1: in turn, in this process)")
    parser.add_argument("--dpo", action="store_true", help="also DPO from each start on its own verified rollouts")
    parser.add_argument(
        "--screen",
        action="append",
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="choose on dev instead: from the first start, the default arm (first seed) and the random control (each "
        "of --control-seeds) with these GRPO recipe options (e.g. beta=0.3; '' for the configs as they are), read on "
        "dev only; repeat for several; the lab stops after them (<out>/screen/<start>/...; screen.md)",
    )
    parser.add_argument(
        "--arm-options",
        action="append",
        metavar="START:KEY=VALUE[,KEY=VALUE]",
        help="GRPO recipe options for every GRPO arm from one start, its controls included (a setting chosen on dev "
        "with --screen); repeat for each start; 'START:' for the configs as they are (default: "
        + ", ".join(f"{start}:{setting}" for start, setting in ARM_OPTIONS.items())
        + ")",
    )
    parser.add_argument("--summarize", metavar="RUN_DIR", help="print a GRPO run's monitors at the start and the end")
    parser.add_argument("--report-only", action="store_true", help="only (re)write the report of finished runs")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in matrix.split_list([args.seeds])]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give whole numbers, e.g. --seeds 0,1")
    try:
        control_seeds = [int(s) for s in matrix.split_list([args.control_seeds])] if args.control_seeds else seeds[:1]
    except ValueError:
        parser.error(f"--control-seeds {args.control_seeds!r}: give whole numbers, e.g. --control-seeds 0,1")
    starts = matrix.split_list([args.starts])
    if unknown := [s for s in starts if s not in STARTS]:
        parser.error(f"--starts {','.join(unknown)}: give one or more of {','.join(STARTS)}")
    controls = matrix.split_list([args.controls])
    if unknown := [c for c in controls if c not in CONTROLS]:
        parser.error(f"--controls {','.join(unknown)}: give one or more of {','.join(CONTROLS)}, or '' for none")
    sampling_arms = matrix.split_list([args.sampling_arms])
    if unknown := [a for a in sampling_arms if a not in SAMPLING_ARMS]:
        parser.error(f"--sampling-arms {','.join(unknown)}: give one or more of {','.join(SAMPLING_ARMS)}")
    for name in ("steps", "sft_steps", "eval_limit"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.filter_problems < 1:
        parser.error(f"--filter-problems must be >= 1, got {args.filter_problems}")
    for name in ("ood_limit", "passk", "passk_limit", "forgetting_limit"):
        if getattr(args, name) < 0 or (name in ("passk_limit", "forgetting_limit") and getattr(args, name) < 1):
            parser.error(f"--{name.replace('_', '-')} must be >= {0 if name in ('ood_limit', 'passk') else 1}")
    if args.passk == 1:
        parser.error("--passk 1 is one sample a problem, the greedy eval's job: give K >= 2, e.g. 64")
    if args.forgetting_data and not Path(args.forgetting_data).is_file():
        parser.error(f"--forgetting-data {args.forgetting_data}: no such file (pass a .jsonl, or '' to skip)")
    screens = {setting: screen_flags(setting, parser) for setting in args.screen or []}
    given_options = {}  # start -> GRPO recipe flags for each GRPO arm from it (a start not named: ARM_OPTIONS)
    for given in args.arm_options or []:
        start, sep, setting = given.partition(":")
        if not sep or start not in STARTS or start in given_options:
            why = "named twice" if start in given_options else f"name one of {', '.join(STARTS)} once"
            parser.error(f"--arm-options {given!r}: give START:KEY=VALUE ({why}), e.g. plateau:learning_rate=1.5e-5")
        given_options[start] = screen_flags(setting, parser, flag="--arm-options")
    arm_options = {start: screen_flags(setting, parser) for start, setting in ARM_OPTIONS.items()} | given_options
    out = Path(args.out)
    if args.summarize:
        text = run_summary(Path(args.summarize))
        print(text)
        return text
    if args.report_only:
        if (out / SCREEN).is_dir():
            print(f"[real] screen on dev: {write_screen_report(out / SCREEN)}")
        return write_report(out, {})
    if not (Path(args.model) / "config.json").exists():
        parser.error(f"no model at {args.model}: run `make real-model` first (or pass --model DIR)")
    if args.jobs < 1 or not seeds:
        parser.error("--jobs must be >= 1 and --seeds must name at least one seed")
    data = out / "data"
    if (data / "heldout.jsonl").exists() and not (data / "test.jsonl").exists():
        parser.error(f"{data} holds data split on the question text alone: pass a new --out (or delete {data})")
    started, seconds = time.monotonic(), {}
    starts = starts[:1] if screens else starts  # a screen needs the first start only
    then = f"then {len(screens)} setting(s) on dev" if screens else f"then from each the arms (seeds {seeds})"
    print(f"[real] SmolLM2 lab in {out}: data, SFT starts {starts}, {then}", flush=True)

    # 1. Data (written once: the runs' settings name these files), refused if a dev/test/OOD solution is in training
    if not (data / "test.jsonl").exists():
        write_lab_data(data, test_n=default_arm_config()["eval_limit"])  # the whole test set, before and after
    check_disjoint({split: data / f"{split}.jsonl" for split in ("train", "dev", "test", "ood")})
    # The recipes evaluate nothing on test (--eval_limit 0): the lab reads each model once (extra_evals)
    inputs = ["--data", str(data / "train.jsonl"), "--eval_data", str(data / "test.jsonl"), "--eval_limit", "0"]

    # 2. The SFT starts, through the recipe (reused when finished with the same settings). Several starts on several
    #    jobs train in the queue below, each on its share of the cores, its arms starting as soon as it has finished;
    #    otherwise (one start, one job, or a screen) each start trains now, on this process's threads
    sft_flags = ["--model_name_or_path", args.model, "--data", str(data / "train.jsonl")]
    sft_flags += ["--eval_data", str(data / "test.jsonl"), "--eval_limit", "0"]
    sft_flags += ["--validation_data", str(data / "dev.jsonl")]
    sft_flags += [] if args.sft_steps is None else ["--max_steps", str(args.sft_steps)]
    sft_flags += [] if args.eval_limit is None else ["--validation_limit", str(args.eval_limit)]
    queue_starts = len(starts) > 1 and args.jobs > 1 and not screens
    jobs = args.jobs if queue_starts else 1
    sft_tasks = {name: _sft_task(name, out / "sft", seeds[0], sft_flags, jobs) for name in starts}
    start_dirs = {name: matrix.run_dir(out / "sft", CONFIG_DIR / f"{STARTS[name]}.yaml", seeds[0]) for name in starts}
    if not queue_starts:
        t0 = time.monotonic()
        with every(PROGRESS_SECONDS, lambda: training_now(out, started)):
            for task in sft_tasks.values():
                task()
        seconds["SFT starts"] = time.monotonic() - t0

    # With --screen: from the first start, each setting's default arm and random control on dev; then stop
    if screens:
        dev = ["--data", str(data / "train.jsonl"), "--eval_data", str(data / "dev.jsonl")]
        dev += ["--eval_limit", str(args.eval_limit or DEV_SIZE), "--monitor_eval_data", str(data / "dev.jsonl")]
        dev += ["--model_name_or_path", str(start_dirs[starts[0]])]
        dev += [] if args.steps is None else ["--max_steps", str(args.steps)]
        runs = [(str(CONFIG_DIR / f"{DEFAULT_ARM}.yaml"), seeds[0])]
        runs += [(str(CONFIG_DIR / f"{CONTROLS['random']}.yaml"), seed) for seed in control_seeds]
        for setting, flags in screens.items():
            folder = out / SCREEN / starts[0] / screen_folder(setting) / "grpo"
            matrix.run_pairs(runs, folder, [*dev, *flags], jobs=args.jobs, run_logs=True, progress=True)
        report = write_screen_report(out / SCREEN)
        print(f"[real] screen on dev: {report} ({time.monotonic() - started:.0f} s in all)", flush=True)
        return report

    # 3. The arms of every start in one queue, --jobs at a time: each start's GRPO runs (a control beside seed 0), then
    #    its more-SFT runs, each as soon as its GRPO twin has finished (the twin's seconds are its budget), so that
    #    both sides of the comparison train beside another run, at the same load; each run's evaluations follow it
    t0 = time.monotonic()
    tasks = [((name, "sft"), None, task) for name, task in sft_tasks.items()] if queue_starts else []

    def grpo_flags_from(name: str) -> list[str]:  # a GRPO arm's flags from one start (the queue's and the filtered)
        start = start_dirs[name]
        flags = [*inputs, "--model_name_or_path", str(start), "--monitor_eval_data", str(data / "dev.jsonl")]
        return flags + ([] if args.steps is None else ["--max_steps", str(args.steps)]) + arm_options.get(name, [])

    after = {name: (name, "sft") if queue_starts else None for name in start_dirs}  # a start's runs wait for it
    for name, start in start_dirs.items():
        # the start's own readings first: each arm is read against them, so a lab stopped part way has its answers
        tasks.append(((name, "eval"), after[name], _eval_task(start, data, args)))
        grpo_flags = grpo_flags_from(name)
        runs = [(str(CONFIG_DIR / f"{DEFAULT_ARM}.yaml"), seed) for seed in seeds]
        runs[1:1] = [(str(CONFIG_DIR / f"{CONTROLS[c]}.yaml"), seed) for seed in control_seeds for c in controls]
        if "dynamic" in sampling_arms:
            runs.append((str(CONFIG_DIR / f"{SAMPLING_ARMS['dynamic']}.yaml"), seeds[0]))
        for config, seed in runs:
            tasks.append(
                (
                    (name, Path(config).stem, seed),
                    after[name],
                    _grpo_task(config, seed, start, out / name, grpo_flags, args),
                )
            )
        for seed in seeds:
            twin = (name, DEFAULT_ARM, seed)
            tasks.append(
                ((name, MORE_SFT_CONFIG.stem, seed), twin, _more_sft_task(seed, start, out / name, inputs, args))
            )
    # last, the pretrained model's readings: they fill a core while the last arms run
    tasks.append(((BASE, "eval"), None, lambda: base_eval(out, args, threads=queue_threads(args.jobs))))
    with every(PROGRESS_SECONDS, lambda: training_now(out, started)):
        run_tasks(tasks, args.jobs)
    seconds[
        "SFT starts, GRPO arms, more SFT and their evaluations"
        if queue_starts
        else "GRPO arms, more SFT and their evaluations"
    ] = time.monotonic() - t0
    for name, start in start_dirs.items() if "filtered" in sampling_arms else ():
        t0 = time.monotonic()  # the start's pass rates first, then GRPO on the problems it sometimes solves
        pool = filtered_pool(start, data, out / name / "filtered", args.filter_problems)
        if pool is not None:
            flags = [*grpo_flags_from(name), "--data", str(pool)]  # the last --data wins
            config = str(CONFIG_DIR / f"{SAMPLING_ARMS['filtered']}.yaml")
            arm = matrix.run_dir(out / name / "grpo", config, seeds[0])
            with clocked(arm, Path(config).stem, runner.own_threads(), training=True):
                matrix.run_matrix([config], seeds[:1], out / name / "grpo", flags, run_logs=True)
        seconds[f"filtered pool and arm from {name}"] = time.monotonic() - t0

    # 4. DPO from each start on pairs from its own verified rollouts, on the same test problems
    for name, start in start_dirs.items() if args.dpo else ():
        t0 = time.monotonic()
        rollouts = sample_rollouts(start, data, out / name / "rollouts", args.eval_limit)
        flags = [*inputs, "--model_name_or_path", str(start), "--data", str(rollouts)]
        dpo = matrix.run_dir(out / name / "dpo", DPO_CONFIG, seeds[0])
        with clocked(dpo, DPO_CONFIG.stem, runner.own_threads(), training=True):
            matrix.run_matrix([str(DPO_CONFIG)], seeds[:1], out / name / "dpo", flags, run_logs=True)
        seconds[f"DPO from {name} (rollouts and training)"] = time.monotonic() - t0

    # 5. Every model on the test and OOD sets; pass@k and forgetting where asked (what the queue has not read)
    t0 = time.monotonic()
    base_eval(out, args)
    for name, start in start_dirs.items():
        for model in [start, *arm_folders(out / name)]:
            base = None if model == start else start
            extra_evals(model, base, data, args)
    seconds["evaluations left after the queue"] = time.monotonic() - t0
    seconds["whole lab"] = time.monotonic() - started

    # 6. The report
    report = write_report(out, seconds)
    print(f"[real] report: {report} ({seconds['whole lab']:.0f} s in all)", flush=True)
    return report


def _sft_task(name: str, sft_out: Path, seed: int, flags: list[str], jobs: int) -> Callable[[], object]:
    """One SFT start through the recipe (``jobs`` > 1: in the queue, a process with its share of the cores; 1: in
    this process, on its threads), then its dev summary."""

    def run():
        config = CONFIG_DIR / f"{STARTS[name]}.yaml"
        folder = matrix.run_dir(sft_out, config, seed)
        with clocked(folder, config.stem, queue_threads(jobs) or runner.own_threads(), training=True):
            matrix.run_matrix([str(config)], [seed], sft_out, flags, jobs=jobs, run_logs=True, progress=False)
        sft = json.loads((folder / "report.json").read_text())
        v = sft.get("validation") or {}
        dev = v.get("best", v.get("last"))
        print(
            f"[real] SFT {name}: {sft['steps']} steps, dev {'–' if dev is None else dev} ({v.get('why', 'no check')})"
        )

    return run


def _grpo_task(config: str, seed: int, start: Path, start_out: Path, flags: list[str], args) -> Callable[[], object]:
    """One GRPO run of the queue (a process of its own with --jobs > 1), then its evaluations."""

    def run():
        model = matrix.run_dir(start_out / "grpo", config, seed)
        with clocked(model, Path(config).stem, queue_threads(args.jobs) or runner.own_threads(), training=True):
            matrix.run_pairs([(config, seed)], start_out / "grpo", flags, jobs=args.jobs, run_logs=True, progress=False)
        extra_evals(model, start, start_out.parent / "data", args, threads=queue_threads(args.jobs))

    return run


def _more_sft_task(seed: int, start: Path, start_out: Path, inputs: list[str], args) -> Callable[[], object]:
    """More SFT from ``start`` for the optimizer-step seconds its GRPO twin (the default arm, ``seed``) took, then its
    evaluations."""

    def run():
        budget = train_seconds(start_out / "grpo" / DEFAULT_ARM / f"seed{seed}")
        flags = [*inputs, "--model_name_or_path", str(start), "--max_train_seconds", f"{budget:.1f}"]
        model = matrix.run_dir(start_out, MORE_SFT_CONFIG, seed)
        with clocked(model, MORE_SFT_CONFIG.stem, queue_threads(args.jobs) or runner.own_threads(), training=True):
            matrix.run_matrix(
                [str(MORE_SFT_CONFIG)], [seed], start_out, flags, jobs=args.jobs, run_logs=True, progress=False
            )
        extra_evals(model, start, start_out.parent / "data", args, threads=queue_threads(args.jobs))

    return run


def _eval_task(model: Path, data: Path, args) -> Callable[[], object]:
    """A start's evaluations as a task of the queue."""
    return lambda: extra_evals(model, None, data, args, threads=queue_threads(args.jobs))


def training_now(out: Path, started: float, fresh: float = 900) -> str:
    """The runs under ``out`` still training (a log written in the last ``fresh`` seconds and no report yet), each with
    its step, of how many, and its seconds of training a step so far: the lab's progress between its queue's lines."""
    going = []
    for log in sorted(out.glob("**/seed*/log.jsonl")):
        folder = log.parent
        if (folder / "report.json").exists() or time.time() - log.stat().st_mtime > fresh:
            continue
        last = runner.last_logged(folder)
        step, seconds = last.get("step", 0), last.get("train_seconds")
        config = folder / "resolved_config.json"
        planned = json.loads(config.read_text()).get("max_steps") if config.exists() else None
        rate = f", {seconds / step:.0f} s of training a step" if seconds and step else ""
        going.append(f"{folder.relative_to(out)} step {step}{f'/{planned}' if planned else ''}{rate}")
    minutes = (time.monotonic() - started) / 60
    return f"[real] {minutes:.0f} min: training {'; '.join(going)}" if going else ""


@contextlib.contextmanager
def every(seconds: float, say: Callable[[], str]) -> Iterator[None]:
    """While open, print ``say()`` every ``seconds`` (nothing when it is empty), from a thread of its own, to the
    console it had when it opened: a run inside this process sends fd 1 to its ``run.log`` meanwhile
    (``runner.output_to``), and the lab's progress stays on the console."""
    stop = threading.Event()
    with runner.console() as console:

        def loop():
            while not stop.wait(seconds):
                if text := say():
                    print(text, file=console, flush=True)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def queue_threads(jobs: int) -> int | None:
    """Threads of an evaluation in the queue: the cores shared by ``jobs`` runs (None: this process's own, in turn)."""
    return None if jobs == 1 else runner.threads_per_job(jobs)


def run_tasks(tasks: list[tuple[tuple, tuple | None, Callable[[], object]]], jobs: int) -> None:
    """Run ``(key, the key it waits for or None, task)`` in order, ``jobs`` at a time: a task starts when a worker is
    free and the task it waits for (earlier in the list) has finished. A failed task does not stop the others (one
    that waits for it fails too); a RuntimeError names them all at the end. ``jobs=1``: in turn, in this thread."""
    done: dict[tuple, Future] = {}
    started, finished = time.monotonic(), []

    def wait_then(key, after, task):
        if after is not None:
            done[after].result()  # earlier in the list, so running or finished already: no deadlock
        try:
            return task()
        finally:
            finished.append(key)
            minutes = (time.monotonic() - started) / 60
            print(f"[real] {len(finished)}/{len(tasks)} tasks of the queue done ({minutes:.0f} min)", flush=True)

    if jobs == 1:
        for key, after, task in tasks:
            done[key] = Future()
            try:
                done[key].set_result(wait_then(key, after, task))
            except Exception as error:  # noqa: BLE001 - named below, after the others ran
                done[key].set_exception(error)
    else:
        pool = ThreadPoolExecutor(max_workers=jobs)
        try:
            for key, after, task in tasks:
                done[key] = pool.submit(wait_then, key, after, task)
            wait(list(done.values()))
        except BaseException:  # Ctrl-C: no run of the queue starts after it (the runs going on get it too)
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    failed = [f"{'/'.join(map(str, key))}: {f.exception()}" for key, f in done.items() if f.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} run(s) of the lab failed: {'; '.join(failed)}")


def screen_flags(setting: str, parser: argparse.ArgumentParser, flag: str = "--screen") -> list[str]:
    """A ``--screen`` (or ``--arm-options``) setting (``beta=0.3,learning_rate=1e-5``) as GRPO recipe flags; a name the
    recipe does not have, or a name the lab itself sets (its data and evaluation), is refused before anything runs."""
    from recipes.parser import table_parser  # the recipe's shipped table of options: no torch

    options = {a.dest for a in table_parser("recipes.grpo")._actions if a.option_strings}
    flags = []
    for item in filter(None, (part.strip() for part in setting.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not value or key not in options or key in LAB_INPUTS:
            why = "set by the lab" if key in LAB_INPUTS else "give KEY=VALUE with an option of recipes.grpo"
            parser.error(f"{flag} {setting!r}: {item!r} is not a GRPO setting to choose ({why}, e.g. beta=0.3)")
        flags += [f"--{key}", value]
    return flags


def _acc(result: dict | None) -> str:
    return "–" if not result else f"{result['accuracy']:.3f}"


def default_arm_config() -> dict:
    """The default GRPO arm's config: the test set's size and the rollouts' temperature and length follow it."""
    return load_config(CONFIG_DIR / f"{DEFAULT_ARM}.yaml")


def arm_folders(start_out: Path) -> list[Path]:
    """The finished arms' folders under one start's folder: ``grpo/<arm>/seed<k>``, ``sft_smollm2_more/seed<k>``
    and ``dpo/<config>/seed<k>``."""
    found = [*start_out.glob("grpo/*/seed*"), *start_out.glob(f"{MORE_SFT_CONFIG.stem}/seed*")]
    found += start_out.glob("dpo/*/seed*")
    return sorted(f for f in found if (f / "report.json").exists())


def test_eval_job(args) -> tuple[str, list[str]]:
    """The one reading of the test set every model gets: greedy, the default arm's problems and answer length."""
    grpo = default_arm_config()
    test = ["run", "--data", str(Path(args.out) / "data" / "test.jsonl")]
    test += [
        "--limit",
        str(args.eval_limit or grpo["eval_limit"]),
        "--max-new-tokens",
        str(grpo["eval_max_new_tokens"]),
    ]
    return TEST_EVAL, test


def base_eval(out: Path, args, threads: int | None = None) -> None:
    """The pretrained model (``--model``) on the test set, once, in ``<out>/base/eval_test``: every start's 'before'."""
    name, cmd = test_eval_job(args)
    folder = out / BASE
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / name / "results.json").exists():
        _eval(
            [*cmd, "--model", args.model, "--task", "lab", "--out", str(folder / name)], folder / f"{name}.log", threads
        )


def extra_evals(model: Path, base: Path | None, data: Path, args, threads: int | None = None) -> None:
    """``eval run`` on the test set and the OOD set (greedy) and, with ``--passk``, K samples per test problem; with
    ``--forgetting-data`` and a ``base`` (the model's start), ``eval forgetting``. Each in the model's folder, once,
    with ``threads`` torch threads (None: this process's)."""
    grpo = default_arm_config()
    jobs = [test_eval_job(args)]
    if args.ood_limit:
        greedy = ["run", "--data", str(ood_subset(data, args.ood_limit))]
        jobs.append(("eval_ood", [*greedy, "--max-new-tokens", str(OOD_MAX_NEW_TOKENS)]))
    if args.passk:
        # one problem a generation call: its K answers are already a batch, and 8 problems x 64 answers a call took
        # 1.6x as long on one thread as one problem a call (235 s against 148 s, the cache of 512 answers churning)
        sampling = ["--num-samples", str(args.passk), "--temperature", str(grpo["temperature"]), "--batch-size", "1"]
        sampled = ["run", "--data", str(data / "test.jsonl"), "--limit", str(args.passk_limit), *sampling]
        jobs.append((f"eval_pass{args.passk}", [*sampled, "--max-new-tokens", str(grpo["eval_max_new_tokens"])]))
        if args.ood_limit:  # the same K samples on the OOD problems, at the OOD answers' length
            ood = ["run", "--data", str(ood_subset(data, min(args.ood_limit, args.passk_limit)))]
            jobs.append((f"eval_ood_pass{args.passk}", [*ood, *sampling, "--max-new-tokens", str(OOD_MAX_NEW_TOKENS)]))
    lora = base is not None and (model / "adapter_config.json").exists()  # a LoRA arm: its start + adapter
    weights = ["--model", str(base), "--adapter", str(model)] if lora else ["--model", str(model)]
    for name, cmd in jobs:
        if not (model / name / "results.json").exists():
            _eval([*cmd, *weights, "--task", "lab", "--out", str(model / name)], model / f"{name}.log", threads)
            if name == TEST_EVAL:
                print(f"[real] {model}: test {_acc(test_result(model))}", flush=True)
    if args.forgetting_data and base is not None and not (model / "forgetting" / "forgetting.json").exists():
        cmd = ["forgetting", "--base", str(base), "--model", str(model), "--data", args.forgetting_data]
        cmd += ["--field", args.forgetting_field, "--limit", str(args.forgetting_limit)]
        _eval([*cmd, "--out", str(model / "forgetting")], model / "forgetting.log", threads)


def ood_subset(data: Path, n: int) -> Path:
    """The OOD set, or its first ``n`` problems taken from each shift in turn, in ``data/ood_first<n>.jsonl`` (written
    once): ``ood.jsonl`` holds one block per shift, so its own first ``n`` would be the first shift alone."""
    rows = read_jsonl(data / "ood.jsonl")
    if n >= len(rows):
        return data / "ood.jsonl"
    path = data / f"ood_first{n}.jsonl"
    if not path.exists():
        shifts: dict[str, list[dict]] = {}
        for row in rows:
            shifts.setdefault(row["shift"], []).append(row)
        in_turn = [row for turn in zip_longest(*shifts.values()) for row in turn if row is not None]
        write_jsonl(in_turn[:n], path)
    return path


def _eval(cmd: list[str], log: Path, threads: int | None = None) -> None:
    print(f"[real] eval {cmd[0]}: {log.parent} (log: {log})", flush=True)
    (log.with_suffix(".command.txt")).write_text(shlex.join(["python", "-m", "eval", *cmd]) + "\n")
    env = None if threads is None else runner.thread_env(threads)
    with clocked(log.parent, log.stem, threads or runner.own_threads()), open(log, "w") as f:
        subprocess.run([sys.executable, "-m", "eval", *cmd], stdout=f, stderr=subprocess.STDOUT, check=True, env=env)


@contextlib.contextmanager
def clocked(folder: Path, what: str, threads: int, training: bool = False) -> Iterator[None]:
    """Times a stage of the lab in ``folder`` (a run's training, an evaluation of its model) and, when it ends without
    an error, adds a line to ``<folder>/lab_times.jsonl``: what ran, its seconds, threads, this CPU, the load average
    before and after, the date. A run finished earlier (reused) adds none; one resumed from a checkpoint, or an
    evaluation from the answers a stopped one left (``<folder>/<what>/samples.jsonl``), is timed from there and marked
    ``resumed``."""
    finished_before = training and (folder / "report.json").exists()
    resumed = any(folder.glob("checkpoint-*")) if training else (folder / what / "samples.jsonl").exists()
    date, load, started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), os.getloadavg()[0], time.monotonic()
    yield
    if finished_before:
        return
    line = {"what": what, "seconds": round(time.monotonic() - started, 1), "threads": threads}
    line |= {"cpu": runner.cpu_kind(), "load": [round(load, 1), round(os.getloadavg()[0], 1)], "date": date}
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / TIMES, "a") as f:
        f.write(json.dumps(line | {"resumed": resumed}) + "\n")


def filtered_pool(start: Path, data: Path, out: Path, problems: int) -> Path | None:
    """``<out>/train.jsonl``: the first ``problems`` training problems that the start, sampling ``FILTER_K`` answers
    to each at the GRPO arms' temperature and length, solves sometimes but not always (``training_data.rollouts``
    sample, then ``filter_by_pass_rate``); ``<out>/filter.json`` holds the counts and the sampling's seconds. None
    when no problem is left (the arm does not run). Once."""
    from training_data.rollouts import filter_by_pass_rate, grpo_rows, read_rollouts

    pool, record = out / "train.jsonl", out / "filter.json"
    if record.exists():
        print(f"[real] filtered pool: {record} exists, reused")
        return pool if pool.exists() else None
    grpo = default_arm_config()
    cmd = [sys.executable, "-m", "training_data.rollouts", "sample", "--model", str(start), "--task", "lab"]
    cmd += ["--data", str(data / "train.jsonl"), "--limit", str(problems), "--k", str(FILTER_K)]
    cmd += ["--temperature", str(grpo["temperature"]), "--max-new-tokens", str(grpo["max_completion_length"])]
    cmd += ["--out", str(out / "rollouts")]
    out.mkdir(parents=True, exist_ok=True)
    print(f"[real] filtered pool: {problems} problems x {FILTER_K} answers (log: {out}/sample.log)", flush=True)
    (out / "sample.command.txt").write_text(shlex.join(["python", *cmd[1:]]) + "\n")  # for the report's commands
    t0 = time.monotonic()
    with open(out / "sample.log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    seconds = time.monotonic() - t0
    margin = 0.5 / FILTER_K  # keep 1..K-1 right of K: a pass rate strictly between 0 and 1
    kept, report = filter_by_pass_rate(read_rollouts(out / "rollouts"), margin, 1 - margin, grpo["num_generations"])
    record.write_text(json.dumps(report | {"k": FILTER_K, "sampling_seconds": round(seconds, 1)}, indent=1))
    if not kept:
        print(f"[real] the start solves each of the {problems} problems always or never: no filtered arm", flush=True)
        return None
    write_jsonl(grpo_rows(kept, "lab"), pool)
    return pool


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


if __name__ == "__main__":
    main()
