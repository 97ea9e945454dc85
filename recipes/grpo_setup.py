"""The GRPO recipe's own setup, in the order ``recipes.grpo.main`` calls it: arguments and checks, training rows,
rewards, monitors, tracked answers, callback hooks and the trainer. docs/grpo.md lists every option.

The judge and the learned reward model must answer before any policy model loads, so a wrong URL fails in seconds; a
judge's key is named by its variable, never written anywhere. A callback hook (``callbacks:
[judge_lab.tracker:lab_step_log]``) is called before any model loads with a ``HookContext`` and returns
``TrainerCallback``s; those with ``attach(trainer)`` get the trainer once built, and their ``run_files`` are appended
to on resume and deleted on a fresh start.

>>> [f.__name__ for f in build_rewards(["gsm8k_correctness", "gsm8k_format"], GRPOScriptArguments())]
['gsm8k_correctness_reward', 'gsm8k_format_reward']
>>> build_rewards(["llm_judge"], GRPOScriptArguments())
Traceback (most recent call last):
...
ValueError: reward llm_judge needs judge_model: the model name the endpoint serves (with judge_base_url), or a local model folder with judge_backend: hf
>>> load_hooks(["json.dumps"])
Traceback (most recent call last):
...
ValueError: hook 'json.dumps' must read 'module:function', e.g. cpu_lab.curriculum:lab_curriculum
"""  # noqa: E501

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trl  # trl.GRPOTrainer looked up at the call: a benchmark's clocked stand-in reaches it
from transformers import TrainerCallback

from eval.sources import check_endpoint, check_model_source
from eval.tasks import get_task, load_rows, one_prompt_rows, to_prompt_rows
from recipes import checks
from recipes.callbacks import BestCheckpoint, HackAlarm
from recipes.common import JsonlLogCallback, RunArguments
from recipes.cpu_speed import fast_cpu_trainer
from recipes.dynamic_sampling import check_dynamic_sampling, dynamic_sampling_trainer
from recipes.hack_alarm import check_watch_args
from recipes.monitors import (
    MonitorCallback,
    RewardMonitor,
    TrainSeconds,
    WandbConfigCallback,
    make_monitored_trainer_class,
)
from recipes.tracked import ProbabilityTracker, check_tracked
from rewards import get_reward, reward_info
from rewards.judge import HFJudgeClient, OpenAIJudgeClient, judge_messages, make_judge_reward
from rewards.reward_model import ENV_PATH, RewardModelReward, check_reward_model


# ------------------------------------------------------------------------------------------------ arguments, checks
@dataclass
class TrainingData:
    """The training problems: the task's data, or one question."""

    _argument_group_name = "training data"

    task: str = field(default="gsm8k_train", metadata={"help": "training task of eval.tasks.TASKS"})
    data: str | None = field(default=None, metadata={"help": "hub id or local .jsonl (default: the task's hub set)"})
    train_limit: int | None = field(default=None, metadata={"help": "train on the first N problems only"})
    question: str | None = field(default=None, metadata={"help": "train on this one question (instead of data)"})
    gold_answer: str | None = field(default=None, metadata={"help": "its final answer (a judge never sees it)"})
    instruction: str | None = field(default=None, metadata={"help": "appended to question (default: the task's)"})
    curriculum: str | None = field(
        default=None,
        metadata={
            "help": "'module:function' called as function(rows, training_args) -> (train dataset, callback): training "
            "problems that change as the run goes (cpu_lab.curriculum:lab_curriculum); the held-out set stays fixed"
        },
    )


@dataclass
class RewardArguments:
    """The rewards trained on (names from rewards/) and the learned reward model's folder."""

    _argument_group_name = "rewards"

    reward_funcs: list[str] = field(
        default_factory=lambda: ["gsm8k_correctness", "gsm8k_format"], metadata={"help": "names from rewards/"}
    )
    reward_check: str = field(
        default="error", metadata={"help": "'warn' trains a reward set that can pay wrong answers (hack studies)"}
    )
    reward_model_path: str | None = field(
        default=None,
        metadata={"help": "reward_model: output_dir of python -m recipes.reward_model (default: LEASH_REWARD_MODEL)"},
    )


@dataclass
class HeldOut:
    """The held-out evaluations before and after training and every monitor_eval_steps, and the hack probes."""

    _argument_group_name = "held-out evaluation, monitors and hack probes"

    eval_task: str = field(default="gsm8k", metadata={"help": "held-out task for before/after and monitor evals"})
    eval_data: str | None = field(default=None, metadata={"help": "hub id or local .jsonl for eval_task"})
    eval_limit: int = field(default=100, metadata={"help": "problems evaluated before and after training (0: skip)"})
    eval_max_new_tokens: int | None = field(default=None, metadata={"help": "default: max_completion_length"})
    monitor_eval_steps: int = field(default=0, metadata={"help": "held-out eval every N steps (0: never)"})
    monitor_eval_limit: int = field(default=32, metadata={"help": "problems in each monitor eval"})
    monitor_eval_data: str | None = field(  # the checks, the hack alarm and the best checkpoint read it
        default=None, metadata={"help": "dev .jsonl for them (default: eval_data)"}
    )
    probe_problems: int = field(default=4, metadata={"help": "problems the hack probes are built from (0: skip)"})


@dataclass
class Watch:
    """What the held-out checks watch for (recipes.hack_alarm, recipes.callbacks)."""

    _argument_group_name = "the hack alarm and the best checkpoint"

    hack_alarm_checks: int | None = field(
        default=None,
        metadata={
            "help": "warn when held-out accuracy over this many latest checks fell beyond the checks' noise while "
            "the reward rose (docs/grpo.md; at most 0.05 false alarms a run); unset: 1 with 2+ checks; 0: off"
        },
    )
    stop_on_hack: bool = field(default=False, metadata={"help": "stop training when the hack alarm fires"})
    keep_best_checkpoint: bool = field(
        default=False,
        metadata={
            "help": "save the model (the adapter with LoRA) of the monitor check with the best held-out eval/accuracy "
            "so far to <output_dir>/best/, with best.json (step, accuracy); needs monitor_eval_steps"
        },
    )


@dataclass
class DynamicSampling:
    """DAPO's dynamic sampling (recipes.dynamic_sampling)."""

    _argument_group_name = "dynamic sampling (DAPO)"
    _help_folded = True  # --help names them in one paragraph (few runs set them)

    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling: drop the groups whose total reward is equal across the group (zero "
            "advantage) and refill the batch with groups of fresh prompts (recipes/dynamic_sampling.py); each extra "
            "round generates and scores a whole generation batch; metrics dynamic_sampling/..."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=3,
        metadata={
            "help": "dynamic_sampling: extra generation rounds per batch at most; when they run out, the scheduled "
            "batch's own degenerate groups fill what is left"
        },
    )


@dataclass
class GRPORun:
    """How the run generates and trains, and the config's callback hooks (after RunArguments' options)."""

    _argument_group_name = "run"

    use_vllm_if_available: bool = field(
        default=False,
        metadata={
            "help": "generate with vLLM (vllm_mode) when it is installed and a GPU is present; an explicit "
            "--use_vllm on the command line wins; a 4/8-bit model always generates with transformers"
        },
    )
    one_update_per_group: bool = field(
        default=False,
        metadata={"help": "check num_iterations, steps_per_generation and gradient_accumulation_steps are all 1"},
    )
    cpu_speedups: bool = field(
        default=True,
        metadata={
            "help": "on a CPU under bf16: the head scores only completion tokens and each generation casts the "
            "weights once (recipes/cpu_speed.py; the same numbers, faster); false: TRL's trainer as it is"
        },
    )
    callbacks: list[str] = field(
        default_factory=list,
        metadata={"help": "'module:function' hooks called with a recipes.grpo_setup.HookContext -> TrainerCallback(s)"},
    )


@dataclass
class Tracked:
    """Answers whose log-probability is logged every step (recipes.tracked)."""

    _argument_group_name = "tracked answers (their log-probability every step)"
    _help_folded = True  # --help names them in one paragraph (few runs set them)

    tracked_names: list[str] = field(default_factory=list, metadata={"help": "names of answers whose logp to track"})
    tracked_answers: list[str] = field(
        default_factory=list, metadata={"help": "replies to the first training prompt, parallel to tracked_names"}
    )


@dataclass
class JudgeArguments:
    """Settings of the llm_judge reward."""

    _argument_group_name = "the LLM judge (reward llm_judge)"
    _help_folded = True  # --help names them in one paragraph (few runs set them)

    judge_backend: str = field(default="openai", metadata={"help": "llm_judge: 'openai' (an endpoint) or 'hf' (local)"})
    judge_base_url: str | None = field(
        default=None, metadata={"help": "llm_judge endpoint, e.g. http://127.0.0.1:8000/v1"}
    )
    judge_model: str | None = field(
        default=None, metadata={"help": "llm_judge: the model name the endpoint serves, or a local path (hf)"}
    )
    judge_api_key_env: str | None = field(
        default=None, metadata={"help": "NAME of the environment variable holding the judge's key (none: no key)"}
    )
    judge_max_concurrency: int = field(default=8, metadata={"help": "judge requests in flight"})
    judge_timeout_s: float = field(default=60.0, metadata={"help": "per judge request; timeouts are retried"})
    judge_max_retries: int = field(default=4, metadata={"help": "retries on 429/5xx/timeouts, exponential backoff"})
    judge_mode: str = field(default="text", metadata={"help": "'text' (parse a reply) or 'logprob' (score tokens)"})
    judge_logprob_score: str = field(default="expected", metadata={"help": "logprob mode: 'expected' or 'argmax'"})
    judge_min_score_mass: float = field(
        default=0.5, metadata={"help": "logprob mode: below this mass on the scores 0-10, the reward is None"}
    )


@dataclass
class GRPOScriptArguments(
    TrainingData, RewardArguments, HeldOut, Watch, DynamicSampling, RunArguments, GRPORun, Tracked, JudgeArguments
):
    """What the recipe adds to TRL's ``GRPOConfig`` and ``ModelConfig``: one object, of the groups above in the order
    ``--help`` shows them (each names its group with ``_argument_group_name``, as TRL's parser reads it)."""

    def __post_init__(self):  # the checks these settings alone decide, as they are parsed; check_args has the rest
        with checks.config_errors():  # one line on the command line, as check_args's
            one = {"data": self.data, "curriculum": self.curriculum, "train_limit": self.train_limit}
            checks.check_one_prompt(self.question, self.gold_answer, **one)
            check_tracked(self.tracked_names, self.tracked_answers)  # recipes.tracked


def check_args(script_args, training_args, model_args):
    """Every check that needs no model (recipes/checks.py); returns the training and held-out tasks."""
    training_args.use_vllm, generation = checks.decide_vllm(
        training_args.use_vllm,
        script_args.use_vllm_if_available,
        training_args.vllm_mode,
        model_args.load_in_4bit,
        model_args.load_in_8bit,
    )
    print(generation)  # one line: which backend generates, and why
    checks.check_precision(model_args.use_peft, model_args.dtype, checks.uses_deepspeed(training_args))
    task, eval_task = get_task(script_args.task), get_task(script_args.eval_task)
    checks.check_loss(training_args.loss_type, training_args.scale_rewards)  # group size: GRPOConfig checks it
    names, weights = script_args.reward_funcs, training_args.reward_weights
    checks.check_rewards(names, weights, on_violation=script_args.reward_check)
    checks.check_reward_task(names, task.answer_style)
    checks.check_vllm(training_args.use_vllm, training_args.vllm_mode)
    checks.check_quantization(model_args.load_in_4bit, model_args.load_in_8bit, model_args.use_peft)
    checks.check_steps(script_args.monitor_eval_steps, training_args.logging_steps)
    script_args.hack_alarm_checks = check_watch_args(  # recipes.hack_alarm; resolves the alarm's default N
        script_args.keep_best_checkpoint,
        script_args.hack_alarm_checks,
        script_args.stop_on_hack,
        script_args.monitor_eval_steps,
        training_args.max_steps,
        zero3=uses_zero3(training_args),
    )
    if script_args.one_update_per_group:
        t = training_args
        checks.check_one_update_per_group(t.num_iterations, t.steps_per_generation, t.gradient_accumulation_steps)
    check_dynamic_sampling(  # recipes.dynamic_sampling
        script_args.dynamic_sampling,
        script_args.dynamic_sampling_max_rounds,
        scale_rewards=training_args.scale_rewards,
        aggregation=training_args.multi_objective_aggregation,
        processes=training_args.world_size,
    )
    return task, eval_task


def uses_zero3(training_args) -> bool:
    """True when DeepSpeed ZeRO-3 shards the weights (from ``accelerate launch`` or a ``deepspeed`` config)."""
    if not checks.uses_deepspeed(training_args):
        return False
    if os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return True
    config = training_args.deepspeed
    if isinstance(config, str) and Path(config).is_file():
        config = json.loads(Path(config).read_text())
    return isinstance(config, dict) and config.get("zero_optimization", {}).get("stage") == 3


def held_out_limit(args, max_steps: int) -> int:
    """Problems of the held-out set the run reads (0: none, nothing to check)."""
    monitored = args.monitor_eval_steps and (max_steps < 0 or args.monitor_eval_steps <= max_steps)
    return args.eval_limit or (args.monitor_eval_limit if monitored else 0)


def eval_settings(args, training_args) -> dict:
    """``eval.run.evaluate``'s settings shared by the evaluations before and after training and the monitors' checks."""
    return {
        "data": args.eval_data,
        "max_new_tokens": args.eval_max_new_tokens or training_args.max_completion_length,
        "progress": False,
    }


# --------------------------------------------------------------------------------------------------- data
def training_rows(args, task):
    """The training rows: the one ``question`` when set, else the task's data (first ``train_limit`` problems)."""
    if args.question is not None:
        return one_prompt_rows(task, args.question, args.gold_answer, args.instruction)
    rows = load_rows(task, args.data)
    rows = to_prompt_rows(task, rows.select(range(min(args.train_limit, len(rows)))) if args.train_limit else rows)
    checks.check_answer_column(rows.column_names, args.data or task.hub_id)
    return rows


# --------------------------------------------------------------------------------------------------- rewards
def build_judge(args: JudgeArguments, policy_path: str | None = None, build_tiny_model: bool = False):
    """The ``llm_judge`` reward from the recipe's options, checked by scoring one answer."""
    if not args.judge_model:
        raise ValueError(
            "reward llm_judge needs judge_model: the model name the endpoint serves (with judge_base_url), or a local "
            "model folder with judge_backend: hf"
        )
    if args.judge_api_key_env and not os.environ.get(args.judge_api_key_env):
        raise ValueError(
            f"judge_api_key_env names {args.judge_api_key_env}, which is not set: export it, or drop "
            "judge_api_key_env for a server that needs no key"
        )
    limits = {
        "max_concurrency": args.judge_max_concurrency,
        "timeout_s": args.judge_timeout_s,
        "max_retries": args.judge_max_retries,
    }
    reward = make_judge_reward(
        args.judge_backend,
        args.judge_model,
        args.judge_base_url,
        args.judge_api_key_env,
        **(limits if args.judge_backend == "openai" else {}),
        mode=args.judge_mode,
        logprob_score=args.judge_logprob_score,
        min_score_mass=args.judge_min_score_mass,
    )
    if not (args.judge_backend == "hf" and build_tiny_model and args.judge_model == policy_path):  # built later
        check_judge(reward.client, "--judge_base_url")  # a server must answer at the URL; a local judge must load
    if args.judge_backend == "openai":  # one request now, so a wrong model name fails before the policy loads
        [probe] = reward.client.score_many([judge_messages("What is 2 + 2?", "2 + 2 = 4\nAnswer: 4")])
        if probe.error:
            raise ValueError(f"the judge endpoint does not answer: {probe.error}. Start it (docs/judge_lab.md)")
    return reward


def check_judge(client, setting: str = "--judge_base_url") -> None:
    """An endpoint judge must answer at its base URL (the key is sent, never shown), a local judge's model must load;
    raises ``eval.sources.SourceError`` (``setting`` is where the URL is set)."""
    if isinstance(client, OpenAIJudgeClient):
        fix = f"start the judge server (vllm serve {client.model}, docs/judge_lab.md) or set {setting} to its URL"
        check_endpoint(client.base_url, client._key() or None, fix, what="the judge endpoint")
    elif isinstance(client, HFJudgeClient):
        check_model_source(client.model_name_or_path, "judge_model")


def build_reward_model(path: str | None):
    """The ``reward_model`` reward on the folder ``path`` (default: ``LEASH_REWARD_MODEL``), checked before loading."""
    path = path or os.environ.get(ENV_PATH)
    if not path:
        raise ValueError(
            "reward reward_model needs reward_model_path: the output_dir of `python -m recipes.reward_model` "
            f"(or set {ENV_PATH})"
        )
    check_reward_model(path)
    return RewardModelReward(path)


def build_rewards(
    names: Sequence[str], args: GRPOScriptArguments, policy_path: str | None = None, build_tiny_model: bool = False
) -> list[Callable]:
    """The reward callables for ``names``, in order: a judge and a reward model built from ``args``, checked."""
    builders = {
        "llm_judge": lambda: build_judge(args, policy_path, build_tiny_model),
        "reward_model": lambda: build_reward_model(args.reward_model_path),
    }
    return [builders[name]() if name in builders else get_reward(name) for name in names]


def reward_stats(reward_funcs: Sequence[Callable]) -> dict:
    """``{"reward_stats": ...}`` for the run's report: the counts kept by rewards that call out (a judge's requests)."""
    stats = {f.__name__: f.client.stats.as_dict() for f in reward_funcs if hasattr(getattr(f, "client", None), "stats")}
    return {"reward_stats": stats} if stats else {}


# --------------------------------------------------------------------------------------------------- monitors
def reward_monitor(names: list[str], funcs: list, training_args, eval_task_name: str):
    """The run's rewards wrapped by ``recipes.monitors.RewardMonitor``, the first correctness reward (weight 0
    included) as the verdict."""
    correctness = [i for i, name in enumerate(names) if reward_info(name).kind == "correctness"]
    return RewardMonitor(
        funcs,
        training_args.reward_weights,
        eval_task_name,
        training_args.max_completion_length,
        correctness[0] if correctness else None,
        group_size=training_args.num_generations,
    )


def build_monitors(args, training_args, rows, reward_funcs: list, task, eval_task) -> MonitorCallback:
    """The monitors: the reward recorder in a ``MonitorCallback`` that also probes, evaluates and keeps top answers."""
    monitor = reward_monitor(args.reward_funcs, reward_funcs, training_args, eval_task.name)
    probes = rows.select(range(min(args.probe_problems, len(rows))))
    return MonitorCallback(
        monitor,
        Path(training_args.output_dir),
        probe_problems=[{"question": r["question"], "answer": r["answer"]} for r in probes],
        answer_style=task.answer_style,
        eval_every=args.monitor_eval_steps,
        eval_kwargs={
            "task_name": eval_task.name,
            "limit": args.monitor_eval_limit,
            **eval_settings(args, training_args),
            "data": args.monitor_eval_data or args.eval_data,
        },
        report_to=training_args.report_to or [],
    )


# ------------------------------------------------------------------------------------------ tracked answers, hooks
def make_tracker(args, rows, temperature: float, log):
    """The tracked answers' ``recipes.tracked.ProbabilityTracker`` on the first training prompt (None without any)."""
    if not args.tracked_names:
        return None
    answers = dict(zip(args.tracked_names, args.tracked_answers, strict=True))
    return ProbabilityTracker(rows[0]["prompt"], answers, temperature, log)


@dataclass
class HookContext:
    """What a callback hook is called with (see the module docstring)."""

    script_args: object
    training_args: object
    model_args: object
    output_dir: Path
    rows: object  # the training rows (a datasets.Dataset with prompt, question, answer)
    reward_funcs: list[Callable]
    reward_names: list[str]
    tracker: object | None = None  # recipes.tracked.ProbabilityTracker when tracked_answers are set
    monitor_callback: object | None = field(default=None, repr=False)  # recipes.monitors.MonitorCallback

    def log(self, metrics: dict) -> None:
        """Add ``metrics`` to the next log line (log.jsonl and every report_to backend)."""
        self.monitor_callback.log(metrics)

    def held_out(self, model, tokenizer, step: int) -> dict:
        """The recipe's held-out ``eval/...`` metrics at ``step``."""
        return self.monitor_callback.held_out(model, tokenizer, step)


def load_hooks(specs: Sequence[str]) -> list[Callable]:
    return [checks.import_hook(spec) for spec in specs]


def call_hooks(hooks: Sequence[Callable], context: HookContext) -> list:
    """The callbacks the hooks return, in order; each must be a ``TrainerCallback``."""
    callbacks = []
    for hook in hooks:
        made = hook(context)
        made = list(made) if isinstance(made, list | tuple) else [made]
        wrong = [type(c).__name__ for c in made if not isinstance(c, TrainerCallback)]
        if wrong:
            raise ValueError(
                f"callback hook {hook.__module__}:{hook.__name__} returned {wrong}, not TrainerCallback(s): return "
                "a transformers.TrainerCallback or a list of them"
            )
        callbacks += made
    return callbacks


def run_files(callbacks: Sequence) -> list[str]:
    """The files under ``output_dir`` that the callbacks write and a resumed run appends to."""
    return [name for c in callbacks for name in getattr(c, "run_files", ())]


def extra_callbacks(args, training_args, model_args, rows, reward_funcs: list, monitors: MonitorCallback) -> list:
    """The tracked answers' tracker and the callbacks of the config's hooks, in that order."""
    tracker = make_tracker(args, rows, training_args.temperature, monitors.log)
    out = Path(training_args.output_dir)
    context = HookContext(
        args, training_args, model_args, out, rows, reward_funcs, args.reward_funcs, tracker, monitors
    )
    return ([tracker] if tracker else []) + call_hooks(load_hooks(args.callbacks), context)


# --------------------------------------------------------------------------------------------------- the trainer
def held_out_watch(script_args, output_dir: str | Path, report_to: Sequence[str]) -> list[TrainerCallback]:
    """The recipe's callbacks on the held-out checks, as its options ask: the hack alarm, then the best checkpoint."""
    out = Path(output_dir)
    made: list[TrainerCallback] = []
    if script_args.hack_alarm_checks:
        made.append(
            HackAlarm(
                script_args.hack_alarm_checks,
                script_args.monitor_eval_steps,
                stop=script_args.stop_on_hack,
                log_path=out / "log.jsonl",
                n_problems=script_args.monitor_eval_limit,
                report_to=report_to,
            )
        )
    if script_args.keep_best_checkpoint:
        made.append(BestCheckpoint(out / "best"))
    return made


def watch_lines(report: dict) -> list[str]:
    """The best checkpoint and the hack alarm, for a recipe's printed summary (nothing when neither ran)."""
    lines = []
    if "best_checkpoint" in report:
        best = report["best_checkpoint"]
        lines.append(
            "best checkpoint: none (no held-out check ran)"
            if best is None
            else f"best checkpoint: {best['path']} (step {best['step']}, held-out accuracy {best['accuracy']:.3f}, "
            f"n={best['n']})"
        )
    if "hack_alarm" in report:
        alarm = report["hack_alarm"]
        fired = alarm["fired"]
        lines.append(
            f"hack alarm: not raised (false alarms at most {alarm['alpha']} per run)"
            if fired is None
            else f"HACK ALARM raised at step {fired['step']}: held-out accuracy {fired['accuracy_reference']:.3f} at "
            f"step {fired['reference_step']} -> {fired['accuracy_window']:.3f} (p={fired['p_fall']:.2g} < "
            f"{fired['level']:.2g}), training reward up (tau {fired['reward_tau']:+.2f})"
            + (" (run stopped)" if alarm["stopped"] else "")
        )
    return lines


def build_trainer(
    args, training_args, model_args, rows, monitors: MonitorCallback, watch: list, extra: list, curriculum, config: dict
):
    """The run's trainer with its callbacks; those that add to a log line (the curriculum's, the held-out ``watch``)
    come before the JSON-lines logger so that their values reach ``log.jsonl``."""
    out = Path(training_args.output_dir)
    report_to = training_args.report_to or []
    callbacks = [*watch, JsonlLogCallback(out / "log.jsonl"), WandbConfigCallback(config, report_to), monitors, *extra]
    train_rows = rows
    if curriculum:
        train_rows, curriculum_callback = curriculum(rows, training_args)
        callbacks.insert(0, curriculum_callback)
    callbacks.insert(0, TrainSeconds())  # first of all: the others' checks fall outside the seconds it counts
    trainer = grpo_trainer(
        monitor_callback=monitors,
        cpu_speedups=args.cpu_speedups,
        dynamic_sampling_max_rounds=args.dynamic_sampling_max_rounds if args.dynamic_sampling else 0,
        model=model_args.model_name_or_path,
        reward_funcs=monitors.monitor.wrapped(),
        args=training_args,
        train_dataset=train_rows,
        peft_config=trl.get_peft_config(model_args),
        quantization_config=trl.get_quantization_config(model_args),
        callbacks=callbacks,
    )
    for callback in extra:  # the tracker's reference model and the judge lab's completions buffer are the trainer's
        if hasattr(callback, "attach"):
            callback.attach(trainer)
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    monitors.monitor.stop_token_ids = [*trainer.eos_token_ids, tokenizer.pad_token_id]
    return trainer


def grpo_trainer(
    monitor_callback: MonitorCallback | None = None,
    cpu_speedups: bool = False,
    dynamic_sampling_max_rounds: int = 0,
    **kwargs,
):
    """TRL's ``GRPOTrainer`` with the monitors' log, plus ``recipes.cpu_speed`` on a bf16 CPU run (~1.6x faster a
    step, same numbers) and ``recipes.dynamic_sampling`` when ``dynamic_sampling_max_rounds`` > 0."""
    base = trl.GRPOTrainer
    if cpu_speedups and cpu_bf16_run(kwargs["args"]):
        base = fast_cpu_trainer(base)
    if dynamic_sampling_max_rounds:
        base = dynamic_sampling_trainer(base, dynamic_sampling_max_rounds)
    return make_monitored_trainer_class(base)(monitor_callback=monitor_callback, **kwargs)


def cpu_bf16_run(training_args) -> bool:
    """True when the run trains on a CPU under bf16 autocast (the case ``recipes.cpu_speed`` was measured on)."""
    return bool(training_args.bf16) and (training_args.use_cpu or training_args.device.type == "cpu")
