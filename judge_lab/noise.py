"""How noisy is a judge? Score one answer N times, and a set of answers twice, and count what changed.

    # a local judge server (docs/judge_lab.md), the lab's question, one answer 50 times and the default set twice
    python -m judge_lab.noise --judge_base_url http://127.0.0.1:8000/v1 --judge_model Qwen/Qwen2.5-1.5B-Instruct \\
        --n 50 --out runs/judge_noise
    # the answers a lab run produced, each scored twice
    python -m judge_lab.noise --judge_base_url ... --judge_model ... --answers_from_run runs/judge_lab_judge_b0

    # a local judge in log-probability mode (no server; rewards/judge.py): the expected score of each answer
    python -m judge_lab.noise --judge_backend hf --judge_model runs/real_model/model --judge_mode logprob --n 5

Writes ``judge_noise.json`` and ``judge_noise.md``: the distribution of the one answer's N scores, and how many of the
set changed score the second time. A judge at temperature 0 behind a batching server may still change; a local judge
in log-probability mode does not, and the report gives its distribution over the scores 0-10 instead.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from eval.jsonl import iter_jsonl, read_jsonl
from eval.report import table
from rewards.judge import judge_messages, make_judge_reward

LAB_QUESTION = "Priya buys four boxes of six muffins and gives away seven. How many muffins does she have left?"
DEFAULT_ANSWER = "Answer: 3."  # the short reply the lab's judge kept paying
DEFAULT_SET = [
    "Answer: 3.",
    "Answer: 17",
    "Priya buys 4 boxes of 6 muffins, so she has 4 x 6 = 24. She gives away 7, so 24 - 7 = 17 are left.\nAnswer: 17",
    "Priya buys 4 boxes of 6 muffins, so she has 4 + 6 = 10. She gives away 7, so 10 - 7 = 3 are left.\nAnswer: 3",
    "She has 24 muffins and gives away 7.\nAnswer: 31",
    "I am not sure.",
]


def repeat_summary(scores: list[float | None]) -> dict:
    """Distribution of repeated scores of one answer (``None`` = no score in the reply, or the request failed).

    >>> repeat_summary([8.0, 8.0, 9.0, None])
    {'n': 4, 'n_unscored': 1, 'distribution': {'8': 2, '9': 1}, 'mean': 8.333, 'min': 8.0, 'max': 9.0}
    """
    scored = [s for s in scores if s is not None]
    counts = Counter(f"{s:g}" for s in scored)
    return {
        "n": len(scores),
        "n_unscored": len(scores) - len(scored),
        "distribution": dict(sorted(counts.items(), key=lambda kv: float(kv[0]))),
        "mean": round(sum(scored) / len(scored), 3) if scored else None,
        "min": min(scored) if scored else None,
        "max": max(scored) if scored else None,
    }


def twice_summary(pairs: list[tuple[float | None, float | None]]) -> dict:
    """How many answers scored differently the second time (scored once counts), and the mean change of scored pairs.

    >>> twice_summary([(8.0, 8.0), (8.0, 2.0), (None, 5.0), (None, None)])
    {'n_answers': 4, 'n_changed': 2, 'n_unscored_pairs': 1, 'mean_abs_change': 3.0}
    """
    changed = [a != b for a, b in pairs if a is not None or b is not None]
    both = [abs(a - b) for a, b in pairs if a is not None and b is not None]
    return {
        "n_answers": len(pairs),
        "n_changed": sum(changed),
        "n_unscored_pairs": sum(a is None and b is None for a, b in pairs),
        "mean_abs_change": round(sum(both) / len(both), 3) if both else None,
    }


def answers_from_run(run_dir: str | Path, limit: int) -> list[str]:
    """Distinct answers of a judge-lab run's ``steps.jsonl``, in order of first appearance."""
    seen: dict[str, None] = {}
    hint = "pass the output_dir of a judge-lab run (python -m recipes.grpo)"
    for _, step in iter_jsonl(Path(run_dir) / "steps.jsonl", hint):
        for answer in step.get("answers", []):
            seen.setdefault(answer["text"], None)
    return list(seen)[:limit]


def probe(client, question: str, answer: str, n: int, answer_set: list[str]) -> dict:
    """Score ``answer`` ``n`` times and each of ``answer_set`` twice with ``client`` (a rewards.judge client)."""
    repeated_results = client.score_many([judge_messages(question, answer)] * n)
    repeated = [r.score for r in repeated_results]
    first_probs = [r.probs for r in repeated_results if r.probs is not None]
    conversations = [judge_messages(question, a) for a in answer_set]
    first = [r.score for r in client.score_many(conversations)]
    second = [r.score for r in client.score_many(conversations)]
    return {
        "question": question,
        "answer": answer,
        "repeat": repeat_summary(repeated),
        "repeat_scores": repeated,
        "twice": twice_summary(list(zip(first, second, strict=True))),
        "twice_scores": [
            {"answer": a, "first": f, "second": s} for a, f, s in zip(answer_set, first, second, strict=True)
        ],
        "score_probs": first_probs[0] if first_probs else None,  # log-probability mode: P(score = k), k = 0..10
        "judge": repr(client),
        "judge_stats": client.stats.as_dict(),
    }


def _fmt(score: float | None) -> str:
    """A score for the table: log-probability scores are expected values, shown to 4 significant digits."""
    return "None" if score is None else f"{score:.4g}"


def markdown(result: dict) -> str:
    rep, tw, probs = result["repeat"], result["twice"], result.get("score_probs")
    twice = [
        [f"`{row['answer'][:50].replace(chr(10), ' ').replace('|', '/')}`", _fmt(row["first"]), _fmt(row["second"])]
        for row in result["twice_scores"]
    ]
    lines = [
        "# Judge noise",
        "",
        f"Judge: `{result['judge']}`",
        "",
        f"## One answer scored {rep['n']} times",
        "",
        f"Answer: `{result['answer'][:80]}`",
        "",
        table(["score", "count"], [*rep["distribution"].items(), ["no score", rep["n_unscored"]]]),
        "",
        f"mean {rep['mean']}, min {_fmt(rep['min'])}, max {_fmt(rep['max'])}",
        "",
        *(
            [
                f"Score-token probabilities (mass {sum(probs):.3f}):",
                "",
                table([str(k) for k in range(len(probs))], [[f"{p:.3f}" for p in probs]]),
                "",
            ]
            if probs
            else []
        ),
        f"## {tw['n_answers']} answers scored twice",
        "",
        f"{tw['n_changed']} of {tw['n_answers']} changed score (mean absolute change {tw['mean_abs_change']}); "
        f"{tw['n_unscored_pairs']} got no score either time.",
        "",
        table(["answer", "first", "second"], twice),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m judge_lab.noise", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--judge_backend", default="openai", choices=["openai", "hf"])
    parser.add_argument("--judge_base_url", default=None, help="e.g. http://127.0.0.1:8000/v1 (openai backend)")
    parser.add_argument("--judge_model", required=True, help="model name on the endpoint, or a local path (hf)")
    parser.add_argument("--judge_api_key_env", default=None, help="NAME of the variable holding the key")
    parser.add_argument("--judge_temperature", type=float, default=0.0, help="the judge's sampling temperature")
    parser.add_argument("--judge_max_concurrency", type=int, default=8)
    parser.add_argument(
        "--judge_mode",
        default="text",
        choices=["text", "logprob"],
        help="parse a reply, or read the score tokens' probabilities (rewards/judge.py)",
    )
    parser.add_argument("--judge_logprob_score", default="expected", choices=["expected", "argmax"])
    parser.add_argument("--judge_min_score_mass", type=float, default=0.5, help="logprob mode: below it, no score")
    parser.add_argument("--question", default=LAB_QUESTION)
    parser.add_argument("--answer", default=DEFAULT_ANSWER, help="the answer scored --n times")
    parser.add_argument("--n", type=int, default=50, help="times the one answer is scored")
    parser.add_argument("--answers_file", default=None, help="JSON lines with an 'answer' field: the set scored twice")
    parser.add_argument("--answers_from_run", default=None, help="a judge-lab output_dir: its answers are the set")
    parser.add_argument("--max_answers", type=int, default=64, help="cap on the set's size")
    parser.add_argument("--out", default="runs/judge_noise", help="folder for judge_noise.json and judge_noise.md")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    if args.answers_file:
        path = Path(args.answers_file)
        if not path.exists():
            parser.error(f"--answers_file {path} does not exist")
        answer_set = [row["answer"] for row in read_jsonl(path, 'each line must be {"answer": "..."}')]
    elif args.answers_from_run:
        answer_set = answers_from_run(args.answers_from_run, args.max_answers)
    else:
        answer_set = DEFAULT_SET
    answer_set = answer_set[: args.max_answers]
    client_kwargs = (
        {"temperature": args.judge_temperature, "max_concurrency": args.judge_max_concurrency}
        if args.judge_backend == "openai"
        else {}
    )
    client_kwargs.update(
        mode=args.judge_mode, logprob_score=args.judge_logprob_score, min_score_mass=args.judge_min_score_mass
    )
    from recipes.grpo_setup import check_judge  # the recipes: ~6 s that --help and a refused flag do not pay

    try:  # bad judge settings, a server that does not answer, a judge model not there: here, before a judge loads
        reward = make_judge_reward(
            args.judge_backend, args.judge_model, args.judge_base_url, args.judge_api_key_env, **client_kwargs
        )
        check_judge(reward.client)
    except ValueError as error:
        parser.error(str(error))
    result = probe(reward.client, args.question, args.answer, args.n, answer_set)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "judge_noise.json").write_text(json.dumps(result, indent=1))
    (out / "judge_noise.md").write_text(markdown(result))
    rep, tw = result["repeat"], result["twice"]
    print(f"one answer x{rep['n']}: scores {rep['distribution']} ({rep['n_unscored']} unscored)")
    print(f"{tw['n_answers']} answers x2: {tw['n_changed']} changed; wrote {out / 'judge_noise.md'}")
    return result


if __name__ == "__main__":
    main()
