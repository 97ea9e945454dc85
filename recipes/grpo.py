"""GRPO / Dr. GRPO on maths with verifiable rewards: a thin script around TRL's ``GRPOTrainer`` with monitors.

    # tiny CPU demo (builds a ~100k-parameter local model; a couple of minutes on 2 cores)
    python -m recipes.grpo --config recipes/configs/tiny/grpo_cpu.yaml
    # one GPU, LoRA, GSM8K (flags override the YAML)
    python -m recipes.grpo --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.04.yaml --seed 1
    # several GPUs
    accelerate launch --config_file recipes/accelerate/ddp.yaml -m recipes.grpo --config <config>

Every check that can fail runs before a model is loaded; the GRPO-specific setup (rewards, monitors, trainer) is in
``recipes/grpo_setup.py``, and how to read the monitors is in docs/grpo.md.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from recipes import checks, common


def main(args, training_args, model_args):
    started = time.monotonic()
    # the libraries load here, where a run starts: --help and a refused option never wait for them
    from recipes import grpo_setup

    # Validate everything that can be checked without a model
    with checks.config_errors():  # bad input stops here, before any model loads (one line on the CLI)
        task, eval_task = grpo_setup.check_args(args, training_args, model_args)

        # Data: the prompt builder eval uses, so train and eval prompts match (or the one question)
        rows = grpo_setup.training_rows(args, task)
        curriculum = checks.import_hook(args.curriculum) if args.curriculum else None
        held_out = grpo_setup.held_out_limit(args, training_args.max_steps)
        checks.check_held_out_data(eval_task.name, args.eval_data, held_out)
        if args.monitor_eval_data and args.monitor_eval_steps:
            checks.check_held_out_data(
                eval_task.name, args.monitor_eval_data, args.monitor_eval_limit, flag="--monitor_eval_data"
            )
        # Rewards (a judge must answer, a reward model folder must score), recorded by the monitors: probes at the
        # start, monitor/* every log, eval/* every monitor_eval_steps (same names: TRL's rewards/<name>/mean keys)
        rewards = grpo_setup.build_rewards(
            args.reward_funcs, args, model_args.model_name_or_path, args.build_tiny_model
        )
        monitors = grpo_setup.build_monitors(args, training_args, rows, rewards, task, eval_task)
        # Tracked answers and the config's callbacks (they log through the monitors)
        extra = grpo_setup.extra_callbacks(args, training_args, model_args, rows, rewards, monitors)
        checks.check_model(model_args, args.build_tiny_model)  # last: the checks above need no model source

    # Run name for W&B grouping, the resolved config (secrets redacted) beside the outputs, the tiny model if asked
    identity = common.run_identity(
        task.name, model_args, training_args.loss_type, training_args.beta, args.reward_funcs, training_args.seed
    )
    out, config = common.start_run(args, training_args, model_args, identity)

    # Model (+LoRA / QLoRA): TRL loads it from the path; the trainer with every callback
    training_args.model_init_kwargs = common.model_init_kwargs(model_args, training_args.model_init_kwargs)
    watch = grpo_setup.held_out_watch(args, out, training_args.report_to or [])  # hack alarm, best checkpoint
    trainer = grpo_setup.build_trainer(
        args, training_args, model_args, rows, monitors, watch, extra, curriculum, config
    )

    # Evaluate before, train (resuming after a kill), save, evaluate after; every process evaluates, one writes
    report = {"run_name": training_args.run_name, "output_dir": str(out), "processes": training_args.world_size}
    return common.train_and_report(
        trainer,
        training_args,
        report,
        summary,
        resume=args.resume,
        logs=("log.jsonl", "top_completions.jsonl", *grpo_setup.run_files(extra)),  # a resumed run appends to them
        held_out={
            "task_name": eval_task.name,
            "limit": args.eval_limit,
            **grpo_setup.eval_settings(args, training_args),
        },
        results=[*(callback.report for callback in watch), partial(grpo_setup.reward_stats, rewards)],
        started=started,
    )


def summary(report: dict) -> str:
    """Where things are, and accuracy before -> after."""
    from recipes import grpo_setup

    out = Path(report["output_dir"])
    lines = [f"run {report['run_name']}", *common.held_out_lines(report, out), *grpo_setup.watch_lines(report)]
    lines.append(f"train log (JSON lines): {out / 'log.jsonl'}; top completions: {out / 'top_completions.jsonl'}")
    lines.append(
        f"hack probes: {out / 'probes.json'}; config: {out / 'resolved_config.json'}; report: {out / 'report.json'}"
    )
    return "\n".join(lines)


def make_parser():
    from trl import GRPOConfig, ModelConfig

    common.quiet_wandb_notice()  # grpo_setup's trainer modules import transformers' W&B integration
    from recipes import grpo_setup

    options = ("num_generations", "max_completion_length", "loss_type", "beta", "scale_rewards")
    parts = (grpo_setup.GRPOScriptArguments, GRPOConfig, ModelConfig)
    return common.recipe_parser(parts, module="recipes.grpo", doc=__doc__, options=options, docs="docs/grpo.md")


if __name__ == "__main__":
    common.run_cli(make_parser, main)
