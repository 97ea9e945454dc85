"""A ``samples.jsonl`` record: a problem's completions scored, strict and lenient, as ``eval run`` and ``eval score``
write it; and rescoring of the stored samples a resumed run must score again.
"""

from __future__ import annotations

from eval.metrics import sample_list
from eval.scoring import lenient_score, score_completion


def score_sample(completion: str | None, gold: str | None, task_name: str) -> dict:
    """The strict score (``score_completion``: what the rewards pay) and the lenient one (``lenient_score``)."""
    return {**score_completion(completion, gold, task_name), **lenient_score(completion, gold, task_name)}


def scored_record(record: dict, texts: list[tuple], task_name: str) -> dict:
    """``record`` with its (completion, n_tokens, truncated) ``texts`` scored: one inline, several as ``samples``."""
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


def rescore_timeouts(done: dict[int, dict], task_name: str) -> int:
    """Score again, in place, stored samples whose scoring timed out (a timeout is no verdict); returns how many."""
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
    """Give, in place, each stored sample without a lenient verdict its lenient fields; returns how many."""
    n = 0
    for record in done.values():
        for s in sample_list(record):
            if "lenient_correct" not in s:
                s.update(lenient_score(s.get("completion"), record["gold"], task_name))
                n += 1
    return n
