"""A curriculum for the lab's GRPO runs: the training problems' difficulty follows the policy's running pass rate.

A group whose G answers are all right or all wrong teaches GRPO nothing; at pass rate p that happens with probability
p^G + (1 - p)^G (0.43 at p = 0.9, 0.03 at p = 0.35 for G = 8), so the controller steps along ``LADDER`` to keep the
running pass rate near the middle. Rows are drawn when fetched (a level change reaches batches a step or two later),
index i at level L is always the same problem, and no training problem shares a solution with a held-out one. The
controller's state is not checkpointed: a resumed run restarts at the start level.

    # in a lab GRPO config (recipes/configs/lab/grpo_lab_default.yaml)
    curriculum: cpu_lab.curriculum:lab_curriculum
    # greedy accuracy of a model at every level (100 problems each): where the ladder's rungs sit for it
    python -m cpu_lab.curriculum runs/lab/warmstart
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cpu_lab.problems import DEV_SIZE, TASK, TEST_SIZE, Difficulty, kept_out_solutions, make_problem, solution
from eval import __main__ as eval_cli
from eval import run as eval_run
from eval.degenerate import expected_degenerate_share
from eval.jsonl import write_jsonl
from eval.tasks import get_task

# Easiest first. The held-out set's difficulty (Difficulty(): 1-2 operations, numbers up to 50) is a level, and the
# start. Greedy accuracy of the seed-0 warm start on 100 problems of each level (`python -m cpu_lab.curriculum`):
# 56, 38, 16, 13, 2%; seed 1's: 39, 31, 32, 10, 9% (100 problems: +-5 points, so neighbours can swap). The top
# stays at two operations: a third does not fit the lab's 32-token completions.
LADDER = (
    Difficulty(min_steps=1, max_steps=1, max_number=50),
    Difficulty(min_steps=1, max_steps=2, max_number=50),
    Difficulty(min_steps=2, max_steps=2, max_number=30),
    Difficulty(min_steps=2, max_steps=2, max_number=50),
    Difficulty(min_steps=2, max_steps=2, max_number=99),
)
START_LEVEL = LADDER.index(Difficulty())
PASS_RATE_KEY = "monitor/correct_rate"  # recipes.monitors' share of correct answers in the logging window


@dataclass
class CurriculumController:
    """Moves a level in ``[0, n_levels - 1]`` to keep the running pass rate within ``[low, high]``.

    >>> c = CurriculumController(n_levels=3, level=1, patience=2)
    >>> [c.update(0.9) for _ in range(4)]  # above the band: up after `patience` steps, then capped at the top
    [1, 2, 2, 2]
    >>> [c.update(0.1) for _ in range(4)]  # running 0.5 (in the band), 0.3: down; patience; still low: down again
    [2, 1, 1, 0]
    """

    n_levels: int
    level: int
    low: float = 0.35  # p^8 + (1-p)^8 = 0.03 at 0.35 and 0.65: almost every group differs
    high: float = 0.65
    smoothing: float = 0.5  # weight of the newest window in the running pass rate
    patience: int = 4  # windows at a level before it may move again (the move reaches batches 1-2 steps late)
    running: float | None = field(default=None, init=False)
    since_move: int = field(default=0, init=False)

    def __post_init__(self):
        if self.n_levels < 1 or not 0 <= self.level < self.n_levels:
            raise ValueError(f"level {self.level} is outside [0, {self.n_levels - 1}]: start inside the ladder")
        if not 0.0 <= self.low < self.high <= 1.0:
            raise ValueError(f"the band needs 0 <= low < high <= 1, got low={self.low}, high={self.high}")
        if not 0.0 < self.smoothing <= 1.0 or self.patience < 1:
            raise ValueError(f"smoothing must be in (0, 1] and patience >= 1, got {self.smoothing}, {self.patience}")

    def update(self, pass_rate: float) -> int:
        """Take one window's pass rate; return the level the next batches draw from."""
        if not 0.0 <= pass_rate <= 1.0:  # NaN fails too
            raise ValueError(f"pass rate {pass_rate} is not in [0, 1]: pass the share of correct answers")
        s = self.smoothing
        self.running = pass_rate if self.running is None else s * pass_rate + (1 - s) * self.running
        self.since_move += 1
        if self.since_move < self.patience:
            return self.level
        step = 1 if self.running > self.high else -1 if self.running < self.low else 0
        new_level = min(max(self.level + step, 0), self.n_levels - 1)
        if new_level != self.level:
            self.level, self.running, self.since_move = new_level, None, 0  # measure the new level afresh
        return self.level


def problem_at(seed: int, level: int, index: int, kept_out: set[str], ladder=LADDER) -> dict:
    """Training problem ``index`` at ``level`` for ``seed``: always the same, never a kept-out question.

    >>> problem_at(0, 3, 7, set()) == problem_at(0, 3, 7, set()) != problem_at(0, 4, 7, set())
    True
    """
    rng = random.Random(f"curriculum:{seed}:{level}:{index}")  # its own stream: no int seed of the splits
    while True:
        problem = make_problem(rng, ladder[level])
        if solution(problem) not in kept_out:
            return problem


class CurriculumDataset:
    """The training rows: ``dataset`` holds ``size`` indices whose problems are drawn at ``level`` when fetched."""

    def __init__(
        self,
        size: int,
        seed: int,
        task_name: str,
        level: int = START_LEVEL,
        ladder=LADDER,
        heldout_n: int = TEST_SIZE,
        validation_n: int = DEV_SIZE,
    ):
        from datasets import Dataset  # ~1 s that `python -m cpu_lab.curriculum --help` does not pay

        if size < 1:
            raise ValueError(f"the curriculum needs at least one training row, got size={size}")
        self.seed, self.level, self.ladder = seed, level, ladder
        self.task = get_task(task_name)
        self.kept_out = kept_out_solutions(Difficulty(), heldout_n, validation_n)  # the fixed test and dev sets'
        self.fetched_levels: list[int] = []  # one entry per fetch, for the tests and the curious
        self.dataset = Dataset.from_dict({"index": list(range(size))}).with_transform(self._rows)

    def _rows(self, batch: dict) -> dict:
        level = self.level  # one level per fetch: every copy of a prompt in the batch is the same problem
        self.fetched_levels.append(level)
        problems = [problem_at(self.seed, level, i, self.kept_out, self.ladder) for i in batch["index"]]
        return {
            "prompt": [self.task.prompt(p["question"]) for p in problems],
            "question": [p["question"] for p in problems],
            "answer": [self.task.gold(p) for p in problems],  # the final number, as eval.tasks.to_prompt_rows gives
            "curriculum_level": [level] * len(problems),
        }


def make_callback(controller: CurriculumController, data: CurriculumDataset, group_size: int):
    """Feeds each log window's pass rate to ``controller``, logs ``curriculum/...``; must precede the JSON logger."""
    from transformers import TrainerCallback  # ~6 s that `python -m cpu_lab.curriculum --help` does not pay

    class CurriculumCallback(TrainerCallback):
        logged_step = 0  # fetches up to here belong to earlier log lines (one fetch per optimizer step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is None or PASS_RATE_KEY not in logs or not math.isfinite(logs[PASS_RATE_KEY]):
                return  # an evaluation or end-of-training line: no training answers in it
            served = data.fetched_levels[self.logged_step : state.global_step] or [data.level]
            self.logged_step = state.global_step
            data.level = controller.update(float(logs[PASS_RATE_KEY]))
            running = controller.running if controller.running is not None else float(logs[PASS_RATE_KEY])
            logs["curriculum/difficulty"] = sum(served) / len(served)  # the level this window's problems were drawn at
            logs["curriculum/next_difficulty"] = data.level  # the level the next fetches draw at
            logs["curriculum/step_pass_rate"] = float(logs[PASS_RATE_KEY])
            logs["curriculum/pass_rate"] = running
            logs["curriculum/degenerate_predicted_share"] = expected_degenerate_share([running], group_size)

    return CurriculumCallback()


def lab_curriculum(rows, training_args):
    """The GRPO recipe's ``curriculum`` hook: as many rows as ``rows`` (read only for its length), and the callback."""
    if training_args.gradient_accumulation_steps != 1 or training_args.steps_per_generation != 1:
        raise ValueError(
            "the lab curriculum assumes one batch fetch per optimizer step (it logs each step's level from them): "
            "set gradient_accumulation_steps and steps_per_generation to 1"
        )
    data = CurriculumDataset(len(rows), seed=training_args.seed, task_name=TASK)
    controller = CurriculumController(n_levels=len(LADDER), level=START_LEVEL)
    return data.dataset, make_callback(controller, data, training_args.num_generations)


def ladder_accuracy(model_dir: str, n: int = 100, seed: int = 0) -> list[float]:
    """Greedy accuracy of the model in ``model_dir`` on ``n`` training problems of each level, easiest first."""
    model, tokenizer = eval_cli.load_model(model_dir, None, "auto", "hf")  # what `python -m eval run` loads
    kept_out, accuracies = kept_out_solutions(), []
    with tempfile.TemporaryDirectory() as tmp:
        for level in range(len(LADDER)):
            rows = [problem_at(seed, level, i, kept_out) for i in range(n)]
            path = write_jsonl(rows, Path(tmp) / f"level{level}.jsonl")
            result = eval_run.evaluate(
                model, tokenizer, TASK, data=str(path), limit=n, max_new_tokens=32, batch_size=100, progress=False
            )
            accuracies.append(float(result["accuracy"]))
    return accuracies


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cpu_lab.curriculum", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model_dir", help="a lab model folder, e.g. runs/lab/warmstart")
    parser.add_argument("--n", type=int, default=100, help="problems per level")
    args = parser.parse_args()
    for level, (difficulty, accuracy) in enumerate(zip(LADDER, ladder_accuracy(args.model_dir, args.n), strict=True)):
        print(f"level {level} {difficulty}: greedy accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
