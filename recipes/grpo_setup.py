"""The GRPO recipe's arguments and the pieces ``recipes.grpo.main`` assembles: the checks that need no model, the
training rows, the reward monitor, the tracked answers' tracker and the trainer class.

``GRPOScriptArguments`` is what the recipe adds to TRL's ``GRPOConfig`` and ``ModelConfig``; docs/grpo.md lists every
option with what it does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import trl  # trl.GRPOTrainer: imported at the call (~2 s that --help does not need)

from eval.tasks import get_task, load_rows, one_prompt_rows, to_prompt_rows
from recipes import run_setup, validate
from recipes.hack_alarm import check_watch_args
from recipes.monitors import RewardMonitor, make_monitored_trainer_class
from recipes.reward_setup import RewardArguments
from recipes.tracked import ProbabilityTracker, check_tracked
from rewards import reward_info


@dataclass
class GRPOScriptArguments(run_setup.RunArguments, RewardArguments):
    """What the recipe adds to TRL's ``GRPOConfig`` and ``ModelConfig`` (``build_tiny_model``, ``resume`` and the judge
    and reward-model settings of ``RewardArguments`` too)."""

    task: str = field(default="gsm8k_train", metadata={"help": "training task of eval.tasks.TASKS"})
    data: str | None = field(default=None, metadata={"help": "hub id or local .jsonl (default: the task's hub set)"})
    train_limit: int | None = field(default=None, metadata={"help": "train on the first N problems only"})
    reward_funcs: list[str] = field(
        default_factory=lambda: ["gsm8k_correctness", "gsm8k_format"], metadata={"help": "names from rewards/"}
    )
    reward_check: str = field(
        default="error", metadata={"help": "'warn' trains a reward set that can pay wrong answers (hack studies)"}
    )
    eval_task: str = field(default="gsm8k", metadata={"help": "held-out task for before/after and monitor evals"})
    eval_data: str | None = field(default=None, metadata={"help": "hub id or local .jsonl for eval_task"})
    eval_limit: int = field(default=100, metadata={"help": "problems evaluated before and after training (0: skip)"})
    eval_max_new_tokens: int | None = field(default=None, metadata={"help": "default: max_completion_length"})
    monitor_eval_steps: int = field(default=0, metadata={"help": "held-out eval every N steps (0: never)"})
    monitor_eval_limit: int = field(default=32, metadata={"help": "problems in each monitor eval"})
    probe_problems: int = field(default=4, metadata={"help": "problems the hack probes are built from (0: skip)"})
    keep_best_checkpoint: bool = field(
        default=False,
        metadata={
            "help": "save the model (the adapter with LoRA) of the monitor check with the best held-out eval/accuracy "
            "so far to <output_dir>/best/, with best.json (step, accuracy); needs monitor_eval_steps"
        },
    )
    hack_alarm_checks: int | None = field(
        default=None,
        metadata={
            "help": "warn once, loudly, when over this many consecutive monitor checks the reward-correctness gap rose "
            "and held-out accuracy fell (the rule: docs/grpo.md); unset: 2 when monitor_eval_steps is set; 0: off"
        },
    )
    stop_on_hack: bool = field(default=False, metadata={"help": "stop training when the hack alarm fires"})
    use_vllm_if_available: bool = field(
        default=False,
        metadata={
            "help": "generate with vLLM (vllm_mode) when it is installed and a GPU is present; an explicit "
            "--use_vllm on the command line wins; a 4/8-bit model always generates with transformers"
        },
    )
    curriculum: str | None = field(
        default=None,
        metadata={
            "help": "'module:function' called as function(rows, training_args) -> (train dataset, callback): training "
            "problems that change as the run goes (cpu_lab.curriculum:lab_curriculum); the held-out set stays fixed"
        },
    )
    question: str | None = field(default=None, metadata={"help": "train on this one question (instead of data)"})
    gold_answer: str | None = field(default=None, metadata={"help": "its final answer (a judge never sees it)"})
    instruction: str | None = field(default=None, metadata={"help": "appended to question (default: the task's)"})
    tracked_names: list[str] = field(default_factory=list, metadata={"help": "names of answers whose logp to track"})
    tracked_answers: list[str] = field(
        default_factory=list, metadata={"help": "replies to the first training prompt, parallel to tracked_names"}
    )
    callbacks: list[str] = field(
        default_factory=list,
        metadata={"help": "'module:function' hooks called with a recipes.hooks.HookContext -> TrainerCallback(s)"},
    )
    one_update_per_group: bool = field(
        default=False,
        metadata={"help": "check num_iterations, steps_per_generation and gradient_accumulation_steps are all 1"},
    )


def check_args(script_args, training_args, model_args):
    """Every check that needs no model (recipes/validate.py); returns the training and held-out tasks."""
    training_args.use_vllm, generation = validate.decide_vllm(
        training_args.use_vllm,
        script_args.use_vllm_if_available,
        training_args.vllm_mode,
        model_args.load_in_4bit,
        model_args.load_in_8bit,
    )
    print(generation)  # one line: which backend generates, and why
    validate.check_precision(model_args.use_peft, model_args.dtype, validate.uses_deepspeed(training_args))
    task, eval_task = get_task(script_args.task), get_task(script_args.eval_task)
    validate.check_loss(training_args.loss_type, training_args.scale_rewards)  # group size: GRPOConfig checks it
    names, weights = script_args.reward_funcs, training_args.reward_weights
    validate.check_rewards(names, weights, on_violation=script_args.reward_check)
    validate.check_reward_task(names, task.answer_style)
    validate.check_vllm(training_args.use_vllm, training_args.vllm_mode)
    validate.check_quantization(model_args.load_in_4bit, model_args.load_in_8bit, model_args.use_peft)
    validate.check_steps(script_args.monitor_eval_steps, training_args.logging_steps)
    script_args.hack_alarm_checks = check_watch_args(  # recipes.hack_alarm; resolves the alarm's default N
        script_args.keep_best_checkpoint,
        script_args.hack_alarm_checks,
        script_args.stop_on_hack,
        script_args.monitor_eval_steps,
        training_args.max_steps,
        zero3=uses_zero3(training_args),
    )
    one = {"data": script_args.data, "curriculum": script_args.curriculum, "train_limit": script_args.train_limit}
    validate.check_one_prompt(script_args.question, script_args.gold_answer, **one)
    check_tracked(script_args.tracked_names, script_args.tracked_answers)  # recipes.tracked
    if script_args.one_update_per_group:
        t = training_args
        validate.check_one_update_per_group(t.num_iterations, t.steps_per_generation, t.gradient_accumulation_steps)
    return task, eval_task


def uses_zero3(training_args) -> bool:
    """True when DeepSpeed ZeRO-3 shards the weights: ``accelerate launch`` with ``zero_stage: 3``, or a
    ``deepspeed`` config (a dict or a JSON file) whose ``zero_optimization.stage`` is 3."""
    if not validate.uses_deepspeed(training_args):
        return False
    if os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return True
    config = training_args.deepspeed
    if isinstance(config, str) and Path(config).is_file():
        config = json.loads(Path(config).read_text())
    return isinstance(config, dict) and config.get("zero_optimization", {}).get("stage") == 3


def reward_monitor(names: list[str], funcs: list, training_args, eval_task_name: str):
    """The run's rewards wrapped by ``recipes.monitors.RewardMonitor`` with the run's weights, G, completion budget, and
    its correctness reward (the first of kind ``correctness``, wherever it is in the list, weight 0 included) as the
    verdict."""
    correctness = [i for i, name in enumerate(names) if reward_info(name).kind == "correctness"]
    return RewardMonitor(
        funcs,
        training_args.reward_weights,
        eval_task_name,
        training_args.max_completion_length,
        correctness[0] if correctness else None,
        group_size=training_args.num_generations,
    )


def training_rows(args, task):
    """The training rows: the one ``question`` when set, else the task's data (first ``train_limit`` problems)."""
    if args.question is not None:
        return one_prompt_rows(task, args.question, args.gold_answer, args.instruction)
    rows = load_rows(task, args.data)
    rows = to_prompt_rows(task, rows.select(range(min(args.train_limit, len(rows)))) if args.train_limit else rows)
    validate.check_answer_column(rows.column_names, args.data or task.hub_id)
    return rows


def make_tracker(args, rows, temperature: float, log):
    """The tracked answers' ``recipes.tracked.ProbabilityTracker`` on the first training prompt, its values added to
    each step's log line by ``log`` (None without tracked answers)."""
    if not args.tracked_names:
        return None
    answers = dict(zip(args.tracked_names, args.tracked_answers, strict=True))
    return ProbabilityTracker(rows[0]["prompt"], answers, temperature, log)


def build_trainer(**kwargs):
    """TRL's ``GRPOTrainer`` with the monitors' log (``recipes.monitors.make_monitored_trainer_class``): the trainer
    every GRPO run of this project trains with; ``kwargs`` are GRPOTrainer's."""
    return make_monitored_trainer_class(trl.GRPOTrainer)(**kwargs)
