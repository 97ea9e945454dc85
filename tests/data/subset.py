"""Rebuild the small data files under ``tests/data`` from full offline copies.

The default test run reads only what this folder holds. Run from the repository root, with ``--source`` a folder laid
out as ``python -m eval.data`` writes it (``gsm8k/``, ``math500/``, ``math_train/``) plus ``model_outputs/`` from the
sources named in ``tests/data/README.md``:

    python tests/data/subset.py --source /path/to/full/data

What is kept, and why (each choice is what a test needs, nothing is tuned to a result):
- GSM8K test and MATH-500: whole (the reference-solution tests read every row).
- GSM8K train, MATH train: the first 256 rows, plus every MATH train row whose gold is a hedged list (a scoring test
  needs them).
- GPT-3 GSM8K solutions: the first 300 questions. MathCoder-L-7B: the first 300 problems plus every problem the
  checker is pinned to disagree on (``tests/rewards/test_real_data.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rewards.answers import _is_hedge  # noqa: E402

HERE = Path(__file__).resolve().parent
FIRST = 256  # training rows: the tests read at most a few dozen
FIRST_OUTPUTS = 300


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    print(f"{path.relative_to(HERE)}: {len(rows)} rows, {path.stat().st_size / 1024:.0f} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="a folder with the full files")
    source = parser.parse_args().source
    from tests.rewards.test_real_data import MATHCODER_DISAGREEMENTS

    write(read(source / "gsm8k" / "test.jsonl"), HERE / "gsm8k" / "test.jsonl")
    write(read(source / "math500" / "test.jsonl"), HERE / "math500" / "test.jsonl")
    write(read(source / "gsm8k" / "train.jsonl")[:FIRST], HERE / "gsm8k" / "train.jsonl")
    math_train = read(source / "math_train" / "train.jsonl")
    hedged = [r for r in math_train[FIRST:] if r["answer"] and _is_hedge(r["answer"])]
    write(math_train[:FIRST] + hedged, HERE / "math_train" / "train.jsonl")
    outputs = source / "model_outputs"
    gpt3 = read(outputs / "gsm8k_gpt3_example_solutions.jsonl")[:FIRST_OUTPUTS]
    write(gpt3, HERE / "model_outputs" / "gsm8k_gpt3_example_solutions.jsonl")
    mathcoder = read(outputs / "gsm8k_mathcoder_l_7b.jsonl")
    kept = [r for i, r in enumerate(mathcoder) if i < FIRST_OUTPUTS or r["id"] in MATHCODER_DISAGREEMENTS]
    write(kept, HERE / "model_outputs" / "gsm8k_mathcoder_l_7b.jsonl")


if __name__ == "__main__":
    main()
