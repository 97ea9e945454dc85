"""Is an extracted answer equal to the gold one? Deterministic, time-limited, safe in any thread.

GSM8K answers are numbers and compare as decimals (``18.00 == 18``). MATH answers compare first as normalised
strings and plain numbers, then with math-verify -- the one place where model text becomes an expression.
math-verify's own timeouts use ``signal.alarm``, which only works in the main thread, so here it runs in a small
pool of worker processes (``rewards/_verify_worker.py``, started with ``subprocess``: no multiprocessing, so it
works when ``__main__`` is a notebook, stdin or ``python -c``). A comparison that exceeds its time budget is
interrupted inside the worker, or the worker is killed and replaced in the background; either way it counts as
"not correct" and is logged. Nothing here raises on model output.

>>> answers_match("18.00", "18", task="gsm8k")
True
>>> answers_match("\\\\frac{1}{2}", "0.5", task="math")
True
>>> is_correct("so 3 + 5 = 8\\n#### 8", "8")
True
>>> is_correct("#### 17 or 18", "17")
False
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from decimal import Decimal
from pathlib import Path

from rewards.answers import _canonical_box, _is_hedge, extract_answer, normalize_number

logger = logging.getLogger(__name__)

TIME_BUDGET_S = 0.8  # one math-verify comparison; past it the answer counts as wrong
MAX_ANSWER_CHARS = 500  # an extracted answer longer than this is not a maths answer
MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))  # parallel comparisons when rewards are called from threads
WORKER_START_TIMEOUT_S = 60.0  # importing math-verify takes ~0.6 s; a loaded machine can be much slower
CACHE_SIZE = 65_536  # GRPO groups repeat the same (gold, answer) pairs many times
# A plain decimal number ("18", "-0.50", "1,000"): MATH answers like this compare as decimals, without math-verify.
PLAIN_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# What may surround a number and not change it: "\\$342", "20.0\\%", "45^\\circ", "12 \\text{ cm}".
UNITS_AROUND_NUMBER_RE = re.compile(
    r"^(?:\\\$|\$|\\,|\s)*(?P<number>.*?)"
    r"(?:\\%|%|\^\s*\{?\\circ\}?|\\(?:text|mbox|mathrm)\{\s*[A-Za-z][A-Za-z .]*\}|\\[,;! ]|\s)*$"
)
# An exponent holding an exponent (9^{9^{9^9}}, 9^9^9): sympy would evaluate astronomically large numbers. Not
# polynomials: "x^4 - x^3 + x^2" has no nesting. Such a prediction is skipped unless the gold nests too.
POWER_TOWER_RE = re.compile(r"\^\s*\{[^{}]*\^|\^\s*\d+\s*\^")
_WORKER_SCRIPT = str(Path(__file__).with_name("_verify_worker.py"))


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
        ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0.0))
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def wait_ready(self) -> bool:
        if not self.ready:
            self.ready = (self._read_line(WORKER_START_TIMEOUT_S) or {}).get("ready", False)
        return self.ready

    def compare(self, gold: str, pred: str, timeout: float) -> bool | None:
        """True/False, or None when the worker did not answer within ``timeout`` (the caller then kills it)."""
        self.proc.stdin.write(json.dumps({"gold": gold, "pred": pred, "budget": 0.75 * timeout}) + "\n")
        self.proc.stdin.flush()
        reply = self._read_line(timeout)
        return None if reply is None else reply.get("result")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class _WorkerPool:
    """Up to ``MAX_WORKERS`` workers shared by all threads; a killed worker is replaced in the background."""

    def __init__(self, size: int):
        self._size = size
        self._idle: list[_Worker] = []
        self._n_alive = 0
        self._cond = threading.Condition()
        atexit.register(self.close)

    def warm_up(self, n: int | None = None) -> None:
        """Start workers now, so that their start-up does not land on the first completions' clock."""
        with self._cond:
            while self._n_alive < min(n or self._size, self._size):
                self._idle.append(_Worker())
                self._n_alive += 1
            for worker in self._idle:
                worker.wait_ready()

    def _take(self) -> _Worker:
        with self._cond:
            while not self._idle and self._n_alive >= self._size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._n_alive += 1
        return _Worker()

    def _give_back(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is None:
                self._n_alive -= 1
            else:
                self._idle.append(worker)
            self._cond.notify()

    def compare(self, gold: str, pred: str, timeout: float) -> bool | None:
        worker = self._take()
        try:
            if not worker.wait_ready():
                raise RuntimeError("math-verify worker did not start")
            start = time.perf_counter()
            result = worker.compare(gold, pred, timeout)
            if result is None and time.perf_counter() - start >= timeout:
                worker.kill()  # stuck past its own alarm: replace it, starting the new one now
                worker = _Worker()
            self._give_back(worker)
            return result
        except Exception:  # noqa: BLE001 - a broken pipe or a dead worker: drop it, count as not equal
            logger.warning("math-verify worker failed; restarting it", exc_info=True)
            with contextlib.suppress(Exception):
                worker.kill()
            self._give_back(None)
            return None

    def close(self) -> None:
        with self._cond:
            for worker in self._idle:
                with contextlib.suppress(Exception):
                    worker.kill()
            self._idle.clear()
            self._n_alive = 0


_POOL = _WorkerPool(MAX_WORKERS)
_CACHE: OrderedDict[tuple[str, str], bool] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def warm_up(n_workers: int | None = None) -> None:
    """Start the math-verify workers now (they otherwise start on the first MATH comparison, ~0.6 s each)."""
    _POOL.warm_up(n_workers)


def _math_verify(gold: str, pred: str, timeout: float) -> bool:
    key = (gold, pred)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    result = _POOL.compare(gold, pred, timeout)
    if result is None:
        logger.warning("math-verify exceeded %.2fs on %.60r vs gold %.60r; scored as wrong", timeout, pred, gold)
    result = bool(result)
    with _CACHE_LOCK:  # timeouts are cached too: the same runaway answer should not cost the budget twice
        _CACHE[key] = result
        if len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return result


def answers_match(pred: str | None, gold: str | None, task: str = "gsm8k", timeout: float = TIME_BUDGET_S) -> bool:
    """True when the extracted answer ``pred`` equals ``gold``. Never raises, never exceeds ``timeout`` by much.

    >>> answers_match("3", "\\\\frac{6}{2}", task="math"), answers_match("9^{9^{9^{9}}}", "1", task="math")
    (True, False)
    """
    if not pred or not gold:
        return False
    if task == "gsm8k":
        pred_number = normalize_number(pred)
        return pred_number is not None and pred_number == normalize_number(gold)
    if len(pred) > MAX_ANSWER_CHARS or (POWER_TOWER_RE.search(pred) and not POWER_TOWER_RE.search(gold)):
        logger.warning("answer skipped as pathological (%d chars): %.60r", len(pred), pred)
        return False
    if _canonical_box(pred) == _canonical_box(gold):
        return True
    if PLAIN_NUMBER_RE.fullmatch(gold.strip()):
        # A plain-number gold (all of GSM8K, most of MATH) compares as a decimal once units are stripped from the
        # prediction. Deliberately stricter than math-verify, which reads "1200\\%" as 12.
        pred_number = UNITS_AROUND_NUMBER_RE.fullmatch(pred).group("number").strip()
        if PLAIN_NUMBER_RE.fullmatch(pred_number):
            return Decimal(pred_number.replace(",", "")) == Decimal(gold.strip().replace(",", ""))
    return _math_verify(gold, pred, timeout)


def is_correct(completion: str | None, gold: str | None, task: str = "gsm8k", answer_line: bool = False) -> bool:
    """True when the completion's committed final answer equals the gold answer. Never raises."""
    try:
        answer = extract_answer(completion, task=task, answer_line=answer_line)
        if answer.reason == "hedge" and task == "math" and gold and _is_hedge(gold):
            # The gold itself lists solutions ("-2 \\text{ or } -12", MATH train): compare the list as written.
            return answers_match(answer.raw, gold, task=task)
        return answers_match(answer.value, gold, task=task)
    except Exception:  # noqa: BLE001 - a reward must never raise on model output
        logger.warning(
            "scoring failed on a completion of %d chars; scored as wrong", len(completion or ""), exc_info=True
        )
        return False
