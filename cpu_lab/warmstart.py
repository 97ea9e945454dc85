"""The lab's warm start: a ~1.4M-parameter Qwen2 taught by SFT to solve a modest share of the problems.

GRPO needs a policy that solves some problems and misses others (a random model's groups are all wrong, a converged
one's all right). The warm start runs ``recipes/configs/lab/sft_lab_warmstart.yaml`` through ``recipes.sft`` and stops
as soon as validation accuracy reaches ``stop_at_accuracy``: a tiny model sits near chance for a few hundred steps and
then jumps, at a step that varies with the seed, so a fixed step count would land anywhere from 5% to 70%. The held-out
set plays no part in the stop. The result is cached under ``<cache_root>/warmstart-<hash of everything it depends on>``.

    python -m cpu_lab.warmstart     # trains or reuses the warm start, links runs/lab/warmstart, writes runs/lab/data
    python -m cpu_lab.warmstart --seed 1 --stop-at-accuracy 0.4
    python -m cpu_lab.warmstart --inputs runs/lab/sft_inputs   # only the recipe's inputs, to run the config by hand
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from safetensors import safe_open

from cpu_lab import matrix, problems
from cpu_lab.dataclass_flags import add_fields, from_args
from cpu_lab.problems import TASK, Difficulty, dev_problems, heldout_problems, train_problems
from eval.jsonl import write_jsonl
from eval.tasks import get_task
from recipes.parser import load_config

logger = logging.getLogger(__name__)

# The tiny model's chat template (Qwen's turns, recipes.tiny_model.CHAT_TEMPLATE) without its default system prompt:
# 11 tokens of every sequence, ~10% of SFT and GRPO compute.
LAB_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
DEFAULT_CACHE_ROOT = Path("runs/lab/cache")
LAB_ROOT = Path("runs/lab")  # where the lab configs look: runs/lab/warmstart (link) and runs/lab/data/*.jsonl
GRPO_TRAIN_SIZE = 2000  # prompts for GRPO (8 per step): far more than a lab run uses
SFT_CONFIG_NAME = "recipes/configs/lab/sft_lab_warmstart.yaml"  # the warm start's SFT recipe config
SFT_CONFIG = Path(__file__).resolve().parents[1] / SFT_CONFIG_NAME
_SFT = load_config(SFT_CONFIG)
# WarmStartSettings field -> the SFT recipe's flag that carries it (the config's value is the field's default)
RECIPE_FLAGS = {
    "seed": "seed",
    "batch_size": "per_device_train_batch_size",
    "learning_rate": "learning_rate",
    "warmup_steps": "warmup_steps",
    "max_steps": "max_steps",
    "eval_every": "validation_steps",
    "validation_n": "validation_limit",
    "heldout_n": "eval_limit",
    "stop_at_accuracy": "stop_at_accuracy",
    "max_new_tokens": "eval_max_new_tokens",
}
INPUT_KEYS = ("model_name_or_path", "data", "eval_data", "validation_data", "output_dir")  # paths: set per run


@dataclass(frozen=True)
class WarmStartSettings:
    """Everything that determines the warm start (its hash names the cache folder); SFT defaults are the config's."""

    seed: int = field(default=_SFT["seed"], metadata={"help": "seed of the untrained model, the problems and SFT"})
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
    batch_size: int = _SFT["per_device_train_batch_size"]
    learning_rate: float = _SFT["learning_rate"]
    warmup_steps: int = _SFT["warmup_steps"]
    max_steps: int = field(
        default=_SFT["max_steps"], metadata={"help": "most SFT steps, if the accuracy is not reached"}
    )
    # stopping rule: on the validation set; the held-out set plays no part in it
    eval_every: int = _SFT["validation_steps"]
    validation_n: int = _SFT["validation_limit"]
    heldout_n: int = _SFT["eval_limit"]  # the final evaluation here, and GRPO's before/after (cpu_lab/problems.py)
    stop_at_accuracy: float = field(
        default=_SFT["stop_at_accuracy"], metadata={"help": "SFT stops at this validation accuracy, in (0, 1]"}
    )
    max_new_tokens: int = _SFT["eval_max_new_tokens"]

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
        # which one the stopping rule reads): the SFT data leaves them out, and the stop depends on them. Nor a change
        # of the config's other settings (optimizer, scheduler, sequence length).
        prompt = {"instruction": get_task(TASK).instruction, "chat_template": LAB_CHAT_TEMPLATE}
        splits = {
            "heldout_seed": problems.TEST_SEED,
            "validation_seed": problems.DEV_SEED,
            "kept_apart_on": "solution",  # splits share no worked solution with training
            "stop_on": "validation",
        }
        config = {k: v for k, v in _SFT.items() if k not in INPUT_KEYS and k not in RECIPE_FLAGS.values()}
        key = {**asdict(self), **prompt, "splits": splits, "sft_config": config}
        return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def lab_tokenizer(settings: WarmStartSettings):
    """Byte-level BPE trained on generated problems rendered with the chat template, plus the template strings.

    >>> tok = lab_tokenizer(WarmStartSettings())
    >>> tok.convert_ids_to_tokens(tok("assistant 12")["input_ids"])  # whole words, one token per digit
    ['assistant', 'Ġ', '1', '2']
    """
    from recipes.tiny_model import build_tokenizer, default_corpus  # torch, transformers: ~3 s that --help does not pay

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


def write_inputs(settings: WarmStartSettings, folder: str | Path) -> dict[str, Path]:
    """What the SFT config reads: the untrained model with the lab's tokenizer (``init/``) and the three data files."""
    from recipes.tiny_model import build_model  # as in lab_tokenizer

    folder = Path(folder)
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
    model.save_pretrained(folder / "init")
    tokenizer.save_pretrained(folder / "init")
    train = train_problems(
        settings.n_train, settings.seed, settings.difficulty, settings.heldout_n, settings.validation_n
    )
    validation = dev_problems(settings.difficulty, settings.validation_n, settings.heldout_n)
    return {
        "model_name_or_path": folder / "init",
        "data": write_jsonl(train, folder / "train.jsonl"),
        "validation_data": write_jsonl(validation, folder / "validation.jsonl"),
        "eval_data": write_jsonl(heldout_problems(settings.difficulty, settings.heldout_n), folder / "heldout.jsonl"),
    }


def sft_flags(settings: WarmStartSettings, inputs: dict[str, Path]) -> list[str]:
    """The SFT recipe's flags on top of its config for ``settings``, but ``--seed`` and ``--output_dir``."""
    flags = [item for key, path in inputs.items() for item in (f"--{key}", str(path))]
    for name, flag in RECIPE_FLAGS.items():
        if flag != "seed":
            flags += [f"--{flag}", str(getattr(settings, name))]
    return [*flags, "--logging_steps", str(settings.eval_every)]  # a loss line beside each validation check


class _RelayChecks(logging.Handler):
    """The recipe's validation checks as this module's log records, for a progress display (``cpu_lab.demo``)."""

    def emit(self, record: logging.LogRecord) -> None:
        step, accuracy = getattr(record, "step", None), getattr(record, "validation_accuracy", None)
        if step is not None and accuracy is not None:
            progress = {"step": step, "validation_accuracy": accuracy}
            logger.info("warm start step %d: validation accuracy %.3f", step, accuracy, extra=progress)


def warm_start(settings: WarmStartSettings = WarmStartSettings(), cache_root: str | Path = DEFAULT_CACHE_ROOT) -> Path:
    """Train (or reuse from the cache) the warm start for ``settings`` through ``recipes.sft``; return its folder."""
    out = Path(cache_root) / f"warmstart-{settings.key()}"
    if (out / "warmstart.json").exists():
        logger.info("reusing cached warm start %s", out)
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.monotonic()
    from recipes.monitors import CHECKS_LOGGER as checks  # transformers' trainer: ~6 s that --help does not pay

    inputs = write_inputs(settings, tmp / "inputs")
    relay, level, propagate = _RelayChecks(), checks.level, checks.propagate
    checks.addHandler(relay)
    checks.setLevel(logging.INFO)
    checks.propagate = False  # the recipe prints each check itself
    try:
        report = matrix.run_one(SFT_CONFIG, settings.seed, tmp, sft_flags(settings, inputs))
    finally:
        checks.removeHandler(relay)
        checks.setLevel(level)
        checks.propagate = propagate
    shutil.rmtree(inputs["model_name_or_path"])  # the untrained model: write_inputs makes it again
    curve = [
        {"step": c["step"], "validation_accuracy": c["accuracy"], "seconds": c["seconds"]}
        for c in report["validation"]["checks"]
    ]
    stop_accuracy = report["validation"]["last"]
    record = {
        "settings": asdict(settings),
        "config": SFT_CONFIG_NAME,  # run with the flags in resolved_config.json
        "params": _num_parameters(tmp / "model.safetensors"),
        "steps": report["steps"],
        "validation_accuracy": stop_accuracy,  # at the stop: what the stopping rule saw
        "heldout_accuracy": report["after"]["accuracy"],  # of the saved model, after the stop
        "heldout_accuracy_before": report["before"]["accuracy"],  # of the untrained model
        "reached_threshold": stop_accuracy is not None and stop_accuracy >= settings.stop_at_accuracy,
        "seconds": round(time.monotonic() - started, 1),
        "curve": curve,
    }
    logger.info("warm start stopped at step %d: held-out accuracy %.3f", record["steps"], record["heldout_accuracy"])
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


def _num_parameters(weights: Path) -> int:
    """Parameters in a saved ``model.safetensors`` (tied embeddings are saved, and counted, once)."""
    with safe_open(weights, framework="numpy") as f:  # the shapes in the header: no tensor is read, no torch
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 - safe_open is not a dict


def prepare_lab(
    settings: WarmStartSettings = WarmStartSettings(), cache_root: str | Path = DEFAULT_CACHE_ROOT, root=LAB_ROOT
) -> dict[str, Path]:
    """The warm start, linked at ``<root>/warmstart``, and the GRPO data the lab configs read under ``<root>/data``
    (fresh training problems drawn with seed + 1, the dev set and the held-out set)."""
    model_dir = warm_start(settings, cache_root)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    link = root / "warmstart"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(model_dir.resolve(), target_is_directory=True)
    heldout = heldout_problems(settings.difficulty, settings.heldout_n)
    dev = dev_problems(settings.difficulty, settings.validation_n, settings.heldout_n)
    train = train_problems(
        GRPO_TRAIN_SIZE, settings.seed + 1, settings.difficulty, settings.heldout_n, settings.validation_n
    )
    return {
        "model": model_dir,
        "link": link,
        "train": write_jsonl(train, root / "data" / "train.jsonl"),
        "dev": write_jsonl(dev, root / "data" / "dev.jsonl"),
        "heldout": write_jsonl(heldout, root / "data" / "heldout.jsonl"),
    }


def recipe_flags(paths: dict[str, Path], model: str = "model") -> list[str]:
    """The GRPO recipe's flags that point a run at a prepared lab (``prepare_lab``), ``paths[model]`` as the policy."""
    return [
        "--model_name_or_path",
        str(paths[model]),
        "--data",
        str(paths["train"]),
        "--eval_data",
        str(paths["heldout"]),
        "--monitor_eval_data",
        str(paths["dev"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cpu_lab.warmstart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_fields(parser, WarmStartSettings, ["seed", "stop_at_accuracy", "max_steps"])
    parser.add_argument("--cache-root", default=str(DEFAULT_CACHE_ROOT))
    parser.add_argument(
        "--inputs",
        metavar="DIR",
        help="only write the SFT config's inputs (the untrained model in DIR/init, the three data files) and print "
        "the recipe's command",
    )
    args = parser.parse_args()
    try:
        settings = from_args(WarmStartSettings, args)
    except ValueError as error:
        parser.error(str(error))
    if args.inputs:
        inputs = write_inputs(settings, args.inputs)
        command = ["python -m recipes.sft --config", SFT_CONFIG_NAME, *sft_flags(settings, inputs)]
        print(f"wrote {', '.join(str(p) for p in inputs.values())}; to train:")
        print(" ".join([*command, f"--seed {settings.seed} --output_dir runs/lab/sft"]))
        return
    logging.basicConfig(format="%(message)s")
    logger.setLevel(logging.INFO)
    logger.addFilter(lambda record: not hasattr(record, "validation_accuracy"))  # the recipe prints each check
    paths = prepare_lab(settings, args.cache_root)
    record = json.loads((paths["model"] / "warmstart.json").read_text())
    print(
        f"warm start: {paths['model']} (step {record['steps']}, validation accuracy {record['validation_accuracy']} "
        f"at the stop, held-out accuracy {record['heldout_accuracy']})"
    )
    print(f"linked at {paths['link']}; GRPO data: {paths['train']}, held-out: {paths['heldout']}")


if __name__ == "__main__":
    main()
