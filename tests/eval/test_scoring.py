"""Eval's scoring does not repeat other graders' known mistakes, and re-scores the reference solutions at 100%.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_scoring.py
"""

import json

import pytest

from eval.jsonl import read_jsonl
from eval.predictions import score_predictions
from eval.scoring import score_completion

RUNAWAY = "Let me compute 18 again. " * 2000 + "18"
# Reference solutions that cannot re-score as correct, with the reason (see docs/eval.md). None today: MATH-500
# row 451 ("$d = \\boxed{15\\frac{39}{40}},$ or $\\boxed{\\frac{639}{40}}$") has two boxes that math-verify must
# find equal within the completion's time budget, which the extractor now gives whole to that one comparison.
KNOWN_UNSCORABLE: set[tuple[str, int]] = set()


@pytest.mark.parametrize(
    "completion, gold, task, correct, reason",
    [
        # plain committed answers
        ("3 + 5 = 8\n#### 8", "8", "gsm8k", True, "ok"),
        ("so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", "math500", True, "ok"),
        # "18.00" vs "18": lm-eval's exact string match says wrong; they are the same number
        ("#### 18.00", "18", "gsm8k", True, "ok"),
        ("so \\boxed{18.00}", "18", "math500", True, "ok"),
        # thousands separators and currency are the same number
        ("#### $1,234", "1234", "gsm8k", True, "ok"),
        # restated question: math-verify on the whole text credits it (docs/rewards.md); no final answer -> wrong
        ("Evaluate $(1+2i)6-3i$.", "6+9i", "math500", False, "no_marker"),
        # any number in the text: the gold appears, but the model never committed to it
        ("She has 18 eggs, 3 are eaten, I am not sure.", "18", "gsm8k", False, "no_marker"),
        # last-number fallback on a runaway: lenient graders take the final "18"; no marker -> wrong
        (RUNAWAY, "18", "gsm8k", False, "no_marker"),
        # hedges are not answers
        ("#### 17 or 18", "17", "gsm8k", False, "hedge"),
        ("the answer is \\boxed{17} or \\boxed{18}", "17", "math500", False, "hedge"),
        ("#### maybe 17", "17", "gsm8k", False, "hedge"),
        # gold x100 or /100: the Qwen2.5-Math grader accepts percentages scaled either way; we do not
        ("#### 0.25", "25", "gsm8k", False, "ok"),
        ("#### 2500", "25", "gsm8k", False, "ok"),
        ("\\boxed{0.25}", "25", "math500", False, "ok"),
        ("\\boxed{2500}", "25", "math500", False, "ok"),
        # disagreeing markers: the model answered two things
        ("#### 8\nwait\n#### 9", "9", "gsm8k", False, "conflicting_markers"),
        # empty answers
        ("", "8", "gsm8k", False, "empty"),
        ("#### ", "8", "gsm8k", False, "empty"),
        ("\\boxed{}", "8", "math500", False, "empty"),
    ],
)
def test_scoring_avoids_known_grader_mistakes(completion, gold, task, correct, reason):
    s = score_completion(completion, gold, task)
    assert (s["correct"], s["reason"]) == (correct, reason)
    assert s["format_ok"] == (reason == "ok")
    assert s["empty"] == (reason == "empty")


def test_unknown_task_is_an_error():
    with pytest.raises(ValueError, match="unknown task"):
        score_completion("#### 8", "8", "gsm9k")


@pytest.mark.parametrize(
    "task, path, completion_field, n_rows",
    [
        ("gsm8k", "gsm8k/test.jsonl", "answer", 1319),  # full reference solution; gold read after its ####
        ("math500", "math500/test.jsonl", "solution", 500),  # reference solution's last \boxed{} vs `answer`
    ],
)
def test_reference_solutions_rescore_at_100_percent(data_dir, tmp_path, task, path, completion_field, n_rows):
    results = score_predictions(task, data_dir / path, tmp_path, completion_field=completion_field)
    wrong = read_jsonl(tmp_path / "samples.jsonl")
    wrong = [(r["index"], r["extracted"], r["gold"]) for r in wrong if not r["correct"]]
    assert results["n"] == n_rows
    assert {(task, index) for index, *_ in wrong} <= KNOWN_UNSCORABLE, wrong
    assert results["n_correct"] >= n_rows - len(KNOWN_UNSCORABLE)


def test_score_keeps_input_order_and_reads_truncation(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    rows = [
        {"completion": "#### 3", "answer": "4", "finish_reason": "stop"},
        {"completion": "#### 4", "answer": "4", "finish_reason": "length"},
        {"completion": [{"role": "assistant", "content": "#### 5"}], "answer": "5", "truncated": False},
    ]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    score_predictions("gsm8k", predictions, tmp_path / "out")
    lines = read_jsonl(tmp_path / "out" / "samples.jsonl")
    assert [line["correct"] for line in lines] == [False, True, True]
    assert [line["truncated"] for line in lines] == [False, True, False]
    assert all(isinstance(line["correct"], bool) for line in lines)


def test_score_list_of_completions_gives_pass_at_k(tmp_path):
    # K stored samples per problem (as the Qwen2.5-Math harness writes them): one line, a samples list, pass@k.
    predictions = tmp_path / "preds.jsonl"
    rows = [
        {"completion": ["#### 4", "#### 5", "#### 4"], "answer": "4"},
        {"completion": ["#### 1", "#### 2", "#### 3"], "answer": "9"},
    ]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = score_predictions("gsm8k", predictions, tmp_path / "out")
    lines = read_jsonl(tmp_path / "out" / "samples.jsonl")
    assert [line["n_correct_samples"] for line in lines] == [2, 0]
    assert [s["correct"] for s in lines[0]["samples"]] == [True, False, True]
    assert results["pass_at_k"]["3"] == 0.5 and results["accuracy"] == pytest.approx(2 / 6)


@pytest.mark.parametrize(
    "content, fields, error",
    [
        (None, {}, "does not exist"),  # missing file
        ('{"completion": "#### 3"}\n', {}, "has no \\['answer'\\] field"),  # missing gold field
        ('{"text": "#### 3", "answer": "3"}\n', {}, "completion-field"),  # missing completion field
        ('{"completion": "#### 3", "answer": "3"}\nnot json\n', {}, "line 2 is not JSON"),  # corrupt line
        ('{"text": "#### 3", "gold": "3"}\n', {"completion_field": "text", "gold_field": "gold"}, None),  # renamed
    ],
)
def test_score_input_errors_are_clear(tmp_path, content, fields, error):
    predictions = tmp_path / "preds.jsonl"
    if content is not None:
        predictions.write_text(content)
    if error is None:
        assert score_predictions("gsm8k", predictions, tmp_path / "out", **fields)["accuracy"] == 1.0
    else:
        with pytest.raises((ValueError, FileNotFoundError), match=error):
            score_predictions("gsm8k", predictions, tmp_path / "out", **fields)


def test_task_without_hub_copy_asks_for_a_local_file():
    from eval.tasks import get_task, load_rows

    with pytest.raises(ValueError, match="no hub copy: pass --data"):
        load_rows(get_task("math_train"))


def test_every_sample_says_whether_it_timed_out():
    s = score_completion("so \\boxed{\\frac{14}{6}}", "\\frac{7}{3}", "math500")
    assert (s["correct"], s["reason"], s["timeout"]) == (True, "ok", False)


@pytest.mark.parametrize(
    "verdicts, reason, timeout",
    [
        (["timeout", "timeout"], "timeout", True),  # out of time twice: no verdict, reported as such
        (["checker_error", "checker_error"], "checker_error", False),  # a worker failed: not a timeout
    ],
)
def test_a_comparison_without_verdict_is_reported_not_scored_wrong(
    scripted_pool, monkeypatch, verdicts, reason, timeout
):
    import rewards.verify as verify

    scripted_pool(*map(verify.Verdict, verdicts))
    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 0.0)  # each case asks the pool, whatever an earlier one gave up
    s = score_completion("so \\boxed{\\frac{15}{4}}", "\\frac{30}{8}", "math500")
    assert (s["correct"], s["reason"], s["timeout"]) == (False, reason, timeout)
    assert s["extracted"] == "\\frac{15}{4}" and s["format_ok"]  # the answer was read; only the comparison failed


@pytest.mark.parametrize("folder", ["data_dir", "full_data"])  # the shipped subset keeps both hedged rows
def test_hedged_golds_score_as_the_reward_scores_them(folder, request):
    # MATH train golds that list solutions ("-2 \\text{ or } -12"): eval and math_correctness are one judgement
    from rewards import get_reward
    from rewards.answers import _is_hedge

    path = request.getfixturevalue(folder) / "math_train" / "train.jsonl"
    rows = [r for r in read_jsonl(path) if r["answer"] and _is_hedge(r["answer"])]
    assert len(rows) == 2
    completions = [r["solution"] for r in rows] + [f"so \\boxed{{{r['answer'].split(' ')[0]}}}" for r in rows]
    golds = [r["answer"] for r in rows] * 2
    rewards = get_reward("math_correctness")(completions, answer=golds)
    scored = [score_completion(c, g, "math")["correct"] for c, g in zip(completions, golds, strict=True)]
    assert rewards == [1.0, 1.0, 0.0, 0.0]  # the full list is the answer; one of its values alone is not
    assert scored == [r == 1.0 for r in rewards]


# --- what a scored sample reports: no gold, a hedged gold, the value read and the number of markers ---


def test_without_a_gold_nothing_is_correct_not_even_the_word_none():
    scored = score_completion("so \\boxed{None}", None, "math500")
    assert (scored["correct"], scored["extracted"], scored["reason"]) == (False, "None", "ok")


def test_a_hedged_gold_matched_by_the_same_list_is_reported_as_extracted():
    scored = score_completion("so \\boxed{-2 \\text{ or } -12}", "-2 \\text{ or } -12", "math500")
    assert (scored["correct"], scored["extracted"], scored["format_ok"]) == (True, "-2 \\text{ or } -12", True)


def test_eval_reports_the_value_read_and_how_many_markers_there_were():
    scored = score_completion("#### 18\nso, again:\n#### 18 dollars", "18", "gsm8k")
    assert (scored["correct"], scored["extracted"], scored["n_markers"]) == (True, "18", 2)


# Strict and lenient accuracy (docs/eval.md): the lenient rule reads another answer, compared with the same equality.
@pytest.mark.parametrize(
    "completion, gold, task, strict, lenient, read",
    [
        # a committed "#### 18", then another number: strict reads the marker, lenient the last number
        (
            "She sells 16 - 3 - 4 = 9 eggs for $2 each.\n#### 18\nThat took her 3 hours.",
            "18",
            "gsm8k",
            True,
            False,
            "3",
        ),
        # no marker, ending in the right number: lenient right, strict wrong (the prompt asked for "#### N")
        ("She sells 9 eggs at $2 each, so she makes 9 * 2 = 18", "18", "gsm8k", False, True, "18"),
        # currency and thousands separators: read as written, compared as numbers (lm-eval would compare the string
        # "1234.00" with "1234" after dropping "$" and "," and say wrong: an equality difference, not an extraction one)
        ("The total cost is $1,234.00", "1234", "gsm8k", False, True, "$1,234.00"),
        ("The total cost is $1,234.00.\n#### $1,234.00", "1234", "gsm8k", True, True, "$1,234.00"),
        # negatives keep their sign
        ("The temperature fell by 12 degrees, to -7", "-7", "gsm8k", False, True, "-7"),
        ("The temperature fell to -7", "7", "gsm8k", False, False, "-7"),
        ("#### -7", "-7", "gsm8k", True, True, "-7"),
        # a hedge: strict refuses it, lenient takes the last number
        ("#### 17 or 18", "18", "gsm8k", False, True, "18"),
        # no number at all
        ("I do not know.", "3", "gsm8k", False, False, None),
        # MATH: the last box wins over a later stated value ...
        ("so \\boxed{2}. Check: $x = 3$ satisfies it.", "2", "math500", True, True, "2"),
        ("so \\boxed{2}. Check: $x = 3$ satisfies it.", "3", "math500", False, False, "2"),
        # ... with no box, the final stated value, the right-hand side of its equation
        ("The smallest integer that works is $x = 3$.", "3", "math500", False, True, "3"),
        (
            "Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.",
            "\\frac{1}{2}",
            "math500",
            False,
            True,
            "\\frac{1}{2}",
        ),
        # units around a number compare as the number, as in the strict score
        ("So the answer is 10%.", "10", "math500", False, True, "10%"),
        # an empty box echoed after the answered one: both rules read the filled box before it
        (
            "So, the answer is:\n\n\\boxed{3}\n\nThis is the final answer within \\boxed{}.",
            "3",
            "math500",
            True,
            True,
            "3",
        ),
        # two different boxes: a hedge to the strict rule, the last one to the lenient rule
        ("\\boxed{17} or \\boxed{18}", "18", "math500", False, True, "18"),
    ],
)
def test_lenient_reads_the_last_number_or_stated_value(completion, gold, task, strict, lenient, read):
    from eval.scoring import lenient_score

    s, loose = score_completion(completion, gold, task), lenient_score(completion, gold, task)
    assert (s["correct"], loose["lenient_correct"], loose["lenient_extracted"]) == (strict, lenient, read)
    assert loose["lenient_timeout"] is False and (loose["lenient_from"] is None) == (read is None)


def test_lenient_compares_as_the_strict_score_compares():
    # same equality: "18.00" and "$18" are 18 under both rules (lm-eval's string match would call "18.00" wrong)
    from eval.scoring import lenient_score

    for text in ("#### 18.00", "#### $18"):
        assert (
            score_completion(text, "18", "gsm8k")["correct"] and lenient_score(text, "18", "gsm8k")["lenient_correct"]
        )
    assert lenient_score("so \\boxed{\\frac{2}{4}}", "\\frac{1}{2}", "math500")["lenient_correct"]


def test_the_rewards_stay_strict():
    # a completion the lenient rule credits earns nothing from the correctness reward
    from eval.scoring import lenient_score
    from rewards import get_reward

    text = "She sells 9 eggs at $2 each, so she makes 9 * 2 = 18"
    assert lenient_score(text, "18", "gsm8k")["lenient_correct"]
    assert get_reward("gsm8k_correctness")([text], answer=["18"]) == [0.0]


def test_lenient_scoring_never_raises(monkeypatch):
    import eval.scoring

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(eval.scoring, "compare_answers", broken)
    assert eval.scoring.lenient_score("#### 8", "8", "gsm8k") == {
        "lenient_extracted": None,
        "lenient_from": None,
        "lenient_correct": False,
        "lenient_timeout": False,
    }


def test_score_reports_lenient_accuracy_and_gap(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    rows = [
        {"completion": "3 + 5 = 8\n#### 8", "answer": "8"},  # both
        {"completion": "so 3 + 5 = 8", "answer": "8"},  # lenient only
        {"completion": "#### 8\nand 2 left over", "answer": "8"},  # strict only
        {"completion": "so 3 + 5 = 8", "answer": "9"},  # neither
        {"completion": "no idea", "answer": "1"},  # nothing read
    ]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = score_predictions("gsm8k", predictions, tmp_path / "out")
    from eval.metrics import wilson_interval

    assert (results["accuracy"], results["lenient_accuracy"], results["lenient_n_correct"]) == (0.4, 0.4, 2)
    assert results["lenient_gap"] == 0.0 and (results["lenient_only_correct"], results["strict_only_correct"]) == (1, 1)
    assert results["lenient_ci"] == list(wilson_interval(2, 5))
    assert results["lenient_from"] == {"last_number": 4, "nothing": 1}
    assert results["lenient_rule"] == "last number in the completion (lm-eval flexible-extract)"
    lines = read_jsonl(tmp_path / "out" / "samples.jsonl")
    assert [(line["lenient_extracted"], line["lenient_correct"]) for line in lines] == [
        ("8", True),
        ("8", True),
        ("2", False),
        ("8", False),
        (None, False),
    ]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| lenient accuracy: last number in the completion (lm-eval flexible-extract) | 40.0% [" in summary
    assert (
        "| lenient - strict gap | +0.0 points (right only by the lenient rule: 1; only by the strict one: 1) |"
        in summary
    )
    assert json.loads((tmp_path / "out" / "results.json").read_text())["lenient_accuracy"] == 0.4


def test_lenient_accuracy_of_k_samples_is_bootstrapped_like_accuracy(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    rows = [
        {"completion": ["#### 4", "so it is 4", "so it is 5"], "answer": "4"},
        {"completion": ["so 9", "#### 9", "#### 1"], "answer": "9"},
    ]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = score_predictions("gsm8k", predictions, tmp_path / "out")
    assert results["accuracy"] == pytest.approx(2 / 6) and results["lenient_accuracy"] == pytest.approx(4 / 6)
    assert results["lenient_gap"] == pytest.approx(2 / 6)
    from eval.metrics import bootstrap_ci

    assert results["lenient_ci"] == list(bootstrap_ci([2 / 3, 2 / 3]))
    samples = read_jsonl(tmp_path / "out" / "samples.jsonl")[0]["samples"]
    assert [s["lenient_correct"] for s in samples] == [True, True, False]
