"""What every recipe does around its TRL trainer, written once: the run's name and W&B grouping, the resolved config
(secrets redacted) beside the outputs, the tiny model built on request, writes from the main process only, and
resuming from the last checkpoint. ``recipes.grpo`` (and so the judge lab and the over-optimisation lab, which run
it), ``recipes.dpo`` and ``recipes.reward_model`` all use it, in this order:

    out, config = run_setup.start_run(script_args, training_args, model_args, run_setup.run_identity(...))
    ...  # the trainer; evaluations write to run_setup.main_process_path(training_args, out / "eval_before")
    trainer.train(resume_from_checkpoint=run_setup.resume_checkpoint(training_args, script_args.resume, logs))
    run_setup.write_report(training_args, report, summary)

Every process trains, generates and evaluates (ZeRO-3 needs all of them); only the main one writes files. A fresh run
(no checkpoint to resume, or ``resume: false``) reuses nothing of an earlier run in ``output_dir``: ``start_run``
empties its ``eval_before/`` and ``eval_after/`` and ``resume_checkpoint`` deletes its logs. A resumed run keeps
them, and an evaluation there resumes only when the same weights were evaluated (``eval.run.weights_fingerprint``).

>>> redact({"wandb_api_key": "abc", "hub_token": None, "max_new_tokens": 512, "nested": {"my_secret": "s"}})
{'wandb_api_key': '<redacted>', 'hub_token': None, 'max_new_tokens': 512, 'nested': {'my_secret': '<redacted>'}}
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eval.run import discard_run
from recipes.tiny_model import is_tiny_model_dir, reads_as_hub_id, save_tiny_model

SECRET_KEY_RE = re.compile(r"key|token|secret|password", re.IGNORECASE)
EVAL_FOLDERS = ("eval_before", "eval_after")  # a recipe's held-out evaluations, in output_dir


@dataclass
class RunArguments:
    """The script arguments every recipe has (its own ``*ScriptArguments`` add to these)."""

    build_tiny_model: bool = field(
        default=False, metadata={"help": "build recipes.tiny_model at model path if missing"}
    )
    resume: bool = field(default=True, metadata={"help": "resume from the last checkpoint in output_dir"})


@dataclass
class PairArguments(RunArguments):
    """Where the pairs come from and how many a problem gives (the DPO and reward-model recipes add to these); the
    pairs themselves are built, loaded, checked and split by ``training_data.pairs``."""

    data: str = field(default="", metadata={"help": "rollouts .jsonl, pairs .jsonl or hub preference data set"})
    data_split: str = field(default="train", metadata={"help": "split of a hub data set"})
    max_pairs_per_problem: int = field(default=4, metadata={"help": "pairs built from one problem (0: no cap)"})
    length_tolerance: float | None = field(
        default=None, metadata={"help": "pair only answers whose |a-b|/max(a,b) token lengths are within this"}
    )

    def pair_options(self) -> dict:
        """The options of ``training_data.pairs.load_pairs`` these arguments set (0 pairs per problem: no cap).

        >>> PairArguments(max_pairs_per_problem=0).pair_options()
        {'split': 'train', 'max_pairs_per_problem': None, 'length_tolerance': None}
        """
        return {
            "split": self.data_split,
            "max_pairs_per_problem": self.max_pairs_per_problem or None,
            "length_tolerance": self.length_tolerance,
        }


def short_model_name(path: str) -> str:
    """``Qwen/Qwen2.5-0.5B-Instruct`` -> ``qwen2.5-0.5b-instruct``; a local folder -> its name.

    >>> short_model_name("Qwen/Qwen2.5-0.5B-Instruct"), short_model_name("runs/tiny_model/")
    ('qwen2.5-0.5b-instruct', 'tiny_model')
    """
    return Path(path.rstrip("/")).name.lower()


def run_identity(task: str, model_args, method: str, beta: float, reward_funcs: Sequence[str], seed: int) -> dict:
    """W&B run name, group (the same minus the seed, so seeds of one setting group together) and tags; the model and
    its adapter (``qlora``, ``lora`` or ``full``) come from ``model_args``.

    >>> from trl import ModelConfig
    >>> model = ModelConfig(model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct", use_peft=True)
    >>> ident = run_identity("gsm8k", model, "dr_grpo", 0.04, ["gsm8k_correctness"], 1)
    >>> ident["name"], ident["group"]
    ('gsm8k-qwen2.5-0.5b-instruct-dr_grpo-b0.04-gsm8k_correctness-lora-s1', 'gsm8k-qwen2.5-0.5b-instruct-dr_grpo-b0.04-gsm8k_correctness-lora')
    >>> ident["tags"]
    ['task=gsm8k', 'model=qwen2.5-0.5b-instruct', 'method=dr_grpo', 'beta=0.04', 'rewards=gsm8k_correctness', 'adapter=lora', 'seed=1']
    """  # noqa: E501
    adapter = "qlora" if model_args.load_in_4bit else "lora" if model_args.use_peft else "full"
    rewards = "+".join(reward_funcs)
    parts = [task, short_model_name(model_args.model_name_or_path), method, f"b{beta:g}", rewards, adapter]
    group = "-".join(parts)
    tags = [f"task={task}", f"model={parts[1]}", f"method={method}", f"beta={beta:g}", f"rewards={rewards}"]
    return {"name": f"{group}-s{seed}", "group": group, "tags": [*tags, f"adapter={adapter}", f"seed={seed}"]}


def redact(value):
    """A copy with string values under keys that look like secrets (``*key*``, ``*token*``, ``*secret*``) masked."""
    if isinstance(value, dict):
        return {
            k: "<redacted>" if SECRET_KEY_RE.search(str(k)) and isinstance(v, str) and v else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def resolved_config(*dataclass_objects) -> dict:
    """All fields of the parsed argument dataclasses in one JSON-able dict, secrets redacted."""
    merged: dict = {}
    for obj in dataclass_objects:
        for f in dataclasses.fields(obj):
            merged[f.name] = getattr(obj, f.name)
    return redact(json.loads(json.dumps(merged, default=str)))


def write_config(path: str | Path, config: dict) -> None:
    """Write a resolved config as JSON to ``path``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(config, indent=1, sort_keys=True))


def save_resolved_config(path: str | Path, *dataclass_objects) -> dict:
    """Write the resolved, redacted config as JSON to ``path``; returns it."""
    config = resolved_config(*dataclass_objects)
    write_config(path, config)
    return config


def is_main_process(training_args) -> bool:
    """True on the one process that writes files (``accelerate launch`` starts one process per GPU)."""
    return training_args.process_index == 0


def main_process_path(training_args, path: Path) -> Path | None:
    """``path`` on the main process, None on the others (where ``eval.run.evaluate`` then writes nothing)."""
    return path if is_main_process(training_args) else None


def build_tiny_model_if_asked(script_args, model_args) -> None:
    """``build_tiny_model: true`` builds the tiny local model at ``model_name_or_path`` when nothing is there yet, and
    never at a name that reads as a hub id (the recipe's parser has already switched it off there, and refused a model
    path the command line gave under a config that builds: ``recipes.tiny_model.may_build_at``)."""
    path = model_args.model_name_or_path
    if not script_args.build_tiny_model or Path(path).exists():
        return
    if reads_as_hub_id(path) and not is_tiny_model_dir(path):
        raise ValueError(f"build_tiny_model: true at {path}, which reads as a hub id: write the folder as ./{path}")
    save_tiny_model(path)


def start_run(script_args, training_args, model_args, identity: dict) -> tuple[Path, dict]:
    """Names the run (``run_name`` from the config wins), sets W&B's group and tags when reporting to W&B, writes the
    resolved config (secrets redacted) to ``<output_dir>/resolved_config.json`` and builds the tiny model if asked.
    A fresh run (``resumes`` is False) empties the evaluation folders an earlier run left in ``output_dir``.
    ``identity`` is a ``run_identity``, or just ``{"name": ...}``. Returns the output folder and the config."""
    training_args.run_name = training_args.run_name or identity["name"]
    if "wandb" in (training_args.report_to or []) and "group" in identity:  # read by wandb.init; the user's win
        os.environ.setdefault("WANDB_RUN_GROUP", identity["group"])
        os.environ.setdefault("WANDB_TAGS", ",".join(identity["tags"]))
    out = Path(training_args.output_dir)
    config = resolved_config(script_args, training_args, model_args)
    if is_main_process(training_args):
        write_config(out / "resolved_config.json", config)
        if not resumes(training_args, script_args.resume):
            for name in EVAL_FOLDERS:
                if removed := discard_run(out / name):
                    print(f"fresh run: removed {', '.join(removed)} of an earlier run from {out / name}")
    build_tiny_model_if_asked(script_args, model_args)
    return out, config


def last_checkpoint(training_args, resume: bool) -> str | None:
    """The last ``checkpoint-*`` in ``output_dir`` when ``resume`` is on and there is one."""
    from transformers.trainer_utils import get_last_checkpoint  # imports torch: run_setup imports without it

    out = Path(training_args.output_dir)
    return get_last_checkpoint(str(out)) if resume and out.is_dir() else None


def resumes(training_args, resume: bool) -> bool:
    """Whether the run continues an earlier one: ``resume_from_checkpoint`` is set, or ``resume`` finds a checkpoint
    in ``output_dir``."""
    return bool(training_args.resume_from_checkpoint or last_checkpoint(training_args, resume))


def resume_checkpoint(training_args, resume: bool, logs: Sequence[str]) -> str | None:
    """The checkpoint for ``trainer.train(resume_from_checkpoint=...)``: ``resume_from_checkpoint`` when set, else
    (with ``resume``) the last ``checkpoint-*`` in ``output_dir``, whose ``logs`` the resumed run appends to. A fresh
    run deletes the previous run's ``logs`` there instead, as it replaces its weights."""
    out = Path(training_args.output_dir)
    last = last_checkpoint(training_args, resume)
    if last:
        print(f"resuming from {last}")
    elif is_main_process(training_args):
        for name in logs:
            (out / name).unlink(missing_ok=True)
    return training_args.resume_from_checkpoint or last


def held_out_lines(report: dict, out: Path) -> list[str]:
    """Held-out accuracy before -> after and where the eval reports are, for a recipe's printed summary."""
    if "before" not in report or "after" not in report:
        return []
    before, after = report["before"], report["after"]
    return [
        f"held-out accuracy {before['accuracy']:.3f} -> {after['accuracy']:.3f} (n={after['n']})",
        f"eval reports: {out / 'eval_before'} and {out / 'eval_after'} (summary.md, results.json)",
    ]


def write_report(training_args, report: dict, summary: str) -> None:
    """``<output_dir>/report.json`` and the printed summary, from the main process."""
    if is_main_process(training_args):
        (Path(training_args.output_dir) / "report.json").write_text(json.dumps(report, indent=1, default=str))
        print(summary)
