"""Correctness rewards: 1.0 when the completion's committed final answer equals the gold answer, else 0.0.

Compared under a per-completion time budget: a reward never raises and never hangs. ``None`` only without a gold.
"""

from __future__ import annotations

from rewards.answers import TASKS, exact_number, extract_answer, normalize_text
from rewards.completions import completion_text
from rewards.verify import concurrently, is_correct


class CorrectnessReward:
    """1.0 when the completion commits to the gold ``answer`` (TRL contract; a picklable callable).

    With ``think_tags`` only what follows the last ``</think>`` is the answer, and an unclosed think block has none.

    >>> reward = CorrectnessReward("gsm8k", answer_line=True)
    >>> reward.__name__, reward(["so 8 apples.\\nAnswer: 8", "#### 9"], answer=["8", "8"])
    ('gsm8k_correctness_answer_line_reward', [1.0, 0.0])
    >>> CorrectnessReward("gsm8k")(["<think>#### 8", "<think>#### 8</think> #### 9"], answer=["8", "8"])
    [0.0, 0.0]
    >>> CorrectnessReward("gsm8k", think_tags=False)(["<think>#### 8"], answer=["8"])
    [1.0]
    """

    def __init__(self, task: str, answer_line: bool = False, think_tags: bool = True):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}: use one of {TASKS}")
        self.task = task
        self.answer_line = bool(answer_line)
        self.think_tags = bool(think_tags)
        suffix = ("_answer_line" if answer_line else "") + ("" if think_tags else "_no_think_rule")
        self.__name__ = f"{task}_correctness{suffix}_reward"

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
        return float(is_correct(completion_text(completion), str(gold), self.task, self.answer_line, self.think_tags))

    def __repr__(self) -> str:
        return f"CorrectnessReward(task={self.task!r}, answer_line={self.answer_line}, think_tags={self.think_tags})"


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


def final_answer_line_value(text: str) -> str | None:
    """The number on the completion's LAST non-empty line when that line is an ``Answer: N`` line, else None.

    >>> final_answer_line_value("24 - 7 = 17\\nAnswer: 17."), final_answer_line_value("Answer: 17\\nThanks!")
    ('17', None)
    >>> final_answer_line_value("Answer: 3."), final_answer_line_value("#### 17\\nAnswer: 17")
    ('3', None)
    """
    text = normalize_text(text)
    answer = extract_answer(text, task="gsm8k", answer_line=True)
    if answer.marker != "answer_line" or text[answer.end :].strip():
        return None  # a "####" marker, several candidates, or text after the answer line
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines or not lines[-1].strip().lstrip("*").lower().startswith("answer"):
        return None  # only "Answer: N" counts, not "The answer is N" or "A: N"
    return answer.value


def answer_line_correctness_reward(completions, answer, **kwargs) -> list[float | None]:
    """The judge lab's checker: 1.0 only when the completion ENDS with a line ``Answer: N`` and N equals the gold.

    Strict on purpose: the lab's prompt asks for this line, and a checker that accepts only it cannot be talked round.

    >>> answer_line_correctness_reward(["4 * 6 = 24, 24 - 7 = 17.\\nAnswer: 17", "Answer: 17\\nor 18", "Answer: 3/4"],
    ...                                answer=["17", "17", "0.75"])
    [1.0, 0.0, 1.0]
    """
    out = []
    for completion, gold in zip(completions, answer, strict=True):
        gold_value = exact_number(str(gold)) if gold is not None else None
        if gold_value is None:
            out.append(None)
            continue
        out.append(float(exact_number(final_answer_line_value(completion_text(completion))) == gold_value))
    return out
