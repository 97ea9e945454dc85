"""Run a benchmark on a loaded model, or re-score stored completions, and write the results to a folder.

``evaluate(model, tokenizer, "gsm8k", out_dir=...)`` is what ``python -m eval run`` and the recipes call. The
folder gets:

- ``samples.jsonl``: one scored problem per line, appended and flushed as soon as it is scored, so a run killed
  at any point (even ``kill -9``) continues where it stopped when started again with the same settings and the
  same model (samples whose scoring timed out, and samples stored without a lenient verdict, are scored again then,
  from their stored completions);
- ``run_config.json``: what made the samples: the settings and the model's fingerprint (``weights_fingerprint`` of
  the weights in memory, or ``source_fingerprint`` of the files the CLI loads). A folder holding the output of
  another run (other settings, another model, ``eval score`` output, or output of unknown origin) is refused, or
  with ``overwrite`` emptied first; only the same run resumes;
- ``results.json``: the metrics of ``eval.metrics.summarize`` plus the run settings;
- ``summary.md`` and ``lengths.png``: the same, for people (``eval.report``);
- ``.lock``: held (``flock``) by the process writing the folder, with its pid: a second run into the same folder is
  refused instead of interleaving its samples with the first one's. The OS drops the lock when its process ends,
  however it ends, so a folder left by ``kill -9`` resumes without any cleaning; a run that ends normally (finished or
  failed) removes the file.

``score_predictions`` does the same for completions produced elsewhere (no model); its ``run_config.json`` records
the predictions file's hash and the fields read, so scoring the same file again into the folder is allowed and
anything else refused the same way.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import replace
from pathlib import Path

import huggingface_hub
from tqdm.auto import tqdm

from eval.generate import VLLM_PROMPTS_PER_CALL, check_backend, generate
from eval.jsonl import append_jsonl, cut_torn_last_line, iter_jsonl, read_jsonl, remove_stale_temps, write_jsonl
from eval.metrics import CI_LEVEL, sample_list, summarize
from eval.report import format_timeouts, plot_lengths, summary_markdown
from eval.scoring import lenient_rule, lenient_score, score_completion
from eval.tasks import Task, get_task, load_rows
from rewards.completions import completion_text

logger = logging.getLogger(__name__)

# Long enough for chains of thought: lm-eval's default of 256 tokens cuts off most Qwen2.5 GSM8K answers.
# Truncation is still measured (finish without EOS) and reported; raise the budget if it is above ~1%.
DEFAULT_MAX_NEW_TOKENS = {"gsm8k": 1024, "math": 2048}
DEFAULT_BATCH_SIZE = 16
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
# Files transformers and peft load a model, an adapter and a tokenizer from (not the run files beside them).
MODEL_FILE_PATTERNS = (
    "*.safetensors",
    "*.bin",
    "*.gguf",
    "*.model",
    "*.tiktoken",
    "*.index.json",
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    "tokenizer*.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "chat_template.*",
)
NOT_MODEL_FILES = {"training_args.bin"}  # saved beside the weights, but the run's settings, not the model
# What a training run's output_dir holds (the recipes' config record and log, the trainer's checkpoints): evaluations
# of the run go to folders of their own inside it (eval_before/, eval_after/), never into it.
TRAINING_RUN_MARKERS = ("resolved_config.json", "log.jsonl", "checkpoint-*")
EVAL_FOLDERS = ("eval_before", "eval_after")  # where the recipes evaluate a run, inside its output_dir
GSM8K_SOLUTION = re.compile(r"(?m)^####\s*-?[\d,.]+\s*$")  # a GSM8K reference solution's last line


def default_max_new_tokens(task_name: str) -> int:
    """The default generation budget of a task.

    >>> default_max_new_tokens("gsm8k"), default_max_new_tokens("math500")
    (1024, 2048)
    """
    return DEFAULT_MAX_NEW_TOKENS[get_task(task_name).answer_style]


def load_problems(task: Task, data: str | None = None, limit: int | None = None) -> list[dict]:
    """The task's problems as dicts (index, id, question, gold, prompt, subject, level), the first ``limit`` ones.

    Raises before any model load on a missing file, a file without the task's fields, or an unreadable gold.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be a positive number of problems, got {limit}")
    ds = load_rows(task, data)
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    problems = []
    for index, row in enumerate(ds):
        try:
            gold = task.gold(row)
        except ValueError as e:
            raise ValueError(f"row {index} of {data or task.hub_id}: {e}") from e
        problems.append(
            {
                "index": index,
                "id": row.get("unique_id", index),
                "question": row[task.question_field],
                "gold": gold,
                "prompt": task.prompt(row[task.question_field]),
                "subject": row.get("subject"),
                "level": row.get("level"),
            }
        )
    return problems


class FolderBusyError(RuntimeError):
    """Another live process is writing this output folder."""


_held_folders: set[Path] = set()  # folders this process has locked (the CLI locks before loading, evaluate again)


@contextmanager
def lock_output_folder(out: str | Path) -> Iterator[Path]:
    """Hold ``out`` for this process while writing it; raise ``FolderBusyError`` (naming the folder, the pid of
    the process holding it and the fix) if another process holds it.

    The lock is the OS's (``flock`` on ``out/.lock``), not a pid file: it ends with its process, however that ends,
    so a run killed by ``kill -9`` leaves nothing that blocks its resume. A holder that ends normally, whether its run
    succeeded or failed, removes the file. Nested use in one process is allowed.
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
    """``out/.lock`` open and locked by this process (``out`` made if missing), or ``FolderBusyError``. A lock file
    removed by its holder between this open and this lock is let go and the path opened again, so that two processes
    never both hold ``out``: one on the removed file, one on a new one."""
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
    """The name of the first file of ``TRAINING_RUN_MARKERS`` in ``folder``, None when it holds none (or is missing):
    a training run's output folder, which an evaluation must not write into.

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
    """Refuse ``--out`` when it is a training run's folder: its files (``log.jsonl``, checkpoints) and an
    evaluation's would mix, and a training run starting over there would clear them."""
    marker = training_run_marker(out)
    if marker:
        raise ValueError(
            f"--out {out} is a training run's folder (it holds {marker}): pass a folder of its own, e.g. "
            f"--out {Path(out) / f'eval_{command}'}"
        )


def read_samples(path: Path) -> dict[int, dict]:
    """Scored records already in ``path`` by problem index. A torn last line (a kill mid-write) is cut off the
    file so that appending continues on a clean line; a duplicated index keeps its first record."""
    done: dict[int, dict] = {}
    if not path.exists():
        return done
    cut = cut_torn_last_line(path)
    if cut:
        logger.warning("%s: dropping a torn last line (%d bytes) left by an interrupted run", path, cut)
    for _, record in iter_jsonl(path, f"delete that line, or the folder {path.parent} to start over"):
        done.setdefault(record["index"], record)
    return done


def _sha256_of_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _source_digest(source: str) -> str:
    """A local folder: the sha256 of each model file (``MODEL_FILE_PATTERNS``) by name; a hub id: its commit."""
    folder = Path(source)
    if folder.is_dir():
        files = sorted({f for pattern in MODEL_FILE_PATTERNS for f in folder.glob(pattern) if f.is_file()})
        files = [f for f in files if f.name not in NOT_MODEL_FILES]
        if not files:
            raise ValueError(f"{source} holds no model files ({', '.join(MODEL_FILE_PATTERNS[:3])}, ...)")
        return ";".join(f"{f.name}={_sha256_of_file(f)}" for f in files)
    cached = huggingface_hub.try_to_load_from_cache(source, "config.json")
    if isinstance(cached, str):  # <cache>/models--org--name/snapshots/<commit>/config.json
        return f"hub:{source}@{Path(cached).parent.name}"
    return f"hub:{source}@{huggingface_hub.HfApi().model_info(source).sha}"


def source_fingerprint(model: str, adapter: str | None = None) -> str:
    """The identity of a model loaded from files: the sha256 of its weight, config and tokenizer files (a local
    folder; the run files beside them, such as logs and ``training_args.bin``, are left out), or the commit of a hub
    id; and the same of the adapter's folder. Retraining into the same folder gives another fingerprint."""
    parts = [f"model={_source_digest(model)}"]
    if adapter:
        parts.append(f"adapter={_source_digest(adapter)}")
    return "files:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def weights_fingerprint(model) -> str:
    """The identity of a model in memory: the sha256 of every parameter's name, dtype, shape and bytes (a peft
    model's base weights and adapter alike), so a model whose weights changed in any element gets another one,
    while the same weights on another device, or loaded again, get the same. Buffers, the tokenizer and the
    generation settings are not part of it (the run settings are recorded beside it).

    Under ZeRO-3 a parameter's bytes are this process's partition (``ds_tensor``), under FSDP its local shard:
    nothing is gathered, so the main process alone can compute it. It reads every weight once (about a second a GB).
    """
    import torch  # loaded already where a model is; eval.run (`eval score`) imports without torch

    if not hasattr(model, "named_parameters"):
        raise ValueError(
            f"cannot fingerprint the model, a {type(model).__name__} with no parameters to read: pass "
            "run_info={'model_fingerprint': eval.run.source_fingerprint(model_path, adapter)}"
        )
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        t = getattr(p, "ds_tensor", None)  # ZeRO-3: the local partition (p itself is empty between forwards)
        if t is None:
            t = p.to_local() if hasattr(p, "to_local") else p  # DTensor (FSDP2): the local shard
        t = t.detach()
        h.update(f"{name}:{t.dtype}:{tuple(getattr(p, 'ds_shape', p.shape))}\n".encode())
        if t.device.type != "meta":
            h.update(memoryview(t.contiguous().reshape(-1).view(torch.uint8).cpu().numpy()))
    return "weights:" + h.hexdigest()[:32]


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
    """Remove the run files (``RUN_FILES``) and stale temporary files of the folder ``out``, under its lock (files
    that are not a run's are left); returns the names removed. A missing folder is left missing."""
    out = Path(out)
    if not out.is_dir():
        return []
    with lock_output_folder(out):
        removed = [name for name in RUN_FILES if (out / name).exists()]
        for name in removed:
            (out / name).unlink()
    return removed


def prepare_folder(out: Path, config: dict, overwrite: bool = False) -> None:
    """Make ``out`` ready for the run ``config`` (with its ``command``): the same run (same ``RESUME_KEYS``, or
    ``SCORE_KEYS`` for ``eval score``) resumes; a folder holding the output of any other run, or output no
    ``run_config.json`` describes, is refused with one line naming the fix, or with ``overwrite`` emptied
    (``discard_run``) and started over. Then records ``config`` as the folder's run. Call it holding the lock."""
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


def run_settings(
    task: Task,
    *,
    data: str | None,
    limit: int | None,
    seed: int,
    max_new_tokens: int,
    temperature: float,
    num_samples: int,
    backend: str,
    run_info: dict | None,
) -> dict:
    """The settings an ``eval run`` records in ``run_config.json`` and ``results.json``."""
    return {
        "command": "run",
        "task": task.name,
        "data": str(data or task.hub_id),
        "limit": limit,
        "seed": seed,
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "num_samples": num_samples,
        "backend": backend,
        **(run_info or {}),
    }


def score_sample(completion: str | None, gold: str | None, task_name: str) -> dict:
    """The strict score (``score_completion``: what the rewards pay) and the lenient one (``lenient_score``)."""
    return {**score_completion(completion, gold, task_name), **lenient_score(completion, gold, task_name)}


def rescore_timeouts(done: dict[int, dict], task_name: str) -> int:
    """Score again, in place, the stored samples whose scoring ran out of time (strict or lenient): a timeout is no
    verdict, so a resumed run does not keep it. Returns how many samples were scored again."""
    n = 0
    for record in done.values():
        samples = sample_list(record)
        again = [bool(s.get("timeout", False) or s.get("lenient_timeout", False)) for s in samples]
        if not any(again):
            continue
        n += sum(again)
        rescored = [
            {**s, **score_sample(s["completion"], record["gold"], task_name)} if redo else s
            for s, redo in zip(samples, again, strict=True)
        ]
        if "samples" in record:
            record["samples"] = rescored
            record["n_correct_samples"] = sum(s["correct"] for s in rescored)
        else:
            record.update(rescored[0])
    return n


def add_lenient(done: dict[int, dict], task_name: str) -> int:
    """Give, in place, each stored sample without a lenient verdict (scored before leash had one) its lenient
    fields, from its stored completion; its strict verdict is kept as stored. Returns how many samples got them."""
    n = 0
    for record in done.values():
        for s in sample_list(record):
            if "lenient_correct" not in s:
                s.update(lenient_score(s.get("completion"), record["gold"], task_name))
                n += 1
    return n


def _score_record(problem: dict, generations, task_name: str) -> dict:
    record = {k: problem[k] for k in ("index", "id", "question", "gold", "subject", "level")}
    texts = [(g.text, g.n_tokens, g.truncated) for g in generations]
    return _with_samples(record, texts, task_name)


def _with_samples(record: dict, texts: list[tuple], task_name: str) -> dict:
    """``record`` (a problem's fields, ``gold`` among them) with its (completion, n_tokens, truncated) ``texts``
    scored: one sample's fields inline, several as ``samples`` with the count of correct ones."""
    samples = [
        {"completion": t, "n_tokens": n, "truncated": tr, **score_sample(t, record["gold"], task_name)}
        for t, n, tr in texts
    ]
    if len(samples) == 1:
        record.update(samples[0])
    else:
        record["n_correct_samples"] = sum(s["correct"] for s in samples)
        record["samples"] = samples
    return record


def evaluate(
    model,
    tokenizer,
    task_name: str,
    *,
    data: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    max_new_tokens: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    out_dir: str | Path | None = None,
    num_samples: int = 1,
    temperature: float = 0.0,
    backend: str = "hf",
    run_info: dict | None = None,
    progress: bool = True,
    wandb: bool = False,
    ci_level: float = CI_LEVEL,
    overwrite: bool = False,
) -> dict:
    """Generate, score and summarise a task for an already-loaded model; returns the results.json dict.

    Args:
        model, tokenizer: a transformers causal LM (or peft model) and its tokenizer; a ``vllm.LLM`` for vllm.
        task_name: ``gsm8k`` or ``math500`` (any task of ``eval.tasks.TASKS``).
        data: local ``.jsonl`` or hub id (default: the task's hub set).
        limit: evaluate the first ``limit`` problems only.
        seed: sampling seed (hf: the batch starting at problem ``i`` uses ``seed + i``; vllm: problem ``i`` uses
            ``seed + i``), so a resumed run samples as a fresh one would.
        batch_size: problems per generation call (hf); vllm gets ``VLLM_PROMPTS_PER_CALL`` at once, at least.
        max_new_tokens: generation budget (default ``default_max_new_tokens(task_name)``).
        out_dir: where samples.jsonl, results.json, summary.md and lengths.png go; a folder holding part of the
            same run (same settings, same model) is resumed, one holding anything else refused (``prepare_folder``).
            None keeps everything in memory.
        num_samples, temperature: K samples per problem at this temperature (pass@k is reported when K > 1).
        run_info: extra settings recorded in results.json and run_config.json (e.g. model and adapter names). Its
            ``model_fingerprint`` names the model (``source_fingerprint`` of the files it was loaded from); without
            one, a run with ``out_dir`` computes ``weights_fingerprint(model)``.
        wandb: also log the summary and a samples table to Weights & Biases (WANDB_MODE=offline works).
        ci_level: confidence level of the accuracy interval (results.json ``ci`` and ``ci_level``).
        overwrite: replace what ``out_dir`` holds of another run instead of refusing (the same run still resumes).
    """
    task = get_task(task_name)
    check_backend(backend)
    max_new_tokens = max_new_tokens or default_max_new_tokens(task_name)
    problems = load_problems(task, data, limit)
    config = run_settings(
        task,
        data=data,
        limit=limit,
        seed=seed,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        num_samples=num_samples,
        backend=backend,
        run_info=run_info,
    )
    out = Path(out_dir) if out_dir is not None else None
    # Held from the resume check to the last file: a second run into this folder is refused, not interleaved.
    with lock_output_folder(out) if out is not None else nullcontext():
        done: dict[int, dict] = {}
        if out is not None:
            if not config.get("model_fingerprint"):  # what resumes is this model's run, not any with these settings
                config["model_fingerprint"] = weights_fingerprint(model)
            prepare_folder(out, config, overwrite)
            done = read_samples(out / SAMPLES_FILE)
            n_again, n_lenient = rescore_timeouts(done, task_name), add_lenient(done, task_name)
            if n_again:
                logger.info("%s: scored %d timed-out samples of the earlier run again", out, n_again)
            if n_lenient:
                logger.info("%s: added the lenient verdict to %d stored samples (their completions)", out, n_lenient)
            if n_again or n_lenient:
                write_jsonl([done[i] for i in sorted(done)], out / SAMPLES_FILE)
        todo = [p for p in problems if p["index"] not in done]
        if done:
            logger.info(
                "resuming: %d of %d problems already scored in %s", len(problems) - len(todo), len(problems), out
            )

        bar = tqdm(total=len(problems), initial=len(problems) - len(todo), unit="problem", disable=not progress)
        started, n_new = time.perf_counter(), 0
        step = batch_size if backend == "hf" else max(batch_size, VLLM_PROMPTS_PER_CALL)  # vLLM schedules big batches
        try:
            for start in range(0, len(todo), step):
                batch = todo[start : start + step]
                gens = generate(
                    model,
                    tokenizer,
                    [p["prompt"] for p in batch],
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    num_samples=num_samples,
                    batch_size=batch_size,
                    seed=seed + batch[0]["index"],
                    backend=backend,
                    prompt_seeds=[seed + p["index"] for p in batch] if backend == "vllm" else None,
                )
                for problem, generations in zip(batch, gens, strict=True):
                    record = _score_record(problem, generations, task_name)
                    done[problem["index"]] = record
                    if out is not None:
                        append_jsonl(record, out / SAMPLES_FILE, durable=True)
                n_new += len(batch)
                bar.update(len(batch))
                bar.set_postfix(samples_per_s=f"{n_new * num_samples / (time.perf_counter() - started):.2f}")
        finally:
            bar.close()

        records = [done[p["index"]] for p in problems]
        results = {**config, **summarize(records, seed=seed, level=ci_level), "lenient_rule": lenient_rule(task_name)}
        if out is not None:
            write_outputs(out, results, records)
        if wandb:
            log_to_wandb(results, records, config)
        return results


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


def log_to_wandb(results: dict, records: list[dict], config: dict) -> None:
    """Log the summary metrics and a samples table to W&B (``WANDB_MODE=offline`` keeps it local)."""
    import wandb  # seconds to import, for --wandb alone

    run = wandb.init(project=os.environ.get("WANDB_PROJECT", "leash-eval"), job_type="eval", config=config)
    flat = {k: v for k, v in results.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    flat.update({f"pass@{k}": v for k, v in results.get("pass_at_k", {}).items()})
    for name, stats in results["length_tokens"].items():
        if stats:
            flat[f"length_tokens/{name}/mean"] = stats["mean"]
    run.summary.update(flat)
    columns = ["index", "sample", "question", "gold", "completion", "extracted", "correct", "n_tokens", "truncated"]
    table = wandb.Table(columns=[*columns, "timeout", "lenient_extracted", "lenient_correct"])
    for r in records:
        for j, s in enumerate(sample_list(r)):
            table.add_data(
                r["index"],
                j,
                r["question"],
                r["gold"],
                s["completion"],
                s["extracted"],
                s["correct"],
                s.get("n_tokens"),
                s.get("truncated"),
                s.get("timeout", False),
                s.get("lenient_extracted"),
                s.get("lenient_correct"),
            )
    run.log({"samples": table, **flat})
    run.finish()


def read_predictions(path: str | Path, completion_field: str, gold_field: str) -> list[dict]:
    """Rows of a predictions JSONL, checked for the two fields before anything else runs."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"predictions file {path} does not exist: pass --predictions with a .jsonl path")
    rows = []
    for n, row in iter_jsonl(path, "each line must be one JSON object"):
        missing = [k for k in (completion_field, gold_field) if k not in row]
        if missing:
            raise ValueError(
                f"{path} line {n} has no {missing} field(s) (it has {sorted(row)}): "
                "name the fields with --completion-field / --gold-field"
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"predictions file {path} holds no rows")
    return rows


def _completions_of(value) -> list[str]:
    """The completion texts of one predictions field: a string, chat messages, or a list of K strings.

    >>> _completions_of("#### 3"), _completions_of([{"role": "assistant", "content": "#### 4"}])
    (['#### 3'], ['#### 4'])
    >>> _completions_of(["#### 3", "#### 4"])
    ['#### 3', '#### 4']
    """
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return [completion_text(value)]


def _as_list(value, k: int) -> list:
    return list(value) if isinstance(value, list) and len(value) == k else [value] * k


def score_predictions(
    task_name: str,
    predictions: str | Path,
    out_dir: str | Path,
    *,
    completion_field: str = "completion",
    gold_field: str | None = None,
    tokenizer=None,
    ci_level: float = CI_LEVEL,
    overwrite: bool = False,
) -> dict:
    """Re-score stored completions (no model): samples.jsonl in input order, one line per input line.

    The completion field holds a string, chat messages (TRL style), or a list of K strings (K samples of one
    problem: the line then gets a ``samples`` list and pass@k is reported); a single completion's line has a
    boolean ``correct``. ``gold_field`` defaults to the task's (``answer``); a GSM8K gold holding a full solution
    is read after its ``####``. ``tokenizer`` (optional) counts completion tokens; otherwise an ``n_tokens`` field
    is used if present. A ``truncated`` field, or ``finish_reason == "length"`` (vLLM/OpenAI), marks truncation.
    Samples whose scoring ran out of time are listed in results.json (``timeouts``) and logged: a second scoring of
    the same file differs, if at all, only in those.

    ``out_dir`` may hold an earlier scoring of the same file with the same fields and tokenizer (``SCORE_KEYS``):
    it is scored again. Anything else there (an ``eval run``'s samples, another scoring) is refused before any
    scoring, or with ``overwrite`` replaced.
    """
    base = get_task(task_name)
    task = replace(base, gold_field=gold_field or base.gold_field)
    rows = read_predictions(predictions, completion_field, task.gold_field)
    warn_gsm8k_golds(rows, task, predictions)
    config = score_settings(
        task_name, predictions, completion_field, gold_field, getattr(tokenizer, "name_or_path", None)
    )
    with lock_output_folder(out_dir) as out:  # an `eval run` writing this folder is not overwritten under it
        prepare_folder(out, config, overwrite)
        records = [_score_row(i, row, task, completion_field, tokenizer) for i, row in enumerate(rows)]
        write_jsonl(records, out / SAMPLES_FILE)
        results = {"task": task.name, "predictions": str(predictions), **summarize(records, level=ci_level)}
        results["lenient_rule"] = lenient_rule(task_name)
        write_outputs(out, results, records)
    return results


def warn_gsm8k_golds(rows: list[dict], task: Task, predictions: str | Path) -> None:
    """Warn (one line) when a task that is not GSM8K is given gold answers that look like GSM8K reference solutions
    (most of them end in a ``#### N`` line): such a gold is the whole solution to that task, and nothing equals it."""
    if task.answer_style == "gsm8k":
        return
    n = sum(bool(GSM8K_SOLUTION.search(str(row[task.gold_field]))) for row in rows)
    if 2 * n > len(rows):
        logger.warning(
            "%s: %d of %d gold answers (%s) look like GSM8K solutions (a last line '#### N'), which task %s reads as "
            "whole answers: pass --task gsm8k if these are GSM8K problems",
            predictions,
            n,
            len(rows),
            task.gold_field,
            task.name,
        )


def score_settings(
    task_name: str, predictions: str | Path, completion_field: str, gold_field: str | None, tokenizer: str | None
) -> dict:
    """What an ``eval score`` records in ``run_config.json``: the predictions file's path and hash (the hash, not the
    path, is what a rescoring must match), the fields read and the tokenizer that counts tokens."""
    return {
        "command": "score",
        "task": get_task(task_name).name,
        "predictions": str(predictions),
        "predictions_sha256": _sha256_of_file(Path(predictions)),
        "completion_field": completion_field,
        "gold_field": gold_field,
        "tokenizer": tokenizer,
    }


def _score_row(i: int, row: dict, task: Task, completion_field: str, tokenizer) -> dict:
    """The samples.jsonl record of line ``i`` of a predictions file (``score_predictions``)."""
    gold = task.gold(row)
    texts = _completions_of(row[completion_field])
    if tokenizer is not None:
        counts = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    else:
        counts = _as_list(row.get("n_tokens"), len(texts))
    truncated = row.get("truncated")
    if truncated is None and "finish_reason" in row:
        reasons = _as_list(row["finish_reason"], len(texts))
        truncated = [r == "length" for r in reasons]
    truncated = _as_list(truncated, len(texts))
    record = {
        "index": i,
        "id": row.get("unique_id", row.get("id", i)),
        "question": row.get(task.question_field, ""),
        "gold": gold,
        "subject": row.get("subject"),
        "level": row.get("level"),
    }
    return _with_samples(record, list(zip(texts, counts, truncated, strict=True)), task.name)
