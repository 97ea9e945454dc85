"""DPO on answers the checker labelled: a thin script around TRL's ``DPOTrainer``.

    # tiny CPU run (a ~100k-parameter local model; pairs from the data set's own solutions, see the config)
    python -m training_data.rollouts reference --task gsm8k_train --data tests/data/gsm8k/train.jsonl --limit 16 \\
        --out runs/tiny_reference_rollouts
    python -m recipes.dpo --config recipes/configs/tiny/dpo_cpu.yaml
    # one GPU, LoRA, GSM8K, pairs from the model's own rollouts (docs/dpo.md); flags override the YAML
    python -m recipes.dpo --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/dpo_lora.yaml \\
        --data runs/rollouts/gsm8k_train/rollouts.jsonl --beta 0.05

``data`` is a rollouts file (chosen = a correct answer, rejected = a wrong one to the same problem), a JSONL of pairs,
or a hub preference set. The policy starts equal to the reference, so the first step's log-sigmoid losses must be
ln 2 = 0.6931 each (times ``loss_weights``; not predicted with ``use_weighting``): the first step is always logged and
the recipe warns loudly when it shows a reference that is not the starting policy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from eval.tasks import get_task
from recipes import checks, common
from training_data.pairs import load_pairs

logger = logging.getLogger(__name__)


@dataclass
class DPOScriptArguments(common.PairArguments, common.HeldOutArguments, common.RunArguments):
    """What the recipe adds to TRL's ``DPOConfig`` and ``ModelConfig``, by ``--help`` group."""


def main(script_args, training_args, model_args):
    # the libraries load here, where a run starts: --help and a refused option never wait for them
    import trl
    from transformers import AutoTokenizer

    from recipes.first_loss import FirstLossCheck, expected_first_loss

    # Validate everything that can be checked without a model, data included
    args = script_args
    with checks.config_errors():  # bad input stops here, before any model loads (one line on the CLI)
        checks.check_dpo_loss(training_args.loss_type)  # one weight per loss: DPOConfig checks it
        eval_task = get_task(args.eval_task)
        checks.check_quantization(model_args.load_in_4bit, model_args.load_in_8bit, model_args.use_peft)
        pairs, pair_report = load_pairs(args.data, seed=training_args.seed, **args.pair_options())
        checks.check_held_out_data(eval_task.name, args.eval_data, args.eval_limit)
        checks.check_model(model_args, args.build_tiny_model)  # last: the checks above need no model source

    # Run name for W&B grouping, the resolved config (secrets redacted) beside the outputs, the tiny model if asked
    method = "dpo-" + "+".join(training_args.loss_type)
    identity = common.run_identity(
        eval_task.name, model_args, method, training_args.beta, ["verified_pairs"], training_args.seed
    )
    out, _ = common.start_run(script_args, training_args, model_args, identity)

    # Model (+LoRA / QLoRA): TRL loads it and, without LoRA, the reference from the same path
    training_args.model_init_kwargs = common.model_init_kwargs(model_args, training_args.model_init_kwargs)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    first_loss_check = FirstLossCheck(
        *expected_first_loss(training_args.loss_type, training_args.loss_weights, training_args.use_weighting)
    )  # it also makes the trainer log step 1, whatever logging_steps is
    trainer = trl.DPOTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=pairs,
        processing_class=tokenizer,
        peft_config=trl.get_peft_config(model_args),
        quantization_config=trl.get_quantization_config(model_args),
        callbacks=[common.JsonlLogCallback(out / "log.jsonl"), first_loss_check],
    )
    dropped = len(pairs) - len(trainer.train_dataset)
    if dropped:
        logger.warning(
            "%d of %d pairs dropped: their prompt alone fills max_length=%s",
            dropped,
            len(pairs),
            training_args.max_length,
        )
    if dropped == len(pairs):
        raise ValueError(f"every pair's prompt fills max_length={training_args.max_length} tokens: raise max_length")

    # Evaluate before, train (resuming after a kill), save, evaluate after; every process evaluates, one writes
    report = {
        "run_name": training_args.run_name,
        "output_dir": str(out),
        "pairs": len(pairs),
        "pair_report": pair_report,
    }

    def results() -> dict:  # the accuracies before and after as one last log line; the first-loss check
        if args.eval_limit:
            before, after = report["before"]["accuracy"], report["after"]["accuracy"]
            trainer.log({"final_eval/accuracy_before": before, "final_eval/accuracy_after": after})
        return first_loss_check.report()

    held_out = {
        "task_name": eval_task.name,
        "data": args.eval_data,
        "limit": args.eval_limit,
        "max_new_tokens": args.eval_max_new_tokens,
        "progress": False,
    }
    return common.train_and_report(
        trainer, training_args, report, summary, resume=args.resume, held_out=held_out, results=[results]
    )


def summary(report: dict) -> str:
    """Where things are, the first-loss check and accuracy before -> after."""
    out = Path(report["output_dir"])
    lines = [f"run {report['run_name']}: {report['pairs']} pairs"]
    verdict = {True: "ok", False: "CHECK FAILED, see log", None: "not checked"}[report["first_loss_ok"]]
    expected = report.get("first_loss_expected")
    expected = "-" if expected is None else f"{expected:.6f}"
    lines.append(f"first loss {report['first_loss']} ({verdict}; expected {expected}: {report.get('first_loss_note')})")
    lines += common.held_out_lines(report, out, train_log=True)
    return "\n".join(lines)


def make_parser():
    from trl import DPOConfig, ModelConfig

    options = ("num_train_epochs", "beta", "loss_type")
    parts = (DPOScriptArguments, DPOConfig, ModelConfig)
    return common.recipe_parser(parts, module="recipes.dpo", doc=__doc__, options=options, docs="docs/dpo.md")


if __name__ == "__main__":
    common.run_cli(make_parser, main)
