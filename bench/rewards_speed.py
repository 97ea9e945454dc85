"""How fast do the correctness rewards score realistic completions, next to bare math-verify on the same inputs?

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_speed            # or: make bench
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_speed --n 200 --threads 4
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_speed --data DIR   # with the Qwen2.5-Math samples

Inputs (from ``--data DIR``, a folder laid out as ``tests/data``; nothing generated): Qwen2.5-Math chain-of-thought
samples on MATH (``model_outputs/math_cot_100_qwen25math_samples.jsonl``, scored by ``math_correctness``), GPT-3
GSM8K solutions with their ``A: N`` line rewritten as ``#### N`` (scored by ``gsm8k_correctness``), plus a few
runaway completions (16 KB of repetition, a power tower, 2,000 boxes). The Qwen2.5-Math samples are not shipped
(tests/data/README.md says where the full files come from): without them (the default ``--data tests/data``) the
MATH completions are the MATH-500 reference solutions instead, and the first line of the output says so; those
numbers are not comparable with runs on the samples.
"Bare math-verify" is what many recipes do: ``verify(parse(gold), parse(whole completion))`` in the main thread
with math-verify's own (SIGALRM) timeouts, which is also why it cannot run in a thread pool. Every timed pass starts
cold: our result cache cleared, fresh math-verify workers (started before the clock), sympy's cache cleared.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eval.jsonl import read_jsonl
from rewards import get_reward
from rewards import verify as verify_module

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"  # the shipped subsets (tests/data/README.md)
QWEN_SAMPLES = "model_outputs/math_cot_100_qwen25math_samples.jsonl"  # not shipped: only in a full --data folder
GPT3_SOLUTIONS = "model_outputs/gsm8k_gpt3_example_solutions.jsonl"
MATH500 = "math500/test.jsonl"


def math_source(data: Path) -> str:
    """The file the MATH completions come from: the Qwen2.5-Math samples when ``data`` has them, else MATH-500."""
    return QWEN_SAMPLES if (data / QWEN_SAMPLES).exists() else MATH500


def realistic_completions(n: int, seed: int, data: Path = DATA) -> list[tuple[str, str, str]]:
    """``n`` (task, completion, gold) triples from real model outputs (MATH-500 reference solutions for MATH when
    the Qwen2.5-Math samples are not in ``data``), plus runaway ones, shuffled."""
    rng = random.Random(seed)
    if math_source(data) == QWEN_SAMPLES:
        math_rows = read_jsonl(data / QWEN_SAMPLES)
        math_items = [("math", code, row["answer"]) for row in math_rows for code in row["code"]]
    else:
        math_items = [("math", row["solution"], row["answer"]) for row in read_jsonl(data / MATH500)]
    gsm_rows = read_jsonl(data / GPT3_SOLUTIONS)
    gsm_items = []
    for row in gsm_rows:
        gold = row["ground_truth"].rsplit("A:", 1)[-1].strip()
        for key in ("6b_finetuning", "175b_verification"):
            gsm_items.append(("gsm8k", re.sub(r"\nA:\s*(\S+)\s*$", r"\n#### \1", row[key]["solution"]), gold))
    if n // 2 > len(math_items) or n - n // 2 > len(gsm_items):
        raise ValueError(
            f"--n {n} needs {n // 2} MATH and {n - n // 2} GSM8K completions; {data} has {len(math_items)} and "
            f"{len(gsm_items)}: lower --n"
        )
    items = rng.sample(math_items, n // 2) + rng.sample(gsm_items, n - n // 2)
    runaway = [
        ("math", "Let me recompute. " * 900 + "\\boxed{42}", "42"),  # 16 KB of repetition, then an answer
        ("math", "So the value is \\boxed{9^{9^{9^{9}}}}", "3"),  # a power tower
        ("math", "\\boxed{1}" * 2_000, "1"),  # 2,000 boxes
        ("gsm8k", "The answer is 5 " * 1_000 + "\n#### 5", "5"),  # 16 KB of repetition
    ]
    items += runaway
    rng.shuffle(items)
    return items


def ours(item) -> float:
    task, completion, gold = item
    return get_reward(f"{task}_correctness")([completion], answer=[gold])[0]


def bare_math_verify(item) -> bool:
    from math_verify import parse, verify

    _, completion, gold = item
    return bool(verify(parse(f"${gold}$"), parse(completion)))


def timed_pass(items, score, threads: int) -> tuple[float, float]:
    """(completions per second, slowest single completion in seconds)."""
    # Every pass starts cold: no cached results, fresh math-verify workers, an empty sympy cache here.
    from sympy.core.cache import clear_cache

    verify_module._CACHE.clear()
    verify_module._POOL.close()
    verify_module.warm_up()
    clear_cache()

    def one(item):
        start = time.perf_counter()
        score(item)
        return time.perf_counter() - start

    start = time.perf_counter()
    if threads == 1:
        durations = [one(item) for item in items]
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            durations = list(pool.map(one, items))
    return len(items) / (time.perf_counter() - start), max(durations)


def pathological_answer(rng: random.Random) -> str:
    """A completion whose answer no checker can compare in time, of one of the kinds a drifting policy writes: a power
    tower, a sum to 10^k, a factorial or binomial of a huge number, a huge exponent, runaway nesting, or a box that
    disagrees with an earlier one holding a tower. Each one is new (random numbers), so no cache or memo helps."""
    d = [rng.randint(3, 9) for _ in range(4)]
    kind = rng.randrange(7)
    if kind == 0:
        answer = f"{d[0]}^{{{d[1]}^{{{d[2]}^{{{d[3]}}}}}}}"
    elif kind == 1:
        answer = f"\\sum_{{k=1}}^{{10^{{{rng.randint(20, 100)}}}}} k^{{{d[0]}}}"
    elif kind == 2:
        answer = f"({d[0]}\\cdot 10^{{{rng.randint(6, 12)}}})!"
    elif kind == 3:
        answer = f"\\binom{{10^{{{rng.randint(8, 20)}}}}}{{{d[1]}}}"
    elif kind == 4:
        answer = f"{d[0]}^{{10^{{{rng.randint(8, 30)}}}}}"
    elif kind == 5:
        depth = rng.randint(8, 20)
        answer = "(" * depth + str(rng.randint(1, 999)) + ")" * depth
    else:
        tower = f"{d[0]}^{{{d[1]}^{{{d[2]}^{{{d[3]}}}}}}}"
        other = rng.randint(1, 99)
        return f"First \\boxed{{{tower}}}. Let me check that again, carefully this time. So \\boxed{{{other}}}."
    return f"Let me compute this step by step. Putting it together, the answer is \\boxed{{{answer}}}."


def _cold_start() -> None:
    """As every timed pass starts: no cached verdicts or pairs given up, fresh workers, an empty sympy cache here."""
    from sympy.core.cache import clear_cache

    verify_module._CACHE.clear()
    verify_module._GIVEN_UP.clear()
    verify_module._POOL.close()
    verify_module.warm_up()
    clear_cache()


def pathological_batches(n_batches: int, batch_size: int, seed: int, data: Path = DATA) -> None:
    """Batches of MATH completions with 0%, 5% and 20% of them pathological, scored by ``math_correctness`` one
    batch per call (as a trainer calls it): the time per batch against the ordinary batches."""
    rng = random.Random(seed)
    wanted = n_batches * batch_size  # the stored MATH samples hold 800: fewer batches when more are asked for
    math_items = [item for item in realistic_completions(min(2 * wanted, 1_600), seed, data) if item[0] == "math"]
    math_items = [item for item in math_items if len(item[1]) < 8_000][:wanted]
    reward = get_reward("math_correctness")
    print(f"\n{n_batches} batches of {batch_size} MATH completions (math_correctness, one call per batch)")
    print(f"{'pathological share':20s} {'s per batch':>12s} {'slowest batch':>14s} {'vs ordinary':>12s} timeouts")
    base = None
    for share in (0.0, 0.05, 0.2):
        items = list(math_items)
        for i in rng.sample(range(len(items)), round(share * len(items))):
            items[i] = ("math", pathological_answer(rng), items[i][2])
        _cold_start()
        before = verify_module.timeout_count()
        times = []
        for b in range(0, len(items), batch_size):
            batch = items[b : b + batch_size]
            start = time.perf_counter()
            reward([c for _, c, _ in batch], answer=[g for _, _, g in batch])
            times.append(time.perf_counter() - start)
        mean = sum(times) / len(times)
        base = base or mean
        timeouts = verify_module.timeout_count() - before
        print(f"{share:20.0%} {mean:12.3f} {max(times):14.3f} {mean / base:11.2f}x {timeouts:8d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400, help="realistic completions (runaway ones are added)")
    parser.add_argument("--threads", type=int, default=4, help="thread-pool size for the threaded pass")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--data",
        type=Path,
        default=DATA,
        help="folder laid out as tests/data (default: tests/data; full files: its README)",
    )
    parser.add_argument("--batches", type=int, default=10, help="batches per pathological share (0 skips that case)")
    parser.add_argument("--batch-size", type=int, default=64, help="completions per batch in that case")
    args = parser.parse_args()

    for needed in (MATH500 if math_source(args.data) == MATH500 else QWEN_SAMPLES, GPT3_SOLUTIONS):
        if not (args.data / needed).exists():
            parser.exit(2, f"error: {args.data / needed} does not exist: pass --data DIR laid out as tests/data\n")
    if math_source(args.data) == MATH500:
        print(
            f"MATH completions: MATH-500 reference solutions ({args.data / QWEN_SAMPLES} is not there: pass --data DIR "
            "with the full files to time the Qwen2.5-Math samples)"
        )
    try:
        items = realistic_completions(args.n, args.seed, args.data)
    except ValueError as e:
        parser.exit(2, f"error: {e}\n")
    start = time.perf_counter()
    verify_module.warm_up()
    startup = time.perf_counter() - start
    ordinary = [item for item in items if len(item[1]) < 8_000]
    print(f"{len(items)} completions ({len(items) - len(ordinary)} runaway); worker start-up {startup:.2f} s")
    print(f"{'scorer':42s} {'completions/s':>14s} {'slowest (s)':>12s}")
    results = {}
    for name, score, threads, subset in [
        ("bare math-verify, 1 thread, ordinary only", bare_math_verify, 1, ordinary),
        ("ours, 1 thread, ordinary only", ours, 1, ordinary),
        ("bare math-verify, 1 thread, all", bare_math_verify, 1, items),
        ("ours, 1 thread, all", ours, 1, items),
        (f"ours, {args.threads} threads, all", ours, args.threads, items),
    ]:
        rate, slowest = timed_pass(subset, score, threads)
        results[name] = rate
        print(f"{name:42s} {rate:14.0f} {slowest:12.3f}")
    print(
        f"ratio ours/bare, ordinary, 1 thread: "
        f"{results['ours, 1 thread, ordinary only'] / results['bare math-verify, 1 thread, ordinary only']:.1f}x; "
        f"all, 1 thread: {results['ours, 1 thread, all'] / results['bare math-verify, 1 thread, all']:.1f}x; "
        f"all, {args.threads} threads vs bare 1 thread: "
        f"{results[f'ours, {args.threads} threads, all'] / results['bare math-verify, 1 thread, all']:.1f}x"
    )
    print(f"ours, {args.threads} threads: {60 * results[f'ours, {args.threads} threads, all']:.0f} completions/minute")
    if args.batches:
        pathological_batches(args.batches, args.batch_size, args.seed, args.data)


if __name__ == "__main__":
    main()
