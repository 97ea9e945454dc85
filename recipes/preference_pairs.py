"""Preference pairs for the DPO and reward-model recipes: the data arguments they share, loading and checking the
pairs before any model is loaded, and a held-out split by prompt.

``data`` is a rollouts file of ``python -m training_data.rollouts sample`` (pairs built by ``training_data.pairs``
with its cap and length matching), a JSONL of pairs, or a hub preference set with prompt/chosen/rejected columns.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from recipes.run_setup import RunArguments


@dataclass
class PairArguments(RunArguments):
    """Where the pairs come from and how many a problem gives (the DPO and reward-model recipes add to these)."""

    data: str = field(default="", metadata={"help": "rollouts .jsonl, pairs .jsonl or hub preference data set"})
    data_split: str = field(default="train", metadata={"help": "split of a hub data set"})
    max_pairs_per_problem: int = field(default=4, metadata={"help": "pairs built from one problem (0: no cap)"})
    length_tolerance: float | None = field(
        default=None, metadata={"help": "pair only answers whose |a-b|/max(a,b) token lengths are within this"}
    )


def check_distinct(dataset, source: str) -> None:
    """No pair whose chosen equals its rejected: it has no preference to learn and hides a bug in the pair builder."""
    same = [i for i, (c, r) in enumerate(zip(dataset["chosen"], dataset["rejected"], strict=True)) if c == r]
    if same:
        raise ValueError(
            f"preference data {source}: {len(same)} pair(s) have chosen == rejected (rows {same[:5]}): such a pair has "
            "no preference to learn. Drop those rows (or rebuild the pairs with "
            "`python -m training_data.rollouts pairs`)"
        )


def load_pairs(source: str, args: PairArguments, seed: int, margin: float | None = None):
    """``(pairs, report)`` from ``source`` (``training_data.pairs.load_preference_dataset``, checked); ``margin`` adds
    a constant ``margin`` column (the reward model's Bradley-Terry margin)."""
    from training_data.pairs import load_preference_dataset

    if not source:
        raise ValueError(
            "no data: set data: to a rollouts file (python -m training_data.rollouts sample), pairs or a hub set"
        )
    pairs, report = load_preference_dataset(
        source,
        split=args.data_split,
        seed=seed,
        max_pairs_per_problem=args.max_pairs_per_problem or None,
        length_tolerance=args.length_tolerance,
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
