"""Name -> reward function (``get_reward``), with each reward's kind and score range, so that a reward set can be
checked before training (``check_reward_weights``).

>>> get_reward("gsm8k_correctness").__name__
'gsm8k_correctness_reward'
>>> check_reward_weights(["gsm8k_correctness", "gsm8k_format"], [1.0, 0.5])  # 0.05 < 1.0: fine
>>> check_reward_weights(["gsm8k_correctness", "gsm8k_format"], [1.0, 20.0])
Traceback (most recent call last):
...
ValueError: reward set ['gsm8k_correctness', 'gsm8k_format'] with weights [1.0, 20.0]: the non-correctness terms can pay a wrong answer 2 but correctness pays only 1 more for a correct one. Lower the weights of gsm8k_format (or raise the correctness weight) so that 2 < 1, or pass on_violation='warn' to train anyway.
"""  # noqa: E501

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from rewards.control import random_reward
from rewards.correctness import answer_line_correctness_reward, gsm8k_correctness_reward, math_correctness_reward
from rewards.format import DEFAULT_BONUS, gsm8k_format_reward, math_format_reward
from rewards.judge import JudgeReward
from rewards.partial import PARTIAL_CREDIT, number_anywhere_reward
from rewards.reward_model import RewardModelReward

logger = logging.getLogger(__name__)

KINDS = ("correctness", "format", "partial", "judge", "learned")  # learned: an unbounded reward-model score


@dataclass(frozen=True)
class RewardInfo:
    """A registered reward: the TRL-contract callable, what it measures, and the range of its scores."""

    func: Callable
    kind: str  # one of KINDS; only "correctness" terms pay for a correct final answer and nothing else
    max_score: float
    min_score: float = 0.0


REGISTRY: dict[str, RewardInfo] = {
    "gsm8k_correctness": RewardInfo(gsm8k_correctness_reward, "correctness", 1.0),
    "math_correctness": RewardInfo(math_correctness_reward, "correctness", 1.0),
    "gsm8k_format": RewardInfo(gsm8k_format_reward, "format", DEFAULT_BONUS),
    "math_format": RewardInfo(math_format_reward, "format", DEFAULT_BONUS),
    "number_anywhere": RewardInfo(number_anywhere_reward, "partial", PARTIAL_CREDIT),  # deliberately hackable
    "lab_random": RewardInfo(random_reward, "partial", 1.0),  # the CPU lab's control: pays 0/1 at random
    "answer_line_correctness": RewardInfo(answer_line_correctness_reward, "correctness", 1.0),  # judge lab checker
    "llm_judge": RewardInfo(JudgeReward(), "judge", 1.0),  # configured by LEASH_JUDGE_* env vars (rewards/judge.py)
    # a trained Bradley-Terry reward model (LEASH_REWARD_MODEL, rewards/reward_model.py): no bound on its score
    "reward_model": RewardInfo(RewardModelReward(), "learned", math.inf, -math.inf),
}
REWARDS: dict[str, Callable] = {name: info.func for name, info in REGISTRY.items()}  # kept for simple lookups


def reward_names() -> list[str]:
    """Every registered reward name, sorted."""
    return sorted(REGISTRY)


def reward_info(name: str) -> RewardInfo:
    """The registry entry for ``name``; a clear error for an unknown one."""
    if not isinstance(name, str):
        raise TypeError(f"reward names are strings, got {type(name).__name__} {name!r}: use one of {reward_names()}")
    if name not in REGISTRY:
        raise ValueError(f"unknown reward {name!r}: known rewards are {reward_names()}")
    return REGISTRY[name]


def get_reward(name: str) -> Callable:
    """The reward function registered under ``name``; a clear error for an unknown one.

    >>> get_reward("gsm8k_corectness")
    Traceback (most recent call last):
    ...
    ValueError: unknown reward 'gsm8k_corectness': known rewards are ['answer_line_correctness', 'gsm8k_correctness', 'gsm8k_format', 'lab_random', 'llm_judge', 'math_correctness', 'math_format', 'number_anywhere', 'reward_model']
    """  # noqa: E501
    return reward_info(name).func


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def check_reward_weights(names: list[str], weights: list[float] | None = None, on_violation: str = "error") -> None:
    """Refuse (or, with ``on_violation="warn"``, log) a reward set whose other terms can pay a wrong answer, at best,
    as much as correctness pays a correct one. An unbounded learned reward is left out of the sums, and refused with
    no correctness term beside it.

    >>> check_reward_weights(["math_correctness", "math_format", "number_anywhere"], [1.0, 1.0, 1.0])
    >>> check_reward_weights(["number_anywhere", "gsm8k_format"], None, on_violation="warn")  # logs a warning
    """
    if on_violation not in ("error", "warn"):
        raise ValueError(f"on_violation must be 'error' or 'warn', got {on_violation!r}")
    names = list(names)
    if not names:
        raise ValueError("empty reward set: give at least one reward name, e.g. ['gsm8k_correctness']")
    weights = [1.0] * len(names) if weights is None else [float(w) for w in weights]
    if len(weights) != len(names):
        raise ValueError(
            f"{len(names)} reward names {names} but {len(weights)} weights {weights}: give one weight per reward"
        )
    correct_pay, other_pay, others, learned = 0.0, 0.0, [], []
    for name, weight in zip(names, weights, strict=True):
        info = reward_info(name)
        if info.kind == "learned":  # unbounded: kept out of the worst-case sums, handled below
            if weight != 0:
                learned.append(name)
            continue
        best = max(weight * info.max_score, weight * info.min_score)
        if info.kind == "correctness":
            correct_pay += weight * (info.max_score - info.min_score)
        else:
            other_pay += max(best, 0.0)
            if best > 0:
                others.append(name)
    if learned and correct_pay == 0:
        message = (
            f"reward set {names} with weights {weights}: {', '.join(learned)} is a learned score with no bound, and no "
            "correctness term checks the answers, so nothing limits what it pays a wrong one (an RLHF run: the "
            "policy will find what the reward model over-pays). Pass on_violation='warn' (reward_check: warn in a "
            "recipe config) to train it anyway and watch rm/true_accuracy, or add a correctness reward"
        )
        if on_violation == "error":
            raise ValueError(message)
        logger.warning("REWARD HACK RISK: %s", message)
        return
    if learned:
        logger.warning(
            "reward set %s: %s is a learned, unbounded score, so only the bounded terms are checked here; what it pays "
            "each hack probe, relative to a genuine correct answer, is measured by `python -m eval.probe_matrix "
            "--reward-model PATH`",
            names,
            ", ".join(learned),
        )
    if other_pay < correct_pay:
        return
    if correct_pay == 0:
        message = (
            f"reward set {names} with weights {weights} has no correctness term, so nothing tells a right answer "
            f"from a wrong one and its terms can pay a wrong answer {_fmt(other_pay)}. Add a correctness reward "
            f"(e.g. gsm8k_correctness) with a weight above {_fmt(other_pay)}, or pass on_violation='warn' "
            f"(reward_check: warn in a recipe config) to train this set anyway."
        )
    else:
        message = (
            f"reward set {names} with weights {weights}: the non-correctness terms can pay a wrong answer "
            f"{_fmt(other_pay)} but correctness pays only {_fmt(correct_pay)} more for a correct one. "
            f"Lower the weights of {', '.join(others) or 'the other terms'} (or raise the correctness weight) so "
            f"that {_fmt(other_pay)} < {_fmt(correct_pay)}, or pass on_violation='warn' to train anyway."
        )
    if on_violation == "error":
        raise ValueError(message)
    logger.warning("REWARD HACK RISK: %s", message)
