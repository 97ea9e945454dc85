"""Run a benchmark on a loaded model, or re-score stored completions, and write the results to a folder.

``evaluate(model, tokenizer, "gsm8k", out_dir=...)`` is what ``python -m eval run`` and the recipes call. The
folder gets:

- ``samples.jsonl``: one scored problem per line, appended and flushed as soon as it is scored, so a run killed
  at any point (even ``kill -9``) continues where it stopped when started again with the same settings (samples
  whose scoring timed out, and samples stored without a lenient verdict, are scored again then, from their stored
  completions);
- ``results.json``: the metrics of ``eval.metrics.summarize`` plus the run settings;
- ``summary.md`` and ``lengths.png``: the same, for people (``eval.report``);
- ``.lock``: held (``flock``) by the process writing the folder, with its pid: a second run into the same folder is
  refused instead of interleaving its samples with the first one's. The OS drops the lock when its process ends,
  however it ends, so a folder left by ``kill -9`` resumes without any cleaning.

``score_predictions`` does the same for completions produced elsewhere (no model).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

from eval.generate import VLLM_PROMPTS_PER_CALL, check_backend, generate
from eval.jsonl import append_jsonl, cut_torn_last_line, iter_jsonl, write_jsonl
from eval.metrics import CI_LEVEL, sample_list, summarize
from eval.scoring import lenient_rule, lenient_score, score_completion
from eval.tasks import Task, get_task, load_rows

logger = logging.getLogger(__name__)

# Long enough for chains of thought: lm-eval's default of 256 tokens cuts off most Qwen2.5 GSM8K answers.
# Truncation is still measured (finish without EOS) and reported; raise the budget if it is above ~1%.
DEFAULT_MAX_NEW_TOKENS = {"gsm8k": 1024, "math": 2048}
DEFAULT_BATCH_SIZE = 16
SAMPLES_FILE, RESULTS_FILE, CONFIG_FILE = "samples.jsonl", "results.json", "run_config.json"
LOCK_FILE = ".lock"  # hidden, so listings of a run's files are unchanged
# Settings that change what a sample is; a resumed run must match them (the limit may grow or shrink).
RESUME_KEYS = ("task", "data", "seed", "max_new_tokens", "temperature", "num_samples", "model", "adapter", "backend")


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
    so a run killed by ``kill -9`` leaves nothing that blocks its resume. Nested use in one process is allowed.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    key = out.resolve()
    if key in _held_folders:
        yield out
        return
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the processes a run starts
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            raise FolderBusyError(
                f"{out} is being written by another process (pid {holder}); two runs into one folder would mix "
                "their samples. Wait for it to finish (rerun then to resume or complete it), or pass another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _held_folders.add(key)
        try:
            yield out
        finally:
            _held_folders.discard(key)
    finally:
        os.close(fd)  # releases the lock; the file stays, so a waiting opener never locks an unlinked one


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


def _check_resume(out: Path, config: dict) -> None:
    """Refuse to add samples to a folder whose samples were made with other settings (any of ``RESUME_KEYS``), or
    with settings it does not record; then record this run's settings there."""
    path, samples = out / CONFIG_FILE, out / SAMPLES_FILE
    fix = f"pass another --out folder, or delete {out} to start over"
    if samples.exists() and samples.stat().st_size > 0:
        if not path.exists():
            raise ValueError(
                f"{out} holds {SAMPLES_FILE} but no {CONFIG_FILE}, so the settings that made those samples are "
                f"unknown (an `eval score` folder?): {fix}"
            )
        old = json.loads(path.read_text())
        changed = [f"{k} was {old.get(k)!r}, now {config.get(k)!r}" for k in RESUME_KEYS if old.get(k) != config.get(k)]
        if changed:
            raise ValueError(
                f"{out} holds samples of a run with other settings ({'; '.join(changed)}); a resumed run must keep "
                f"them: {fix}"
            )
    path.write_text(json.dumps(config, indent=2) + "\n")


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
    scored = []
    for g in generations:
        s = score_sample(g.text, problem["gold"], task_name)
        scored.append({"completion": g.text, "n_tokens": g.n_tokens, "truncated": g.truncated, **s})
    record = {k: problem[k] for k in ("index", "id", "question", "gold", "subject", "level")}
    if len(scored) == 1:
        record.update(scored[0])
    else:
        record["n_correct_samples"] = sum(s["correct"] for s in scored)
        record["samples"] = scored
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
            same run is resumed. None keeps everything in memory.
        num_samples, temperature: K samples per problem at this temperature (pass@k is reported when K > 1).
        run_info: extra settings recorded in results.json and checked on resume (e.g. model and adapter names).
        wandb: also log the summary and a samples table to Weights & Biases (WANDB_MODE=offline works).
        ci_level: confidence level of the accuracy interval (results.json ``ci`` and ``ci_level``).
    """
    task = get_task(task_name)
    check_backend(backend)
    max_new_tokens = max_new_tokens or default_max_new_tokens(task_name)
    problems = load_problems(task, data, limit)
    config = {
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
    out = Path(out_dir) if out_dir is not None else None
    # Held from the resume check to the last file: a second run into this folder is refused, not interleaved.
    with lock_output_folder(out) if out is not None else nullcontext():
        done: dict[int, dict] = {}
        if out is not None:
            _check_resume(out, config)
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

        from tqdm.auto import tqdm

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
    from eval.report import format_timeouts, plot_lengths, summary_markdown

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
    (out / "summary.md").write_text(summary_markdown(results))
    if results["length_tokens"]["all"] is not None:
        source = Path(results["predictions"]).name if "predictions" in results else results.get("model", "")
        plot_lengths(records, out / "lengths.png", title=f"{results['task']} {source}: length by correctness")


def log_to_wandb(results: dict, records: list[dict], config: dict) -> None:
    """Log the summary metrics and a samples table to W&B (``WANDB_MODE=offline`` keeps it local)."""
    import wandb

    from eval.metrics import sample_list

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
    from rewards.completions import completion_text

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
) -> dict:
    """Re-score stored completions (no model): samples.jsonl in input order, one line per input line.

    The completion field holds a string, chat messages (TRL style), or a list of K strings (K samples of one
    problem: the line then gets a ``samples`` list and pass@k is reported); a single completion's line has a
    boolean ``correct``. ``gold_field`` defaults to the task's (``answer``); a GSM8K gold holding a full solution
    is read after its ``####``. ``tokenizer`` (optional) counts completion tokens; otherwise an ``n_tokens`` field
    is used if present. A ``truncated`` field, or ``finish_reason == "length"`` (vLLM/OpenAI), marks truncation.
    Samples whose scoring ran out of time are listed in results.json (``timeouts``) and logged: a second scoring of
    the same file differs, if at all, only in those.
    """
    base = get_task(task_name)
    task = replace(base, gold_field=gold_field or base.gold_field)
    rows = read_predictions(predictions, completion_field, task.gold_field)
    records = []
    for i, row in enumerate(rows):
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
        samples = [
            {"completion": t, "n_tokens": n, "truncated": tr, **score_sample(t, gold, task_name)}
            for t, n, tr in zip(texts, counts, truncated, strict=True)
        ]
        record = {
            "index": i,
            "id": row.get("unique_id", row.get("id", i)),
            "question": row.get(base.question_field, ""),
            "gold": gold,
            "subject": row.get("subject"),
            "level": row.get("level"),
        }
        if len(samples) == 1:
            record.update(samples[0])
        else:
            record["n_correct_samples"] = sum(s["correct"] for s in samples)
            record["samples"] = samples
        records.append(record)
    with lock_output_folder(out_dir) as out:  # an `eval run` writing this folder is not overwritten under it
        (out / CONFIG_FILE).unlink(missing_ok=True)  # the folder no longer holds a run that `eval run` could resume
        write_jsonl(records, out / SAMPLES_FILE)
        results = {"task": task.name, "predictions": str(predictions), **summarize(records, level=ci_level)}
        results["lenient_rule"] = lenient_rule(task_name)
        write_outputs(out, results, records)
    return results
