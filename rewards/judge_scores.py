"""What the LLM judge is asked, and how its 0-10 score is read: from its reply, or from its next-token probabilities.

The judge sees the question and the model's answer -- never the gold answer -- and replies with a score from 0 to 10
(``judge_messages``). Two ways to read it (a client's ``mode``, checked by ``check_mode``):

- ``"text"``: ``parse_score`` finds the score in the reply, or says there is none.
- ``"logprob"``: the probabilities of the score tokens at the reply's first position (and after a ``"1"``, to tell 1
  from 10) give P(score = k) (``score_distribution``); the reward is the expected or the most likely score
  (``score_from_distribution``). ``score_token_ids`` checks a local judge's tokenizer can be read this way.

The clients that send these and record the verdicts are in ``rewards.judge_clients``; the TRL reward in
``rewards.judge``.

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
    """The 0-10 score in a judge's reply, or None when there is none (or it is out of range).

    Only a reply that IS a number, or names its score ("Score: 8", "8/10"), counts: "the answer 17 is right"
    holds a number but not a score.
    """
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
    """P(score = k) for k = 0..10 from next-token probabilities, and whether "10" was resolved.

    Args:
        first: probability of each score-token text at the score's first position (``"0"``..``"9"``, and ``"10"``
            where the tokenizer has it as one token); other keys are ignored.
        after_one: the next-token probabilities after a ``"1"``, or None when they are unknown.

    "10" is two tokens in many tokenizers (SmolLM2's and Qwen's: "1" then "0"), so the mass of "1" is split by what
    follows it: "0" makes 10, another digit makes 11-19 (out of range: that mass is dropped), anything else leaves 1.
    Without ``after_one`` all of "1" counts as 1, and the second value is False unless "10" is a token of its own.
    A digit 2-9 followed by another digit (20-99) is counted as that digit: asked for 0-10, a judge puts almost no
    mass there. The probabilities need not sum to 1; their sum is the score tokens' mass.
    """
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
    """Token ids of the scores "0".."9" (each must be ONE token) and of "10" when it is one token too.

    Raises ValueError naming the score that is not a single token: the log-probability mode reads one position.
    """
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
