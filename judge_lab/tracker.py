"""The judge lab's per-step answer log, a callback of the GRPO recipe (``callbacks: [judge_lab.tracker:lab_step_log]``).

``LabStepLogger`` (a ``TrainerCallback``) writes one JSON line per step to ``steps.jsonl``: every answer with its
reward, advantage, token length, correctness and judge score; each group's mean and std; the number correct; the
tracked answers' log-probabilities (the recipe's ``tracked_answers``, ``recipes.tracked.ProbabilityTracker``). The
per-answer values are read from the trainer's completions buffer (``trainer._logs``, the data TRL itself logs as its
completions table), so the advantages are TRL's own, not recomputed; ``correct`` and ``n_tokens`` are the columns the
recipe's monitor adds to that table (``recipes.monitors.RewardMonitor``: the run's correctness reward, the checker that
the judge lab lists with weight 0), ``judge_score`` the judge reward's. No GRPO code is rewritten here.

The recipe's monitors, probes and ``log.jsonl`` run beside it as in any GRPO run: ``monitor/reward_correctness_gap``
(judge reward minus the checker's verdict) is the hack signal, ``tracked/<name>/...`` the tracker's values.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl.trainer.utils import nanstd

from eval.jsonl import append_jsonl
from recipes.checks import check_one_update_per_group
from rewards.totals import weighted_totals

STEPS_FILE = "steps.jsonl"


def lab_step_log(context) -> LabStepLogger:
    """The recipe's callback hook: checks that each log line holds exactly one step's group of answers (one prompt per
    step, one update per group, a log every step), before any model loads, and returns the step logger."""
    t = context.training_args
    check_one_update_per_group(t.num_iterations, t.steps_per_generation, t.gradient_accumulation_steps)
    if t.logging_steps != 1:
        raise ValueError(f"the lab's step log writes a line per step: set logging_steps: 1 (not {t.logging_steps})")
    if t.per_device_train_batch_size * t.world_size != t.num_generations:
        raise ValueError(
            "the judge lab trains on one prompt per step: set per_device_train_batch_size x processes = "
            f"num_generations (got {t.per_device_train_batch_size} x {t.world_size} and {t.num_generations})"
        )
    return LabStepLogger(context.output_dir / STEPS_FILE, context.tracker)


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


class LabStepLogger(TrainerCallback):
    """One JSON line per logged step to ``path``: every answer with its reward, advantage, length and verdict.

    Needs ``logging_steps: 1`` and one generation per optimizer step (``lab_step_log`` checks both), so that each log
    holds exactly the answers of one step. ``tracker``: a ``recipes.tracked.ProbabilityTracker`` whose measurements go
    in each line. Call ``attach(trainer)`` after building the trainer. ``run_files``: what a resumed run appends to.
    """

    def __init__(self, path: str | Path, tracker=None):
        self.path = Path(path)
        self.tracker = tracker
        self.trainer = None
        self.run_files = (self.path.name,)

    def attach(self, trainer) -> LabStepLogger:
        self.trainer = trainer
        return self

    def step_record(self, step: int, logs: dict) -> dict:
        buffer = self.trainer._logs  # TRL's completions-table buffer: the latest generation batch
        names = list(buffer["rewards"])
        weights = self.trainer.reward_weights.tolist()
        total = torch.tensor(weighted_totals([list(buffer["rewards"][n]) for n in names], weights))  # [B], as TRL
        group = self.trainer.num_generations
        grouped = total.view(-1, group)  # [prompts, G]
        extra = buffer["extra"]
        answers = []
        for i, completion in enumerate(buffer["completion"]):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            answers.append(
                {
                    "text": text,
                    "reward": _finite(total[i].item()),
                    "advantage": buffer["advantages"][i],
                    "n_tokens": extra["n_tokens"][i] if "n_tokens" in extra else None,
                    "correct": extra["correct"][i] if "correct" in extra else None,
                    "judge_score": extra["judge_score"][i] if "judge_score" in extra else None,
                    **{f"reward/{n}": _finite(buffer["rewards"][n][i]) for n in names},
                }
            )
        lengths = [a["n_tokens"] for a in answers if a["n_tokens"] is not None]
        judged = [a["judge_score"] for a in answers if a["judge_score"] is not None]
        record = {
            "step": step,
            "n_answers": len(answers),
            "n_correct": sum(bool(a["correct"]) for a in answers),
            "mean_reward": _finite(torch.nanmean(total).item()),
            "group_mean": [_finite(v) for v in torch.nanmean(grouped, dim=1).tolist()],
            "group_std": [_finite(v) for v in nanstd(grouped, dim=1).tolist()],
            "mean_n_tokens": sum(lengths) / len(lengths) if lengths else None,
            "mean_judge_score": sum(judged) / len(judged) if judged else None,
            "n_judge_unscored": sum(a["judge_score"] is None for a in answers) if "judge_score" in extra else None,
            "kl": _finite(logs.get("kl")),
            "answers": answers,
        }
        if self.tracker is not None and self.tracker.latest.get("step") == step:
            record["tracked"] = {k: v for k, v in self.tracker.latest.items() if k != "step"}
        return record

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "reward" not in logs or self.trainer is None:
            return  # the end-of-training summary log holds no answers
        record = self.step_record(state.global_step, logs)
        append_jsonl(record, self.path)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.tracker is not None and self.tracker.latest.get("after_training"):
            tracked = {k: v for k, v in self.tracker.latest.items() if isinstance(v, dict)}
            append_jsonl({"step": state.global_step, "after_training": True, "tracked": tracked}, self.path)
