"""Behaviour of the rewards and the answer extractor that mutation testing (`make mutate`, docs/mutation.md) found
unpinned: names, defaults, the limits of their arguments, the fields of an ``Answer:`` line, the messages.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_rewards.py
"""

from collections import OrderedDict

import pytest

from rewards.answers import Answer, extract_answer, gsm8k_gold
from rewards.correctness import CorrectnessReward
from rewards.format import FormatReward
from rewards.verify import warm_up

# mutmut (docs/mutation.md) runs the selected tests in any order on a loaded box: the math-verify workers start while
# the tests are collected, so that no test's 0.8 s comparison budget pays a worker's start-up (seconds under load)
warm_up()


@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_correctness_names_and_default_marker(task):
    reward = CorrectnessReward(task)
    assert reward.__name__ == f"{task}_correctness_reward"  # TRL logs rewards/<name>/mean
    assert reward.answer_line is False
    assert reward(["So she has 8 apples.\nAnswer: 8"], answer=["8"]) == [0.0]  # no #### / \boxed: no answer
    assert CorrectnessReward(task, answer_line=True)(["So she has 8 apples.\nAnswer: 8"], answer=["8"]) == [1.0]


@pytest.mark.parametrize("make", [CorrectnessReward, FormatReward])
def test_an_unknown_task_is_named_with_the_choices(make):
    with pytest.raises(ValueError, match=r"unknown task 'gsm8': use one of .*gsm8k.*math"):
        make("gsm8")


def test_a_format_bonus_of_zero_is_allowed_and_below_zero_is_not():
    assert FormatReward("gsm8k", bonus=0)(["3 + 5 = 8\n#### 8"]) == [0.0]
    assert FormatReward("gsm8k", bonus=0.25)(["3 + 5 = 8\n#### 8"]) == [0.25]
    for bad in (-0.1, "0.1", None):
        with pytest.raises(ValueError, match=r"format bonus must be a number >= 0, got"):
            FormatReward("gsm8k", bonus=bad)


@pytest.mark.parametrize(
    "completion, paid",
    [
        ("Step by step: 3 apples and 5 more make 8 apples in all. " * 5 + "\n#### 8", True),  # long work first
        ("#### 8" + "\n \n" * 30, True),  # trailing whitespace is not text after the answer
        ("#### 8\n" + "x" * 39, True),  # exactly TRAILING_CHARS (40) characters after the answer's line
        ("#### 8\n" + "x" * 40, False),  # one more: the answer is no longer at the end
    ],
)
def test_the_format_bonus_is_for_an_answer_at_the_end(completion, paid):
    from rewards.format import TRAILING_CHARS

    assert TRAILING_CHARS == 40
    assert FormatReward("gsm8k", bonus=0.3)([completion]) == [0.3 if paid else 0.0]


def test_number_anywhere_pays_nothing_without_the_gold_number():
    from rewards.partial import PARTIAL_CREDIT, number_anywhere_reward

    got = number_anywhere_reward(["I think it is 12.", "It is 7 apples.", "no number"], answer=["7", "7", "7"])
    assert got == [0.0, PARTIAL_CREDIT, 0.0] and PARTIAL_CREDIT == 0.5


@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_a_missing_answer_column_says_how_to_add_it(task):
    message = (
        f"{task}_correctness_answer_line_reward needs the dataset's 'answer' column (the final answer only, "
        "e.g. '18'): build the dataset with eval.tasks.to_prompt_rows or add that column"
    )
    with pytest.raises(ValueError) as raised:
        CorrectnessReward(task, answer_line=True)(["Answer: 18"])
    assert str(raised.value) == message


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


def test_answers_equal_up_to_spacing_and_dfrac_never_wait_for_the_checker(monkeypatch):
    # on a loaded machine math-verify can time out: an answer written as the gold is, up to spaces and \dfrac, must not
    import rewards.verify as verify

    class NoChecker:
        def compare(self, gold, pred, budget):
            raise AssertionError(f"math-verify was asked about {pred!r} vs {gold!r}")

    monkeypatch.setattr(verify, "_POOL", NoChecker())
    monkeypatch.setattr(verify, "_CACHE", OrderedDict())  # no verdict remembered from an earlier test
    assert verify.compare_answers("\\dfrac{3}{ 4 }", "\\frac{3}{4}", task="math") is verify.Verdict.EQUAL
    assert verify.compare_answers("x \\, + \\; 1", "x+1", task="math") is verify.Verdict.EQUAL
    two_boxes = "so \\boxed{\\tfrac{5}{8}} and again \\boxed{\\frac{5}{8}}"
    expected = Answer("\\frac{5}{8}", "ok", "boxed", 2, len(two_boxes), "\\frac{5}{8}")
    assert extract_answer(two_boxes, task="math") == expected


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


def test_comparing_the_other_boxes_shares_one_comparisons_budget(monkeypatch):
    import rewards.verify as verify

    budgets = []

    class Pool:  # says "equal" and records the time it was given
        def compare(self, gold, pred, budget):
            budgets.append(budget)
            return verify.Verdict.EQUAL

    monkeypatch.setattr(verify, "_POOL", Pool())
    monkeypatch.setattr(verify, "_CACHE", OrderedDict())
    text = "\\boxed{\\sqrt{4}}" + GAP + "\\boxed{4^{1}}" + GAP + "so \\boxed{2^{2}}"
    assert extract_answer(text, task="math").value == "2^{2}"
    assert budgets == [pytest.approx(verify.TIME_BUDGET_S / 2)] * 2  # two other boxes: half the budget each


def test_without_a_gold_nothing_is_correct_not_even_the_word_none():
    from eval.scoring import score_completion

    scored = score_completion("so \\boxed{None}", None, "math500")
    assert (scored["correct"], scored["extracted"], scored["reason"]) == (False, "None", "ok")


def test_a_hedged_gold_matched_by_the_same_list_is_reported_as_extracted():
    from eval.scoring import score_completion

    scored = score_completion("so \\boxed{-2 \\text{ or } -12}", "-2 \\text{ or } -12", "math500")
    assert (scored["correct"], scored["extracted"], scored["format_ok"]) == (True, "-2 \\text{ or } -12", True)


def test_the_format_reward_scores_0_where_reading_the_answer_fails_and_goes_on(monkeypatch):
    import rewards.format

    real = rewards.format.extract_answer

    def fragile(text, task, **options):
        if "boom" in text:
            raise RuntimeError("extractor bug")
        return real(text, task=task, **options)

    monkeypatch.setattr(rewards.format, "extract_answer", fragile)
    assert FormatReward("gsm8k", bonus=0.4)(["#### 3 boom", "so\n#### 8"]) == [0.0, 0.4]


def test_eval_reports_the_value_read_and_how_many_markers_there_were():
    from eval.scoring import score_completion

    scored = score_completion("#### 18\nso, again:\n#### 18 dollars", "18", "gsm8k")
    assert (scored["correct"], scored["extracted"], scored["n_markers"]) == (True, "18", 2)


def test_a_pair_given_up_is_not_asked_again_for_a_while_and_the_retry_asks_the_same_pair(monkeypatch, caplog):
    import logging

    import rewards.verify as verify

    calls = []

    class SlowPool:  # every comparison runs out of time
        def compare(self, gold, pred, budget):
            calls.append((gold, pred, budget))
            return verify.Verdict.TIMEOUT

    monkeypatch.setattr(verify, "_POOL", SlowPool())
    monkeypatch.setattr(verify, "_CACHE", OrderedDict())
    monkeypatch.setattr(verify, "_GIVEN_UP", {})
    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 600.0)
    before = verify.timeout_count()
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        first = verify.compare_answers("\\frac{21}{6}", "\\frac{7}{2}", task="math", timeout=0.5)
    assert first is verify.Verdict.TIMEOUT
    assert calls == [
        ("\\frac{7}{2}", "\\frac{21}{6}", 0.5),
        ("\\frac{7}{2}", "\\frac{21}{6}", 0.5 * verify.RETRY_FACTOR),
    ]
    said = "math-verify timed out twice (0.50s, then 2.00s) on '\\\\frac{21}{6}' vs gold '\\\\frac{7}{2}': "
    said += "no verdict, not paid"
    assert [r.getMessage() for r in caplog.records if r.name == "rewards.verify"] == [said]
    # the same pair again, within the memo: given up at once, counted, the pool not asked
    assert verify.compare_answers("\\frac{21}{6}", "\\frac{7}{2}", task="math", timeout=0.5) is verify.Verdict.TIMEOUT
    assert len(calls) == 2 and verify.timeout_count() - before == 2
    # another pair is asked
    verify.compare_answers("\\frac{9}{6}", "\\frac{3}{2}", task="math", timeout=0.5)
    assert len(calls) == 4


def test_is_correct_asks_for_the_tasks_own_marker_unless_told_otherwise():
    from rewards.verify import is_correct

    assert not is_correct("So she has 8 apples.\nAnswer: 8", "8")
    assert is_correct("So she has 8 apples.\nAnswer: 8", "8", answer_line=True)
