"""Verifiable arithmetic word problems in GSM8K style, for the CPU lab.

Each problem is a short story about someone's items changing by additions and subtractions; the solution
writes one equation per step and ends with ``#### N``, exactly like a GSM8K answer, so the lab runs through the
``gsm8k`` task, its prompt, its rewards and its extractor unchanged. The difficulty knob is the number of steps
(operations) and the size of the numbers. Three splits, each from its own seed, never share a question:

- the held-out set (``heldout_problems``, 200) measures accuracy before and after training, and nothing else;
- the validation set (``validation_problems``) is what the SFT warm start checks for its stopping rule, so the
  held-out set never chooses a checkpoint;
- training sets (``train_problems``, SFT and GRPO alike) leave out every held-out and every validation question.

    python -m cpu_lab.problems runs/lab/data   # train.jsonl (5,000 rows), validation.jsonl and heldout.jsonl (200 each)
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from eval.jsonl import write_jsonl

TASK = "lab"  # GSM8K-shaped answers (same rewards and extractor as the benchmark), a short instruction
HELDOUT_SEED = 1_000_003  # the held-out set's own seed, never used for training data
HELDOUT_SIZE = 200
VALIDATION_SEED = 2_000_003  # the validation set's own seed: the warm start's stopping rule reads it, nothing trains
VALIDATION_SIZE = 200
MAX_CONSECUTIVE_REPEATS = 2000  # draws in a row that repeat a problem before giving up: the story space is used up

NAMES = ["Tom", "Mia", "Sam", "Ava", "Leo", "Zoe", "Ben", "Ivy", "Max", "Eva", "Jack", "Lily", "Noah", "Emma"]
ITEMS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "cookies", "cards", "shells", "stamps"]
GAIN = ["buys {n} more {item}", "finds {n} more {item}", "gets {n} more {item}", "is given {n} more {item}"]
LOSS = ["gives away {n} {item}", "loses {n} {item}", "sells {n} {item}", "uses {n} {item}"]


@dataclass(frozen=True)
class Difficulty:
    """How hard a problem is: how many operations it takes and how large its numbers are.

    >>> Difficulty(max_steps=0)
    Traceback (most recent call last):
    ...
    ValueError: Difficulty needs 1 <= min_steps <= max_steps, got min_steps=1, max_steps=0: raise max_steps
    """

    min_steps: int = 1  # operations per problem, drawn uniformly from [min_steps, max_steps]
    max_steps: int = 2
    max_number: int = 50  # every number in the question is in [1, max_number]

    def __post_init__(self):
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(
                f"Difficulty needs 1 <= min_steps <= max_steps, got min_steps={self.min_steps}, "
                f"max_steps={self.max_steps}: raise max_steps"
            )
        if self.max_number < 2:
            raise ValueError(f"Difficulty needs max_number >= 2, got {self.max_number}: numbers are drawn from [1, N]")


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
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    total = rng.randint(1, difficulty.max_number)
    sentences, equations = [f"{name} has {total} {item}."], []
    for step in range(rng.randint(difficulty.min_steps, difficulty.max_steps)):
        # Subtract only what is there, so every intermediate count is a non-negative whole number.
        subtract = total >= 1 and rng.random() < 0.5
        amount = rng.randint(1, min(total, difficulty.max_number) if subtract else difficulty.max_number)
        verb = rng.choice(LOSS if subtract else GAIN).format(n=amount, item=item)
        sentences.append(f"{'Then ' if step else ''}{name} {verb}.")
        new_total = total - amount if subtract else total + amount
        equations.append(f"{total} {'-' if subtract else '+'} {amount} = {new_total}")
        total = new_total
    sentences.append(f"How many {item} does {name} have now?")
    return {"question": " ".join(sentences), "answer": "\n".join([*equations, f"#### {total}"]), "final": str(total)}


def heldout_problems(difficulty: Difficulty = Difficulty(), n: int = HELDOUT_SIZE) -> list[dict]:
    """The fixed held-out set for ``difficulty``: ``n`` distinct problems drawn with ``HELDOUT_SEED``.

    >>> heldout_problems(n=2) == heldout_problems(n=2)  # the same every time
    True
    """
    return _distinct(random.Random(HELDOUT_SEED), difficulty, n, exclude=set())


def validation_problems(
    difficulty: Difficulty = Difficulty(), n: int = VALIDATION_SIZE, heldout_n: int = HELDOUT_SIZE
) -> list[dict]:
    """The fixed validation set: ``n`` distinct problems drawn with ``VALIDATION_SEED``, none in the held-out set.

    >>> held = {p["question"] for p in heldout_problems()}
    >>> any(p["question"] in held for p in validation_problems())
    False
    """
    exclude = {p["question"] for p in heldout_problems(difficulty, heldout_n)}
    return _distinct(random.Random(VALIDATION_SEED), difficulty, n, exclude=exclude)


def train_problems(
    n: int,
    seed: int = 0,
    difficulty: Difficulty = Difficulty(),
    heldout_n: int = HELDOUT_SIZE,
    validation_n: int = VALIDATION_SIZE,
):
    """``n`` training problems for ``seed``, none of whose questions is in the held-out or the validation set.

    Training problems may repeat one another (the story space is finite for small numbers), never a held-out or a
    validation one.

    >>> kept_out = {p["question"] for p in heldout_problems() + validation_problems()}
    >>> any(p["question"] in kept_out for p in train_problems(2000, seed=0))
    False
    """
    if seed in (HELDOUT_SEED, VALIDATION_SEED):
        raise ValueError(f"seed {seed} is the held-out or the validation set's seed: pick any other training seed")
    exclude = kept_out_questions(difficulty, heldout_n, validation_n)
    rng, rows = random.Random(seed), []
    while len(rows) < n:
        problem = make_problem(rng, difficulty)
        if problem["question"] not in exclude:
            rows.append(problem)
    return rows


def kept_out_questions(
    difficulty: Difficulty = Difficulty(), heldout_n: int = HELDOUT_SIZE, validation_n: int = VALIDATION_SIZE
) -> set[str]:
    """The questions no training problem may ask: the held-out and the validation set's at ``difficulty``.

    A curriculum draws training problems at other difficulties but keeps these out: the held-out set is the same
    200 problems whatever the training difficulty, so before/after numbers compare.

    >>> len(kept_out_questions())
    400
    """
    kept_out = {p["question"] for p in heldout_problems(difficulty, heldout_n)}
    return kept_out | {p["question"] for p in validation_problems(difficulty, validation_n, heldout_n)}


def _distinct(rng: random.Random, difficulty: Difficulty, n: int, exclude: set[str]) -> list[dict]:
    rows, seen, misses = [], set(exclude), 0
    while misses < MAX_CONSECUTIVE_REPEATS:
        problem = make_problem(rng, difficulty)
        if problem["question"] in seen:
            misses += 1
            continue
        seen.add(problem["question"])
        rows.append(problem)
        misses = 0
        if len(rows) == n:
            return rows
    raise ValueError(f"could not draw {n} distinct problems at {difficulty}: raise max_number or max_steps")


def write_lab_data(
    out_dir: str | Path,
    n_train: int = 5000,
    seed: int = 0,
    difficulty: Difficulty = Difficulty(),
    heldout_n: int = HELDOUT_SIZE,
    validation_n: int = VALIDATION_SIZE,
):
    """Write ``train.jsonl``, ``validation.jsonl``, ``heldout.jsonl`` and ``difficulty.json`` to ``out_dir``; return
    the paths of the three data files. A larger ``heldout_n`` keeps the first 200 held-out problems and adds more
    (the same seed draws them in order); the validation and training sets then avoid all of them."""
    out = Path(out_dir)
    train = write_jsonl(train_problems(n_train, seed, difficulty, heldout_n, validation_n), out / "train.jsonl")
    validation = write_jsonl(validation_problems(difficulty, validation_n, heldout_n), out / "validation.jsonl")
    heldout = write_jsonl(heldout_problems(difficulty, heldout_n), out / "heldout.jsonl")
    sizes = {"seed": seed, "n_train": n_train, "heldout_n": heldout_n, "validation_n": validation_n}
    (out / "difficulty.json").write_text(json.dumps({**asdict(difficulty), **sizes}))
    return train, validation, heldout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--n-train", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-steps", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--max-number", type=int, default=50)
    parser.add_argument("--heldout", type=int, default=HELDOUT_SIZE, help="held-out problems (its own seed)")
    parser.add_argument("--validation", type=int, default=VALIDATION_SIZE, help="validation problems (its own seed)")
    args = parser.parse_args()
    difficulty = Difficulty(args.min_steps, args.max_steps, args.max_number)
    train, validation, heldout = write_lab_data(
        args.out_dir, args.n_train, args.seed, difficulty, args.heldout, args.validation
    )
    print(f"wrote {train}, {validation} and {heldout}")


if __name__ == "__main__":
    main()
