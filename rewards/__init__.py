"""Rewards for GRPO on maths, all following TRL's contract ``f(completions, **kwargs) -> list[float | None]``.

Configs name rewards by string; ``get_reward(name)`` turns the name into the callable:

>>> reward = get_reward("gsm8k_correctness")
>>> reward([[{"role": "assistant", "content": "3 + 5 = 8\\n#### 8"}]], answer=["8"])
[1.0]
"""

from rewards.registry import REWARDS, get_reward, reward_names

__all__ = ["REWARDS", "get_reward", "reward_names"]
