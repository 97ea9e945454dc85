"""How fast eval is: `eval score` on the reference solutions, and batched vs one-at-a-time HF generation.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.eval_speed            # both measures, ~1 minute on 2 cores
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.eval_speed --skip-generation
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.eval_speed --data data  # the files of `make data`

1. ``python -m eval score`` in a fresh process (imports included) on the 1,819 GSM8K and MATH-500 reference
   solutions of ``--data DIR`` (default ``tests/data``), each against its own gold; target: under 10 s.
2. HF ``generate`` on the tiny local model (or ``--model DIR``) with the same prompts at each of ``--batch-sizes``:
   tokens per second and the ratio to the first size (the ratio is what to compare; absolute numbers follow load).
3. With ``--samples K`` (default 8; 0 skips), K sampled answers to each prompt (pass@k's sampling, temperature 1),
   each prompt read once and its cache copied K times (``eval.generate.generate_batch``) against K copies of the
   prompt read (``num_return_sequences``), in turn on the same prompts, ``--rounds`` times each: the ratio of times.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.eval_speed --skip-scoring --model runs/real_model/model --task lab \\
        --prompts runs/real_lab/data/test.jsonl --n-prompts 32 --max-new-tokens 32 --batch-sizes 16 --samples 64

4. With ``--adapter DIR`` (a LoRA run on ``--model``), greedy answers with the adapter beside the float32 weights
   (peft's side layers) and merged into them (what ``eval run`` reads an adapter with in float32), in turn on the same
   prompts, ``--rounds`` times each: the ratio of times and the share of answers that are the same text.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.eval_speed --skip-scoring --model runs/real_lab/sft/sft_smollm2/seed0 \\
        --task lab --prompts runs/real_lab/data/test.jsonl --n-prompts 128 --max-new-tokens 32 --batch-sizes 16 \\
        --samples 0 --adapter runs/real_lab/early/grpo/grpo_real_default/seed0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eval.__main__ import check_adapter, load_model
from eval.generate import generate
from eval.report import table
from eval.run import load_problems
from eval.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"  # GSM8K test and MATH-500, whole (tests/data/README.md)
REFERENCE_SETS = [  # task, file, field holding the reference solution
    ("gsm8k", "gsm8k/test.jsonl", "answer"),
    ("math500", "math500/test.jsonl", "solution"),
]


def time_scoring(data_dir: Path) -> list[dict]:
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for task, path, field in REFERENCE_SETS:
        with tempfile.TemporaryDirectory() as out:
            command = [sys.executable, "-m", "eval", "score", "--task", task, "--predictions", str(data_dir / path)]
            command += ["--completion-field", field, "--out", out]
            start = time.perf_counter()
            subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
            seconds = time.perf_counter() - start
            results = json.loads((Path(out) / "results.json").read_text())
        rows.append({"task": task, "n": results["n"], "accuracy": results["accuracy"], "seconds": seconds})
    return rows


def time_generation(
    data_dir: Path,
    n_prompts: int,
    max_new_tokens: int,
    batch_sizes: list[int],
    model_dir: str | None = None,
    task: str = "gsm8k",
    prompts_file: str | None = None,
) -> list[dict]:
    import torch  # torch, transformers: ~3 s that --help and --skip-generation do not pay

    task_obj = get_task(task)
    path = prompts_file or str(data_dir / "gsm8k/test.jsonl")
    prompts = [p["prompt"] for p in load_problems(task_obj, path, n_prompts)]
    if model_dir is None:
        from recipes.tiny_model import build_model, build_tokenizer  # as torch

        tokenizer = build_tokenizer()
        model = build_model(tokenizer)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generate(model, tokenizer, prompts[:2], max_new_tokens=4)  # warm-up
    rows = []
    for size in batch_sizes:
        start = time.perf_counter()
        gens = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=size)
        seconds = time.perf_counter() - start
        tokens = sum(g.n_tokens for [g] in gens)
        rows.append({"batch_size": size, "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds})
    rows.append({"threads": torch.get_num_threads(), "model": model, "tokenizer": tokenizer, "prompts": prompts})
    return rows


def time_sampling(model, tokenizer, prompts, k: int, max_new_tokens: int, batch_size: int, rounds: int) -> dict:
    """Seconds of K sampled answers to each prompt, prompts shared and not, alternating ``rounds`` times each."""
    seconds = {True: 0.0, False: 0.0}
    for _ in range(rounds):
        for share in (False, True):
            start = time.perf_counter()
            generate(
                model,
                tokenizer,
                prompts,
                max_new_tokens=max_new_tokens,
                temperature=1.0,
                num_samples=k,
                batch_size=batch_size,
                share_prompts=share,
            )
            seconds[share] += time.perf_counter() - start
    return {"shared": seconds[True], "each": seconds[False]}


def time_adapter(model_dir: str, adapter: str, prompts, max_new_tokens: int, batch_size: int, rounds: int) -> dict:
    """Seconds of greedy answers with ``adapter`` beside the float32 weights and merged into them, in turn, and how
    many answers of the two are the same text."""
    import torch  # as in time_generation
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged, tokenizer = load_model(model_dir, adapter, "float32", "hf")  # as eval run reads it
    beside = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), adapter)
    models = {"beside": beside.eval(), "merged": merged.eval()}
    seconds, answers = dict.fromkeys(models, 0.0), {}
    for _ in range(rounds):
        for name, model in models.items():
            start = time.perf_counter()
            gens = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
            seconds[name] += time.perf_counter() - start
            answers[name] = [g.text for [g] in gens]
    same = sum(a == b for a, b in zip(answers["beside"], answers["merged"], strict=True))
    return {**seconds, "same": same, "n": len(prompts)}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.eval_speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, default=DATA, help="folder laid out as tests/data (default: tests/data, the whole sets)"
    )
    parser.add_argument("--n-prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--batch-sizes", default="1,16", help="prompts per generate call, timed in turn on the same prompts, e.g. 16,64"
    )
    parser.add_argument("--model", default=None, help="a local model folder to generate with (default: the tiny model)")
    parser.add_argument("--task", default="gsm8k", help="the task whose prompts are timed (eval.tasks), e.g. lab")
    parser.add_argument("--prompts", default=None, help="a .jsonl of the task's problems (default: GSM8K test)")
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--skip-scoring", action="store_true")
    parser.add_argument("--samples", type=int, default=8, help="K sampled answers a prompt, shared or not (0: skip)")
    parser.add_argument("--rounds", type=int, default=1, help="times each sampling path is timed, in turn")
    parser.add_argument("--adapter", default=None, help="a LoRA run on --model: its reading beside and merged, timed")
    parser.add_argument("--ignore-adapter-base", action="store_true", help="--adapter's base is --model renamed")
    args = parser.parse_args()
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    except ValueError:
        batch_sizes = []
    if not batch_sizes or min(batch_sizes) < 1:
        parser.exit(2, f"error: --batch-sizes {args.batch_sizes!r}: give whole numbers >= 1, e.g. 16,64\n")
    missing = [path for _, path, _ in REFERENCE_SETS if not (args.data / path).exists()]
    if missing:
        parser.exit(2, f"error: --data {args.data} has no {missing}: pass a folder laid out as tests/data\n")

    if args.samples < 0 or args.rounds < 1:
        parser.exit(2, "error: --samples must be >= 0 and --rounds >= 1\n")
    if args.adapter:
        if not args.model:
            parser.exit(2, f"error: --adapter {args.adapter}: pass the model it was trained on as --model\n")
        try:
            check_adapter(args.adapter, args.model, args.ignore_adapter_base)  # eval run's: a LoRA run on --model
        except (FileNotFoundError, ValueError) as err:
            parser.exit(2, f"error: {err}\n")
    started = time.time()
    if not args.skip_scoring:
        scoring = time_scoring(args.data)
        total_n, total_s = sum(r["n"] for r in scoring), sum(r["seconds"] for r in scoring)
        print("## eval score on reference solutions (fresh process each, imports included)\n")
        rows = [
            [r["task"], r["n"], f"{100 * r['accuracy']:.1f}%", f"{r['seconds']:.2f}", f"{r['n'] / r['seconds']:.0f}"]
            for r in scoring
        ]
        rows.append(["total", total_n, "", f"{total_s:.2f}", f"{total_n / total_s:.0f}"])
        print(table(["task", "solutions", "accuracy", "seconds", "samples/s"], rows))
        print(f"\ntarget: {total_n} solutions in < 10 s: {'met' if total_s < 10 else 'NOT met'}\n")

    if not args.skip_generation:
        *gen, info = time_generation(
            args.data, args.n_prompts, args.max_new_tokens, batch_sizes, args.model, args.task, args.prompts
        )
        model = args.model or "the tiny model"
        print(
            f"## HF generate on {model}: {args.n_prompts} {args.task} prompts, at most {args.max_new_tokens} new "
            f"tokens each, greedy, {info['threads']} torch thread(s)\n"
        )
        rows = [[r["batch_size"], f"{r['seconds']:.2f}", r["tokens"], f"{r['tokens_per_s']:.0f}"] for r in gen]
        print(table(["batch size", "seconds", "tokens", "tokens/s"], rows))
        for r in gen[1:]:
            ratio = r["tokens_per_s"] / gen[0]["tokens_per_s"]
            print(f"\nbatch {r['batch_size']} / batch {gen[0]['batch_size']} throughput: {ratio:.1f}x")
        if args.samples > 1:
            size, k = batch_sizes[0], args.samples
            timed = time_sampling(
                info["model"], info["tokenizer"], info["prompts"], k, args.max_new_tokens, size, args.rounds
            )
            print(f"\n## {k} sampled answers to each prompt (temperature 1, {size} prompts a batch, in turn)\n")
            rows = [["read once, its cache copied", f"{timed['shared']:.1f}"], ["read K times", f"{timed['each']:.1f}"]]
            print(table(["each prompt", f"seconds ({args.rounds} round(s))"], rows))
            print(f"\nread K times / read once: {timed['each'] / timed['shared']:.2f}x")
        if args.adapter:
            size = batch_sizes[0]
            timed = time_adapter(args.model, args.adapter, info["prompts"], args.max_new_tokens, size, args.rounds)
            print(f"\n## greedy with the LoRA adapter {args.adapter} ({size} prompts a batch, in turn)\n")
            rows = [[name, f"{timed[name]:.1f}"] for name in ("beside", "merged")]
            print(table(["adapter", f"seconds ({args.rounds} round(s))"], rows))
            print(
                f"\nbeside / merged: {timed['beside'] / timed['merged']:.2f}x; same answer {timed['same']}/{timed['n']}"
            )
    load, when = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M")
    print(f"\n{time.time() - started:.0f} s in all; load average at the end {load[0]:.1f}; {when}")


if __name__ == "__main__":
    main()
