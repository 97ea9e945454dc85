"""Does a change to the checker flip any verdict on real data? Score every stored model output and every reference
solution, item by item, and compare with the verdicts saved from another checkout.

    # in the checkout to compare against (e.g. `git worktree add /tmp/before <commit>`), from its root, with this
    # checkout's script and interpreter (LEASH is this checkout's root):
    OMP_NUM_THREADS=1 $LEASH/.venv/bin/python $LEASH/bench/checker_drift.py --save /tmp/before.json
    # then here:
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.checker_drift --compare /tmp/before.json

The script imports ``rewards`` from the current directory, so the same file scores any checkout, on the same data
(``--data DIR``, laid out as ``tests/data``; the unshipped Qwen2.5-Math samples are skipped when absent). Prints,
per set, the items, the number correct and the items whose verdict differs; exit status 1 if any differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from eval.jsonl import read_jsonl  # noqa: E402
from rewards.answers import extract_answer  # noqa: E402
from rewards.verify import is_correct  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"  # the shipped subsets (tests/data/README.md)
QWEN_SAMPLES = "model_outputs/math_cot_100_qwen25math_samples.jsonl"  # not shipped: only in a full --data folder
GPT3_KEYS = ["6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"]


def _rows(data: Path, path: str) -> list[dict]:
    if not (data / path).exists():
        raise FileNotFoundError(f"{data / path} does not exist: pass --data DIR laid out as tests/data (its README)")
    return read_jsonl(data / path, "a stored data file under --data")


def _mathcoder_text(row: dict) -> str:
    fences = {"code": "```python\n{}\n```", "execution": "```output\n{}\n```", "text": "{}"}
    return "\n".join(fences[t["role"]].format(t["content"]) for t in row["completion_turns"] if t["role"] in fences)


def verdicts(data: Path = DATA) -> dict[str, list[bool]]:
    """Every item's verdict, per set (the Qwen2.5-Math set only when ``data`` holds its file)."""
    gpt3 = []
    for row in _rows(data, "model_outputs/gsm8k_gpt3_example_solutions.jsonl"):
        gold = extract_answer(row["ground_truth"], answer_line=True).value
        gpt3 += [is_correct(row[k]["solution"], gold, "gsm8k", answer_line=True) for k in GPT3_KEYS]
    sets = {}
    if (data / QWEN_SAMPLES).exists():
        sets["qwen25math_math"] = [
            is_correct(c, r["answer"], "math") for r in _rows(data, QWEN_SAMPLES) for c in r["code"]
        ]
    sets |= {
        "mathcoder_gsm8k": [
            is_correct(_mathcoder_text(r), r["gold_answer"], "math")
            for r in _rows(data, "model_outputs/gsm8k_mathcoder_l_7b.jsonl")
        ],
        "gpt3_gsm8k": gpt3,
        "math500_references": [
            is_correct(r["solution"], r["answer"], "math") for r in _rows(data, "math500/test.jsonl")
        ],
        "math_train_references": [
            is_correct(r["solution"], r["answer"], "math") for r in _rows(data, "math_train/train.jsonl") if r["answer"]
        ],
    }
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.checker_drift", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--save", type=Path, help="write this checkout's verdicts to a JSON file")
    parser.add_argument("--compare", type=Path, help="compare with verdicts saved by --save")
    parser.add_argument(
        "--data",
        type=Path,
        default=DATA,
        help="folder laid out as tests/data, with model_outputs/ (default: tests/data; full files: its README)",
    )
    args = parser.parse_args(argv)
    try:
        ours = verdicts(args.data)
    except (FileNotFoundError, ValueError) as e:
        parser.exit(2, f"error: {e}\n")
    if "qwen25math_math" not in ours:
        print(f"qwen25math_math: skipped ({args.data / QWEN_SAMPLES} is not there; --data DIR with the full files)")
    if args.save:
        args.save.write_text(json.dumps(ours))
    theirs = json.loads(args.compare.read_text()) if args.compare else None
    flipped = 0
    for name, values in ours.items():
        line = f"{name:24s} {len(values):6d} items {sum(values):6d} correct"
        if theirs is not None and name not in theirs:
            line += "   not in the saved verdicts"
        elif theirs is not None:
            diff = [i for i, (a, b) in enumerate(zip(theirs[name], values, strict=True)) if a != b]
            flipped += len(diff)
            line += f"   {sum(theirs[name]):6d} correct before, flipped: {diff}"
        print(line)
    return 1 if flipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
