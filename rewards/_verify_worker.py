"""math-verify worker process: one JSON request per line on stdin, one JSON reply per line on stdout.

Run by ``rewards.verify`` as ``python <this file>``, so it imports only the standard library, math-verify and sympy.
A comparison runs under a CPU-time budget (``SIGPROF``: a busy machine does not shorten it, so running out is a
property of the answer) and a wall-clock limit (``SIGALRM``) just inside the parent's. math-verify's "equal" is checked
again by ``parsed_whole`` (its parser drops what it does not understand: ``x + 2t`` read as ``x + 2``) and
``exact_agree`` (its numeric tolerances pay distinct values: ``1/20!`` equals ``1/21!``).

Request: ``{"gold": "...", "pred": "...", "cpu": 0.5, "wall": 0.6}`` (seconds); reply: ``{"result": true|false}``,
or ``{"result": null, "spent": "cpu"|"wall"}`` when a timer ran out (a parser failure is false).
"""

import json
import re
import signal
import sys
from decimal import Decimal

import sympy
from math_verify import parse, verify
from sympy.core.evalf import PrecisionExhausted
from sympy.core.function import AppliedUndef

EXACT_DIGITS = 60  # working precision of the exact re-check
EXACT_REL_TOL_EXP = -45  # exact values whose relative difference evaluates below 10^-45 at 60 digits are equal

_FONTS = r"math(?:rm|bf|it|sf|tt|normal|up)|text(?:rm|bf|it|sf|tt|normal|up)?|operatorname\*?|mbox|bm|boldsymbol"
_SWITCHES = r"rm|bf|it|sf|tt|up"  # the old switches: {\rm e}, \rm e
CONSTANT_RE = re.compile(
    rf"\\(?:{_FONTS})\s*\{{\s*(e|i|\\pi)\s*\}}"  # \mathrm{e}, \text{ i }, \mathrm{\pi}
    rf"|\\(?:{_FONTS})\s+(e|i)(?![a-zA-Z])"  # \mathrm e
    rf"|\{{\s*\\(?:{_SWITCHES})\s+(e|i|\\pi)\s*\}}"  # {\rm e}
    rf"|\\(?:{_SWITCHES})\s+(e|i)(?![a-zA-Z])"  # \rm e
)
# A command whose braced argument is a word (a unit, a label: dropped) or a single letter (a variable: kept).
_WORD_COMMAND_RE = re.compile(rf"\\({_FONTS}|mathbb|mathcal|mathfrak|mathscr|begin|end)\s*\{{([^{{}}]*)\}}")
_BOLD = ("mathbf", "textbf", "bm", "boldsymbol")
_NOT_A_VARIABLE = ("mathbb", "mathcal", "mathfrak", "mathscr", "begin", "end")  # sets and environments
# Words math-verify rewrites ("1 and 2" is a list, "inf" is \infty, "sqrt(2)" is a root): not variables.
_REWRITTEN_WORDS_RE = re.compile(r"(?<![a-zA-Z])(?:and|or|infinity|inf|percentage|percent|pct|sqrt)(?![a-zA-Z])")
# What may follow a number and be dropped as a unit: "5 cm", "3\text{ m}^2", "12\,\mathrm{m}" (after the commands
# are taken out of the text). Excused only when the parse holds no letter at all: "x + 2t" loses a variable.
_TRAILING_WORDS_RE = re.compile(r"(?<![A-Za-z])([A-Za-z][A-Za-z\s.]*?)\s*(?:\^\s*\{?\s*\d+\s*\}?)?[\s.]*$")
_TOKEN = r"(\\[a-zA-Z]+|[0-9a-zA-Z])"
# \frac\pi 2, \frac12: a fraction of two one-token arguments (math-verify reads "2007 + \frac\pi 2" as 2)
_BARE_FRAC_RE = re.compile(rf"\\[dt]?frac(?![a-zA-Z])\s*{_TOKEN}\s*{_TOKEN}")
_DANGLING_RE = re.compile(r"(?:[+\-*/^=_]|\\(?:cdot|times|div|pm|mp|frac|sqrt))\s*$")


class _Budget(BaseException):  # not Exception: math-verify and sympy swallow those
    """A timer ran out; ``spent`` says which."""

    spent = "wall"


class _CpuSpent(_Budget):
    spent = "cpu"


_ARMED = False  # a timer's signal that arrives once the comparison is over is ignored


def _on_wall(signum, frame):
    if _ARMED:
        raise _Budget()


def _on_cpu(signum, frame):
    if _ARMED:
        raise _CpuSpent()


def normalize_constants(text: str) -> str:
    """Euler's e, the imaginary unit and pi in a font or text command, written as the constants.

    >>> normalize_constants("1 + \\\\frac{1}{\\\\mathrm{e}}"), normalize_constants("2{\\\\rm i}")
    ('1 + \\\\frac{1}{e}', '2i')
    >>> normalize_constants("12\\\\,\\\\mathrm{cm}"), normalize_constants("\\\\pi\\\\mathbf{e}^{x}")
    ('12\\\\,\\\\mathrm{cm}', '\\\\pi e^{x}')
    """

    def constant(m: re.Match) -> str:
        name = next(g for g in m.groups() if g)
        if name == "\\pi":
            return "\\pi "
        # written as models write it ("2i", not "2{i}": math-verify reads the i of "2{i}" as another symbol)
        return f" {name}" if m.start() and m.string[m.start() - 1].isalpha() else name

    return CONSTANT_RE.sub(constant, text)


def prepare(text: str) -> str:
    """The answer as math-verify is given it: constants normalised (it drops ``\\mathrm{e}`` as a unit),
    ``\\frac\\pi 2`` braced (it reads it as 2), no thin spaces, no "$" inside, on one line (it would read a piece)."""
    text = _BARE_FRAC_RE.sub(r"\\frac{\1}{\2}", normalize_constants(text))
    return re.sub(r"(?<!\\)\$|(?<!\\)\\[,;:]", "", text).replace("\n", " ")


def _balanced(text: str) -> bool:
    depth = 0
    for brace in re.findall(r"(?<!\\)[{}]", text):
        depth += 1 if brace == "{" else -1
        if depth < 0:
            return False
    return depth == 0


def _visible_letters(text: str) -> tuple[set[str], set[str]]:
    """(the letters an answer's text shows as variables or constants, lower-cased, with "\\pi" for pi; those of them
    in a trailing word that may be a unit)."""

    bold = set()  # \mathbf{v}: a vector, never a unit

    def word(m: re.Match) -> str:
        command, content = m.group(1), m.group(2)
        letters = re.findall(r"[A-Za-z]", content)
        if command in _NOT_A_VARIABLE or len(letters) != 1:
            return " "
        if command in _BOLD:
            bold.add(letters[0].lower())
        return f" {letters[0]} "

    text = _WORD_COMMAND_RE.sub(word, text)
    pi = {"\\pi"} if re.search(r"\\pi(?![a-zA-Z])", text) else set()
    text = re.sub(r"\\[a-zA-Z]+|\\.", " ", text)
    text = _REWRITTEN_WORDS_RE.sub(" ", text)
    trailing = _TRAILING_WORDS_RE.search(text)
    unit = set(re.findall(r"[a-z]", trailing.group(1).lower())) - bold if trailing else set()
    return set(re.findall(r"[a-z]", text.lower())) | pi, unit


def _parsed_letters(expr) -> set[str] | None:
    """The letters a parsed answer holds (symbols, undefined functions, e, i, "\\pi"); None if it is not sympy's."""
    if not hasattr(expr, "atoms"):
        return None
    names = [s.name for s in expr.atoms(sympy.Symbol)] + [f.func.__name__ for f in expr.atoms(AppliedUndef)]
    letters = set(re.findall(r"[a-z]", "".join(names).lower()))
    if expr.has(sympy.E) or expr.atoms(sympy.exp):
        letters.add("e")
    if expr.has(sympy.I):
        letters.add("i")
    if expr.has(sympy.pi):
        letters.add("\\pi")
    return letters


def parsed_whole(text: str, parsed: list) -> bool:
    """Did math-verify read all of ``text``? Not when its parse ``parsed`` lost a letter (a trailing unit aside) or
    ``\\pi``, or the text or the piece it matched ends on an operator or is cut inside a brace.

    >>> [parsed_whole(t, parse(f"${t}$", parsing_timeout=None)) for t in ("x + 2t", "12 \\\\text{ cm}", "2{e}")]
    [False, True, True]
    """
    matched = parsed[-1] if parsed and isinstance(parsed[-1], str) else ""
    if _DANGLING_RE.search(text) or _DANGLING_RE.search(matched):
        return False
    if _balanced(text) and not _balanced(matched):
        return False
    held = _parsed_letters(parsed[0]) if parsed else None
    if held is None:
        return True  # not a sympy parse: math-verify compared strings
    shown, unit = _visible_letters(text)
    missing = shown - held
    if not missing:
        return True
    # a unit after a number ("12\,\mathrm{m}", "5 cm") is what math-verify's normaliser drops on purpose: excused when
    # the parse holds no letter and the letters are gone from the piece it matched too ("2\operatorname{x}" is kept
    # there and lost by the parser: not a unit)
    return not held and missing <= unit - _visible_letters(matched)[0]


def _significant_digits(f) -> int:
    digits = Decimal(str(f)).normalize().as_tuple().digits
    return max(len(digits), 1)


def _number(expr):
    """The numeric value of a parsed answer (``x = 3`` gives 3), or None when it is not one number."""
    if isinstance(expr, sympy.Eq):
        expr = expr.rhs
    if isinstance(expr, sympy.Expr) and expr.has(sympy.Sum, sympy.Product):
        # in closed form: evaluating a sum at 60 digits runs Euler-Maclaurin, seconds for \sum_{k=1}^{1000} k
        # (rewards.cost refuses more than 10,000 terms)
        expr = expr.doit()
    if not isinstance(expr, sympy.Expr) or not expr.is_number or expr.free_symbols or expr.has(sympy.Set):
        return None
    # infinities, and math-verify's percentages ("50\\%" is 50*|1/100|, equal to 50 by its rules): its verdict stands
    if expr.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan, sympy.Abs):
        return None
    return expr


def _numeric(expr):
    """``expr`` at ``EXACT_DIGITS`` digits: a sympy number, 0 when zero to that precision, or None when it does not
    evaluate to a number. Never simplifies (that can take seconds; the number takes milliseconds)."""
    try:
        value = expr.evalf(EXACT_DIGITS, strict=True)
    except PrecisionExhausted:
        return 0
    return value if value.is_Number or (value.is_number and not value.free_symbols and value.is_finite) else None


def exact_numbers_agree(gold, pred) -> bool | None:
    """Do two parsed numbers agree exactly (a decimal to its last written digit)? None unless both are numbers."""
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
    diff, size_a, size_b = (_numeric(x) for x in (a - b, a, b))
    if diff is None or size_a is None or size_b is None:
        return None  # not a plain number after all (math-verify's verdict stands)
    if diff == 0:
        return True
    diff, scale = abs(diff), max(abs(size_a), abs(size_b))
    if not all(x.is_Number for x in (diff, scale)):
        return None
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
    gold_text, pred_text = prepare(gold_text), prepare(pred_text)
    gold = parse(f"${gold_text}$", parsing_timeout=None)
    pred = parse(f"${pred_text}$", parsing_timeout=None)
    if not (gold and pred and verify(gold, pred, timeout_seconds=None)):
        return False
    if not (parsed_whole(gold_text, gold) and parsed_whole(pred_text, pred)):
        return False
    agree = exact_agree(gold[0], pred[0])
    return True if agree is None else agree


def equations_agree(gold, pred) -> bool | None:
    """Two equations agree when one is the other times a nonzero constant (``y = 2x + 1`` and ``2y = 4x + 2``); None
    when it cannot be told exactly (math-verify's verdict stands)."""
    if gold.lhs == pred.lhs and _number(gold.rhs) is not None and _number(pred.rhs) is not None:
        return exact_numbers_agree(gold.rhs, pred.rhs)
    floats = gold.atoms(sympy.Float) | pred.atoms(sympy.Float)
    exact = {f: sympy.Rational(str(f)) for f in floats}
    a = (gold.lhs - gold.rhs).xreplace(exact)
    b = (pred.lhs - pred.rhs).xreplace(exact)
    if a == 0 or b == 0 or not (a.free_symbols or b.free_symbols):
        return None
    ratio = sympy.cancel(a / b)
    if ratio.free_symbols or not ratio.is_number:
        return None  # not a rational function of its symbols: no exact test here
    value = _numeric(ratio)
    if value is None:
        return None
    return bool(value != 0 and value.is_finite)


def exact_agree(gold, pred) -> bool | None:
    """math-verify's "equal", checked again without its tolerances; None when no exact check applies."""
    if isinstance(gold, sympy.Tuple) and isinstance(pred, sympy.Tuple) and len(gold) == len(pred):
        verdicts = [exact_agree(g, p) for g, p in zip(gold, pred, strict=True)]
        return False if False in verdicts else None
    if isinstance(gold, sympy.Eq) and isinstance(pred, sympy.Eq):
        return equations_agree(gold, pred)
    agree = exact_numbers_agree(gold, pred)
    if agree is not None or not (isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr)):
        return agree
    if gold.has(sympy.Float) or pred.has(sympy.Float) or not (gold.free_symbols or pred.free_symbols):
        return None
    difference = gold - pred
    if not difference.is_number or difference.has(sympy.zoo, sympy.nan):
        return None
    value = _numeric(difference)
    if value is not None:
        return bool(value == 0)  # 60 digits decide: a value is either zero at that precision or shows its digits
    return bool(difference == 0 or sympy.simplify(difference) == 0)  # the numbers cannot decide


# Comparisons made once at start-up, off any budget: the first parse of each kind of answer (radicals, percentages,
# degrees, text, equations, intervals, matrices, sets) loads parts of sympy and the LaTeX parser that would
# otherwise land on the first completions' clock.
WARM_UP = [
    ("\\frac{1}{2}", "0.5"),
    ("7", "\\sqrt{5}+2\\sqrt{3}"),
    ("30\\%", "30"),
    ("\\text{5 p.m.}", "5 \\text{ a.m.}"),
    ("60^\\circ", "60"),
    ("x^2+1", "(x+1)^2-2x"),
    ("(1,2)", "(1,3)"),
    ("\\frac{\\pi}{3}", "60^\\circ"),
    ("y=2x+1", "2y=4x+2"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\3\\end{pmatrix}"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
    ("1+i", "1+\\mathrm{i}"),
]


def main() -> None:
    global _ARMED
    signal.signal(signal.SIGALRM, _on_wall)
    signal.signal(signal.SIGPROF, _on_cpu)
    for gold, pred in WARM_UP:
        try:
            compare(gold, pred)
        except Exception:  # noqa: BLE001, S112 - a warm-up comparison that fails only loads less
            continue
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        reply: dict = {"result": None}
        try:
            request = json.loads(line)
            wall = max(float(request.get("wall", 1.0)), 0.01)
            cpu = max(float(request.get("cpu", wall)), 0.01)
            _ARMED = True
            signal.setitimer(signal.ITIMER_PROF, cpu)
            signal.setitimer(signal.ITIMER_REAL, wall)
            try:
                reply["result"] = compare(request["gold"], request["pred"])
            finally:
                _ARMED = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.setitimer(signal.ITIMER_PROF, 0)
        except _Budget as spent:
            reply = {"result": None, "spent": spent.spent}
        except Exception:  # noqa: BLE001 - any parser failure means "not equal"
            reply = {"result": False}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
