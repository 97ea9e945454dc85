"""Format rewards: a small bonus for exactly one final-answer marker followed by an answer, at the end."""

from __future__ import annotations

from rewards._common import completion_text
from rewards.answers import extract_answer

DEFAULT_BONUS = 0.1
TRAILING_CHARS = 40  # what may follow the final answer (a period, "dollars", a closing $) and still be "at the end"


def _format(completions, task: str, bonus: float) -> list[float]:
    scores = []
    for c in completions:
        text = completion_text(c).rstrip()
        answer = extract_answer(text, task=task)
        well_formed = answer.ok and answer.n_markers == 1 and len(text) - answer.end <= TRAILING_CHARS
        scores.append(bonus if well_formed else 0.0)
    return scores


def gsm8k_format_reward(completions, **kwargs) -> list[float]:
    """``0.1`` for exactly one ``#### N`` at the end of the completion.

    >>> gsm8k_format_reward(["3 + 5 = 8\\n#### 8", "#### 8\\n#### 9", "####"])
    [0.1, 0.0, 0.0]
    """
    return _format(completions, "gsm8k", DEFAULT_BONUS)


def math_format_reward(completions, **kwargs) -> list[float]:
    """``0.1`` for exactly one ``\\boxed{...}`` with content at the end of the completion.

    >>> math_format_reward(["so \\\\boxed{3}.", "\\\\boxed{}"])
    [0.1, 0.0]
    """
    return _format(completions, "math", DEFAULT_BONUS)
