"""GRPO / Dr. GRPO on maths with verifiable rewards: a thin script around TRL's ``GRPOTrainer`` with monitors.

    # tiny CPU demo (builds a ~100k-parameter local model; a couple of minutes on 2 cores)
    python -m recipes.grpo --config recipes/configs/tiny/grpo_cpu.yaml
    # one GPU, LoRA, GSM8K (flags override the YAML)
    python -m recipes.grpo --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.04.yaml --seed 1
    # several GPUs
    accelerate launch --config_file recipes/accelerate/ddp.yaml -m recipes.grpo --config <config>

Every check that can fail runs before a model is loaded (``recipes/validate.py``); the monitors and the JSON-lines
log are in ``recipes/monitors.py``; how to read them is in docs/grpo.md. The judge lab and the over-optimisation lab are
configs of this recipe: a one-prompt data set (``question``), a judge or a learned reward model
(``recipes/reward_setup.py``), tracked answers (``recipes/tracked.py``) and extra callbacks (``recipes/hooks.py``).
"""

from __future__ import annotations

import time
from pathlib import Path

import trl  # trl.<trainer>, trl.get_peft_config: imported at the call (~2 s that --help does not need)
from trl import GRPOConfig, ModelConfig

from eval import run as eval_run  # eval_run.evaluate at the call: a test's stand-in reaches it
from recipes import hooks, run_setup, validate
from recipes.callbacks import held_out_watch
from recipes.cli import RecipeParser
from recipes.grpo_setup import (  # noqa: F401  (GRPOScriptArguments and check_args: the recipe's interface)
    GRPOScriptArguments,
    build_trainer,
    check_args,
    make_tracker,
    reward_monitor,
    training_rows,
)
from recipes.hack_alarm import watch_lines
from recipes.model_args import model_init_kwargs
from recipes.monitors import JsonlLogCallback, MonitorCallback
from recipes.reward_setup import build_rewards, reward_stats
from recipes.validate import import_hook


def main(script_args, training_args, model_args):
    started = time.monotonic()
    # Validate everything that can be checked without a model
    args, names = script_args, script_args.reward_funcs
    with validate.config_errors():  # bad input stops here, before any model loads (one line on the CLI)
        task, eval_task = check_args(script_args, training_args, model_args)

        # Data: the prompt builder eval uses, so train and eval prompts match (or the one question)
        rows = training_rows(args, task)
        curriculum = import_hook(args.curriculum) if args.curriculum else None
        steps = training_args.max_steps
        monitored = args.monitor_eval_steps and (steps < 0 or args.monitor_eval_steps <= steps)  # reached in this run
        held_out = args.eval_limit or (args.monitor_eval_limit if monitored else 0)
        validate.check_held_out_data(eval_task.name, args.eval_data, held_out)
        # Rewards (a judge must answer, a reward model folder must score), tracked answers, the config's callbacks
        funcs = build_rewards(names, args, model_args.model_name_or_path, args.build_tiny_model)
        context = hooks.HookContext(args, training_args, model_args, Path(training_args.output_dir), rows, funcs, names)
        context.tracker = make_tracker(args, rows, training_args.temperature, context.log)
        extra = [context.tracker] if context.tracker else []
        extra += hooks.call_hooks(hooks.load_hooks(args.callbacks), context)
        validate.check_model(model_args, args.build_tiny_model)  # last: the checks above need no model source

    # Rewards, wrapped by the monitor (same names, so TRL's rewards/<name>/mean keys do not change)
    monitor = reward_monitor(names, funcs, training_args, eval_task.name)

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
    context.monitor_callback = monitor_callback  # context.log and context.held_out go through it
    watch = held_out_watch(args, out, training_args.report_to or [])  # hack alarm, best checkpoint: before the log
    callbacks = [*watch, JsonlLogCallback(out / "log.jsonl"), monitor_callback, *extra]  # tracker before hooks
    train_rows = rows
    if curriculum:  # its callback goes first: what it adds to a log line reaches log.jsonl
        train_rows, curriculum_callback = curriculum(rows, training_args)
        callbacks.insert(0, curriculum_callback)
    trainer = build_trainer(
        model=model_args.model_name_or_path,
        reward_funcs=monitor.wrapped(),
        args=training_args,
        train_dataset=train_rows,
        peft_config=trl.get_peft_config(model_args),
        quantization_config=trl.get_quantization_config(model_args),
        callbacks=callbacks,
    )
    trainer.monitor_callback = monitor_callback
    hooks.attach(extra, trainer)
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    monitor.stop_token_ids = [*trainer.eos_token_ids, tokenizer.pad_token_id]  # truncated as TRL's clipped_ratio

    # Evaluate before, train (resuming after a kill), save, evaluate after; every process evaluates, one writes
    report = {"run_name": training_args.run_name, "output_dir": str(out), "processes": training_args.world_size}
    if args.eval_limit:
        report["before"] = eval_run.evaluate(
            trainer.model,
            trainer.processing_class,
            eval_task.name,
            limit=args.eval_limit,
            out_dir=run_setup.main_process_path(training_args, out / "eval_before"),
            overwrite=True,  # the run's own folder: an evaluation of other weights there is stale
            **eval_kwargs,
        )
    logs = ("log.jsonl", "top_completions.jsonl", *hooks.run_files(extra))  # a resumed run appends, a fresh one not
    trainer.train(resume_from_checkpoint=run_setup.resume_checkpoint(training_args, args.resume, logs))
    trainer.save_model(str(out))
    if args.eval_limit:
        report["after"] = eval_run.evaluate(
            trainer.model,
            trainer.processing_class,
            eval_task.name,
            limit=args.eval_limit,
            out_dir=run_setup.main_process_path(training_args, out / "eval_after"),
            overwrite=True,  # the run's own folder: an evaluation of other weights there is stale
            **eval_kwargs,
        )
    report["seconds"] = round(time.monotonic() - started, 1)  # the whole run: evals, training, saving
    for callback in watch:
        report |= callback.report()
    report |= {"reward_stats": stats} if (stats := reward_stats(funcs)) else {}
    run_setup.write_report(training_args, report, summary(report, out))
    # finishes the W&B run (flushes offline files) and the process group: all that Trainer.end() does in
    # transformers 5.24, and the GPU set's transformers 5.17 has no Trainer.end()
    trainer.accelerator.end_training()
    return report


def summary(report: dict, out: Path) -> str:
    """Where things are, and accuracy before -> after."""
    lines = [f"run {report['run_name']}", *run_setup.held_out_lines(report, out), *watch_lines(report)]
    lines.append(f"train log (JSON lines): {out / 'log.jsonl'}; top completions: {out / 'top_completions.jsonl'}")
    lines.append(
        f"hack probes: {out / 'probes.json'}; config: {out / 'resolved_config.json'}; report: {out / 'report.json'}"
    )
    return "\n".join(lines)


def make_parser():
    """The recipe's parser: ``--help`` shows the recipe's own options by group and the TRL ones most runs set."""
    groups = {
        "training data": ["task", "data", "train_limit", "question", "gold_answer", "instruction", "curriculum"],
        "rewards": ["reward_funcs", "reward_check", "reward_model_path"],
        "held-out evaluation, monitors and hack probes": [
            "eval_task",
            "eval_data",
            "eval_limit",
            "eval_max_new_tokens",
            "monitor_eval_steps",
            "monitor_eval_limit",
            "probe_problems",
        ],
        "the hack alarm and the best checkpoint": ["hack_alarm_checks", "stop_on_hack", "keep_best_checkpoint"],
        "run": ["build_tiny_model", "resume", "use_vllm_if_available", "one_update_per_group", "callbacks"],
        "tracked answers (their log-probability every step)": ["tracked_names", "tracked_answers"],
        "the LLM judge (reward llm_judge)": [n for n in GRPOScriptArguments.__dataclass_fields__ if n[:6] == "judge_"],
    }
    common = (
        "model_name_or_path",
        "output_dir",
        "max_steps",
        "learning_rate",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_generations",
        "max_completion_length",
        "loss_type",
        "beta",
        "scale_rewards",
        "use_peft",
        "use_cpu",
        "report_to",
        "seed",
    )
    folded = ("tracked answers (their log-probability every step)", "the LLM judge (reward llm_judge)")
    parts = (GRPOScriptArguments, GRPOConfig, ModelConfig)
    return RecipeParser(
        parts, module="recipes.grpo", doc=__doc__, groups=groups, common=common, folded=folded, docs="docs/grpo.md"
    )


if __name__ == "__main__":
    validate.run_cli(make_parser, main)
