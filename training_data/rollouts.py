"""Verified rollouts: K sampled answers per problem, each scored by the checker eval and the rewards use.

Three commands take a model to GRPO data at the edge of its ability and to a DPO run (docs/dpo.md)::

    python -m training_data.rollouts sample --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k_train --k 8 \\
        --out runs/rollouts/gsm8k_train
    python -m training_data.rollouts filter runs/rollouts/gsm8k_train --low 0.2 --high 0.8 --group-size 8 \\
        --out runs/rollouts/gsm8k_train_edge.jsonl     # a training set the GRPO recipe reads as its data
    python -m recipes.dpo --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/dpo_lora.yaml \\
        --data runs/rollouts/gsm8k_train/rollouts.jsonl     # pairs built from the rollouts

``python -m training_data.rollouts pairs ROLLOUTS --out pairs.jsonl`` writes the DPO pairs to a file to inspect or
share.

``sample`` runs eval with K samples per problem (a killed run continues where it stopped) and writes
``rollouts.jsonl``, one problem a line with its scored ``completions`` and ``pass_rate``. A group of G answers teaches
GRPO nothing when all are right or all wrong (probability p^G + (1-p)^G at pass rate p), so ``filter`` keeps the
problems within a pass-rate range.
"""

from __future__ import annotations

import argparse
import logging
from decimal import Decimal
from pathlib import Path

from eval import __main__ as eval_cli
from eval.degenerate import expected_degenerate_share
from eval.fingerprint import source_fingerprint
from eval.folder import SAMPLES_FILE, FolderBusyError, lock_output_folder, read_samples
from eval.generate import check_backend
from eval.jsonl import iter_jsonl, write_jsonl
from eval.metrics import sample_list
from eval.run import evaluate, load_problems
from eval.scoring import score_completion
from eval.sources import check_model_source
from eval.tasks import get_task, load_rows

logger = logging.getLogger(__name__)

ROLLOUTS_FILE = "rollouts.jsonl"


def filter_by_pass_rate(
    records: list[dict], low: float = 0.2, high: float = 0.8, group_size: int = 8
) -> tuple[list[dict], dict]:
    """Keep problems whose pass rate lies in ``[low, high]``; the report gives the drops and the expected share of
    degenerate groups of ``group_size`` before and after.

    >>> round(expected_degenerate_share([0.5, 0.0, 1.0], group_size=8), 4)  # eval.degenerate, as the monitors use it
    0.6693
    >>> kept, report = filter_by_pass_rate([{"pass_rate": p} for p in (0.0, 0.25, 0.5, 1.0)], 0.2, 0.8, 8)
    >>> [r["pass_rate"] for r in kept], report["dropped_too_hard"], report["dropped_too_easy"]
    ([0.25, 0.5], 1, 1)
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
        "degenerate_share_before": expected_degenerate_share([r["pass_rate"] for r in records], group_size),
        "degenerate_share_after": expected_degenerate_share([r["pass_rate"] for r in kept], group_size),
    }
    return kept, report


def read_rollouts(path: str | Path) -> list[dict]:
    """The records of a rollouts file (or of ``rollouts.jsonl`` in a folder written by `sample_rollouts`)."""
    path = Path(path)
    if path.is_dir():
        path = path / ROLLOUTS_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"rollouts file {path} does not exist: write it with `python -m training_data.rollouts sample`"
        )
    records = []
    for n, record in iter_jsonl(path, "rerun `python -m training_data.rollouts sample`"):
        if "completions" not in record or "pass_rate" not in record:
            raise ValueError(
                f"{path} line {n} has no completions/pass_rate: not a file from `training_data.rollouts sample`"
            )
        records.append(record)
    return records


def grpo_rows(records: list[dict], task_name: str) -> list[dict]:
    """Training rows the GRPO recipe reads: ``eval.tasks.to_prompt_rows`` columns plus the task's question field.

    >>> grpo_rows([{"id": 3, "question": "Q", "answer": "5", "prompt": [], "pass_rate": 0.5}], "math_train")[0]
    {'problem': 'Q', 'question': 'Q', 'answer': '5', 'prompt': [], 'id': 3, 'pass_rate': 0.5}
    """
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


def rollout_records(samples: list[dict], task_name: str) -> list[dict]:
    """Rollout records from ``samples.jsonl`` records (``eval.samples``; K > 1 keeps ``samples``; K = 1 is flat).

    >>> sample = {"completion": "#### 5", "correct": True, "extracted": "5", "reason": "ok", "n_tokens": 4,
    ...           "truncated": False}
    >>> [r] = rollout_records([{"index": 0, "id": 0, "question": "2+3?", "gold": "5", **sample}], "gsm8k")
    >>> r["completions"][0]["text"], r["pass_rate"], r["prompt"][0]["content"].startswith("2+3?")
    ('#### 5', 1.0, True)
    """
    task = get_task(task_name)
    records = []
    for sample in samples:
        completions = [
            {
                "text": s["completion"],
                "correct": bool(s["correct"]),
                "extracted": s["extracted"],
                "reason": s["reason"],
                "n_tokens": s["n_tokens"],
                "truncated": s["truncated"],
            }
            for s in sample_list(sample)
        ]
        n_correct = sum(c["correct"] for c in completions)
        records.append(
            {
                "id": sample["id"],
                "index": sample["index"],
                "task": task.name,
                "question": sample["question"],
                "answer": sample["gold"],
                "prompt": task.prompt(sample["question"]),  # the prompt eval and the recipes build
                "completions": completions,
                "n_correct": n_correct,
                "pass_rate": n_correct / len(completions),
            }
        )
    return records


def check_k(k: int, temperature: float) -> None:
    """K answers per problem need K >= 1, and K > 1 needs sampling (greedy gives K copies of one answer)."""
    if k < 1 or (temperature == 0 and k > 1):
        raise ValueError(f"k={k}, temperature={temperature}: k must be >= 1, and k > 1 needs temperature > 0")


def sample_rollouts(
    model,
    tokenizer,
    task_name: str,
    out_dir: str | Path,
    *,
    data: str | None = None,
    limit: int | None = None,
    k: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 512,
    batch_size: int = 32,
    seed: int = 0,
    backend: str = "hf",
    run_info: dict | None = None,
) -> list[dict]:
    """Sample and score ``k`` answers to each problem of a task (eval's run, resumable) and write
    ``out_dir/rollouts.jsonl``. ``batch_size`` counts answers, not problems."""
    check_k(k, temperature)
    with lock_output_folder(out_dir) as out:  # eval's lock, held until rollouts.jsonl is written too
        results = evaluate(
            model,
            tokenizer,
            task_name,
            data=data,
            limit=limit,
            seed=seed,
            max_new_tokens=max_new_tokens,
            batch_size=max(1, batch_size // k),
            out_dir=out,
            num_samples=k,
            temperature=temperature,
            backend=backend,
            run_info=run_info,
            progress=False,
        )
        samples = read_samples(out / SAMPLES_FILE)
        records = rollout_records([samples[i] for i in range(results["n"])], task_name)
        write_jsonl(records, out / ROLLOUTS_FILE)
    return records


def reference_rollouts(task_name: str, data: str | None = None, limit: int | None = None, tokenizer=None) -> list[dict]:
    """Rollouts made of the data set's own worked solutions, for checking the DPO mechanics on any model: each problem's
    reference solution and the same with the final answer + 1, both scored by the checker. GSM8K-style tasks only.

    >>> [r] = reference_rollouts("gsm8k", "tests/data/gsm8k/test.jsonl", limit=1)
    >>> [c["text"][-8:] for c in r["completions"]], [c["correct"] for c in r["completions"]], r["pass_rate"]
    (['\\n#### 18', '\\n#### 19'], [True, False], 0.5)
    """
    task = get_task(task_name)
    if task.answer_style != "gsm8k":
        raise ValueError(f"reference rollouts need a GSM8K-style task (#### N solutions), not {task_name!r}")
    rows = load_rows(task, data)
    rows = rows.select(range(min(limit, len(rows)))) if limit else rows
    records = []
    for index, row in enumerate(rows):
        solution, gold = row[task.gold_field], task.gold(row)
        wrong = solution[: solution.rindex("####")] + f"#### {Decimal(gold) + 1}"
        completions = []
        for text in (solution, wrong):
            score = score_completion(text, gold, task_name)
            n = len(tokenizer(text, add_special_tokens=False)["input_ids"]) if tokenizer else len(text.split())
            completions.append(
                {
                    "text": text,
                    "correct": score["correct"],
                    "extracted": score["extracted"],
                    "reason": score["reason"],
                    "n_tokens": n,
                    "truncated": False,
                }
            )
        n_correct = sum(c["correct"] for c in completions)
        records.append(
            {
                "id": row.get("unique_id", index),
                "index": index,
                "task": task.name,
                "question": row[task.question_field],
                "answer": gold,
                "prompt": task.prompt(row[task.question_field]),
                "completions": completions,
                "n_correct": n_correct,
                "pass_rate": n_correct / len(completions),
            }
        )
    return records


def _print_report(title: str, report: dict) -> None:
    print(f"{title}:")
    for key, value in report.items():
        print(f"  {key}: {round(value, 4) if isinstance(value, float) else value}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m training_data.rollouts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    sample = commands.add_parser("sample", help="sample and score K answers per problem")
    sample.add_argument("--model", required=True, help="hub id or local folder of a causal LM")
    sample.add_argument("--adapter", default=None, help="a LoRA adapter folder to load on the model (hf backend only)")
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
    sample.add_argument("--out", required=True, help="folder for rollouts.jsonl and eval's files")

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

    reference = commands.add_parser("reference", help="rollouts from the data's own solutions (DPO sanity check)")
    reference.add_argument("--task", default="gsm8k_train", help="a GSM8K-style task of eval.tasks")
    reference.add_argument("--data", default=None, help="local .jsonl or hub id (default: the task's hub data)")
    reference.add_argument("--limit", type=int, default=None, help="only the first N problems")
    reference.add_argument("--tokenizer", default=None, help="count lengths in this tokenizer's tokens (else words)")
    reference.add_argument("--out", required=True, help="folder for rollouts.jsonl")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "sample":
        try:
            check_sample(args)
        except (ValueError, FileNotFoundError) as e:
            parser.exit(2, f"error: {e}\n")
        try:
            sample_command(args)
        except FolderBusyError as e:  # a second sampler into the same folder, refused before its model loads
            parser.exit(2, f"error: {e}\n")
        return
    try:  # filter, pairs and reference load no model: every error they raise is about their input
        run_without_model(args)
    except (ValueError, FileNotFoundError) as e:
        parser.exit(2, f"error: {e}\n")


def check_sample(args) -> None:
    """Everything ``sample`` can check before its model loads: backend, task, data, limit, k, model, adapter."""
    check_backend(args.backend, args.adapter)  # vllm + adapter would sample the base model: refused here
    check_k(args.k, args.temperature)
    load_problems(get_task(args.task), args.data, args.limit)
    check_model_source(args.model, "--model")  # a local folder, or a hub id in the cache or on a hub that answers
    if args.adapter:  # shapes and target modules against the model's config (sample has no flag to skip a name check)
        eval_cli.check_adapter(args.adapter, args.model, ignore_base_name=True)


def sample_command(args) -> None:
    run_info = {"model": args.model, "adapter": args.adapter}
    run_info["model_fingerprint"] = source_fingerprint(args.model, args.adapter)  # a vLLM model has no weights to read
    with lock_output_folder(args.out):
        model, tokenizer = eval_cli.load_model(args.model, args.adapter, args.dtype, args.backend)
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
            run_info=run_info,
        )
    rates = [r["pass_rate"] for r in records]
    print(f"{args.out}/{ROLLOUTS_FILE}: {len(records)} problems, mean pass rate {sum(rates) / len(rates):.3f}")


def run_without_model(args) -> None:
    """``filter``, ``pairs`` and ``reference``."""
    if args.command == "filter":
        records = read_rollouts(args.rollouts)
        kept, report = filter_by_pass_rate(records, args.low, args.high, args.group_size)
        _print_report(f"pass-rate filter -> {args.out}", report)
        if not kept:
            raise SystemExit(
                f"no problem has a pass rate in [{args.low}, {args.high}]: nothing written. Widen the "
                "range, or sample from a model nearer this data's level"
            )
        write_jsonl(grpo_rows(kept, records[0]["task"]), args.out)
    elif args.command == "reference":
        tokenizer = None
        if args.tokenizer:
            check_model_source(args.tokenizer, "--tokenizer", files=eval_cli.TOKENIZER_FILES)
            from transformers import AutoTokenizer  # seconds: paid with --tokenizer only

            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        records = reference_rollouts(args.task, args.data, args.limit, tokenizer)
        write_jsonl(records, Path(args.out) / ROLLOUTS_FILE)
        print(
            f"{Path(args.out) / ROLLOUTS_FILE}: {len(records)} problems, {sum(r['n_correct'] for r in records)} "
            f"reference solutions scored correct"
        )
    else:
        from training_data.pairs import build_pairs  # training_data.pairs imports this module

        cap = args.max_pairs_per_problem or None
        built, report = build_pairs(read_rollouts(args.rollouts), cap, args.length_tolerance, args.seed)
        write_jsonl(built, args.out)
        _print_report(f"pairs -> {args.out}", report)


if __name__ == "__main__":
    main()
