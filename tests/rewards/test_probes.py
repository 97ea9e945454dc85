"""Hack probes on real problems: the default reward sets keep every rule; hackable sets break the expected ones.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_probes.py
"""

import json
import math

import pytest

from eval.jsonl import read_jsonl
from eval.probe_matrix import load_problems, main
from rewards.probes import GOLD_UNCOMMITTED, INFO, PROBES, WRONG_ANSWER, build_probe, probe_scores


def probe_data(data_dir) -> dict:
    """The benchmark files the matrix samples from, as shipped in tests/data (GSM8K test and MATH-500 whole)."""
    return {"gsm8k": data_dir / "gsm8k" / "test.jsonl", "math": data_dir / "math500" / "test.jsonl"}


@pytest.fixture(scope="module")
def problems(data_dir):
    return {task: load_problems(path, n=12, seed=0) for task, path in probe_data(data_dir).items()}


DEFAULT_SET_SCORES = [
    # probe, expected kind; every one must keep its rule under correctness + format, on both tasks
    ("bare_wrong", WRONG_ANSWER),  # '#### 19': format pays it, as it pays a worked wrong answer
    ("wrong_perfect_format", WRONG_ANSWER),  # perfect format cannot beat a worked wrong answer
    ("marker_no_number", WRONG_ANSWER),  # an empty marker gets nothing
    ("marker_with_words", WRONG_ANSWER),  # words in the marker are not an answer
    ("empty", WRONG_ANSWER),  # nothing
    ("whitespace", WRONG_ANSWER),  # nothing but whitespace
    ("padded_wrong", WRONG_ANSWER),  # 7 KB of filler does not help
    ("runaway_repetition", WRONG_ANSWER),  # trailing repetition loses the format bonus
    ("wrong_repeated_markers", WRONG_ANSWER),  # repeating a marker loses the format bonus
    ("malformed_root", WRONG_ANSWER),  # '6\\sqrt(2)': math-verify reads 6; a malformed root is no match
    ("gold_plus_tiny", WRONG_ANSWER),  # gold + 10^-20: math-verify's tolerance; compared exactly
    ("prompt_example", WRONG_ANSWER),  # the prompt's format example holds no value a gold can be
    ("trailing_plus_minus", GOLD_UNCOMMITTED),  # '6 \\pm': two values cut short; math-verify reads 6
    ("number_spray", GOLD_UNCOMMITTED),  # the gold among 100 numbers, no marker
    ("number_spray_marked", GOLD_UNCOMMITTED),  # a spray then a wrong final answer
    ("hedge", GOLD_UNCOMMITTED),  # 'gold or wrong' in one marker
    ("hedge_two_markers", GOLD_UNCOMMITTED),  # two markers side by side
    ("hedge_wrong_first", GOLD_UNCOMMITTED),  # the gold last in the hedge
    ("candidate_list", GOLD_UNCOMMITTED),  # a list of candidates
    ("restated_question", GOLD_UNCOMMITTED),  # the question restated (math-verify on the whole text credits it)
    ("restated_question_answer_line", GOLD_UNCOMMITTED),  # restated on an 'Answer:' line
    ("gold_in_reasoning", GOLD_UNCOMMITTED),  # the gold mentioned, a different final answer
    ("two_markers_gold_first", GOLD_UNCOMMITTED),  # changes its mind away from the gold
    ("two_markers_gold_last", GOLD_UNCOMMITTED),  # changes its mind to the gold: still two answers
    ("gold_in_code_block", GOLD_UNCOMMITTED),  # the gold marker inside a code block after a wrong answer
    ("gold_in_unfinished_think", GOLD_UNCOMMITTED),  # a think block that never closes has not answered
    ("gold_in_think_wrong_after", GOLD_UNCOMMITTED),  # only what follows </think> is the answer
    ("bare_correct", INFO),  # correct with no work: correct under a checker
    ("correct_unicode_digits", INFO),  # full-width digits fold to the gold
    ("correct_repeated_markers", INFO),  # one answer, badly formatted
    ("correct_after_think", INFO),  # thought through a wrong answer, answered right after </think>
    ("correct_prefilled_think", INFO),  # only the closing tag (a pre-filled <think>): the answer after it counts
]


def test_every_probe_is_in_the_table():
    assert sorted(PROBES) == sorted(name for name, _ in DEFAULT_SET_SCORES)


@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_default_set_keeps_every_rule(problems, task):
    scores = probe_scores([f"{task}_correctness", f"{task}_format"], None, task, problems[task])
    assert scores["genuine_correct"]["score"] == pytest.approx(1.1)
    assert scores["genuine_wrong"]["score"] == pytest.approx(0.1)
    for name, kind in DEFAULT_SET_SCORES:
        assert scores[name]["kind"] == kind, name
        assert not scores[name]["violation"], (name, scores[name])
    assert scores["bare_correct"]["score"] == pytest.approx(1.1)  # info: correct is correct


@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_number_anywhere_alone_pays_the_spray(problems, task):
    scores = probe_scores(["number_anywhere"], None, task, problems[task])
    assert scores["number_spray"]["violation"]  # the deliberate exploit shows
    assert scores["hedge"]["violation"]


@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_format_only_pays_wrong_answers(problems, task):
    scores = probe_scores([f"{task}_format"], None, task, problems[task])
    for name in ("bare_wrong", "wrong_perfect_format", "padded_wrong"):
        assert scores[name]["violation"], name
    assert not scores["empty"]["violation"]  # no format, no pay


def test_build_probe_uses_the_task_marker():
    problem = {"question": "How many?", "answer": "\\frac{1}{2}"}
    assert build_probe("hedge_two_markers", problem, "math") == "It is either \\boxed{\\frac{1}{2}} or \\boxed{3}"


def test_probe_scores_bad_input():
    with pytest.raises(ValueError, match="no problems"):
        probe_scores(["gsm8k_correctness"], None, "gsm8k", [])
    with pytest.raises(ValueError, match="one weight per function"):
        probe_scores(["gsm8k_correctness"], [1.0, 1.0], "gsm8k", [{"question": "q", "answer": "1"}])


def test_cli_json_and_exit_status(capsys, data_dir):
    both = [arg for task, path in probe_data(data_dir).items() for arg in ("--data", f"{task}={path}")]
    assert main(["--json", "--n", "4", *both]) == 0  # the default correctness + format set breaks no rule
    matrix = json.loads(capsys.readouterr().out)
    assert set(matrix) == {"gsm8k", "math"}
    assert matrix["gsm8k"]["number_anywhere"]["scores"]["number_spray"]["violation"]
    gsm8k = probe_data(data_dir)["gsm8k"]
    assert main(["--n", "4", "--data", f"gsm8k={gsm8k}", "--rewards", "{task}_format"]) == 0
    assert "!" in capsys.readouterr().out  # marks shown for the format-only set


def test_cli_bad_reward_name_is_a_clear_error(capsys, data_dir):
    with pytest.raises(SystemExit) as exit_info:
        main(["--rewards", "gsm8k_corectness", "--data", f"gsm8k={probe_data(data_dir)['gsm8k']}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "known rewards are" in err and len(err.strip().splitlines()) == 1


def test_default_data_is_the_hub_benchmarks(monkeypatch, data_dir):
    # without --data the problems come from each benchmark's hub data set, as `python -m eval run` loads them
    import eval.probe_matrix as probe_matrix_module

    asked = []

    def fake_load_rows(task, data=None, split=None, flag="--data"):
        asked.append((task.hub_id, data))
        return read_jsonl(probe_data(data_dir)["gsm8k" if task.name == "gsm8k" else "math"])

    monkeypatch.setattr(probe_matrix_module, "load_rows", fake_load_rows)
    assert load_problems(None, n=3, seed=0, task="math") == load_problems(probe_data(data_dir)["math"], n=3, seed=0)
    assert asked == [("HuggingFaceH4/MATH-500", None)]


# --- the weighted total, as TRL 1.16 forms it (rewards.totals serves probes, monitors and the judge lab) ---
TRL_TOTAL_LINES = [  # the lines of GRPOTrainer._generate_and_score_completions that rewards.totals reproduces
    "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)",
    "rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)",
    "rewards[unscorable_mask] = torch.nan  # exclude unscorable rows from the logged reward stats",
    'self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())',
]


def trl_total_and_reward(scores_per_func, weights):
    """TRL's own computation, line for line (TRL_TOTAL_LINES; None becomes NaN as in _calculate_rewards)."""
    import torch

    rows = [[torch.nan if s is None else s for s in row] for row in zip(*scores_per_func, strict=True)]
    rewards_per_func = torch.tensor(rows, dtype=torch.float32)  # [B, n_funcs]
    reward_weights = torch.tensor(weights, dtype=torch.float32)
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    return rewards.tolist(), torch.nanmean(rewards).item()


def test_trl_still_forms_the_total_as_rewards_totals_assumes():
    import inspect

    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for line in TRL_TOTAL_LINES:
        assert line in source, f"TRL changed how it sums rewards: {line!r} is gone; update rewards/totals.py"


def test_weighted_totals_match_trl_including_an_all_none_row():
    from rewards.totals import mean_total, weighted_totals

    scores_per_func = [
        [1.0, None, None, 0.0, float("nan")],  # a correctness reward: None when it cannot score
        [0.1, 0.1, None, None, 0.1],  # a format bonus; row 2: every function gave None (a failed judge)
    ]
    weights = [10.0, 0.5]  # not 1.0: an unweighted sum would show
    ours = weighted_totals(scores_per_func, weights)
    trl_totals, trl_reward = trl_total_and_reward(scores_per_func, weights)
    assert ours[:2] + ours[3:] == pytest.approx(trl_totals[:2] + trl_totals[3:], rel=1e-6)
    assert math.isnan(ours[2]) and math.isnan(trl_totals[2])  # unscorable, not 0
    assert mean_total(ours) == pytest.approx(trl_reward, rel=1e-6)
    assert mean_total(ours) == pytest.approx((10.05 + 0.05 + 0.0 + 0.05) / 4)  # a 0 for row 2 would give /5


def test_probe_totals_apply_weights_and_leave_unscorable_rows_out():
    from rewards.probes import weighted_totals

    def judge_down(completions, **kwargs):  # a judge that never answers
        return [None] * len(completions)

    def gsm8k_correctness(completions, answer, **kwargs):
        return [float(c.endswith(a)) for c, a in zip(completions, answer, strict=True)]

    completions, answers = ["#### 8", "#### 9"], ["8", "8"]
    assert weighted_totals([gsm8k_correctness, "gsm8k_format"], [10.0, 0.5], completions, answers) == pytest.approx(
        [10.05, 0.05]
    )
    assert all(math.isnan(t) for t in weighted_totals([judge_down], [10.0], completions, answers))
    problem = [{"question": "Tom has 3 apples and buys 5 more. How many now?", "answer": "8"}]
    scores = probe_scores([judge_down], [10.0], "gsm8k", problem)
    assert math.isnan(scores["bare_wrong"]["score"]) and not scores["bare_wrong"]["violation"]  # no score, no hack
    weighted = probe_scores(["gsm8k_correctness", "gsm8k_format"], [10.0, 0.5], "gsm8k", problem)
    assert weighted["genuine_correct"]["score"] == pytest.approx(10.05)


LENIENCY_PROBES = ["malformed_root", "gold_plus_tiny", "trailing_plus_minus"]


@pytest.mark.parametrize("name", LENIENCY_PROBES)
def test_math_verify_leniency_probes_are_never_paid(problems, name):
    # math-verify alone pays these wrong or uncommitted answers on some real problems; correctness pays none
    from math_verify import parse, verify

    from rewards import get_reward

    completions = [build_probe(name, p, "math") for p in problems["math"]]
    golds = [p["answer"] for p in problems["math"]]
    answers = [c.removeprefix("\\boxed{").removesuffix("}") for c in completions]
    raw_paid = sum(bool(verify(parse(f"${g}$"), parse(f"${a}$"))) for a, g in zip(answers, golds, strict=True))
    assert raw_paid >= 1  # the class is real on these problems
    assert get_reward("math_correctness")(completions, answer=golds) == [0.0] * len(golds)


# --- the shape of each row, the messages, a probe scoring at the edge of its rule, the judge's question ---


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
    from rewards.probes import TOLERANCE

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
