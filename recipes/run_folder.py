"""One output folder, one run: what a training run finds in its ``output_dir`` decides whether it resumes, starts
over or is refused, and the folder is locked while the run lives.

- The lock is the OS's ``flock`` on ``output_dir/.lock``, dropped however its process ends, so a killed run leaves
  nothing that blocks its rerun.
- A run whose settings differ from the folder's ``resolved_config.json`` outside ``MAY_CHANGE_ON_RESUME`` is refused
  in one line naming each change; the same settings resume from a checkpoint, recording each start in ``segments``.
- With nothing to resume, an interrupted run starts over; a finished run, or outputs of unknown origin, are refused
  without ``--overwrite``. Starting over clears only what training writes, never a path the new run reads.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from eval.folder import LOCK_FILE, FolderBusyError, discard_run, lock_output_folder
from recipes.checks import ConfigError

CONFIG_FILE = "resolved_config.json"
REPORT_FILE = "report.json"
EVAL_FOLDERS = ("eval_before", "eval_after")  # a recipe's held-out evaluations, in output_dir
SEGMENTS = "segments"  # the folder's record of its starts, in CONFIG_FILE: not a setting

# Options that may differ when a run resumes: none changes what is trained. Every other option must be the same.
MAY_CHANGE_ON_RESUME = frozenset(
    {
        # how long: only upward (``length_change``)
        "max_steps",
        "num_train_epochs",
        # logging and reporting
        *("logging_steps", "logging_strategy", "logging_first_step", "logging_nan_inf_filter", "log_level"),
        *("log_level_replica", "log_on_each_node", "disable_tqdm", "report_to", "run_name", "project"),
        *("trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "skip_memory_metrics"),
        *("include_num_input_tokens_seen", "log_completions", "num_completions_to_print", "log_unique_prompts"),
        "log_completions_hub_repo",
        # checkpoints and the hub
        *("save_strategy", "save_steps", "save_total_limit", "save_only_model", "save_on_each_node"),
        *("push_to_hub", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo", "hub_always_push"),
        "hub_revision",
        # the cadence of evaluations and monitors (not what they evaluate)
        *("eval_strategy", "eval_steps", "eval_delay", "eval_on_start", "per_device_eval_batch_size"),
        *("eval_accumulation_steps", "monitor_eval_steps"),
        # the run's folder and how it starts
        *("output_dir", "resume", "resume_from_checkpoint", "overwrite", "build_tiny_model"),
        # memory and data loading: the same arithmetic
        *("gradient_checkpointing", "gradient_checkpointing_kwargs", "activation_checkpointing"),
        *("activation_checkpointing_kwargs", "torch_empty_cache_steps", "dataloader_num_workers"),
        *("dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor", "ddp_timeout"),
    }
)
# what a training run writes at the top of output_dir (transformers' save_pretrained, TRL's model card, leash's
# records, logs and callbacks), removed when a run starts over; eval_before/ and eval_after/ are emptied by eval
RUN_OUTPUTS = (
    *(CONFIG_FILE, REPORT_FILE, "probes.json", "*.jsonl", "training_args.bin", "checkpoint-*", "best", "best.tmp"),
    *("*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin", "adapter_config.json", "config.json"),
    *("generation_config.json", "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.json"),
    *("merges.txt", "chat_template.jinja", "README.md"),
)
# outputs that only a training run leaves: without CONFIG_FILE beside them, a run of unknown origin
RUN_MARKERS = (REPORT_FILE, "log.jsonl", "training_args.bin", "checkpoint-*", "model.safetensors")
CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


class RunFolderError(ConfigError):
    """The output folder holds another run, or another process writes it: one line naming the fix."""


@dataclass(frozen=True)
class RunStart:
    """What ``prepare`` decided: the checkpoint the run resumes (None: fresh) and the choices a rerun must undo."""

    checkpoint: str | None
    resume: bool
    overwrite: bool


_lock = ExitStack()  # the folder this process holds, until ``release``
_starts: dict[Path, RunStart] = {}


def release() -> None:
    _lock.close()


def drop_rows_after(path: Path, step: int) -> int:
    r"""Cut a JSON-lines log of a run back to ``step``, its checkpoint's: the rows a killed run logged after that
    checkpoint (the resumed run logs those steps again) and a line the kill tore go. Returns how many went.

    >>> import tempfile
    >>> log = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = log.write_text('{"step": 5}\n{"step": 10}\n{"step": 15}\n{"ste')
    >>> drop_rows_after(log, 10), log.read_text()
    (2, '{"step": 5}\n{"step": 10}\n')
    """
    if not path.is_file():
        return 0
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):
                kept.append(line)  # not the kill's: left for the log's readers to name
            continue
        if not (isinstance(row, dict) and isinstance(row.get("step"), int | float) and row["step"] > step):
            kept.append(line)
    if len(kept) < len(lines):
        part = path.with_name(path.name + ".part")
        part.write_text("".join(f"{line}\n" for line in kept))
        os.replace(part, path)
    return len(lines) - len(kept)


def start_of(out: str | Path) -> RunStart | None:
    """What ``prepare`` decided for ``out`` in this process, None when it was not called for it."""
    return _starts.get(Path(out).resolve())


def show(value) -> str:
    """A setting's value as the one-line messages write it.

    >>> show(0.0001), show(["gsm8k_correctness", "gsm8k_format"]), show("x" * 80)[-6:]
    ('0.0001', '["gsm8k_correctness", "gsm8k_format"]', 'xxx...')
    """
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text if len(text) <= 70 else text[:67] + "..."


def length_change(key: str, old: dict, new: dict) -> str | None:
    """Why a change of ``max_steps`` or ``num_train_epochs`` is refused on a resume (it may only grow), else None.

    >>> length_change("max_steps", {"max_steps": 60}, {"max_steps": 65})
    >>> length_change("max_steps", {"max_steps": 60}, {"max_steps": 50})
    'a resume may only raise it'
    """
    before, after = old[key], new[key]
    if key == "max_steps":
        if before <= 0:
            return "-1 trains num_train_epochs: a resume keeps it"
        return None if after >= before else "a resume may only raise it"
    if new.get("max_steps", -1) > 0:
        return None  # epochs are not read when max_steps is set
    return None if after >= before else "a resume may only raise it"


def training_changes(old: dict, new: dict) -> list[str]:
    """Each setting that differs between ``old`` and ``new`` and may not, as ``key old -> new``; an option one of
    them does not know is no change.

    >>> training_changes({"learning_rate": 1e-3, "logging_steps": 1}, {"learning_rate": 1e-4, "logging_steps": 5})
    ['learning_rate 0.001 -> 0.0001']
    """
    changes = []
    for key in sorted((old.keys() & new.keys()) - {SEGMENTS}):
        if old[key] == new[key]:
            continue
        why = length_change(key, old, new) if key in ("max_steps", "num_train_epochs") else None
        if key not in MAY_CHANGE_ON_RESUME or why:
            changes.append(f"{key} {show(old[key])} -> {show(new[key])}" + (f" ({why})" if why else ""))
    return changes


def allowed_changes(old: dict, new: dict) -> dict[str, list]:
    """The settings that changed and may: ``{key: [old, new]}`` (where the folder is, ``output_dir``, is none)."""
    keys = sorted((old.keys() & new.keys()) & MAY_CHANGE_ON_RESUME - {"output_dir"})
    return {key: [old[key], new[key]] for key in keys if old[key] != new[key]}


def holder(out: Path) -> str:
    """The process that holds ``out``'s lock: ``pid N: its command`` (the command where ``/proc`` has it)."""
    try:
        pid = (out / LOCK_FILE).read_text().strip() or "unknown"
    except OSError:
        return "pid unknown"
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    command = " ".join(" ".join(arg.decode(errors="replace") for arg in args).split())
    return f"pid {pid}: {command[:157] + '...' if len(command) > 160 else command}" if command else f"pid {pid}"


def hold(out: Path) -> None:
    """Lock ``out`` for this process (letting go of any folder it held before), or refuse in one line."""
    release()
    try:
        _lock.enter_context(lock_output_folder(out))
    except FolderBusyError:
        raise RunFolderError(
            f"{out} is being written by another run ({holder(out)}); two runs in one folder would mix their outputs. "
            "Wait for it to end, or pass another --output_dir"
        ) from None


def read_config(out: Path) -> dict | None:
    """The folder's ``resolved_config.json``; None when there is none, or it is not a config (unknown origin)."""
    try:
        config = json.loads((out / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def markers(out: Path) -> list[str]:
    return sorted({p.name for pattern in RUN_MARKERS for p in out.glob(pattern)}) if out.is_dir() else []


def inputs_in(out: Path, config: dict) -> list[Path]:
    """The paths inside ``out`` (or ``out`` itself) that the run reads: any existing path among its settings."""
    root, found = out.resolve(), []
    settings = [value for key, value in config.items() if key != "output_dir"]
    values = [v for value in settings for v in (value if isinstance(value, list) else [value])]
    for value in values:
        if isinstance(value, str) and value and len(value) < 4096 and os.path.exists(value):
            path = Path(value).resolve()
            if path == root or root in path.parents:
                found.append(path)
    return found


def clear(out: Path, config: dict) -> list[str]:
    """Remove what an earlier run wrote in ``out``, keeping the lock, other files and what ``config`` reads."""
    keep = inputs_in(out, config)
    removed = []
    for path in sorted({p for pattern in RUN_OUTPUTS for p in out.glob(pattern)}):
        resolved = path.resolve()
        if any(k == resolved or resolved in k.parents or k in resolved.parents for k in keep):
            continue  # an input of the new run, or a folder that holds one
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        removed.append(path.name)
    removed += [f"{name}/{file}" for name in EVAL_FOLDERS for file in discard_run(out / name)]
    return removed


def segment(step: int, checkpoint: str | None = None, changed: dict | None = None) -> dict:
    """One start of the run in ``resolved_config.json``'s ``segments``: step, checkpoint and changed settings."""
    record = {"step": step, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if checkpoint is not None:
        record |= {"checkpoint": checkpoint, "changed": changed or {}}
    return record


def checkpoint_step(checkpoint: str) -> int:
    if found := CHECKPOINT.search(str(checkpoint).rstrip("/")):
        return int(found.group(1))
    return json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]


def write(out: Path, config: dict) -> None:
    """``resolved_config.json`` in one piece (written beside, then renamed: other processes may read it)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{CONFIG_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(config, indent=1, sort_keys=True))
    tmp.replace(out / CONFIG_FILE)


def prepare(
    out: Path, config: dict, *, resume: bool, resume_from: str | None, overwrite: bool, writes: bool
) -> RunStart:
    """Lock, refuse, clear or resume ``out`` for the run ``config`` and write ``resolved_config.json``; with
    ``writes`` False (a multi-GPU run's other processes) decide alike and touch nothing."""
    if writes:
        hold(out)
    try:
        start = decide(out, config, resume, resume_from, overwrite, writes)
    except BaseException:
        if writes:
            release()
        raise
    _starts[out.resolve()] = start
    return start


def decide(out: Path, config: dict, resume: bool, resume_from: str | None, overwrite: bool, writes: bool) -> RunStart:
    from transformers.trainer_utils import get_last_checkpoint  # here: a recipe's --help never loads transformers

    old, left = read_config(out), markers(out)
    last = get_last_checkpoint(str(out)) if resume and out.is_dir() else None
    checkpoint = resume_from or last
    fix = "pass another --output_dir, or --overwrite to start over (it deletes that run's outputs)"
    if overwrite and (old is not None or left):
        if writes and (removed := clear(out, config)):
            print(f"--overwrite: removed the earlier run's {', '.join(removed[:8])}{' ...' * (len(removed) > 8)}")
        old, checkpoint = None, resume_from
    elif old is None and left:
        raise RunFolderError(
            f"{out} holds the outputs of a run ({', '.join(left)}) but no {CONFIG_FILE}, so which run made them is "
            f"unknown: {fix}"
        )
    elif old is not None:
        if changes := training_changes(old, config):
            doing = f"resuming {checkpoint} with them" if checkpoint else "a fresh run there"
            raise RunFolderError(
                f"{out} holds a run with other training settings ({'; '.join(changes)}): {doing} would mix two runs; "
                f"{fix}"
            )
        if checkpoint:
            name = Path(checkpoint).name if Path(checkpoint).parent.resolve() == out.resolve() else str(checkpoint)
            step = segment(checkpoint_step(checkpoint), name, allowed_changes(old, config))
            if writes:
                write(out, config | {SEGMENTS: [*(old.get(SEGMENTS) or [{"step": 0}]), step]})
            return RunStart(checkpoint, resume, overwrite)
        if (out / REPORT_FILE).exists():
            raise RunFolderError(
                f"{out} holds a finished run of these settings and no checkpoint to continue from (save_strategy: "
                f"{old.get('save_strategy')}, resume: {str(resume).lower()}): pass another --output_dir, or "
                "--overwrite to train it again from the start (it deletes its outputs)"
            )
        if writes and (removed := clear(out, config)):  # interrupted before its first checkpoint: start over
            print(f"starting over: the earlier start of this run left no checkpoint; removed its {', '.join(removed)}")
        checkpoint = None
    elif writes and not checkpoint:  # nothing of a run here: the evaluations a run left, as a fresh run replaces them
        for name in EVAL_FOLDERS:
            if removed := discard_run(out / name):
                print(f"fresh run: removed {', '.join(removed)} of an earlier run from {out / name}")
    if writes:
        write(out, config | {SEGMENTS: [segment(checkpoint_step(checkpoint) if checkpoint else 0, checkpoint)]})
    return RunStart(checkpoint, resume, overwrite)


@dataclass(eq=False)  # eq would make the exception unhashable
class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the step it stopped at, the last checkpoint in its folder, and how to go on (``line``)."""

    step: int
    checkpoint: str | None
    save_strategy: str
    resume: bool = True
    overwrite: bool = False

    def rerun(self, command: str) -> str:
        """``command`` with what makes it resume (``--resume true``, ``--overwrite false``)."""
        if self.checkpoint:
            command += " --resume true" * (not self.resume) + " --overwrite false" * self.overwrite
        return command

    def line(self, command: str | None = None) -> str:
        """One line: where the run stopped and the command that goes on from there (None: "the same command")."""
        again = self.rerun(command) if command else "the same command"
        stopped = f"interrupted at step {self.step}"
        if self.checkpoint:
            return f"{stopped}; the last checkpoint is {self.checkpoint}: resume from it with {again}"
        if self.save_strategy == "no":
            return f"{stopped}; the config saves no checkpoints (save_strategy: no), so a rerun starts over: {again}"
        return f"{stopped}, before its first checkpoint, so a rerun starts over: {again}"

    def __str__(self) -> str:
        return self.line()
