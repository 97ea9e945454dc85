"""Name -> reward function. Configs and recipes find every reward through ``get_reward``."""

from __future__ import annotations

from collections.abc import Callable

from rewards.correctness import gsm8k_correctness_reward, math_correctness_reward
from rewards.format import gsm8k_format_reward, math_format_reward
from rewards.partial import number_anywhere_reward

REWARDS: dict[str, Callable] = {
    "gsm8k_correctness": gsm8k_correctness_reward,
    "math_correctness": math_correctness_reward,
    "gsm8k_format": gsm8k_format_reward,
    "math_format": math_format_reward,
    "number_anywhere": number_anywhere_reward,
}


def reward_names() -> list[str]:
    return sorted(REWARDS)


def get_reward(name: str) -> Callable:
    """The reward function registered under ``name``; a clear error for an unknown one."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}: known rewards are {reward_names()}")
    return REWARDS[name]
