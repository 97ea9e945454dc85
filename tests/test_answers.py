"""The one answer extractor: what counts as a committed final answer, and what does not.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_answers.py
"""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.answers import extract_answer, find_boxed, normalize_number

GSM8K_CASES = [
    ("3 + 5 = 8\n#### 8", "8", "ok"),  # plain
    ("#### $1,234.00.", "1234", "ok"),  # currency, thousands separator, trailing zeros and period
    ("#### -7", "-7", "ok"),  # negative
    ("#### 18 dollars", "18", "ok"),  # a unit after the number
    ("#### ０.５", "0.5", "ok"),  # full-width digits fold to ASCII (NFKC)
    ("#### 12\nmore text\n#### 12", "12", "ok"),  # the same answer twice is still one answer
    ("#### \\pm 12", None, "hedge"),  # plus-or-minus: two values
    ("#### ±12", None, "hedge"),  # the same, as one character
    ("#### 12 \\pm", None, "hedge"),  # cut short after the sign
    ("#### 2\\sqrt(2)", None, "expression"),  # one distinct number, but 2 times a root, not 2
    ("#### 7+7", None, "expression"),  # a sum, not 7
    ("#### 3 \\times 3", None, "expression"),  # a product
    ("#### 7/7", None, "expression"),  # a quotient
    ("#### 2^2", None, "expression"),  # a power
    ("#### 17 or 18", None, "hedge"),  # a hedge in the marker
    ("#### 17, 18", None, "hedge"),  # a candidate list
    ("#### 18?", None, "hedge"),  # a question, not an answer
    ("#### 17\n#### 18", None, "conflicting_markers"),  # two markers that disagree
    ("####", None, "empty"),  # a marker with nothing after it
    ("#### the answer", None, "empty"),  # words, no number
    ("the answer is 18", None, "no_marker"),  # no marker: the last number is NOT taken
    ("", None, "empty"),  # empty completion
    (None, None, "empty"),  # None content
]


@pytest.mark.parametrize("text, value, reason", GSM8K_CASES)
def test_gsm8k_extraction(text, value, reason):
    answer = extract_answer(text, task="gsm8k")
    assert (answer.value, answer.reason) == (value, reason)


MATH_CASES = [
    ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", "ok"),  # plain box
    ("\\fbox{3}", "3", "ok"),  # \fbox counts too
    ("\\boxed{\\{1\\pm\\sqrt{5},-2\\}}", "\\{1\\pm\\sqrt{5},-2\\}", "ok"),  # \pm is one answer, not a hedge
    ("\\boxed{x^{2}} at last", "x^{2}", "ok"),  # nested braces
    ("\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{639}{40}}", "\\frac{639}{40}", "ok"),  # one answer, two forms
    ("\\boxed{12 \\text{ cm}}", "12 \\text{ cm}", "ok"),  # words inside \text are units, not hedges
    ("fill in \\boxed{\\phantom{2}} ... so \\boxed{4}", "4", "ok"),  # a blank from the question is no answer
    ("\\boxed{17} or \\boxed{18}", None, "hedge"),  # two candidates side by side
    ("\\boxed{17 \\text{ or } 18}", None, "hedge"),  # a hedge inside the box
    ("\\boxed{17 \\text{ OR } 18}", None, "hedge"),  # in capitals too
    ("\\boxed{18 \\text{ maybe}}", None, "hedge"),  # a doubt inside \text is a hedge, not a unit
    ("\\boxed{18\\text{ (perhaps 19?)}}", None, "hedge"),
    ("\\boxed{18} is tempting.\n\nBut in the end the answer is \\boxed{19}", None, "conflicting_markers"),  # changes
    ("\\boxed{}", None, "empty"),  # empty box
    ("\\boxed{18", None, "no_marker"),  # unbalanced braces: no box at all
    ("the answer is $18$", None, "no_marker"),  # no box: not taken from the text
]


@pytest.mark.parametrize("text, value, reason", MATH_CASES)
def test_math_extraction(text, value, reason):
    answer = extract_answer(text, task="math")
    assert (answer.value, answer.reason) == (value, reason)


ANSWER_LINE_CASES = [
    ("so 8 in all.\nA: 8", "gsm8k", "8"),  # GPT-3's GSM8K style
    ("Final answer: $1,000", "gsm8k", "1000"),  # "Final answer:" with currency
    ("**Answer:** 17 or 18", "gsm8k", None),  # a hedge on the answer line
    ("The answer is \\frac{1}{2}", "math", "\\frac{1}{2}"),  # MATH answer line
    ("#### 9\nAnswer: 8", "gsm8k", "9"),  # the task's marker wins over an answer line
]


@pytest.mark.parametrize("text, task, value", ANSWER_LINE_CASES)
def test_answer_line_is_opt_in(text, task, value):
    assert extract_answer(text, task=task, answer_line=True).value == value
    if "####" not in text:
        assert extract_answer(text, task=task).value is None  # off by default


NUMBER_CASES = [
    ("18.00", "18"),  # trailing zeros
    ("-0.50", "-0.5"),  # negative decimal
    ("$1,000", "1000"),  # currency and separator
    ("1e3", "1000"),  # exponent notation is a number too
    ("nan", None),  # not finite
    ("1-2", None),  # a range, not a number
    ("", None),  # nothing
]


@pytest.mark.parametrize("raw, normal", NUMBER_CASES)
def test_normalize_number(raw, normal):
    assert normalize_number(raw) == normal


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task 'gsm'"):
        extract_answer("#### 1", task="gsm")


def test_unbalanced_and_nested_boxes():
    # the unbalanced box is skipped, the nested one is kept whole
    assert [c for c, _, _ in find_boxed("\\boxed{a{b}c} \\boxed{{")] == ["a{b}c"]


PATHOLOGICAL = [
    "x" * 1_000_000,  # 1 MB of text
    "\\boxed{}" * 2_000,  # 16 KB of repeated empty boxes
    "\\boxed{1}" * 2_000,  # 18 KB of repeated boxes
    "{" * 100_000 + "\\boxed{" * 1_000,  # unbalanced braces
    "#### " + "9" * 100_000,  # a 100k-digit number
    "####" * 50_000,  # 200 KB of markers
    " " * 500_000 + "A:",  # whitespace before an answer line
]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_pathological_text_is_fast(text, task):
    start = time.perf_counter()
    extract_answer(text, task=task, answer_line=True)
    assert time.perf_counter() - start < 1.0


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789 -.,$#{}\\boxedA:\n or١٢３")), max_size=300))
def test_extractor_never_raises_on_arbitrary_text(text):
    for task in ("gsm8k", "math"):
        answer = extract_answer(text, task=task, answer_line=True)
        assert (answer.value is None) == (answer.reason != "ok")


def test_boxes_that_cannot_be_compared_in_time_are_a_timeout(monkeypatch):
    # two different-looking boxes far apart are compared; a comparison without verdict is said, not called a hedge
    import rewards.verify as verify

    class Pool:
        def compare(self, gold, pred, budget):
            return verify.Verdict.TIMEOUT

    monkeypatch.setattr(verify, "_POOL", Pool())
    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 0.0)
    monkeypatch.setattr(verify, "_CACHE", type(verify._CACHE)())  # a verdict cached by an earlier test would answer
    text = "First \\boxed{\\frac{3}{4}}." + " Checking it again." * 5 + " So \\boxed{0.75}."
    answer = extract_answer(text, task="math")
    assert (answer.value, answer.reason) == (None, "timeout")
    monkeypatch.setattr(verify, "_POOL", verify._WorkerPool(1))  # a real pool: the same boxes are one answer
    try:
        assert extract_answer(text, task="math").value == "0.75"
    finally:
        verify._POOL.close()
