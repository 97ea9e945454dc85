"""Run a benchmark on a loaded model: generate, score and summarise, into an output folder that a killed run resumes.

``evaluate`` is what ``python -m eval run`` and the recipes call; samples are appended as they are scored, so a
killed run continues when started again with the same settings and model.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext
from pathlib import Path

from tqdm.auto import tqdm

from eval.fingerprint import weights_fingerprint
from eval.folder import SAMPLES_FILE, lock_output_folder, prepare_folder, read_samples, write_outputs
from eval.generate import VLLM_PROMPTS_PER_CALL, check_backend, generate
from eval.jsonl import append_jsonl, write_jsonl
from eval.metrics import CI_LEVEL, sample_list, summarize
from eval.samples import add_lenient, rescore_timeouts, scored_record
from eval.scoring import lenient_rule
from eval.tasks import Task, get_task, load_rows

logger = logging.getLogger(__name__)

# Long enough for chains of thought: lm-eval's default of 256 tokens cuts off most Qwen2.5 GSM8K answers.
# Truncation is still measured (finish without EOS) and reported; raise the budget if it is above ~1%.
DEFAULT_MAX_NEW_TOKENS = {"gsm8k": 1024, "math": 2048}
DEFAULT_BATCH_SIZE = 16


def default_max_new_tokens(task_name: str) -> int:
    """The default generation budget of a task.

    >>> default_max_new_tokens("gsm8k"), default_max_new_tokens("math500")
    (1024, 2048)
    """
    return DEFAULT_MAX_NEW_TOKENS[get_task(task_name).answer_style]


def load_problems(task: Task, data: str | None = None, limit: int | None = None) -> list[dict]:
    """The task's first ``limit`` problems as dicts; raises before any model loads on a missing or unreadable file."""
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


def _score_record(problem: dict, generations, task_name: str) -> dict:
    record = {k: problem[k] for k in ("index", "id", "question", "gold", "subject", "level")}
    texts = [(g.text, g.n_tokens, g.truncated) for g in generations]
    return scored_record(record, texts, task_name)


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
    """Generate, score and summarise a task for a loaded model; returns the results.json dict.

    ``seed + i`` seeds the batch (hf) or problem (vllm) starting at problem ``i``, so a resumed run samples as a fresh
    one would. ``out_dir`` None keeps everything in memory; a folder holding another run is refused unless
    ``overwrite``. ``run_info["model_fingerprint"]`` names the model; without it one is computed from the weights.
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
