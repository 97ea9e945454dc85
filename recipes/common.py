"""What every recipe shares: the command line, the run's name and folder, the model's loading options, and the end of
a run (evaluate before, train, save, evaluate after, report). A recipe's shape:

    if __name__ == "__main__":
        common.run_cli(make_parser, main)  # make_parser: common.recipe_parser(...); bad input: one line, exit 2

    def main(script_args, training_args, model_args):
        with checks.config_errors():
            ...  # recipes.checks: everything that can fail, before a model loads
        out, config = common.start_run(script_args, training_args, model_args, common.run_identity(...))
        training_args.model_init_kwargs = common.model_init_kwargs(model_args, training_args.model_init_kwargs)
        trainer = ...  # built complete, with common.JsonlLogCallback(out / "log.jsonl") among its callbacks
        return common.train_and_report(trainer, training_args, report, summary, resume=script_args.resume, ...)

A recipe module imports torch, transformers and TRL only where a run starts, so that ``--help`` and a bad option are
answered from a table of its options (``recipes.parser``) in well under two seconds. Every process trains and
evaluates (ZeRO-3 needs all of them); only the main one writes files. ``ModelConfig``'s ``dtype``,
``attn_implementation`` and ``model_revision`` reach the model only through TRL's ``model_init_kwargs``.

>>> redact({"wandb_api_key": "abc", "hub_token": None, "max_new_tokens": 512, "nested": {"my_secret": "s"}})
{'wandb_api_key': '<redacted>', 'hub_token': None, 'max_new_tokens': 512, 'nested': {'my_secret': '<redacted>'}}
>>> from trl import ModelConfig
>>> model_init_kwargs(ModelConfig(model_name_or_path="m", dtype="bfloat16", attn_implementation="sdpa",
...                                model_revision="v1"), {"device_map": None})
{'device_map': None, 'dtype': 'bfloat16', 'attn_implementation': 'sdpa', 'revision': 'v1'}
>>> model_init_kwargs(ModelConfig(model_name_or_path="m"))  # defaults: float32, main, the model's own attention
{'dtype': 'float32', 'revision': 'main'}
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

from eval import run as eval_run  # eval_run.evaluate at the call: a test's stand-in reaches it
from recipes import run_folder
from recipes.checks import WANDB_QUIET_MODES, ConfigError, check_deepspeed, check_wandb, config_errors
from recipes.parser import Command, RecipeParser, save_table, table_parser

logger = logging.getLogger(__name__)

SECRET_KEY_RE = re.compile(r"key|token|secret|password", re.IGNORECASE)
EVAL_FOLDERS = run_folder.EVAL_FOLDERS  # a recipe's held-out evaluations, in output_dir
# the TRL options of every recipe that --help shows first; each recipe adds the ones its method turns on
COMMON_OPTIONS = (
    "model_name_or_path",
    "output_dir",
    "use_peft",
    "use_cpu",
    "report_to",
    "seed",
    "max_steps",
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
)


# --------------------------------------------------------------------------------------------------- the command line
def run_cli(make_parser, main) -> None:
    """A recipe's command line, YAML + flags, then ``main``: bad input is one ``error:`` line (status 2), Ctrl-C one
    line that says how to go on (130). ``--help`` and a bad option are answered from a table of the options
    (``recipes.parser.table_parser``) before torch, transformers or TRL load."""
    quiet_library_noise()
    argv = sys.argv[1:]
    module = command_module(make_parser)
    parser = None
    try:
        with config_errors():
            saved = table_parser(module) if module else None
            parser = saved or full_parser(make_parser, save_as=module)
            if not argv:  # a run of the recipe's defaults is nobody's intent
                print(f"{parser.format_usage()}\n{parser.description}\n", file=sys.stderr)
                raise ConfigError(
                    f"no options given: pass --config CONFIG.yaml ({parser.prog} --help lists the options)"
                )
            command = parser.read_command(argv)  # the table's options are the configs': one reading serves both
            args = parse_or_explain(parser, command=command)
            if saved is not None:  # nothing the table can refuse: now TRL's configs, and their own checks
                parser = full_parser(make_parser)
                args = parse_or_explain(parser, command=command)
        training_args = next(a for a in args if hasattr(a, "report_to"))
        print(f"{parser.prog}: {command.path or 'no --config'} -> {training_args.output_dir}")
        if line := wandb_line(training_args.report_to):
            print(line)
        main(*args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as stop:
        rerun = f"{parser.prog} {shlex.join(argv)}" if parser is not None else None
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            rerun = "the same launch command"  # accelerate's, which this process cannot see
        if isinstance(stop, run_folder.Interrupted):
            line = stop.line(rerun)
        else:
            line = f"interrupted before training began: nothing was trained; rerun {rerun or 'the command'} to start"
        print(f"\n{line}", file=sys.stderr)  # a new line: a progress bar may hold the current one
        sys.exit(130)
    finally:
        run_folder.release()


def command_module(make_parser) -> str | None:
    """The recipe module ``python -m`` runs (``recipes.sft``); None when a test or another module calls ``run_cli``."""
    if make_parser.__module__ != "__main__":
        return None
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return spec.name if spec is not None else None


def full_parser(make_parser, save_as: str | None = None) -> RecipeParser:
    """``make_parser()``, which imports TRL, torch and transformers; its table is saved in the cache for the next
    command when ``save_as`` names the recipe."""
    parser = make_parser()
    if save_as:
        save_table(save_as, parser)
    return parser


def recipe_parser(parts: tuple, *, options: Sequence[str] = (), **layout) -> RecipeParser:
    """A recipe's ``recipes.parser.RecipeParser`` from the script arguments, TRL's config and ``ModelConfig``
    (``layout``: its other arguments); ``--help`` shows ``COMMON_OPTIONS`` and ``options`` after the recipe's own."""
    quiet_wandb_notice()  # before any parse
    return RecipeParser.from_dataclasses(parts, common=(*COMMON_OPTIONS, *options), **layout)


def parse_or_explain(parser, args: Sequence[str] | None = None, *, command: Command | None = None):
    """The parsed configs, with what to change added to the errors TRL raises while parsing. A missing DeepSpeed or W&B
    login fails here, before any model loads, and a CPU run gets its precision (``recipes.precision``)."""
    command = command or parser.read_command(args)  # a malformed YAML: one line with its place, before anything else
    check_deepspeed(deepspeed_request(command))  # before parsing: TrainingArguments itself fails without the package
    chosen: list[str] = []
    if parser.dataclass_types is not None:
        from recipes import precision  # torch: read where the run's own configs are

        fields = {name for kind in parser.dataclass_types for name in kind.__dataclass_fields__}
        chosen, why = precision.precision_flags(command, fields)  # a CPU run's bf16, when neither YAML nor flags set it
        if why:
            print(why)  # one line, as grpo_setup prints the generation backend
    try:
        parsed = parser.parse_command(command, before=chosen)
        let_explicit_flags_win(parsed, command.given)
        check_wandb(parsed[1].report_to)  # TRL's config; before any model loads: W&B stops a run at its first log
        return parsed
    except ValueError as error:
        reworded = reword_group_error(str(error))
        if reworded:
            raise ValueError(reworded) from error
        hint = next((h for key, h in HINTS.items() if key in str(error)), None) or precision_hint(str(error))
        if hint is None:
            raise
        raise ValueError(f"{error}\n  -> {hint}") from error


HINTS = {  # TRL/transformers errors raised while parsing a config -> what to change
    "at least 2 generations per prompt": "set num_generations: 2 or more (GRPO compares the answers of a group)",
    "`loss_weights` must have the same length": "give one loss_weights value per loss_type, in the same order (or "
    "drop loss_weights for 1.0 each)",
    "Some specified arguments are not used": "remove or rename the unknown keys (use the dataclass field names)",
}


def precision_hint(message: str) -> str | None:
    """What to change when transformers refuses a run's bf16 (``Your setup doesn't support bf16/gpu``): on a machine
    with no GPU, run on the CPU; on a GPU without bf16 (older than Ampere), fp16 or float32. None for any other
    message, among them transformers' refusal of bf16 and fp16 together, which says what to change itself."""
    if "doesn't support bf16" not in message:
        return None
    import torch  # loaded by the parse that raised the message

    if not torch.cuda.is_available():
        return "this machine has no GPU: set use_cpu: true (or bf16: false) for CPU runs"
    return "this GPU has no bf16 (it needs an Ampere or newer GPU): set bf16: false, and fp16: true for half precision"


TRL_GROUP_ERROR = re.compile(r"generation_batch_size \((\d+)\) must be divisible by num_generations \((\d+)\)")


def reword_group_error(message: str) -> str | None:
    """TRL's refusal of a generation batch that does not hold whole groups, reworded to say what to set; None for any
    other message.

    >>> reword_group_error("generation_batch_size (4) must be divisible by num_generations (8).")
    'the generation batch (per_device_train_batch_size x processes x steps_per_generation) is 4 completions, not a multiple of num_generations 8 (group size). Set steps_per_generation to 2 times its value (gradient_accumulation_steps when unset), or per_device_train_batch_size: 8, or num_generations to a divisor of 4'
    """  # noqa: E501
    found = TRL_GROUP_ERROR.search(message)
    if not found:
        return None
    batch, group = map(int, found.groups())
    times = group // math.gcd(batch, group)  # the smallest factor that makes the batch a multiple of the group
    return (
        f"the generation batch (per_device_train_batch_size x processes x steps_per_generation) is {batch} "
        f"completions, not a multiple of num_generations {group} (group size). Set steps_per_generation to {times} "
        f"times its value (gradient_accumulation_steps when unset), or per_device_train_batch_size: {group}, or "
        f"num_generations to a divisor of {batch}"
    )


def let_explicit_flags_win(parsed, given: dict) -> None:
    """An explicit ``--use_vllm`` on the command line beats the config's ``use_vllm_if_available: true``, so that
    ``--use_vllm false`` generates with transformers even where vLLM could run."""
    if "use_vllm" not in given:
        return
    for args in parsed:
        if getattr(args, "use_vllm_if_available", False):
            args.use_vllm_if_available = False
            logger.info("--use_vllm given on the command line: it overrides use_vllm_if_available from the config")


def deepspeed_request(command: Command) -> str | None:
    """What asks the run for DeepSpeed (None when nothing does), read before its configs are built."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return "accelerate launch with a DeepSpeed config (ACCELERATE_USE_DEEPSPEED=true)"
    if "deepspeed" in command.given:
        return "--deepspeed"
    if command.config.get("deepspeed"):
        return f"deepspeed: in {command.sources.get('deepspeed', command.path)}"  # the file that sets it (a base's)
    return None


def quiet_wandb_notice() -> None:
    """Imports transformers' reporting integrations with their "Running in WANDB offline mode" print swallowed: the
    Makefile sets WANDB_MODE=offline for every run, and one that reports to W&B gets ``wandb_line`` instead."""
    with redirect_stdout(StringIO()):
        import transformers.integrations.integration_utils  # noqa: F401


def quiet_library_noise() -> None:
    """Silences transformers' FutureWarning on TRL's reads of ``model.is_gradient_checkpointing``: no user can act on
    it."""
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)


def wandb_line(report_to, environ: dict[str, str] | None = None) -> str | None:
    """Where a run that reports to W&B logs, in one line; None for a run that does not, or logs online.

    >>> wandb_line(["wandb"], {"WANDB_MODE": "offline"})
    'W&B: offline (WANDB_MODE=offline): the run is kept in ./wandb; `wandb sync ./wandb/offline-run-*` uploads it'
    >>> wandb_line(["none"], {"WANDB_MODE": "offline"})
    """
    env = os.environ if environ is None else environ
    mode = env.get("WANDB_MODE", "").lower()
    if "wandb" not in (report_to or []) or mode not in WANDB_QUIET_MODES:
        return None
    if mode == "disabled":
        return "W&B: disabled (WANDB_MODE=disabled): nothing is logged to W&B; log.jsonl has the metrics"
    folder = os.path.join(env.get("WANDB_DIR") or ".", "wandb")  # where wandb keeps runs (WANDB_DIR moves it)
    return (
        f"W&B: {mode} (WANDB_MODE={mode}): the run is kept in {folder}; `wandb sync {folder}/offline-run-*` uploads it"
    )


# --------------------------------------------------------------------------------------------------- the run
@dataclass
class RunArguments:
    """The script arguments every recipe has (its own ``*ScriptArguments`` add to these)."""

    _argument_group_name = "run"

    build_tiny_model: bool = field(
        default=False, metadata={"help": "build recipes.tiny_model at model path if missing"}
    )
    resume: bool = field(
        default=True,
        metadata={"help": "resume the last checkpoint; of output_dir, when it holds a run of the same settings"},
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "replace output_dir's run; its outputs are deleted first (without it, a folder that holds another "
            "run is refused)"
        },
    )


@dataclass
class PairArguments:
    """Where the pairs come from and how many a problem gives (the DPO and reward-model recipes add to these)."""

    _argument_group_name = "preference pairs"

    data: str = field(default="", metadata={"help": "rollouts .jsonl, pairs .jsonl or hub preference data set"})
    data_split: str = field(default="train", metadata={"help": "split of a hub data set"})
    max_pairs_per_problem: int = field(default=4, metadata={"help": "pairs built from one problem (0: no cap)"})
    length_tolerance: float | None = field(
        default=None, metadata={"help": "pair only answers whose |a-b|/max(a,b) token lengths are within this"}
    )

    def __post_init__(self):  # checked as they are parsed, before anything loads: one line on the command line
        if self.max_pairs_per_problem < 0:
            raise ConfigError(f"max_pairs_per_problem={self.max_pairs_per_problem}: give a number of pairs >= 1, or 0")
        if self.length_tolerance is not None and self.length_tolerance < 0:
            raise ConfigError(
                f"length_tolerance={self.length_tolerance}: give a largest |a-b|/max(a,b) of the two answers' token "
                "lengths >= 0 (0.2: within 20%), or leave it unset for no length rule"
            )

    def pair_options(self) -> dict:
        """The options of ``training_data.pairs.load_pairs`` these arguments set.

        >>> PairArguments(max_pairs_per_problem=0).pair_options()
        {'split': 'train', 'max_pairs_per_problem': None, 'length_tolerance': None}
        """
        return {
            "split": self.data_split,
            "max_pairs_per_problem": self.max_pairs_per_problem or None,
            "length_tolerance": self.length_tolerance,
        }


@dataclass
class HeldOutArguments:
    """The held-out evaluations before and after training (the SFT and DPO recipes'; GRPO's also monitor)."""

    _argument_group_name = "held-out evaluation"

    eval_task: str = field(default="gsm8k", metadata={"help": "held-out task evaluated before and after training"})
    eval_data: str | None = field(default=None, metadata={"help": "hub id or local .jsonl for eval_task"})
    eval_limit: int = field(default=100, metadata={"help": "problems evaluated before and after training (0: skip)"})
    eval_max_new_tokens: int | None = field(default=None, metadata={"help": "default: the task's eval default"})


def short_model_name(path: str) -> str:
    """``Qwen/Qwen2.5-0.5B-Instruct`` -> ``qwen2.5-0.5b-instruct``; a local folder -> its name.

    >>> short_model_name("Qwen/Qwen2.5-0.5B-Instruct"), short_model_name("runs/tiny_model/")
    ('qwen2.5-0.5b-instruct', 'tiny_model')
    """
    return Path(path.rstrip("/")).name.lower()


def run_identity(
    task: str, model_args, method: str, beta: float | None, reward_funcs: Sequence[str], seed: int
) -> dict:
    """W&B run name, group (the name minus the seed, so that the seeds of one setting group together) and tags.

    >>> from trl import ModelConfig
    >>> model = ModelConfig(model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct", use_peft=True)
    >>> ident = run_identity("gsm8k", model, "dr_grpo", 0.04, ["gsm8k_correctness"], 1)
    >>> ident["name"], ident["group"]
    ('gsm8k-qwen2.5-0.5b-instruct-dr_grpo-b0.04-gsm8k_correctness-lora-s1', 'gsm8k-qwen2.5-0.5b-instruct-dr_grpo-b0.04-gsm8k_correctness-lora')
    >>> ident["tags"]
    ['task=gsm8k', 'model=qwen2.5-0.5b-instruct', 'method=dr_grpo', 'beta=0.04', 'rewards=gsm8k_correctness', 'adapter=lora', 'seed=1']
    >>> run_identity("gsm8k_train", model, "sft", None, ["reference_solutions"], 0)["name"]
    'gsm8k_train-qwen2.5-0.5b-instruct-sft-reference_solutions-lora-s0'
    """  # noqa: E501
    adapter = "qlora" if model_args.load_in_4bit else "lora" if model_args.use_peft else "full"
    rewards = "+".join(reward_funcs)
    model = short_model_name(model_args.model_name_or_path)
    betas = [] if beta is None else [f"{beta:g}"]
    group = "-".join([task, model, method, *(f"b{b}" for b in betas), rewards, adapter])
    tags = [f"task={task}", f"model={model}", f"method={method}", *(f"beta={b}" for b in betas)]
    tags += [f"rewards={rewards}", f"adapter={adapter}", f"seed={seed}"]
    return {"name": f"{group}-s{seed}", "group": group, "tags": tags}


def redact(value):
    """A copy with string values under keys that look like secrets masked: no saved config holds a secret."""
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


def is_main_process(training_args) -> bool:
    """True on the one process that writes files (``accelerate launch`` starts one process per GPU)."""
    return training_args.process_index == 0


def main_process_path(training_args, path: Path) -> Path | None:
    """``path`` on the main process, None on the others (where ``eval.run.evaluate`` then writes nothing)."""
    return path if is_main_process(training_args) else None


def build_tiny_model_if_asked(script_args, model_args) -> None:
    """Builds the tiny local model at ``model_name_or_path`` when asked and nothing is there; the parse has switched
    ``build_tiny_model`` off at a name that reads as a hub id (``RecipeParser.settle_tiny_model``)."""
    path = model_args.model_name_or_path
    if not script_args.build_tiny_model or Path(path).exists():
        return
    from recipes.tiny_model import save_tiny_model  # torch, transformers

    save_tiny_model(path)


def start_run(script_args, training_args, model_args, identity: dict) -> tuple[Path, dict]:
    """Names the run, readies ``output_dir`` (``run_folder.prepare``: locked, refused when it holds another run),
    records the resolved config with secrets redacted and builds the tiny model if asked."""
    training_args.run_name = training_args.run_name or identity["name"]
    if "wandb" in (training_args.report_to or []) and "group" in identity:  # read by wandb.init; the user's win
        os.environ.setdefault("WANDB_RUN_GROUP", identity["group"])
        os.environ.setdefault("WANDB_TAGS", ",".join(identity["tags"]))
    out = Path(training_args.output_dir)
    config = resolved_config(script_args, training_args, model_args)
    run_folder.prepare(
        out,
        config,
        resume=script_args.resume,
        resume_from=training_args.resume_from_checkpoint,
        overwrite=script_args.overwrite,
        writes=is_main_process(training_args),
    )
    build_tiny_model_if_asked(script_args, model_args)
    return out, config


def last_checkpoint(training_args, resume: bool) -> str | None:
    """The last ``checkpoint-*`` in ``output_dir`` when ``resume`` is on and there is one."""
    from transformers.trainer_utils import get_last_checkpoint

    out = Path(training_args.output_dir)
    return get_last_checkpoint(str(out)) if resume and out.is_dir() else None


def resumes(training_args, resume: bool) -> bool:
    """Whether the run continues an earlier one."""
    return bool(training_args.resume_from_checkpoint or last_checkpoint(training_args, resume))


def resume_checkpoint(training_args, resume: bool, logs: Sequence[str]) -> str | None:
    """The checkpoint ``trainer.train`` resumes from, the ``logs`` cut back to its step; a fresh run (None) deletes the
    previous run's ``logs`` instead, as it replaces its weights."""
    out = Path(training_args.output_dir)
    start = run_folder.start_of(out)
    checkpoint = (
        start.checkpoint if start else training_args.resume_from_checkpoint or last_checkpoint(training_args, resume)
    )
    if checkpoint:
        print(f"resuming from {checkpoint}")
        step = run_folder.checkpoint_step(checkpoint)
        if is_main_process(training_args):  # the steps after it are logged again
            dropped = sum(run_folder.drop_rows_after(out / name, step) for name in logs)
            if dropped:
                print(f"dropped {dropped} log row(s) written after step {step} by the run that stopped")
    elif is_main_process(training_args):
        for name in logs:
            (out / name).unlink(missing_ok=True)
    return checkpoint


def model_init_kwargs(model_args, existing: dict | None = None) -> dict:
    """``existing`` plus ``model_args``' dtype, attention implementation and revision, which reach the model (and the
    tokenizer's revision) only through TRL's ``model_init_kwargs``; no attention key when unset, so that transformers
    picks its default."""
    kwargs = dict(existing or {}) | {"dtype": model_args.dtype}
    if model_args.attn_implementation is not None:
        kwargs["attn_implementation"] = model_args.attn_implementation
    kwargs["revision"] = model_args.model_revision
    return kwargs


# --------------------------------------------------------------------------------------------------- training
def __getattr__(name: str):
    """``JsonlLogCallback``, imported on first use: it imports transformers, which a recipe's command line loads only
    where a run starts."""
    if name == "JsonlLogCallback":
        from recipes.console import JsonlLogCallback

        return JsonlLogCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def train_and_report(
    trainer,
    training_args,
    report: dict,
    summary: Callable[[dict], str],
    *,
    resume: bool,
    logs: Sequence[str] = ("log.jsonl",),
    held_out: dict | None = None,
    before_save: Callable[[], dict] | None = None,
    results: Sequence[Callable[[], dict]] = (),
    started: float | None = None,
) -> dict:
    """The end of every recipe: evaluate before, train (resuming after a kill), save, evaluate after, report; returns
    the report. Every process evaluates (ZeRO-3 needs all of them), the main one writes; Ctrl-C raises
    ``run_folder.Interrupted``, which says where the run stopped."""
    from recipes import console

    out = Path(training_args.output_dir)
    evaluates = bool(held_out and held_out.get("limit"))
    console.take_over(trainer)
    try:
        if evaluates:
            report["before"] = evaluate_held_out(trainer, training_args, out / "eval_before", held_out)
        trainer.train(resume_from_checkpoint=resume_checkpoint(training_args, resume, logs))
        if before_save is not None:
            report |= before_save()
        trainer.save_model(str(out))
        if evaluates:
            report["after"] = evaluate_held_out(trainer, training_args, out / "eval_after", held_out)
        if started is not None:
            report["seconds"] = round(time.monotonic() - started, 1)  # the whole run: evals, training, saving
        for result in results:
            report |= result()
        write_report(training_args, report, summary(report))
        # finishes the W&B run (flushes offline files) and the process group: all that Trainer.end() does in
        # transformers 5.24, and the GPU set's transformers 5.17 has no Trainer.end()
        trainer.accelerator.end_training()
    except KeyboardInterrupt:
        start = run_folder.start_of(out)
        raise run_folder.Interrupted(
            step=trainer.state.global_step,
            checkpoint=last_checkpoint(training_args, resume=True),
            save_strategy=str(getattr(training_args.save_strategy, "value", training_args.save_strategy)),
            resume=start.resume if start else resume,
            overwrite=start.overwrite if start else False,
        ) from None
    finally:
        run_folder.release()
    return report


def evaluate_held_out(trainer, training_args, folder: Path, held_out: dict) -> dict:
    """``eval.run.evaluate`` of the trainer's model on the held-out set, written to ``folder`` by the main process."""
    return eval_run.evaluate(
        trainer.model,
        trainer.processing_class,
        out_dir=main_process_path(training_args, folder),
        overwrite=True,  # the run's own folder: an evaluation of other weights there is stale
        **held_out,
    )


# --------------------------------------------------------------------------------------------------- the report
def held_out_lines(report: dict, out: Path, train_log: bool = False) -> list[str]:
    """Held-out accuracy before -> after and where the eval reports are, for a recipe's printed summary; with
    ``train_log``, then where the train log and the config are."""
    lines = []
    if "before" in report and "after" in report:
        before, after = report["before"], report["after"]
        lines += [
            f"held-out accuracy {before['accuracy']:.3f} -> {after['accuracy']:.3f} (n={after['n']})",
            f"eval reports: {out / 'eval_before'} and {out / 'eval_after'} (summary.md, results.json)",
        ]
    log = f"train log (JSON lines): {out / 'log.jsonl'}; config: {out / 'resolved_config.json'}"
    return lines + [log] * train_log


def write_report(training_args, report: dict, summary: str) -> None:
    """``<output_dir>/report.json`` and the printed summary, from the main process."""
    if is_main_process(training_args):
        (Path(training_args.output_dir) / "report.json").write_text(json.dumps(report, indent=1, default=str))
        print(summary)
