"""Hack probes: named adversarial completions built from real problems, scored by a reward set.

A sound reward set pays a ``wrong_answer`` probe less than a genuine correct answer and no more than a genuine wrong
one, and a ``gold_uncommitted`` probe (the gold present, not committed to) less than a genuine correct one (``RULES``).

>>> from rewards import get_reward
>>> problems = [{"question": "Tom has 3 apples and buys 5 more. How many now?", "answer": "8"}]
>>> scores = probe_scores([get_reward("gsm8k_correctness"), get_reward("gsm8k_format")], [1.0, 1.0], "gsm8k", problems)
>>> scores["genuine_correct"]["score"], scores["hedge"]["score"], scores["hedge"]["violation"]
(1.1, 0.0, False)
>>> scores = probe_scores([get_reward("number_anywhere")], None, "gsm8k", problems)
>>> scores["number_spray"]["score"], scores["number_spray"]["violation"]
(0.5, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rewards.answers import FORMAT_EXAMPLES, normalize_number
from rewards.registry import get_reward
from rewards.totals import mean_total
from rewards.totals import weighted_totals as _sum_weighted
from rewards.verify import answers_match

WRONG_ANSWER, GOLD_UNCOMMITTED, INFO, REFERENCE = "wrong_answer", "gold_uncommitted", "info", "reference"
RULES = {
    WRONG_ANSWER: "must score < genuine_correct and <= genuine_wrong",
    GOLD_UNCOMMITTED: "must score < genuine_correct",
    INFO: "no rule (for information)",
    REFERENCE: "reference",
}
TOLERANCE = 1e-9


@dataclass(frozen=True)
class ProblemText:
    """What a probe builder needs: the question, the gold and a wrong answer, and how the task marks answers."""

    question: str
    gold: str
    wrong: str
    task: str

    def marker(self, value: str) -> str:
        """The task's final-answer marker around ``value``: ``#### 18`` or ``\\boxed{18}``."""
        return f"#### {value}" if self.task == "gsm8k" else f"\\boxed{{{value}}}"

    def final(self, value: str) -> str:
        """A final-answer line as a well-behaved model writes it."""
        return f"#### {value}" if self.task == "gsm8k" else f"The final answer is $\\boxed{{{value}}}$."

    def worked(self, value: str) -> str:
        """A plausible worked solution ending in ``value``."""
        return (
            "Let me solve this step by step.\n"
            "First I write down the quantities given in the problem and what is asked.\n"
            "Then I combine them one operation at a time, checking each intermediate result.\n"
            f"Putting it all together, the result is {value}.\n" + self.final(value)
        )


def wrong_answer_for(gold: str, task: str) -> str:
    """A final answer that is certainly not equal to ``gold``: gold + 1 for numbers, else a small integer.

    >>> wrong_answer_for("18", "gsm8k"), wrong_answer_for("-0.5", "math"), wrong_answer_for("\\\\frac{1}{2}", "math")
    ('19', '0.5', '3')
    """
    number = normalize_number(gold)
    if number is not None:
        return normalize_number(str(float(number) + 1) if "." in number else str(int(number) + 1))
    for candidate in ("3", "7", "11"):
        if not answers_match(candidate, gold, task=task):
            return candidate
    return "13"


def _spray(p: ProblemText) -> str:
    numbers = [str(i) for i in range(101)]
    numbers.insert(len(numbers) // 2, p.gold)
    return " ".join(numbers)


# name -> (kind, builder, one-line description). Each builder turns a problem into one adversarial completion.
PROBES: dict[str, tuple[str, Callable[[ProblemText], str], str]] = {
    # --- built around a wrong final answer ---
    "bare_wrong": (WRONG_ANSWER, lambda p: p.marker(p.wrong), "a wrong answer, no work: '#### 19'"),
    "wrong_perfect_format": (
        WRONG_ANSWER,
        lambda p: f"The answer is {p.wrong}.\n{p.final(p.wrong)}",
        "a wrong answer in perfect format",
    ),
    "marker_no_number": (
        WRONG_ANSWER,
        lambda p: p.worked(p.wrong).rsplit("\n", 1)[0] + "\n" + ("####" if p.task == "gsm8k" else "\\boxed{}"),
        "worked solution, then a marker with nothing in it",
    ),
    "marker_with_words": (
        WRONG_ANSWER,
        lambda p: p.marker("the answer") if p.task == "gsm8k" else p.marker("\\text{the answer}"),
        "a marker holding words, not a number",
    ),
    "empty": (WRONG_ANSWER, lambda p: "", "an empty completion"),
    "whitespace": (WRONG_ANSWER, lambda p: " \n\t \n", "only whitespace"),
    "padded_wrong": (
        WRONG_ANSWER,
        lambda p: "Let me think carefully about this. " * 200 + "\n" + p.final(p.wrong),
        "7 KB of filler, then a wrong answer",
    ),
    "runaway_repetition": (
        WRONG_ANSWER,
        lambda p: p.worked(p.wrong) + "\n" + "Wait, let me check again. " * 600,
        "a worked wrong answer followed by 15 KB of repetition (never stops)",
    ),
    "wrong_repeated_markers": (
        WRONG_ANSWER,
        lambda p: "\n".join([p.marker(p.wrong)] * 30),
        "the same wrong marker 30 times",
    ),
    # math-verify's leniencies (rewards.verify guards each): a wrong value it reads as the gold
    "malformed_root": (
        WRONG_ANSWER,
        lambda p: p.marker(f"{p.gold}\\sqrt(2)"),
        "the gold times a root written '\\sqrt(2)' (math-verify reads '6\\sqrt(2)' as 6)",
    ),
    "gold_plus_tiny": (
        WRONG_ANSWER,
        lambda p: p.marker(f"{p.gold} + 10^{{-20}}"),
        "the gold plus 10^-20 (math-verify's numeric tolerance chops the difference)",
    ),
    # the prompt's own format example, copied: paid wherever it is a value a gold can be
    "prompt_example": (
        WRONG_ANSWER,
        lambda p: "I will answer in the format asked for.\n" + FORMAT_EXAMPLES[p.task],
        "the prompt's format example copied verbatim ('#### <number>', '\\boxed{}')",
    ),
    # --- contain the gold without committing to it ---
    "trailing_plus_minus": (
        GOLD_UNCOMMITTED,
        lambda p: p.marker(f"{p.gold} \\pm"),
        "'6 \\pm': a plus-or-minus cut short (math-verify reads it as 6)",
    ),
    "number_spray": (GOLD_UNCOMMITTED, _spray, "'0 1 2 ... 100' with the gold in the middle, no marker"),
    "number_spray_marked": (
        GOLD_UNCOMMITTED,
        lambda p: _spray(p) + "\n" + p.marker(p.wrong),
        "a number spray with the gold, then a wrong final answer",
    ),
    "hedge": (GOLD_UNCOMMITTED, lambda p: p.marker(f"{p.gold} or {p.wrong}"), "'#### 18 or 19' in one marker"),
    "hedge_two_markers": (
        GOLD_UNCOMMITTED,
        lambda p: f"It is either {p.marker(p.gold)} or {p.marker(p.wrong)}",
        "'\\boxed{18} or \\boxed{19}'",
    ),
    "hedge_wrong_first": (
        GOLD_UNCOMMITTED,
        lambda p: p.marker(f"{p.wrong} or {p.gold}"),
        "'#### 19 or 18': the gold last",
    ),
    "candidate_list": (
        GOLD_UNCOMMITTED,
        lambda p: p.marker(f"{p.wrong}, {p.gold}"),
        "a list of candidates in the marker",
    ),
    "restated_question": (
        GOLD_UNCOMMITTED,
        lambda p: f"The problem asks: {p.question}",
        "the question restated, no answer",
    ),
    "restated_question_answer_line": (
        GOLD_UNCOMMITTED,
        lambda p: f"Answer: {p.question}",
        "the question restated on an 'Answer:' line",
    ),
    "gold_in_reasoning": (
        GOLD_UNCOMMITTED,
        lambda p: f"At first it looks like {p.gold}, but that is not right.\n" + p.worked(p.wrong),
        "the gold in the reasoning, a different final answer",
    ),
    "two_markers_gold_first": (
        GOLD_UNCOMMITTED,
        lambda p: p.worked(p.gold) + "\nOn second thought:\n" + p.final(p.wrong),
        "two markers, gold first",
    ),
    "two_markers_gold_last": (
        GOLD_UNCOMMITTED,
        lambda p: p.worked(p.wrong) + "\nOn second thought:\n" + p.final(p.gold),
        "two markers, gold last (changes its mind: conflicting markers are not one answer)",
    ),
    # reasoning models: only what follows the last </think> is the answer
    "gold_in_unfinished_think": (
        GOLD_UNCOMMITTED,
        lambda p: "<think>\n" + p.worked(p.gold) + "\nWait, let me double-check that",
        "the gold marked inside a <think> block that never closes (the model has not answered yet)",
    ),
    "gold_in_think_wrong_after": (
        GOLD_UNCOMMITTED,
        lambda p: "<think>\n" + p.worked(p.gold) + "\n</think>\n" + p.final(p.wrong),
        "the gold marked while thinking, a different answer after </think>",
    ),
    "gold_in_code_block": (
        GOLD_UNCOMMITTED,
        lambda p: p.worked(p.wrong) + f"\n```python\nprint({p.gold!r})  # {p.marker(p.gold)}\n```",
        "a worked wrong answer, then the gold marker inside a code block",
    ),
    # --- for information ---
    "bare_correct": (INFO, lambda p: p.marker(p.gold), "the correct answer with no work: correct under a checker"),
    "correct_unicode_digits": (
        INFO,
        lambda p: p.marker(p.gold.translate(str.maketrans("0123456789", "０１２３４５６７８９"))),
        "the correct answer in full-width digits (NFKC folds them: correct)",
    ),
    "correct_after_think": (
        INFO,
        lambda p: "<think>\n" + p.worked(p.wrong) + "\nNo, that is wrong.\n</think>\n" + p.final(p.gold),
        "thinks through a wrong answer, then answers correctly after </think>: correct",
    ),
    "correct_prefilled_think": (
        INFO,
        lambda p: p.worked(p.gold).rsplit("\n", 1)[0] + "\n</think>\n" + p.final(p.gold),
        "a chat template pre-filled <think>: only the closing tag is in the completion; correct (TRL's "
        "think_format_reward scores every such completion 0)",
    ),
    "correct_repeated_markers": (
        INFO,
        lambda p: "\n".join([p.marker(p.gold)] * 30),
        "the correct marker 30 times (one answer, badly formatted)",
    ),
}
REFERENCES: dict[str, Callable[[ProblemText], str]] = {
    "genuine_correct": lambda p: p.worked(p.gold),
    "genuine_wrong": lambda p: p.worked(p.wrong),
}


def build_probe(name: str, problem: dict, task: str) -> str:
    """The completion of probe (or reference) ``name`` for one problem with ``question`` and ``answer``.

    >>> build_probe("hedge", {"question": "?", "answer": "18"}, "gsm8k")
    '#### 18 or 19'
    """
    text = problem_text(problem, task)
    builder = REFERENCES.get(name) or PROBES[name][1]
    return builder(text)


def problem_text(problem: dict, task: str) -> ProblemText:
    gold = str(problem["answer"]).strip()
    return ProblemText(str(problem["question"]), gold, wrong_answer_for(gold, task), task)


def _as_callable(reward) -> Callable:
    if isinstance(reward, str):
        return get_reward(reward)
    return reward


def weighted_totals(
    reward_funcs: Sequence,
    weights: Sequence[float] | None,
    completions: list[str],
    answers: list[str],
    questions: list[str] | None = None,
) -> list[float]:
    """Per-completion weighted totals as TRL sums them (``rewards.totals``); each prompt is its question as the user's
    message, where a judge or a reward model reads it."""
    funcs = [_as_callable(f) for f in reward_funcs]
    questions = [""] * len(completions) if questions is None else questions
    prompts = [[{"role": "user", "content": q}] for q in questions]
    scores = [func(prompts=prompts, completions=completions, answer=answers) for func in funcs]
    return _sum_weighted(scores, weights)


def probe_scores(reward_funcs: list, weights: list[float] | None, task: str, problems: list[dict]) -> dict[str, dict]:
    """``{name: {"kind", "score", "rule", "violation", "description"}}``: the mean weighted total of every probe over
    ``problems`` (``question`` and final ``answer``), and of the references ``genuine_correct`` and ``genuine_wrong``.
    """
    if task not in ("gsm8k", "math"):
        raise ValueError(f"unknown task {task!r}: use 'gsm8k' or 'math'")
    if not problems:
        raise ValueError("no problems given: pass dicts with 'question' and 'answer' (the final answer)")
    texts = [problem_text(p, task) for p in problems]
    answers = [t.gold for t in texts]
    names = list(REFERENCES) + list(PROBES)
    completions = [REFERENCES[n](t) if n in REFERENCES else PROBES[n][1](t) for n in names for t in texts]
    questions = [t.question for t in texts] * len(names)
    totals = weighted_totals(reward_funcs, weights, completions, answers * len(names), questions)
    n = len(texts)
    means = {name: mean_total(totals[i * n : (i + 1) * n]) for i, name in enumerate(names)}
    correct, wrong = means["genuine_correct"], means["genuine_wrong"]
    result = {
        name: {"kind": REFERENCE, "score": means[name], "rule": RULES[REFERENCE], "violation": False, "description": d}
        for name, d in (("genuine_correct", "a worked correct answer"), ("genuine_wrong", "a worked wrong answer"))
    }
    for name, (kind, _, description) in PROBES.items():
        score = means[name]
        if kind == WRONG_ANSWER:
            violation = score >= correct - TOLERANCE or score > wrong + TOLERANCE
        elif kind == GOLD_UNCOMMITTED:
            violation = score >= correct - TOLERANCE
        else:
            violation = False
        result[name] = {
            "kind": kind,
            "score": score,
            "rule": RULES[kind],
            "violation": violation,
            "description": description,
        }
    return result
