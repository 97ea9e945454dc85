"""The GRPO recipe's rewards: registry names turned into the callables TRL gets, with the judge and the learned reward
model configured by recipe options (``RewardArguments``) and checked before any policy model loads.

- ``llm_judge``: ``judge_backend`` (``openai``: any OpenAI-compatible endpoint at ``judge_base_url``; ``hf``: a local
  model), ``judge_model``, ``judge_api_key_env`` (the NAME of the variable holding the key: the key itself is never in
  a config, a log or ``resolved_config.json``), ``judge_mode`` (``text`` or ``logprob``) and the client's limits. Before
  training the endpoint must answer (``check_judge``) and score one answer, so a wrong URL or model name
  fails in seconds.
- ``reward_model``: ``reward_model_path``, the folder ``python -m recipes.reward_model`` wrote (default: the
  ``LEASH_REWARD_MODEL`` variable); refused before training when it cannot score (``check_reward_model``).
- every other name: the registered function (``rewards.get_reward``).

>>> [f.__name__ for f in build_rewards(["gsm8k_correctness", "gsm8k_format"], RewardArguments())]
['gsm8k_correctness_reward', 'gsm8k_format_reward']
>>> build_rewards(["llm_judge"], RewardArguments())
Traceback (most recent call last):
...
ValueError: reward llm_judge needs judge_model: the model name the endpoint serves (with judge_base_url), or a local model folder with judge_backend: hf
"""  # noqa: E501

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from eval.sources import check_endpoint, check_model_source
from rewards import get_reward
from rewards.judge import HFJudgeClient, OpenAIJudgeClient, judge_messages, make_judge_reward
from rewards.reward_model import ENV_PATH, RewardModelReward, check_reward_model


@dataclass
class RewardArguments:
    """Settings of the rewards that need more than a name: the LLM judge and the learned reward model."""

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
    reward_model_path: str | None = field(
        default=None,
        metadata={"help": "reward_model: output_dir of python -m recipes.reward_model (default: LEASH_REWARD_MODEL)"},
    )


def build_judge(args: RewardArguments, policy_path: str | None = None, build_tiny_model: bool = False):
    """The ``llm_judge`` reward from the recipe's options, checked: the key's variable is set, the endpoint answers and
    scores one answer (a local judge: its model can be loaded, unless it is the tiny policy the recipe builds)."""
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
    """Before any training: an endpoint judge must have a server answering at its base URL (a GET of ``/models`` with
    a short timeout; the key is sent, never shown), a local judge a model that can be loaded. Raises
    ``eval.sources.SourceError``, one line naming the URL or model and the fix (``setting`` is where the URL is set).
    """
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
    names: Sequence[str], args: RewardArguments, policy_path: str | None = None, build_tiny_model: bool = False
) -> list[Callable]:
    """The reward callables for ``names``, in order: a judge and a reward model built from ``args``, checked."""
    builders = {
        "llm_judge": lambda: build_judge(args, policy_path, build_tiny_model),
        "reward_model": lambda: build_reward_model(args.reward_model_path),
    }
    return [builders[name]() if name in builders else get_reward(name) for name in names]


def reward_stats(reward_funcs: Sequence[Callable]) -> dict[str, dict]:
    """Counts kept by rewards that call out (a judge's requests, retries, failures), by reward name."""
    return {f.__name__: f.client.stats.as_dict() for f in reward_funcs if hasattr(getattr(f, "client", None), "stats")}
