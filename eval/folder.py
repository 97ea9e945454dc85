"""An evaluation's output folder: its files, its lock, and whether a run there resumes, starts or is refused.

``samples.jsonl`` is appended as each problem is scored, so a run killed at any point (even ``kill -9``) continues
where it stopped; ``run_config.json`` records what made the samples, so that only the same run resumes; ``.lock``
keeps a second run out. A training run's folder is never an evaluation's.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from eval.jsonl import cut_torn_last_line, iter_jsonl, read_jsonl, remove_stale_temps
from eval.report import format_timeouts, plot_lengths, summary_markdown

logger = logging.getLogger(__name__)

SAMPLES_FILE, RESULTS_FILE, CONFIG_FILE = "samples.jsonl", "results.json", "run_config.json"
SUMMARY_FILE, LENGTHS_FILE = "summary.md", "lengths.png"
RUN_FILES = (SAMPLES_FILE, RESULTS_FILE, CONFIG_FILE, SUMMARY_FILE, LENGTHS_FILE)  # what `overwrite` removes
LOCK_FILE = ".lock"  # hidden, so listings of a run's files are unchanged
# What makes a sample of `eval run` what it is; a resumed run must match them all (the limit may grow or shrink).
RESUME_KEYS = (
    "command",
    "task",
    "data",
    "seed",
    "max_new_tokens",
    "temperature",
    "num_samples",
    "model",
    "adapter",
    "backend",
    "model_fingerprint",
)
# What makes the output of `eval score` what it is: scoring them again into the folder is the same run.
SCORE_KEYS = ("command", "task", "predictions_sha256", "completion_field", "gold_field", "tokenizer")
# What a training run's output_dir holds (the recipes' config record and log, the trainer's checkpoints): evaluations
# of the run go to folders of their own inside it (eval_before/, eval_after/), never into it.
TRAINING_RUN_MARKERS = ("resolved_config.json", "log.jsonl", "checkpoint-*")
EVAL_FOLDERS = ("eval_before", "eval_after")  # where the recipes evaluate a run, inside its output_dir


class FolderBusyError(RuntimeError):
    """Another live process is writing this output folder."""


_held_folders: set[Path] = set()  # folders this process has locked (the CLI locks before loading, evaluate again)


@contextmanager
def lock_output_folder(out: str | Path) -> Iterator[Path]:
    """Hold ``out`` for this process while writing it, else ``FolderBusyError``; nested use is allowed. An OS lock
    (``flock``), not a pid file: it ends with its process however that ends, so a killed run can resume.
    """
    out = Path(out)
    key = out.resolve()
    if key in _held_folders:
        yield out
        return
    fd = _open_lock(out)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        remove_stale_temps(out)  # left by a killed writer of this folder (a rewrite of samples.jsonl)
        _held_folders.add(key)
        try:
            yield out
        finally:
            _held_folders.discard(key)
            # Unlinked while still locked: a process that opened it meanwhile finds, once it gets the lock, that the
            # path no longer names its file, and opens the path again (``_open_lock``).
            with suppress(FileNotFoundError):
                if os.stat(out / LOCK_FILE).st_ino == os.fstat(fd).st_ino:  # never another holder's file
                    (out / LOCK_FILE).unlink()
    finally:
        os.close(fd)  # releases the lock


def _open_lock(out: Path) -> int:
    """``out/.lock`` open and locked by this process, or ``FolderBusyError``; reopened if its holder removed it."""
    while True:
        out.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the processes a run starts
        except FileNotFoundError:  # the folder was removed meanwhile: make it again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise FolderBusyError(
                f"{out} is being written by another process (pid {holder}); two runs into one folder would mix "
                "their samples. Wait for it to finish (rerun then to resume or complete it), or pass another --out"
            ) from None
        try:
            if os.stat(out / LOCK_FILE).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def training_run_marker(folder: str | Path) -> str | None:
    """The first ``TRAINING_RUN_MARKERS`` file in ``folder`` (a training run's), or None.

    >>> training_run_marker("no/such/folder") is None
    True
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for pattern in TRAINING_RUN_MARKERS:
        found = sorted(folder.glob(pattern))
        if found:
            return found[0].name
    return None


def check_not_training_run(out: str | Path, command: str) -> None:
    """Refuse a training run's folder as ``--out``: the files would mix, and a restarted run would clear them."""
    marker = training_run_marker(out)
    if marker:
        raise ValueError(
            f"--out {out} is a training run's folder (it holds {marker}): pass a folder of its own, e.g. "
            f"--out {Path(out) / f'eval_{command}'}"
        )


def read_samples(path: Path) -> dict[int, dict]:
    """Scored records already in ``path`` by problem index, a torn last line cut off; a duplicate keeps its first."""
    done: dict[int, dict] = {}
    if not path.exists():
        return done
    cut = cut_torn_last_line(path)
    if cut:
        logger.warning("%s: dropping a torn last line (%d bytes) left by an interrupted run", path, cut)
    for _, record in iter_jsonl(path, f"delete that line, or the folder {path.parent} to start over"):
        done.setdefault(record["index"], record)
    return done


class FolderHoldsAnotherRun(ValueError):
    """The output folder holds the output of another run: other settings, another model, or of unknown origin."""


def _holds_output(out: Path) -> bool:
    samples = out / SAMPLES_FILE
    return (samples.exists() and samples.stat().st_size > 0) or (out / RESULTS_FILE).exists()


def _what_differs(old: dict, config: dict) -> str:
    """Why the folder's run is another one, or "" when it is the same run."""
    old_command = old.get("command", "run")  # run_config.json was written by `eval run` only, before it said so
    if old_command != config["command"]:
        return f"the output of `eval {old_command}`"
    keys = RESUME_KEYS if config["command"] == "run" else SCORE_KEYS
    changed = [
        f"{k} was {old[k]!r}, now {config.get(k)!r}" if k in old else f"{k} not recorded, now {config.get(k)!r}"
        for k in keys
        if k != "command" and old.get(k) != config.get(k)
    ]
    return f"a run with other settings ({'; '.join(changed)})" if changed else ""


def discard_run(out: str | Path) -> list[str]:
    """Remove the run files and stale temporary files of ``out`` under its lock; returns the names removed."""
    out = Path(out)
    if not out.is_dir():
        return []
    with lock_output_folder(out):
        removed = [name for name in RUN_FILES if (out / name).exists()]
        for name in removed:
            (out / name).unlink()
    return removed


def prepare_folder(out: Path, config: dict, overwrite: bool = False) -> None:
    """Make ``out`` ready for ``config`` (call it holding the lock): the same run resumes, another is refused unless
    ``overwrite``."""
    path = out / CONFIG_FILE
    if _holds_output(out):
        if path.exists():
            what = _what_differs(json.loads(path.read_text()), config)
        else:
            what = f"output without a {CONFIG_FILE}, so what made it is unknown"
        if what:
            if not overwrite:
                raise FolderHoldsAnotherRun(
                    f"{out} holds {what}: pass --overwrite (overwrite=True) to replace it, or another --out folder"
                )
            logger.warning("%s held %s: replacing it (overwrite)", out, what)
            discard_run(out)
    path.write_text(json.dumps(config, indent=2) + "\n")


def write_outputs(out: Path, results: dict, records: list[dict]) -> None:
    """results.json, summary.md and lengths.png (samples.jsonl is written as the run goes)."""
    if results["timeouts"]:
        logger.warning(
            "%s: %d of %d samples ran out of scoring time and count as wrong (problem/sample: %s); another scoring "
            "may grade them otherwise",
            out,
            len(results["timeouts"]),
            results["n_samples"],
            format_timeouts(results["timeouts"]),
        )
    (out / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n")
    (out / SUMMARY_FILE).write_text(summary_markdown(results))
    if results["length_tokens"]["all"] is not None:
        source = Path(results["predictions"]).name if "predictions" in results else results.get("model", "")
        plot_lengths(records, out / LENGTHS_FILE, title=f"{results['task']} {source}: length by correctness")
    else:  # no lengths to plot: no plot of an earlier scoring either
        (out / LENGTHS_FILE).unlink(missing_ok=True)


def read_run(folder: str | Path) -> tuple[dict, list[dict]]:
    """The results.json dict and the samples.jsonl records of a finished ``eval run`` or ``eval score`` folder."""
    path = Path(folder)
    for name in (RESULTS_FILE, SAMPLES_FILE):
        if not (path / name).exists():
            if training_run_marker(path):
                before, after = (path / sub for sub in EVAL_FOLDERS)
                raise FileNotFoundError(
                    f"{path} is a training run's folder, not an evaluation's: pass its {EVAL_FOLDERS[0]} and "
                    f"{EVAL_FOLDERS[1]} folders (python -m eval compare {before} {after})"
                )
            raise FileNotFoundError(f"{path / name} not found: pass a folder written by `python -m eval run|score`")
    records = read_jsonl(path / SAMPLES_FILE, "pass a folder written by `python -m eval run|score`")
    return json.loads((path / RESULTS_FILE).read_text()), records
