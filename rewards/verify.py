"""Is an extracted answer equal to the gold one? Deterministic, time-limited, safe in any thread.

GSM8K answers are numbers and compare as decimals (``18.00 == 18``). MATH answers compare first as normalised
strings, then with math-verify -- the one place where model text becomes an expression. math-verify's own
timeouts use ``signal.alarm``, which only works in the main thread, so here it runs in a worker process that is
killed and restarted when one comparison exceeds its time budget. A comparison that times out or fails is
"not correct" and is logged; it never raises.

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

import logging
import multiprocessing as mp
import re
import threading

from rewards.answers import _canonical_box, extract_answer, normalize_number

logger = logging.getLogger(__name__)

TIME_BUDGET_S = 1.0  # one comparison; past it the answer counts as wrong and the worker is restarted
MAX_ANSWER_CHARS = 500  # an extracted answer longer than this is not a maths answer
# Towers like 9^{9^{9^9}} make sympy evaluate astronomically large numbers.
POWER_TOWER_RE = re.compile(r"\^\s*\{?[^{}]*\^\s*\{?[^{}]*\^")


def _mv_verify(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    pred_parsed = parse(f"${pred}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _worker(conn) -> None:
    while True:
        try:
            gold, pred = conn.recv()
        except EOFError:
            return
        try:
            conn.send(_mv_verify(gold, pred))
        except Exception as e:  # noqa: BLE001 - any parser failure means "not equal"
            conn.send(e.__class__.__name__)


class _Verifier:
    """A math-verify worker process shared by all threads; restarted when a comparison hangs."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # fork after torch/threads is unsafe
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self._proc.start()

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
        self._proc = self._conn = None

    def __call__(self, gold: str, pred: str, timeout: float) -> bool | None:
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()
            self._conn.send((gold, pred))
            if not self._conn.poll(timeout):
                self._kill()
                return None
            result = self._conn.recv()
            return result if isinstance(result, bool) else False


_VERIFIER = _Verifier()


def answers_match(pred: str | None, gold: str | None, task: str = "gsm8k", timeout: float = TIME_BUDGET_S) -> bool:
    """True when the extracted answer ``pred`` equals ``gold``. Never raises, never exceeds ``timeout`` by much."""
    if not pred or not gold:
        return False
    if task == "gsm8k":
        p, g = normalize_number(pred), normalize_number(gold)
        return p is not None and p == g
    if _canonical_box(pred) == _canonical_box(gold):
        return True
    if len(pred) > MAX_ANSWER_CHARS or POWER_TOWER_RE.search(pred):
        logger.warning("answer skipped as pathological (%d chars): %.60r", len(pred), pred)
        return False
    result = _VERIFIER(gold, pred, timeout)
    if result is None:
        logger.warning("math-verify exceeded %.1fs on %.60r vs gold %.60r; scored as wrong", timeout, pred, gold)
        return False
    return result


def is_correct(completion: str | None, gold: str | None, task: str = "gsm8k", answer_line: bool = False) -> bool:
    """True when the completion's committed final answer equals the gold answer."""
    try:
        answer = extract_answer(completion, task=task, answer_line=answer_line)
        return answers_match(answer.value, gold, task=task)
    except Exception:  # noqa: BLE001 - a reward must never raise on model output
        logger.warning(
            "scoring failed on a completion of %d chars; scored as wrong", len(completion or ""), exc_info=True
        )
        return False
