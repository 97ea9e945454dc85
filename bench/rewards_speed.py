"""What the correctness rewards cost on real GRPO batches, next to bare math-verify on the same completions.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_speed                 # or: make bench
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_speed --repeats 9 --pathological 0
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.rewards_speed --math QWEN   # the Qwen2.5-Math samples (below)

The inputs are batches a model sampled, G completions to each of P prompts, as a GRPO step scores them: by default
SmolLM2-135M's samples under ``tests/data/model_outputs/``, or any ``eval run --num-samples K`` samples.jsonl.

Two arms, each called once per batch: leash's ``gsm8k_correctness`` / ``math_correctness`` as a trainer calls them
(GSM8K never reaches math-verify; MATH settles easy answers first and sends the rest to ``--workers`` math-verify
processes, default 1 for like with like), and bare math-verify, ``verify(parse(gold), parse(completion))`` on each
whole completion in the main thread. Both get the same empty caches and warm-up outside the clock, and alternate
order each repeat so that other load hits both alike. Per task: each arm's seconds, the ratio bare / leash (min,
median, max over ``--repeats``; above 1 means leash is faster) and how often their verdicts agree.

Timed apart: ``--pathological`` MATH completions whose answer no checker can compare in time (power towers, huge
factorials, runaway nesting, ...), and MATH batches with 0%, 5% and 20% of them replaced by such completions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from math_verify import parse, verify
from sympy.core.cache import clear_cache

from eval.jsonl import read_jsonl
from rewards import get_reward
from rewards import verify as verify_module
from rewards._verify_worker import WARM_UP
from rewards.answers import extract_answer

ROOT = Path(__file__).resolve().parents[1]
GSM8K_GROUPS = ROOT / "tests" / "data" / "model_outputs" / "lab_train_smollm2_sft_g8.jsonl"
MATH_GROUPS = ROOT / "tests" / "data" / "model_outputs" / "math_train_smollm2_135m_g8.jsonl"
N_KINDS = 7  # of pathological answers (pathological_answer)

Pair = tuple[str, str]  # (completion, gold)
OURS, BARE = "leash", "bare math-verify"  # the arms' names


@dataclass(frozen=True)
class Group:
    """The completions a model sampled for one prompt, and the prompt's gold answer."""

    gold: str
    completions: tuple[str, ...]


def read_groups(path: str | Path) -> list[Group]:
    """One group per row of ``path``: ``eval run`` samples, or rows with ``answer`` and ``completions`` or ``code``."""
    groups = []
    for i, row in enumerate(read_jsonl(path)):
        if isinstance(row.get("samples"), list) and "gold" in row:
            completions = [sample["completion"] for sample in row["samples"]]
            gold = row["gold"]
        elif "answer" in row and isinstance(row.get("completions", row.get("code")), list):
            completions, gold = row.get("completions", row.get("code")), row["answer"]
        else:
            raise ValueError(
                f"{path}, row {i + 1}: no completions: pass an eval run's samples.jsonl (--num-samples K) or rows "
                "with 'answer' and 'completions'"
            )
        groups.append(Group(str(gold), tuple(str(c) for c in completions)))
    return groups


def batches_of(groups: Sequence[Group], prompts_per_batch: int) -> list[list[Pair]]:
    """(completion, gold) pairs, one batch per ``prompts_per_batch`` prompts, each prompt's completions together (as
    TRL's sampler puts them).

    >>> batches_of([Group("1", ("a", "b")), Group("2", ("c", "d")), Group("3", ("e", "f"))], 2)
    [[('a', '1'), ('b', '1'), ('c', '2'), ('d', '2')], [('e', '3'), ('f', '3')]]
    """
    return [
        [(c, g.gold) for g in groups[i : i + prompts_per_batch] for c in g.completions]
        for i in range(0, len(groups), prompts_per_batch)
    ]


class Leash:
    """``<task>_correctness``, one call per batch, as a trainer calls it."""

    name = OURS

    def __init__(self, task: str, workers: int = 1):
        self.reward = get_reward(f"{task}_correctness")
        self.workers = workers

    def reset(self) -> None:
        """No cached verdict and no pair given up; fresh math-verify workers, which warm up as they start."""
        verify_module._CACHE.clear()
        verify_module._GIVEN_UP.clear()
        verify_module._POOL.close()
        verify_module._POOL._size = self.workers  # a batch is scored up to this many comparisons at a time
        clear_cache()
        verify_module.warm_up()

    def score(self, batch: list[Pair]) -> list[bool]:
        scores = self.reward([c for c, _ in batch], answer=[g for _, g in batch])
        return [s == 1.0 for s in scores]


class BareMathVerify:
    """``verify(parse(gold), parse(completion))`` for each completion in turn, in this process."""

    name = BARE

    def reset(self) -> None:
        """An empty sympy cache, then the comparisons leash's workers make as they start (``WARM_UP``)."""
        clear_cache()
        for gold, pred in WARM_UP:
            self.verify(f"${pred}$", gold)

    @staticmethod
    def verify(completion: str, gold: str) -> bool:
        return bool(verify(parse(f"${gold}$"), parse(completion)))

    def score(self, batch: list[Pair]) -> list[bool]:
        return [self.verify(c, g) for c, g in batch]


def answered(task: str, batches: list[list[Pair]]) -> int:
    """How many completions state an answer the task's extractor finds (the ones a checker has to compare).

    >>> answered("gsm8k", [[("so #### 12", "12"), ("no answer here", "3")]])
    1
    """
    return sum(extract_answer(completion, task).ok for batch in batches for completion, _ in batch)


@dataclass
class Pass:
    seconds: float  # scoring the batches: the clock
    setup_seconds: float  # reset and warm-up, outside the clock
    verdicts: list[bool]


def timed_pass(arm, warmup: list[Pair], batches: list[list[Pair]]) -> Pass:
    """The arm reset and warmed up on ``warmup`` (one call), outside the clock; then one call per batch, timed."""
    start = time.perf_counter()
    arm.reset()
    if warmup:
        arm.score(warmup)
    setup = time.perf_counter() - start
    verdicts: list[bool] = []
    start = time.perf_counter()
    for batch in batches:
        verdicts += arm.score(batch)
    return Pass(time.perf_counter() - start, setup, verdicts)


def compare_arms(arms: Sequence, warmup: list[Pair], batches: list[list[Pair]], repeats: int) -> dict[str, list[Pass]]:
    """``repeats`` timed passes of each arm; the order of the arms flips every repeat."""
    passes: dict[str, list[Pass]] = {arm.name: [] for arm in arms}
    for r in range(repeats):
        for arm in arms if r % 2 == 0 else arms[::-1]:
            passes[arm.name].append(timed_pass(arm, warmup, batches))
    return passes


def summary(passes: dict[str, list[Pass]], ours: str = OURS, bare: str = BARE) -> dict:
    """Seconds per arm, the ratio bare / ours per repeat (min, median, max), and the agreement of the verdicts.

    >>> p = {"leash": [Pass(1.0, 0, [True, False]), Pass(2.0, 0, [True, False])],
    ...      "bare math-verify": [Pass(10.0, 0, [True, True]), Pass(30.0, 0, [True, True])]}
    >>> s = summary(p)
    >>> s["ratios"], s["ratio_min_median_max"], s["agree"], s["ours_only"], s["bare_only"], s["stable"]
    ([10.0, 15.0], (10.0, 12.5, 15.0), 1, 0, 1, True)
    """
    ratios = [b.seconds / o.seconds for o, b in zip(passes[ours], passes[bare], strict=True)]
    first_ours, first_bare = passes[ours][0].verdicts, passes[bare][0].verdicts
    return {
        "seconds": {name: [p.seconds for p in ps] for name, ps in passes.items()},
        "setup_seconds": {name: [p.setup_seconds for p in ps] for name, ps in passes.items()},
        "ratios": ratios,
        "ratio_min_median_max": (min(ratios), statistics.median(ratios), max(ratios)),
        "n": len(first_ours),
        "agree": sum(a == b for a, b in zip(first_ours, first_bare, strict=True)),
        "ours_only": sum(a and not b for a, b in zip(first_ours, first_bare, strict=True)),
        "bare_only": sum(b and not a for a, b in zip(first_ours, first_bare, strict=True)),
        "correct": {ours: sum(first_ours), bare: sum(first_bare)},
        "stable": all(p.verdicts == ps[0].verdicts for ps in passes.values() for p in ps),  # the same every repeat
    }


def print_summary(title: str, s: dict) -> None:
    ours, bare = OURS, BARE
    print(f"\n{title}")
    print(f"{'repeat':>6s} {'leash s':>9s} {'bare s':>9s} {'bare/leash':>11s}")
    for r, (o, b, ratio) in enumerate(zip(s["seconds"][ours], s["seconds"][bare], s["ratios"], strict=True)):
        print(f"{r:6d} {o:9.3f} {b:9.3f} {ratio:10.1f}x")
    low, mid, high = s["ratio_min_median_max"]
    print(
        f"leash {statistics.median(s['seconds'][ours]):.3f} s, bare math-verify "
        f"{statistics.median(s['seconds'][bare]):.3f} s (medians); ratio bare/leash min {low:.1f}x, median {mid:.1f}x, "
        f"max {high:.1f}x over {len(s['ratios'])} repeats"
    )
    setup = {name: statistics.median(v) for name, v in s["setup_seconds"].items()}
    print(
        f"verdicts agree on {s['agree']}/{s['n']} ({s['ours_only']} paid by leash only, {s['bare_only']} by bare only; "
        f"correct: leash {s['correct'][ours]}, bare {s['correct'][bare]}; the same in every repeat: {s['stable']}); "
        f"reset and warm-up outside the clock: leash {setup[ours]:.2f} s, bare {setup[bare]:.2f} s"
    )


def pathological_answer(rng: random.Random, kind: int | None = None) -> str:
    """A new completion (random numbers, so no cache helps) whose answer no checker can compare in time, of one of
    ``N_KINDS`` kinds a drifting policy writes (``kind``, else a random one).
    """
    d = [rng.randint(3, 9) for _ in range(4)]
    kind = rng.randrange(N_KINDS) if kind is None else kind % N_KINDS
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


def pathological_set(n: int, golds: Sequence[str], seed: int) -> list[Pair]:
    """``n`` pathological completions, one of each kind in turn, against ``golds`` in turn."""
    rng = random.Random(seed)
    return [(pathological_answer(rng, kind=i), golds[i % len(golds)]) for i in range(n)]


def with_pathological_share(batches: list[list[Pair]], share: float, rng: random.Random) -> list[list[Pair]]:
    """``batches`` with ``share`` of each batch's completions replaced by pathological ones (random kinds)."""
    out = []
    for batch in batches:
        batch = list(batch)
        for i in rng.sample(range(len(batch)), round(share * len(batch))):
            batch[i] = (pathological_answer(rng), batch[i][1])
        out.append(batch)
    return out


def pathological_shares(
    warmup: list[Pair], batches: list[list[Pair]], repeats: int, seed: int, workers: int = 1
) -> None:
    """Leash alone: the median seconds per MATH batch when 0%, 5% and 20% of each batch is pathological."""
    rng = random.Random(seed)
    leash = Leash("math", workers)
    print(f"\nleash alone, {len(batches)} MATH batches, a share of each made pathological ({repeats} repeats)")
    print(f"{'pathological share':>18s} {'s per batch':>12s} {'vs ordinary':>12s} {'timeouts':>9s}")
    base = None
    for share in (0.0, 0.05, 0.2):
        changed = with_pathological_share(batches, share, rng)
        before = verify_module.timeout_count()
        per_batch = statistics.median(timed_pass(leash, warmup, changed).seconds for _ in range(repeats)) / len(batches)
        base = base or per_batch
        timeouts = verify_module.timeout_count() - before
        print(f"{share:18.0%} {per_batch:12.4f} {per_batch / base:11.2f}x {timeouts:9d}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rewards_speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gsm8k", type=Path, default=GSM8K_GROUPS, help="GSM8K completions grouped by prompt")
    parser.add_argument("--math", type=Path, default=MATH_GROUPS, help="MATH completions grouped by prompt")
    parser.add_argument("--prompts-per-batch", type=int, default=4, help="prompts per reward call (x G completions)")
    parser.add_argument("--warmup-prompts", type=int, default=1, help="first prompts of each file: the warm-up")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes of each arm per task")
    parser.add_argument("--pathological", type=int, default=N_KINDS, help="pathological completions (0: skip them)")
    parser.add_argument("--pathological-repeats", type=int, default=3, help="bare math-verify spends seconds on each")
    parser.add_argument("--seed", type=int, default=0, help="draws the pathological answers")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="leash's math-verify workers (1: one comparison at a time, as bare math-verify's one thread)",
    )
    args = parser.parse_args(argv)

    def fail(message: str):
        parser.exit(2, f"error: {message}\n")

    for flag in ("prompts_per_batch", "repeats", "pathological_repeats", "workers"):
        if getattr(args, flag) < 1:
            fail(f"--{flag.replace('_', '-')} must be at least 1")
    data = {}
    for task, path in (("gsm8k", args.gsm8k), ("math", args.math)):
        if not path.is_file():
            fail(f"--{task} {path} is not a file: pass a file of completions grouped by prompt (see --help)")
        try:
            data[task] = read_groups(path)
        except ValueError as e:
            fail(str(e))
        if len(data[task]) <= args.warmup_prompts:
            fail(f"--{task} {path} has {len(data[task])} prompts: it needs more than --warmup-prompts")

    results, warmups, batches = {}, {}, {}
    for task, path in (("gsm8k", args.gsm8k), ("math", args.math)):
        groups = data[task]
        warmups[task] = [pair for batch in batches_of(groups[: args.warmup_prompts], 1) for pair in batch]
        batches[task] = batches_of(groups[args.warmup_prompts :], args.prompts_per_batch)
        sizes = sorted({len(g.completions) for g in groups})
        arms = [Leash(task, args.workers), BareMathVerify()]
        results[task] = summary(compare_arms(arms, warmups[task], batches[task], args.repeats))
        results[task]["answered"] = answered(task, batches[task])
        n_prompts = len(groups) - args.warmup_prompts
        title = f"{task}: {path.name}, {n_prompts} prompts x G={'/'.join(map(str, sizes))}"
        title += f" in {len(batches[task])} batches of {args.prompts_per_batch} prompts"
        title += f" (warm-up: {args.warmup_prompts} other prompt(s)); leash's workers: {args.workers}"
        print_summary(title, results[task])
        print(f"completions that state an answer: {results[task]['answered']}/{results[task]['n']}")
    if args.pathological:
        golds = [g.gold for g in data["math"][args.warmup_prompts :]]
        items = pathological_set(args.pathological, golds, args.seed)
        arms = [Leash("math", args.workers), BareMathVerify()]
        results["pathological"] = summary(compare_arms(arms, warmups["math"], [items], args.pathological_repeats))
        title = f"pathological set: {len(items)} MATH completions in one call, one of each kind in turn"
        print_summary(title, results["pathological"])
        pathological_shares(warmups["math"], batches["math"], args.pathological_repeats, args.seed, args.workers)
    return results


if __name__ == "__main__":
    main()
