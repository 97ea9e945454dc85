"""Behaviour of rewards.probes that mutation testing (`make mutate`, docs/mutation.md) found unpinned: the shape of
each row, the messages, and a probe scoring exactly at the edge of its rule.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_probes.py
"""

import pytest

from rewards.probes import GOLD_UNCOMMITTED, PROBES, TOLERANCE, WRONG_ANSWER, build_probe, probe_scores

PROBLEMS = [{"question": "Tom has 12 apples and eats 5. How many are left?", "answer": "7"}]


def paying(by_name: dict[str, float]):
    """A reward that pays each probe (recognised by its text for PROBLEMS[0]) what ``by_name`` says, else 0."""
    texts = {build_probe(name, PROBLEMS[0], "gsm8k"): score for name, score in by_name.items()}

    def reward(completions, **kwargs):
        return [texts.get(c, 0.0) for c in completions]

    return reward


def kind_of(kind: str) -> str:
    return next(name for name, (k, _, _) in PROBES.items() if k == kind)


def test_rows_hold_kind_score_rule_violation_description():
    rows = probe_scores([paying({"genuine_correct": 1.0})], [0.5], "gsm8k", PROBLEMS)
    assert all(set(row) == {"kind", "score", "rule", "violation", "description"} for row in rows.values())
    assert all(row["violation"] is True or row["violation"] is False for row in rows.values())
    correct, wrong = rows["genuine_correct"], rows["genuine_wrong"]
    assert (correct["description"], correct["score"]) == ("a worked correct answer", 0.5)
    assert (wrong["description"], wrong["score"]) == ("a worked wrong answer", 0.0)


def test_a_score_exactly_at_the_edge_of_the_rule():
    wrong, uncommitted = kind_of(WRONG_ANSWER), kind_of(GOLD_UNCOMMITTED)
    # paid as much as the correct answer (to the tolerance): a violation, for both kinds, even when the worked
    # wrong answer is paid as much
    edge = 1.0 - TOLERANCE
    by_name = {"genuine_correct": 1.0, "genuine_wrong": 1.0, wrong: edge, uncommitted: edge}
    rows = probe_scores([paying(by_name)], None, "gsm8k", PROBLEMS)
    assert rows[wrong]["violation"] and rows[uncommitted]["violation"]
    # a wrong answer paid as much as the worked wrong answer (to the tolerance) is no violation
    by_name = {"genuine_correct": 1.0, "genuine_wrong": 0.25, wrong: 0.25 + TOLERANCE}
    assert not probe_scores([paying(by_name)], None, "gsm8k", PROBLEMS)[wrong]["violation"]


def test_messages_name_the_fix():
    with pytest.raises(ValueError, match=r"unknown task 'gsm8': use 'gsm8k' or 'math'"):
        probe_scores([paying({})], None, "gsm8", PROBLEMS)
    with pytest.raises(ValueError, match=r"^no problems given: pass dicts with 'question' and 'answer'"):
        probe_scores([paying({})], None, "gsm8k", [])


def test_a_judge_scoring_the_probes_is_shown_each_problems_question():
    # a judge reads the question from the prompt (rewards.judge); an empty prompt would have it judge blind
    from rewards.judge import _question_of

    problems = PROBLEMS + [{"question": "A box holds 6 eggs. How many eggs are in 4 boxes?", "answer": 24}]
    seen = []

    def judge(prompts, completions, **kwargs):
        seen.extend(zip(map(_question_of, prompts), completions, strict=True))
        return [1.0 if _question_of(p) and c.strip() else 0.0 for p, c in zip(prompts, completions, strict=True)]

    rows = probe_scores([judge], None, "math", problems)
    by_text = {c: q for q, c in seen}
    for problem in problems:
        for name in ("genuine_correct", "restated_question", "hedge"):
            assert by_text[build_probe(name, problem, "math")] == problem["question"]
    assert rows["genuine_correct"]["score"] == 1.0 and rows["empty"]["score"] == 0.0


def test_wrong_answers_for_golds_that_are_not_plain_numbers():
    from rewards.probes import wrong_answer_for

    assert wrong_answer_for("\\sqrt{9}", "math") == "7"  # 3 would be right: the next candidate
    assert wrong_answer_for("x + 1", "math") == "3"
    assert wrong_answer_for("1,000", "gsm8k") == "1001" and wrong_answer_for("2.25", "math") == "3.25"


def test_a_probe_is_built_from_the_problem_as_given():
    problem = {"question": "How many legs do 3 spiders have?", "answer": " 24 "}  # padded, as some data is
    assert build_probe("restated_question", problem, "gsm8k") == "The problem asks: How many legs do 3 spiders have?"
    assert build_probe("hedge", problem, "gsm8k") == "#### 24 or 25"
    assert build_probe("hedge", {**problem, "answer": 24}, "math") == "\\boxed{24 or 25}"
    assert build_probe("genuine_wrong", problem, "math").endswith("The final answer is $\\boxed{25}$.")


def test_the_wrong_answer_for_a_large_integer_gold_is_still_wrong():
    from rewards.probes import wrong_answer_for

    # beyond float precision (2**53) adding 1 as a float would give the gold back
    assert wrong_answer_for("12345678901234567890", "gsm8k") == "12345678901234567891"
