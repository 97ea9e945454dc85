"""Rewards for GRPO on maths, all following TRL's contract ``f(completions, **kwargs) -> list[float | None]``.

>>> reward = get_reward("gsm8k_correctness")
>>> reward([[{"role": "assistant", "content": "3 + 5 = 8\\n#### 8"}]], answer=["8"])
[1.0]
>>> check_reward_weights(["gsm8k_correctness", "gsm8k_format"], [1.0, 1.0])
"""

from rewards.registry import REGISTRY, REWARDS, RewardInfo, check_reward_weights, get_reward, reward_info, reward_names

__all__ = ["REGISTRY", "REWARDS", "RewardInfo", "check_reward_weights", "get_reward", "reward_info", "reward_names"]
