"""An LLM judge as a TRL reward: ``score / 10`` from a judge shown the question and the answer, never the gold.

A judge's failure gives ``None``, not 0: TRL then gives the answer advantage 0, so the failure neither punishes nor
rewards it (0 would be noise with a direction).
"""

from __future__ import annotations

import os

from rewards.completions import completion_text
from rewards.correctness import answer_line_correctness_reward
from rewards.judge_clients import HFJudgeClient, JudgeResult, JudgeStats, OpenAIJudgeClient
from rewards.judge_scores import (
    MAX_SCORE,
    judge_messages,
    parse_score,
    score_distribution,
    score_from_distribution,
    score_token_ids,
)

__all__ = [
    "HFJudgeClient",
    "JudgeResult",
    "JudgeReward",
    "JudgeStats",
    "OpenAIJudgeClient",
    "answer_line_correctness_reward",
    "judge_client_from_env",
    "judge_messages",
    "make_judge_reward",
    "parse_score",
    "score_distribution",
    "score_from_distribution",
    "score_token_ids",
]


def _question_of(prompt) -> str:
    """The question text of a prompt: a plain string, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users else ""


class JudgeReward:
    """TRL reward: ``score / 10`` from an LLM judge shown the question and the answer (never the gold).

    The question is the ``question`` column, else the prompt's last user message. Logs the raw scores (``judge_score``).

    >>> import pickle
    >>> reward = JudgeReward(OpenAIJudgeClient("http://127.0.0.1:1/v1", "m", max_retries=0, timeout_s=0.5))
    >>> reward.__name__, pickle.loads(pickle.dumps(reward)).__name__
    ('llm_judge_reward', 'llm_judge_reward')
    """

    def __init__(self, client=None, name: str = "llm_judge_reward"):
        self.client = client  # None: built from the LEASH_JUDGE_* environment variables at the first call
        self.__name__ = name

    def __repr__(self) -> str:
        return f"JudgeReward({self.client!r})"

    def __call__(self, prompts, completions, question=None, log_extra=None, log_metric=None, **kwargs):
        if self.client is None:
            self.client = judge_client_from_env()
        questions = question if question is not None else [_question_of(p) for p in prompts]
        conversations = [
            judge_messages(str(q), completion_text(c)) for q, c in zip(questions, completions, strict=True)
        ]
        results = self.client.score_many(conversations)
        if log_extra is not None:
            log_extra("judge_score", [r.score for r in results])
        if log_metric is not None and results:
            log_metric(
                "judge/unparseable_frac", sum(r.score is None and r.error is None for r in results) / len(results)
            )
            log_metric("judge/failed_frac", sum(r.error is not None for r in results) / len(results))
            if getattr(self.client, "mode", "text") == "logprob":  # the score tokens' mass, and how often it was low
                masses = [r.mass for r in results if r.mass is not None]
                log_metric(
                    "judge/low_mass_frac", sum(r.score is None and r.mass is not None for r in results) / len(results)
                )
                if masses:
                    log_metric("judge/score_mass_mean", sum(masses) / len(masses))
        return [None if r.score is None else r.score / MAX_SCORE for r in results]


def make_judge_reward(
    backend: str = "openai",
    model: str = "",
    base_url: str | None = None,
    api_key_env: str | None = None,
    **client_kwargs,
) -> JudgeReward:
    """A ``JudgeReward`` over an endpoint (``backend="openai"``) or a local model (``backend="hf"``).

    >>> make_judge_reward("openai", "judge-model", "http://127.0.0.1:8000/v1", "JUDGE_KEY")
    JudgeReward(OpenAIJudgeClient(url='http://127.0.0.1:8000/v1/chat/completions', model='judge-model', api_key_env='JUDGE_KEY'))
    >>> make_judge_reward("hf", "")
    Traceback (most recent call last):
    ...
    ValueError: judge model path is empty: give a local folder or hub id (judge_model)
    """  # noqa: E501
    if backend == "openai":
        if not base_url:
            raise ValueError("judge backend 'openai' needs a base_url (e.g. http://127.0.0.1:8000/v1 for vllm serve)")
        return JudgeReward(OpenAIJudgeClient(base_url, model, api_key_env, **client_kwargs))
    if backend == "hf":
        return JudgeReward(HFJudgeClient(model, **client_kwargs))
    raise ValueError(f"unknown judge backend {backend!r}: use 'openai' (an endpoint) or 'hf' (a local model)")


JUDGE_ENV_VARS = ("LEASH_JUDGE_BACKEND", "LEASH_JUDGE_BASE_URL", "LEASH_JUDGE_MODEL", "LEASH_JUDGE_API_KEY_ENV")


def judge_client_from_env():
    """The judge behind the registry's ``llm_judge``, from ``LEASH_JUDGE_*`` (``_API_KEY_ENV`` names the key's
    variable: the key itself stays in the environment).

    >>> import os; os.environ.pop("LEASH_JUDGE_MODEL", None) and None
    >>> judge_client_from_env()
    Traceback (most recent call last):
    ...
    ValueError: the llm_judge reward needs a judge: set LEASH_JUDGE_MODEL (and LEASH_JUDGE_BASE_URL for an endpoint; LEASH_JUDGE_API_KEY_ENV names the key's variable), or build one with rewards.judge.make_judge_reward(...)
    """  # noqa: E501
    backend, base_url, model, key_env = (os.environ.get(name) for name in JUDGE_ENV_VARS)
    if not model:
        raise ValueError(
            "the llm_judge reward needs a judge: set LEASH_JUDGE_MODEL (and LEASH_JUDGE_BASE_URL for an endpoint; "
            "LEASH_JUDGE_API_KEY_ENV names the key's variable), or build one with rewards.judge.make_judge_reward(...)"
        )
    return make_judge_reward(backend or "openai", model, base_url, key_env).client
