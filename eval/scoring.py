"""Score one completion against its gold answer: the same extractor and comparison the correctness rewards use.

``score_completion`` is what eval, the GRPO monitors and the rollouts tool call, so "correct" means one thing
everywhere: the completion's LAST committed final answer (``#### N`` for GSM8K, ``\\boxed{}`` for MATH) equals the
gold answer (decimals for GSM8K, normalised strings then math-verify for MATH). Never an LLM, never the whole text.

>>> score_completion("3 + 5 = 8\\n#### 8", "8", "gsm8k")["correct"]
True
>>> s = score_completion("#### 17 or 18", "17", "gsm8k")
>>> s["correct"], s["reason"], s["format_ok"]
(False, 'hedge', False)
>>> score_completion("so the answer is \\\\boxed{\\\\frac{2}{4}}", "\\\\frac{1}{2}", "math500")["correct"]
True
>>> score_completion("", "8", "gsm8k")["empty"]
True
>>> score_completion("so \\\\boxed{-2 \\\\text{ or } -12}", "-2 \\\\text{ or } -12", "math")["correct"]  # a hedged gold
True
"""

from __future__ import annotations

from rewards.verify import check

ANSWER_STYLES = ("gsm8k", "math")


def answer_style(task_name: str) -> str:
    """The extractor's style for a task name (``gsm8k``, ``math500``, ``gsm8k_train``, ...) or a style itself.

    >>> answer_style("math500"), answer_style("gsm8k_train"), answer_style("math")
    ('math', 'gsm8k', 'math')
    """
    if task_name in ANSWER_STYLES:
        return task_name
    from eval.tasks import get_task

    return get_task(task_name).answer_style


def score_completion(completion: str | None, gold: str | None, task_name: str) -> dict:
    """How one completion scores against the gold final answer (``rewards.verify.check``, as the rewards).

    Args:
        completion: the model's text (None counts as empty).
        gold: the final answer only (``"18"``, ``"\\frac{1}{2}"``), as ``eval.tasks.Task.gold`` returns it.
        task_name: a task of ``eval.tasks.TASKS`` or an answer style (``"gsm8k"``, ``"math"``).

    Returns:
        ``correct`` (bool), ``extracted`` (the committed final answer or None), ``reason`` (``ok``, ``no_marker``,
        ``empty``, ``hedge``, ``conflicting_markers``; ``timeout`` or ``checker_error`` when the comparison gave no
        verdict; ``error``), ``format_ok`` (a single well-formed final answer was found), ``empty`` (the completion
        is blank or its final marker holds nothing), ``n_markers``, ``timeout`` (the comparison ran out of time even
        after its retry: ``correct`` is then False, and a rerun on an idle machine may differ).
    """
    style = answer_style(task_name)
    text = completion or ""
    result = check(text, None if gold is None else str(gold), task=style)
    answer = result.answer
    # A hedged gold ("-2 \\text{ or } -12") is matched by the same list, which the extractor calls a hedge.
    extracted = answer.raw if result.correct and answer.value is None else answer.value
    return {
        "correct": result.correct,
        "extracted": extracted,
        "reason": result.reason,
        "format_ok": extracted is not None,
        "empty": not text.strip() or result.reason == "empty",
        "n_markers": answer.n_markers,
        "timeout": result.timeout,
    }
