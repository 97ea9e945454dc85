"""Score one completion against its gold answer with the extractor and comparison the correctness rewards use.

Eval, the GRPO monitors and the rollouts tool all call ``score_completion``, so "correct" means one thing everywhere:
the completion's LAST committed final answer equals the gold answer. Never an LLM, never the whole text.

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

``lenient_score`` reads the answer as lm-evaluation-harness does (for comparison with published numbers only; no
reward pays by it) and compares it as the strict score does, so the two differ only in what they read.

>>> text = "3 + 5 = 8 apples"
>>> score_completion(text, "8", "gsm8k")["correct"], lenient_score(text, "8", "gsm8k")["lenient_correct"]
(False, True)
>>> lenient_score("so $x = 3$.", "3", "math500")["lenient_extracted"]
'3'
"""

from __future__ import annotations

import logging
import re

from eval.tasks import get_task
from rewards.answers import find_boxed, normalize_text
from rewards.verify import Verdict, check, compare_answers

logger = logging.getLogger(__name__)

ANSWER_STYLES = ("gsm8k", "math")


def answer_style(task_name: str) -> str:
    """The extractor's style for a task name (``gsm8k``, ``math500``, ``gsm8k_train``, ...) or a style itself.

    >>> answer_style("math500"), answer_style("gsm8k_train"), answer_style("math")
    ('math', 'gsm8k', 'math')
    """
    if task_name in ANSWER_STYLES:
        return task_name
    return get_task(task_name).answer_style


def score_completion(completion: str | None, gold: str | None, task_name: str) -> dict:
    """How one completion scores against the gold final answer, as the rewards score it (``rewards.verify.check``).

    A ``timeout`` (the comparison ran out of time even after a retry) is not correct; on an idle machine it may be.
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


# lm-evaluation-harness's GSM8K "flexible-extract" filter (lm_eval/tasks/gsm8k/gsm8k.yaml, task version 3.0, as in
# lm-eval 0.4.13): this regex over the whole completion, the LAST match (group_select -1), its first non-empty
# group, stripped. bench/eval_vs_lm_eval.py checks the installed lm-eval still uses it.
LM_EVAL_FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# MATH, no box: an explicit statement ("The answer is 5.", "Final Answer: $\frac{1}{2}$"), else the last inline maths.
ANSWER_IS_RE = re.compile(r"\banswer(?:\*\*)?\s*(?:is\b\s*:?|:)(?:\*\*)?[ \t]*(?P<value>[^\n]*\S)", re.IGNORECASE)
INLINE_MATH_RE = re.compile(
    r"(?<!\\)\$\$(?P<display>.+?)(?<!\\)\$\$|(?<!\\)\$(?P<inline>[^$]+?)(?<!\\)\$|\\\((?P<paren>.+?)\\\)|\\\[(?P<bracket>.+?)\\\]",
    re.DOTALL,
)
LENIENT_RULES = {
    "gsm8k": "last number in the completion (lm-eval flexible-extract)",
    "math": "last \\boxed{}, else the final stated value",
}


def lenient_rule(task_name: str) -> str:
    """The lenient rule of a task, in words (results.json ``lenient_rule``).

    >>> lenient_rule("gsm8k_train")
    'last number in the completion (lm-eval flexible-extract)'
    """
    return LENIENT_RULES[answer_style(task_name)]


def _last_number(text: str) -> str | None:
    """The last number as lm-eval's flexible-extract reads it (the raw match, ``"$1,234.00."`` included), or None.

    >>> _last_number("#### 18\\nThat is 18 eggs in 2 days."), _last_number("cost: $1,234.00."), _last_number("none")
    ('2', '$1,234.00.', None)
    """
    matches = LM_EVAL_FLEXIBLE_RE.findall(text)
    if not matches:
        return None
    groups = [g for g in matches[-1] if g]
    return groups[0].strip() if groups else None


def _stated_value(value: str) -> str | None:
    """A statement's value: its first ``$...$`` maths, else its sentence; then the right side of its last ``=``.

    >>> _stated_value("$x = 3$. I hope it is correct."), _stated_value("12 apples. That is all.")
    ('3', '12 apples')
    >>> _stated_value("**5**."), _stated_value("$$y=\\\\frac{1}{2}$$")
    ('5', '\\\\frac{1}{2}')
    """
    math = INLINE_MATH_RE.search(value)
    if math:
        value = next(g for g in math.groups() if g is not None)
    else:
        value = re.split(r"\.\s", value, maxsplit=1)[0]
    value = value.split("=")[-1].strip(" \t*$").rstrip(".").strip(" \t*$")
    return value or None


def lenient_answer(completion: str | None, task_name: str) -> tuple[str | None, str | None]:
    """The answer the lenient rule reads and where it was found, or ``(None, None)``.

    GSM8K: the last number, as lm-eval's flexible-extract reads it. MATH: the last non-empty box, else the last
    "answer is X" statement, else the last inline maths.

    >>> lenient_answer("so \\\\boxed{2}, and then $x = 3$", "math500"), lenient_answer("so $x = 3$.", "math500")
    (('2', 'boxed'), ('3', 'inline_math'))
    >>> lenient_answer("\\\\boxed{3}. The answer goes in \\\\boxed{}.", "math")
    ('3', 'boxed')
    >>> lenient_answer("The answer is 5.", "math"), lenient_answer("no answer", "math")
    (('5', 'answer_is'), (None, None))
    """
    if not completion:
        return None, None
    if answer_style(task_name) == "gsm8k":
        number = _last_number(completion)
        return (number, "last_number") if number is not None else (None, None)
    text = normalize_text(completion)
    boxes = [content for content, _, _ in find_boxed(text) if content]
    if boxes:
        return boxes[-1], "boxed"
    statements = list(ANSWER_IS_RE.finditer(text))
    if statements:
        value = _stated_value(statements[-1].group("value"))
        if value is not None:
            return value, "answer_is"
    spans = list(INLINE_MATH_RE.finditer(text))
    if spans:
        value = _stated_value(spans[-1].group(0))
        if value is not None:
            return value, "inline_math"
    return None, None


def lenient_score(completion: str | None, gold: str | None, task_name: str) -> dict:
    """How one completion scores under the lenient rule, compared as the strict score compares; never raises."""
    style = answer_style(task_name)
    try:
        answer, where = lenient_answer(completion, style)
        verdict = compare_answers(answer, None if gold is None else str(gold), task=style)
    except Exception:  # noqa: BLE001 - scoring never raises on model output
        logger.warning("lenient scoring failed on a completion of %d chars; scored as wrong", len(completion or ""))
        answer, where, verdict = None, None, Verdict.NOT_EQUAL
    return {
        "lenient_extracted": answer,
        "lenient_from": where,
        "lenient_correct": verdict is Verdict.EQUAL,
        "lenient_timeout": verdict is Verdict.TIMEOUT,
    }
