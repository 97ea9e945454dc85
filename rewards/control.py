"""Control rewards for the CPU lab: signals that carry NO information about correctness, on purpose.

Under ``random_reward`` held-out accuracy must not rise; if it does, a real run's "gain" is extra steps or noise.

>>> random_reward(["#### 1", "#### 2", "#### 3", "#### 4", "#### 5", "#### 6"], trainer_state=None)
[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
>>> sum(random_reward([str(i) for i in range(2000)])) / 2000  # a fair coin over many completions
0.5145
"""

from __future__ import annotations

import hashlib
import json


def random_reward(completions, trainer_state=None, **kwargs) -> list[float]:
    """0.0 or 1.0 per completion from a hash of (step, position, text): reproducible, and the same text is not always
    paid the same (that would be a signal).

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
