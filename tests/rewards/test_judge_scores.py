"""Reading the judge's score: from its reply (``parse_score``), or from the score tokens' probabilities
(``score_distribution``, ``score_token_ids``), rewards/judge_scores.py.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_judge_scores.py``.
"""

from __future__ import annotations

import pytest

from rewards.judge_scores import parse_score

SCORES = [
    # (judge reply, parsed score)
    ("8", 8.0),  # bare number
    (" 7.5 \n", 7.5),  # decimal with whitespace
    ("**9**", 9.0),  # markdown bold
    ("9/10", 9.0),  # fraction of ten
    ("Score: 3", 3.0),  # named score
    ("The answer 17 is right. Score: 10", 10.0),  # reasoning first, score last: the number 17 is not the score
    ("I rate it 6 out of 10.", 6.0),  # "out of 10"
    ("rating = 4", 4.0),  # other wording
    ("The answer 17 is right.", None),  # a number that is not a score
    ("Score: 11", None),  # out of range
    ("", None),  # empty reply
    ("-3", None),  # negative
]


@pytest.mark.parametrize("reply,expected", SCORES)
def test_parse_score(reply, expected):
    assert parse_score(reply) == expected


DISTRIBUTIONS = [
    # (first-position probabilities, probabilities after "1", expected P(score=k) as {k: p}, resolved)
    ({"7": 0.6, "8": 0.4}, {"0": 0.9}, {7: 0.6, 8: 0.4}, True),  # no "1": nothing to split
    ({"1": 0.5, "9": 0.5}, {"0": 0.8}, {1: 0.1, 9: 0.5, 10: 0.4}, True),  # "1" then "0" is 10
    ({"1": 1.0}, {"7": 0.5, "0": 0.25}, {1: 0.25, 10: 0.25}, True),  # "1" then "7" is 17: out of range, dropped
    ({"1": 0.4, "5": 0.6}, None, {1: 0.4, 5: 0.6}, False),  # after "1" unknown: all of it counts as 1, flagged
    ({"10": 0.3, "1": 0.2}, None, {1: 0.2, 10: 0.3}, True),  # "10" is one token: "1" is just 1
    ({"Hello": 0.9, "3": 0.1}, {"0": 1.0}, {3: 0.1}, True),  # other tokens are not scores: mass 0.1
]


@pytest.mark.parametrize("first,after_one,expected,resolved", DISTRIBUTIONS)
def test_score_distribution(first, after_one, expected, resolved):
    from rewards.judge_scores import score_distribution

    probs, was_resolved = score_distribution(first, after_one)
    assert probs == pytest.approx([expected.get(k, 0.0) for k in range(11)])
    assert was_resolved == resolved


def test_score_tokens_must_be_single_tokens():
    from rewards.judge_scores import score_token_ids

    class SplitsSevens:  # a tokenizer with "7" as two tokens, "10" as one
        def encode(self, text, add_special_tokens=False):
            return {"7": [70, 71], "10": [100]}.get(text, [int(text)])

    with pytest.raises(ValueError, match="splits the score '7' into 2 tokens"):
        score_token_ids(SplitsSevens())
