"""The one answer extractor: what counts as a committed final answer, and what does not.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_answers.py
"""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rewards.verify as verify
from rewards.answers import (
    MAX_NUMBER_CHARS,
    MAX_SEGMENT_CHARS,
    Answer,
    extract_answer,
    find_boxed,
    gsm8k_gold,
    normalize_number,
)
from rewards.verify import warm_up

# the math-verify workers start while the tests are collected, so that no test's 0.8 s comparison budget pays a
# worker's start-up (seconds on a loaded box), whichever test runs first
warm_up()

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
    ("#### 7/7/7", None, "expression"),  # a quotient of a quotient
    ("#### 2/3 + 1", None, "expression"),  # arithmetic on a fraction
    ("#### 1.5/2", None, "expression"),  # a quotient of decimals, not a fraction as one writes it
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


# A fraction after the marker is the number it is, as a careful reader pays it: its exact value, a decimal when it
# has one, else the reduced fraction (1/3 is not 0.33).
GSM8K_FRACTIONS = [
    ("#### 3/4", "0.75"),
    ("#### 6/8", "0.75"),  # not in lowest terms: the same number
    ("#### 3 / 4", "0.75"),  # spaces around the bar
    ("#### -3/4", "-0.75"),  # a negative fraction
    ("#### 1 1/2", "1.5"),  # a mixed number: one and a half
    ("#### -2 1/4", "-2.25"),  # a negative mixed number: the sign covers both parts
    ("#### 1½", "1.5"),  # a vulgar fraction glued to its whole part
    ("#### \\frac{3}{4}", "0.75"),  # as LaTeX writes it
    ("#### 3/4 cup", "0.75"),  # a unit after it
    ("#### 3/4 = 0.75", "0.75"),  # the same value written twice
    ("#### 7/7", "1"),
    ("#### 1/3", "1/3"),  # no finite decimal: kept exact
    ("#### 2/6", "1/3"),
]


@pytest.mark.parametrize("text, value", GSM8K_FRACTIONS)
def test_a_gsm8k_fraction_is_its_exact_value(text, value):
    answer = extract_answer(text, task="gsm8k")
    assert (answer.value, answer.reason) == (value, "ok")


@pytest.mark.parametrize("text", ["#### 1/0", "#### 0/0", "#### 5 1/0", "#### 1/" + "0" * 5000, "#### 1/" + "7" * 5000])
def test_a_gsm8k_fraction_that_is_no_number_is_no_answer_at_once(text):
    start = time.perf_counter()
    answer = extract_answer(text, task="gsm8k")
    assert (answer.value, answer.reason) == (None, "expression")
    assert time.perf_counter() - start < 0.1


def test_gsm8k_fractions_are_hedges_when_they_disagree():
    assert extract_answer("#### 1/2 3/4").reason == "hedge"
    assert extract_answer("#### 3/4 = 0.8").reason == "hedge"
    assert extract_answer("#### 3/4 or 0.75").reason == "hedge"


def test_eval_scores_a_gsm8k_fraction_exactly():
    from eval.scoring import score_completion

    pairs = [("#### 3/4", "0.75"), ("#### 1/3", "0.33"), ("#### 1/0", "0")]
    scored = [score_completion(c, g, "gsm8k") for c, g in pairs]
    assert [(s["correct"], s["extracted"], s["reason"]) for s in scored] == [
        (True, "0.75", "ok"),
        (False, "1/3", "ok"),
        (False, None, "expression"),
    ]


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


def test_boxes_that_cannot_be_compared_in_time_are_a_timeout(scripted_pool, monkeypatch):
    # two different-looking boxes far apart are compared; a comparison without verdict is said, not called a hedge
    scripted_pool(verify.Verdict.TIMEOUT, verify.Verdict.TIMEOUT)  # out of time, and again on the retry
    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 0.0)
    text = "First \\boxed{\\frac{3}{4}}." + " Checking it again." * 5 + " So \\boxed{0.75}."
    answer = extract_answer(text, task="math")
    assert (answer.value, answer.reason) == (None, "timeout")
    monkeypatch.setattr(verify, "_POOL", verify._WorkerPool(1))  # a real pool: the same boxes are one answer
    try:
        assert extract_answer(text, task="math").value == "0.75"
    finally:
        verify._POOL.close()


# --- numbers as people write them after a marker ---
READER_NUMBER_CASES = [
    ("#### .5", "0.5"),  # a leading decimal point is part of the number
    ("#### -.25", "-0.25"),  # and keeps its sign
    ("#### $.75 per cup", "0.75"),  # after a currency sign
    ("Each costs .5 dollars.\n#### .5", "0.5"),  # in the reasoning too
    ("#### 12 000", "12000"),  # a space groups thousands (SI)
    ("#### 3 250 500 people", "3250500"),  # several groups
    ("#### 7{,}200", "7200"),  # LaTeX's grouped comma
    ("#### 7\\,200", "7200"),  # LaTeX's thin space
    ("#### **64**", "64"),  # markdown bold
    ("#### *64*", "64"),  # markdown italics
    ("#### __64__ apples", "64"),  # underscores
    ("**#### 64**", "64"),  # the whole line in bold
    ("#### <strong>64</strong>", "64"),  # HTML
    ("#### <b><i>64</i></b>", "64"),  # nested emphasis
    ("#### \\textbf{64}", "64"),  # LaTeX bold
]


@pytest.mark.parametrize("completion, value", READER_NUMBER_CASES)
def test_numbers_read_as_a_reader_reads_them(completion, value):
    answer = extract_answer(completion)
    assert (answer.value, answer.reason) == (value, "ok")


@pytest.mark.parametrize(
    "completion, reason",
    [
        ("#### 6**2", "expression"),  # a power in Python's notation, not bold
        ("#### 4 * 16", "expression"),  # a product
        ("#### 12 34", "hedge"),  # two numbers: a space groups exactly three digits
        ("#### 1 0000", "hedge"),  # nor four
    ],
)
def test_what_looks_like_grouping_or_emphasis_but_is_not(completion, reason):
    assert extract_answer(completion).reason == reason


def test_a_leading_point_is_not_dropped_anywhere_a_gold_is_read():
    from rewards.answers import gsm8k_gold
    from rewards.verify import is_correct

    assert gsm8k_gold("Half a cup.\n#### .5") == "0.5"
    assert not is_correct("#### .5", "5") and not is_correct("#### $.50", "50")  # 0.5 is not 5, nor 50
    assert is_correct("#### .5", "0.5") and is_correct("#### $.50", "0.5")


# --- MATH boxes ---
MATH_BOX_CASES = [
    ("so \\boxed{\\textbf{12}}", "12", "ok"),  # bold inside the box
    ("**Answer:** $\\boxed{**12**}$", "12", "ok"),  # markdown inside the box
    ("so \\boxed{7/2.}", "7/2", "ok"),  # a sentence's full stop inside the box
    ("so \\boxed{0.5}", "0.5", "ok"),  # a decimal point that belongs to the number stays
    ("\\boxed{9} is the answer, put within \\boxed{}", "9", "ok"),  # an echoed empty box after a filled one
    ("\\boxed{9}\n\\boxed{ }", "9", "ok"),  # a blank one
    ("\\boxed{}", None, "empty"),  # only an empty box: no answer
    ("\\boxed{}\n\\boxed{}", None, "empty"),  # only empty boxes
]


@pytest.mark.parametrize("completion, value, reason", MATH_BOX_CASES)
def test_math_boxes_read_as_a_reader_reads_them(completion, value, reason):
    answer = extract_answer(completion, task="math")
    assert (answer.value, answer.reason) == (value, reason)


MULTI_PART_CASES = [
    # boxes joined as parts of one answer
    ("so $y = \\boxed{4}$ \\text{ and } $y = \\boxed{-1}$", ("4", "-1")),
    ("The roots are \\boxed{1}, \\boxed{5} and \\boxed{7}.", ("1", "5", "7")),
    ("The solutions are:\n- $a = \\boxed{3}$\n- $a = \\boxed{-7}$", ("3", "-7")),
    ("\\[ x_1 = \\boxed{\\frac{1}{2}}, \\quad x_2 = \\boxed{2} \\]", ("\\frac{1}{2}", "2")),
]


@pytest.mark.parametrize("completion, parts", MULTI_PART_CASES)
def test_boxes_joined_as_parts_are_one_multi_part_answer(completion, parts):
    answer = extract_answer(completion, task="math")
    assert (answer.value, answer.reason, answer.parts) == (None, "multi_part", parts)


@pytest.mark.parametrize(
    "completion",
    [
        "$y = \\boxed{4}$ or $y = \\boxed{-1}$",  # offered as alternatives
        "It is \\boxed{4}, maybe \\boxed{-1}",  # a hedge word between them
        "So \\boxed{4}. Wait, \\boxed{-1}",  # a different box after "wait"
        "\\boxed{4}\nHmm, actually \\boxed{-1}",  # changes its mind
        "\\boxed{4} \\text{ or } \\boxed{-1}",  # "or" as LaTeX text
    ],
)
def test_boxes_offered_as_alternatives_stay_a_hedge(completion):
    assert extract_answer(completion, task="math").reason == "hedge"


@pytest.mark.parametrize(
    "completion, gold, correct",
    [
        ("so $y = \\boxed{4}$ \\text{ and } $y = \\boxed{-1}$", "-1, 4", True),  # every part, any order
        ("so $y = \\boxed{4}$ \\text{ and } $y = \\boxed{-1}$", "4, -1", True),
        ("The roots are \\boxed{1}, \\boxed{5} and \\boxed{7}.", "1, 5, 7", True),
        ("\\boxed{\\frac{1}{2}} and \\boxed{2}", "2, 0.5", True),  # each part compares as an answer does
        ("so $y = \\boxed{4}$ \\text{ and } $y = \\boxed{-1}$", "4", False),  # a gold of one part
        ("so $y = \\boxed{4}$ \\text{ and } $y = \\boxed{-1}$", "-1, 4, 6", False),  # a part missing
        ("so $y = \\boxed{4}$ \\text{ and } $y = \\boxed{-2}$", "-1, 4", False),  # a wrong part
        ("\\boxed{4} and \\boxed{4}", "4", True),  # the same box twice is one answer, not two parts
        ("\\boxed{1} and \\boxed{2}", "(1, 2)", False),  # a point is one answer with two coordinates
        ("$y = \\boxed{4}$ or $y = \\boxed{-1}$", "-1, 4", False),  # alternatives are never paid
        ("\\boxed{3} first. Then \\boxed{4} and \\boxed{-1}", "-1, 4", False),  # an earlier box that is no part
    ],
)
def test_a_multi_part_answer_equals_a_gold_of_as_many_parts(completion, gold, correct):
    from rewards.verify import is_correct

    assert is_correct(completion, gold, "math") is correct


# --- reasoning models: the answer follows the last </think> ---
THINK_CASES = [
    ("<think>\n17 + 1 = 18\n#### 18</think>\n#### 18", "gsm8k", "18", "ok"),  # answered after thinking
    ("<think>\nmaybe #### 18\n</think>\nSo #### 19", "gsm8k", "19", "ok"),  # only after </think>
    ("<think>\nIt is #### 18 surely", "gsm8k", None, "unfinished_think"),  # never closed: no answer yet
    ("<think>\nso \\boxed{7}\nlet me check", "math", None, "unfinished_think"),
    ("Thinking, from a pre-filled tag.</think>\n\\boxed{7}", "math", "7", "ok"),  # only the closing tag
    ("<think>a</think><think>\\boxed{7}", "math", None, "unfinished_think"),  # thinking again, unfinished
    ("<think>\\boxed{7}</think>\nI am done.", "math", None, "no_marker"),  # the box was only in the thinking
    ("#### 18", "gsm8k", "18", "ok"),  # no tags: the whole completion
]


@pytest.mark.parametrize("completion, task, value, reason", THINK_CASES)
def test_only_what_follows_the_last_think_tag_is_the_answer(completion, task, value, reason):
    answer = extract_answer(completion, task=task)
    assert (answer.value, answer.reason) == (value, reason)


def test_the_think_rule_can_be_turned_off_per_reward():
    from rewards.correctness import CorrectnessReward
    from rewards.format import FormatReward

    unfinished = "<think>\nso \\boxed{7}"
    assert CorrectnessReward("math")([unfinished], answer=["7"]) == [0.0]
    assert CorrectnessReward("math", think_tags=False)([unfinished], answer=["7"]) == [1.0]
    assert FormatReward("math")([unfinished]) == [0.0]
    assert FormatReward("math", think_tags=False)([unfinished]) == [0.1]
    assert CorrectnessReward("math", think_tags=False).__name__ == "math_correctness_no_think_rule_reward"


def test_the_format_bonus_measures_the_end_of_the_whole_completion_after_thinking():
    from rewards.format import FormatReward

    thought = "<think>\n" + "Let me add them up carefully. " * 10 + "</think>\n"
    assert FormatReward("gsm8k")([thought + "#### 18"]) == [0.1]  # the answer is at the end of the completion
    assert FormatReward("gsm8k")([thought + "#### 18\n" + "More words after the answer. " * 3]) == [0.0]


def test_a_pre_filled_think_tag_leaves_trls_think_format_reward_at_zero_and_ours_reading_the_answer():
    # a chat template that ends its prompt with "<think>" puts only "</think>" in the completion
    from trl.rewards import think_format_reward

    from rewards.correctness import math_correctness_reward

    completion = [{"role": "assistant", "content": "Two and two.\n</think>\nThe answer is \\boxed{4}."}]
    assert think_format_reward([completion]) == [0.0]
    assert math_correctness_reward([completion], answer=["4"]) == [1.0]


# --- the prompt's own format example ---
def test_the_prompts_format_example_holds_no_answer():
    from eval.tasks import TASKS
    from rewards.answers import FORMAT_EXAMPLES

    for name, task in TASKS.items():
        example = FORMAT_EXAMPLES[task.answer_style]
        if name != "lab":  # the lab's short instruction names the marker and shows no example
            assert example in task.instruction
        assert extract_answer(example, task=task.answer_style).value is None
        assert extract_answer(task.instruction, task=task.answer_style).value is None  # nor does the instruction


def test_the_prompt_example_probe_flags_an_example_that_a_gold_can_be(monkeypatch):
    # the probe can disagree: with "#### 42" as the example, a problem whose gold is 42 pays the copy
    import rewards.probes as probes

    problems = [{"question": "Six sevens?", "answer": "42"}]
    rewards = ["gsm8k_correctness", "gsm8k_format"]
    assert not probes.probe_scores(rewards, None, "gsm8k", problems)["prompt_example"]["violation"]
    monkeypatch.setitem(probes.FORMAT_EXAMPLES, "gsm8k", "#### 42")
    assert probes.probe_scores(rewards, None, "gsm8k", problems)["prompt_example"]["violation"]


# --- characters folded inside a number, a gold's trailing period, the number and segment limits ---


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


# --- markers sharing a line, and the forms of \boxed a model writes besides \boxed{...} ---


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


# --- every field of an answer from an Answer: line and of a non-answer; gsm8k_gold's error; other boxes compared ---


@pytest.mark.parametrize(
    "text, task, expected",
    [
        # the trailing period goes, before the number is read (raw shows what was read)
        ("She has 17 left.\nAnswer: 17.", "gsm8k", Answer("17", "ok", "answer_line", 1, 28, "17")),
        # MATH: the period, then the dollar signs around the expression
        ("so\nFinal answer: $x+1$.", "math", Answer("x+1", "ok", "answer_line", 1, 23, "x+1")),
        ("Answer: $$", "math", Answer(None, "empty", "answer_line", 1, 10, "")),  # nothing inside the dollars
        ("Answer: $3$ or $4$", "math", Answer(None, "hedge", "answer_line", 1, 18, "3$ or $4")),
        ("A: 5\nThe answer is 6", "gsm8k", Answer("6", "ok", "answer_line", 2, 20, "6")),  # the last line counts
        ("no marker at all", "math", Answer(None, "no_marker")),  # every field at its default
        ("Answer: 2X.", "math", Answer("2X", "ok", "answer_line", 1, 11, "2X")),  # only the period goes
        ("Answer: $X+1$", "math", Answer("X+1", "ok", "answer_line", 1, 13, "X+1")),  # only the dollars and spaces
    ],
)
def test_an_answer_line_is_read_field_by_field(text, task, expected):
    assert extract_answer(text, task=task, answer_line=True) == expected


def test_a_gsm8k_solution_without_a_final_answer_is_named_by_its_end():
    solution = "Tom buys 3 packs of 12 pencils and gives away 5, so he keeps 3 * 12 - 5 = 31 pencils at the end."
    with pytest.raises(ValueError) as raised:
        gsm8k_gold(solution)
    assert str(raised.value) == f"GSM8K solution has no '#### N' final answer: {solution[-80:]!r}"
    assert len(solution) > 81  # the message shows the last 80 characters, not the whole text


GAP = " and then some more words to make the gap long enough, "  # more than HEDGE_GAP_CHARS between two boxes
FOUR_FAR_APART = GAP.join(f"\\boxed{{{i}}}" for i in range(1, 5))  # more than MAX_DISTINCT_BOXES others


@pytest.mark.parametrize(
    "text, task, expected",
    [
        ("so \\boxed{ }", "math", Answer(None, "empty", "boxed", 1, 12, "")),
        # an empty box after a filled one is no answer (a model echoing "...within \\boxed{}"): the filled one is
        ("first \\boxed{2} then \\boxed{}", "math", Answer("2", "ok", "boxed", 1, 15, "2")),
        ("\\boxed{3 \\text{ or } 4}", "math", Answer(None, "hedge", "boxed", 1, 23, "3 \\text{ or } 4")),
        ("\\boxed{3} or \\boxed{4}", "math", Answer(None, "hedge", "boxed", 2, 22, "4")),  # close together: a list
        ("\\boxed{3}" + GAP + "\\boxed{4}", "math", Answer(None, "conflicting_markers", "boxed", 2, 73, "4")),
        # boxes joined by commas are the parts of one answer: only a gold of four parts can equal it
        (
            "\\boxed{1}, \\boxed{2}, \\boxed{3}, \\boxed{4}",
            "math",
            Answer(None, "multi_part", "boxed", 4, 42, "1, 2, 3, 4", ("1", "2", "3", "4")),
        ),
        (FOUR_FAR_APART, "math", Answer(None, "conflicting_markers", "boxed", 4, 201, "4")),
        ("#### 3\nno wait\n#### 4 apples", "gsm8k", Answer(None, "conflicting_markers", "####", 2, 28, "4 apples")),
        ("#### 3 or 4", "gsm8k", Answer(None, "hedge", "####", 1, 11, "3 or 4")),
        ("#### \n", "gsm8k", Answer(None, "empty", "####", 1, 5, "")),  # the answer's line ends at the newline
        ("#### 2\\sqrt(2)", "gsm8k", Answer(None, "expression", "####", 1, 14, "2\\sqrt(2)")),
    ],
)
def test_an_answer_that_is_not_one_says_why_field_by_field(text, task, expected):
    assert extract_answer(text, task=task) == expected


@pytest.mark.parametrize("gap, reason", [(40, "hedge"), (41, "conflicting_markers")])
def test_two_different_boxes_within_40_characters_are_a_list(gap, reason):
    text = "\\boxed{3}" + "~" * gap + "\\boxed{5}"
    assert extract_answer(text, task="math").reason == reason


def test_two_other_boxes_are_still_compared_and_may_be_the_same_answer():
    # MAX_DISTINCT_BOXES (2) other boxes are compared with math-verify; here both equal the last one
    text = "half: \\boxed{\\frac{1}{2}}" + GAP + "\\boxed{\\tfrac{2}{4}}" + GAP + "so \\boxed{0.5}"
    assert extract_answer(text, task="math") == Answer("0.5", "ok", "boxed", 3, len(text), "0.5")


def test_comparing_the_other_boxes_shares_one_comparisons_budget(scripted_pool):
    pool = scripted_pool(verify.Verdict.EQUAL, verify.Verdict.EQUAL)
    text = "\\boxed{\\sqrt{4}}" + GAP + "\\boxed{4^{1}}" + GAP + "so \\boxed{2^{2}}"
    assert extract_answer(text, task="math").value == "2^{2}"
    assert pool.budgets == [pytest.approx(verify.TIME_BUDGET_S / 2)] * 2  # two other boxes: half the budget each
