"""The one answer extractor: what "the model's final answer" is, for rewards, eval and probes alike.

A hedge, markers that disagree or an empty marker is no answer. The whole completion is never handed to math-verify:
that would credit a restated question or any number in the text.

>>> extract_answer("3 + 5 = 8 apples.\\n#### 8").value
'8'
>>> extract_answer("#### $1,234.00.").value
'1234'
>>> extract_answer("#### 17 or 18").reason
'hedge'
>>> extract_answer("#### 3/4").value, extract_answer("#### 1/3").value  # a fraction is its exact value
('0.75', '1/3')
>>> extract_answer("so x = \\\\boxed{\\\\frac{1}{2}}", task="math").value
'\\\\frac{1}{2}'
>>> extract_answer("Answer: 17", answer_line=True).value
'17'
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import NamedTuple

GSM8K_MARKER = "####"
MAX_SEGMENT_CHARS = 500  # what follows a marker on its line; more is prose, and scanning it all is quadratic
MAX_NUMBER_CHARS = 100  # longer digit strings are not answers (and overflow Decimal arithmetic)
BOX_COMMANDS = ("\\boxed", "\\fbox")
# A number as models write it: sign, thousands separators, decimals (".5" is 0.5), optional currency sign.
# (Each of the regexes a whole completion is searched with starts with a lookahead of the characters a match can start
# with: it finds the same matches, 2-3x faster, since a position that cannot start one fails at once.)
NUMBER_RE = re.compile(r"(?=[-$\s\d.])-?\$?\s?-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")
# The same after a final-answer marker, where a space may also group thousands as SI writes them ("#### 1 000"). Not in
# running text: "99 100" there is two numbers.
ANSWER_NUMBER_RE = re.compile(r"-?\$?\s?-?(?:(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?: \d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)")
# LaTeX's ways of grouping digits ("1{,}000", "1\\,000", "1~000"): read as the separators above.
LATEX_DIGIT_GROUP_RE = re.compile(r"(?<=\d)(?:\{,\}|\\[,;:! ]|~)(?=\d{3}(?!\d))")
# An explicit final-answer line: "Answer: 17", "Final answer: 17", "The answer is 17", "A: 17" (GPT-3 style).
ANSWER_LINE_RE = re.compile(
    r"^\s*(?:\*\*)?(?:final answer|answer|the answer is|the final answer is|a)\s*(?:\*\*)?\s*[:：]?\s*(?:\*\*)?(.+?)\s*$",  # noqa: E501
    re.IGNORECASE | re.MULTILINE,
)
# Words that turn an answer into a list of candidates.
# (Not "\\pm": "1 \\pm \\sqrt{19}" is one answer, written that way by MATH's own reference solutions.)
HEDGE_RE = re.compile(r"(?=[ompe\\?])(?:\bor\b|\\lor\b|\bmaybe\b|\bperhaps\b|\beither\b|\?)", re.IGNORECASE)
# Plus-or-minus: two values. A GSM8K number after it ("#### \\pm 18") is a hedge; a MATH answer with it compares
# only with a gold that has it too (rewards.verify), since math-verify reads "18 \\pm" as 18.
PLUS_MINUS_RE = re.compile(r"\\pm(?![a-zA-Z])|\\mp(?![a-zA-Z])|[±∓]")
# A fraction as a GSM8K final answer, read as the number it is: "3/4" and "3 / 4" are 0.75, "-3/4" is -0.75, a mixed
# number "1 1/2" is one and a half, "\\frac{3}{4}" is 0.75. Whole numerator and denominator only: "1.5/2", "1,000/4" and
# "1/2/3" stay arithmetic (EXPRESSION_RE), which is not an answer.
FRACTION_RE = re.compile(
    r"(?=[-\s$\d\\])(?:(?<![\d.,/])(?P<sign>-?)\s?\$?(?:(?P<whole>\d+)\s+)?(?P<num>\d+)\s*/\s*(?P<den>\d+)(?![\d.,]|\s*/)"
    r"|(?P<fsign>-?)\s?\\[dt]?frac\{\s*(?P<fnum>\d+)\s*\}\{\s*(?P<fden>\d+)\s*\})"
)
# A fraction as the extractor writes one ("1/3", "-2/7").
FRACTION_TEXT_RE = re.compile(rf"\s*(-?)\s*(\d{{1,{MAX_NUMBER_CHARS}}})\s*/\s*(\d{{1,{MAX_NUMBER_CHARS}}})\s*")
# Arithmetic in a GSM8K answer: "#### 2\\sqrt(2)", "#### 7+7", "#### 3 \\times 3" hold one distinct number (2, 7, 3)
# but are not that number.
EXPRESSION_RE = re.compile(r"\\(?:sqrt|[dt]?frac|times|cdot|div)(?![a-zA-Z])|[\^*/×÷]|\d\s*\+")
TASKS = ("gsm8k", "math")
# How a prompt shows the final-answer format. Never a value a gold can be: small models copy the example, and a copied
# "#### 42" would be paid on every problem whose answer is 42 (``rewards.probes``: ``prompt_example``).
FORMAT_EXAMPLES = {"gsm8k": "#### <number>", "math": "\\boxed{}"}


@dataclass(frozen=True)
class Answer:
    """What a completion answered: ``value`` is None when it did not commit to one answer (see ``reason``)."""

    value: str | None
    # "ok", "no_marker", "empty", "hedge", "conflicting_markers", "expression" (arithmetic after a GSM8K marker),
    # "multi_part" (boxes joined as parts of one answer: only a gold of that many parts can equal it),
    # "unfinished_think" (the completion opened a <think> block and never closed it);
    # "timeout", "checker_error" or "refused" when comparing the boxes with each other gave no verdict (rewards.verify)
    reason: str
    marker: str | None = None  # "####", "boxed", "answer_line"
    n_markers: int = 0
    end: int = -1  # index in the completion just past the final answer (for format checks)
    raw: str | None = None  # the last marker's content even when it is not an answer ("17 or 18")
    parts: tuple[str, ...] = ()  # a "multi_part" answer's boxes, in order ("x = \\boxed{2} and x = \\boxed{-3}")

    @property
    def ok(self) -> bool:
        return self.value is not None


# Vulgar fractions ("½", "⅔"): NFKC writes "½" as "1⁄2", which would glue "1½" into "11⁄2"; a space keeps the mixed
# number apart ("1 1/2").
VULGAR_FRACTION_RE = re.compile("[\u00bc-\u00be\u2150-\u215e]")


def normalize_text(text: str) -> str:
    """NFKC folds unicode digits and full-width signs ("１８" -> "18") and strips zero-width characters; a vulgar
    fraction and the fraction slash are written with "/" ("1½" -> "1 1/2")."""
    text = VULGAR_FRACTION_RE.sub(lambda m: " " + m.group(), text)
    text = unicodedata.normalize("NFKC", text)
    return text.replace("\u200b", "").replace("\u2212", "-").replace("\u2044", "/")


def normalize_number(raw: str) -> str | None:
    """Canonical string of a number: ``"$1,234.00."`` -> ``"1234"``, ``"-0.50"`` -> ``"-0.5"``; None if not one.

    >>> normalize_number("18.00"), normalize_number("$1,000"), normalize_number("- 3"), normalize_number("abc")
    ('18', '1000', '-3', None)

    A negative exponent is a number (``str(0.00001)`` is ``"1e-05"``); a hyphen anywhere else is a range:

    >>> normalize_number(str(0.00001)), normalize_number("-2.5E-1"), normalize_number("1-2"), normalize_number("1e-3-2")
    ('0.00001', '-0.25', None, None)
    """
    s = normalize_text(raw).strip().rstrip(".").replace("$", "").replace(",", "").replace(" ", "")
    if len(s) > MAX_NUMBER_CHARS:
        return None
    signs = re.sub(r"(?<=\d)[eE]-(?=\d)", "e", s)  # the sign of an exponent is not a range's hyphen
    if signs.count("-") > 1 or ("-" in signs and not signs.startswith("-")):
        return None
    try:
        d = Decimal(s)
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    try:
        d = d.normalize()
        if d == d.to_integral_value():
            return str(d.quantize(Decimal(1)))
        return format(d, "f")
    except InvalidOperation:  # 1e999 and the like: beyond Decimal's precision, not an answer
        return None


def exact_text(value: Fraction) -> str:
    """An exact value as the extractor writes it: a decimal when it has one, else the reduced fraction.

    >>> exact_text(Fraction(6, 8)), exact_text(Fraction(-3, 2)), exact_text(Fraction(18)), exact_text(Fraction(2, 6))
    ('0.75', '-1.5', '18', '1/3')
    """
    q = value.denominator
    twos = fives = 0
    while q % 2 == 0:
        q, twos = q // 2, twos + 1
    while q % 5 == 0:
        q, fives = q // 5, fives + 1
    if q != 1:  # no finite decimal: 1/3 is not 0.33
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    digits = str(abs(value.numerator) * 10**places // value.denominator).rjust(places + 1, "0")
    text = f"{digits[:-places]}.{digits[-places:]}" if places else digits
    return f"-{text}" if value < 0 else text


def exact_number(text: str | None) -> Fraction | None:
    """The exact value of a number or of a fraction ``p/q``; None when it is neither (or divides by zero).

    >>> exact_number("0.75") == exact_number("3/4"), exact_number("0.33") == exact_number("1/3"), exact_number("1/0")
    (True, False, None)
    """
    if text is None:
        return None
    number = normalize_number(text)
    if number is not None:
        return Fraction(number)
    m = FRACTION_TEXT_RE.fullmatch(text)
    if m is None or int(m.group(3)) == 0:
        return None
    return Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1)


def fraction_value(m: re.Match) -> Fraction | None:
    """The value of a ``FRACTION_RE`` match, or None when it divides by zero or is too long to be an answer."""
    sign, whole, num, den = (m.group(k) for k in ("sign", "whole", "num", "den"))
    if num is None:  # \frac{num}{den}
        sign, num, den = m.group("fsign"), m.group("fnum"), m.group("fden")
    if any(part and len(part) > MAX_NUMBER_CHARS for part in (whole, num, den)) or int(den) == 0:
        return None
    value = int(whole or 0) + Fraction(int(num), int(den))
    return -value if sign else value


# Emphasis around an answer changes nothing: "**73**", "*73*", "__73__", "<b>73</b>", "\\textbf{73}". Markdown's
# delimiters count only where they wrap something ("2**3" is a power, not bold).
MARKDOWN_EMPHASIS_RE = re.compile(r"(?<![\w*])(\*{1,3}|_{1,3})(?=\S)(.+?)(?<=\S)\1(?![\w*])")
HTML_EMPHASIS_RE = re.compile(r"<(b|strong|em|i|u|mark)\s*>(.*?)</\1\s*>", re.IGNORECASE | re.DOTALL)
LATEX_EMPHASIS_RE = re.compile(r"\\(?:textbf|textit|emph|underline|boldsymbol|bm)\s*\{([^{}]*)\}")
# What is left of a bold line cut by the marker ("**#### 73**" leaves "73**").
_STRAY = r"(?:\s|\*|_|</?(?:b|strong|em)\s*>)+"
STRAY_EMPHASIS_RE = re.compile(rf"^{_STRAY}|{_STRAY}$", re.IGNORECASE)

# strip_emphasis stays linear in the text: ``re.sub`` with the first two regexes is quadratic in a box of thousands of
# unclosed "*" or "<b>", so ``_markdown_matches`` and ``_html_matches`` find the same matches trying an opener only
# where a closer of its kind follows it; and the passes that take delimiters off the same runs are made at once.
_MARKDOWN_OPENER_RE = re.compile(r"(?<![\w*])(?:\*++|_++)")  # a whole run that may open emphasis
# the same for the other delimiter than the one given
_MARKDOWN_OPENER_OF = {"_": re.compile(r"(?<![\w*])\*++"), "*": re.compile(r"(?<![\w*])_++")}
_MARKDOWN_OF_WIDTH = {  # MARKDOWN_EMPHASIS_RE with a delimiter of exactly 1, 2 or 3 characters
    width: re.compile(rf"(?<![\w*])(\*{{{width}}}|_{{{width}}})(?=\S)(.+?)(?<=\S)\1(?![\w*])") for width in (1, 2, 3)
}
# A closer reversed: the end of a run (no word character or "*" after it), preceded by a non-space.
_MARKDOWN_CLOSER_REVERSED_RE = {
    (char, width): re.compile(rf"(?<![\w*]){re.escape(char)}{{{width}}}(?=\S)") for char in "*_" for width in (1, 2, 3)
}
_DELIMITER_RUN_RE = {"*": re.compile(r"\*+"), "_": re.compile(r"_+")}
# A markdown pass over runs of delimiters this long or longer depends on where the runs are, not on their length.
RUN_STEADY_CHARS = 7
_HTML_OPENER_RE = re.compile(r"<(b|strong|em|i|u|mark)\s*>", re.IGNORECASE)


def _markdown_matches(text: str) -> list[re.Match]:
    """The matches ``MARKDOWN_EMPHASIS_RE.sub`` replaces."""
    if "*" not in text and "_" not in text:
        return []
    n = len(text)
    matches: list[re.Match] = []
    pos = 0
    line_start = line_end = -1
    reversed_text = ""
    last_closer: dict[tuple[str, int], int] = {}  # on the current line: where its last closer of each kind starts
    done_chars = ""  # delimiters no opener of which can match in the rest of the current line

    def last(char: str, width: int) -> int:
        if (char, width) not in last_closer:
            found = _MARKDOWN_CLOSER_REVERSED_RE[char, width].search(reversed_text, n - line_end, n - line_start)
            last_closer[char, width] = -1 if found is None else n - found.end()
        return last_closer[char, width]

    while pos < n:
        if done_chars:  # the rest of the line for the other delimiter only
            opener = None if len(done_chars) == 2 else _MARKDOWN_OPENER_OF[done_chars].search(text, pos, line_end)
            if opener is None:
                pos, done_chars = line_end, ""
                continue
        elif (opener := _MARKDOWN_OPENER_RE.search(text, pos)) is None:
            break
        start, pos = opener.span()
        if start >= line_end:
            line_start, line_end = text.rfind("\n", 0, start) + 1, text.find("\n", start)
            line_end = n if line_end == -1 else line_end
            last_closer.clear()
            reversed_text = reversed_text or text[::-1]
        char = text[start]
        for width in range(min(3, pos - start), 0, -1):  # as the regex backtracks: the widest delimiter first
            inner = start + width
            if inner >= n or text[inner].isspace() or last(char, width) <= inner:
                continue
            match = _MARKDOWN_OF_WIDTH[width].match(text, start)
            if match is not None:
                matches.append(match)
                pos = match.end()
                break
        else:
            if max(last(char, width) for width in (1, 2, 3)) <= pos + 1:  # nothing left to close this delimiter
                done_chars += char
    return matches


def _markdown_repeats(text: str, matches: list[re.Match]) -> int:
    """How many passes after this one take the same delimiters off the same runs (when nothing else changes): a pass
    is the same while every run it shortens is ``RUN_STEADY_CHARS`` long or longer."""
    reversed_text = text[::-1]
    repeats = len(text)
    for match in matches:
        delimiter = match.group(1)
        run = _DELIMITER_RUN_RE[delimiter[0]]
        opener_run = run.match(text, match.start()).end() - match.start()
        if match.start() + opener_run == match.end():  # the same run opens and closes
            shortened = [(opener_run, 2 * len(delimiter))]
        else:
            closer_run = run.match(reversed_text, len(text) - match.end()).end() - (len(text) - match.end())
            shortened = [(opener_run, len(delimiter)), (closer_run, len(delimiter))]
        for length, step in shortened:
            if length < RUN_STEADY_CHARS:
                return 0
            repeats = min(repeats, (length - RUN_STEADY_CHARS) // step)
    return repeats


def _tag_key(name: str) -> str:
    """Tag names that close each other under IGNORECASE (the regex engine's per-character lower case)."""
    return name.replace("\u0130", "i").lower()


@functools.cache
def _closer_reversed_re(key: str) -> re.Pattern:
    """The closing tag of a key (``_tag_key``), reversed."""
    letters = {"i": "[iI\u0130]", "k": "[kK\u212a]"}
    name = "".join(letters.get(c, f"[{c}{c.upper()}]" if c.isascii() else c) for c in reversed(key))
    return re.compile(rf">\s*{name}/<")


def _html_matches(text: str) -> list[re.Match]:
    """The matches ``HTML_EMPHASIS_RE.sub`` replaces."""
    if "<" not in text:
        return []
    matches: list[re.Match] = []
    pos = 0
    reversed_text = ""
    last_closer: dict[str, int] = {}  # where the text's last closing tag of each key ends
    while (opener := _HTML_OPENER_RE.search(text, pos)) is not None:
        start, pos = opener.span()
        key = _tag_key(opener.group(1))
        if key not in last_closer:
            reversed_text = reversed_text or text[::-1]
            found = _closer_reversed_re(key).search(reversed_text)
            last_closer[key] = -1 if found is None else len(text) - found.start()
        if last_closer[key] <= pos:
            continue
        match = HTML_EMPHASIS_RE.match(text, start)
        if match is not None:
            matches.append(match)
            pos = match.end()
    return matches


def _copies(text: str, token: str, start: int, most: int, backwards: bool = False) -> int:
    """How many copies of ``token`` follow one another from ``start`` on (or end at it), counting up to ``most``."""
    step = -len(token) if backwards else len(token)
    pos, count = start + step if backwards else start, 0
    while count < most and pos >= 0 and text.startswith(token, pos):
        pos, count = pos + step, count + 1
    return count


def _fewest_copies(count) -> int:
    """The smallest of ``count(most)`` over the matches, counting no further than needed (doubling ``most``)."""
    most = 4
    while (fewest := count(most)) >= most:
        most *= 2
    return fewest


def _html_repeats(text: str, matches: list[re.Match]) -> int:
    """How many passes after this one pair the next copies of the same tags (when nothing else changes):
    ``<b><b><b>x</b></b></b>`` loses its first ``<b>`` and first ``</b>`` a pass."""

    def count(most: int) -> int:
        return min(
            min(
                _copies(text, text[m.start() : m.start(2)], m.start(), most),
                _copies(text, text[m.end(2) : m.end()], m.end(2), most),
            )
            for m in matches
        )

    return max(_fewest_copies(count) - 2, 0)


def _latex_repeats(text: str, matches: list[re.Match]) -> int:
    """How many passes after this one unwrap the next copies of the same commands (when nothing else changes)."""

    def count(most: int) -> int:
        return min(
            min(
                _copies(text, text[m.start() : m.start(1)], m.start(1), most, backwards=True),
                _copies(text, "}", m.end(1), most),
            )
            for m in matches
        )

    return max(_fewest_copies(count) - 1, 0)


def _unwrap(text: str, pieces: list[tuple[int, int, int, int]]) -> str:
    """``text`` with each piece ``(cut, keep_start, keep_end, resume)`` replaced: ``text[cut:resume]`` by
    ``text[keep_start:keep_end]``."""
    out, done = [], 0
    for cut, keep_start, keep_end, resume in pieces:
        out += (text[done:cut], text[keep_start:keep_end])
        done = resume
    return "".join(out) + text[done:] if out else text


def _markdown_pass(text: str, matches: list[re.Match], repeats: int = 0) -> str:
    """``MARKDOWN_EMPHASIS_RE.sub(r"\\2", text)`` given its matches; and ``repeats`` more passes like it."""
    pieces = []
    for m in matches:
        width = len(m.group(1)) * repeats
        pieces.append((m.start(), m.start(2) + width, m.end(2) - width, m.end()))
    return _unwrap(text, pieces)


def _html_pass(text: str, matches: list[re.Match], repeats: int = 0) -> str:
    """``HTML_EMPHASIS_RE.sub(r"\\2", text)`` given its matches; and ``repeats`` more passes like it."""
    pieces = []
    for m in matches:
        opener, closer = m.start(2) - m.start(), m.end() - m.end(2)
        pieces.append((m.start(), m.start(2) + repeats * opener, m.end(2), m.end() + repeats * closer))
    return _unwrap(text, pieces)


def _latex_pass(text: str, matches: list[re.Match], repeats: int = 0) -> str:
    """``LATEX_EMPHASIS_RE.sub(r"\\1", text)`` given its matches; and ``repeats`` more passes like it."""
    pieces = []
    for m in matches:
        opener = m.start(1) - m.start()
        pieces.append((m.start() - repeats * opener, m.start(1), m.end(1), m.end() + repeats))
    return _unwrap(text, pieces)


def strip_emphasis(text: str) -> str:
    """The text without emphasis markup around its parts.

    >>> strip_emphasis("**73**"), strip_emphasis("<b>73</b>"), strip_emphasis("\\\\textbf{73}"), strip_emphasis("2**3")
    ('73', '73', '73', '2**3')
    """
    previous = None
    while previous != text:  # nested emphasis ("**<b>73</b>**") unwraps layer by layer
        previous = text
        markdown = _markdown_matches(text)
        text = _markdown_pass(text, markdown)
        html = _html_matches(text)
        text = _html_pass(text, html)
        latex = list(LATEX_EMPHASIS_RE.finditer(text)) if "\\" in text else []
        text = _latex_pass(text, latex)
        # A pass that unwrapped only one kind of emphasis: the passes that follow unwrap the next layers of the same
        # runs of it, the same way, as long as the runs last; they are made at once.
        if markdown and not html and not latex and (repeats := _markdown_repeats(previous, markdown)):
            text = _markdown_pass(previous, markdown, repeats)
        elif html and not markdown and not latex and (repeats := _html_repeats(previous, html)):
            text = _html_pass(previous, html, repeats)
        elif latex and not markdown and not html and (repeats := _latex_repeats(previous, latex)):
            text = _latex_pass(previous, latex, repeats)
    return text


def _single_number(segment: str) -> tuple[str | None, str]:
    """The one number a marker's segment holds, else why not (``empty``, ``hedge`` or ``expression``)."""
    segment = STRAY_EMPHASIS_RE.sub("", strip_emphasis(segment.strip()))
    segment = LATEX_DIGIT_GROUP_RE.sub(" ", segment.replace("{,}", ","))
    if not segment:
        return None, "empty"
    if HEDGE_RE.search(segment) or PLUS_MINUS_RE.search(segment):
        return None, "hedge"
    # A fraction is a number ("3/4"); arithmetic around it is not ("3/4 + 1": the fraction stands in as a digit).
    fractions = [fraction_value(m) for m in FRACTION_RE.finditer(segment)]
    if EXPRESSION_RE.search(FRACTION_RE.sub(" 0 ", segment)) or None in fractions:  # "1/0" is no number
        return None, "expression"
    numbers = ANSWER_NUMBER_RE.findall(FRACTION_RE.sub(" ", segment))
    if not numbers and not fractions:
        return None, "empty"
    values = {Fraction(v) for v in map(normalize_number, numbers) if v is not None} | set(fractions)
    if len(values) != 1:  # "3/4 = 0.75" is one value; "3/4 or 0.8" was a hedge above
        return None, "hedge"
    return exact_text(values.pop()), "ok"


def _extract_gsm8k(text: str) -> Answer:
    positions = [m.start() for m in re.finditer(re.escape(GSM8K_MARKER), text)]
    if not positions:
        return Answer(None, "no_marker")
    segments = []
    for pos in positions:
        start = pos + len(GSM8K_MARKER)
        line_end = text.find("\n", start, start + MAX_SEGMENT_CHARS)
        line_end = min(len(text), start + MAX_SEGMENT_CHARS) if line_end == -1 else line_end
        next_marker = text.find(GSM8K_MARKER, start, line_end)
        line_end = line_end if next_marker == -1 else next_marker
        # "#### 18 dollars" is fine; only the first line after the marker counts.
        segments.append(text[start:line_end])
    last_end, segment = line_end, segments[-1]
    value, reason = _single_number(segment)
    if value is not None:
        # Every marker that commits to a number must commit to this one. A thousand "#### 18" lines are read once.
        read = {segment}
        for other in reversed(segments):
            if other not in read:
                read.add(other)
                if _single_number(other)[0] not in (None, value):
                    return Answer(None, "conflicting_markers", GSM8K_MARKER, len(positions), last_end, segment.strip())
    return Answer(value, reason, GSM8K_MARKER, len(positions), last_end, segment.strip())


def find_boxed(text: str) -> list[tuple[str, int, int]]:
    """Every brace-balanced ``\\boxed{...}``/``\\fbox{...}``: (content, start, end). Unbalanced ones are skipped.

    >>> [c for c, _, _ in find_boxed("\\\\boxed{\\\\frac{1}{2}} and \\\\fbox{3} and \\\\boxed{4")]
    ['\\\\frac{1}{2}', '3']
    """
    return [(_box_content(text, box), box.start, box.end) for box in _box_spans(text)]


class _Box(NamedTuple):
    """Where a box is: ``text[start:end]`` is all of it, ``text[inner:inner_end]`` its content (before ``strip``)."""

    start: int
    end: int
    inner: int
    inner_end: int


_BOX_TOKEN_RE = re.compile(r"[^\s$]+")
_WHITESPACE_RE = re.compile(r"\s*")


def _box_spans(text: str) -> list[_Box]:
    """``find_boxed`` as positions, sliced only when read (nested boxes would copy the text once per level)."""
    first = min((pos for pos in map(text.find, BOX_COMMANDS) if pos != -1), default=-1)
    if first == -1:
        return []
    closing = _matching_braces(text, first)  # the braces before the first box match none of a box's
    found = []
    for command in BOX_COMMANDS:
        start = first
        while (pos := text.find(command, start)) != -1:
            i = pos + len(command)
            start = i
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == "{":
                j = closing.get(i, -1)
                if j != -1:
                    found.append(_Box(pos, j + 1, i + 1, j))
            elif i > pos + len(command) and i < len(text):  # "\boxed 5": one token after a space
                m = _BOX_TOKEN_RE.match(text, i, i + MAX_SEGMENT_CHARS)
                if m:
                    found.append(_Box(pos, m.end(), i, m.end()))
    return sorted(found)  # by where they start


def _box_content(text: str, box: _Box) -> str:
    return text[box.inner : box.inner_end].strip()


_BRACE_RE = re.compile(r"[{}]")


def _matching_braces(text: str, start: int = 0) -> dict[int, int]:
    """Index of each ``{`` from ``start`` on -> index of its matching ``}``, in one pass (unmatched ones are absent)."""
    stack, closing = [], {}
    for match in _BRACE_RE.finditer(text, start):
        pos = match.start()
        if text[pos] == "{":
            stack.append(pos)
        elif stack:
            closing[stack.pop()] = pos
    return closing


def _canonical_box(content: str) -> str:
    return re.sub(
        r"\s+|\\[,;! ]|\\text\{\s*\}|\\(?:d|t)frac", lambda m: "\\frac" if "frac" in m.group(0) else "", content
    )


HEDGE_GAP_CHARS = 40  # two different boxes this close are a list of candidates ("hedge"), further apart a conflict
MAX_DISTINCT_BOXES = 2  # more different boxes than this are not compared with math-verify: they conflict anyway


PLACEHOLDER_RE = re.compile(r"\\phantom\{[^{}]*\}|\\(?:h|v)space\{[^{}]*\}|\\(?:q?quad|square|Box)\b|\\[,;:! ]|[~_\s]")
# Placeholders one after another, as PLACEHOLDER_RE.sub finds them (each the first alternative that matches, never
# taken back): its end is where the first character that is no placeholder stands.
_PLACEHOLDERS_RE = re.compile(rf"(?:{PLACEHOLDER_RE.pattern})*+")


def _is_placeholder(content: str) -> bool:
    """A blank to fill in, as questions write it (``\\boxed{\\phantom{2}}``), not an answer.

    >>> _is_placeholder("\\phantom{2}"), _is_placeholder("\\quad"), _is_placeholder("4")
    (True, True, False)
    """
    return not PLACEHOLDER_RE.sub("", content)


def _is_filled(text: str, box: _Box) -> bool:
    """``c and not _is_placeholder(c)`` for the box's content ``c``, reading no further than its first character that
    is no placeholder."""
    start = _WHITESPACE_RE.match(text, box.inner, box.inner_end).end()  # what .strip() keeps starts here
    if start == box.inner_end:
        return False  # empty
    if _PLACEHOLDERS_RE.match(text, start, box.inner_end).end() < box.inner_end:
        return True  # a character that is no placeholder, before the whitespace .strip() drops
    end = box.inner_end
    while text[end - 1].isspace():
        end -= 1
    # all placeholders up to the box's end: so is the stripped content, unless .strip() cut a "\\ " in two
    return text[end - 1] == "\\"


def _is_hedge(content: str) -> bool:
    """A box that offers candidates or doubts its answer; words in ``\\text{}`` are units or labels unless they hedge.

    >>> _is_hedge("12 \\text{ cm}"), _is_hedge("17 \\text{ OR } 18"), _is_hedge("18 \\text{ (perhaps)}")
    (False, True, True)
    """
    return bool(
        HEDGE_RE.search(re.sub(r"\\text\{([^{}]*)\}", lambda m: " or " if HEDGE_RE.search(m.group(1)) else "", content))
    )


def _box_answer(content: str) -> str:
    """A box's content as an answer: emphasis unwrapped, a sentence's full stop dropped (``\\boxed{13/4.}``)."""
    return re.sub(r"(?<![.\\])\.\s*$", "", strip_emphasis(content)).strip()


# Between two boxes that are parts of ONE answer ("x = \\boxed{2} \\text{ and } x = \\boxed{-3}", one per line under
# "the solutions are"): only joining words, punctuation, line breaks, maths delimiters and "x =" labels.
PART_JOINER_RE = re.compile(
    r"(?:\s|[,;&.]|\band\b|\balso\b|\\text\{\s*(?:,|;|and|also)?\s*\}|\\(?:q?quad|[,;:! ])|\$|\\[()\[\]]|\\\\"
    r"|\b[a-zA-Z](?:_\{?\w+\}?)?\s*=|[-*]\s|\(\w\)|\b\d\)\s)*",
    re.IGNORECASE,
)
MAX_PARTS = 6  # more boxes than this in one answer are not a multi-part answer


def _final_parts(text: str, boxes: list[_Box]) -> list[int]:
    """Indices of the boxes that end the completion joined as parts of one answer (at least the last box)."""
    chain = [len(boxes) - 1]
    for i in range(len(boxes) - 2, -1, -1):
        if boxes[i].end > boxes[i + 1].start:  # a box inside a box is not a second part
            break
        if boxes[i + 1].start - boxes[i].end > HEDGE_GAP_CHARS:
            break
        if not PART_JOINER_RE.fullmatch(text[boxes[i].end : boxes[i + 1].start]):  # a slice: "\\b" at its edges
            break
        chain.append(i)
    return chain[::-1]


def _extract_math(text: str, compare_boxes: bool = True) -> Answer:
    spans = _box_spans(text)
    if not spans:
        return Answer(None, "no_marker")
    # An empty box or a blank to fill in is no answer (a model echoing "...within \\boxed{}"): a filled one before is.
    boxes = [box for box in spans if _is_filled(text, box)]
    if not boxes:
        return Answer(None, "empty", "boxed", len(spans), spans[-1].end, _box_content(text, spans[-1]))
    # A box's answer is read only when a verdict needs it: boxes nested a thousand deep hold the text a thousand times.
    read: dict[int, tuple[str, str]] = {}  # box -> (answer, canonical answer)
    by_content: dict[str, tuple[str, str]] = {}  # a thousand boxes around one content are read once

    def read_box(i: int) -> tuple[str, str]:
        if i not in read:
            content = _box_content(text, boxes[i])
            if content not in by_content:
                answer = _box_answer(content)
                by_content[content] = (answer, _canonical_box(answer))
            read[i] = by_content[content]
        return read[i]

    def answer(i: int) -> str:
        return read_box(i)[0]

    def canonical_answer(i: int) -> str:
        return read_box(i)[1]

    last = len(boxes) - 1
    content, start, end = answer(last), boxes[last].start, boxes[last].end
    if not content:
        return Answer(None, "empty", "boxed", len(boxes), end, content)
    if _is_hedge(content):
        return Answer(None, "hedge", "boxed", len(boxes), end, content)
    chain = _final_parts(text, boxes)
    parts: dict[str, None] = {}
    for i in reversed(chain):  # more different parts than MAX_PARTS are no multi-part answer: no need to read on
        parts[canonical_answer(i)] = None
        if len(parts) > MAX_PARTS:
            break
    if 1 < len(parts) <= MAX_PARTS:
        # Several different boxes joined as parts of one answer: a multi-part answer, which only a gold of that many
        # parts can equal (``rewards.verify.check``). Every earlier box must be one of the parts.
        values = tuple(dict.fromkeys(answer(i) for i in chain))
        if (
            len(values) <= MAX_PARTS
            and not any(_is_hedge(v) for v in values)
            and all(canonical_answer(i) in parts for i in range(chain[0]))
        ):
            return Answer(None, "multi_part", "boxed", len(boxes), end, ", ".join(values), parts=values)
    # Every box must hold the same answer, as every "####" must in GSM8K: "\boxed{17} or \boxed{18}", or a box
    # around the gold in the reasoning and another around a different final answer, commit to no one answer. The
    # same answer written two ways ("\boxed{15\frac{39}{40}}, or \boxed{\frac{639}{40}}", as a MATH reference
    # solution does) is one answer. Read from the last box back, and only until the verdict is known.
    most = MAX_DISTINCT_BOXES if compare_boxes else 0  # more different boxes than this: a hedge or a conflict
    others: set[str] = set()
    for i in range(last - 1, -1, -1):
        if canonical_answer(i) != canonical_answer(last):
            others.add(canonical_answer(i))
            if len(others) > most:
                break
    if others:
        reason = "hedge" if start - boxes[last - 1].end <= HEDGE_GAP_CHARS else "conflicting_markers"
        if len(others) > most:
            return Answer(None, reason, "boxed", len(boxes), end, content)
        from rewards.verify import NO_VERDICT_REASONS, TIME_BUDGET_S, Verdict, compare_answers  # verify imports us

        others = {canonical_answer(i) for i in range(last)} - {canonical_answer(last)}  # built in the box order
        budget = TIME_BUDGET_S / len(others)  # the whole completion stays within one comparison's budget
        for other in others:
            verdict = compare_answers(other, content, task="math", timeout=budget)
            if verdict is not Verdict.EQUAL:  # a timeout is no verdict: said as such, not as a hedge
                reason = NO_VERDICT_REASONS.get(verdict, reason)
                return Answer(None, reason, "boxed", len(boxes), end, content)
    return Answer(content, "ok", "boxed", len(boxes), end, content)


def _extract_answer_line(text: str, task: str) -> Answer:
    matches = list(ANSWER_LINE_RE.finditer(text))
    if not matches:
        return Answer(None, "no_marker")
    m = matches[-1]
    segment = m.group(1).strip().rstrip(".")
    if task == "gsm8k":
        value, reason = _single_number(segment)
    else:
        segment = segment.strip("$ ")
        value, reason = (segment, "ok") if segment else (None, "empty")
        if value and _is_hedge(value):
            value, reason = None, "hedge"
    return Answer(value, reason, "answer_line", len(matches), m.end(), segment)


MAX_COMPLETION_CHARS = 200_000  # longer completions are runaways; only their tail can hold the final answer


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def answer_region(text: str) -> int | None:
    """Where a reasoning model's answer starts: after the last ``</think>`` (a pre-filled ``<think>`` leaves only that
    tag), 0 without think tags, None when a think block never closed (it has not answered yet).

    >>> answer_region("#### 8"), answer_region("<think>so 8</think>\\n#### 8"), answer_region("<think>so #### 8")
    (0, 19, None)
    """
    close = text.rfind(THINK_CLOSE)
    start = 0 if close == -1 else close + len(THINK_CLOSE)
    return None if THINK_OPEN in text[start:] else start


def extract_answer(
    completion: str | None,
    task: str = "gsm8k",
    answer_line: bool = False,
    think_tags: bool = True,
    compare_boxes: bool = True,
) -> Answer:
    """The final answer a completion commits to: after the LAST ``####`` (GSM8K) or in the LAST ``\\boxed{}`` (MATH).

    ``compare_boxes=False`` calls MATH boxes that differ as text a hedge or a conflict without asking math-verify.

    >>> extract_answer("<think>Maybe \\\\boxed{4}? Let me check", task="math").reason
    'unfinished_think'
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: use one of {TASKS}")
    if not completion:
        return Answer(None, "empty")
    text = normalize_text(completion[-MAX_COMPLETION_CHARS:])
    offset = 0
    if think_tags:
        offset = answer_region(text)
        if offset is None:
            return Answer(None, "unfinished_think")
        text = text[offset:]
    answer = _extract_gsm8k(text) if task == "gsm8k" else _extract_math(text, compare_boxes)
    if answer.reason == "no_marker" and answer_line:
        answer = _extract_answer_line(text, task)
    return replace(answer, end=answer.end + offset) if offset and answer.end >= 0 else answer


def gsm8k_gold(solution: str) -> str:
    """The gold number of a GSM8K reference solution (the text after its ``####``).

    >>> gsm8k_gold("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\\n#### 18")
    '18'
    """
    answer = _extract_gsm8k(normalize_text(solution))
    if answer.value is None:
        raise ValueError(f"GSM8K solution has no '#### N' final answer: {solution[-80:]!r}")
    return answer.value
