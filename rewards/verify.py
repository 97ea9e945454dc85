"""Is an extracted answer equal to the gold one? Deterministic, time-limited, safe in any thread.

GSM8K answers compare exactly as numbers; MATH answers as normalised strings and plain numbers, then with math-verify
in worker processes (its timeouts use ``signal.alarm``, which works only in a main thread), started with
``subprocess`` rather than multiprocessing so that a notebook, stdin or ``python -c`` as ``__main__`` works too.
Only ``EQUAL`` and ``NOT_EQUAL`` are verdicts (and cached); a timeout, a failed worker or a refusal is not paid, but
counted and logged. Running out of a worker's CPU budget is final (it does not depend on the load); running out of
wall-clock time is retried once.

>>> answers_match("18.00", "18", task="gsm8k")
True
>>> answers_match("\\\\frac{1}{2}", "0.5", task="math")
True
>>> answers_match("\\\\frac{1}{21!}", "\\\\frac{1}{20!}", task="math"), answers_match("4\\\\sqrt(2)", "4", task="math")
(False, False)
>>> answers_match("2\\\\mathrm{e}", "2e", task="math"), answers_match("3\\\\mathrm{e}", "3", task="math")
(True, False)
>>> is_correct("so 3 + 5 = 8\\n#### 8", "8")
True
>>> is_correct("#### 17 or 18", "17")
False
>>> check("so \\\\boxed{4}", "4", task="math").reason
'ok'
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import json
import logging
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TypeVar

from rewards.answers import (
    PLUS_MINUS_RE,
    Answer,
    _box_answer,
    _canonical_box,
    _is_hedge,
    exact_number,
    extract_answer,
)
from rewards.cost import too_costly

logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

TIME_BUDGET_S = 0.8  # one math-verify comparison, waiting for and starting a worker included
CPU_BUDGET_S = 0.5  # CPU time a worker may spend on one comparison, whatever the load and the wall-clock budget
RETRY_FACTOR = 4  # a comparison that ran out of wall-clock time is retried once with this many times the budget
TIMEOUT_MEMO_S = 30.0  # a pair that was just given up is not retried for this long (a GRPO group repeats answers)
MAX_ANSWER_CHARS = 500  # an extracted answer longer than this is not a maths answer
MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))  # parallel comparisons when rewards are called from threads
WORKER_START_TIMEOUT_S = 60.0  # warm_up's wait: a worker starts in ~1 s (~2 s on a loaded machine), or longer
CACHE_SIZE = 65_536  # GRPO groups repeat the same (gold, answer) pairs many times
# A plain decimal number ("18", "-0.50", "1,000"): MATH answers like this compare as decimals, without math-verify.
PLAIN_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# What may surround a number and not change it: "\\$342", "20.0\\%", "45^\\circ", "12 \\text{ cm}". DOTALL: an
# answer may span lines, and must still match (a None here was an internal exception path).
UNITS_AROUND_NUMBER_RE = re.compile(
    r"^(?:\\\$|\$|\\,|\s)*(?P<number>.*?)"
    r"(?:\\%|%|\^\s*\{?\\circ\}?|\\(?:text|mbox|mathrm)\{(?!\s*[ei]\s*\})\s*[A-Za-z][A-Za-z .]*\}|\\[,;! ]|\s)*$",
    re.DOTALL,
)  # (not "\\mathrm{e}" or "\\text{i}": Euler's e and the imaginary unit, not units)
# Thousands separators as LaTeX writes them: "10{,}000", "50,\\!625".
LATEX_THOUSANDS_RE = re.compile(r"(?<=\d)(?:\{,\}|,\\!)(?=\d{3})")
# A root or fraction without a braced (or one-token) argument: math-verify reads "4\sqrt(2)" and "4\frac(1)(2)" as 4.
MALFORMED_LATEX_RE = re.compile(r"\\(?:sqrt|[dt]?frac)(?![a-zA-Z])(?!\s*[{\[0-9a-zA-Z\\])")
_WORKER_SCRIPT = str(Path(__file__).with_name("_verify_worker.py"))


class Verdict(enum.Enum):
    """The outcome of one comparison. Only ``EQUAL`` and ``NOT_EQUAL`` are verdicts (and cached)."""

    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    TIMEOUT = "timeout"  # ran out of time even after the retry: no verdict
    CHECKER_ERROR = "checker_error"  # a worker failed to start or died: no verdict
    REFUSED = "refused"  # the text alone says no budget could compare it (rewards.cost.too_costly): no verdict
    SPENT = "spent"  # the pool's answer only: the worker spent its whole CPU budget (reported as TIMEOUT)

    @classmethod
    def of(cls, equal: bool) -> Verdict:
        return cls.EQUAL if equal else cls.NOT_EQUAL


class _WorkerGone(Exception):
    """The worker process exited or wrote something that is not a reply."""


class _Worker:
    """One math-verify process, talking JSON lines over pipes."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-u", _WORKER_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        self.ready = False

    def _read_line(self, timeout: float) -> dict | None:
        """The next reply, or None when none came within ``timeout``. Raises ``_WorkerGone`` on EOF or garbage."""
        ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0.0))
        if not ready:
            return None
        line = self.proc.stdout.readline()
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise _WorkerGone(f"worker exited (code {self.proc.poll()}) or wrote {line[:80]!r}")
        return reply

    def wait_ready(self, timeout: float) -> bool:
        """True once the worker has started; False while it is still starting. Raises ``_WorkerGone``."""
        if not self.ready:
            reply = self._read_line(timeout)
            if reply is not None and not reply.get("ready"):
                raise _WorkerGone(f"worker said {reply!r} instead of ready")
            self.ready = reply is not None
        return self.ready

    def compare(self, gold: str, pred: str, timeout: float) -> dict | None:
        """The worker's reply, or None when it did not answer within ``timeout`` (the caller then kills it); a reply
        after the whole ``CPU_BUDGET_S`` is ``"definitive"``: that much CPU time is needed on any machine load."""
        wall = 0.8 * timeout
        full = wall >= CPU_BUDGET_S + 0.05  # room for the whole CPU budget (a first try with TIME_BUDGET_S has it)
        request = {"gold": gold, "pred": pred, "cpu": CPU_BUDGET_S if full else wall, "wall": wall}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._read_line(timeout)
        if reply is not None and full and reply.get("spent") == "cpu":
            reply["definitive"] = True
        return reply

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class _WorkerPool:
    """Up to ``MAX_WORKERS`` workers shared by all threads; a killed worker is replaced in the background, and one
    still starting when a budget runs out goes on starting for the next caller."""

    def __init__(self, size: int):
        self._size = size
        self._idle: list[_Worker] = []
        self._n_alive = 0
        self._cond = threading.Condition()
        atexit.register(self.close)

    def warm_up(self, n: int | None = None) -> None:
        """Start workers now, so that their start-up does not land on the first completions' clock. The pool's lock is
        not held meanwhile: another thread's comparison waits within its own budget, not for the whole warm-up."""
        with self._cond:
            starting = [w for w in self._idle if not w.ready]
            self._idle = [w for w in self._idle if w.ready]
            while self._n_alive < min(n or self._size, self._size):
                starting.append(_Worker())
                self._n_alive += 1
        for worker in starting:
            try:
                worker.wait_ready(WORKER_START_TIMEOUT_S)
                self._give_back(worker)
            except _WorkerGone:
                logger.warning("a math-verify worker failed to start", exc_info=True)
                with contextlib.suppress(Exception):
                    worker.kill()
                self._give_back(None)

    def _take(self, deadline: float) -> _Worker | None:
        """A free worker (maybe one still starting), a new one, or None when none is free before ``deadline``."""
        with self._cond:
            while not self._idle and self._n_alive >= self._size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if self._idle:
                ready = [w for w in self._idle if w.ready]  # prefer a started worker
                worker = ready[-1] if ready else self._idle[-1]
                self._idle.remove(worker)
                return worker
            self._n_alive += 1
        try:
            return _Worker()
        except Exception:
            self._give_back(None)
            raise

    def _give_back(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is None:
                self._n_alive -= 1
            else:
                self._idle.append(worker)
            self._cond.notify()

    def compare(self, gold: str, pred: str, timeout: float) -> Verdict:
        deadline = time.monotonic() + timeout
        try:
            worker = self._take(deadline)
        except Exception:  # noqa: BLE001 - the OS refused to start a process: not a timeout
            logger.warning("could not start a math-verify worker", exc_info=True)
            return Verdict.CHECKER_ERROR
        if worker is None:
            return Verdict.TIMEOUT  # no worker free within the budget
        try:
            if not worker.wait_ready(deadline - time.monotonic()):
                self._give_back(worker)  # still starting: it keeps starting for the next caller
                return Verdict.TIMEOUT
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._give_back(worker)
                return Verdict.TIMEOUT
            reply = worker.compare(gold, pred, remaining)
            if reply is None:  # stuck past its own alarm: replace it, starting the new one now
                worker.kill()
                worker = _Worker()
                self._give_back(worker)
                return Verdict.TIMEOUT
            self._give_back(worker)
            result = reply.get("result")
            if result is None:
                return Verdict.SPENT if reply.get("definitive") else Verdict.TIMEOUT
            return Verdict.of(bool(result))
        except Exception:  # noqa: BLE001 - a broken pipe or a dead worker: drop it; no verdict
            logger.warning("a math-verify worker failed; dropping it", exc_info=True)
            with contextlib.suppress(Exception):
                worker.kill()
            self._give_back(None)
            return Verdict.CHECKER_ERROR

    def close(self) -> None:
        with self._cond:
            for worker in self._idle:
                with contextlib.suppress(Exception):
                    worker.kill()
            self._idle.clear()
            self._n_alive = 0


_POOL = _WorkerPool(MAX_WORKERS)
_CACHE: OrderedDict[tuple[str, str], Verdict] = OrderedDict()  # verdicts only, never a timeout
# pair -> when it was given up as a timeout (math.inf: it spent the whole CPU budget, remembered for good)
_GIVEN_UP: dict[tuple[str, str], float] = {}
_IN_FLIGHT: dict[tuple[str, str], threading.Event] = {}  # pairs being compared now: the same pair waits for them
_CACHE_LOCK = threading.Lock()
_TIMEOUTS = 0
_NO_VERDICTS = {"refused": 0, "checker_error": 0}  # the other comparisons without verdict (timeouts: _TIMEOUTS)


def timeout_count() -> int:
    """Comparisons given up as timeouts (after the retry) in this process so far. Thread-safe."""
    with _CACHE_LOCK:
        return _TIMEOUTS


def no_verdict_counts() -> dict[str, int]:
    """Comparisons without verdict in this process so far: ``timeout``, ``refused`` and ``checker_error``. Thread-safe.

    >>> before = no_verdict_counts()
    >>> compare_answers("9^{9^{9^{9}}}", "1", task="math").value
    'refused'
    >>> no_verdict_counts()["refused"] - before["refused"]
    1
    """
    with _CACHE_LOCK:
        return {"timeout": _TIMEOUTS, **_NO_VERDICTS}


def _count_no_verdict(outcome: str) -> None:
    with _CACHE_LOCK:
        _NO_VERDICTS[outcome] += 1


def _count_timeout(key: tuple[str, str], remember: bool = True, for_good: bool = False) -> None:
    """Count one timeout; ``remember`` (a comparison really given up) starts the pair's memo window from now. A
    refusal from the memo does not, or a pair that comes back within every window would never be asked again."""
    global _TIMEOUTS
    with _CACHE_LOCK:
        _TIMEOUTS += 1
        if remember:
            _GIVEN_UP[key] = math.inf if for_good else time.monotonic()
            if len(_GIVEN_UP) > CACHE_SIZE:
                _GIVEN_UP.pop(next(iter(_GIVEN_UP)))


def warm_up(n_workers: int | None = None) -> None:
    """Start the math-verify workers now (they otherwise start on the first MATH comparison, ~1 s each)."""
    _POOL.warm_up(n_workers)


def _math_verify(gold: str, pred: str, timeout: float) -> Verdict:
    key = (gold, pred)
    mine = threading.Event()  # set when this thread's comparison of the pair is over
    while True:
        with _CACHE_LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
                return _CACHE[key]
            given_up_at = _GIVEN_UP.get(key, -math.inf)
            recently_given_up = given_up_at == math.inf or time.monotonic() - given_up_at < TIMEOUT_MEMO_S
            running = None if recently_given_up else _IN_FLIGHT.setdefault(key, mine)
        if recently_given_up:
            _count_timeout(key, remember=False)
            return Verdict.TIMEOUT
        if running is mine:
            break
        # The same pair in another thread (a GRPO group repeats answers): its outcome, not a second worker's time.
        # The wait has no budget of its own: that comparison is bounded by its own (a stuck worker is killed).
        if not running.wait((1 + RETRY_FACTOR) * timeout + WORKER_START_TIMEOUT_S):
            with _CACHE_LOCK:  # it never finished: compare here
                if _IN_FLIGHT.get(key) is running:
                    _IN_FLIGHT[key] = mine
                    break
    try:
        return _ask_pool(key, timeout)
    finally:
        with _CACHE_LOCK:
            if _IN_FLIGHT.get(key) is mine:
                del _IN_FLIGHT[key]
        mine.set()


def _ask_pool(key: tuple[str, str], timeout: float) -> Verdict:
    gold, pred = key
    verdict = _POOL.compare(gold, pred, timeout)
    if verdict in (Verdict.TIMEOUT, Verdict.CHECKER_ERROR):  # a loaded machine or a replaced worker: once more
        verdict = _POOL.compare(gold, pred, RETRY_FACTOR * timeout)
    if verdict is Verdict.SPENT:
        _count_timeout(key, for_good=True)
        logger.warning(
            "math-verify spent its whole CPU budget (%.2fs) on %.60r vs gold %.60r: no verdict, not paid",
            CPU_BUDGET_S,
            pred,
            gold,
        )
        return Verdict.TIMEOUT
    if verdict is Verdict.TIMEOUT:
        _count_timeout(key)
        logger.warning(
            "math-verify timed out twice (%.2fs, then %.2fs) on %.60r vs gold %.60r: no verdict, not paid",
            timeout,
            RETRY_FACTOR * timeout,
            pred,
            gold,
        )
    elif verdict is Verdict.CHECKER_ERROR:
        _count_no_verdict("checker_error")
        logger.warning("math-verify workers failed on %.60r vs gold %.60r: no verdict, not paid", pred, gold)
    else:
        with _CACHE_LOCK:
            _CACHE[key] = verdict
            if len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
    return verdict


def _plain_number(text: str) -> str | None:
    """``text`` as a plain decimal ("1,000" and "10{,}000" keep their separators), or None when it is not one."""
    text = LATEX_THOUSANDS_RE.sub(",", text.strip())
    return text if PLAIN_NUMBER_RE.fullmatch(text) else None


def _decimal(number: str) -> Decimal:
    return Decimal(number.replace(",", ""))


def _without_units(text: str) -> str | None:
    """The plain number ``text`` is once units around it are stripped ("\\$342", "20\\%", "12 \\text{ cm}"), or None."""
    return _plain_number(UNITS_AROUND_NUMBER_RE.fullmatch(text).group("number"))


def compare_answers(pred: str | None, gold: str | None, task: str = "gsm8k", timeout: float = TIME_BUDGET_S) -> Verdict:
    """Is the extracted answer ``pred`` equal to ``gold``? Within ``timeout * (1 + RETRY_FACTOR)``; never raises.

    >>> compare_answers("3", "\\\\frac{6}{2}", task="math").value, compare_answers("\\\\pm 3", "3", task="math").value
    ('equal', 'not_equal')
    """
    if not pred or not gold:
        return Verdict.NOT_EQUAL
    if task == "gsm8k":  # exact values: "0.75" equals "3/4" (the extractor reads "#### 6/8" so), "0.33" is not "1/3"
        pred_number = exact_number(pred)
        return Verdict.of(pred_number is not None and pred_number == exact_number(gold))
    if len(pred) > MAX_ANSWER_CHARS:
        logger.warning("answer skipped as pathological (%d chars): %.60r", len(pred), pred)
        return Verdict.NOT_EQUAL
    if _canonical_box(pred) == _canonical_box(gold):
        return Verdict.EQUAL
    gold_number = _plain_number(gold)
    if gold_number is not None:
        # A plain-number gold (all of GSM8K, most of MATH) compares as a decimal once units are stripped from the
        # prediction. Deliberately stricter than math-verify, which reads "1200\\%" as 12.
        pred_number = _without_units(pred)
        if pred_number is not None:
            return Verdict.of(_decimal(pred_number) == _decimal(gold_number))
    else:
        # A number with units in the gold ("198\\%", "48^\\circ", "\\$6") and the same number as the answer: equal,
        # as math-verify says. Other numbers go to math-verify, whose reading of the units ("25\\%" is 0.25) decides.
        gold_number, pred_number = _without_units(gold), _without_units(pred)
        if gold_number is not None and pred_number is not None and _decimal(pred_number) == _decimal(gold_number):
            return Verdict.EQUAL
    if PLUS_MINUS_RE.search(pred) and not PLUS_MINUS_RE.search(gold) and "," not in gold:
        # "\pm 3" is two values against one; math-verify pays "3 \pm" and "\sqrt{9}=\pm 3" against the gold 3.
        # ("-3, 3" lists both, and may equal "\pm 3".)
        return Verdict.NOT_EQUAL
    if MALFORMED_LATEX_RE.search(pred):
        return Verdict.NOT_EQUAL
    for side, text in (("answer", pred), ("gold", gold)):
        why = too_costly(text)
        if why is not None:  # cannot finish in any budget: refused now, the same way on any machine load
            if side == "answer":
                logger.warning("answer skipped as pathological (%d chars): %.60r", len(pred), pred)
            else:
                logger.warning("comparison skipped: the gold (%d chars) is pathological: %.60r", len(gold), gold)
            logger.debug("pathological %s: %s", side, why)
            _count_no_verdict("refused")
            return Verdict.REFUSED
    return _math_verify(gold, pred, timeout)


_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_PID: int | None = None  # a forked child starts its own threads
_EXECUTOR_LOCK = threading.Lock()
_IN_BATCH = threading.local()  # set in the batch threads: a batch inside a batch runs in its thread


def _mark_batch_thread() -> None:
    _IN_BATCH.inside = True


def concurrently(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(item) for item in items]``, up to the pool's size at a time, in order: a slow comparison holds one worker
    while the others go on. Verdicts do not depend on it. ``fn`` must not raise (``check`` never does).

    >>> concurrently(len, ["a", "bb", "ccc"])
    [1, 2, 3]
    """
    global _EXECUTOR, _EXECUTOR_PID
    items = list(items)
    size = getattr(_POOL, "_size", 1)  # a stand-in pool (tests) has no workers of its own: one at a time
    if len(items) < 2 or size < 2 or getattr(_IN_BATCH, "inside", False):
        return [fn(item) for item in items]
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None or os.getpid() != _EXECUTOR_PID:
            _EXECUTOR = ThreadPoolExecutor(size, "leash-verify", initializer=_mark_batch_thread)
            _EXECUTOR_PID = os.getpid()
        executor = _EXECUTOR
    return list(executor.map(fn, items))


def answers_match(pred: str | None, gold: str | None, task: str = "gsm8k", timeout: float = TIME_BUDGET_S) -> bool:
    """True when the extracted answer ``pred`` equals ``gold`` (a timeout is not a match). Never raises.

    >>> answers_match("3", "\\\\frac{6}{2}", task="math"), answers_match("9^{9^{9^{9}}}", "1", task="math")
    (True, False)
    """
    return compare_answers(pred, gold, task, timeout) is Verdict.EQUAL


@dataclass(frozen=True)
class Check:
    """One completion checked against its gold. ``reason`` is the extractor's (``ok``, ``hedge``, ...) unless the
    comparison gave no verdict (``timeout``, ``checker_error``, ``refused``) or scoring failed (``error``)."""

    answer: Answer
    verdict: Verdict
    reason: str

    @property
    def correct(self) -> bool:
        return self.verdict is Verdict.EQUAL

    @property
    def timeout(self) -> bool:
        return self.reason == "timeout"

    @property
    def no_verdict(self) -> bool:
        """The comparison gave no verdict (a timeout, a failed worker, a refusal): not paid, but not judged wrong."""
        return self.verdict in NO_VERDICT_REASONS


NO_VERDICT_REASONS = {Verdict.TIMEOUT: "timeout", Verdict.CHECKER_ERROR: "checker_error", Verdict.REFUSED: "refused"}
_NO_VERDICT_OF_REASON = {reason: verdict for verdict, reason in NO_VERDICT_REASONS.items()}


def gold_parts(gold: str) -> list[str]:
    """A gold answer's parts: split at top-level commas and "and" (``-3, 2`` has two; ``(1, 2)`` is one tuple).

    >>> gold_parts("-3, 2"), gold_parts("(1, 2)"), gold_parts("2 \\\\text{ and } -3"), gold_parts("\\\\frac{1}{2}")
    (['-3', '2'], ['(1, 2)'], ['2', '-3'], ['\\\\frac{1}{2}'])
    """
    text = re.sub(r"\\text\{\s*and\s*\}|\band\b", ",", gold.strip().strip("$"))
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def _compare_parts(parts: tuple[str, ...], gold: str) -> Verdict:
    """A multi-part answer against a gold: equal when the gold has as many parts and each part equals one of them
    (in any order, each gold part used once); no verdict when a comparison gave none."""
    golds = gold_parts(gold)
    if len(golds) != len(parts):
        return Verdict.NOT_EQUAL
    budget = TIME_BUDGET_S / len(parts)  # the whole answer stays within one comparison's budget
    unmatched = list(golds)
    for part in parts:
        for i, candidate in enumerate(unmatched):
            verdict = compare_answers(part, candidate, task="math", timeout=budget)
            if verdict in NO_VERDICT_REASONS:
                return verdict
            if verdict is Verdict.EQUAL:
                del unmatched[i]
                break
        else:
            return Verdict.NOT_EQUAL
    return Verdict.EQUAL


def check(
    completion: str | None, gold: str | None, task: str = "gsm8k", answer_line: bool = False, think_tags: bool = True
) -> Check:
    """The completion's committed final answer, compared with ``gold``: the rewards' and eval's one judgement. Never
    raises."""
    try:
        if gold and task == "math":  # a gold is read as a box's content is (a MATH gold may end with its full stop)
            gold = _box_answer(gold)
        answer = extract_answer(completion, task=task, answer_line=answer_line, think_tags=think_tags)
        if answer.reason in _NO_VERDICT_OF_REASON:  # comparing the boxes with each other gave no verdict
            verdict = _NO_VERDICT_OF_REASON[answer.reason]
        elif answer.reason == "multi_part":  # boxes joined as parts of one answer: a gold of as many parts
            verdict = _compare_parts(answer.parts, gold) if gold else Verdict.NOT_EQUAL
        elif answer.reason == "hedge" and task == "math" and gold and _is_hedge(gold):
            # The gold itself lists solutions ("-2 \\text{ or } -12", MATH train): compare the list as written.
            verdict = compare_answers(answer.raw, gold, task=task)
        else:
            verdict = compare_answers(answer.value, gold, task=task)
        return Check(answer, verdict, NO_VERDICT_REASONS.get(verdict, answer.reason))
    except Exception:  # noqa: BLE001 - a reward must never raise on model output
        logger.warning(
            "scoring failed on a completion of %d chars; scored as wrong", len(completion or ""), exc_info=True
        )
        return Check(Answer(None, "error"), Verdict.NOT_EQUAL, "error")


def is_correct(
    completion: str | None, gold: str | None, task: str = "gsm8k", answer_line: bool = False, think_tags: bool = True
) -> bool:
    """True when the completion's committed final answer equals the gold answer (no verdict is not). Never raises."""
    return check(completion, gold, task, answer_line, think_tags).correct
