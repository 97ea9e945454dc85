"""Partial-credit rewards. DELIBERATELY HACKABLE: they exist so users can watch a hack happen."""

from __future__ import annotations

from rewards.answers import NUMBER_RE, normalize_number, normalize_text
from rewards.completions import completion_text

PARTIAL_CREDIT = 0.5


def number_anywhere_reward(completions, answer, **kwargs) -> list[float | None]:
    """0.5 when the gold number appears anywhere in the text. Exploit: spray ``1 2 3 ... 100``.

    >>> number_anywhere_reward(["I think 17, or maybe 18", "1 2 3 4 5"], answer=["18", "4"])
    [0.5, 0.5]
    """
    scores: list[float | None] = []
    for c, gold in zip(completions, answer, strict=True):
        target = normalize_number(str(gold)) if gold is not None else None
        if target is None:
            scores.append(None)
            continue
        numbers = {normalize_number(n) for n in NUMBER_RE.findall(normalize_text(completion_text(c)))}
        scores.append(PARTIAL_CREDIT if target in numbers else 0.0)
    return scores
