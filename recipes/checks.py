"""The checks every recipe runs BEFORE loading a model, each error saying what to change.

TRL notices a bad ``loss_type`` or ``scale_rewards`` only inside the first training step; these fail in a second.
What TRL's configs already refuse while parsed is not checked again (``recipes.common.parse_or_explain`` words it).

>>> check_loss("dr_grpo", "none")
>>> check_loss("drgrpo", "group")
Traceback (most recent call last):
...
ValueError: loss_type 'drgrpo' is not a GRPO loss: use one of ['bnpo', 'cispo', 'dapo', 'dr_grpo', 'grpo', 'luspo', 'sapo', 'vespo'] (set loss_type: in the config or --loss_type)
"""  # noqa: E501

from __future__ import annotations

import importlib
import importlib.util
import logging
import netrc
import os
import re
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from eval.generate import vllm_version_problem
from eval.sources import check_model_source
from eval.tasks import get_task, load_rows
from rewards import check_reward_weights, reward_names

logger = logging.getLogger(__name__)

GRPO_LOSSES = ("bnpo", "cispo", "dapo", "dr_grpo", "grpo", "luspo", "sapo", "vespo")  # TRL 1.16 GRPOConfig.loss_type
SCALE_REWARDS = ("group", "batch", "none")
# TRL 1.16 DPOConfig.loss_type values (TRL itself notices an unknown one only inside the first step)
DPO_LOSSES = (
    "sigmoid",
    "sigmoid_norm",
    "robust",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
)


def check_loss(loss_type: str, scale_rewards: str) -> None:
    """``loss_type`` and ``scale_rewards`` must be values TRL's GRPO loss knows; Dr. GRPO should not scale.
    ``scale_rewards`` as TRL's ``GRPOConfig`` leaves it (``true``/``false`` made ``group``/``none``)."""
    if loss_type not in GRPO_LOSSES:
        raise ValueError(
            f"loss_type {loss_type!r} is not a GRPO loss: use one of {sorted(GRPO_LOSSES)} "
            "(set loss_type: in the config or --loss_type)"
        )
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(
            f"scale_rewards {scale_rewards!r} is unknown: use one of {list(SCALE_REWARDS)} "
            "('none' for Dr. GRPO, which removes the division by the group's std)"
        )
    if loss_type == "dr_grpo" and scale_rewards != "none":
        logger.warning(
            "loss_type dr_grpo with scale_rewards=%r: the Dr. GRPO paper also sets scale_rewards: none", scale_rewards
        )


def check_dpo_loss(loss_types: list[str]) -> None:
    """Every ``loss_type`` must be one TRL's DPO loss knows (TRL itself notices only inside the first step).

    >>> check_dpo_loss(["sigmoid"])
    >>> check_dpo_loss(["sigmiod"])
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


def check_rewards(names: Sequence[str] | None, weights: Sequence[float] | None, on_violation: str = "error") -> None:
    """Known names, one weight per reward, and no set where format or partial credit outweighs correctness."""
    if not names:
        raise ValueError(
            f"reward_funcs is empty: name at least one reward, e.g. [gsm8k_correctness] ({reward_names()})"
        )
    unknown = [n for n in names if n not in reward_names()]
    if unknown:
        raise ValueError(f"unknown reward(s) {unknown} in reward_funcs: known rewards are {reward_names()}")
    if weights is not None and len(weights) != len(names):
        raise ValueError(
            f"reward_weights has {len(weights)} values {list(weights)} for {len(names)} reward_funcs {list(names)}: "
            "give one weight per reward, in the same order (or drop reward_weights for 1.0 each)"
        )
    check_watched_rewards(list(names), None if weights is None else list(weights))
    try:
        check_reward_weights(list(names), None if weights is None else list(weights), on_violation=on_violation)
    except ValueError as error:  # rewards speaks of its Python argument; a recipe's user sets reward_check
        raise ValueError(recipe_words(str(error))) from None


ON_VIOLATION = re.compile(r"([Pp])ass on_violation='warn'(?: \(reward_check: warn in a recipe config\))?")


def recipe_words(message: str) -> str:
    """``rewards.check_reward_weights``' refusal in a recipe's words: the config key and flag, not the argument.

    >>> recipe_words("a wrong answer 1 but ... or pass on_violation='warn' (reward_check: warn in a recipe config) to")
    'a wrong answer 1 but ... or set reward_check: warn in the config (--reward_check warn) to'
    >>> recipe_words("no bound. Pass on_violation='warn' to train it anyway")
    'no bound. Set reward_check: warn in the config (--reward_check warn) to train it anyway'
    """
    return ON_VIOLATION.sub(
        lambda found: ("S" if found[1] == "P" else "s") + "et reward_check: warn in the config (--reward_check warn)",
        message,
    )


def check_watched_rewards(names: list[str], weights: list[float] | None) -> None:
    """A reward with weight 0 is watched, not trained on: at least one reward must train, and the watched ones come
    last, so that the monitor knows which completions the trained rewards could not score (``recipes.monitors``).

    >>> check_watched_rewards(["llm_judge", "answer_line_correctness"], [1.0, 0.0])
    >>> check_watched_rewards(["answer_line_correctness", "llm_judge"], [0.0, 1.0])
    Traceback (most recent call last):
    ...
    ValueError: reward_funcs lists answer_line_correctness (weight 0: watched, not trained on) before llm_judge, which trains: list the weight-0 rewards last
    """  # noqa: E501
    if weights is None:
        return
    if all(w == 0 for w in weights):
        raise ValueError(f"reward_weights {weights} are all 0: nothing would train; give the trained reward a weight")
    trained = [i for i, w in enumerate(weights) if w != 0]
    early = [names[i] for i, w in enumerate(weights) if w == 0 and i < trained[-1]]
    if early:
        raise ValueError(
            f"reward_funcs lists {', '.join(early)} (weight 0: watched, not trained on) before "
            f"{names[trained[-1]]}, which trains: list the weight-0 rewards last"
        )


def check_reward_task(names: Sequence[str], answer_style: str) -> None:
    """Task-specific rewards must match the task's answer style (``gsm8k_*`` reads ``####``, ``math_*`` a box).

    >>> check_reward_task(["math_correctness"], "gsm8k")
    Traceback (most recent call last):
    ...
    ValueError: reward math_correctness is for math answers but the task writes gsm8k answers: use gsm8k_correctness
    """
    for name in names:
        style = name.split("_", 1)[0]
        if style in ("gsm8k", "math") and style != answer_style:
            fixed = f"{answer_style}_{name.split('_', 1)[1]}"
            raise ValueError(
                f"reward {name} is for {style} answers but the task writes {answer_style} answers: use {fixed}"
            )


def import_hook(spec: str):
    """The function named by ``'module:function'`` (a config's hook), imported before any model loads.

    >>> import_hook("json:dumps").__name__
    'dumps'
    >>> import_hook("json.dumps")
    Traceback (most recent call last):
    ...
    ValueError: hook 'json.dumps' must read 'module:function', e.g. cpu_lab.curriculum:lab_curriculum
    """
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"hook {spec!r} must read 'module:function', e.g. cpu_lab.curriculum:lab_curriculum")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"hook {spec!r} cannot be imported ({error}): check the module path and the name") from None


def check_model(model_args, build_tiny_model: bool = False) -> None:
    """``model_name_or_path`` must be a local model folder or a loadable hub id; a missing folder is fine when
    ``build_tiny_model`` builds the tiny model in it.

    >>> from trl import ModelConfig
    >>> check_model(ModelConfig(model_name_or_path="runs/no/such/model"), build_tiny_model=True)
    >>> check_model(ModelConfig(model_name_or_path="runs/no/such/model"))
    Traceback (most recent call last):
    ...
    eval.sources.SourceError: model_name_or_path 'runs/no/such/model' does not exist (no such local folder): pass a local model folder (with config.json) or a hub id (org/name)
    """  # noqa: E501
    name = model_args.model_name_or_path
    if build_tiny_model and name and not Path(name).exists():
        return
    check_model_source(name, "model_name_or_path", revision=model_args.model_revision)


def check_held_out_data(task_name: str, data: str | None, limit: int, flag: str = "--eval_data") -> None:
    """The held-out set evaluated before and after training loads (``flag`` names the option in an error)."""
    if not limit:
        return
    load_rows(get_task(task_name), data, flag=flag)


def check_one_prompt(question: str | None, gold_answer: str | None, **data_options) -> None:
    """A one-prompt training set (``question`` + ``gold_answer``) replaces the task's data: none of ``data_options``
    can be set beside it.

    >>> check_one_prompt("How many?", None)
    Traceback (most recent call last):
    ...
    ValueError: question is set but gold_answer is not: give the question's final answer (the checker and the monitors compare to it; a judge never sees it)
    """  # noqa: E501
    if question is None:
        if gold_answer is not None:
            raise ValueError("gold_answer is set without question: give the one training question too, or drop both")
        return
    if not question.strip():
        raise ValueError("question is empty: give the one training question, or drop question for the task's data")
    if gold_answer is None or not str(gold_answer).strip():
        raise ValueError(
            "question is set but gold_answer is not: give the question's final answer (the checker and the monitors "
            "compare to it; a judge never sees it)"
        )
    for name, value in data_options.items():
        if value:
            raise ValueError(f"question and {name} are both set: drop {name} to train on the one question, or question")


def check_one_update_per_group(num_iterations: int, steps_per_generation: int | None, accumulation: int) -> None:
    """One optimizer update per generated group, so that a log line holds the answers its step trained on.

    >>> check_one_update_per_group(1, 1, 1)
    >>> check_one_update_per_group(2, 1, 1)
    Traceback (most recent call last):
    ...
    ValueError: one update per group: set num_iterations: 1, steps_per_generation: 1 and gradient_accumulation_steps: 1 (got 2, 1, 1)
    """  # noqa: E501
    got = (num_iterations, steps_per_generation or accumulation, accumulation)
    if got != (1, 1, 1):
        raise ValueError(
            "one update per group: set num_iterations: 1, steps_per_generation: 1 and gradient_accumulation_steps: 1 "
            f"(got {', '.join(map(str, got))})"
        )


def check_answer_column(columns: Sequence[str], source: str) -> None:
    if "answer" not in columns:
        raise ValueError(
            f"dataset {source} has no 'answer' column (it has {list(columns)}): the rewards compare completions to "
            "the gold final answer in 'answer'. Add it, or pick the --task whose gold field this data has"
        )


def check_vllm(use_vllm: bool, vllm_mode: str = "colocate") -> None:
    """vLLM generation needs the vllm package, in the range TRL 1.16 supports, and (in colocate mode) a CUDA GPU."""
    if not use_vllm:
        return
    problem = vllm_version_problem()
    if problem:
        raise ValueError(f"use_vllm is true but {problem[0].lower()}{problem[1:]}; or set use_vllm: false")
    import torch  # here, not at the top: a recipe's --help and its refusals of bad options never load torch

    if vllm_mode == "colocate" and not torch.cuda.is_available():
        raise ValueError("use_vllm is true but this machine has no CUDA GPU: set use_vllm: false to generate with HF")


def vllm_usable(vllm_mode: str = "colocate") -> bool:
    """True when ``check_vllm`` would accept ``use_vllm: true`` here (for configs that use vLLM only when they can)."""
    try:
        check_vllm(True, vllm_mode)
    except ValueError:
        return False
    return True


QUANTIZED_VLLM_ISSUE = "huggingface/trl#4973"  # vLLM rejects the packed 4-bit weights TRL syncs (open, TRL 1.16)


def decide_vllm(
    use_vllm: bool, if_available: bool, vllm_mode: str, load_in_4bit: bool, load_in_8bit: bool
) -> tuple[bool, str]:
    """Whether GRPO generates with vLLM, and the one line that says why.

    A 4-bit or 8-bit model always generates with transformers: TRL 1.16's weight sync to vLLM fails on its weights.

    >>> decide_vllm(True, False, "colocate", load_in_4bit=True, load_in_8bit=False)[0]
    False
    >>> decide_vllm(False, False, "colocate", False, False)
    (False, 'generation: transformers (use_vllm is false)')
    """
    if if_available:
        use_vllm = vllm_usable(vllm_mode)
    if use_vllm and (load_in_4bit or load_in_8bit):
        bits = 4 if load_in_4bit else 8
        return False, (
            f"generation: transformers, not vLLM: the model is loaded in {bits}-bit, and TRL's weight sync to vLLM "
            f"fails on quantized weights ({QUANTIZED_VLLM_ISSUE})"
        )
    if use_vllm:
        return True, f"generation: vLLM ({vllm_mode})"
    why = "vllm not installed or no CUDA GPU" if if_available else "use_vllm is false"
    return False, f"generation: transformers ({why})"


def check_precision(use_peft: bool, dtype: str | None, deepspeed: bool) -> None:
    """Full fine-tuning keeps float32 master weights (unless DeepSpeed does): AdamW's updates written into bf16
    weights mostly round away (a bf16 weight of 0.02 moves in steps of 1.2e-4; an lr of 1e-5 moves it by ~1e-5).

    >>> check_precision(True, "bfloat16", False)   # LoRA: the adapters are float32 (peft), the base is frozen
    >>> check_precision(False, "float32", False)
    >>> check_precision(False, "bfloat16", False)
    Traceback (most recent call last):
    ...
    ValueError: full fine-tuning with dtype bfloat16 and no DeepSpeed: AdamW would write its updates into bfloat16 weights, where most of them round away. Set dtype: float32 and keep bf16: true (float32 master weights, bf16 autocast), or train with DeepSpeed (it keeps float32 master weights), or use_peft: true
    """  # noqa: E501
    if use_peft or deepspeed or dtype in ("float32", None):
        return
    loads = "the checkpoint's dtype (bfloat16 for Qwen2.5)" if dtype == "auto" else dtype
    raise ValueError(
        f"full fine-tuning with dtype {dtype} and no DeepSpeed: AdamW would write its updates into {loads} "
        "weights, where most of them round away. Set dtype: float32 and keep bf16: true (float32 master weights, "
        "bf16 autocast), or train with DeepSpeed (it keeps float32 master weights), or use_peft: true"
    )


def uses_deepspeed(training_args) -> bool:
    return bool(training_args.deepspeed) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"


DEEPSPEED_PIN = "deepspeed==0.19.8"  # requirements-gpu.txt's pin (tests/project/test_install.py keeps the two equal)


def deepspeed_installed() -> bool:
    """Whether ``import deepspeed`` can work here (a stand-in module without a spec, as in tests, counts)."""
    try:
        return importlib.util.find_spec("deepspeed") is not None
    except ValueError:  # in sys.modules with no __spec__
        return True


def check_deepspeed(request: str | None) -> None:
    """A run that asks for DeepSpeed (``request`` says what asked) needs the package; transformers' own error has no
    pin."""
    if request and not deepspeed_installed():
        raise ValueError(
            f"{request} asks for DeepSpeed, which is not installed: run `make venv-gpu` (requirements-gpu.txt) or "
            f"`pip install {DEEPSPEED_PIN}` on a CUDA machine; or train without DeepSpeed "
            "(recipes/accelerate/ddp.yaml)"
        )


WANDB_QUIET_MODES = ("offline", "disabled", "dryrun")  # WANDB_MODE values under which W&B needs no login
WANDB_HOST = "https://api.wandb.ai"  # W&B's default server (WANDB_BASE_URL changes it)


def netrc_path(env) -> Path:
    """The netrc file W&B reads."""
    if env.get("NETRC"):
        return Path(env["NETRC"]).expanduser()
    unix, windows = Path("~/.netrc").expanduser(), Path("~/_netrc").expanduser()
    return windows if windows.exists() and not unix.exists() else unix


def wandb_login(environ: dict[str, str] | None = None) -> str | None:
    """Where W&B 0.31 would find its login (an environment variable or a netrc entry for the server), without a
    request; None when there is none.

    >>> wandb_login({"WANDB_API_KEY": "x"}), wandb_login({"NETRC": "/nonexistent/netrc"})
    ('WANDB_API_KEY', None)
    """
    env = os.environ if environ is None else environ
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if env.get(name):
            return name
    path = netrc_path(env)
    if not path.is_file():
        return None
    try:
        entry = netrc.netrc(str(path)).authenticators(urlsplit(env.get("WANDB_BASE_URL") or WANDB_HOST).netloc)
    except (netrc.NetrcParseError, OSError):
        return None  # W&B reads no key from a file it cannot parse either
    return str(path) if entry and entry[2] else None


def check_wandb(report_to: str | Sequence[str] | None, environ: dict[str, str] | None = None) -> None:
    """``report_to: wandb`` needs a W&B login or an offline ``WANDB_MODE``; W&B itself would stop the run only at its
    first log, after the model has loaded.

    >>> check_wandb(["wandb"], {"WANDB_MODE": "offline"})
    >>> check_wandb("none", {})
    >>> check_wandb(["wandb"], {"NETRC": "/nonexistent/netrc"})
    Traceback (most recent call last):
    ...
    ValueError: report_to includes wandb but W&B has no login here (no WANDB_API_KEY, no api.wandb.ai entry in /nonexistent/netrc): run `wandb login` once, or export WANDB_API_KEY=<your key>, or set WANDB_MODE=offline to log to ./wandb and upload later with `wandb sync` (or report_to: none)
    """  # noqa: E501
    env = os.environ if environ is None else environ
    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "wandb" not in targets and not ("all" in targets and importlib.util.find_spec("wandb")):
        return
    if env.get("WANDB_MODE", "").lower() in WANDB_QUIET_MODES or wandb_login(env):
        return
    host = urlsplit(env.get("WANDB_BASE_URL") or WANDB_HOST).netloc
    raise ValueError(
        f"report_to includes wandb but W&B has no login here (no WANDB_API_KEY, no {host} entry in "
        f"{netrc_path(env)}): "
        "run `wandb login` once, or export WANDB_API_KEY=<your key>, or set WANDB_MODE=offline to log to ./wandb "
        "and upload later with `wandb sync` (or report_to: none)"
    )


def check_quantization(load_in_4bit: bool, load_in_8bit: bool, use_peft: bool) -> None:
    """QLoRA needs LoRA adapters; on CPU bitsandbytes works but is very slow, so warn and go on."""
    if not (load_in_4bit or load_in_8bit):
        return
    if not use_peft:
        raise ValueError(
            "load_in_4bit/load_in_8bit without use_peft: quantized weights cannot be trained; set use_peft"
        )
    import torch

    if not torch.cuda.is_available():
        warnings.warn("QLoRA on CPU: bitsandbytes runs, but very slowly; use a GPU for real runs", stacklevel=2)


def check_steps(eval_every: int, logging_steps: float) -> None:
    """Held-out evaluation is reported with the next log, so it should fall on logging steps.

    >>> check_steps(10, 5)
    >>> check_steps(7, 5)
    Traceback (most recent call last):
    ...
    ValueError: monitor_eval_steps 7 is not a multiple of logging_steps 5: its eval/... values would be logged late; use 10
    """  # noqa: E501
    if eval_every and logging_steps >= 1 and eval_every % int(logging_steps):
        better = (eval_every // int(logging_steps) + 1) * int(logging_steps)
        raise ValueError(
            f"monitor_eval_steps {eval_every} is not a multiple of logging_steps {int(logging_steps)}: its eval/... "
            f"values would be logged late; use {better}"
        )


class ConfigError(ValueError):
    """Bad input (config, data, reward set) found before any model is loaded; the CLI prints it as one line."""


@contextmanager
def config_errors():
    """Re-raise the ValueError/FileNotFoundError of a recipe's checks as ``ConfigError``.

    >>> with config_errors():
    ...     raise FileNotFoundError("data file x.jsonl does not exist")
    Traceback (most recent call last):
    ...
    recipes.checks.ConfigError: data file x.jsonl does not exist
    """
    try:
        yield
    except ConfigError:
        raise
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError(str(error)) from error
