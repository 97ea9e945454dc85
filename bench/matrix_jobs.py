"""Wall time of the lab's GRPO runs one after the other (one process, all cores' threads) vs two at once
(``cpu_lab.matrix --jobs 2``); the ratio is two at once / one after the other (below 1: parallel is faster).

    .venv/bin/python -m bench.matrix_jobs                 # the demo's 120 steps: ~6 minutes on 2 cores
    .venv/bin/python -m bench.matrix_jobs --steps 30      # quick look (~2 minutes; start-up weighs more)

Two of the lab's configs from its warm start, without held-out evaluations or probes, so the ratio is the
training's. ``--rounds 2`` alternates the two ways twice so that load from other processes hits both alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from cpu_lab import matrix, warmstart

CONFIGS = ["recipes/configs/lab/grpo_lab_default.yaml", "recipes/configs/lab/grpo_lab_random.yaml"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m bench.matrix_jobs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=120, help="GRPO steps per run (the demo's: 120)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)

    import torch  # ~1.5 s that --help does not pay

    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)  # the sequential way gets every core, as `make demo` gives it (OMP_NUM_THREADS=2)
    paths = warmstart.prepare_lab(warmstart.WarmStartSettings())
    extra = [
        *warmstart.recipe_flags(paths),
        "--max_steps",
        str(args.steps),
        "--eval_limit",
        "0",
        "--monitor_eval_steps",
        "0",
        "--probe_problems",
        "0",
        "--logging_steps",
        str(args.steps),
    ]
    seconds = {1: [], 2: []}
    for _ in range(args.rounds):
        for jobs in (1, 2):
            out = Path(tempfile.mkdtemp(prefix=f"matrix_jobs{jobs}-"))
            start = time.perf_counter()
            matrix.run_matrix(CONFIGS, [0], out, extra, jobs=jobs)
            seconds[jobs].append(time.perf_counter() - start)
            shutil.rmtree(out)
    one, two = min(seconds[1]), min(seconds[2])
    print(f"\n{len(CONFIGS)} lab GRPO runs x {args.steps} steps on {cores} core(s), best of {args.rounds} round(s):")
    print(f"  one after the other ({cores} thread(s)):        {one:.1f} s  (all: {[round(s, 1) for s in seconds[1]]})")
    print(
        f"  two at once ({max(1, cores // 2)} thread(s) each): {two:.1f} s  (all: {[round(s, 1) for s in seconds[2]]})"
    )
    print(f"  ratio (two at once / one after the other): {two / one:.2f}")
    return {"sequential_s": one, "parallel_s": two, "ratio": two / one}


if __name__ == "__main__":
    main()
