"""Verified rollouts: K sampled answers per problem, each scored by the checker eval and the rewards use.

Three commands take a model to GRPO data at the edge of its ability and to DPO pairs (docs/dpo.md)::

    python -m eval.rollouts sample --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k_train --k 8 \\
        --out runs/rollouts/gsm8k_train.jsonl
    python -m eval.rollouts filter runs/rollouts/gsm8k_train.jsonl --low 0.2 --high 0.8 --group-size 8 \\
        --out runs/rollouts/gsm8k_train_edge.jsonl          # a training set the GRPO recipe reads
    python -m eval.rollouts pairs runs/rollouts/gsm8k_train.jsonl --max-pairs-per-problem 4 \\
        --length-tolerance 0.3 --out runs/rollouts/gsm8k_train_pairs.jsonl   # DPO pairs (the DPO recipe also
                                                                              # reads the rollouts file directly)

A rollouts file is JSON lines, one problem each: ``id`` (row index in the data), ``question``, ``answer`` (the
gold final answer), ``prompt`` (the chat messages of ``eval.tasks``), ``completions`` (each with ``text``,
``correct``, ``extracted``, ``reason``, ``n_tokens``, ``truncated``), ``n_correct``, ``pass_rate`` and the
``sampling`` settings. ``sample`` is resumable: killed at any point, the same command continues where it stopped
and samples each problem once.

A group of G answers teaches GRPO nothing when all G are right or all wrong; for a problem of pass rate p that
happens with probability p^G + (1-p)^G, so problems far from 50% mostly waste compute:

>>> round(degenerate_share([0.5, 0.0, 1.0], group_size=8), 4)
0.6693
>>> kept, report = filter_by_pass_rate([{"pass_rate": p} for p in (0.0, 0.25, 0.5, 1.0)], 0.2, 0.8, 8)
>>> [r["pass_rate"] for r in kept], report["dropped_too_hard"], report["dropped_too_easy"]
([0.25, 0.5], 1, 1)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

SAMPLING_KEYS = ("task", "data", "k", "temperature", "max_new_tokens", "seed")  # must match to resume a file


def degenerate_share(pass_rates: list[float], group_size: int) -> float | None:
    """Expected share of GRPO groups of ``group_size`` answers that are all right or all wrong (no signal).

    >>> degenerate_share([0.5], 2), degenerate_share([], 8)
    (0.5, None)
    """
    if group_size < 1:
        raise ValueError(f"group_size={group_size}: use the GRPO recipe's num_generations (a positive number)")
    if not pass_rates:
        return None
    return sum(p**group_size + (1 - p) ** group_size for p in pass_rates) / len(pass_rates)


def filter_by_pass_rate(
    records: list[dict], low: float = 0.2, high: float = 0.8, group_size: int = 8
) -> tuple[list[dict], dict]:
    """Keep problems whose pass rate lies in ``[low, high]`` (both ends included); report what filtering changed.

    Returns ``(kept, report)``: the report gives problem counts, how many were dropped as too easy (pass rate
    above ``high``) and too hard (below ``low``), and the expected degenerate-group share for ``group_size``
    before and after.
    """
    if not 0 <= low <= high <= 1:
        raise ValueError(
            f"pass-rate range [{low}, {high}] is not within [0, 1] with low <= high: e.g. --low 0.2 --high 0.8"
        )
    kept = [r for r in records if low <= r["pass_rate"] <= high]
    report = {
        "problems": len(records),
        "kept": len(kept),
        "dropped_too_easy": sum(r["pass_rate"] > high for r in records),
        "dropped_too_hard": sum(r["pass_rate"] < low for r in records),
        "range": [low, high],
        "group_size": group_size,
        "degenerate_share_before": degenerate_share([r["pass_rate"] for r in records], group_size),
        "degenerate_share_after": degenerate_share([r["pass_rate"] for r in kept], group_size),
    }
    return kept, report


def read_rollouts(path: str | Path) -> list[dict]:
    """The records of a rollouts file; a last line cut short by a kill is ignored (resume rewrites it)."""
    records = []
    with open(path) as f:
        lines = f.readlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if n == len(lines) - 1:
                logger.warning("%s: ignoring an unfinished last line (a killed run); it will be sampled again", path)
                break
            raise ValueError(
                f"{path} line {n + 1} is not JSON: is this a rollouts file from `eval.rollouts sample`?"
            ) from err
    if records and "completions" not in records[0]:
        raise ValueError(f"{path} has no 'completions' field: it is not a rollouts file from `eval.rollouts sample`")
    return records


def grpo_rows(records: list[dict], task_name: str) -> list[dict]:
    """Training rows the GRPO recipe reads: ``eval.tasks.to_prompt_rows`` columns plus the task's question field.

    >>> grpo_rows([{"id": 3, "question": "Q", "answer": "5", "prompt": [], "pass_rate": 0.5}], "math_train")[0]
    {'problem': 'Q', 'question': 'Q', 'answer': '5', 'prompt': [], 'id': 3, 'pass_rate': 0.5}
    """
    from eval.tasks import get_task

    question_field = get_task(task_name).question_field
    return [
        {
            question_field: r["question"],
            "question": r["question"],
            "answer": r["answer"],
            "prompt": r["prompt"],
            "id": r["id"],
            "pass_rate": r["pass_rate"],
        }
        for r in records
    ]


def write_jsonl(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def _resume_state(out: Path, settings: dict, questions: list[str]) -> set[int]:
    """Ids already sampled in ``out``; raises if the file was sampled with other settings or other data."""
    if not out.exists():
        return set()
    done = read_rollouts(out)
    if done and done[0]["sampling"] != settings:
        old = {k: done[0]["sampling"].get(k) for k in SAMPLING_KEYS}
        raise ValueError(
            f"{out} was sampled with {old}, not {settings}: rerun with the same settings to resume, or pass a new --out"
        )
    for record in done:
        if record["id"] >= len(questions) or record["question"] != questions[record["id"]]:
            raise ValueError(f"{out} holds problem {record['id']} from other data: pass a new --out for this data")
    write_jsonl(done, out)  # drops an unfinished last line
    return {r["id"] for r in done}


def sample_rollouts(
    model,
    tokenizer,
    task_name: str,
    out: str | Path,
    *,
    data: str | None = None,
    limit: int | None = None,
    k: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 512,
    batch_size: int = 32,
    seed: int = 0,
    backend: str = "hf",
) -> list[dict]:
    """Sample ``k`` answers to each problem of a task, score them, append one record per problem to ``out``.

    Problems go through in chunks of about ``batch_size`` answers; each finished chunk is flushed to disk, so a
    killed run loses at most one chunk, and rerunning the same call skips the problems already in ``out``.
    ``limit`` takes the first ``limit`` rows of the data. Returns all records of ``out``.
    """
    from eval.generate import generate
    from eval.scoring import score_completion
    from eval.tasks import get_task, load_rows, to_prompt_rows

    if k < 1 or (temperature == 0 and k > 1):
        raise ValueError(f"k={k}, temperature={temperature}: k must be >= 1, and k > 1 needs temperature > 0")
    task = get_task(task_name)
    rows = to_prompt_rows(task, load_rows(task, data))
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    out = Path(out)
    settings = {
        "task": task_name,
        "data": data,
        "k": k,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
    }
    done = _resume_state(out, settings, rows["question"])
    todo = [i for i in range(len(rows)) if i not in done]
    logger.info("%s: %d problems, %d already sampled, %d to go", out, len(rows), len(done), len(todo))
    problems_per_chunk = max(1, batch_size // k)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as f:
        for start in range(0, len(todo), problems_per_chunk):
            ids = todo[start : start + problems_per_chunk]
            chunk = [rows[i] for i in ids]
            generations = generate(
                model,
                tokenizer,
                [row["prompt"] for row in chunk],
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                num_samples=k,
                batch_size=batch_size,
                seed=seed + ids[0],  # the same problem gets the same seed on a resumed run
                backend=backend,
            )
            for i, row, answers in zip(ids, chunk, generations, strict=True):
                completions = []
                for g in answers:
                    score = score_completion(g.text, row["answer"], task_name)
                    completions.append(
                        {
                            "text": g.text,
                            "correct": score["correct"],
                            "extracted": score["extracted"],
                            "reason": score["reason"],
                            "n_tokens": g.n_tokens,
                            "truncated": g.truncated,
                        }
                    )
                n_correct = sum(c["correct"] for c in completions)
                record = {
                    "id": i,
                    "question": row["question"],
                    "answer": row["answer"],
                    "prompt": row["prompt"],
                    "completions": completions,
                    "n_correct": n_correct,
                    "pass_rate": n_correct / len(completions),
                    "sampling": settings,
                }
                f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
            logger.info("%s: %d / %d problems sampled", out, len(done) + start + len(ids), len(rows))
    return read_rollouts(out)


def _print_report(title: str, report: dict) -> None:
    print(f"{title}:")
    for key, value in report.items():
        print(f"  {key}: {round(value, 4) if isinstance(value, float) else value}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    sample = commands.add_parser("sample", help="sample and score K answers per problem")
    sample.add_argument("--model", required=True, help="hub id or local folder of a causal LM")
    sample.add_argument("--task", default="gsm8k_train", help="a task of eval.tasks (gsm8k_train, math_train, ...)")
    sample.add_argument("--data", default=None, help="local .jsonl or hub id (default: the task's hub data)")
    sample.add_argument("--limit", type=int, default=None, help="only the first N problems")
    sample.add_argument("--k", type=int, default=8, help="answers per problem (more: finer pass rates)")
    sample.add_argument("--temperature", type=float, default=1.0, help="sample as the GRPO recipe will")
    sample.add_argument("--max-new-tokens", type=int, default=512)
    sample.add_argument("--batch-size", type=int, default=32, help="answers generated at once")
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    sample.add_argument("--dtype", default="auto", help="torch dtype to load the model in (auto, bfloat16, ...)")
    sample.add_argument("--out", required=True)

    filt = commands.add_parser("filter", help="keep problems at the edge of ability; write GRPO training rows")
    filt.add_argument("rollouts")
    filt.add_argument("--low", type=float, default=0.2, help="drop problems solved less often (too hard)")
    filt.add_argument("--high", type=float, default=0.8, help="drop problems solved more often (too easy)")
    filt.add_argument("--group-size", type=int, default=8, help="the GRPO recipe's num_generations")
    filt.add_argument("--out", required=True)

    pairs = commands.add_parser("pairs", help="DPO pairs: a correct (chosen) and a wrong (rejected) answer")
    pairs.add_argument("rollouts")
    pairs.add_argument("--max-pairs-per-problem", type=int, default=4, help="0: no cap")
    pairs.add_argument("--length-tolerance", type=float, default=None, help="max |a-b|/max(a,b) of token lengths")
    pairs.add_argument("--seed", type=int, default=0)
    pairs.add_argument("--out", required=True)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "sample":
        from eval.tasks import get_task

        get_task(args.task)  # a bad task name fails before the model loads
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=args.dtype)
        model.to("cuda" if _cuda() else "cpu").eval()
        records = sample_rollouts(
            model,
            tokenizer,
            args.task,
            args.out,
            data=args.data,
            limit=args.limit,
            k=args.k,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            seed=args.seed,
            backend=args.backend,
        )
        rates = [r["pass_rate"] for r in records]
        print(f"{args.out}: {len(records)} problems, mean pass rate {sum(rates) / max(len(rates), 1):.3f}")
    elif args.command == "filter":
        records = read_rollouts(args.rollouts)
        kept, report = filter_by_pass_rate(records, args.low, args.high, args.group_size)
        write_jsonl(grpo_rows(kept, records[0]["sampling"]["task"]) if records else [], args.out)
        _print_report(f"pass-rate filter -> {args.out}", report)
    else:
        from eval.pairs import build_pairs

        cap = args.max_pairs_per_problem or None
        built, report = build_pairs(read_rollouts(args.rollouts), cap, args.length_tolerance, args.seed)
        write_jsonl(built, args.out)
        _print_report(f"pairs -> {args.out}", report)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
