"""math-verify worker process: one JSON request per line on stdin, one JSON reply per line on stdout.

Started by ``rewards.verify`` as ``python <this file>`` (never through multiprocessing, so it works whatever the
parent's ``__main__`` is: a script, ``python -c``, stdin, a notebook). It imports only the standard library and
math-verify. Runaway comparisons are interrupted here by a SIGALRM timer (this is the worker's main thread, where
signals work); the parent kills the whole process if even that does not return in time.

Request: ``{"gold": "...", "pred": "...", "budget": 0.6}``; reply: ``{"result": true|false|null}`` (null: timed out
or math-verify raised, counted as not equal by the parent).
"""

import json
import signal
import sys


class _Budget(BaseException):  # not Exception: math-verify and sympy swallow those
    pass


def _on_alarm(signum, frame):
    raise _Budget()


def main() -> None:
    from math_verify import parse, verify

    signal.signal(signal.SIGALRM, _on_alarm)
    verify(parse("$\\frac{1}{2}$"), parse("$0.5$"))  # the first call loads the LaTeX parser: not on a budget
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        result = None
        try:
            request = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, max(float(request.get("budget", 1.0)), 0.01))
            try:
                gold = parse(f"${request['gold']}$", parsing_timeout=None)
                pred = parse(f"${request['pred']}$", parsing_timeout=None)
                result = bool(gold and pred and verify(gold, pred, timeout_seconds=None))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Budget:
            result = None
        except Exception:  # noqa: BLE001 - any parser failure means "not equal"
            result = False
        out.write(json.dumps({"result": result}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
