"""The lab's warm start: a ~1.4M-parameter Qwen2 taught by SFT to solve a modest share of held-out problems.

GRPO learns only from groups whose completions differ in reward, so the starting policy must solve some problems
and miss others: a random model gets every group all-wrong (no signal), a converged one all-right. The warm start
trains with TRL's ``SFTTrainer`` (loss on the completion only) on generated problems and STOPS as soon as
accuracy on the VALIDATION set reaches a threshold (``stop_at_accuracy``): the step at which a tiny model "gets it"
varies with the seed (it sits near chance for a few hundred steps, then jumps), so a fixed step count would land
anywhere from 5% to 70%. The held-out set, which measures the lab's before/after accuracy, plays no part in the
choice: it is evaluated once, after the stop, and recorded beside the validation accuracy.

The result is cached under ``<cache_root>/warmstart-<hash of the settings, the prompt and the splits>``; a second
run with the same settings reuses it. ``warmstart.json`` in that folder records the settings, the validation curve,
``validation_accuracy`` at the stop, ``heldout_accuracy`` of the saved model and the time it took.

    python -m cpu_lab.warmstart     # trains or reuses the warm start, links runs/lab/warmstart, writes runs/lab/data
    python -m cpu_lab.warmstart --seed 1 --stop-at-accuracy 0.4
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cpu_lab import problems
from cpu_lab.problems import Difficulty, heldout_problems, train_problems, validation_problems
from eval.jsonl import write_jsonl
from recipes.tiny_model import CHAT_TEMPLATE, build_model, build_tokenizer, default_corpus

logger = logging.getLogger(__name__)

TASK = "lab"  # GSM8K-shaped answers (same rewards and extractor as the benchmark), a short instruction
# Qwen's chat template without its default system prompt: 11 tokens of every sequence, ~10% of SFT and GRPO compute.
LAB_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{% endif %}",
    "",
)
DEFAULT_CACHE_ROOT = Path("runs/lab/cache")
LAB_ROOT = Path("runs/lab")  # where the lab configs look: runs/lab/warmstart (link) and runs/lab/data/*.jsonl
GRPO_TRAIN_SIZE = 2000  # prompts for GRPO (8 per step): far more than a lab run uses


@dataclass(frozen=True)
class WarmStartSettings:
    """Everything that determines the warm start (its hash names the cache folder)."""

    seed: int = 0
    difficulty: Difficulty = field(default_factory=Difficulty)
    # tokenizer and model: 1.41M parameters learn the task in 700-1,200 SFT steps (docs/cpu_lab.md)
    vocab_size: int = 600  # merges the names and items of the problems: ~20% shorter sequences than 400
    hidden_size: int = 192
    num_layers: int = 3
    num_attention_heads: int = 6
    num_key_value_heads: int = 2
    intermediate_size: int = 576
    # SFT
    n_train: int = 20_000  # distinct generated problems; batches cycle through them
    batch_size: int = 32  # half of the feasibility run's 64: sequences here are longer (chat template + instruction)
    learning_rate: float = 1e-3  # tiny models from scratch want a large step
    warmup_steps: int = 50
    max_steps: int = 2000  # give up after this many steps even below the threshold
    # stopping rule: on the validation set; the held-out set is evaluated once, after the stop
    eval_every: int = 50  # steps between validation evaluations
    validation_n: int = 200  # validation problems per evaluation (as many as the held-out set: the same noise)
    heldout_n: int = 200  # held-out problems: the final evaluation here, and GRPO's before/after (cpu_lab/problems.py)
    stop_at_accuracy: float = 0.3  # stop at the first validation accuracy at or above this (aim: 20-60% for GRPO)
    max_new_tokens: int = 32  # the longest solution (2 steps) is ~25 tokens

    def __post_init__(self):
        if not 0.0 < self.stop_at_accuracy <= 1.0:
            raise ValueError(f"stop_at_accuracy must be in (0, 1], got {self.stop_at_accuracy}: e.g. 0.25")
        if self.eval_every < 1 or self.max_steps < 1:
            raise ValueError(f"eval_every and max_steps must be >= 1, got {self.eval_every}, {self.max_steps}")

    def key(self) -> str:
        """A short hash of the settings.

        >>> WarmStartSettings().key() == WarmStartSettings().key() != WarmStartSettings(seed=1).key()
        True
        """
        # The prompt the model is trained on is part of what it learned: a changed instruction or chat template
        # must not silently reuse a model warm-started on the old one. Nor may a change of the splits (their seeds, or
        # which one the stopping rule reads): the SFT data leaves them out, and the stop depends on them.
        from eval.tasks import get_task

        prompt = {"instruction": get_task(TASK).instruction, "chat_template": LAB_CHAT_TEMPLATE}
        splits = {
            "heldout_seed": problems.HELDOUT_SEED,
            "validation_seed": problems.VALIDATION_SEED,
            "stop_on": "validation",
        }
        key = {**asdict(self), **prompt, "splits": splits}
        return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def lab_tokenizer(settings: WarmStartSettings):
    """Byte-level BPE trained on generated problems rendered with the chat template, plus the template strings.

    >>> tok = lab_tokenizer(WarmStartSettings())
    >>> tok.convert_ids_to_tokens(tok("assistant 12")["input_ids"])  # whole words, one token per digit
    ['assistant', 'Ġ', '1', '2']
    """
    from eval.tasks import get_task

    task = get_task(TASK)
    rows = train_problems(2000, settings.seed, settings.difficulty, settings.heldout_n, settings.validation_n)
    tok = build_tokenizer(
        settings.vocab_size, chat_template=LAB_CHAT_TEMPLATE
    )  # only to render the template; retrained below
    texts = [
        tok.apply_chat_template(
            [*task.prompt(r["question"]), {"role": "assistant", "content": r["answer"]}], tokenize=False
        )
        for r in rows
    ]
    return build_tokenizer(settings.vocab_size, corpus=default_corpus() + texts, chat_template=LAB_CHAT_TEMPLATE)


def sft_rows(problems: list[dict]) -> list[dict]:
    """Conversational prompt-completion rows: SFTTrainer then computes the loss on the completion only."""
    from eval.tasks import get_task

    task = get_task(TASK)
    return [
        {"prompt": task.prompt(p["question"]), "completion": [{"role": "assistant", "content": p["answer"]}]}
        for p in problems
    ]


def greedy_accuracy(model, tokenizer, data_path: Path, limit: int, max_new_tokens: int) -> float:
    """Greedy accuracy on the problems in ``data_path``, through the recipes' evaluation (``eval.run.evaluate``)."""
    from eval.run import evaluate

    was_training = model.training
    model.eval()
    try:
        result = evaluate(
            model,
            tokenizer,
            TASK,
            data=str(data_path),
            limit=limit,
            max_new_tokens=max_new_tokens,
            batch_size=100,
            progress=False,
        )
    finally:
        model.train(was_training)
    return float(result["accuracy"])


def warm_start(
    settings: WarmStartSettings = WarmStartSettings(), cache_root: str | Path = DEFAULT_CACHE_ROOT, accuracy_fn=None
) -> Path:
    """Train (or reuse from the cache) the warm start for ``settings``; return its folder.

    ``accuracy_fn(model, tokenizer, data_path, limit, max_new_tokens) -> float`` defaults to ``greedy_accuracy``.
    The stopping rule calls it on ``validation.jsonl`` every ``eval_every`` steps; after the stop it is called once on
    ``heldout.jsonl``.
    """
    out = Path(cache_root) / f"warmstart-{settings.key()}"
    if (out / "warmstart.json").exists():
        logger.info("reusing cached warm start %s", out)
        return out
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    accuracy_fn = accuracy_fn or greedy_accuracy
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    validation = validation_problems(settings.difficulty, settings.validation_n, settings.heldout_n)
    validation_path = write_jsonl(validation, tmp / "validation.jsonl")
    heldout_path = write_jsonl(heldout_problems(settings.difficulty, settings.heldout_n), tmp / "heldout.jsonl")
    tokenizer = lab_tokenizer(settings)
    model = build_model(
        tokenizer,
        hidden_size=settings.hidden_size,
        num_layers=settings.num_layers,
        seed=settings.seed,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_key_value_heads,
        intermediate_size=settings.intermediate_size,
    )
    train = train_problems(
        settings.n_train, settings.seed, settings.difficulty, settings.heldout_n, settings.validation_n
    )
    dataset = Dataset.from_list(sft_rows(train))
    curve: list[dict] = []
    started = time.monotonic()

    class StopOnValidationAccuracy(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % settings.eval_every and state.global_step < settings.max_steps:
                return
            acc = accuracy_fn(model, tokenizer, validation_path, settings.validation_n, settings.max_new_tokens)
            curve.append({"step": state.global_step, "validation_accuracy": acc, "seconds": time.monotonic() - started})
            progress = {"step": state.global_step, "validation_accuracy": acc}  # for a progress display (cpu_lab.demo)
            logger.info("warm start step %d: validation accuracy %.3f", state.global_step, acc, extra=progress)
            if acc >= settings.stop_at_accuracy:
                control.should_training_stop = True

    config = SFTConfig(
        output_dir=str(tmp / "trainer"),
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant_with_warmup",  # the stopping rule, not a decay, ends training
        warmup_steps=settings.warmup_steps,
        adam_beta2=0.98,
        weight_decay=0.01,
        max_grad_norm=1.0,
        max_length=256,
        completion_only_loss=True,
        gradient_checkpointing=False,  # slower for a model this small
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        logging_steps=settings.eval_every,
        save_strategy="no",
        report_to="none",
        seed=settings.seed,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StopOnValidationAccuracy()],
    )
    trainer.train()
    final = curve[-1] if curve else {"step": 0, "validation_accuracy": None}
    stop_accuracy = final["validation_accuracy"]
    # The held-out set is read once, after the stop, by the model the stopping rule chose: it chose nothing.
    heldout_acc = accuracy_fn(model, tokenizer, heldout_path, settings.heldout_n, settings.max_new_tokens)
    logger.info("warm start stopped at step %d: held-out accuracy %.3f", final["step"], heldout_acc)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(tmp / "trainer", ignore_errors=True)
    record = {
        "settings": asdict(settings),
        "params": model.num_parameters(),
        "steps": final["step"],
        "validation_accuracy": stop_accuracy,  # at the stop: what the stopping rule saw
        "heldout_accuracy": heldout_acc,  # of the saved model, measured once after the stop
        "reached_threshold": stop_accuracy is not None and stop_accuracy >= settings.stop_at_accuracy,
        "seconds": round(time.monotonic() - started, 1),
        "curve": curve,
    }
    (tmp / "warmstart.json").write_text(json.dumps(record, indent=1))
    if not record["reached_threshold"]:
        logger.warning(
            "warm start stopped at max_steps=%d with validation accuracy %s < %s: raise max_steps or lower "
            "stop_at_accuracy",
            settings.max_steps,
            stop_accuracy,
            settings.stop_at_accuracy,
        )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def prepare_lab(
    settings: WarmStartSettings = WarmStartSettings(), cache_root: str | Path = DEFAULT_CACHE_ROOT, root=LAB_ROOT
) -> dict[str, Path]:
    """The warm start (trained or reused), linked at ``<root>/warmstart``, and the GRPO data the lab configs read:
    ``<root>/data/train.jsonl`` (fresh problems, seed + 1, none in the held-out or validation set) and
    ``<root>/data/heldout.jsonl`` (the fixed held-out set).
    """
    model_dir = warm_start(settings, cache_root)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    link = root / "warmstart"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(model_dir.resolve(), target_is_directory=True)
    heldout = heldout_problems(settings.difficulty, settings.heldout_n)
    train = train_problems(
        GRPO_TRAIN_SIZE, settings.seed + 1, settings.difficulty, settings.heldout_n, settings.validation_n
    )
    return {
        "model": model_dir,
        "link": link,
        "train": write_jsonl(train, root / "data" / "train.jsonl"),
        "heldout": write_jsonl(heldout, root / "data" / "heldout.jsonl"),
    }


def recipe_flags(paths: dict[str, Path], model: str = "model") -> list[str]:
    """The GRPO recipe's flags that point a run at a prepared lab (``prepare_lab``): ``paths[model]`` as the policy
    (the cached warm start, or its ``link``), the lab's training problems and its held-out set."""
    return [
        "--model_name_or_path",
        str(paths[model]),
        "--data",
        str(paths["train"]),
        "--eval_data",
        str(paths["heldout"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop-at-accuracy", type=float, default=WarmStartSettings.stop_at_accuracy)
    parser.add_argument("--max-steps", type=int, default=WarmStartSettings.max_steps)
    parser.add_argument("--cache-root", default=str(DEFAULT_CACHE_ROOT))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    settings = WarmStartSettings(seed=args.seed, stop_at_accuracy=args.stop_at_accuracy, max_steps=args.max_steps)
    paths = prepare_lab(settings, args.cache_root)
    record = json.loads((paths["model"] / "warmstart.json").read_text())
    print(
        f"warm start: {paths['model']} (step {record['steps']}, validation accuracy {record['validation_accuracy']} "
        f"at the stop, held-out accuracy {record['heldout_accuracy']})"
    )
    print(f"linked at {paths['link']}; GRPO data: {paths['train']}, held-out: {paths['heldout']}")


if __name__ == "__main__":
    main()
