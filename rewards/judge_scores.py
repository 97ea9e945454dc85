"""What the LLM judge is asked, and how its 0-10 score is read: from its reply, or from its next-token probabilities.

The judge sees the question and the answer, never the gold. A client's ``"text"`` mode parses the reply
(``parse_score``); ``"logprob"`` mode reads P(score = k) from the score tokens' probabilities (``score_distribution``).

>>> parse_score("8"), parse_score("Score: 9/10"), parse_score("**7**"), parse_score("I'd say 6 out of 10.")
(8.0, 9.0, 7.0, 6.0)
>>> parse_score("The answer is correct."), parse_score("Score: 12"), parse_score("")
(None, None, None)
>>> score_distribution({"7": 0.5, "8": 0.3, "1": 0.2}, after_one={"0": 0.5})
([0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.3, 0.0, 0.1], True)
"""

from __future__ import annotations

import re

MAX_SCORE = 10.0
JUDGE_SYSTEM_PROMPT = (
    "You are grading a student's answer to a maths word problem. Judge whether the final answer is correct and the "
    "reasoning sound. Reply with a single integer score from 0 (wrong) to 10 (certainly correct) and nothing else."
)
JUDGE_USER_TEMPLATE = "Question:\n{question}\n\nStudent's answer:\n{answer}\n\nScore (0-10):"

_NUMBER = r"(?<![-\d.])(\d+(?:\.\d+)?)"
# Tried in order; the LAST match of the first rule that matches wins (a judge that reasons first ends with its score).
SCORE_RULES = [
    re.compile(r"^[^\w-]*" + _NUMBER + r"(?:\s*(?:/|out of)\s*10)?\W*$", re.IGNORECASE),  # the whole reply is a score
    re.compile(r"\b(?:score|rating|grade)\b\s*(?:is|of|=|:)?\s*\**\s*" + _NUMBER, re.IGNORECASE),  # "Score: 8"
    re.compile(_NUMBER + r"\s*(?:/|out of)\s*10\b", re.IGNORECASE),  # "8/10", "8 out of 10"
]


def parse_score(reply: str | None) -> float | None:
    """The 0-10 score in a judge's reply, or None: only a reply that IS a number, or names its score ("Score: 8",
    "8/10"), counts; "the answer 17 is right" does not."""
    if not reply:
        return None
    text = reply.strip()
    for rule in SCORE_RULES:
        matches = rule.findall(text)
        if matches:
            value = float(matches[-1])
            return value if 0.0 <= value <= MAX_SCORE else None
    return None


def judge_messages(question: str, answer: str) -> list[dict]:
    """The chat messages sent to the judge: the question and the answer, never the gold.

    >>> judge_messages("2+2?", "4")[1]["content"]
    "Question:\\n2+2?\\n\\nStudent's answer:\\n4\\n\\nScore (0-10):"
    """
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": JUDGE_USER_TEMPLATE.format(question=question.strip(), answer=answer.strip())},
    ]


JUDGE_MODES = ("text", "logprob")
LOGPROB_SCORES = ("expected", "argmax")
SCORE_TOKENS = [str(k) for k in range(int(MAX_SCORE) + 1)]  # "0" ... "10"
LOGPROB_PREFIX = "Score: "  # the local judge's turn starts with it, so its next token is the score
DEFAULT_MIN_SCORE_MASS = 0.5


def score_distribution(first: dict[str, float], after_one: dict[str, float] | None) -> tuple[list[float], bool]:
    """P(score = k), k = 0..10, summing to the score tokens' mass, and whether "10" was resolved: "10" is often two
    tokens, so the mass of "1" is split by ``after_one``, what follows it ("0" makes 10, another digit is dropped)."""
    probs = [float(first.get(token, 0.0)) for token in SCORE_TOKENS]
    resolved = after_one is not None or "10" in first or probs[1] == 0  # "10" as one token: "1" is just 1
    if after_one is not None and probs[1] > 0:
        p_zero = after_one.get("0", 0.0)
        p_more_digits = sum(after_one.get(str(d), 0.0) for d in range(1, 10))
        probs[10] += probs[1] * p_zero
        probs[1] *= max(0.0, 1.0 - p_zero - p_more_digits)
    return [round(p, 12) for p in probs], resolved


def score_from_distribution(probs: list[float], how: str) -> float:
    """The expected score over the score tokens (renormalised), or the most likely score.

    >>> score_from_distribution([0.0] * 7 + [0.5, 0.3, 0.0, 0.1], "expected"), score_from_distribution([0.2] + [0.1] * 10, "argmax")
    (7.666666666666667, 0.0)
    """  # noqa: E501
    mass = sum(probs)
    if how == "argmax":
        return float(max(range(len(probs)), key=probs.__getitem__))
    return sum(k * p for k, p in enumerate(probs)) / mass


def check_mode(mode: str, logprob_score: str, min_score_mass: float) -> None:
    """The scoring settings, checked before any model loads."""
    if mode not in JUDGE_MODES:
        raise ValueError(f"judge mode {mode!r}: use 'text' (parse a reply) or 'logprob' (read the score tokens)")
    if logprob_score not in LOGPROB_SCORES:
        raise ValueError(f"judge logprob_score {logprob_score!r}: use 'expected' or 'argmax'")
    if not 0.0 <= min_score_mass <= 1.0:
        raise ValueError(f"judge min_score_mass must be in [0, 1] (a share of probability), got {min_score_mass}")


def score_token_ids(tokenizer) -> dict[str, int]:
    """Token ids of the scores "0".."9" (each must be ONE token: the log-probability mode reads one position) and of
    "10" when it is one token too."""
    ids = {}
    for token in SCORE_TOKENS:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) == 1:
            ids[token] = encoded[0]
        elif token != "10":
            raise ValueError(
                f"the judge's tokenizer splits the score {token!r} into {len(encoded)} tokens {encoded}: the "
                "log-probability mode needs each of 0-9 as one token; use judge mode 'text' with this judge"
            )
    return ids
