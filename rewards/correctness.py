"""Correctness rewards: 1.0 when the completion's committed final answer equals the gold answer, else 0.0."""

from __future__ import annotations

from rewards._common import completion_text
from rewards.verify import is_correct


def _correctness(completions, answer, task: str) -> list[float | None]:
    return [
        None if gold is None or str(gold).strip() == "" else float(is_correct(completion_text(c), str(gold), task))
        for c, gold in zip(completions, answer, strict=True)
    ]


def gsm8k_correctness_reward(completions, answer, **kwargs) -> list[float | None]:
    """1.0 when the number after the last ``####`` equals the gold ``answer`` (None when the gold is missing).

    >>> gsm8k_correctness_reward(["5 + 3 = 8\\n#### 8", "#### 17 or 18"], answer=["8", "17"])
    [1.0, 0.0]
    """
    return _correctness(completions, answer, "gsm8k")


def math_correctness_reward(completions, answer, **kwargs) -> list[float | None]:
    """1.0 when the last ``\\boxed{}`` is equivalent (math-verify) to the gold ``answer``.

    >>> math_correctness_reward(["so it is \\\\boxed{\\\\frac{2}{4}}"], answer=["\\\\frac{1}{2}"])
    [1.0]
    """
    return _correctness(completions, answer, "math")
