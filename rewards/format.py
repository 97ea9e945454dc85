"""Format rewards: a small bonus for exactly one final-answer marker followed by an answer, at the end.

A format term alone is the classic reward hack (it pays ``#### 7`` as much as a worked correct answer): keep its
weight well below correctness.
"""

from __future__ import annotations

from rewards.answers import TASKS, extract_answer
from rewards.completions import completion_text

DEFAULT_BONUS = 0.1
TRAILING_CHARS = 40  # what may follow the final answer (a period, "dollars", a closing $) and still be "at the end"


class FormatReward:
    """``bonus`` for exactly one committed final answer (``#### N`` or ``\\boxed{...}``) at the end, else 0.0.

    Picklable, with a fixed ``__name__`` (TRL logs ``rewards/<name>/mean``).

    >>> reward = FormatReward("gsm8k", bonus=0.2)
    >>> reward.__name__, reward(["3 + 5 = 8\\n#### 8", "#### 8\\n#### 9", "####", None])
    ('gsm8k_format_reward', [0.2, 0.0, 0.0, 0.0])
    """

    def __init__(self, task: str, bonus: float = DEFAULT_BONUS, think_tags: bool = True):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}: use one of {TASKS}")
        if not isinstance(bonus, (int, float)) or bonus < 0:
            raise ValueError(f"format bonus must be a number >= 0, got {bonus!r}")
        self.task = task
        self.bonus = float(bonus)
        self.think_tags = bool(think_tags)
        self.__name__ = f"{task}_format{'' if think_tags else '_no_think_rule'}_reward"

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self._score(c) for c in completions]  # no math-verify: a regex's cost per completion

    def _score(self, completion) -> float:
        text = completion_text(completion).rstrip()
        try:
            # Only one marker is paid, so whether two differing boxes are the same answer cannot change the score:
            # they are not compared (with math-verify, hostile completions cost as much here as in correctness).
            answer = extract_answer(text, task=self.task, think_tags=self.think_tags, compare_boxes=False)
        except Exception:  # noqa: BLE001 - a reward never raises on model output
            return 0.0
        well_formed = answer.ok and answer.n_markers == 1 and len(text) - answer.end <= TRAILING_CHARS
        return self.bonus if well_formed else 0.0

    def __repr__(self) -> str:
        return f"FormatReward(task={self.task!r}, bonus={self.bonus}, think_tags={self.think_tags})"


gsm8k_format_reward = FormatReward("gsm8k")
gsm8k_format_reward.__doc__ = "``0.1`` for exactly one ``#### N`` at the end of the completion."
math_format_reward = FormatReward("math")
math_format_reward.__doc__ = "``0.1`` for exactly one ``\\boxed{...}`` with content at the end of the completion."
