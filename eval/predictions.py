"""Score completions produced elsewhere (no model): ``python -m eval score`` and ``score_predictions``.

A predictions file is JSONL, one problem a line with its completion(s) and gold answer; the output folder is
``eval run``'s. The file's hash is recorded, so only the same file is scored again into the folder.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from pathlib import Path

from eval.fingerprint import sha256_of_file
from eval.folder import SAMPLES_FILE, lock_output_folder, prepare_folder, write_outputs
from eval.jsonl import iter_jsonl, write_jsonl
from eval.metrics import CI_LEVEL, summarize
from eval.samples import scored_record
from eval.scoring import lenient_rule
from eval.tasks import Task, get_task
from rewards.completions import completion_text

logger = logging.getLogger(__name__)

GSM8K_SOLUTION = re.compile(r"(?m)^####\s*-?[\d,.]+\s*$")  # a GSM8K reference solution's last line


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

    A GSM8K gold holding a full solution is read after its ``####``. ``out_dir`` may hold an earlier scoring of the
    same file; anything else there is refused unless ``overwrite``.
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
    """Warn when a non-GSM8K task gets GSM8K-style gold solutions (``#### N``): nothing would equal such a gold."""
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
    """What an ``eval score`` records in ``run_config.json``; a rescoring must match the file's hash, not its path."""
    return {
        "command": "score",
        "task": get_task(task_name).name,
        "predictions": str(predictions),
        "predictions_sha256": sha256_of_file(Path(predictions)),
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
    return scored_record(record, list(zip(texts, counts, truncated, strict=True)), task.name)
