"""Verifiable arithmetic word problems in GSM8K style, for the CPU lab and the real-model lab.

Each problem is a short story of additions and subtractions whose solution ends in ``#### N`` as in GSM8K, so the
labs use the ``gsm8k`` task's rewards and extractor unchanged. The splits, each from its own seed:

- **test** (``heldout_problems``) is read before and after training and by no choice;
- **dev** (``dev_problems``) is what every choice reads: the SFT stop, rates, steps, sweep winners;
- **ood** (``ood_problems``) is read by no run and no choice: one block per shift (``ood_shifts``);
- **train** (``train_problems``) is every training problem, SFT and RL alike.

Splits are kept apart on the worked solution, not the question: names and items never reach the solution, so two
questions that differ only in them are the same arithmetic.

    python -m cpu_lab.problems runs/lab/data   # train, dev, test and ood .jsonl, and splits.json
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from cpu_lab.dataclass_flags import add_fields, from_args
from eval.jsonl import read_jsonl, write_jsonl

TASK = "lab"  # GSM8K-shaped answers (same rewards and extractor as the benchmark), a short instruction
TEST_SEED = 1_000_003  # the test set's own seed, never used for training data
TEST_SIZE = 200
DEV_SEED = 2_000_003  # the dev set's own seed: the choices read it, nothing trains on it
DEV_SIZE = 200
OOD_SEED = 3_000_003  # the out-of-distribution set's own seed (one stream per shift)
OOD_SIZE = 200  # problems per shift
MAX_CONSECUTIVE_REPEATS = 2000  # draws in a row that repeat a solution before giving up: the space is used up

NAMES = ["Tom", "Mia", "Sam", "Ava", "Leo", "Zoe", "Ben", "Ivy", "Max", "Eva", "Jack", "Lily", "Noah", "Emma"]
ITEMS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "cookies", "cards", "shells", "stamps"]
GAIN = ["buys {n} more {item}", "finds {n} more {item}", "gets {n} more {item}", "is given {n} more {item}"]
LOSS = ["gives away {n} {item}", "loses {n} {item}", "sells {n} {item}", "uses {n} {item}"]
# Words no training story uses: the "new words" shift of the OOD set
NEW_NAMES = ["Omar", "Priya", "Kenji", "Freya", "Diego", "Amara", "Tariq", "Ingrid", "Mateo", "Yuki", "Soren", "Nadia"]
NEW_ITEMS = ["tulips", "pebbles", "buttons", "ribbons", "feathers", "crayons", "lemons", "tickets", "beads", "kites"]
NEW_GAIN = ["collects {n} more {item}", "picks up {n} more {item}", "receives {n} more {item}", "wins {n} more {item}"]
NEW_LOSS = ["donates {n} {item}", "drops {n} {item}", "trades away {n} {item}", "breaks {n} {item}"]
WORDS = {"train": (NAMES, ITEMS, GAIN, LOSS), "new": (NEW_NAMES, NEW_ITEMS, NEW_GAIN, NEW_LOSS)}


@dataclass(frozen=True)
class Difficulty:
    """How hard a problem is: how many operations it takes, the range of its numbers and the words it uses.

    >>> Difficulty(max_steps=0)
    Traceback (most recent call last):
    ...
    ValueError: Difficulty needs 1 <= min_steps <= max_steps, got min_steps=1, max_steps=0: raise max_steps
    """

    # operations per problem, drawn uniformly from [min_steps, max_steps]
    min_steps: int = field(default=1, metadata={"help": "fewest operations per problem"})
    max_steps: int = field(default=2, metadata={"help": "most operations per problem"})
    # every number in the question is in [min_number, max_number]
    max_number: int = field(default=50, metadata={"help": "largest number in a question"})
    min_number: int = 1
    words: str = "train"  # "train": the training stories' names, items and verbs; "new": words training never uses

    def __post_init__(self):
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(
                f"Difficulty needs 1 <= min_steps <= max_steps, got min_steps={self.min_steps}, "
                f"max_steps={self.max_steps}: raise max_steps"
            )
        if not 1 <= self.min_number < self.max_number:
            raise ValueError(
                f"Difficulty needs 1 <= min_number < max_number, got {self.min_number} and {self.max_number}: "
                "numbers are drawn from [min_number, max_number]"
            )
        if self.words not in WORDS:
            raise ValueError(f"Difficulty words={self.words!r}: give one of {sorted(WORDS)}")


def ood_shifts(difficulty: Difficulty = Difficulty()) -> dict[str, Difficulty]:
    """The out-of-distribution shifts from ``difficulty``, one change each so that each is measured alone.

    >>> for name, d in ood_shifts().items():
    ...     print(name, d.min_steps, d.max_steps, d.min_number, d.max_number, d.words)
    more_steps 3 4 1 50 train
    larger_numbers 1 2 100 500 train
    new_words 1 2 1 50 new
    """
    d = difficulty
    return {
        "more_steps": replace(d, min_steps=d.max_steps + 1, max_steps=d.max_steps + 2),
        "larger_numbers": replace(d, min_number=2 * d.max_number, max_number=10 * d.max_number),
        "new_words": replace(d, words="new"),
    }


def make_problem(rng: random.Random, difficulty: Difficulty = Difficulty()) -> dict:
    """One problem: ``question``, ``answer`` (worked solution ending in ``#### N``, as in GSM8K) and ``final``.

    >>> p = make_problem(random.Random(3), Difficulty(min_steps=2, max_steps=2, max_number=20))
    >>> print(p["question"])
    Ava has 18 stamps. Ava gives away 16 stamps. Then Ava gets 16 more stamps. How many stamps does Ava have now?
    >>> print(p["answer"])
    18 - 16 = 2
    2 + 16 = 18
    #### 18
    """
    if hasattr(difficulty, "make_problem"):  # a Difficulty subclass with its own stories (cpu_lab/long_answers.py)
        return difficulty.make_problem(rng)
    names, items, gain, loss = WORDS[difficulty.words]
    low, high = difficulty.min_number, difficulty.max_number
    name, item = rng.choice(names), rng.choice(items)
    total = rng.randint(low, high)
    sentences, equations = [f"{name} has {total} {item}."], []
    for step in range(rng.randint(difficulty.min_steps, difficulty.max_steps)):
        # Subtract only what is there, so every intermediate count is a non-negative whole number.
        subtract = total >= low and rng.random() < 0.5
        amount = rng.randint(low, min(total, high) if subtract else high)
        verb = rng.choice(loss if subtract else gain).format(n=amount, item=item)
        sentences.append(f"{'Then ' if step else ''}{name} {verb}.")
        new_total = total - amount if subtract else total + amount
        equations.append(f"{total} {'-' if subtract else '+'} {amount} = {new_total}")
        total = new_total
    sentences.append(f"How many {item} does {name} have now?")
    return {"question": " ".join(sentences), "answer": "\n".join([*equations, f"#### {total}"]), "final": str(total)}


def solution(problem: dict) -> str:
    """What two problems must not share across splits: the worked solution.

    >>> a = make_problem(random.Random(3))
    >>> b = {**a, "question": a["question"].replace("Ava", "Zoe")}
    >>> solution(a) == solution(b)
    True
    """
    return problem["answer"]


def heldout_problems(difficulty: Difficulty = Difficulty(), n: int = TEST_SIZE) -> list[dict]:
    """The fixed test set for ``difficulty``: ``n`` problems with distinct solutions drawn with ``TEST_SEED``.

    >>> heldout_problems(n=2) == heldout_problems(n=2)  # the same every time
    True
    """
    return _copies(_test(difficulty, n))


def dev_problems(difficulty: Difficulty = Difficulty(), n: int = DEV_SIZE, test_n: int = TEST_SIZE) -> list[dict]:
    """The fixed dev set: ``n`` problems drawn with ``DEV_SEED``, none sharing a solution with the test set.

    >>> tested = {solution(p) for p in heldout_problems()}
    >>> any(solution(p) in tested for p in dev_problems())
    False
    """
    return _copies(_dev(difficulty, n, test_n))


def ood_problems(
    difficulty: Difficulty = Difficulty(), n: int = OOD_SIZE, test_n: int = TEST_SIZE, dev_n: int = DEV_SIZE
) -> list[dict]:
    """``n`` problems for each of ``ood_shifts(difficulty)``, none sharing a solution with the test or dev set.

    >>> from collections import Counter
    >>> Counter(r["shift"] for r in ood_problems(n=3))
    Counter({'more_steps': 3, 'larger_numbers': 3, 'new_words': 3})
    """
    return _copies(_ood(difficulty, n, test_n, dev_n))


def train_problems(
    n: int,
    seed: int = 0,
    difficulty: Difficulty = Difficulty(),
    test_n: int = TEST_SIZE,
    dev_n: int = DEV_SIZE,
    ood_n: int = OOD_SIZE,
):
    """``n`` training problems for ``seed`` (repeats allowed), none sharing its solution with a kept-out problem.

    >>> kept_out = kept_out_solutions()
    >>> any(solution(p) in kept_out for p in train_problems(2000, seed=0))
    False
    """
    if seed in (TEST_SEED, DEV_SEED, OOD_SEED):
        raise ValueError(f"seed {seed} is the test, dev or OOD set's seed: pick any other training seed")
    exclude = kept_out_solutions(difficulty, test_n, dev_n, ood_n)
    rng, rows = random.Random(seed), []
    while len(rows) < n:
        problem = make_problem(rng, difficulty)
        if solution(problem) not in exclude:
            rows.append(problem)
    return rows


@lru_cache(maxsize=16)
def kept_out_solutions(
    difficulty: Difficulty = Difficulty(), test_n: int = TEST_SIZE, dev_n: int = DEV_SIZE, ood_n: int = OOD_SIZE
) -> frozenset[str]:
    """The solutions no training problem may have, at any difficulty: the test, dev and OOD sets' at ``difficulty``.

    >>> len(kept_out_solutions()) == 200 + 200 + 3 * 200
    True
    """
    rows = [*_test(difficulty, test_n), *_dev(difficulty, dev_n, test_n), *_ood(difficulty, ood_n, test_n, dev_n)]
    return frozenset(solution(p) for p in rows)


def solution_overlap(train: list[dict], rows: list[dict]) -> int:
    """How many of ``rows`` share their solution with a problem of ``train``.

    >>> a, b = make_problem(random.Random(1)), make_problem(random.Random(2))
    >>> solution_overlap([a], [{**a, "question": "renamed"}, b])
    1
    """
    seen = {solution(p) for p in train}
    return sum(solution(p) in seen for p in rows)


@lru_cache(maxsize=16)
def _test(difficulty: Difficulty, n: int) -> tuple[dict, ...]:
    return tuple(_distinct(random.Random(TEST_SEED), difficulty, n, exclude=frozenset()))


@lru_cache(maxsize=16)
def _dev(difficulty: Difficulty, n: int, test_n: int) -> tuple[dict, ...]:
    tested = frozenset(solution(p) for p in _test(difficulty, test_n))
    return tuple(_distinct(random.Random(DEV_SEED), difficulty, n, exclude=tested))


@lru_cache(maxsize=16)
def _ood(difficulty: Difficulty, n: int, test_n: int, dev_n: int) -> tuple[dict, ...]:
    if type(difficulty) is not Difficulty or n == 0:  # a subclass with its own stories has no shifts defined here
        return ()
    exclude = {solution(p) for p in (*_test(difficulty, test_n), *_dev(difficulty, dev_n, test_n))}
    rows = []
    for i, (shift, shifted) in enumerate(ood_shifts(difficulty).items()):
        block = _distinct(random.Random(OOD_SEED + i), shifted, n, exclude=frozenset(exclude))
        exclude |= {solution(p) for p in block}
        rows += [{**p, "shift": shift} for p in block]
    return tuple(rows)


def _copies(rows) -> list[dict]:
    return [dict(r) for r in rows]


def _distinct(rng: random.Random, difficulty: Difficulty, n: int, exclude: frozenset[str]) -> list[dict]:
    rows, seen, misses = [], set(exclude), 0
    while misses < MAX_CONSECUTIVE_REPEATS:
        problem = make_problem(rng, difficulty)
        if solution(problem) in seen:
            misses += 1
            continue
        seen.add(solution(problem))
        rows.append(problem)
        misses = 0
        if len(rows) == n:
            return rows
    raise ValueError(
        f"could not draw {n} problems with distinct solutions at {difficulty}: raise max_number or max_steps, "
        "or ask for fewer"
    )


def question_rule_overlap(
    n_train: int, seed: int, difficulty: Difficulty, splits: dict[str, list[dict]]
) -> dict[str, int]:
    """How many problems of each split would share their solution with training if only questions were kept apart."""
    questions = {p["question"] for rows in splits.values() for p in rows}
    rng, train = random.Random(seed), []
    while len(train) < n_train:
        problem = make_problem(rng, difficulty)
        if problem["question"] not in questions:
            train.append(problem)
    return {name: solution_overlap(train, rows) for name, rows in splits.items()}


def write_lab_data(
    out_dir: str | Path,
    n_train: int = 5000,
    seed: int = 0,
    difficulty: Difficulty = Difficulty(),
    test_n: int = TEST_SIZE,
    dev_n: int = DEV_SIZE,
    ood_n: int = OOD_SIZE,
) -> dict[str, Path]:
    """Write the splits' ``.jsonl`` files and ``splits.json`` to ``out_dir``; return the data files' paths by split."""
    out = Path(out_dir)
    splits = {
        "dev": dev_problems(difficulty, dev_n, test_n),
        "test": heldout_problems(difficulty, test_n),
        "ood": ood_problems(difficulty, ood_n, test_n, dev_n),
    }
    train = train_problems(n_train, seed, difficulty, test_n, dev_n, ood_n)
    paths = {"train": write_jsonl(train, out / "train.jsonl")}
    paths |= {name: write_jsonl(rows, out / f"{name}.jsonl") for name, rows in splits.items() if rows}
    info = {
        "difficulty": asdict(difficulty),
        "sizes": {"train": n_train, "dev": dev_n, "test": test_n, "ood_per_shift": ood_n},
        "seeds": {"train": seed, "dev": DEV_SEED, "test": TEST_SEED, "ood": OOD_SEED},
        "ood_shifts": {name: asdict(d) for name, d in ood_shifts(difficulty).items()} if splits["ood"] else {},
        "solution_overlap_with_train": {
            "question_rule": question_rule_overlap(n_train, seed, difficulty, splits),
            "solution_rule": {name: solution_overlap(train, rows) for name, rows in splits.items()},
        },
    }
    (out / "splits.json").write_text(json.dumps(info, indent=1) + "\n")
    return paths


def check_disjoint(paths: dict[str, str | Path]) -> None:
    """Raise if a dev, test or OOD file of ``paths`` shares a worked solution with the ``train`` file."""
    train = {solution(p) for p in read_jsonl(paths["train"])}
    for name, path in paths.items():
        if name == "train":
            continue
        shared = sum(solution(p) in train for p in read_jsonl(path))
        if shared:
            raise ValueError(
                f"{path}: {shared} problems share their worked solution with {paths['train']}; write the data "
                "again with `python -m cpu_lab.problems DIR` (it keeps splits apart on the solution)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cpu_lab.problems", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir")
    parser.add_argument("--n-train", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    add_fields(parser, Difficulty, ["min_steps", "max_steps", "max_number"])
    parser.add_argument("--test", type=int, default=TEST_SIZE, help="test problems (their own seed)")
    parser.add_argument("--dev", type=int, default=DEV_SIZE, help="dev problems (their own seed)")
    parser.add_argument("--ood", type=int, default=OOD_SIZE, help="out-of-distribution problems per shift (0: none)")
    args = parser.parse_args()
    try:
        difficulty = from_args(Difficulty, args)
        paths = write_lab_data(args.out_dir, args.n_train, args.seed, difficulty, args.test, args.dev, args.ood)
    except ValueError as e:
        parser.error(str(e))
    overlap = json.loads((Path(args.out_dir) / "splits.json").read_text())["solution_overlap_with_train"]
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    print(
        "problems sharing a worked solution with train.jsonl: "
        + ", ".join(
            f"{k} {overlap['question_rule'][k]} -> {overlap['solution_rule'][k]}" for k in overlap["solution_rule"]
        )
        + " (kept apart on the question text -> on the solution)"
    )


if __name__ == "__main__":
    main()
