"""The judge lab's per-step answer log, a callback of the GRPO recipe (``callbacks: [judge_lab.tracker:lab_step_log]``).
It reads TRL's own completions buffer (``trainer._logs``), so the advantages are TRL's, not recomputed."""

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
    """The recipe's callback hook: the step logger, once the settings are checked (before any model loads) to give
    each log line exactly one step's group of answers."""
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
    """One JSON line per logged step to ``path``: every answer with its reward, advantage, length and verdict, and the
    ``tracker``'s measurements. Call ``attach(trainer)`` after building the trainer."""

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
