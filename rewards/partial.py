"""Partial-credit rewards. DELIBERATELY HACKABLE: they exist so users can watch a hack happen."""

from __future__ import annotations

from fractions import Fraction

from rewards.answers import FRACTION_RE, NUMBER_RE, exact_number, fraction_value, normalize_number, normalize_text
from rewards.completions import completion_text

PARTIAL_CREDIT = 0.5


def numbers_in(text: str) -> set[Fraction]:
    """The exact value of every number and fraction in ``text`` (``2 3/4`` gives 2.75, and 3/4, 2, 3 and 4 too).

    >>> sorted(numbers_in("1,000 apples, 3/4 of them, 1/0 of none")) == [0, Fraction(3, 4), 1, 3, 4, 1000]
    True
    """
    text = normalize_text(text)
    values = {Fraction(v) for v in map(normalize_number, set(NUMBER_RE.findall(text))) if v is not None}  # each once
    for m in FRACTION_RE.finditer(text):
        values.add(fraction_value(m))
        num, den = m.group("num") or m.group("fnum"), m.group("den") or m.group("fden")
        if m.group("whole") is not None:  # "step 2 3/4 of them": maybe not a mixed number
            values.add(exact_number(f"{num}/{den}"))
    values.discard(None)
    return values


def number_anywhere_reward(completions, answer, **kwargs) -> list[float | None]:
    """0.5 when the gold number appears anywhere in the text (a fraction equal to it counts: ``3/4`` for 0.75).
    Exploit: spray ``1 2 3 ... 100``.

    >>> number_anywhere_reward(["I think 17, or maybe 18", "1 2 3 4 5", "so 6/8 of it", "1/3 is 0.333"],
    ...                        answer=["18", "4", "0.75", "0.33"])
    [0.5, 0.5, 0.5, 0.0]
    """
    scores: list[float | None] = []
    for c, gold in zip(completions, answer, strict=True):
        target = exact_number(str(gold)) if gold is not None else None
        if target is None:
            scores.append(None)
            continue
        scores.append(PARTIAL_CREDIT if target in numbers_in(completion_text(c)) else 0.0)
    return scores
