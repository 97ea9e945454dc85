"""How every lab launches a recipe run: the config's file name names the recipe, and the run goes through the recipe's
own command line and checks (``recipes.common.parse_or_explain``), in this process or as its own process.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import NamedTuple

from tqdm import tqdm

from recipes.parser import load_config

ROOT = Path(__file__).resolve().parents[1]

# the config file name's prefix -> the recipe module that runs it (a judge-lab config is a GRPO config)
RECIPES = {
    "grpo_": "recipes.grpo",
    "judge_lab_": "recipes.grpo",
    "dpo_": "recipes.dpo",
    "sft_": "recipes.sft",
    "reward_model_": "recipes.reward_model",
}


def recipe_for(config: str | Path) -> str:
    """The recipe module a config belongs to, from its file name prefix.

    >>> recipe_for("recipes/configs/lab/grpo_lab_default.yaml"), recipe_for("judge_lab_tiny_judge_b0.04.yaml")
    ('recipes.grpo', 'recipes.grpo')
    >>> recipe_for("configs/train.yaml")
    Traceback (most recent call last):
    ...
    ValueError: config configs/train.yaml: the file name must start with one of grpo_, judge_lab_, dpo_, sft_, reward_model_ (it names the recipe)
    """  # noqa: E501
    name = Path(config).name
    for prefix, module in RECIPES.items():
        if name.startswith(prefix):
            return module
    raise ValueError(
        f"config {config}: the file name must start with one of {', '.join(RECIPES)} (it names the recipe)"
    )


def recipe_module(config: str | Path):
    """The recipe module of ``config``, imported; a recipe that does not exist is an error, never a skip."""
    name = recipe_for(config)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise  # the recipe exists but something it imports does not: that error says what
        raise ModuleNotFoundError(
            f"config {config}: its file name names the recipe {name}, which does not exist (see RECIPES in "
            "cpu_lab/runner.py)",
            name=name,
        ) from error


def run_flags(seed: int | None, out_dir: str | Path, extra_args: Sequence[str]) -> list[str]:
    """The flags of one run after its ``--config``: the seed (none: the config's), the output folder, the rest.

    >>> run_flags(1, "runs/x", ["--max_steps", "2"])
    ['--seed', '1', '--output_dir', 'runs/x', '--max_steps', '2']
    """
    seed_flags = [] if seed is None else ["--seed", str(seed)]
    return [*seed_flags, "--output_dir", str(out_dir), *map(str, extra_args)]


def parse(config: str | Path, extra_args: Sequence[str] = ()):
    """(recipe module, its parsed arguments) for ``--config config`` plus ``extra_args``, with the recipe's checks."""
    from recipes.common import parse_or_explain  # ~5 s that a lab's --help and its argument errors do not pay

    module = recipe_module(config)
    return module, parse_or_explain(module.make_parser(), ["--config", str(config), *map(str, extra_args)])


def run_one(config: str | Path, seed: int | None, out_dir: str | Path, extra_args: Sequence[str]) -> dict:
    """Run one config in this process, as ``python -m <recipe>`` runs it; returns the recipe's report."""
    module, parsed = parse(config, run_flags(seed, out_dir, extra_args))
    return module.main(*parsed[:3])


def thread_env(threads: int) -> dict[str, str]:
    """This process's environment with ``threads`` torch (OpenMP, MKL) threads, for a child process."""
    return os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def own_threads() -> int:
    """The torch threads of a run in this process: ``OMP_NUM_THREADS``, else every core."""
    return int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)


BF16_UNITS = ("amx_bf16", "avx512_bf16")  # the CPU flags of bf16 matmul units (recipes.precision reads the same)


def cpu_kind(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    r"""This machine's CPU as the labs name it beside a time: its model name and its bf16 units, or ``unknown CPU``.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", delete=False) as f:
    ...     _ = f.write("model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n")
    >>> cpu_kind(f.name)
    'AMD EPYC, no bf16 units'
    """
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return "unknown CPU"
    info = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)  # the first core
    info = {key.strip(): value.strip() for key, value in info.items()}
    units = [flag for flag in BF16_UNITS if flag in info.get("flags", "").split()]
    return f"{info.get('model name', 'unknown CPU')}, {', '.join(units) or 'no bf16 units'}"


def threads_per_job(jobs: int) -> int:
    """Each of ``jobs`` processes at once gets the cores divided among them (at least one)."""
    return max(1, (os.cpu_count() or 1) // jobs)


def run_subprocess(config: str | Path, seed: int | None, out_dir: Path, extra_args: Sequence[str], threads: int):
    """Start one run as ``python -m <recipe>`` with ``threads`` torch threads, its output in ``<out_dir>/run.log``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", recipe_for(config), "--config", str(config), *run_flags(seed, out_dir, extra_args)]
    env = thread_env(threads)
    # leash's modules (the recipe, and hooks a config names such as reward_model_lab's) import from any folder
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    with open(out_dir / "run.log", "w") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def output_to(path: str | Path):
    """Send this process's stdout and stderr, C libraries' included, to ``path`` meanwhile; yields a stream on the
    terminal for what the user should still see."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds, saved_streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    on_fd1, on_fd2 = on_fd(sys.stdout, 1), on_fd(sys.stderr, 2)
    with console() as terminal, open(path, "w", buffering=1) as log:
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            # a stream on fd 1 or 2 now writes to the file and stays the stream it was, so a logging handler made
            # meanwhile (transformers makes one on sys.stderr) still writes after this file closes; a stream of its
            # own (a test's capture) does not follow the fds, so it is pointed at the file while the run lasts
            sys.stdout = sys.stdout if on_fd1 else log
            sys.stderr = sys.stderr if on_fd2 else log
            yield terminal
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            sys.stdout, sys.stderr = saved_streams
            for fd, saved in zip((1, 2), saved_fds, strict=True):
                os.dup2(saved, fd)
                os.close(saved)


@contextlib.contextmanager
def console():
    """A stream on the console this process has now, still there while fd 1 is sent elsewhere meanwhile: a copy of
    fd 1, or ``sys.stdout`` itself when it is a stream of its own (a test's capture)."""
    if not on_fd(sys.stdout, 1):
        yield sys.stdout
        return
    with os.fdopen(os.dup(1), "w", buffering=1) as stream:
        yield stream


def on_fd(stream, fd: int) -> bool:
    """Whether ``stream`` writes to file descriptor ``fd`` (not a stream of its own, as a test's capture is)."""
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


def planned_steps(config: str | Path, extra_args) -> int | None:
    """A run's ``max_steps``: the last ``--max_steps`` among the extra flags, else the config's; None if neither.

    >>> planned_steps("recipes/configs/lab/grpo_lab_default.yaml", ["--max_steps", "7"])
    7
    """
    import argparse

    reader = argparse.ArgumentParser(prog="python -m cpu_lab.runner", add_help=False, allow_abbrev=False)
    reader.add_argument("--max_steps", action="append", nargs="?", default=[])
    given = [v for v in reader.parse_known_args([str(a) for a in extra_args])[0].max_steps if v is not None]
    if given:
        return int(given[-1]) if given[-1].isdigit() else None
    steps = load_config(config).get("max_steps")
    return steps if isinstance(steps, int) else None


def last_logged(folder: Path) -> dict:
    """The last row a running run has written to its ``log.jsonl`` ({} before the first row)."""
    try:
        with open(folder / "log.jsonl", "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 65536))
            lines = log.read().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):  # the first may be cut by the seek, the last torn by a write under way
        try:
            row = json.loads(line)
            int(row.get("step", 0))
        except (ValueError, AttributeError, TypeError):
            continue
        return row
    return {}


def logged_step(folder: Path) -> int:
    """The last step a running run has written to its ``log.jsonl`` (0 before the first row)."""
    return int(last_logged(folder).get("step", 0))


class Progress:
    """The runner's lines, and on a terminal a bar of the steps done across the runs; thread-safe."""

    def __init__(self, total: int | None, enabled: bool = True):
        self.bar, self.lock = None, threading.Lock()
        if enabled and sys.stdout.isatty():
            self.bar = tqdm(
                total=total, desc="GRPO steps", unit="step", leave=False, file=sys.stdout, dynamic_ncols=True
            )

    def line(self, text: str) -> None:
        with self.lock:
            if self.bar is None:
                print(text, flush=True)
            else:
                self.bar.write(text, file=sys.stdout)

    def update(self, done: int) -> None:
        with self.lock:
            if self.bar is not None and done != self.bar.n:
                self.bar.n = done
                self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Run(NamedTuple):
    """One recipe run: its config, seed (None: the config's), output folder and extra flags."""

    config: str | Path
    seed: int | None
    out_dir: Path
    extra_args: Sequence[str] = ()


def run_at_once(
    runs: Sequence[Run],
    jobs: int,
    threads: int | None = None,
    label: str = "runner",
    describe: Callable[[Path], str] | None = None,
    progress: bool = True,
) -> None:
    """Run ``runs`` in order, up to ``jobs`` processes at once. A failed run does not stop the others (a RuntimeError
    names them all at the end); any other error, or Ctrl-C, stops the runs still going."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    threads = threads or threads_per_job(jobs)
    planned = {run.out_dir: planned_steps(run.config, run.extra_args) for run in runs}
    bar = Progress(None if None in planned.values() else sum(planned.values()), enabled=progress and bool(runs))
    live, done, failed = {}, {}, []  # output folder -> process of a run going on / steps of a finished run; failures
    lock, stopping = threading.Lock(), threading.Event()  # the lock: no run starts while the runs are being stopped

    def launch(run: Run) -> None:
        folder = run.out_dir
        with lock:
            if stopping.is_set():
                return
            bar.line(f"[{label}] starting {run.config} seed {run.seed} ({threads} thread(s); log: {folder}/run.log)")
            proc = live[folder] = run_subprocess(run.config, run.seed, folder, run.extra_args, threads)
        started = time.monotonic()
        code = proc.wait()
        with lock:
            del live[folder]
        if stopping.is_set():  # stopped by the runner: neither finished nor failed
            return
        if code != 0:
            failed.append(f"{folder} (exit {code}; see {folder}/run.log)")
            bar.line(f"[{label}] FAILED {folder}: exit {code}, see {folder}/run.log")
        else:
            done[folder] = planned[folder] or logged_step(folder)
            measured = f": {describe(folder)}" if describe else ""
            bar.line(f"[{label}] finished {folder} in {time.monotonic() - started:.0f} s{measured}")

    pool = ThreadPoolExecutor(max_workers=jobs)
    pending = [pool.submit(launch, run) for run in runs]
    try:
        while pending:
            finished, pending = wait(pending, timeout=2, return_when=FIRST_EXCEPTION)
            for future in finished:
                future.result()  # an error of the runner's own (not a failed run) stops the rest
            if bar.bar is not None:
                with lock:
                    going = list(live)
                bar.update(sum(done.values()) + sum(logged_step(folder) for folder in going))
    finally:  # an error or Ctrl-C here must not leave runs going on in the background, nor start new ones
        with lock:
            stopping.set()
            for proc in live.values():
                proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()
    if failed:
        raise RuntimeError(f"{len(failed)} run(s) failed: {', '.join(failed)}")
