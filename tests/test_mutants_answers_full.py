"""Behaviour of the answer extractor that the full mutation run of ``rewards/answers.py`` (docs/mutation.md) found
unpinned: characters folded inside a number, a gold's trailing period, the number and segment length limits, markers
sharing a line, and the forms of ``\\boxed`` a model writes besides ``\\boxed{...}``.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_answers_full.py
"""

import pytest

import rewards.verify as verify
from rewards.answers import MAX_NUMBER_CHARS, MAX_SEGMENT_CHARS, extract_answer, find_boxed, normalize_number


@pytest.mark.parametrize(
    "text, value",
    [
        ("She pays\n#### 1\u200b000", "1000"),  # a zero-width space inside the number is dropped, not a separator
        ("The temperature fell to\n#### \u221212", "-12"),  # the unicode minus sign is a minus
    ],
)
def test_invisible_and_unicode_characters_inside_a_number_are_folded(text, value):
    assert extract_answer(text).value == value


def test_a_gold_written_with_a_trailing_period_is_read():
    assert normalize_number("$1,234.00.") == "1234"
    # the GSM8K comparison reads the gold through normalize_number
    assert verify.compare_answers("1234", "$1,234.00.", task="gsm8k") is verify.Verdict.EQUAL


def test_a_number_of_exactly_max_number_chars_is_read_and_one_longer_is_not():
    at_limit = "1." + "0" * (MAX_NUMBER_CHARS - 2)  # 1 with trailing zeros
    assert (len(at_limit), normalize_number(at_limit)) == (MAX_NUMBER_CHARS, "1")
    assert normalize_number(at_limit + "0") is None


def test_a_small_decimal_answer_is_written_out_not_in_exponent_form():
    assert extract_answer("The dose per gram is\n#### 0.0000005").value == "0.0000005"  # not "5E-7"


def test_only_the_first_max_segment_chars_after_a_marker_are_read():
    # a number past the segment, on the same line, is prose, not a second candidate
    text = "#### 18 dollars" + " and then some" * (MAX_SEGMENT_CHARS // 10) + " 19\n"
    answer = extract_answer(text)
    assert (answer.value, answer.reason) == ("18", "ok")


@pytest.mark.parametrize("text", ["#### 17 #### 18", "#### 17 #### 18 #### 18"])
def test_markers_on_one_line_are_each_read_up_to_the_next_marker(text):
    # each marker's segment ends at the next one: "17" and "18" are two committed answers that disagree
    answer = extract_answer(text)
    assert (answer.value, answer.reason, answer.n_markers) == (None, "conflicting_markers", text.count("####"))


@pytest.mark.parametrize("text", ["so the final answer is \\boxed", "so the final answer is \\boxed  "])
def test_a_completion_cut_off_right_after_boxed_has_no_answer(text):
    # generation stopped at the token limit just after the command: no box, and no IndexError
    assert find_boxed(text) == []
    assert extract_answer(text, task="math").reason == "no_marker"


def test_a_space_between_boxed_and_its_brace_is_allowed():
    text = "So \\boxed {18}. Done."
    answer = extract_answer(text, task="math")
    assert (answer.value, answer.reason, answer.end) == ("18", "ok", text.index("}") + 1)


def test_boxed_with_one_token_after_a_space_is_a_box():
    text = "So \\boxed 5 apples."
    assert find_boxed(text) == [("5", 3, 11)]  # (content, start, end): end just past the "5"
    answer = extract_answer(text, task="math")
    assert (answer.value, answer.reason, answer.end) == ("5", "ok", 11)


def test_a_command_that_only_starts_with_fbox_is_not_a_box():
    text = "\\setlength{\\fboxsep}{2pt} so \\boxed{18}"  # \fboxsep is LaTeX's padding length, not \fbox
    assert find_boxed(text) == [("18", 29, 39)]
    assert extract_answer(text, task="math").value == "18"


def test_in_a_box_inside_a_box_the_inner_box_is_the_final_answer(monkeypatch):
    # boxes are ordered by where they start, so the inner box comes last; the outer one is compared with it
    asked = []

    def compare_answers(pred, gold, task, timeout):
        asked.append((pred, gold))
        return verify.Verdict.EQUAL

    monkeypatch.setattr(verify, "compare_answers", compare_answers)  # no math-verify worker needed
    text = "So \\boxed{\\boxed{3}}."
    assert [content for content, _, _ in find_boxed(text)] == ["\\boxed{3}", "3"]
    answer = extract_answer(text, task="math")
    assert (answer.value, answer.reason) == ("3", "ok")
    assert asked == [("\\boxed{3}", "3")]
