"""How long do hostile completions take through the five answer rewards, and does the load change any verdict?

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_fuzz                 # 10,000 completions of each set
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_fuzz --n 2000 --save /tmp/idle.json
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_fuzz --compare /tmp/idle.json   # e.g. beside a CPU hog
    # in another checkout, on the completions that run drew:
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_fuzz --items /tmp/idle.json --compare /tmp/idle.json

Two sets: the completions of ``tests/rewards/test_fuzz_rewards.py``, drawn with a fixed seed (another version of the
code draws others: ``--items`` scores a saved run's), and ``--shapes`` completions of the hostile shapes of
``tests/rewards/test_hostile_shapes.py`` at full length (4-16 KB): what a policy that repeats itself costs. Each
batch goes through the five rewards from a cold start; the clock covers only the scoring. Prints the time, seconds
per reward, comparisons given up as timeouts, the slowest batch and a digest of every score (same digest: same
verdicts). ``--compare`` lists the completions whose scores differ from a saved run (exit status 1 when any does).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rewards import get_reward, verify
from tests.rewards.test_fuzz_rewards import GOLDS, hostile
from tests.rewards.test_hostile_shapes import hostile_completions

REWARDS = ["gsm8k_correctness", "math_correctness", "gsm8k_format", "math_format", "number_anywhere"]


def fuzzed_completions(n: int) -> list[tuple[str, str]]:
    """``n`` (completion, gold) pairs from the fuzz test's strategies, the same ones on every run."""
    drawn: list[tuple[str, str]] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(text=hostile, gold=st.sampled_from(GOLDS))
    def draw(text, gold):
        drawn.append((text, gold))

    draw()
    return drawn


def score_all(items: list[tuple[str, str]], batch: int) -> tuple[list, float, float, int, dict[str, float]]:
    """(scores per completion, seconds, slowest batch's seconds, comparisons given up, seconds in each reward)."""
    verify._CACHE.clear()
    verify._GIVEN_UP.clear()
    verify._POOL.close()
    verify.warm_up()
    rewards = [get_reward(name) for name in REWARDS]
    scores: list[list] = [[] for _ in items]
    per_reward = dict.fromkeys(REWARDS, 0.0)
    before = verify.timeout_count()
    slowest = 0.0
    start = time.perf_counter()
    for i in range(0, len(items), batch):
        chunk = items[i : i + batch]
        texts, golds = [t for t, _ in chunk], [g for _, g in chunk]
        t0 = time.perf_counter()
        for name, reward in zip(REWARDS, rewards, strict=True):
            t1 = time.perf_counter()
            batch_scores = reward(texts, answer=golds)
            per_reward[name] += time.perf_counter() - t1
            for j, score in enumerate(batch_scores):
                scores[i + j].append(score)
        slowest = max(slowest, time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    return scores, elapsed, slowest, verify.timeout_count() - before, per_reward


def digest(scores: list) -> str:
    return hashlib.sha256(json.dumps(scores).encode()).hexdigest()[:16]


def report(
    title: str, batch: int, scores: list, seconds: tuple[float, float, float], timeouts: int, per_reward
) -> None:
    """The two lines a set prints: its time, timeouts and digest; the seconds spent in each reward."""
    drawn_s, elapsed, slowest = seconds
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{len(scores)} {title} x {len(REWARDS)} rewards, batches of {batch}: {elapsed:.1f} s "
        f"(drawn in {drawn_s:.1f} s, not timed); slowest batch {slowest:.2f} s; {timeouts} comparisons given up "
        f"as timeouts; score digest {digest(scores)}; load average {load:.2f}"
    )
    print("seconds per reward: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in per_reward.items()))


def differ_from(saved: dict, items: list, scores: list, path: Path, title: str) -> int:
    """Print the completions whose scores differ from ``saved``; their number (1 when the completions differ)."""
    if [list(i) for i in saved["items"]] != [list(i) for i in items]:
        print(f"{path} holds other {title}: not comparable")
        return 1
    differ = [i for i, (a, b) in enumerate(zip(saved["scores"], scores, strict=True)) if a != b]
    print(f"{len(differ)} {title} score differently from {path} (digest {digest(saved['scores'])})")
    for i in differ[:20]:
        print(f"  {i}: {items[i][0][:80]!r} vs gold {items[i][1]!r}: {saved['scores'][i]} -> {scores[i]}")
    return len(differ)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rewards_fuzz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=10_000, help="fuzzed completions")
    parser.add_argument("--shapes", type=int, default=10_000, help="hostile-shape completions, 4-16 KB each (0: none)")
    parser.add_argument("--batch", type=int, default=64, help="completions per reward call")
    parser.add_argument("--save", type=Path, help="write the scores to this JSON file")
    parser.add_argument("--compare", type=Path, help="list the completions whose scores differ from a saved run")
    parser.add_argument("--items", type=Path, help="score the completions a saved run drew instead of drawing them")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # timeouts and skipped answers are counted here, not logged one by one
    try:
        return fuzz(args)
    finally:
        logging.disable(logging.NOTSET)  # a caller in the same process (a test) logs as before


def fuzz(args) -> int:
    """Score both sets, print them, save and compare as ``args`` asks; 1 when a compared score differs."""
    saved_items = json.loads(args.items.read_text()) if args.items else None
    t0 = time.perf_counter()
    if saved_items:
        items = [tuple(item) for item in saved_items["items"]]
    else:
        items = fuzzed_completions(args.n)
    drawn_s = time.perf_counter() - t0
    scores, elapsed, slowest, timeouts, per_reward = score_all(items, args.batch)
    report("fuzzed completions", args.batch, scores, (drawn_s, elapsed, slowest), timeouts, per_reward)
    run = {"items": items, "scores": scores}

    shape_items: list = []
    t0 = time.perf_counter()
    if saved_items and "shapes" in saved_items:
        shape_items = [tuple(item) for item in saved_items["shapes"]["items"]]
    elif args.shapes and not saved_items:
        shape_items = hostile_completions(args.shapes)
    if shape_items:
        drawn_s = time.perf_counter() - t0
        shape_scores, elapsed, slowest, timeouts, per_reward = score_all(shape_items, args.batch)
        seconds = (drawn_s, elapsed, slowest)
        report("hostile-shape completions", args.batch, shape_scores, seconds, timeouts, per_reward)
        run["shapes"] = {"items": shape_items, "scores": shape_scores}

    if args.save:
        args.save.write_text(json.dumps(run))
    if args.compare:
        saved = json.loads(args.compare.read_text())
        differ = differ_from(saved, items, scores, args.compare, "completions")
        if "shapes" in run and "shapes" in saved:
            differ += differ_from(saved["shapes"], shape_items, run["shapes"]["scores"], args.compare, "hostile shapes")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
