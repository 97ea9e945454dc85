"""The math-verify worker pool between threads: who waits, who gets the worker given back, when a wait is a timeout,
and how many workers live. Fake workers (no subprocess) that start and answer when a test says so; every wait has a
timeout, so a broken pool fails a test instead of hanging the suite.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_verify_pool.py
"""

import logging
import threading
import time
from types import SimpleNamespace

import pytest

import rewards.verify as verify
from rewards.verify import Verdict, _WorkerGone, _WorkerPool

BUDGET_S = 0.9  # a waiting thread's budget: under 1 s like TIME_BUDGET_S, and ample for a hand-over on a loaded box
HANG_S = 2.0  # how long a test waits for something that should happen at once


class FakeWorker:
    """``verify._Worker``'s interface. ``started`` and ``answering`` are the test's switches; ``kind`` is "ok",
    "fails_to_start" (``wait_ready`` raises) or "dies" (``compare`` raises)."""

    def __init__(self, kind: str, started: bool, answering: bool):
        self.kind = kind
        self.ready = False
        self.started, self.answering, self.comparing = threading.Event(), threading.Event(), threading.Event()
        self.killed = False
        if started:
            self.started.set()
        if answering:
            self.answering.set()

    def wait_ready(self, timeout: float) -> bool:
        if self.kind == "fails_to_start":
            raise _WorkerGone("fake worker exited while starting")
        if not self.ready:
            self.ready = self.started.wait(max(timeout, 0.0))
        return self.ready

    def compare(self, gold: str, pred: str, timeout: float) -> dict | None:
        self.comparing.set()
        if self.kind == "dies":
            raise _WorkerGone("fake worker exited while comparing")
        if not self.answering.wait(max(timeout, 0.0)):
            return None
        return {"result": gold == pred}

    def kill(self) -> None:
        self.killed = True


class Workers:
    """Stands in for the ``_Worker`` class: each call starts a fake, of the next kind in ``kinds`` ("refused": the OS
    refuses the process) or else "ok"; ``made`` holds every fake started, in order."""

    def __init__(self):
        self.made: list[FakeWorker] = []
        self.new = threading.Semaphore(0)  # one release per fake started
        self.kinds: list[str] = []
        self.start_at_once = True
        self.answer_at_once = True

    def __call__(self) -> FakeWorker:
        kind = self.kinds.pop(0) if self.kinds else "ok"
        if kind == "refused":
            raise OSError("fake: cannot start a process")
        self.made.append(FakeWorker(kind, self.start_at_once, self.answer_at_once))
        self.new.release()
        return self.made[-1]

    def live(self) -> int:
        return sum(not w.killed for w in self.made)


class WatchedCondition(threading.Condition):
    """The pool's condition, counting threads that start to wait for a free worker (``waiting.acquire`` per thread)."""

    def __init__(self):
        super().__init__()
        self.waiting = threading.Semaphore(0)

    def wait(self, timeout=None):
        self.waiting.release()  # the lock is held until super().wait releases it: no give-back can slip in between
        return super().wait(timeout)


class Compare(threading.Thread):
    """``pool.compare`` in a thread of its own; ``verdict()`` joins it and says how long it took."""

    def __init__(self, pool: _WorkerPool, gold: str = "8", pred: str = "8", timeout: float = BUDGET_S):
        super().__init__(daemon=True)
        self.pool, self.gold, self.pred, self.timeout = pool, gold, pred, timeout
        self.result, self.seconds = None, None
        self.start()

    def run(self):
        start = time.monotonic()
        self.result = self.pool.compare(self.gold, self.pred, self.timeout)
        self.seconds = time.monotonic() - start

    def verdict(self) -> Verdict:
        self.join(HANG_S + self.timeout)
        assert not self.is_alive(), "compare() hung"
        return self.result


@pytest.fixture
def workers(monkeypatch) -> Workers:
    fake = Workers()
    monkeypatch.setattr(verify, "_Worker", fake)
    return fake


def watched_pool(size: int) -> _WorkerPool:
    pool = _WorkerPool(size)
    pool._cond = WatchedCondition()
    return pool


def test_a_worker_is_reused_not_restarted(workers):
    pool = _WorkerPool(2)
    assert [pool.compare("8", pred, BUDGET_S) for pred in ("8", "9", "8")] == [
        Verdict.EQUAL,
        Verdict.NOT_EQUAL,
        Verdict.EQUAL,
    ]
    assert len(workers.made) == 1  # given back after each comparison, and taken again: one start-up in all


def test_threads_up_to_the_pool_size_compare_at_once_and_the_next_one_waits(workers):
    workers.answer_at_once = False
    pool = watched_pool(2)
    first, second = Compare(pool), Compare(pool)
    for _ in range(2):
        assert workers.new.acquire(timeout=HANG_S), "a thread waited although the pool had a free slot"
    assert all(w.comparing.wait(HANG_S) for w in workers.made)
    third = Compare(pool)
    assert pool._cond.waiting.acquire(timeout=HANG_S), "a third thread did not wait for one of the two workers"
    assert len(workers.made) == 2
    workers.made[0].answering.set()
    assert first.verdict() == Verdict.EQUAL and third.verdict() == Verdict.EQUAL  # on the worker `first` gave back
    workers.made[1].answering.set()
    assert second.verdict() == Verdict.EQUAL
    assert len(workers.made) == 2


def one_busy_worker(workers):
    """A pool of one whose worker is comparing for a first thread (``busy``) until the test sets its ``answering``."""
    workers.answer_at_once = False
    pool = watched_pool(1)
    busy = Compare(pool, timeout=10.0)
    assert workers.new.acquire(timeout=HANG_S) and workers.made[0].comparing.wait(HANG_S)
    return pool, busy


def test_a_waiting_thread_gets_the_worker_as_soon_as_it_is_given_back(workers):
    pool, busy = one_busy_worker(workers)
    waiting = Compare(pool, pred="9", timeout=BUDGET_S)
    assert pool._cond.waiting.acquire(timeout=HANG_S)
    workers.made[0].answering.set()
    assert busy.verdict() == Verdict.EQUAL
    assert waiting.verdict() == Verdict.NOT_EQUAL  # a verdict, not a timeout: it did not wait out its budget
    assert len(workers.made) == 1


def test_every_waiting_thread_gets_the_worker_in_turn(workers):
    pool, busy = one_busy_worker(workers)
    waiting = [Compare(pool, pred=pred) for pred in ("8", "9", "8")]
    for _ in waiting:
        assert pool._cond.waiting.acquire(timeout=HANG_S)
    workers.made[0].answering.set()  # from now on it answers at once: each give-back must wake the next thread
    assert busy.verdict() == Verdict.EQUAL
    assert [c.verdict() for c in waiting] == [Verdict.EQUAL, Verdict.NOT_EQUAL, Verdict.EQUAL]
    assert len(workers.made) == 1


def test_a_thread_out_of_budget_while_every_worker_is_busy_times_out_within_its_budget(workers):
    pool, busy = one_busy_worker(workers)
    hurried = Compare(pool, timeout=0.2)
    assert hurried.verdict() == Verdict.TIMEOUT
    assert hurried.seconds < 0.2 + 0.5  # its own budget (and some scheduling on a loaded box), not the busy one's
    assert busy.is_alive() and len(workers.made) == 1  # the busy comparison goes on; no extra worker was started
    workers.made[0].answering.set()
    assert busy.verdict() == Verdict.EQUAL


def test_a_spent_budget_is_a_timeout_at_once_even_on_a_clock_that_has_not_ticked(workers, monkeypatch):
    # a coarse monotonic clock (15.6 ms on Windows) often reads the deadline itself: no budget left is no wait
    pool = _WorkerPool(1)
    held = pool._take(time.monotonic() + BUDGET_S)
    now, thawed = time.monotonic(), threading.Event()
    monkeypatch.setattr(verify, "time", SimpleNamespace(monotonic=lambda: time.monotonic() if thawed.is_set() else now))
    try:
        spent = Compare(pool, timeout=0.0)
        spent.join(HANG_S)
        assert not spent.is_alive(), "compare() kept waiting with no budget left"
        assert spent.result == Verdict.TIMEOUT
    finally:
        thawed.set()  # lets a pool that spins on the frozen clock out
    pool._give_back(held)


def test_a_started_worker_is_taken_before_one_still_starting(workers):
    # what a comparison that ran out of budget while its worker started leaves: one started, one starting, idle
    workers.start_at_once = False
    pool = _WorkerPool(2)
    started, starting = pool._take(time.monotonic() + BUDGET_S), pool._take(time.monotonic() + BUDGET_S)
    started.started.set()
    assert started.wait_ready(0.0) and not starting.wait_ready(0.0)
    pool._give_back(started)
    pool._give_back(starting)
    assert pool.compare("8", "8", 0.3) == Verdict.EQUAL
    assert started.comparing.is_set() and not starting.comparing.is_set()


def test_a_worker_still_starting_when_the_budget_runs_out_is_kept_for_the_next_caller(workers):
    workers.start_at_once = False
    pool = _WorkerPool(1)
    assert pool.compare("8", "8", 0.1) == Verdict.TIMEOUT
    workers.made[0].started.set()
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL
    assert len(workers.made) == 1 and workers.live() == 1


def test_a_dead_worker_frees_exactly_its_slot(workers):
    workers.kinds = ["dies"]
    pool = watched_pool(1)
    assert pool.compare("8", "8", BUDGET_S) == Verdict.CHECKER_ERROR
    assert workers.made[0].killed
    workers.answer_at_once = False
    replacing = Compare(pool)
    assert workers.new.acquire(timeout=HANG_S) and workers.new.acquire(timeout=HANG_S), "the slot stayed taken"
    waiting = Compare(pool)
    assert pool._cond.waiting.acquire(timeout=HANG_S), "a second thread did not wait for the one live worker"
    assert len(workers.made) == 2 and workers.live() == 1
    workers.made[1].answering.set()
    assert replacing.verdict() == Verdict.EQUAL and waiting.verdict() == Verdict.EQUAL
    assert len(workers.made) == 2


@pytest.mark.parametrize(
    "kind, logged, error",
    [
        ("refused", "could not start a math-verify worker", OSError),  # the OS refuses the process
        ("fails_to_start", "a math-verify worker failed; dropping it", _WorkerGone),  # it exits while starting
    ],
)
def test_a_worker_that_cannot_start_is_a_checker_error_that_frees_its_slot(workers, caplog, kind, logged, error):
    workers.kinds = [kind]
    pool = _WorkerPool(1)
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        assert pool.compare("8", "8", BUDGET_S) == Verdict.CHECKER_ERROR  # not a timeout: no budget ran out
    [record] = caplog.records
    assert record.getMessage() == logged and record.exc_info[0] is error  # the traceback says why
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL  # a fresh worker in the freed slot
    assert workers.live() == 1


# --- warm-up, a spent budget, a stuck worker; the pool never starts more workers than its size ---


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
def capped_workers(monkeypatch) -> CappedWorkers:
    fake = CappedWorkers(cap=8)
    monkeypatch.setattr(verify, "_Worker", fake)
    return fake


def test_warm_up_starts_the_pools_size_and_keeps_every_worker_for_the_comparisons(capped_workers):
    pool = _WorkerPool(3)
    pool.warm_up()
    assert len(capped_workers.made) == 3 and all(w.ready for w in capped_workers.made)
    assert [pool.compare("8", pred, BUDGET_S) for pred in ("8", "9", "8", "8")] == [
        Verdict.EQUAL,
        Verdict.NOT_EQUAL,
        Verdict.EQUAL,
        Verdict.EQUAL,
    ]
    assert len(capped_workers.made) == 3  # the comparisons ran on the warmed workers: none started on their clock


def test_module_warm_up_starts_as_many_workers_as_asked(capped_workers, monkeypatch):
    monkeypatch.setattr(verify, "_POOL", _WorkerPool(3))
    verify.warm_up(1)
    assert len(capped_workers.made) == 1


def test_warm_up_waits_for_a_worker_left_starting_and_keeps_it(capped_workers):
    # what a comparison that ran out of budget while its worker started leaves: one worker, idle, still starting
    capped_workers.start_at_once = False
    pool = _WorkerPool(1)
    assert pool.compare("8", "8", 0.1) == Verdict.TIMEOUT
    capped_workers.made[0].started.set()
    pool.warm_up()
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL  # on that worker: the pool's one slot was not lost
    assert len(capped_workers.made) == 1 and capped_workers.made[0].comparing.is_set()


def test_a_worker_that_fails_to_start_in_warm_up_is_logged_killed_and_frees_its_slot(capped_workers, caplog):
    capped_workers.kinds = ["fails_to_start"]
    pool = _WorkerPool(1)
    with caplog.at_level(logging.WARNING, logger="rewards.verify"):
        pool.warm_up()
    [record] = caplog.records
    assert record.getMessage() == "a math-verify worker failed to start" and record.exc_info[0] is _WorkerGone
    assert capped_workers.made[0].killed
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL  # a fresh worker in the freed slot
    assert len(capped_workers.made) == 2


def test_a_budget_spent_once_the_worker_is_ready_is_a_timeout_and_the_worker_stays(capped_workers, monkeypatch):
    pool = _WorkerPool(1)
    pool.warm_up()
    [worker] = capped_workers.made
    now = time.monotonic()
    monkeypatch.setattr(verify, "time", SimpleNamespace(monotonic=lambda: now))  # the clock reads the deadline itself
    assert pool.compare("8", "8", 0.0) == Verdict.TIMEOUT
    assert not worker.comparing.is_set()  # not asked with no time left (a real worker would be killed and restarted)
    monkeypatch.setattr(verify, "time", time)
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL
    assert len(capped_workers.made) == 1 and worker.comparing.is_set()  # it went back to the pool, not out of it


def test_a_stuck_worker_is_killed_and_its_replacement_starts_at_once_in_the_pool(capped_workers):
    capped_workers.answer_at_once = False
    pool = _WorkerPool(1)
    assert pool.compare("8", "8", 0.2) == Verdict.TIMEOUT
    stuck = capped_workers.made[0]
    assert stuck.killed and len(capped_workers.made) == 2  # the replacement starts already, off the next one's clock
    replacement = capped_workers.made[1]
    replacement.answering.set()
    assert pool.compare("8", "8", BUDGET_S) == Verdict.EQUAL
    assert len(capped_workers.made) == 2 and replacement.comparing.is_set()  # the replacement was in the pool


# --- a batch: the same pair once, the rest of the batch on the other workers ---


class GatedPool:
    """Stands in for the pool (``_size`` workers): a pair in ``held`` is answered (not equal) once the test sets
    ``release``; every other pair at once (equal). ``asked`` records each question, in order."""

    def __init__(self, size: int, held=()):
        self._size, self.held, self.asked = size, set(held), []
        self.release, self.lock = threading.Event(), threading.Lock()

    def compare(self, gold, pred, timeout):
        with self.lock:
            self.asked.append((gold, pred))
        if (gold, pred) in self.held:
            return Verdict.NOT_EQUAL if self.release.wait(5 * HANG_S) else Verdict.TIMEOUT
        return Verdict.EQUAL


@pytest.fixture
def gated(monkeypatch):
    """``gated(size, held)`` installs a ``GatedPool`` as rewards.verify's pool and returns it (like ``scripted_pool``,
    with no verdict or give-up remembered: ``fresh_verdict_memory``)."""

    def install(size: int, held=()) -> GatedPool:
        pool = GatedPool(size, held)
        monkeypatch.setattr(verify, "_POOL", pool)
        return pool

    return install


def test_the_same_pair_asked_twice_at_once_is_compared_once(gated):
    pair = ("\\frac{1}{3}", "\\frac{2}{6}")
    pool = gated(2, held=[pair])
    results = []
    threads = [threading.Thread(target=lambda: results.append(verify.compare_answers(pair[1], pair[0], "math")))]
    threads.append(threading.Thread(target=lambda: results.append(verify.compare_answers(pair[1], pair[0], "math"))))
    for t in threads:
        t.start()
    deadline = time.monotonic() + HANG_S
    while not pool.asked and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # the second thread has had time to ask too, if it were going to
    assert pool.asked == [pair]
    pool.release.set()
    for t in threads:
        t.join(HANG_S)
    assert results == [Verdict.NOT_EQUAL] * 2 and pool.asked == [pair]  # one comparison, one verdict for both


def test_a_batch_goes_on_with_the_other_workers_while_one_comparison_is_slow(gated):
    slow = ("\\frac{9}{4}", "\\frac{18}{8}")
    pool = gated(2, held=[slow])
    items = [(slow[1], slow[0])] + [(f"\\frac{{{2 * i}}}{{14}}", f"\\frac{{{i}}}{{7}}") for i in range(1, 9)]
    done = []

    def score(pair):
        return verify.compare_answers(*pair, task="math")

    batch = threading.Thread(target=lambda: done.append(verify.concurrently(score, items)))
    batch.start()
    deadline = time.monotonic() + HANG_S
    while len(pool.asked) < len(items) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(pool.asked) == len(items)  # the rest of the batch was compared while the slow one still waited
    assert not done
    pool.release.set()
    batch.join(HANG_S)
    assert done == [[Verdict.NOT_EQUAL] + [Verdict.EQUAL] * 8]  # in the batch's order


def test_a_pool_of_one_scores_a_batch_in_the_callers_thread(gated):
    gated(1)
    threads = verify.concurrently(lambda _: threading.current_thread(), range(3))
    assert threads == [threading.current_thread()] * 3
