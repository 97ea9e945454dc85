"""GRPO / Dr. GRPO on maths with verifiable rewards: a thin script around TRL's ``GRPOTrainer`` with monitors.

    # tiny CPU demo (builds a ~100k-parameter local model; a couple of minutes on 2 cores)
    python -m recipes.grpo --config recipes/configs/tiny/grpo_cpu.yaml
    # one GPU, LoRA, GSM8K (flags override the YAML)
    python -m recipes.grpo --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.04.yaml --seed 1
    # several GPUs
    accelerate launch --config_file recipes/accelerate/ddp.yaml -m recipes.grpo --config <config>

Every check that can fail runs before a model is loaded (``recipes/validate.py``); the monitors and the JSON-lines
log are in ``eval/monitors.py``; how to read them is in docs/grpo.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from recipes import run_setup, validate
from recipes.model_args import model_init_kwargs
from recipes.validate import import_hook


@dataclass
class GRPOScriptArguments(run_setup.RunArguments):
    """What the recipe adds to TRL's ``GRPOConfig`` and ``ModelConfig`` (``build_tiny_model`` and ``resume`` too)."""

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


def check_args(script_args, training_args, model_args):
    """Every check that needs no model (recipes/validate.py); returns the training and held-out tasks."""
    from eval.tasks import get_task

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
    return task, eval_task


def reward_monitor(names: list[str], training_args, eval_task_name: str):
    """The run's rewards wrapped by ``eval.monitors.RewardMonitor`` with the run's weights, G, completion budget, and
    its correctness reward (the first of kind ``correctness``, wherever it is in the list) as the verdict."""
    from eval.monitors import RewardMonitor
    from rewards import get_reward, reward_info

    correctness = [i for i, name in enumerate(names) if reward_info(name).kind == "correctness"]
    return RewardMonitor(
        [get_reward(name) for name in names],
        training_args.reward_weights,
        eval_task_name,
        training_args.max_completion_length,
        correctness[0] if correctness else None,
        group_size=training_args.num_generations,
    )


def main(script_args, training_args, model_args):
    started = time.monotonic()
    from trl import GRPOTrainer, get_peft_config, get_quantization_config

    from eval.monitors import JsonlLogCallback, MonitorCallback, make_monitored_trainer_class
    from eval.run import evaluate
    from eval.tasks import load_rows, to_prompt_rows

    # Validate everything that can be checked without a model
    args, names = script_args, script_args.reward_funcs
    with validate.config_errors():  # bad input stops here, before any model loads (one line on the CLI)
        task, eval_task = check_args(script_args, training_args, model_args)

        # Data: the prompt builder eval uses, so train and eval prompts match
        rows = load_rows(task, args.data)
        rows = to_prompt_rows(task, rows.select(range(min(args.train_limit, len(rows)))) if args.train_limit else rows)
        validate.check_answer_column(rows.column_names, args.data or task.hub_id)
        curriculum = import_hook(args.curriculum) if args.curriculum else None
        steps = training_args.max_steps
        monitored = args.monitor_eval_steps and (steps < 0 or args.monitor_eval_steps <= steps)  # reached in this run
        held_out = args.eval_limit or (args.monitor_eval_limit if monitored else 0)
        validate.check_held_out_data(eval_task.name, args.eval_data, held_out)
        validate.check_judge_from_env(names)
        validate.check_model(model_args, args.build_tiny_model)  # last: the checks above need no model source

    # Rewards, wrapped by the monitor (same names, so TRL's rewards/<name>/mean keys do not change)
    monitor = reward_monitor(names, training_args, eval_task.name)

    # Run name for W&B grouping, the resolved config (secrets redacted) beside the outputs, the tiny model if asked
    identity = run_setup.run_identity(
        task.name, model_args, training_args.loss_type, training_args.beta, names, training_args.seed
    )
    out, config = run_setup.start_run(script_args, training_args, model_args, identity)

    # Model (+LoRA / QLoRA): TRL loads it from the path
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args.model_init_kwargs)

    # Trainer with the monitors: probes at the start, monitor/* every log, eval/* every monitor_eval_steps
    eval_kwargs = {
        "data": args.eval_data,
        "max_new_tokens": args.eval_max_new_tokens or training_args.max_completion_length,
        "progress": False,
    }
    monitor_callback = MonitorCallback(
        monitor,
        out,
        probe_problems=[
            {"question": r["question"], "answer": r["answer"]}
            for r in rows.select(range(min(args.probe_problems, len(rows))))
        ],
        answer_style=task.answer_style,
        eval_every=args.monitor_eval_steps,
        eval_kwargs={"task_name": eval_task.name, "limit": args.monitor_eval_limit, **eval_kwargs},
        report_to=training_args.report_to or [],
        resolved_config=config,
    )
    callbacks = [JsonlLogCallback(out / "log.jsonl"), monitor_callback]
    train_rows = rows
    if curriculum:  # its callback goes first: what it adds to a log line reaches log.jsonl
        train_rows, curriculum_callback = curriculum(rows, training_args)
        callbacks.insert(0, curriculum_callback)
    trainer = make_monitored_trainer_class(GRPOTrainer)(
        model=model_args.model_name_or_path,
        reward_funcs=monitor.wrapped(),
        args=training_args,
        train_dataset=train_rows,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        callbacks=callbacks,
    )
    trainer.monitor_callback = monitor_callback
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    monitor.stop_token_ids = [*trainer.eos_token_ids, tokenizer.pad_token_id]  # truncated as TRL's clipped_ratio

    # Evaluate before, train (resuming after a kill), save, evaluate after; every process evaluates, one writes
    report = {"run_name": training_args.run_name, "output_dir": str(out), "processes": training_args.world_size}
    if args.eval_limit:
        report["before"] = evaluate(
            trainer.model,
            trainer.processing_class,
            eval_task.name,
            limit=args.eval_limit,
            out_dir=run_setup.main_process_path(training_args, out / "eval_before"),
            **eval_kwargs,
        )
    logs = ("log.jsonl", "top_completions.jsonl")  # a resumed run appends to them; a fresh run starts them anew
    trainer.train(resume_from_checkpoint=run_setup.resume_checkpoint(training_args, args.resume, logs))
    trainer.save_model(str(out))
    if args.eval_limit:
        report["after"] = evaluate(
            trainer.model,
            trainer.processing_class,
            eval_task.name,
            limit=args.eval_limit,
            out_dir=run_setup.main_process_path(training_args, out / "eval_after"),
            **eval_kwargs,
        )
    report["seconds"] = round(time.monotonic() - started, 1)  # the whole run: evals, training, saving
    run_setup.write_report(training_args, report, summary(report, out))
    # finishes the W&B run (flushes offline files) and the process group: all that Trainer.end() does in
    # transformers 5.24, and the GPU set's transformers 5.17 has no Trainer.end()
    trainer.accelerator.end_training()
    return report


def summary(report: dict, out: Path) -> str:
    """Where things are, and accuracy before -> after."""
    lines = [f"run {report['run_name']}", *run_setup.held_out_lines(report, out)]
    lines.append(f"train log (JSON lines): {out / 'log.jsonl'}; top completions: {out / 'top_completions.jsonl'}")
    lines.append(
        f"hack probes: {out / 'probes.json'}; config: {out / 'resolved_config.json'}; report: {out / 'report.json'}"
    )
    return "\n".join(lines)


def make_parser():
    from trl import GRPOConfig, ModelConfig, TrlParser

    return TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig))


if __name__ == "__main__":
    validate.run_cli(make_parser, main)
