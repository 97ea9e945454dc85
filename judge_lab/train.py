"""The reward-hacking lab: one prompt, GRPO rewarded by an LLM judge or by a strict checker, everything logged.

    # GPU: start a judge server first (docs/judge_lab.md), then one of the four settings
    python -m judge_lab.train --config recipes/configs/judge_lab/qwen2.5-0.5b-instruct/judge_lab_judge_b0.yaml
    python -m judge_lab.train --config recipes/configs/judge_lab/qwen2.5-0.5b-instruct/judge_lab_checker_b0.yaml
    python -m judge_lab.report runs/judge_lab_judge_b0 runs/judge_lab_checker_b0 --out runs/judge_lab_report
    # CPU, tiny local model (mechanics only; the tiny model also serves as a garbage judge)
    python -m judge_lab.train --config recipes/configs/judge_lab/tiny/judge_lab_tiny_judge_b0.04.yaml

The policy is asked one question (default: Priya's muffins, answer 17) and told to finish with ``Answer: <number>``.
TRL's ``GRPOTrainer`` does the training; the lab adds ``judge_lab/tracker.py``: per step, every answer with its
reward, advantage, length and verdict (``steps.jsonl``), and the log-probability of named answers under the policy
and the reference. What to look for is in docs/judge_lab.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from recipes import run_setup, validate
from recipes.model_args import model_init_kwargs

LAB_REWARDS = ("llm_judge", "answer_line_correctness", "gsm8k_correctness")
LAB_CHECKERS = ("answer_line_correctness", "gsm8k_correctness")  # the verdict logged as `correct`


@dataclass
class JudgeLabArguments(run_setup.RunArguments):
    """What the lab adds to TRL's ``GRPOConfig`` and ``ModelConfig`` (``build_tiny_model`` and ``resume`` too)."""

    reward: str = field(default="llm_judge", metadata={"help": f"training reward, one of {LAB_REWARDS}"})
    question: str = field(
        default="Priya buys four boxes of six muffins and gives away seven. How many muffins does she have left?",
        metadata={"help": "the one training question"},
    )
    gold_answer: str = field(default="17", metadata={"help": "its answer (the checker's gold; never shown to a judge)"})
    instruction: str | None = field(
        default=None, metadata={"help": "appended to the question (default: finish with a line 'Answer: <number>')"}
    )
    checker: str = field(
        default="answer_line_correctness",
        metadata={"help": f"the verdict logged as correct, one of {LAB_CHECKERS} (gsm8k_correctness: '#### N')"},
    )
    tracked_names: list[str] = field(default_factory=list, metadata={"help": "names of answers to track"})
    tracked_answers: list[str] = field(default_factory=list, metadata={"help": "their texts, parallel to the names"})
    judge_backend: str = field(default="openai", metadata={"help": "'openai' (an endpoint) or 'hf' (a local model)"})
    judge_base_url: str | None = field(default=None, metadata={"help": "e.g. http://127.0.0.1:8000/v1"})
    judge_model: str | None = field(default=None, metadata={"help": "model name on the endpoint, or a local path"})
    judge_api_key_env: str | None = field(
        default=None, metadata={"help": "NAME of the environment variable holding the key (none for a local server)"}
    )
    judge_max_concurrency: int = field(default=8, metadata={"help": "judge requests in flight"})
    judge_timeout_s: float = field(default=60.0, metadata={"help": "per judge request; timeouts are retried"})
    judge_max_retries: int = field(default=4, metadata={"help": "retries on 429/5xx/timeouts, exponential backoff"})
    judge_mode: str = field(default="text", metadata={"help": "'text' (parse a reply) or 'logprob' (score tokens)"})
    judge_logprob_score: str = field(default="expected", metadata={"help": "logprob mode: 'expected' or 'argmax'"})
    judge_min_score_mass: float = field(
        default=0.5, metadata={"help": "logprob mode: below this mass on the scores 0-10, the reward is None"}
    )


def check_lab(args: JudgeLabArguments, training_args) -> None:
    """The lab's own preconditions, checked before any model is loaded."""
    if args.reward not in LAB_REWARDS:
        raise ValueError(f"reward {args.reward!r}: the lab trains on one of {LAB_REWARDS}")
    if args.checker not in LAB_CHECKERS:
        raise ValueError(f"checker {args.checker!r}: the lab's verdict is one of {LAB_CHECKERS}")
    if len(args.tracked_names) != len(args.tracked_answers) or not args.tracked_names:
        raise ValueError(
            f"tracked_names ({len(args.tracked_names)}) and tracked_answers ({len(args.tracked_answers)}) must be "
            "parallel, non-empty lists: one name per tracked answer text"
        )
    t = training_args
    one_update = (t.num_iterations, t.steps_per_generation, t.gradient_accumulation_steps)
    if one_update != (1, 1, 1) or training_args.logging_steps != 1:
        raise ValueError(
            f"the lab takes one update per group and logs every step: set num_iterations: 1, steps_per_generation: 1, "
            f"gradient_accumulation_steps: 1 and logging_steps: 1 (got {one_update} and {training_args.logging_steps})"
        )
    if training_args.per_device_train_batch_size * training_args.world_size != training_args.num_generations:
        raise ValueError("the lab trains on one prompt: set per_device_train_batch_size x processes = num_generations")
    if args.reward == "llm_judge":
        if not args.judge_model:
            raise ValueError("reward llm_judge needs judge_model (the endpoint's model name, or a local path for hf)")
        if args.judge_api_key_env and not os.environ.get(args.judge_api_key_env):
            raise ValueError(
                f"judge_api_key_env names {args.judge_api_key_env}, which is not set: export it, or drop "
                "judge_api_key_env for a server that needs no key"
            )


def main(script_args, training_args, model_args):
    from trl import GRPOTrainer, get_peft_config

    from eval.monitors import JsonlLogCallback
    from judge_lab.tracker import AnswerTap, LabStepLogger, ProbabilityTracker, lab_dataset
    from rewards import get_reward
    from rewards.judge import check_judge, judge_messages, make_judge_reward

    # Validate everything that can be checked without the policy model
    args = script_args
    with validate.config_errors():  # bad input stops here, before any model loads (one line on the CLI)
        check_lab(args, training_args)
        validate.check_loss(training_args.loss_type, training_args.scale_rewards)
        validate.check_rewards([args.reward], training_args.reward_weights, on_violation="warn")  # hackable on purpose
        validate.check_vllm(training_args.use_vllm, training_args.vllm_mode)
        validate.check_precision(model_args.use_peft, model_args.dtype, validate.uses_deepspeed(training_args))
        if args.reward == "llm_judge":
            reward = make_judge_reward(
                args.judge_backend,
                args.judge_model,
                args.judge_base_url,
                args.judge_api_key_env,
                **(
                    {
                        "max_concurrency": args.judge_max_concurrency,
                        "timeout_s": args.judge_timeout_s,
                        "max_retries": args.judge_max_retries,
                    }
                    if args.judge_backend == "openai"
                    else {}
                ),
                mode=args.judge_mode,
                logprob_score=args.judge_logprob_score,
                min_score_mass=args.judge_min_score_mass,
            )
            tiny_judge = args.build_tiny_model and args.judge_model == model_args.model_name_or_path  # built below
            if not (args.judge_backend == "hf" and tiny_judge):
                check_judge(reward.client)  # a server must answer at the URL (a quick GET), a local judge must load
            if args.judge_backend == "openai":  # one request now, so a wrong model name fails before the model loads
                [probe] = reward.client.score_many([judge_messages("What is 2 + 2?", "2 + 2 = 4\nAnswer: 4")])
                if probe.error:
                    raise ValueError(f"the judge endpoint does not answer: {probe.error}. Start it (docs/judge_lab.md)")
        else:
            reward = get_reward(args.reward)
        validate.check_model(model_args, args.build_tiny_model)  # last: the checks above need no model source

    # One prompt; the tracker and the per-step answer log hook into TRL's callbacks and reward-side logging
    rows = lab_dataset(args.question, args.gold_answer, *([args.instruction] if args.instruction else []))
    tracker = ProbabilityTracker(
        rows[0]["prompt"], dict(zip(args.tracked_names, args.tracked_answers, strict=True)), training_args.temperature
    )
    identity = run_setup.run_identity(
        "judge_lab", model_args, training_args.loss_type, training_args.beta, [args.reward], training_args.seed
    )
    out, _ = run_setup.start_run(script_args, training_args, model_args, identity)
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args.model_init_kwargs)

    step_logger = LabStepLogger(out / "steps.jsonl", tracker)
    trainer = GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=[AnswerTap(reward, tracker, checker=get_reward(args.checker))],
        args=training_args,
        train_dataset=rows,
        peft_config=get_peft_config(model_args),
        callbacks=[tracker, JsonlLogCallback(out / "log.jsonl"), step_logger],  # tracker first: it measures
    )
    tracker.attach(trainer)
    step_logger.attach(trainer)
    # resumed: both logs go on; without a reference model (beta 0, full fine-tuning) the tracker's reference is then
    # the policy as the resumed run began
    trainer.train(
        resume_from_checkpoint=run_setup.resume_checkpoint(training_args, args.resume, ["steps.jsonl", "log.jsonl"])
    )
    if run_setup.is_main_process(training_args):
        print(f"run {training_args.run_name}: per-step answers {out / 'steps.jsonl'}, TRL log {out / 'log.jsonl'}")
        print(f"report: python -m judge_lab.report {out} --out {out / 'report'}")
    if hasattr(reward, "client"):
        print(f"judge: {reward.client.stats.as_dict()}")
    return out


def make_parser():
    from trl import GRPOConfig, ModelConfig, TrlParser

    return TrlParser((JudgeLabArguments, GRPOConfig, ModelConfig))


if __name__ == "__main__":
    validate.run_cli(make_parser, main)
