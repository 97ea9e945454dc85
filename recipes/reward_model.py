"""A Bradley-Terry reward model on verified preference pairs: a thin script around TRL's ``RewardTrainer``.

    # tiny CPU run (a ~100k-parameter local model; pairs from reference solutions vs the same with a wrong answer)
    python -m training_data.rollouts reference --task gsm8k_train --data tests/data/gsm8k/train.jsonl --limit 64 \\
        --out runs/tiny_reference_rollouts
    python -m recipes.reward_model --config recipes/configs/tiny/reward_model_cpu.yaml
    # one GPU, LoRA, pairs from the model's own GSM8K rollouts (docs/reward_model.md)
    python -m recipes.reward_model --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/reward_model_lora.yaml

``data`` is a rollouts file, a JSONL of pairs or a hub preference set; held-out pairs come from ``eval_data`` or from
the prompts ``eval_fraction`` sets aside. The loss, TRL's ``-log sigmoid(r_chosen - r_rejected - margin)``, is checked
on fixed scores before training, and since the new score head starts at zero the first logged loss must be
``log(1 + e^margin)``. Metrics go to ``report_to`` under ``rm/`` and always to ``<output_dir>/log.jsonl``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from recipes import checks, common
from rewards.reward_model import check_chat_template
from training_data.pairs import load_pairs, split_by_prompt

logger = logging.getLogger(__name__)
TOLERANCE = 1e-4
RM_KEYS = {
    "accuracy": "rm/train_pairwise_accuracy",
    "margin": "rm/train_margin",
    "loss": "rm/train_loss",
    "eval_accuracy": "rm/heldout_pairwise_accuracy",
    "eval_margin": "rm/heldout_margin",
    "eval_loss": "rm/heldout_loss",
}


@dataclass
class HeldOutPairs:
    """The held-out pairs and the loss's margin."""

    _argument_group_name = "held-out pairs and the loss"

    eval_data: str | None = field(default=None, metadata={"help": "held-out pairs (same kinds as data)"})
    eval_fraction: float = field(default=0.1, metadata={"help": "without eval_data: share of PROMPTS held out"})
    margin: float | None = field(default=None, metadata={"help": "BT margin m: loss -log sigmoid(r_c - r_r - m)"})


@dataclass
class RMScriptArguments(common.PairArguments, HeldOutPairs, common.RunArguments):
    """What the recipe adds to TRL's ``RewardConfig`` and ``ModelConfig`` (and to ``PairArguments``), in the order of
    the help's groups."""


def check_bt_loss(trainer, margin: float | None) -> dict:
    """Raise unless TRL's ``compute_loss`` on fixed scores gives -log sigmoid(1) = 0.3133 for a difference of 1 and
    ln 2 for a tie (each shifted by the margin); returns what it measured."""
    import torch
    from transformers.modeling_outputs import SequenceClassifierOutput

    class FixedScores(torch.nn.Module):
        def __init__(self, scores):
            super().__init__()
            self.scores = torch.tensor(scores).unsqueeze(-1)  # [2B, 1]: chosen half, then rejected half

        def forward(self, **inputs):
            return SequenceClassifierOutput(logits=self.scores)

    m, center = margin or 0.0, trainer.args.center_rewards_coefficient or 0.0  # centering adds c * mean((r_c + r_r)^2)
    inputs = {"input_ids": torch.zeros(2, 1, dtype=torch.long), "attention_mask": torch.ones(2, 1, dtype=torch.long)}
    if margin is not None:
        inputs["margin"] = torch.tensor([m])
    tokens = trainer._total_train_tokens
    measured = {}
    for name, scores, expected in (
        ("difference_1", [1.0, 0.0], math.log1p(math.exp(m - 1)) + center),
        ("tie", [0.0, 0.0], math.log1p(math.exp(m))),
    ):
        loss = trainer.compute_loss(FixedScores(scores), dict(inputs)).item()
        measured[name] = loss
        if abs(loss - expected) > TOLERANCE:
            raise RuntimeError(
                f"TRL's reward loss gave {loss:.6f} for scores {scores} (margin {m}), expected "
                f"{expected:.6f}: the trainer's loss is not Bradley-Terry"
            )
    for mode in trainer._metrics.values():  # the probe's numbers must not reach the first log
        mode.clear()
    trainer._total_train_tokens = tokens
    return measured


def rm_keys():
    """A callback that copies TRL's reward-model metrics under ``rm/`` (first in the list, so W&B sees them)."""
    from transformers import TrainerCallback

    class RMKeys(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            for key, new in RM_KEYS.items():
                if logs is not None and key in logs:
                    logs[new] = logs[key]

    return RMKeys()


def dropped_pairs(train: int, heldout: int, trainer, max_length: int | None) -> dict:
    """The pairs TRL's ``RewardTrainer`` left out as longer than ``max_length`` tokens, by split."""
    dropped = {
        "train": train - len(trainer.train_dataset),
        "heldout": heldout - len(trainer.eval_dataset),
        "max_length": max_length,
    }
    total = dropped["train"] + dropped["heldout"]
    if total and common.is_main_process(trainer.args):
        print(
            f"{total} of {train + heldout} pairs dropped ({dropped['train']} train, {dropped['heldout']} held-out): "
            f"the chosen or the rejected answer with its prompt is longer than max_length={max_length} tokens; "
            "raise max_length to keep them"
        )
    return dropped


def main(script_args, training_args, model_args):
    # the libraries load here, where a run starts: --help and a refused option never wait for them
    import torch
    import trl
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
    from trl.trainer.reward_trainer import suppress_seqcls_warning  # as trl.RewardTrainer loads a classifier

    from recipes.first_loss import REWARD_MODEL_START, FirstLossCheck

    # Validate everything that can be checked without loading weights: model path, tokenizer, pairs
    args, model_path = script_args, model_args.model_name_or_path
    common.build_tiny_model_if_asked(args, model_args)  # the checks below read its config and tokenizer
    with checks.config_errors():
        checks.check_model(model_args)  # built above when asked: the tokenizer check below reads it
        check_chat_template(model_path)
        checks.check_quantization(model_args.load_in_4bit, model_args.load_in_8bit, model_args.use_peft)
        options = {"seed": training_args.seed, "margin": args.margin, **args.pair_options()}
        pairs, pair_report = load_pairs(args.data, **options)
        if args.eval_data:
            train, heldout = pairs, load_pairs(args.eval_data, **options)[0]
        else:
            train, heldout = split_by_prompt(pairs, args.eval_fraction, training_args.seed)

    # Run name, and the resolved config (secrets redacted) beside the outputs
    identity = {"name": f"rm-{common.short_model_name(model_path)}-s{training_args.seed}"}
    out, _ = common.start_run(script_args, training_args, model_args, identity)

    # Model: a one-label score head on the base; a NEW head starts at zero, so the first loss is known
    kwargs = common.model_init_kwargs(model_args) | {
        "num_labels": 1,
        "quantization_config": trl.get_quantization_config(model_args),
    }
    architectures = AutoConfig.from_pretrained(model_path).architectures or []
    new_head = not any(a.endswith("ForSequenceClassification") for a in architectures)  # a causal LM: no head yet
    with suppress_seqcls_warning():
        model = AutoModelForSequenceClassification.from_pretrained(model_path, **kwargs)
    if new_head:
        torch.nn.init.zeros_(model.score.weight)
    if model_args.use_peft:
        model_args.lora_task_type = "SEQ_CLS"  # peft then trains and saves the score head with the adapters
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    margin = args.margin or 0.0  # a zero head ties every pair: the first loss is log(1 + e^margin)
    first = FirstLossCheck(math.log1p(math.exp(margin)), f"log(1 + e^{margin:g})", TOLERANCE, REWARD_MODEL_START)
    checked = [first] if new_head else []  # a trained head: its first loss is not known
    callbacks = [common.JsonlLogCallback(out / "log.jsonl"), *checked]
    trainer = trl.RewardTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=heldout,
        processing_class=tokenizer,
        peft_config=trl.get_peft_config(model_args),
        callbacks=callbacks,
    )
    trainer.callback_handler.callbacks.insert(0, rm_keys())
    dropped = dropped_pairs(len(train), len(heldout), trainer, training_args.max_length)
    report = {
        "run_name": training_args.run_name,
        "output_dir": str(out),
        "pairs": len(train) + len(heldout),
        "dropped_over_max_length": dropped,
        "train_pairs": len(trainer.train_dataset),
        "heldout_pairs": len(trainer.eval_dataset),
        "pair_report": pair_report,
        "new_head": new_head,
    }
    if not len(trainer.train_dataset):
        raise ValueError(f"every pair is longer than max_length={training_args.max_length} tokens: raise max_length")

    # Check the loss, train (resuming after a kill), evaluate on held-out pairs, save
    report["bt_loss_check"] = check_bt_loss(trainer, args.margin)

    def evaluate_and_merge() -> dict:  # the held-out pairs, then LoRA merged: the saved folder is a plain classifier
        final = trainer.evaluate()
        if model_args.use_peft:
            trainer.model = trainer.model.merge_and_unload()  # the reward loads it as it is
        return {"heldout_pairwise_accuracy": final["eval_accuracy"], "heldout_loss": final["eval_loss"]}

    def results() -> dict:  # the first-loss check (a trained head: not checked)
        return first.report() if new_head else dict.fromkeys(first.report())

    return common.train_and_report(
        trainer, training_args, report, summary, resume=args.resume, before_save=evaluate_and_merge, results=[results]
    )


def summary(report: dict) -> str:
    """Where the model is, the first-loss check, the held-out pairwise accuracy and how GRPO uses it."""
    ok = report["first_loss_ok"]
    return (
        f"reward model {report['output_dir']}: {report['train_pairs']} train / {report['heldout_pairs']} held-out "
        f"pairs; first loss {report['first_loss']} ({'ok' if ok else 'CHECK FAILED' if ok is False else '-'});"
        f" held-out pairwise accuracy {report['heldout_pairwise_accuracy']:.3f}\n"
        f"use it in GRPO: reward_funcs: [reward_model] with reward_model_path: {report['output_dir']}"
    )


def make_parser():
    from trl import ModelConfig, RewardConfig

    options = ("num_train_epochs", "max_length")
    parts = (RMScriptArguments, RewardConfig, ModelConfig)
    return common.recipe_parser(
        parts, module="recipes.reward_model", doc=__doc__, options=options, docs="docs/reward_model.md"
    )


if __name__ == "__main__":
    common.run_cli(make_parser, main)
