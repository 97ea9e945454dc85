"""Fuzzing the rewards and eval's scoring with hostile completions: no crash, no hang, and no internal exception.

A reward must never raise, and no input may reach an internal exception path: an exception that is caught and
logged (``exc_info``) is a bug in our code, even when the score comes out 0. So the test fails on any log record
that carries a traceback.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_fuzz_rewards.py
A longer run:
    LEASH_FUZZ_EXAMPLES=10000 OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_fuzz_rewards.py
"""

import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval.scoring import score_completion
from rewards import get_reward
from rewards.verify import warm_up

FUZZ_EXAMPLES = int(os.environ.get("LEASH_FUZZ_EXAMPLES", "200"))
REWARDS = ["gsm8k_correctness", "math_correctness", "gsm8k_format", "math_format", "number_anywhere"]
GOLDS = ["27", "-3.5", "1,000", "\\frac{7}{3}", "x^2+1", "(1,2)", "-2 \\text{ or } -12", "\\pm 3", "10^{20}"]

huge_number = st.integers(min_value=-(10**400), max_value=10**400).map(str) | st.sampled_from(
    ["1e999", "9" * 150, "0." + "0" * 120 + "1", "1" + "," * 40, "10^{10^{10}}", "9^{9^{9^{9}}}", "2^{-61}"]
)
token = st.one_of(
    st.text(max_size=12),  # any unicode, control characters and surrogates excluded by hypothesis' default
    st.sampled_from(
        [
            "####",
            "#### ",
            "\\boxed{",
            "\\boxed ",
            "\\fbox{",
            "{",
            "}",
            "$",
            "\\$",
            "\n",
            "\n\n",
            " or ",
            "?",
            "Answer: ",
            "Final answer:",
            "**Answer:**",
            "\\pm",
            "±",
            "\\mp",
            "\\sqrt(",
            "\\sqrt{",
            "\\frac{",
            "\\frac(",
            "\\text{",
            "\\text{ or }",
            "\\%",
            "^\\circ",
            "\\,",
            "\\phantom{2}",
            "\\left(",
            "\\right)",
            "１８",
            "٨",
            "\u200b",
            "\u2212",
            "```",
            "\\\\",
            "^{",
            "_",
            ",",
            ".",
            "-",
            "=",
            "\\infty",
            "i",
        ]
    ),
    huge_number,
)
completion = st.lists(token, max_size=30).map("".join)
nested_box = st.recursive(
    st.one_of(huge_number, st.sampled_from(["", "x", "\\frac{1}{2}", "17 or 18", "\\pm 3"])),
    lambda inner: st.builds(lambda a, b: f"\\boxed{{{a}}}{b}", inner, inner) | inner.map(lambda s: "{" + s + "}"),
    max_leaves=12,
)
boxed_text = completion.map(lambda s: "\\boxed{" + s + "}")  # anything inside one box, newlines included
hostile = st.one_of(
    completion,
    nested_box,
    boxed_text,
    st.builds(lambda a, b: a + "\n" + b, completion, st.one_of(nested_box, boxed_text)),
)


@pytest.fixture(scope="module", autouse=True)
def _workers():
    warm_up()


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostile, gold=st.sampled_from(GOLDS))
def test_hostile_completions_reach_no_internal_exception(text, gold, caplog):
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for name in REWARDS:
            (score,) = get_reward(name)([text], answer=[gold])
            assert score is None or 0.0 <= score <= 1.0
        for task in ("gsm8k", "math"):
            scored = score_completion(text, gold, task)
            assert scored["reason"] != "error"
            assert isinstance(scored["correct"], bool) and isinstance(scored["timeout"], bool)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert not tracebacks, [(r.getMessage(), r.exc_info[1]) for r in tracebacks]
