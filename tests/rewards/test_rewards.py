"""Rewards: TRL's contract, the weight check, robustness (never raise, never hang, any thread), and the judge lab's
strict answer-line checker.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_rewards.py
"""

import logging
import pickle
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rewards.verify as verify
from rewards import check_reward_weights, get_reward, reward_names
from rewards.answers import Answer, extract_answer
from rewards.correctness import CorrectnessReward, answer_line_correctness_reward
from rewards.format import FormatReward
from rewards.verify import (
    RETRY_FACTOR,
    TIME_BUDGET_S,
    Check,
    Verdict,
    answers_match,
    check,
    compare_answers,
    is_correct,
    timeout_count,
    warm_up,
)

ROOT = Path(__file__).resolve().parents[2]


def conversation(text):
    return [{"role": "assistant", "content": text}]


TRL_CALL_CASES = [
    # name, completion, gold, expected score
    ("gsm8k_correctness", "3 + 5 = 8\n#### 8", "8", 1.0),  # correct, plain completion
    ("gsm8k_correctness", conversation("3 + 5 = 8\n#### 8"), "8", 1.0),  # correct, conversational completion
    ("gsm8k_correctness", conversation(None), "8", 0.0),  # None content scores 0, never raises
    ("gsm8k_correctness", "#### 9", "8", 0.0),  # wrong
    ("gsm8k_correctness", "#### 8", None, None),  # gold missing: None, TRL skips it
    ("gsm8k_correctness", "#### 8", "  ", None),  # blank gold: None
    ("math_correctness", "\\boxed{\\dfrac{2}{4}}", "\\frac{1}{2}", 1.0),  # equivalent via math-verify
    ("math_correctness", "\\boxed{20\\%}", "20", 1.0),  # a unit around a plain-number gold
    ("math_correctness", "\\boxed{1200\\%}", "12", 0.0),  # not math-verify's percent leniency (12 == 1200%)
    ("math_correctness", "\\boxed{-2 \\text{ or } -12}", "-2 \\text{ or } -12", 1.0),  # gold that lists solutions
    ("math_correctness", "Evaluate $(1+2i)6-3i$.", "6+9i", 0.0),  # restated question (math-verify credits it)
    ("gsm8k_format", "3 + 5 = 8\n#### 8", "8", 0.1),  # one marker at the end
    ("gsm8k_format", "#### 8\nand then a long tail of text that goes on and on", "8", 0.0),  # not at the end
    ("math_format", "so $\\boxed{3}$.", "3", 0.1),  # a closing $ and period may follow
    ("number_anywhere", "I think 17, or maybe 18", "18", 0.5),  # hackable on purpose: the gold anywhere
    ("number_anywhere", "#### 18", "\\frac{1}{2}", None),  # not a number gold: cannot score
]


@pytest.mark.parametrize("name, completion, gold, expected", TRL_CALL_CASES)
def test_trl_contract(name, completion, gold, expected):
    reward = get_reward(name)
    # TRL passes prompts, completion ids, every dataset column and logging hooks as keyword arguments
    scores = reward(
        prompts=[[{"role": "user", "content": "q"}]],
        completions=[completion],
        completion_ids=[[1, 2]],
        answer=[gold],
        question=["q"],
        trainer_state=None,
        log_extra=lambda *a: None,
        log_metric=lambda *a: None,
    )
    assert scores == [expected]


@pytest.mark.parametrize("name", ["gsm8k_correctness", "math_correctness", "number_anywhere"])
def test_mismatched_lengths_raise(name):
    with pytest.raises(ValueError):  # zip(strict=True): a batch/gold mismatch is a bug upstream, not a score
        get_reward(name)(["#### 1", "#### 2"], answer=["1"])


def test_missing_answer_column_is_a_clear_error():
    with pytest.raises(ValueError, match="needs the dataset's 'answer' column"):
        get_reward("gsm8k_correctness")(["#### 1"], solution=["1"])


@pytest.mark.parametrize("name", sorted(reward_names()))
def test_registered_rewards_have_names_and_pickle(name):
    reward = get_reward(name)
    assert reward.__name__.endswith("_reward")  # TRL logs rewards/<__name__>/mean
    assert pickle.loads(pickle.dumps(reward)).__name__ == reward.__name__


def test_factories_are_configurable_and_picklable():
    bonus = pickle.loads(pickle.dumps(FormatReward("math", bonus=0.25)))
    assert bonus(["\\boxed{3}"]) == [0.25]
    strict = pickle.loads(pickle.dumps(CorrectnessReward("gsm8k", answer_line=True)))
    assert strict(["A: 18"], answer=["18"]) == [1.0]
    with pytest.raises(ValueError, match="format bonus must be"):
        FormatReward("gsm8k", bonus=-1)


WEIGHT_CASES = [
    # names, weights, refused?
    (["gsm8k_correctness", "gsm8k_format"], None, False),  # 0.1 bonus vs 1.0: fine
    (["gsm8k_correctness", "gsm8k_format"], [1.0, 9.0], False),  # 0.9 < 1.0: still fine
    (["gsm8k_correctness", "gsm8k_format"], [1.0, 10.0], True),  # 1.0 == 1.0: a wrong answer pays as much
    (["gsm8k_format"], None, True),  # format only: the classic hack
    (["number_anywhere"], None, True),  # partial credit only
    (["math_correctness", "math_format", "number_anywhere"], None, False),  # 0.6 < 1.0
    (["math_correctness", "number_anywhere"], [0.5, 1.0], True),  # 0.5 >= 0.5
    (["gsm8k_correctness", "gsm8k_format"], [1.0, -5.0], False),  # a negative format weight pays nothing
]


@pytest.mark.parametrize("names, weights, refused", WEIGHT_CASES)
def test_check_reward_weights(names, weights, refused, caplog):
    if refused:
        with pytest.raises(ValueError, match="can pay a wrong answer"):
            check_reward_weights(names, weights)
        with caplog.at_level(logging.WARNING):
            check_reward_weights(names, weights, on_violation="warn")
        assert "REWARD HACK RISK" in caplog.text
    else:
        check_reward_weights(names, weights)


BAD_WEIGHT_CALLS = [
    ((["gsm8k_correctness"], [1.0, 2.0]), "one weight per reward"),  # lengths differ
    (([], None), "empty reward set"),  # nothing to train on
    ((["gsm8k_corectness"], None), "known rewards are"),  # typo in a name
    ((["gsm8k_correctness"], None, "ignore"), "on_violation"),  # unknown mode
]


@pytest.mark.parametrize("args, message", BAD_WEIGHT_CALLS)
def test_check_reward_weights_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        check_reward_weights(*args)


PATHOLOGICAL = [
    ("x" * 1_000_000, "8"),  # 1 MB of text
    ("\\boxed{}" * 2_000, "8"),  # 16 KB of repeated empty boxes
    ("\\boxed{9^{9^{9^{9}}}}", "8"),  # a power tower
    ("\\boxed{9^{9^{9^{9}}}}", "2^{2^{2^{2}}}"),  # a power tower against a gold that nests too (worker budget)
    ("\\boxed{" + "(" * 300 + ")" * 300 + "}", "8"),  # deeply nested parentheses
    ("{{{{\\boxed{8", "8"),  # unbalanced braces
    ("#### ٨", "8"),  # Arabic-Indic digit
    ("\\boxed{" + "1+" * 400 + "1}", "401"),  # a long sum
    ("\\boxed{\\frac{1}{0}}", "8"),  # division by zero
    ("", "8"),  # empty
]


@pytest.mark.parametrize("completion, gold", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_completions_score_fast_in_threads(completion, gold):
    warm_up()
    rewards = [get_reward("gsm8k_correctness"), get_reward("math_correctness"), get_reward("math_format")]
    with ThreadPoolExecutor(max_workers=3) as pool:  # math-verify's own SIGALRM timeouts fail outside main
        start = time.perf_counter()
        futures = [pool.submit(r, [completion] * 2, answer=[gold] * 2) for r in rewards]
        scores = [f.result(timeout=20) for f in futures]
        elapsed = time.perf_counter() - start
    assert all(s in (0.0, 0.1, 1.0) for batch in scores for s in batch)
    # one budget, then one retry with RETRY_FACTOR times it; the second identical completion is not retried again
    assert elapsed < (1 + RETRY_FACTOR) * TIME_BUDGET_S + 1.0


def test_runaway_comparison_times_out_scores_zero_and_warns(caplog, monkeypatch):
    import rewards.verify as verify

    monkeypatch.setattr(verify, "too_costly", lambda text: None)  # past the static refusal: the worker's own limits
    warm_up(1)
    before = timeout_count()
    with caplog.at_level(logging.WARNING):
        start = time.perf_counter()
        verdict = compare_answers("9^{9^{9}}", "2^{2^{2}}", task="math", timeout=0.3)  # sympy would run for ages
        elapsed = time.perf_counter() - start
        matched = answers_match("9^{9^{9}}", "2^{2^{2}}", task="math", timeout=0.3)  # given up: not retried now
    assert verdict is Verdict.TIMEOUT and matched is False
    assert timeout_count() - before == 2  # both calls were timeouts, not verdicts
    assert elapsed < (1 + RETRY_FACTOR) * 0.3 + 0.5  # the budget, then one retry with RETRY_FACTOR times it
    # killed at the wall clock twice (sympy's big powers run in C, deaf to the worker's timers), or stopped by the CPU
    # timer on the retry: no verdict either way
    assert "timed out twice" in caplog.text or "spent its whole CPU budget" in caplog.text
    assert answers_match("\\frac{1}{2}", "0.5", task="math")  # the pool still works afterwards


def test_many_threads_agree_with_one():
    cases = [(f"\\boxed{{\\frac{{{i}}}{{2}}}}", str(i / 2)) for i in range(40)]
    serial = [is_correct(c, g, "math") for c, g in cases]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda cg: is_correct(cg[0], cg[1], "math"), cases))
    assert serial == threaded == [True] * 40


@pytest.mark.heavy  # starts a process
def test_works_when_main_is_stdin():
    # multiprocessing's spawn re-imports __main__ and breaks for stdin scripts and notebooks; our worker does not
    script = "from rewards.verify import is_correct\nprint(is_correct('\\\\boxed{\\\\frac{1}{2}}', '0.5', 'math'))\n"
    out = subprocess.run(
        [sys.executable, "-"], input=script, text=True, capture_output=True, cwd=ROOT, timeout=60, check=True
    )
    assert out.stdout.strip() == "True"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["8", "\\frac{1}{2}", "x^2+1", "(1,2)"]))
def test_rewards_never_raise_on_arbitrary_text(text, gold):
    for name in ("gsm8k_correctness", "math_correctness", "gsm8k_format", "math_format", "number_anywhere"):
        (score,) = get_reward(name)([conversation(text)], answer=[gold])
        assert score is None or 0.0 <= score <= 1.0


def test_reward_set_without_correctness_says_to_add_one():
    # format only: nothing separates right from wrong answers; the message names the fix, not "1 < 0"
    with pytest.raises(ValueError, match="has no correctness term") as err:
        check_reward_weights(["gsm8k_format"], [1.0])
    assert "Add a correctness reward" in str(err.value)


# --- repeated markers, answer lines, a failing extractor; each fixture differs from the defaults ---


@pytest.mark.parametrize(
    "task, completion",
    [
        ("gsm8k", "3 + 5 = 8\n#### 8\n#### 8"),  # the same marker twice: one answer, but not exactly one marker
        ("math", "so $\\boxed{8}$, and again $\\boxed{8}$."),  # the same box twice
    ],
)
def test_format_reward_does_not_pay_repeated_markers(task, completion):
    reward = FormatReward(task, bonus=0.35)  # not the default bonus: a wiring bug would show
    single = completion.rsplit("\n", 1)[0] if task == "gsm8k" else "so $\\boxed{8}$."
    assert reward([single, completion]) == [0.35, 0.0]


@pytest.mark.parametrize("name", ["gsm8k_correctness", "math_correctness"])
def test_registered_correctness_rewards_ignore_answer_lines(name):
    # the registered rewards ask for the task's own marker; only the answer_line factory reads "Answer: 27"
    task = name.split("_")[0]
    completions = ["so there are 27 of them.\nAnswer: 27", "so there are 27 of them.\nFinal answer: 27"]
    assert get_reward(name)(completions, answer=["27", "27"]) == [0.0, 0.0]
    assert CorrectnessReward(task, answer_line=True)(completions, answer=["27", "27"]) == [1.0, 1.0]


@pytest.mark.parametrize(
    "completion",
    [
        "#### 27 or 28\nAnswer: 27",  # a hedged marker, then an answer line naming the gold
        "#### 26\nwait\n#### 27\nAnswer: 27",  # disagreeing markers, then an answer line
        "####\nAnswer: 27",  # an empty marker
    ],
)
def test_answer_line_does_not_override_the_task_marker(completion):
    reward = CorrectnessReward("gsm8k", answer_line=True)
    assert reward([completion], answer=["27"]) == [0.0]


def test_is_correct_is_false_and_logged_on_an_internal_exception(monkeypatch, caplog):
    import rewards.verify as verify

    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(verify, "extract_answer", broken)
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        assert is_correct("#### 27", "27", "gsm8k") is False
        assert get_reward("gsm8k_correctness")(["#### 27"], answer=["27"]) == [0.0]
    assert [r.exc_info[0] for r in caplog.records] == [RuntimeError, RuntimeError]  # logged with its traceback


# --- math-verify's false positives: a wrong answer is never paid ---

# (pred, gold): raw math-verify says equal, and they are not. Found by hand on math-verify 0.9.0.
MATH_VERIFY_FALSE_POSITIVES = [
    ("\\frac{1}{21!}", "\\frac{1}{20!}"),  # reciprocals of neighbouring factorials (difference 4e-19, chopped)
    ("2^{-61}", "2^{-60}"),  # neighbouring negative powers of two
    ("10^{20}", "\\sqrt{10^{40}+1}"),  # very large: relative difference 5e-41
    ("150000000000000000001", "1.5\\times 10^{20}"),  # a decimal gold read with 15 digits
    ("0.2\\cdot10^{-19}", "0.1\\cdot 10^{-19}"),  # decimals rounded to 6 places: both 0
    ("0.0000000250521", "\\frac{1}{3628800}"),  # 1/11! against the gold 1/10!: both round to 0.000000
    ("x^2+1+10^{-20}", "x^2+1"),  # an expression off by a tiny constant
    ("x = 2^{-61}", "x = 2^{-60}"),  # the same, as an assignment
    ("4\\sqrt(2)", "4"),  # malformed root: math-verify reads 4
    ("3\\frac(1)(2)", "3"),  # malformed fraction: read as 3
    ("6 \\pm", "6"),  # a plus-or-minus cut short: read as 6
    ("\\sqrt{9}=\\pm 3", "3"),  # two values: math-verify takes the left side
]
# (pred, gold): true equivalences that must still pass (the guards only ever turn "equal" into "not equal").
TRUE_EQUIVALENCES = [
    ("\\frac{1}{2}", "0.5"),
    ("0.5", "\\frac{1}{2}"),
    ("10000", "10{,}000"),
    ("0.3333333", "\\frac{1}{3}"),  # a decimal agreeing to its last written digit
    ("1.5707963", "\\frac{\\pi}{2}"),
    ("150000000000000000000", "1.5\\times 10^{20}"),
    ("\\frac{1}{2432902008176640000}", "\\frac{1}{20!}"),  # 20! written out
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("x+x", "2x"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("\\pm 3", "-3, 3"),  # a gold that lists both values
    ("1\\pm\\sqrt{19}", "1 \\pm \\sqrt{19}"),
    ("\\infty", "\\infty"),
]


@pytest.mark.parametrize("pred, gold", MATH_VERIFY_FALSE_POSITIVES)
def test_math_verify_false_positives_are_not_equal(pred, gold):
    from math_verify import parse, verify

    assert verify(parse(f"${gold}$"), parse(f"${pred}$"))  # the class is real: math-verify alone pays it
    assert not answers_match(pred, gold, task="math")
    assert get_reward("math_correctness")([f"so \\boxed{{{pred}}}"], answer=[gold]) == [0.0]


@pytest.mark.parametrize("pred, gold", TRUE_EQUIVALENCES)
def test_true_equivalences_still_match(pred, gold):
    assert answers_match(pred, gold, task="math")


def test_gsm8k_plus_minus_is_a_hedge():
    reward = CorrectnessReward("gsm8k")
    assert reward(["#### \\pm 27", "#### ±27", "#### 27 \\pm", "#### 27"], answer=["27"] * 4) == [0.0, 0.0, 0.0, 1.0]


GSM8K_FRACTION_SCORES = [
    ("#### 3/4", "0.75", 1.0),
    ("#### 6/8", "0.75", 1.0),
    ("#### 3 / 4", "0.75", 1.0),
    ("#### -3/4", "-0.75", 1.0),
    ("#### 1 1/2", "1.5", 1.0),
    ("#### 3/5", "0.75", 0.0),  # another number
    ("#### 1/3", "0.33", 0.0),  # exact: 1/3 is not 0.33 (nor 0.333333333333333333333)
    ("#### 1/3", "0.333333333333333333333", 0.0),
    ("#### 0.33", "1/3", 0.0),
    ("#### 2/6", "1/3", 1.0),  # a fraction as the gold
    ("#### 1/0", "0", 0.0),  # no number
    ("#### 8/2", "4", 1.0),
]


@pytest.mark.parametrize("completion, gold, paid", GSM8K_FRACTION_SCORES)
def test_gsm8k_correctness_pays_a_fraction_equal_to_the_gold(completion, gold, paid):
    assert get_reward("gsm8k_correctness")([completion], answer=[gold]) == [paid]
    # the judge lab's checker reads the same number on its answer line
    assert answer_line_correctness_reward([completion.replace("####", "Answer:")], answer=[gold]) == [paid]


def test_number_anywhere_pays_a_fraction_equal_to_the_gold():
    completions = ["so 6/8 of the cake", "we get 1/3 of it", "he has 2 3/4 cups", "he has 2 3/4 cups", "1/0 cups"]
    golds = ["0.75", "0.33", "2.75", "0.75", "2"]  # 1/0 is no number (1 and 0 are)
    assert get_reward("number_anywhere")(completions, answer=golds) == [0.5, 0.0, 0.5, 0.5, 0.0]


def test_gsm8k_arithmetic_on_the_gold_is_not_the_gold():
    # each holds only the gold's digits, and is another number (probe malformed_root paid one in 50 before)
    completions = ["#### 2\\sqrt(2)", "#### 2 + 2", "#### 2*2", "#### 2^{2}", "#### 2 \\cdot 2", "#### 2"]
    assert get_reward("gsm8k_correctness")(completions, answer=["2"] * 6) == [0.0] * 5 + [1.0]


# --- the time budget: a real bound, timeouts reported, never cached as verdicts ---


def test_timeout_is_retried_once_with_a_larger_budget_then_reported(scripted_pool, caplog):
    pool = scripted_pool(Verdict.TIMEOUT, Verdict.TIMEOUT)
    before = timeout_count()
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        verdict = compare_answers("\\frac{7}{3}", "\\frac{14}{6}", task="math", timeout=0.25)
    assert verdict is Verdict.TIMEOUT
    assert pool.budgets == [0.25, 0.25 * RETRY_FACTOR]
    assert timeout_count() - before == 1
    assert "timed out twice" in caplog.text


def test_timeout_retry_can_succeed(scripted_pool):
    pool = scripted_pool(Verdict.TIMEOUT, Verdict.EQUAL)
    before = timeout_count()
    assert answers_match("\\frac{9}{3}", "\\frac{27}{9}", task="math", timeout=0.2)
    assert len(pool.budgets) == 2 and timeout_count() == before  # recovered: not a timeout


def test_timeout_is_never_cached_as_a_verdict(scripted_pool, monkeypatch):
    import rewards.verify as verify

    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 0.0)  # no short-term memo: the next call asks the pool again
    scripted_pool(Verdict.TIMEOUT, Verdict.TIMEOUT, Verdict.EQUAL)
    pair = ("\\frac{11}{4}", "\\frac{22}{8}")
    assert compare_answers(*pair, task="math") is Verdict.TIMEOUT
    assert compare_answers(*pair, task="math") is Verdict.EQUAL  # a later, unloaded comparison gives the verdict
    scripted_pool()  # no replies left: a cached verdict must answer now
    assert compare_answers(*pair, task="math") is Verdict.EQUAL


def test_checker_error_is_not_a_timeout(scripted_pool, caplog):
    scripted_pool(Verdict.CHECKER_ERROR, Verdict.CHECKER_ERROR)
    before = timeout_count()
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        result = check("so \\boxed{\\frac{13}{5}}", "\\frac{26}{10}", task="math")
    assert (result.correct, result.reason, result.timeout) == (False, "checker_error", False)
    assert timeout_count() == before
    assert "workers failed" in caplog.text


def test_budget_counts_waiting_for_a_free_worker(monkeypatch):
    import rewards.verify as verify

    monkeypatch.setattr(verify, "CPU_BUDGET_S", 10.0)  # the holder below is held by its wall-clock budget alone
    pool = verify._WorkerPool(1)
    try:
        pool.warm_up()
        busy = ThreadPoolExecutor(max_workers=1)
        # holds the only worker for ~1.5 s (a power tower, past the worker's own alarm or killed at the budget)
        holder = busy.submit(pool.compare, "2^{2^{2^{2}}}", "9^{9^{9^{9}}}", 1.5)
        time.sleep(0.3)
        start = time.perf_counter()
        verdict = pool.compare("\\frac{1}{2}", "0.5", 0.4)
        elapsed = time.perf_counter() - start
        assert verdict is Verdict.TIMEOUT  # no worker free within the budget: a timeout, not a wait
        assert elapsed < 0.4 + 0.3
        assert holder.result(timeout=10) is Verdict.TIMEOUT
        busy.shutdown()
    finally:
        pool.close()


def test_budget_counts_waiting_for_a_warm_up_in_another_thread():
    import rewards.verify as verify

    pool = verify._WorkerPool(1)
    try:
        warming = ThreadPoolExecutor(max_workers=1)
        done = warming.submit(lambda: (pool.warm_up(), time.monotonic())[1])  # ~0.6 s or more: imports math-verify
        time.sleep(0.05)
        verdict = pool.compare("\\frac{1}{2}", "0.5", 0.1)
        returned = time.monotonic()
        assert verdict is Verdict.TIMEOUT
        assert returned < done.result(timeout=60)  # it did not wait for the warm-up to finish
        warming.shutdown()
    finally:
        pool.close()


def test_budget_counts_starting_a_worker():
    import rewards.verify as verify

    pool = verify._WorkerPool(1)  # cold: its worker takes ~0.6 s or more to import math-verify
    try:
        start = time.perf_counter()
        verdict = pool.compare("\\frac{1}{2}", "0.5", 0.05)
        elapsed = time.perf_counter() - start
        assert verdict is Verdict.TIMEOUT and elapsed < 0.05 + 0.3
        assert pool.compare("\\frac{1}{2}", "0.5", 30.0) is Verdict.EQUAL  # the same worker finished starting
    finally:
        pool.close()


@pytest.mark.heavy  # starts a process
def test_worker_that_fails_to_start_is_a_checker_error(tmp_path, monkeypatch, caplog):
    import rewards.verify as verify

    broken = tmp_path / "broken_worker.py"
    broken.write_text("import sys\nsys.exit(3)\n")  # e.g. math-verify missing from the environment
    monkeypatch.setattr(verify, "_WORKER_SCRIPT", str(broken))
    pool = verify._WorkerPool(2)
    try:
        with caplog.at_level(logging.WARNING, logger="rewards.verify"):
            assert pool.compare("\\frac{1}{2}", "0.5", 5.0) is Verdict.CHECKER_ERROR
        assert "worker failed" in caplog.text
    finally:
        pool.close()


# --- the rewards' names, defaults, argument limits and messages ---


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


def test_the_format_reward_scores_0_where_reading_the_answer_fails_and_goes_on(monkeypatch):
    import rewards.format

    real = rewards.format.extract_answer

    def fragile(text, task, **options):
        if "boom" in text:
            raise RuntimeError("extractor bug")
        return real(text, task=task, **options)

    monkeypatch.setattr(rewards.format, "extract_answer", fragile)
    assert FormatReward("gsm8k", bonus=0.4)(["#### 3 boom", "so\n#### 8"]) == [0.0, 0.4]


def test_is_correct_asks_for_the_tasks_own_marker_unless_told_otherwise():
    assert not is_correct("So she has 8 apples.\nAnswer: 8", "8")
    assert is_correct("So she has 8 apples.\nAnswer: 8", "8", answer_line=True)


# --- the checker: answers decided without math-verify, a pair given up and its retry ---


def test_answers_equal_up_to_spacing_and_dfrac_never_wait_for_the_checker(scripted_pool):
    # on a loaded machine math-verify can time out: an answer written as the gold is, up to spaces and \dfrac, must not
    scripted_pool()  # any question to math-verify fails the test
    assert verify.compare_answers("\\dfrac{3}{ 4 }", "\\frac{3}{4}", task="math") is verify.Verdict.EQUAL
    assert verify.compare_answers("x \\, + \\; 1", "x+1", task="math") is verify.Verdict.EQUAL
    two_boxes = "so \\boxed{\\tfrac{5}{8}} and again \\boxed{\\frac{5}{8}}"
    expected = Answer("\\frac{5}{8}", "ok", "boxed", 2, len(two_boxes), "\\frac{5}{8}")
    assert extract_answer(two_boxes, task="math") == expected


def test_a_pair_given_up_is_not_asked_again_for_a_while_and_the_retry_asks_the_same_pair(
    scripted_pool, monkeypatch, caplog
):
    pool = scripted_pool(*[verify.Verdict.TIMEOUT] * 4)  # every comparison runs out of time
    calls = pool.asked
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


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rewards.verify"]


# --- the verdict cache and the memo of pairs given up: bounded, oldest out ---

# (gold, pred): unequal strings, so each one goes to math-verify
PAIRS = [("\\frac{1}{3}", "\\frac{2}{6}"), ("\\frac{2}{3}", "\\frac{4}{6}"), ("\\frac{4}{3}", "\\frac{8}{6}")]


def test_the_memo_of_pairs_given_up_keeps_the_newest_cache_size_pairs(scripted_pool, monkeypatch):
    monkeypatch.setattr(verify, "CACHE_SIZE", 2)
    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 600.0)
    pool = scripted_pool(*[Verdict.TIMEOUT] * 8)
    for gold, pred in PAIRS:
        assert compare_answers(pred, gold, task="math") is Verdict.TIMEOUT  # a full memo never raises
    assert list(verify._GIVEN_UP) == PAIRS[1:]
    asked = len(pool.asked)
    for gold, pred in PAIRS[1:]:
        assert compare_answers(pred, gold, task="math") is Verdict.TIMEOUT
    assert len(pool.asked) == asked  # the two newest: given up at once
    assert compare_answers(PAIRS[0][1], PAIRS[0][0], task="math") is Verdict.TIMEOUT
    assert len(pool.asked) == asked + 2  # the oldest was forgotten: asked again (and retried)


def test_a_pair_that_keeps_coming_back_is_asked_again_once_its_window_has_passed(scripted_pool, monkeypatch):
    # a GRPO group repeats an answer every step: refusals from the memo are counted but do not extend its window, or
    # a pair given up once under load would never be asked again while it keeps coming back
    clock = [1000.0]
    monkeypatch.setattr(verify, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 30.0)
    pool = scripted_pool(Verdict.TIMEOUT, Verdict.TIMEOUT, Verdict.EQUAL)
    gold, pred = PAIRS[0]
    before = verify.timeout_count()
    for clock[0] in (1000.0, 1020.0):  # given up (asked twice), then refused from the memo
        assert compare_answers(pred, gold, task="math") is Verdict.TIMEOUT
    assert len(pool.asked) == 2 and verify.timeout_count() - before == 2
    given_up = verify._GIVEN_UP
    assert given_up == {(gold, pred): 1000.0}  # the refusal did not move the window
    clock[0] = 1031.0  # 31 s after the give-up, 11 s after the last refusal: asked again, and this time it answers
    assert compare_answers(pred, gold, task="math") is Verdict.EQUAL
    assert len(pool.asked) == 3 and verify.timeout_count() - before == 2


def test_the_verdict_cache_keeps_the_newest_cache_size_verdicts(scripted_pool, monkeypatch):
    monkeypatch.setattr(verify, "CACHE_SIZE", 2)
    scripted_pool(Verdict.EQUAL, Verdict.NOT_EQUAL, Verdict.EQUAL)
    assert [compare_answers(pred, gold, task="math") for gold, pred in PAIRS] == [
        Verdict.EQUAL,
        Verdict.NOT_EQUAL,
        Verdict.EQUAL,
    ]
    assert list(verify._CACHE) == PAIRS[1:]
    scripted_pool()  # no replies left: the two newest answer from the cache
    assert [compare_answers(pred, gold, task="math") for gold, pred in PAIRS[1:]] == [Verdict.NOT_EQUAL, Verdict.EQUAL]


def test_the_checker_error_warning_names_the_pair(scripted_pool, caplog):
    scripted_pool(Verdict.CHECKER_ERROR, Verdict.CHECKER_ERROR)
    gold, pred = PAIRS[0]
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        assert compare_answers(pred, gold, task="math") is Verdict.CHECKER_ERROR
    assert messages(caplog) == [f"math-verify workers failed on {pred!r} vs gold {gold!r}: no verdict, not paid"]


# --- compare_answers and answers_match: the task, the defaults, the limits ---


def test_gsm8k_compares_as_numbers_and_never_asks_math_verify(scripted_pool):
    scripted_pool()  # any question to math-verify fails the test
    # math-verify would pay this (36/2 is 18); GSM8K reads numbers only
    assert compare_answers("\\frac{36}{2}", "18", task="gsm8k") is Verdict.NOT_EQUAL
    assert answers_match("\\frac{36}{2}", "18", task="gsm8k") is False
    assert compare_answers("\\frac{36}{2}", "18") is Verdict.NOT_EQUAL  # the default task is gsm8k
    assert answers_match("\\frac{36}{2}", "18") is False
    assert compare_answers("18", "$18", task="gsm8k") is Verdict.EQUAL  # a gold as GSM8K reads it


def test_answers_match_passes_its_budget_on(scripted_pool):
    pool = scripted_pool(Verdict.EQUAL)
    assert answers_match("\\frac{9}{3}", "\\frac{27}{9}", task="math", timeout=0.3)
    assert [timeout for _, _, timeout in pool.asked] == [0.3]


def test_a_plain_number_gold_with_thousands_separators_compares_as_a_decimal(scripted_pool):
    scripted_pool()
    assert compare_answers("1000", "1,000", task="math") is Verdict.EQUAL
    assert compare_answers("1000.5", "1,000", task="math") is Verdict.NOT_EQUAL


def test_pathological_answers_are_skipped_and_named_and_the_length_limit_is_inclusive(scripted_pool, caplog):
    long_answer = "x + " * 125 + "x"  # 501 characters
    assert len(long_answer) == verify.MAX_ANSWER_CHARS + 1
    scripted_pool()
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        assert compare_answers(long_answer, "y", task="math") is Verdict.NOT_EQUAL
        # short, but a power tower: no budget could compare it, so no verdict (not "not equal")
        assert compare_answers("9^{9^{9^{9}}}", "1", task="math") is Verdict.REFUSED
    assert messages(caplog) == [
        f"answer skipped as pathological (501 chars): {long_answer!r:.60}",
        "answer skipped as pathological (13 chars): '9^{9^{9^{9}}}'",
    ]
    pool = scripted_pool(Verdict.EQUAL)
    assert compare_answers("x" * verify.MAX_ANSWER_CHARS, "y", task="math") is Verdict.EQUAL  # at the limit: asked
    assert len(pool.asked) == 1


# --- check ---


def test_check_defaults_to_gsm8k_and_its_own_marker(scripted_pool):
    scripted_pool()
    assert check("so 3 + 5 = 8\n#### 8", "8") == Check(Answer("8", "ok", "####", 1, 19, "8"), Verdict.EQUAL, "ok")
    assert check("So she has 8 apples.\nAnswer: 8", "8").reason == "no_marker"  # no Answer: line unless asked


def test_check_compares_a_gsm8k_answer_as_gsm8k_does(scripted_pool):
    scripted_pool()  # a GSM8K completion never reaches math-verify
    assert check("#### 18", "$18", task="gsm8k").correct


@pytest.mark.parametrize("verdict, reason", [(Verdict.TIMEOUT, "timeout"), (Verdict.CHECKER_ERROR, "checker_error")])
def test_boxes_that_cannot_be_compared_give_the_checks_verdict_and_reason(scripted_pool, verdict, reason):
    scripted_pool(verdict, verdict)  # comparing the two boxes with each other: no verdict, even after the retry
    result = check("\\boxed{\\frac{1}{2}}, that is \\boxed{0.5}", "0.5", task="math")
    assert (result.verdict, result.reason, result.correct) == (verdict, reason, False)
    assert result.answer.reason == reason


def test_a_check_that_fails_is_wrong_with_reason_error_and_logged(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("fake: the extractor broke")

    monkeypatch.setattr(verify, "extract_answer", broken)
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        result = check("#### 8", "8")
    assert result == Check(Answer(None, "error"), Verdict.NOT_EQUAL, "error")
    [record] = caplog.records
    assert record.getMessage() == "scoring failed on a completion of 6 chars; scored as wrong"
    assert record.exc_info[0] is RuntimeError


# --- the judge lab's strict checker (rewards/correctness.py: answer_line_correctness_reward) ---

CHECKER = [
    # (completion, reward against gold 17)
    ("4 * 6 = 24 muffins, 24 - 7 = 17.\nAnswer: 17", 1.0),  # worked answer, final line
    ("Answer: 17.", 1.0),  # bare final line with a full stop
    ("**Answer:** 17\n", 1.0),  # markdown and a trailing newline
    ("Answer: 3.", 0.0),  # the short answer the judge loved
    ("Answer: 17\nI hope this helps!", 0.0),  # text after the answer line
    ("The answer is 17", 0.0),  # not an "Answer:" line
    ("#### 17", 0.0),  # GSM8K marker instead of the requested line
    ("Answer: 17 or 18", 0.0),  # hedge
    ("24 - 7 = 17", 0.0),  # right number, no answer line
    ("", 0.0),  # empty
]


@pytest.mark.parametrize("completion,expected", CHECKER)
def test_answer_line_checker(completion, expected):
    assert answer_line_correctness_reward([[{"role": "assistant", "content": completion}]], answer=["17"]) == [expected]


def test_answer_line_checker_gives_none_without_gold():
    assert answer_line_correctness_reward(["Answer: 17"], answer=[None]) == [None]


# --- constants in a font, and what math-verify's parser drops ---

# (pred, gold, equal): Euler's e, the imaginary unit and pi written in a font or text command are the constants
# (math-verify alone drops them as units: "5\mathrm{e}" equals 5, and "\mathrm{e}^{2}" is not e^2); units still drop.
CONSTANTS_IN_A_FONT = [
    ("2\\mathbf{i}", "2i", True),
    ("{\\rm e}^{3}", "e^3", True),
    ("\\sqrt{\\operatorname{e}}", "\\sqrt{e}", True),
    ("4 - \\text{i}", "4-i", True),
    ("4 - \\text{i}", "4+i", False),
    ("3 - 2\\,\\mathrm{i}", "3-2i", True),
    ("\\frac{\\pi}{\\mathit{e}}", "\\frac{\\pi}{e}", True),
    ("\\pi\\mathrm{i}", "\\pi i", True),
    ("1 - \\frac{2}{\\mathsf{e}}", "1 + \\frac{2}{e}", False),
    ("5\\mathrm{e}", "5", False),  # a plain-number gold: "\mathrm{e}" is no unit around the 5
    ("5\\mathbf{e}", "5", False),
    ("3\\,\\mathrm{i}", "3", False),
    ("7\\,\\mathrm{cm}", "7", True),  # units still drop
    ("\\frac{3}{4}\\,\\mathrm{m}", "\\frac{3}{4}", True),
    ("2\\sqrt{3}\\text{ km}", "2\\sqrt{3}", True),
]


@pytest.mark.parametrize("pred, gold, equal", CONSTANTS_IN_A_FONT)
def test_constants_in_a_font_are_the_constants_and_units_still_drop(pred, gold, equal):
    assert answers_match(pred, gold, task="math") is equal
    assert answers_match(gold, pred, task="math") is equal  # either side may write it so


# (pred, gold): math-verify's parser reads less than it is given (a letter taken for a unit, a command it ignores, an
# operator without its operand), and math-verify alone calls them equal.
PARSED_LESS = [
    ("y + 3h", "y + 3"),  # "h" dropped as hours
    ("x + 5 \\text{ m}", "x + 5"),  # a unit after a sum with a variable: the variable's coefficient changed
    ("2\\operatorname{z}", "2"),  # the parser ignores \operatorname{z}
    ("{\\rm k} + 4", "4"),  # and {\rm k}
    ("2\\mathbf{v}", "2"),  # a bold letter is a vector, not a unit
    ("5 \\cdot", "5"),  # an operator without its operand
]


@pytest.mark.parametrize("pred, gold", PARSED_LESS)
def test_an_answer_the_parser_read_only_in_part_is_not_equal(pred, gold):
    from math_verify import parse, verify

    assert verify(parse(f"${gold}$"), parse(f"${pred}$"))  # the class is real: math-verify alone pays it
    assert not answers_match(pred, gold, task="math")
    assert answers_match(pred, pred.replace(" ", ""), task="math")  # it still equals itself


def test_a_fraction_of_one_token_arguments_is_read_whole():
    # math-verify reads "2007 + \frac\pi 2" (a MATH gold) as 2: every answer would be compared with 2
    assert answers_match("2007 + \\frac{\\pi}{2}", "2007 + \\frac\\pi 2", task="math")
    assert not answers_match("2", "2007 + \\frac\\pi 2", task="math")


# --- the exact re-check: numbers first, equations as equations ---


def test_the_exact_recheck_evaluates_a_nested_radical_instead_of_simplifying_it(monkeypatch):
    # abs() of this symbolic difference makes sympy simplify it: 3.8 s on an idle machine, two timeouts in a worker
    import sympy
    from math_verify import parse

    from rewards._verify_worker import exact_agree

    nested = "\\sqrt{17+2\\sqrt{6}+2\\sqrt{10}+2\\sqrt{14}+2\\sqrt{15}+2\\sqrt{21}+2\\sqrt{35}}"
    roots = "\\sqrt{2}+\\sqrt{3}+\\sqrt{5}+\\sqrt{7}"
    assert answers_match(roots, nested, task="math")
    gold, pred = (parse(f"${t}$", parsing_timeout=None)[0] for t in (nested, roots))
    start = time.process_time()
    assert exact_agree(gold, pred) is True
    assert time.process_time() - start < 1.0  # milliseconds; CPU time, whatever the load

    def no_simplify(expr, *args, **kwargs):
        raise AssertionError(f"simplified {expr} although its value decides")

    monkeypatch.setattr(sympy, "simplify", no_simplify)
    gold, pred = (parse(f"$x + {t}$", parsing_timeout=None)[0] for t in (nested, roots))
    assert exact_agree(gold, pred) is True  # a constant difference: 60 digits decide it, no simplification


@pytest.mark.parametrize(
    "pred, gold, equal",
    [
        ("x+\\sqrt{2}+\\sqrt{3}", "x+\\sqrt{5+2\\sqrt{6}}", True),  # a constant difference that is exactly 0
        ("x+\\sqrt{2}+\\sqrt{3}+10^{-30}", "x+\\sqrt{5+2\\sqrt{6}}", False),  # and one that is not (math-verify: equal)
        ("3a - 6b = 9", "a - 2b = 3", True),  # an equation scaled on both sides is the same equation
        ("4y = 8x - 12", "y = 2x - 3", True),
        ("2x + 2y = 5", "x + y = 2", False),
        ("z = 0.75", "z = \\frac{3}{4}", True),
        ("x = 3", "3", True),  # an assignment against a number compares its value
    ],
)
def test_the_exact_recheck_stays_exact_and_compares_equations_as_equations(pred, gold, equal):
    assert answers_match(pred, gold, task="math") is equal


# --- a bounded cost: what cannot finish is refused before any budget is spent ---

COSTLY = [
    ("7^{8^{9^{4}}}", "5"),  # a tower of 10^(10^7) digits
    ("5", "6^{7^{8}}"),  # the gold may be the tower (two boxes compared with each other)
    ("\\sum_{n=1}^{10^{50}} n^3", "x"),  # a sum of 10^50 terms
    ("(2\\cdot 10^{9})!", "y"),  # a factorial of 2*10^9
    ("\\binom{10^{12}}{3}", "1"),
    ("3^{10^{40}}", "z"),
    ("((((((((4))))))))", "4"),  # eight parentheses: the parser's time doubles every two levels
]


@pytest.mark.parametrize("pred, gold", COSTLY)
def test_what_cannot_finish_is_refused_before_math_verify(pred, gold, scripted_pool, caplog):
    scripted_pool()  # any question to math-verify fails the test
    before = verify.no_verdict_counts()
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        assert compare_answers(pred, gold, task="math") is Verdict.REFUSED  # no verdict, counted, never paid
    assert "pathological" in caplog.text
    assert verify.no_verdict_counts()["refused"] - before["refused"] == 1
    assert compare_answers(pred, pred, task="math") is Verdict.EQUAL  # the same text is still the same answer


def test_small_towers_and_big_numbers_are_still_compared():
    assert answers_match("2^{2^{3}}", "256", task="math")  # a tower, and a small one
    assert answers_match("2^{10}", "1024", task="math")
    assert not answers_match("x^{10^{100}}", "x", task="math")  # symbolic: cheap, and compared


COST_TOKENS = list("0123456789^_{}()[]!+-*/.,=x ") + ["\\frac", "\\sum", "\\binom", "\\sqrt", "\\left("]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(COST_TOKENS), max_size=60).map("".join))
def test_the_cost_estimate_never_raises(text):
    from rewards.cost import too_costly

    assert too_costly(text) is None or isinstance(too_costly(text), str)


def test_a_numbers_units_in_the_gold_need_no_worker(scripted_pool):
    pool = scripted_pool(Verdict.EQUAL)
    assert compare_answers("10000", "10{,}000", task="math") is Verdict.EQUAL  # LaTeX thousands separators
    assert compare_answers("9998", "10{,}000", task="math") is Verdict.NOT_EQUAL
    assert compare_answers("50625", "50,\\!625", task="math") is Verdict.EQUAL
    assert compare_answers("198", "198\\%", task="math") is Verdict.EQUAL  # the same number as the gold, units aside
    assert compare_answers("48", "48^\\circ", task="math") is Verdict.EQUAL
    assert pool.asked == []
    assert compare_answers("0.25", "25\\%", task="math") is Verdict.EQUAL  # another number: math-verify's reading
    assert len(pool.asked) == 1


def test_a_comparison_that_spends_the_cpu_budget_is_given_up_at_once_and_for_good(scripted_pool, monkeypatch, caplog):
    import rewards.verify as verify

    monkeypatch.setattr(verify, "TIMEOUT_MEMO_S", 0.0)  # only the CPU budget's memo remains
    pool = scripted_pool(Verdict.SPENT)
    before = timeout_count()
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        assert compare_answers("\\frac{5}{7}", "\\frac{10}{14}", task="math") is Verdict.TIMEOUT
    assert len(pool.asked) == 1  # not retried: more wall-clock time would not change it
    assert "spent its whole CPU budget" in caplog.text
    assert compare_answers("\\frac{5}{7}", "\\frac{10}{14}", task="math") is Verdict.TIMEOUT  # remembered for good
    assert len(pool.asked) == 1 and timeout_count() - before == 2
    assert check("so \\boxed{\\frac{5}{7}}", "\\frac{10}{14}", task="math").reason == "timeout"


def test_the_worker_stops_on_its_cpu_budget_and_says_so(monkeypatch):
    # sixteen braces: pure-Python parsing for seconds, which the worker's CPU timer interrupts
    import rewards.verify as verify

    deep = "{" * 16 + "1" + "}" * 16
    pool = verify._WorkerPool(1)
    try:
        pool.warm_up()
        assert pool.compare("8", deep, 0.3) is Verdict.TIMEOUT  # no room for the whole CPU budget: may be the load
        start = time.perf_counter()
        assert pool.compare("8", deep, 4.0) is Verdict.SPENT  # the whole budget spent: the answer, not the load
        assert time.perf_counter() - start < 4.0
        assert pool.compare("\\frac{1}{2}", "0.5", 4.0) is Verdict.EQUAL  # the worker lives on
    finally:
        pool.close()


def test_a_batch_scores_as_its_completions_one_by_one():
    warm_up()
    completions = [f"so \\boxed{{\\frac{{{i}}}{{4}}}}" for i in range(12)] + ["\\boxed{7^{8^{9^{4}}}}", "#### 3"]
    golds = [str(i / 4) for i in range(12)] + ["5", "3"]
    batch = get_reward("math_correctness")(completions, answer=golds)
    assert batch == [float(is_correct(c, g, "math")) for c, g in zip(completions, golds, strict=True)]
    assert batch == [1.0] * 12 + [0.0, 0.0]


# --- hard but correct: comparisons that take math-verify 0.1-0.7 s (parsing nested brackets, evaluating a sum) ---

HARD_BUT_CORRECT = [
    ("\\sum_{k=1}^{1000} k", "500500"),  # the exact re-check summed it numerically for seconds: given up, not paid
    # Five or six nested brackets ("(((((4)))))", "\\{\\{...4\\}\\}") take math-verify 0.2-0.3 s alone, near the 0.5 s
    # CPU budget: paid alone, given up (a timeout, unpaid but counted) after a full test run's earlier comparisons.
    # Not pinned here until the budget or the parse cost changes.
    ("\\cos(\\frac{\\pi}{5})", "\\frac{1+\\sqrt{5}}{4}"),
]


@pytest.mark.parametrize("pred, gold", HARD_BUT_CORRECT)
def test_hard_but_correct_answers_are_paid_as_a_reader_pays_them(pred, gold):
    warm_up()
    before = verify.no_verdict_counts()
    assert get_reward("math_correctness")([f"so \\boxed{{{pred}}}"], answer=[gold]) == [1.0]
    assert verify.no_verdict_counts() == before


def test_a_wrong_sum_is_still_not_equal():
    warm_up()
    assert compare_answers("\\sum_{k=1}^{1000} k", "500501", task="math") is Verdict.NOT_EQUAL


def test_a_static_refusal_is_no_verdict_all_the_way_to_the_score(caplog):
    # a reader pays it (a product of ones is 1; math-verify says equal in 0.05 s), but its 20,000 terms are refused from
    # the text: no verdict, paid 0, counted, and said as such by eval's scorer, not "wrong"
    from eval.scoring import score_completion

    completion = "so \\boxed{\\prod_{k=1}^{20000} 1}"
    before = verify.no_verdict_counts()
    assert get_reward("math_correctness")([completion], answer=["1"]) == [0.0]
    result = check(completion, "1", task="math")
    assert (result.verdict, result.reason, result.no_verdict) == (Verdict.REFUSED, "refused", True)
    scored = score_completion(completion, "1", "math")
    assert (scored["correct"], scored["reason"], scored["timeout"]) == (False, "refused", False)
    assert verify.no_verdict_counts()["refused"] - before["refused"] == 3
    # two boxes compared with each other: a refusal there is no verdict too, not a hedge
    assert extract_answer("\\boxed{5} so \\boxed{6^{7^{8}}}", task="math").reason == "refused"


# --- the format reward never asks math-verify: it pays one box only, so comparing boxes cannot change its score ---

FORMAT_BOXES = [
    "so \\boxed{4}",  # one box: paid
    "so \\boxed{\\frac{1}{2}}.",
    "\\boxed{4} and again \\boxed{ 4 }",  # the same answer twice: two markers, not paid
    "\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{639}{40}}",  # the same answer in two forms: two markers
    "\\boxed{0.5} so \\boxed{\\frac{1}{2}}",
    "\\boxed{17} or \\boxed{18}",  # a hedge
    "The answer goes in \\boxed{}. So \\boxed{7}",  # an empty box is no marker: paid
    "\\boxed{2}, \\boxed{3}",  # a multi-part answer
    "\\boxed{6^{7^{8}}} then \\boxed{5}",
]


def test_the_math_format_reward_pays_as_before_without_asking_math_verify(scripted_pool):
    def with_comparisons(text):  # the rule as it was: boxes compared with math-verify first
        answer = extract_answer(text, task="math")
        return 0.1 if answer.ok and answer.n_markers == 1 and len(text) - answer.end <= 40 else 0.0

    warm_up()
    expected = [with_comparisons(t) for t in FORMAT_BOXES]
    assert expected == [0.1, 0.1, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0]
    pool = scripted_pool()  # any question to math-verify fails the test
    assert get_reward("math_format")(FORMAT_BOXES) == expected
    assert pool.asked == []
