r"""Print the hack-probe matrix: every probe (rows) scored by every reward set (columns), per task.

Each cell is the probe's mean weighted total score over a seeded sample of real problems; a ``!`` marks a cell that
breaks its probe kind's rule (``rewards.probes``). Run it before trusting a new reward set:

    python -m eval.probe_matrix                                   # default sets, 50 GSM8K + 50 MATH-500 problems
    python -m eval.probe_matrix --json > probes.json              # the same, machine-readable
    python -m eval.probe_matrix --rewards "{task}_correctness:1,{task}_format:0.5" --rewards number_anywhere
    python -m eval.probe_matrix --data gsm8k=data/gsm8k/test.jsonl --data math=data/math500/test.jsonl --n 20

A reward set is ``name[:weight],...``; ``{task}`` stands for ``gsm8k`` or ``math``. Exit status: 0 when the default
correctness + format set (if shown) breaks no rule, 1 otherwise, 2 on bad input.

``--reward-model PATH`` adds a learned reward model as a column. Its scores are unbounded, so each is shown
normalised by the model's own means for genuine answers (1 = a correct answer's pay, 0 = a wrong one's); the rules are
judged on the raw means, which ``--json`` holds. Give it the instruction of the task it was trained on:

    python -m eval.probe_matrix --reward-model runs/lab/overoptimisation/rm \
        --rm-instruction "End with #### and the number."
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from eval.jsonl import read_jsonl
from eval.tasks import get_task, load_rows
from rewards.answers import gsm8k_gold
from rewards.probes import (
    GOLD_UNCOMMITTED,
    PROBES,
    REFERENCE,
    REFERENCES,
    RULES,
    TOLERANCE,
    WRONG_ANSWER,
    probe_scores,
    problem_text,
)
from rewards.registry import reward_info
from rewards.reward_model import RewardModelReward, check_reward_model

BENCHMARKS = {"gsm8k": "gsm8k", "math": "math500"}  # the eval.tasks task each probe task samples its problems from
DEFAULT_SETS = {
    "correct+format": "{task}_correctness:1,{task}_format:1",
    "format_only": "{task}_format:1",
    "number_anywhere": "number_anywhere:1",
    "correct+format+anywhere": "{task}_correctness:1,{task}_format:1,number_anywhere:1",
}
CLEAN_SETS = ("correct+format",)


def parse_reward_set(spec: str, task: str) -> tuple[list[str], list[float]]:
    """``"{task}_correctness:1,{task}_format:0.5"`` -> (names, weights), every name checked against the registry.

    >>> parse_reward_set("{task}_correctness:1,{task}_format:0.5", "math")
    (['math_correctness', 'math_format'], [1.0, 0.5])
    """
    names, weights = [], []
    for item in spec.split(","):
        name, _, weight = item.strip().partition(":")
        name = name.strip().replace("{task}", task)
        reward_info(name)  # unknown names fail here with the list of known ones
        try:
            weights.append(float(weight) if weight else 1.0)
        except ValueError:
            raise ValueError(f"bad weight {weight!r} for {name} in reward set {spec!r}: write name:1.0") from None
        names.append(name)
    return names, weights


def load_problems(path: Path | None, n: int, seed: int, task: str = "gsm8k") -> list[dict]:
    """A seeded sample of ``n`` problems from a GSM8K- or MATH-style JSONL file, or (``path`` None) from the hub."""
    if path is None:
        rows = list(load_rows(get_task(BENCHMARKS[task]), flag=f"--data {task}=PATH"))
        path = get_task(BENCHMARKS[task]).hub_id
    else:
        rows = read_jsonl(path, "pass --data TASK=PATH with a GSM8K- or MATH-style .jsonl file")
    problems = []
    for row in rows:
        question = row.get("question", row.get("problem"))
        gold = row.get("answer")
        if question is None or gold is None:
            continue
        gold = str(gold)
        problems.append({"question": question, "answer": gsm8k_gold(gold) if "####" in gold else gold})
    if not problems:
        raise ValueError(f"{path} has no rows with 'question' (or 'problem') and 'answer' fields")
    return random.Random(seed).sample(problems, min(n, len(problems)))


def probe_matrix(
    sets: dict[str, str], data: dict[str, Path | None], n: int, seed: int, reward_model=None, rm_instruction: str = ""
) -> dict:
    """``{task: {set_name: {"rewards", "weights", "scores"}}}``, plus a ``reward_model`` column when one is given."""
    matrix = {}
    problems_of = {task: load_problems(path, n, seed, task) for task, path in data.items()}  # all data, then work
    for task, problems in problems_of.items():
        matrix[task] = {}
        if reward_model is not None:
            matrix[task]["reward_model"] = {
                "rewards": ["reward_model"],
                "weights": [1.0],
                "n_problems": len(problems),
                "scores": reward_model_scores(reward_model, task, problems, rm_instruction),
            }
        for set_name, spec in sets.items():
            names, weights = parse_reward_set(spec, task)
            scores = probe_scores(names, weights, task, problems)
            matrix[task][set_name] = {
                "rewards": names,
                "weights": weights,
                "n_problems": len(problems),
                "scores": scores,
            }
    return matrix


def reward_model_scores(reward_model, task: str, problems: list[dict], instruction: str = "") -> dict[str, dict]:
    """``probe_scores`` for a learned reward model: ``score`` normalised (genuine correct 1, genuine wrong 0), ``raw``
    the mean; violations are judged on the raw means. ``instruction`` follows each question after a blank line.
    """
    if not isinstance(reward_model, RewardModelReward):
        reward_model = RewardModelReward(reward_model)
    texts = [problem_text(p, task) for p in problems]
    names = list(REFERENCES) + list(PROBES)
    completions = [REFERENCES[n](t) if n in REFERENCES else PROBES[n][1](t) for n in names for t in texts]
    prompt = [[{"role": "user", "content": f"{t.question.strip()}\n\n{instruction}".strip()}] for t in texts]
    raw, _ = reward_model.score(prompt * len(names), completions)
    n = len(texts)
    means = {name: sum(raw[i * n : (i + 1) * n]) / n for i, name in enumerate(names)}
    correct, wrong = means["genuine_correct"], means["genuine_wrong"]
    spread = correct - wrong
    result = {}
    for name in names:
        kind, _, description = PROBES[name] if name in PROBES else (REFERENCE, None, f"a worked {name[8:]} answer")
        score = means[name]
        if kind == WRONG_ANSWER:
            violation = score >= correct - TOLERANCE or score > wrong + TOLERANCE
        else:
            violation = kind == GOLD_UNCOMMITTED and score >= correct - TOLERANCE
        result[name] = {
            "kind": kind,
            "score": (score - wrong) / spread if abs(spread) > TOLERANCE else float("nan"),
            "raw": score,
            "rule": RULES[kind],
            "violation": violation,
            "description": description,
        }
    return result


def format_matrix(matrix: dict) -> str:
    """The matrix as text: one table per task, ``!`` after a score that breaks its probe's rule."""
    lines = []
    for task, sets in matrix.items():
        set_names = list(sets)
        n = next(iter(sets.values()))["n_problems"]
        width = max(12, *(len(s) for s in set_names))
        lines.append(f"\n{task} ({n} problems; ! = breaks the rule of its kind)")
        for set_name, entry in sets.items():
            terms = " + ".join(f"{w:g}*{r}" for r, w in zip(entry["rewards"], entry["weights"], strict=True))
            lines.append(f"  {set_name}: {terms}")
        lines.append(f"{'probe':32s} {'kind':16s} " + " ".join(f"{s:>{width}s}" for s in set_names))
        for probe in list(REFERENCES) + list(PROBES):
            kind = sets[set_names[0]]["scores"][probe]["kind"]
            cells = []
            for s in set_names:
                cell = sets[s]["scores"][probe]
                cells.append(f"{cell['score']:.3f}{'!' if cell['violation'] else ' '}".rjust(width))
            lines.append(f"{probe:32s} {kind:16s} " + " ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.probe_matrix", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rewards", action="append", help="a reward set name[:weight],...; repeat for several")
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        help="TASK=PATH (.jsonl), TASK in gsm8k, math; repeat for both (default: both from the hub)",
    )
    parser.add_argument("--n", type=int, default=50, help="problems sampled per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the matrix as JSON")
    parser.add_argument("--reward-model", help="a reward model folder (recipes.reward_model): adds its column")
    parser.add_argument("--rm-instruction", default="", help="appended to each question in the reward model's prompt")
    args = parser.parse_args(argv)

    data: dict[str, Path | None] = dict.fromkeys(BENCHMARKS)
    for item in args.data:
        task, sep, path = item.partition("=")
        if not sep or task not in BENCHMARKS:
            parser.error(f"--data {item!r}: write gsm8k=PATH or math=PATH")
        data[task] = Path(path)
    if args.data:
        data = {t: p for t, p in data.items() if any(d.startswith(f"{t}=") for d in args.data)}
    if args.n < 1:
        parser.error("--n must be at least 1")
    sets = {spec: spec for spec in args.rewards} if args.rewards else dict(DEFAULT_SETS)
    try:
        for spec in sets.values():  # names and weights first: a typo fails before any data loads
            for task in data:
                parse_reward_set(spec, task)
        if args.reward_model:
            check_reward_model(args.reward_model)
        matrix = probe_matrix(sets, data, args.n, args.seed, args.reward_model, args.rm_instruction)
    except (ValueError, TypeError, FileNotFoundError) as e:  # bad input: one line, no usage block
        parser.exit(2, f"error: {e}\n")
    print(json.dumps(matrix, indent=1) if args.json else format_matrix(matrix))
    clean = [s for s in CLEAN_SETS if s in sets]
    broken = [
        (task, s, probe)
        for task in matrix
        for s in clean
        for probe, cell in matrix[task][s]["scores"].items()
        if cell["violation"]
    ]
    for task, s, probe in broken:
        print(f"VIOLATION in the default set {s!r} ({task}): probe {probe}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
