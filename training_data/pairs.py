"""Preference pairs from verified rollouts: chosen = a correct answer, rejected = a wrong one to the same problem.

Options cap the pairs per problem and keep only pairs of similar length, so that DPO does not simply learn "longer is
better". The DPO and reward-model recipes and the reward-model lab all load their pairs here.

>>> rollout = {"id": 0, "prompt": [{"role": "user", "content": "1+1?"}], "completions": [
...     {"text": "1+1=2\\n#### 2", "correct": True, "n_tokens": 8},
...     {"text": "#### 3", "correct": False, "n_tokens": 3}]}
>>> pairs, report = build_pairs([rollout])
>>> pairs[0]["chosen"], pairs[0]["rejected"]
([{'role': 'assistant', 'content': '1+1=2\\n#### 2'}], [{'role': 'assistant', 'content': '#### 3'}])
>>> report["pairs"], report["problems_all_correct"], report["problems_all_wrong"]
(1, 0, 0)
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

from eval.jsonl import iter_jsonl
from eval.tasks import is_local, load_hub_dataset, no_progress_bars
from training_data.rollouts import read_rollouts

logger = logging.getLogger(__name__)

PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")


def length_gap(a: int, b: int) -> float:
    """Relative length difference ``|a - b| / max(a, b)`` (0 = same length, 1 = one of them is empty).

    >>> length_gap(100, 80), length_gap(5, 5), length_gap(0, 0)
    (0.2, 0.0, 0.0)
    """
    return abs(a - b) / max(a, b, 1)


def _unique_by_text(completions: list[dict]) -> list[dict]:
    seen, unique = set(), []
    for c in completions:
        if c["text"] not in seen:
            seen.add(c["text"])
            unique.append(c)
    return unique


def pick_pairs(
    correct: list[dict], wrong: list[dict], max_pairs: int | None, length_tolerance: float | None, rng: random.Random
) -> tuple[list[tuple[dict, dict]], int]:
    """(correct, wrong) pairs for one problem, each answer used once before any is reused, and how many pairs were
    too unequal in length (with ``length_tolerance``, the closest in length come first; else a seeded random order).

    >>> c = [{"text": "a", "n_tokens": 10}, {"text": "b", "n_tokens": 50}]
    >>> w = [{"text": "x", "n_tokens": 48}, {"text": "y", "n_tokens": 11}]
    >>> pairs, too_unequal = pick_pairs(c, w, None, 0.1, random.Random(0))
    >>> [(a["text"], b["text"]) for a, b in pairs], too_unequal
    ([('b', 'x'), ('a', 'y')], 2)
    """
    candidates = [(i, j) for i in range(len(correct)) for j in range(len(wrong))]
    too_unequal = 0
    if length_tolerance is not None:
        allowed = [
            (i, j)
            for i, j in candidates
            if length_gap(correct[i]["n_tokens"], wrong[j]["n_tokens"]) <= length_tolerance
        ]
        too_unequal = len(candidates) - len(allowed)
        candidates = allowed
    tie_break = {pair: rng.random() for pair in candidates}
    used_correct, used_wrong = [0] * len(correct), [0] * len(wrong)
    chosen_pairs: list[tuple[dict, dict]] = []
    while candidates and (max_pairs is None or len(chosen_pairs) < max_pairs):

        def priority(pair: tuple[int, int]) -> tuple:
            i, j = pair
            gap = length_gap(correct[i]["n_tokens"], wrong[j]["n_tokens"]) if length_tolerance is not None else 0.0
            return (max(used_correct[i], used_wrong[j]), used_correct[i] + used_wrong[j], gap, tie_break[pair])

        best = min(candidates, key=priority)
        candidates.remove(best)
        used_correct[best[0]] += 1
        used_wrong[best[1]] += 1
        chosen_pairs.append((correct[best[0]], wrong[best[1]]))
    return chosen_pairs, too_unequal


def build_pairs(
    rollouts: list[dict],
    max_pairs_per_problem: int | None = 4,
    length_tolerance: float | None = None,
    seed: int = 0,
) -> tuple[list[dict], dict]:
    """DPO pairs (conversational ``prompt``/``chosen``/``rejected``) from rollout records, and a report of what
    gave no pair. ``length_tolerance`` bounds ``length_gap``; ``max_pairs_per_problem`` None keeps every pair."""
    if max_pairs_per_problem is not None and max_pairs_per_problem < 1:
        raise ValueError(f"max_pairs_per_problem={max_pairs_per_problem}: use a positive number or None (no cap)")
    if length_tolerance is not None and not 0 <= length_tolerance <= 1:
        raise ValueError(f"length_tolerance={length_tolerance}: use a relative gap in [0, 1] (e.g. 0.2) or None")
    rng = random.Random(seed)
    pairs: list[dict] = []
    report = {
        "problems": len(rollouts),
        "problems_with_pairs": 0,
        "problems_all_correct": 0,
        "problems_all_wrong": 0,
        "problems_no_pair_within_length_tolerance": 0,
        "pairs_outside_length_tolerance": 0,
    }
    for record in rollouts:
        completions = _unique_by_text(record["completions"])
        correct = [c for c in completions if c["correct"]]
        wrong = [c for c in completions if not c["correct"]]
        if not wrong:
            report["problems_all_correct"] += 1
            continue
        if not correct:
            report["problems_all_wrong"] += 1
            continue
        problem_pairs, too_unequal = pick_pairs(correct, wrong, max_pairs_per_problem, length_tolerance, rng)
        report["pairs_outside_length_tolerance"] += too_unequal
        if not problem_pairs:
            report["problems_no_pair_within_length_tolerance"] += 1
            continue
        report["problems_with_pairs"] += 1
        for good, bad in problem_pairs:
            pairs.append(
                {
                    "id": record["id"],
                    "prompt": record["prompt"],
                    "chosen": [{"role": "assistant", "content": good["text"]}],
                    "rejected": [{"role": "assistant", "content": bad["text"]}],
                    "chosen_tokens": good["n_tokens"],
                    "rejected_tokens": bad["n_tokens"],
                }
            )
    report["pairs"] = len(pairs)
    report["mean_chosen_tokens"] = sum(p["chosen_tokens"] for p in pairs) / len(pairs) if pairs else None
    report["mean_rejected_tokens"] = sum(p["rejected_tokens"] for p in pairs) / len(pairs) if pairs else None
    return pairs, report


def is_rollouts_file(path: str | Path) -> bool:
    """Does a local JSONL file hold rollout records (with ``completions``) rather than ready-made pairs?"""
    for _, row in iter_jsonl(path, "pass a rollouts or pairs .jsonl file"):
        return "completions" in row  # the first row tells
    return False


def load_preference_dataset(
    source: str,
    *,
    split: str = "train",
    max_pairs_per_problem: int | None = 4,
    length_tolerance: float | None = None,
    seed: int = 0,
):
    """``(dataset, report)``: ``prompt``/``chosen``/``rejected`` rows for DPO from a rollouts file, a JSONL of pairs or
    a hub preference set, checked before any model loads; the report is None for ready-made pairs."""
    from datasets import Dataset, load_dataset  # seconds to import; the rollouts CLI needs none of it

    report = None
    if is_local(source):
        if not Path(source).exists():
            raise FileNotFoundError(f"preference data {source} does not exist: pass a rollouts or pairs .jsonl path")
        if is_rollouts_file(source):
            pairs, report = build_pairs(read_rollouts(source), max_pairs_per_problem, length_tolerance, seed)
            if not pairs:
                raise ValueError(
                    f"no preference pair in {source}: {report['problems']} problems, {report['problems_all_correct']}"
                    f" with every answer correct, {report['problems_all_wrong']} with every answer wrong, "
                    f"{report['problems_no_pair_within_length_tolerance']} with no pair within the length tolerance. "
                    "Sample more answers per problem (--k), use problems nearer the model's level, or loosen "
                    "length_tolerance"
                )
            dataset = Dataset.from_list([{k: p[k] for k in PREFERENCE_COLUMNS} for p in pairs])
        else:
            with no_progress_bars():
                dataset = load_dataset("json", data_files=str(source), split="train")
    else:
        fix = "pass data: a local rollouts or pairs .jsonl (python -m training_data.rollouts sample|pairs writes one)"
        dataset = load_hub_dataset(source, split=split, fix=fix)
    missing = [c for c in ("chosen", "rejected") if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"preference data {source} has no {missing} column(s) (it has {dataset.column_names}): DPO needs "
            "prompt/chosen/rejected columns, or a rollouts file from `python -m training_data.rollouts sample`"
        )
    if len(dataset) == 0:
        raise ValueError(f"preference data {source} holds no pair: DPO needs at least one prompt/chosen/rejected row")
    return dataset, report


def check_distinct(dataset, source: str) -> None:
    """No pair whose chosen equals its rejected: it has no preference to learn and hides a bug in the pair builder."""
    same = [i for i, (c, r) in enumerate(zip(dataset["chosen"], dataset["rejected"], strict=True)) if c == r]
    if same:
        raise ValueError(
            f"preference data {source}: {len(same)} pair(s) have chosen == rejected (rows {same[:5]}): such a pair has "
            "no preference to learn. Drop those rows (or rebuild the pairs with "
            "`python -m training_data.rollouts pairs`)"
        )


def load_pairs(
    source: str,
    *,
    split: str = "train",
    seed: int = 0,
    max_pairs_per_problem: int | None = 4,
    length_tolerance: float | None = None,
    margin: float | None = None,
):
    """``(pairs, report)`` for a recipe: loaded and checked pairs; ``margin`` adds a constant ``margin`` column (the
    reward model's Bradley-Terry margin)."""
    if not source:
        raise ValueError(
            "no data: set data: to a rollouts file (python -m training_data.rollouts sample), pairs or a hub set"
        )
    pairs, report = load_preference_dataset(
        source,
        split=split,
        seed=seed,
        max_pairs_per_problem=max_pairs_per_problem,
        length_tolerance=length_tolerance,
    )
    check_distinct(pairs, source)
    if report:
        print("pairs built from the rollouts: " + json.dumps(report))
    if margin is not None:
        if "margin" in pairs.column_names:
            raise ValueError(f"{source} has its own margin column and margin: is set too: keep one of them")
        pairs = pairs.add_column("margin", [float(margin)] * len(pairs))
    return pairs, report


def split_by_prompt(dataset, fraction: float, seed: int):
    """(train, held-out) with every pair of one prompt on the same side; ``fraction`` of the prompts held out."""
    if not 0 < fraction < 1:
        raise ValueError(f"eval_fraction={fraction}: give a share in (0, 1), or held-out pairs with eval_data:")
    key = [json.dumps(p, sort_keys=True) for p in dataset["prompt"]] if "prompt" in dataset.column_names else None
    prompts = sorted(set(key or range(len(dataset))))
    random.Random(seed).shuffle(prompts)
    held = set(prompts[: max(1, round(fraction * len(prompts)))])
    if len(held) == len(prompts):
        raise ValueError(f"{len(prompts)} prompt(s) cannot be split: give more pairs or eval_data:")
    keys = key or list(range(len(dataset)))
    return (
        dataset.select([i for i, k in enumerate(keys) if k not in held]),
        dataset.select([i for i, k in enumerate(keys) if k in held]),
    )
