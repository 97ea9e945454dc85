"""math-verify worker process: one JSON request per line on stdin, one JSON reply per line on stdout.

Started by ``rewards.verify`` as ``python <this file>`` (never through multiprocessing, so it works whatever the
parent's ``__main__`` is: a script, ``python -c``, stdin, a notebook). It imports only the standard library and
math-verify (and sympy, which math-verify uses). Runaway comparisons are interrupted here by a SIGALRM timer (this
is the worker's main thread, where signals work); the parent kills the whole process if even that does not return
in time.

math-verify's numeric comparison has tolerances that pay distinct values: ``(a - b).evalf(chop=True)`` chops any
difference below ~1e-15 (``1/20!`` equals ``1/21!``, ``2^{-60}`` equals ``2^{-61}``, ``\\sqrt{10^{40}+1}`` equals
``10^{20}``), and decimals are rounded to 6 places (``0.1 \\cdot 10^{-19}`` equals ``0.2 \\cdot 10^{-19}``) or
compared with 15 digits (``1.5\\times 10^{20}`` equals ``150000000000000000001``). So every "equal" between two
numbers is checked again exactly (``exact_numbers_agree``); it can only turn an "equal" into "not equal".

Request: ``{"gold": "...", "pred": "...", "budget": 0.6}``; reply: ``{"result": true|false|null}`` (null: timed out;
a parser failure is false).
"""

import json
import signal
import sys

EXACT_DIGITS = 60  # working precision of the exact re-check
EXACT_REL_TOL_EXP = -45  # exact values whose relative difference evaluates below 10^-45 at 60 digits are equal


class _Budget(BaseException):  # not Exception: math-verify and sympy swallow those
    pass


def _on_alarm(signum, frame):
    raise _Budget()


def _significant_digits(f) -> int:
    from decimal import Decimal

    digits = Decimal(str(f)).normalize().as_tuple().digits
    return max(len(digits), 1)


def _number(expr):
    """The numeric value of a parsed answer (``x = 3`` gives 3), or None when it is not one number."""
    import sympy

    if isinstance(expr, sympy.Eq):
        expr = expr.rhs
    if not isinstance(expr, sympy.Expr) or not expr.is_number or expr.free_symbols or expr.has(sympy.Set):
        return None
    # infinities, and math-verify's percentages ("50\\%" is 50*|1/100|, equal to 50 by its rules): its verdict stands
    if expr.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan, sympy.Abs):
        return None
    return expr


def exact_numbers_agree(gold, pred) -> bool | None:
    """Do two parsed numbers agree exactly? None when they are not both numbers (math-verify's verdict stands).

    Decimals are the exact values they write (``0.1`` is 1/10). Two values that are both exact (no decimal, or a
    decimal against a terminating rational) must be equal. A decimal against a value it cannot write exactly
    (``0.333333`` for 1/3, ``1.5707963`` for pi/2) must agree to the decimal's last written digit.
    """
    import sympy

    a, b = _number(gold), _number(pred)
    if a is None or b is None:
        return None
    floats = a.atoms(sympy.Float) | b.atoms(sympy.Float)
    exact = {f: sympy.Rational(str(f)) for f in floats}
    a, b = a.xreplace(exact), b.xreplace(exact)
    if a == b:
        return True
    if a.is_Rational and b.is_Rational and (not floats or (_terminates(a) and _terminates(b))):
        return bool(a == b)
    diff, size_a, size_b = (abs(x).evalf(EXACT_DIGITS) for x in (a - b, a, b))
    if not all(x.is_Number for x in (diff, size_a, size_b)):
        return None  # not a plain number after all (math-verify's verdict stands)
    scale = max(size_a, size_b)
    if diff == 0:
        return True
    if not (diff.is_finite and scale.is_finite) or scale == 0:
        return False
    if not floats:  # two exact values: equal to the working precision (2\sqrt{2} and \sqrt{8})
        return bool(diff / scale < sympy.Integer(10) ** EXACT_REL_TOL_EXP)
    digits = min(_significant_digits(f) for f in floats)
    return bool(diff / scale <= sympy.Rational(1, 2) * sympy.Integer(10) ** (1 - digits))


def _terminates(x) -> bool:
    """A rational with a finite decimal expansion (its denominator has no prime factor but 2 and 5)."""
    q = int(x.q)
    for p in (2, 5):
        while q % p == 0:
            q //= p
    return q == 1


def compare(gold_text: str, pred_text: str) -> bool:
    from math_verify import parse, verify

    gold = parse(f"${gold_text}$", parsing_timeout=None)
    pred = parse(f"${pred_text}$", parsing_timeout=None)
    if not (gold and pred and verify(gold, pred, timeout_seconds=None)):
        return False
    agree = exact_agree(gold[0], pred[0])
    return True if agree is None else agree


def exact_agree(gold, pred) -> bool | None:
    """math-verify's "equal", checked again without its tolerances. None: no exact check applies (its verdict stands).

    Numbers (``exact_numbers_agree``), tuples element by element, and expressions whose difference is a constant
    (``x^2 + 1 + 10^{-20}`` against ``x^2 + 1``: the constant must be exactly 0).
    """
    import sympy

    if isinstance(gold, sympy.Tuple) and isinstance(pred, sympy.Tuple) and len(gold) == len(pred):
        verdicts = [exact_agree(g, p) for g, p in zip(gold, pred, strict=True)]
        return False if False in verdicts else None
    agree = exact_numbers_agree(gold, pred)
    if agree is not None or not (isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr)):
        return agree
    if gold.has(sympy.Float) or pred.has(sympy.Float) or not (gold.free_symbols or pred.free_symbols):
        return None
    difference = gold - pred
    if not difference.is_number or difference.has(sympy.zoo, sympy.nan):
        return None
    return bool(difference == 0 or sympy.simplify(difference) == 0)


def main() -> None:
    signal.signal(signal.SIGALRM, _on_alarm)
    compare("\\frac{1}{2}", "0.5")  # the first call loads the LaTeX parser and sympy: not on a budget
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        result = None
        try:
            request = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, max(float(request.get("budget", 1.0)), 0.01))
            try:
                result = compare(request["gold"], request["pred"])
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
