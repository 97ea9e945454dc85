"""Control rewards (the CPU lab uses them): signals that carry NO information about correctness, on purpose.

- ``random_reward``: 0 or 1 at random, independent of the completion. If GRPO with it improved held-out accuracy,
  the "gain" of a real run would be extra steps or noise, not the reward's signal; with it, accuracy must not rise.

The hackable control needs nothing new: ``gsm8k_format`` alone (registered in ``rewards.registry``) pays any
well-formed ``#### N`` line, right or wrong.

>>> random_reward(["#### 1", "#### 2", "#### 3", "#### 4", "#### 5", "#### 6"], trainer_state=None)
[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
>>> sum(random_reward([str(i) for i in range(2000)])) / 2000  # a fair coin over many completions
0.5145
"""

from __future__ import annotations

import hashlib
import json


def random_reward(completions, trainer_state=None, **kwargs) -> list[float]:
    """0.0 or 1.0 per completion, drawn from a hash of (training step, position, text): reproducible, uninformative.

    The draw depends on the step so that the same text is not always paid the same (that would be a signal).

    Args:
        completions: TRL completions (plain strings or conversational message lists).
        trainer_state: TRL passes the trainer state; its ``global_step`` varies the draw between steps.

    Returns:
        One 0.0/1.0 per completion.

    Example:
        >>> random_reward(["#### 8", "#### 8"]) == random_reward(["#### 8", "#### 8"])
        True
    """
    step = getattr(trainer_state, "global_step", 0)
    scores = []
    for position, completion in enumerate(completions):
        text = json.dumps(completion, sort_keys=True, default=str)  # plain or conversational alike
        digest = hashlib.sha256(f"{step}|{position}|{text}".encode()).digest()
        scores.append(float(digest[0] & 1))
    return scores
