"""DPO on answers the checker labelled: a thin script around TRL's ``DPOTrainer``.

    # tiny CPU run (a ~100k-parameter local model; pairs from the data set's own solutions, see the config)
    python -m training_data.rollouts reference --task gsm8k_train --data ../shared/data/gsm8k/train.jsonl --limit 16 \\
        --out runs/tiny_reference_rollouts
    python -m recipes.dpo --config recipes/configs/tiny/dpo_cpu.yaml
    # one GPU, LoRA, GSM8K, pairs from the model's own rollouts (docs/dpo.md); flags override the YAML
    python -m recipes.dpo --config recipes/configs/gsm8k/qwen2.5-0.5b-instruct/dpo_lora.yaml \\
        --data runs/rollouts/gsm8k_train/rollouts.jsonl --beta 0.05

``data`` is a rollouts file of ``python -m training_data.rollouts sample`` (chosen = a correct answer, rejected = a
wrong one to the same problem, built by ``training_data.pairs``), a JSONL of pairs, or a hub preference data set with
prompt/chosen/rejected columns. Everything that can fail is checked before a model is loaded. Metrics go to
``report_to`` and always to ``<output_dir>/log.jsonl``. The first step is always logged, whatever ``logging_steps``
says (``FirstLossCheck`` asks for it), because the policy starts equal to the reference: rewards/chosen =
rewards/rejected = 0, and the log-sigmoid losses are ln 2 = 0.6931 each, times their ``loss_weights``. With
``use_weighting`` (WPO) the first loss depends on the model and the batch and is not predicted; the rewards still are.
The recipe warns loudly when the first step shows a reference that is not the starting policy.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback

from recipes import validate
from recipes.model_args import model_init_kwargs

logger = logging.getLogger(__name__)

# TRL 1.16 DPOConfig.loss_type values; at the start (policy == reference) the first three give ln 2 per weight
LN2_LOSSES = ("sigmoid", "sigmoid_norm", "robust")
DPO_LOSSES = (*LN2_LOSSES, "hinge", "ipo", "exo_pair", "nca_pair", "bco_pair", "sppo_hard", "aot", "aot_unpaired",
              "apo_zero", "apo_down", "discopop", "sft")  # fmt: skip
FIRST_LOSS_TOLERANCE = 1e-3


@dataclass
class DPOScriptArguments:
    """What the recipe adds to TRL's ``DPOConfig`` and ``ModelConfig``."""

    data: str = field(default="", metadata={"help": "rollouts .jsonl, pairs .jsonl or hub preference data set"})
    data_split: str = field(default="train", metadata={"help": "split of a hub data set"})
    max_pairs_per_problem: int = field(default=4, metadata={"help": "pairs built from one problem (0: no cap)"})
    length_tolerance: float | None = field(
        default=None, metadata={"help": "pair only answers whose |a-b|/max(a,b) token lengths are within this"}
    )
    eval_task: str = field(default="gsm8k", metadata={"help": "held-out task evaluated before and after training"})
    eval_data: str | None = field(default=None, metadata={"help": "hub id or local .jsonl for eval_task"})
    eval_limit: int = field(default=100, metadata={"help": "problems evaluated before and after training (0: skip)"})
    eval_max_new_tokens: int | None = field(default=None, metadata={"help": "default: the task's eval default"})
    build_tiny_model: bool = field(
        default=False, metadata={"help": "build recipes.tiny_model at model path if missing"}
    )


def check_dpo_loss(loss_types: list[str], loss_weights: list[float] | None) -> None:
    """Every ``loss_type`` must be one TRL's DPO loss knows (TRL itself notices only inside the first step).

    >>> check_dpo_loss(["sigmoid"], None)
    >>> check_dpo_loss(["sigmiod"], None)
    Traceback (most recent call last):
    ...
    ValueError: loss_type ['sigmiod'] holds unknown DPO loss(es) ['sigmiod']: use names from ['aot', 'aot_unpaired', 'apo_down', 'apo_zero', 'bco_pair', 'discopop', 'exo_pair', 'hinge', 'ipo', 'nca_pair', 'robust', 'sft', 'sigmoid', 'sigmoid_norm', 'sppo_hard'] (loss_type: [sigmoid] in the config)
    """  # noqa: E501
    unknown = [t for t in loss_types if t not in DPO_LOSSES]
    if not loss_types or unknown:
        raise ValueError(
            f"loss_type {list(loss_types)} holds unknown DPO loss(es) {unknown}: use names from {sorted(DPO_LOSSES)} "
            "(loss_type: [sigmoid] in the config)"
        )
    if loss_weights is not None and len(loss_weights) != len(loss_types):
        raise ValueError(f"loss_weights {loss_weights} needs one weight per loss_type {loss_types}")


def expected_first_loss(
    loss_types: list[str], loss_weights: list[float] | None, use_weighting: bool
) -> tuple[float | None, str]:
    """The loss TRL reports when policy == reference, and how it follows; ``None`` (and why) when it cannot be known
    without the model and the data.

    TRL 1.16 sums ``loss_weights[i] * mean(per-pair loss of loss_type[i])``. At the start every log-ratio is 0, so each
    log-sigmoid term (``sigmoid``, ``sigmoid_norm``, ``robust`` at any label smoothing) is ln 2 per pair.

    >>> loss, how = expected_first_loss(["sigmoid", "robust"], [0.7, 0.2], False)
    >>> round(loss, 4), how
    (0.6238, 'ln 2 x (0.7 + 0.2)')
    >>> expected_first_loss(["sigmoid"], [0.5], True)[0] is None
    True
    """
    weights = loss_weights or [1.0] * len(loss_types)
    if use_weighting:
        return None, (
            "not predicted: use_weighting (WPO) multiplies each pair's loss by weights computed from the policy's own "
            "token probabilities on that pair, so it depends on the model and the batch"
        )
    others = sorted(set(loss_types) - set(LN2_LOSSES))
    if others:
        return None, f"not predicted: loss_type {others} is not a log-sigmoid loss (not ln 2 at the start)"
    return math.log(2) * sum(weights), "ln 2 x (" + " + ".join(f"{w:g}" for w in weights) + ")"


class FirstLossCheck(TrainerCallback):
    """Warns loudly when the first step shows a reference that is not the starting policy.

    At step 1 the policy is the reference, so the implicit rewards (rewards/chosen, rewards/rejected) are 0 and the
    loss is ``expected_loss`` (``expected_first_loss``; ``None``: only the rewards are checked, ``note`` says why).
    Anything else means the reference was loaded differently (another checkpoint, dtype, adapter or dropout).
    The callback makes the trainer log step 1 whatever ``logging_steps`` is, so the loss it reads is step 1's alone.
    ``self.first_loss`` and ``self.ok`` hold the outcome (``ok`` stays None when nothing could be checked: a run
    resumed from a checkpoint starts past step 1, with a policy that is no longer the reference).
    """

    def __init__(self, expected_loss: float | None, note: str = "", tolerance: float = FIRST_LOSS_TOLERANCE):
        self.expected_loss, self.note, self.tolerance = expected_loss, note, tolerance
        self.first_loss: float | None = None
        self.ok: bool | None = None
        self.resumed_at: int | None = None
        self._seen_step = False

    def on_step_end(self, args, state, control, **kwargs):
        if not self._seen_step and state.global_step > 1:
            self.resumed_at = state.global_step
            logger.info(
                "first step seen is %d (resumed): the policy == reference check does not apply", state.global_step
            )
        self._seen_step = True
        if state.global_step == 1:
            control.should_log = True  # step 1's loss, not a mean over the first logging_steps steps
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.ok is not None or self.resumed_at is not None or not logs or "loss" not in logs:
            return
        if state.global_step != 1:
            logger.warning("first loss logged at step %d, not 1: cannot check policy == reference", state.global_step)
            self.ok = False
            return
        self.first_loss = logs["loss"]
        problems = [
            f"rewards/{side} = {logs[f'rewards/{side}']:.6f}, not 0"
            for side in ("chosen", "rejected")
            if abs(logs.get(f"rewards/{side}", 0.0)) > self.tolerance
        ]
        if self.expected_loss is not None and abs(self.first_loss - self.expected_loss) > self.tolerance:
            problems.insert(0, f"first loss {self.first_loss:.6f}, expected {self.expected_loss:.6f} ({self.note})")
        self.ok = not problems
        if problems:
            logger.warning(
                "\n%s\nDPO REFERENCE IS NOT THE STARTING POLICY: %s.\nThe reference model differs from the model being "
                "trained (another checkpoint, dtype, adapter, quantization or dropout); the KL anchor is wrong.\n%s",
                "!" * 100, "; ".join(problems), "!" * 100,
            )  # fmt: skip
        elif self.expected_loss is None:
            logger.info("first DPO loss %.6f (%s); implicit rewards 0: the reference is the starting policy",
                        self.first_loss, self.note)  # fmt: skip
        else:
            logger.info("first DPO loss %.6f = %s: the reference is the starting policy", self.first_loss, self.note)


def main(script_args, training_args, model_args):
    from transformers import AutoTokenizer
    from trl import DPOTrainer, get_peft_config, get_quantization_config

    from eval.monitors import JsonlLogCallback
    from eval.run import evaluate
    from eval.tasks import get_task
    from training_data.pairs import load_preference_dataset

    # Validate everything that can be checked without a model, data included
    args = script_args
    with validate.config_errors():  # bad input stops here, before any model loads (one line on the CLI)
        if not args.data:
            raise ValueError(
                "no data: set data: to a rollouts file (python -m training_data.rollouts sample), pairs or a hub set"
            )
        check_dpo_loss(training_args.loss_type, training_args.loss_weights)
        eval_task = get_task(args.eval_task)
        validate.check_quantization(model_args.load_in_4bit, model_args.load_in_8bit, model_args.use_peft)
        pairs, pair_report = load_preference_dataset(
            args.data,
            split=args.data_split,
            max_pairs_per_problem=args.max_pairs_per_problem or None,
            length_tolerance=args.length_tolerance,
            seed=training_args.seed,
        )
        if pair_report:
            print("pairs built from the rollouts: " + json.dumps(pair_report))

    # Run identity for W&B grouping, and the resolved config (secrets redacted) beside the outputs
    adapter = "qlora" if model_args.load_in_4bit else "lora" if model_args.use_peft else "full"
    method = "dpo-" + "+".join(training_args.loss_type)
    identity = validate.run_identity(
        eval_task.name, model_args.model_name_or_path, method, training_args.beta, ["verified_pairs"],
        training_args.seed, adapter,
    )  # fmt: skip
    training_args.run_name = training_args.run_name or identity["name"]
    os.environ.setdefault("WANDB_RUN_GROUP", identity["group"])
    os.environ.setdefault("WANDB_TAGS", ",".join(identity["tags"]))
    out = Path(training_args.output_dir)
    validate.save_resolved_config(out / "resolved_config.json", script_args, training_args, model_args)

    # Model (+LoRA / QLoRA): TRL loads it and, without LoRA, the reference from the same path
    if args.build_tiny_model and not Path(model_args.model_name_or_path).exists():
        from recipes.tiny_model import save_tiny_model

        save_tiny_model(model_args.model_name_or_path)
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args.model_init_kwargs)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    first_loss_check = FirstLossCheck(
        *expected_first_loss(training_args.loss_type, training_args.loss_weights, training_args.use_weighting)
    )  # it also makes the trainer log step 1, whatever logging_steps is
    trainer = DPOTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=pairs,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        callbacks=[JsonlLogCallback(out / "log.jsonl"), first_loss_check],
    )
    dropped = len(pairs) - len(trainer.train_dataset)
    if dropped:
        logger.warning("%d of %d pairs dropped: their prompt alone fills max_length=%s", dropped, len(pairs),
                       training_args.max_length)  # fmt: skip
    if dropped == len(pairs):
        raise ValueError(f"every pair's prompt fills max_length={training_args.max_length} tokens: raise max_length")

    # Evaluate before, train, save, evaluate after
    eval_kwargs = {"data": args.eval_data, "limit": args.eval_limit, "max_new_tokens": args.eval_max_new_tokens,
                   "progress": False}  # fmt: skip
    report = {
        "run_name": training_args.run_name,
        "output_dir": str(out),
        "pairs": len(pairs),
        "pair_report": pair_report,
    }
    if args.eval_limit:
        report["before"] = evaluate(
            trainer.model, tokenizer, eval_task.name, out_dir=out / "eval_before", **eval_kwargs
        )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(str(out))
    if args.eval_limit:
        report["after"] = evaluate(trainer.model, tokenizer, eval_task.name, out_dir=out / "eval_after", **eval_kwargs)
        trainer.log({"final_eval/accuracy_before": report["before"]["accuracy"],
                     "final_eval/accuracy_after": report["after"]["accuracy"]})  # fmt: skip
    report["first_loss"], report["first_loss_ok"] = first_loss_check.first_loss, first_loss_check.ok
    report["first_loss_expected"], report["first_loss_note"] = first_loss_check.expected_loss, first_loss_check.note
    if trainer.accelerator.is_main_process:
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
        print(summary(report, out))
    trainer.accelerator.end_training()
    return report


def summary(report: dict, out: Path) -> str:
    """Where things are, the first-loss check and accuracy before -> after."""
    lines = [f"run {report['run_name']}: {report['pairs']} pairs"]
    verdict = {True: "ok", False: "CHECK FAILED, see log", None: "not checked"}[report["first_loss_ok"]]
    expected = report.get("first_loss_expected")
    expected = "-" if expected is None else f"{expected:.6f}"
    lines.append(f"first loss {report['first_loss']} ({verdict}; expected {expected}: {report.get('first_loss_note')})")
    if "before" in report and "after" in report:
        b, a = report["before"], report["after"]
        lines.append(f"held-out accuracy {b['accuracy']:.3f} -> {a['accuracy']:.3f} (n={a['n']})")
        lines.append(f"eval reports: {out / 'eval_before'} and {out / 'eval_after'} (summary.md, results.json)")
    lines.append(f"train log (JSON lines): {out / 'log.jsonl'}; config: {out / 'resolved_config.json'}")
    return "\n".join(lines)


def make_parser():
    from trl import DPOConfig, ModelConfig, TrlParser

    return TrlParser((DPOScriptArguments, DPOConfig, ModelConfig))


if __name__ == "__main__":
    validate.run_cli(make_parser, main)
