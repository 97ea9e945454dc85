"""Behaviour of ``rewards/verify.py`` that the full mutmut run of it (docs/mutation.md) found unpinned: the pool's
warm-up and its replacement of a stuck worker, a spent budget, the bounds of the verdict cache and of the memo of
pairs given up, the defaults and the task of the public functions, and what ``check`` says when it gives no verdict.
Fake workers and scripted_pool pools: no math-verify process starts; every wait has a timeout.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_verify_full.py
"""

import logging
import time
from types import SimpleNamespace

import pytest

import rewards.verify as verify
from rewards.answers import Answer
from rewards.verify import Check, Verdict, _WorkerGone, _WorkerPool, answers_match, check, compare_answers
from tests.test_verify_pool import BUDGET_S, Workers


class CappedWorkers(Workers):
    """``Workers`` that refuses to start more than ``cap`` fakes: a pool that starts workers without end fails."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap = cap

    def __call__(self):
        if len(self.made) >= self.cap:
            raise RuntimeError("fake: more workers than the pool's size")
        return super().__call__()


@pytest.fixture
def workers(monkeypatch) -> CappedWorkers:
    fake = CappedWorkers(cap=8)
    monkeypatch.setattr(verify, "_Worker", fake)
    return fake


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rewards.verify"]


# --- the pool: warm-up, a spent budget, a stuck worker ---


def test_warm_up_starts_the_pools_size_and_keeps_every_worker_for_the_comparisons(workers):
    pool = _WorkerPool(3)
    pool.warm_up()
    assert len(workers.made) == 3 and all(w.ready for w in workers.made)
    assert [pool.compare("8", pred, BUDGET_S) for pred in ("8", "9", "8", "8")] == [
        Verdict.EQUAL,
        Verdict.NOT_EQUAL,
        Verdict.EQUAL,
        Verdict.EQUAL,
    ]
    assert len(workers.made) == 3  # the comparisons ran on the warmed workers: none started on their clock


def test_module_warm_up_starts_as_many_workers_as_asked(workers, monkeypatch):
    monkeypatch.setattr(verify, "_POOL", _WorkerPool(3))
    verify.warm_up(1)
    assert len(workers.made) == 1


def test_warm_up_waits_for_a_worker_left_starting_and_keeps_it(workers):
    # what a comparison that ran out of budget while its worker started leaves: one worker, idle, still starting
    workers.start_at_once = False
    pool = _WorkerPool(1)
    assert pool.compare("8", "8", 0.1) == Verdict.TIMEOUT
    workers.made[0].started.set()
    pool.warm_up()
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL  # on that worker: the pool's one slot was not lost
    assert len(workers.made) == 1 and workers.made[0].comparing.is_set()


def test_a_worker_that_fails_to_start_in_warm_up_is_logged_killed_and_frees_its_slot(workers, caplog):
    workers.kinds = ["fails_to_start"]
    pool = _WorkerPool(1)
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        pool.warm_up()
    [record] = caplog.records
    assert record.getMessage() == "a math-verify worker failed to start" and record.exc_info[0] is _WorkerGone
    assert workers.made[0].killed
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL  # a fresh worker in the freed slot
    assert len(workers.made) == 2


def test_a_budget_spent_once_the_worker_is_ready_is_a_timeout_and_the_worker_stays(workers, monkeypatch):
    pool = _WorkerPool(1)
    pool.warm_up()
    [worker] = workers.made
    now = time.monotonic()
    monkeypatch.setattr(verify, "time", SimpleNamespace(monotonic=lambda: now))  # the clock reads the deadline itself
    assert pool.compare("8", "8", 0.0) == Verdict.TIMEOUT
    assert not worker.comparing.is_set()  # not asked with no time left (a real worker would be killed and restarted)
    monkeypatch.setattr(verify, "time", time)
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL
    assert len(workers.made) == 1 and worker.comparing.is_set()  # it went back to the pool, not out of it


def test_a_stuck_worker_is_killed_and_its_replacement_starts_at_once_in_the_pool(workers):
    workers.answer_at_once = False
    pool = _WorkerPool(1)
    assert pool.compare("8", "8", 0.2) == Verdict.TIMEOUT
    stuck = workers.made[0]
    assert stuck.killed and len(workers.made) == 2  # the replacement is starting already, off the next one's clock
    replacement = workers.made[1]
    replacement.answering.set()
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL
    assert len(workers.made) == 2 and replacement.comparing.is_set()  # the replacement was in the pool


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
        assert compare_answers("9^{9^{9^{9}}}", "1", task="math") is Verdict.NOT_EQUAL  # short, but a power tower
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
