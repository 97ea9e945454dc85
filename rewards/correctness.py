"""Correctness rewards: 1.0 when the completion's committed final answer equals the gold answer, else 0.0.

The final answer is what ``rewards.answers.extract_answer`` says it is (the last ``#### N`` for GSM8K, the last
``\\boxed{}`` for MATH; hedges, candidate lists and markers that disagree are no answer), compared by
``rewards.verify.answers_match`` under a per-completion time budget: a reward never raises and never hangs. A batch's
completions are scored up to the checker's pool size at a time (``rewards.verify.concurrently``).
``None`` is returned only when the gold answer itself is missing (TRL then skips this reward for that sample).
"""

from __future__ import annotations

from rewards.answers import TASKS
from rewards.completions import completion_text
from rewards.verify import concurrently, is_correct


class CorrectnessReward:
    """1.0 when the completion commits to the gold ``answer`` (TRL contract; a picklable callable).

    Args:
        task: ``"gsm8k"`` or ``"math"``.
        answer_line: also accept an explicit ``Answer: 17`` line when the task's marker is absent (off by default:
            the registered rewards ask for the task's own marker).

    Example:
        >>> reward = CorrectnessReward("gsm8k", answer_line=True)
        >>> reward.__name__, reward(["so 8 apples.\\nAnswer: 8", "#### 9"], answer=["8", "8"])
        ('gsm8k_correctness_answer_line_reward', [1.0, 0.0])
    """

    def __init__(self, task: str, answer_line: bool = False):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}: use one of {TASKS}")
        self.task = task
        self.answer_line = bool(answer_line)
        self.__name__ = f"{task}_correctness{'_answer_line' if answer_line else ''}_reward"

    def __call__(self, completions, answer=None, **kwargs) -> list[float | None]:
        if answer is None:
            raise ValueError(
                f"{self.__name__} needs the dataset's 'answer' column (the final answer only, e.g. '18'): "
                "build the dataset with eval.tasks.to_prompt_rows or add that column"
            )
        return concurrently(self._score, list(zip(completions, answer, strict=True)))

    def _score(self, pair) -> float | None:
        completion, gold = pair
        if gold is None or str(gold).strip() == "":
            return None
        return float(is_correct(completion_text(completion), str(gold), self.task, answer_line=self.answer_line))

    def __repr__(self) -> str:
        return f"CorrectnessReward(task={self.task!r}, answer_line={self.answer_line})"


_gsm8k = CorrectnessReward("gsm8k")
_math = CorrectnessReward("math")


def gsm8k_correctness_reward(completions, answer=None, **kwargs) -> list[float | None]:
    """1.0 when the number after the last ``####`` equals the gold ``answer`` (None when the gold is missing).

    >>> gsm8k_correctness_reward(["5 + 3 = 8\\n#### 8", "#### 17 or 18", [{"role": "assistant", "content": None}]],
    ...                          answer=["8", "17", "8"])
    [1.0, 0.0, 0.0]
    """
    return _gsm8k(completions, answer=answer, **kwargs)


def math_correctness_reward(completions, answer=None, **kwargs) -> list[float | None]:
    """1.0 when the last ``\\boxed{}`` is equivalent (math-verify) to the gold ``answer``.

    >>> math_correctness_reward(["so it is \\\\boxed{\\\\frac{2}{4}}", "\\\\boxed{1}"], answer=["\\\\frac{1}{2}", None])
    [1.0, None]
    """
    return _math(completions, answer=answer, **kwargs)
