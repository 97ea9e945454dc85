"""What an answer would cost math-verify, told from its text alone before any parser sees it.

Some answers cannot be compared in any budget (``9^{9^{9^{9}}}`` asks sympy for ~10^8 digits; the parser's time is
exponential in bracket nesting): refused from the text alone, never from the machine's load. The bounds are generous:
in the MATH answers and model outputs stored with the tests, nesting is at most 3 and numbers a few hundred digits.

>>> too_costly("9^{9^{9^{9}}}"), too_costly("\\\\sum_{k=1}^{10^{100}} k"), too_costly("(" * 7 + "1" + ")" * 7)
('a number of more than 100000 digits', 'a sum or product of more than 10000 terms', 'brackets nested 7 deep')
>>> too_costly("\\\\frac{1+\\\\sqrt{5}}{2}"), too_costly("x^{10^{100}}"), too_costly("2^{10^{5}}"), too_costly("1000!")
(None, None, None, None)
"""

from __future__ import annotations

import math
import re

MAX_DIGITS = 100_000  # a number with more digits than this is not an answer (and sympy would build it)
MAX_TERMS = 10_000  # a sum or product over more terms is not an answer (sympy may add them one by one)
MAX_NESTING = 6  # brackets nested deeper: the parser's time grows ~1.4x per level (0.25 s at 6 parentheses)

_TOKEN_RE = re.compile(r"\d+(?:\.\d+)?|\.\d+|\\[a-zA-Z]+|\\.|\s+|.", re.DOTALL)
_OPEN = {"{": "}", "(": ")", "[": "]"}
_CLOSE = {"}", ")", "]"}
_ADDITIVE = {"+", "-", "=", ",", ";", "<", ">", ":", "|", "&", "\\pm", "\\mp", "\\\\"}
_MULTIPLICATIVE = {"*", "/", "\\cdot", "\\times", "\\div"}
_INVISIBLE = {"\\left", "\\right", "\\big", "\\Big", "\\bigg", "\\Bigg", "\\displaystyle"}
_FRACTIONS = {"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"}
_BINOMIALS = {"\\binom", "\\dbinom", "\\tbinom"}
_BIG_OPERATORS = {"\\sum": "sum", "\\prod": "product"}
_LOG2 = math.log10(2)


def nesting_depth(text: str) -> int:
    """How deep brackets nest (``\\left(`` counts as ``(``; the set braces ``\\{ \\}`` do not).

    >>> nesting_depth("\\\\left(\\\\frac{\\\\sqrt{3}}{2}, 1\\\\right)"), nesting_depth("[0, 1)")
    (3, 1)
    """
    depth = deepest = 0
    for char in re.sub(r"\\[{}]|\\left|\\right", "", text):
        if char in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif char in _CLOSE:
            depth = max(depth - 1, 0)
    return deepest


def _power_of_ten(log10: float) -> float:
    return math.inf if log10 > 300 else 10.0**log10


class _Size:
    """An upper bound of the number of digits (log10 of the largest numerator or denominator) of every value an
    answer writes, and of the number of terms of its sums and products: a small recursive-descent reading of LaTeX
    that evaluates nothing."""

    def __init__(self, text: str):
        self.tokens = [t for t in _TOKEN_RE.findall(text) if not t.isspace()]
        self.i = 0
        self.digits = 0.0
        self.terms = 1.0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.i += token is not None
        return token

    def seen(self, digits: float) -> float:
        self.digits = max(self.digits, digits)
        return digits

    def expression(self, closer: str | None = None) -> float:
        size = self.term()
        while (token := self.peek()) is not None:
            if token == closer:
                self.take()
                break
            if token in _CLOSE:  # an unbalanced or mismatched bracket ("[0, 1)"): it closes this group too
                self.take()
                if closer is not None:
                    break
                continue
            if token in _ADDITIVE:
                self.take()
            size = self.seen(max(size, self.term()) + _LOG2)  # a sum has at most one digit more than its terms
        return size

    def term(self) -> float:
        size = self.power()
        while (token := self.peek()) is not None and token not in _CLOSE and token not in _ADDITIVE:
            if token in _MULTIPLICATIVE:
                self.take()
            size = self.seen(size + self.power())  # digits of a product (or quotient) add up
        return size

    def power(self) -> float:
        size = self.postfix(self.atom())
        while self.peek() in ("^", "_"):
            if self.take() == "_":
                self.atom()  # a subscript names, it does not compute
                continue
            exponent = self.power()  # right-associative: 9^9^9 is 9^(9^9)
            size = self.seen(_power_of_ten(exponent) * max(size, 0.0) if size > 0 else 0.0)
        return size

    def postfix(self, size: float) -> float:
        while self.peek() == "!":
            self.take()
            n = _power_of_ten(size)
            size = self.seen(n * math.log10(n) if n > 1 else 0.0)
        return size

    def atom(self) -> float:
        token = self.take()
        if token is None or token in _CLOSE or token in _ADDITIVE or token in _MULTIPLICATIVE or token in "^_!":
            return 0.0
        if token[0].isdigit() or (token[0] == "." and len(token) > 1):
            whole, _, decimals = token.partition(".")
            digits = (whole + decimals).lstrip("0")
            value = math.log10(int(digits)) if 0 < len(digits) < 300 else float(len(digits))
            return self.seen(max(value, float(len(decimals))))
        if token in _OPEN:
            return self.seen(self.expression(_OPEN[token]))
        if token in _INVISIBLE:
            return self.atom()
        if token in _FRACTIONS:
            return self.seen(self.atom() + self.atom())
        if token in _BINOMIALS:
            top, _ = self.atom(), self.atom()
            return self.seen(_power_of_ten(top) * _LOG2)  # C(n, k) < 2^n
        if token == "\\sqrt":
            if self.peek() == "[":
                self.take()
                self.expression("]")
            return self.atom()
        if token in _BIG_OPERATORS:
            upper = 0.0
            while self.peek() in ("_", "^"):
                bound = self.take()
                value = self.atom()
                upper = value if bound == "^" else upper
            n = _power_of_ten(upper)
            self.terms = max(self.terms, n)
            body = self.power()
            return self.seen(body + math.log10(max(n, 1.0)) if token == "\\sum" else n * body)
        return 0.0  # a letter, a constant, a function name, text: no digits of its own


def too_costly(text: str) -> str | None:
    """Why math-verify could not compare ``text`` in any budget (see the module's doc), or None when it can try."""
    depth = nesting_depth(text)
    if depth > MAX_NESTING:
        return f"brackets nested {depth} deep"
    size = _Size(text)
    try:
        while size.peek() is not None:
            size.expression()
    except RecursionError:  # thousands of unbraced exponents in a row
        return "a chain of exponents too long to read"
    if size.digits > MAX_DIGITS:
        return f"a number of more than {MAX_DIGITS} digits"
    if size.terms > MAX_TERMS:
        return f"a sum or product of more than {MAX_TERMS} terms"
    return None
