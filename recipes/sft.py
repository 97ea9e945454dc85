"""Supervised fine-tuning on worked solutions: a thin script around TRL's ``SFTTrainer``, the first stage before
a reward model or RL.

    # tiny CPU run (a ~100k-parameter local model; mechanics only)
    python -m recipes.sft --config recipes/configs/tiny/sft_cpu.yaml
    # the real CPU model on the CPU lab's problems (make real-model; python -m cpu_lab.problems writes the data)
    python -m recipes.sft --config recipes/configs/real_lab/sft_smollm2.yaml
    # one GPU, LoRA, GSM8K
    python -m recipes.sft --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/sft_lora.yaml

Each row is the task's prompt (the one eval and GRPO use) with the reference solution as the reply; the loss is on the
reply only. With ``validation_data``, training stops at ``stop_at_accuracy`` or at the validation plateau (keeping the
best check's weights), so the held-out set never chooses the checkpoint.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from eval.run import DEFAULT_BATCH_SIZE
from eval.tasks import get_task, load_rows, no_progress_bars
from recipes import checks, common

CALCULATOR_RE = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations: "48/2 = <<48/2=24>>24"


@dataclass
class TrainingData:
    """The training problems and their worked solutions."""

    _argument_group_name = "training data"

    task: str = field(default="gsm8k_train", metadata={"help": "training task of eval.tasks.TASKS"})
    data: str | None = field(default=None, metadata={"help": "hub id or local .jsonl (default: the task's hub set)"})
    solution_field: str | None = field(
        default=None, metadata={"help": "the column holding the worked solution (default: GSM8K answer, MATH solution)"}
    )
    train_limit: int | None = field(default=None, metadata={"help": "train on the first N problems only"})


@dataclass
class EvalBatch:
    """How many prompts the evaluations generate for at once (after ``common.HeldOutArguments``' options)."""

    _argument_group_name = "held-out evaluation"

    eval_batch_size: int = field(
        default=DEFAULT_BATCH_SIZE,
        metadata={"help": "prompts per generate call in the held-out and validation evaluations"},
    )


@dataclass
class Validation:
    """When to stop, read on a validation set."""

    _argument_group_name = "stopping on a validation set"

    validation_data: str | None = field(
        default=None, metadata={"help": "a .jsonl of eval_task problems that decides when to stop (not the held-out)"}
    )
    validation_limit: int = field(default=100, metadata={"help": "validation problems per check (0: no checks)"})
    validation_steps: int = field(default=50, metadata={"help": "check the validation accuracy every N steps"})
    stop_at_accuracy: float | None = field(
        default=None, metadata={"help": "stop once the validation accuracy reaches this (needs validation_data)"}
    )
    stop_patience: int | None = field(
        default=None,
        metadata={
            "help": "stop at the plateau: after N validation checks without a new best, keeping the best check's "
            "weights (needs validation_data)"
        },
    )


@dataclass
class SFTRun:
    """The run's training time (before RunArguments' options)."""

    _argument_group_name = "run"

    max_train_seconds: float | None = field(
        default=None,
        metadata={
            "help": "stop once the optimizer steps have taken this many seconds (evaluations and checks not counted): "
            "training compute matched to another run's train_seconds"
        },
    )


@dataclass
class SFTScriptArguments(TrainingData, common.HeldOutArguments, EvalBatch, Validation, SFTRun, common.RunArguments):
    """What the recipe adds to TRL's ``SFTConfig`` and ``ModelConfig``: one object, its ``--help`` groups in order (each
    part names its group with ``_argument_group_name``, as TRL's parser reads it)."""

    def __post_init__(self):  # checked as they are parsed, before anything loads: one line on the command line
        with checks.config_errors():
            check_args(self)


def check_args(args: SFTScriptArguments) -> None:
    """The recipe's own settings, which no other options decide (``SFTScriptArguments.__post_init__`` calls it)."""
    if args.stop_at_accuracy is not None and not args.validation_data:
        raise ValueError("stop_at_accuracy needs validation_data: a .jsonl of problems that is not the held-out set")
    if args.max_train_seconds is not None and args.max_train_seconds <= 0:
        raise ValueError(f"max_train_seconds={args.max_train_seconds}: give a number of seconds > 0")
    if args.stop_patience is not None and not args.validation_data:
        raise ValueError("stop_patience needs validation_data: a .jsonl of problems that is not the held-out set")
    if args.stop_patience is not None and args.stop_patience < 1:
        raise ValueError(f"stop_patience={args.stop_patience}: give a number of validation checks >= 1, e.g. 3")
    if args.stop_at_accuracy is not None and not 0 < args.stop_at_accuracy <= 1:
        raise ValueError(f"stop_at_accuracy={args.stop_at_accuracy}: give a fraction in (0, 1]")
    if args.eval_batch_size < 1:
        raise ValueError(f"eval_batch_size={args.eval_batch_size}: give a number of prompts >= 1, e.g. 16")
    if args.validation_limit < 0:
        raise ValueError(f"validation_limit={args.validation_limit}: give a number of validation problems, or 0")
    if args.validation_limit == 0 and (args.stop_at_accuracy is not None or args.stop_patience is not None):
        raise ValueError("validation_limit=0 makes no validation checks, so nothing can stop on them: give >= 1")
    if args.validation_data and args.validation_steps < 1:
        raise ValueError(f"validation_steps={args.validation_steps}: give a number of steps >= 1")
    if args.validation_data and args.eval_data and Path(args.validation_data) == Path(args.eval_data):
        raise ValueError("validation_data is the held-out eval_data: stopping on it would choose the run by its test")


def sft_rows(task, rows, solution_field: str | None = None):
    """Prompt/completion rows: the task's prompt, and the worked solution without calculator annotations as reply.

    >>> from datasets import Dataset
    >>> from eval.tasks import get_task
    >>> rows = Dataset.from_list([{"question": "Half of 48?", "answer": "48/2 = <<48/2=24>>24\\n#### 24"}])
    >>> sft_rows(get_task("gsm8k_train"), rows)[0]["completion"]
    [{'role': 'assistant', 'content': '48/2 = 24\\n#### 24'}]
    """
    field_name = solution_field or ("answer" if task.answer_style == "gsm8k" else "solution")
    if field_name not in rows.column_names:
        raise ValueError(
            f"the training data has no {field_name!r} column (it has {rows.column_names}): set solution_field: to the "
            "column that holds the worked solutions"
        )

    def convert(row):
        solution = CALCULATOR_RE.sub("", str(row[field_name])).strip()
        return {
            "prompt": task.prompt(row[task.question_field]),
            "completion": [{"role": "assistant", "content": solution}],
        }

    with no_progress_bars():
        return rows.map(convert, remove_columns=rows.column_names)


def main(script_args, training_args, model_args):
    # the libraries load here, where a run starts: --help and a refused option never wait for them
    import trl

    from recipes.monitors import TrainSeconds, ValidationStop

    # Validate everything that can be checked without a model, data included
    args = script_args
    with checks.config_errors():  # bad input stops here, before any model loads (one line on the CLI)
        task, eval_task = get_task(args.task), get_task(args.eval_task)
        checks.check_quantization(model_args.load_in_4bit, model_args.load_in_8bit, model_args.use_peft)
        checks.check_precision(model_args.use_peft, model_args.dtype, checks.uses_deepspeed(training_args))
        rows = load_rows(task, args.data)
        rows = sft_rows(
            task,
            rows.select(range(min(args.train_limit, len(rows)))) if args.train_limit else rows,
            args.solution_field,
        )
        checks.check_held_out_data(eval_task.name, args.eval_data, args.eval_limit)
        if args.validation_data:
            checks.check_held_out_data(eval_task.name, args.validation_data, args.validation_limit)
        checks.check_model(model_args, args.build_tiny_model)  # last: the checks above need no model source

    # Run name for W&B grouping, the resolved config (secrets redacted) beside the outputs, the tiny model if asked
    identity = common.run_identity(task.name, model_args, "sft", None, ["reference_solutions"], training_args.seed)
    out, _ = common.start_run(script_args, training_args, model_args, identity)

    # Model (+LoRA / QLoRA): TRL loads it from the path; the validation check stops training when it is reached
    training_args.model_init_kwargs = common.model_init_kwargs(model_args, training_args.model_init_kwargs)
    eval_kwargs = {
        "task_name": eval_task.name,
        "max_new_tokens": args.eval_max_new_tokens,
        "batch_size": args.eval_batch_size,
        "progress": False,
    }
    clock = TrainSeconds(args.max_train_seconds)  # first: the checks below fall outside the seconds it counts
    callbacks = [clock, common.JsonlLogCallback(out / "log.jsonl")]
    stop = None
    if args.validation_data and args.validation_limit:
        validation = {**eval_kwargs, "data": args.validation_data, "limit": args.validation_limit}
        stop = ValidationStop(
            args.validation_steps, args.stop_at_accuracy, validation, out / "validation.jsonl", args.stop_patience
        )
        callbacks.append(stop)
    trainer = trl.SFTTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=rows,
        peft_config=trl.get_peft_config(model_args),
        quantization_config=trl.get_quantization_config(model_args),
        callbacks=callbacks,
    )

    # Evaluate before, train (resuming after a kill), save, evaluate after; every process evaluates, one writes
    report = {"run_name": training_args.run_name, "output_dir": str(out), "rows": len(rows)}

    def results() -> dict:  # what training did: its steps, and the validation checks that decided when it stopped
        done = {"steps": trainer.state.global_step, "train_seconds": round(clock.total, 1)}
        if args.max_train_seconds is not None:
            done["stopped_on_seconds"] = clock.total >= args.max_train_seconds
        return done | ({"validation": stop.report()} if stop else {})

    return common.train_and_report(
        trainer,
        training_args,
        report,
        summary,
        resume=args.resume,
        logs=("log.jsonl", "validation.jsonl"),
        held_out={**eval_kwargs, "data": args.eval_data, "limit": args.eval_limit},
        results=[results],
        started=time.monotonic(),
    )


def summary(report: dict) -> str:
    """Where things are, when training stopped and accuracy before -> after."""
    out = Path(report["output_dir"])
    lines = [f"run {report['run_name']}: {report['rows']} solutions, {report['steps']} steps"]
    if "train_seconds" in report:
        lines.append(f"optimizer steps took {report['train_seconds']} s (evaluations and checks not counted)")
    if "validation" in report:
        v = report["validation"]
        lines.append(
            f"validation accuracy {v['last']} at step {v['last_step']} ({v['why']}); {out / 'validation.jsonl'}"
        )
    lines += common.held_out_lines(report, out, train_log=True)
    return "\n".join(lines)


def make_parser():
    from trl import ModelConfig, SFTConfig

    options = ("num_train_epochs", "max_length")
    parts = (SFTScriptArguments, SFTConfig, ModelConfig)
    return common.recipe_parser(parts, module="recipes.sft", doc=__doc__, options=options, docs="docs/sft.md")


if __name__ == "__main__":
    common.run_cli(make_parser, main)
