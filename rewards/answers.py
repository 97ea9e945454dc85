"""The one answer extractor: what "the model's final answer" is, for rewards, eval and probes alike.

A completion commits to a final answer in one of three ways:

- GSM8K style: ``#### 18`` -- the number after the LAST ``####`` marker;
- MATH style: ``\\boxed{...}`` (or ``\\fbox{...}``) -- the content of the LAST brace-balanced box;
- optionally, an explicit final-answer line such as ``Answer: 17`` (switched on per call, see ``answer_line``).

Anything that does not commit to ONE answer is not an answer: a hedge (``#### 17 or 18``, ``\\boxed{17} or
\\boxed{18}``), several markers that disagree, a marker with nothing after it. The whole completion is never
handed to math-verify: that would credit a restated question or any number in the text.

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

import re
import unicodedata
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from fractions import Fraction

GSM8K_MARKER = "####"
MAX_SEGMENT_CHARS = 500  # what follows a marker on its line; more is prose, and scanning it all is quadratic
MAX_NUMBER_CHARS = 100  # longer digit strings are not answers (and overflow Decimal arithmetic)
BOX_COMMANDS = ("\\boxed", "\\fbox")
# A number as models write it: sign, thousands separators, decimals (".5" is 0.5), optional currency sign.
NUMBER_RE = re.compile(r"-?\$?\s?-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")
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
HEDGE_RE = re.compile(r"(?:\bor\b|\\lor\b|\bmaybe\b|\bperhaps\b|\beither\b|\?)", re.IGNORECASE)
# Plus-or-minus: two values. A GSM8K number after it ("#### \\pm 18") is a hedge; a MATH answer with it compares
# only with a gold that has it too (rewards.verify), since math-verify reads "18 \\pm" as 18.
PLUS_MINUS_RE = re.compile(r"\\pm(?![a-zA-Z])|\\mp(?![a-zA-Z])|[±∓]")
# A fraction as a GSM8K final answer, read as the number it is: "3/4" and "3 / 4" are 0.75, "-3/4" is -0.75, a mixed
# number "1 1/2" is one and a half, "\\frac{3}{4}" is 0.75. Whole numerator and denominator only: "1.5/2", "1,000/4" and
# "1/2/3" stay arithmetic (EXPRESSION_RE), which is not an answer.
FRACTION_RE = re.compile(
    r"(?<![\d.,/])(?P<sign>-?)\s?\$?(?:(?P<whole>\d+)\s+)?(?P<num>\d+)\s*/\s*(?P<den>\d+)(?![\d.,]|\s*/)"
    r"|(?P<fsign>-?)\s?\\[dt]?frac\{\s*(?P<fnum>\d+)\s*\}\{\s*(?P<fden>\d+)\s*\}"
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
    """The exact value of a number (``normalize_number``) or of a fraction ``p/q`` as the extractor writes one; None
    when it is neither (or divides by zero). GSM8K answers compare by it: ``0.75`` equals ``3/4``, ``0.33`` is not
    ``1/3``.

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


def strip_emphasis(text: str) -> str:
    """The text without emphasis markup around its parts.

    >>> strip_emphasis("**73**"), strip_emphasis("<b>73</b>"), strip_emphasis("\\\\textbf{73}"), strip_emphasis("2**3")
    ('73', '73', '73', '2**3')
    """
    previous = None
    while previous != text:  # nested emphasis ("**<b>73</b>**") unwraps layer by layer
        previous = text
        text = MARKDOWN_EMPHASIS_RE.sub(r"\2", text)
        text = HTML_EMPHASIS_RE.sub(r"\2", text)
        text = LATEX_EMPHASIS_RE.sub(r"\1", text)
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
    values = []
    last_end, segment = -1, ""
    for pos in positions:
        start = pos + len(GSM8K_MARKER)
        line_end = text.find("\n", start, start + MAX_SEGMENT_CHARS)
        line_end = min(len(text), start + MAX_SEGMENT_CHARS) if line_end == -1 else line_end
        next_marker = text.find(GSM8K_MARKER, start, line_end)
        line_end = line_end if next_marker == -1 else next_marker
        segment = text[start:line_end]
        # "#### 18 dollars" is fine; only the first line after the marker counts.
        values.append(_single_number(segment))
        last_end = line_end
    value, reason = values[-1]
    if value is not None:
        committed = {v for v, _ in values if v is not None}
        if len(committed) > 1:
            return Answer(None, "conflicting_markers", GSM8K_MARKER, len(positions), last_end, segment.strip())
    return Answer(value, reason, GSM8K_MARKER, len(positions), last_end, segment.strip())


def find_boxed(text: str) -> list[tuple[str, int, int]]:
    """Every brace-balanced ``\\boxed{...}``/``\\fbox{...}``: (content, start, end). Unbalanced ones are skipped.

    >>> [c for c, _, _ in find_boxed("\\\\boxed{\\\\frac{1}{2}} and \\\\fbox{3} and \\\\boxed{4")]
    ['\\\\frac{1}{2}', '3']
    """
    closing = _matching_braces(text)
    found = []
    for command in BOX_COMMANDS:
        start = 0
        while (pos := text.find(command, start)) != -1:
            i = pos + len(command)
            start = i
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == "{":
                j = closing.get(i, -1)
                if j != -1:
                    found.append((text[i + 1 : j].strip(), pos, j + 1))
            elif i > pos + len(command) and i < len(text):  # "\boxed 5": one token after a space
                m = re.match(r"[^\s$]+", text[i : i + MAX_SEGMENT_CHARS])
                if m:
                    found.append((m.group(0), pos, i + m.end()))
    return sorted(found, key=lambda f: f[1])


def _matching_braces(text: str) -> dict[int, int]:
    """Index of each ``{`` -> index of its matching ``}``, in one pass (unmatched ones are absent)."""
    stack, closing = [], {}
    for match in re.finditer(r"[{}]", text):
        if match.group() == "{":
            stack.append(match.start())
        elif stack:
            closing[stack.pop()] = match.start()
    return closing


def _canonical_box(content: str) -> str:
    return re.sub(
        r"\s+|\\[,;! ]|\\text\{\s*\}|\\(?:d|t)frac", lambda m: "\\frac" if "frac" in m.group(0) else "", content
    )


HEDGE_GAP_CHARS = 40  # two different boxes this close are a list of candidates ("hedge"), further apart a conflict
MAX_DISTINCT_BOXES = 2  # more different boxes than this are not compared with math-verify: they conflict anyway


PLACEHOLDER_RE = re.compile(r"\\phantom\{[^{}]*\}|\\(?:h|v)space\{[^{}]*\}|\\(?:q?quad|square|Box)\b|\\[,;:! ]|[~_\s]")


def _is_placeholder(content: str) -> bool:
    """A blank to fill in, as questions write it (``\\boxed{\\phantom{2}}``), not an answer.

    >>> _is_placeholder("\\phantom{2}"), _is_placeholder("\\quad"), _is_placeholder("4")
    (True, True, False)
    """
    return not PLACEHOLDER_RE.sub("", content)


def _is_hedge(content: str) -> bool:
    """A box that offers candidates or doubts its answer. Words inside ``\\text{}`` are units or labels
    ("\\text{ cm}", "\\text{(A)}") and dropped, unless they hedge themselves ("\\text{ or }", "\\text{ maybe}").

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


def _final_parts(text: str, boxes: list[tuple[str, int, int]]) -> list[int]:
    """Indices of the boxes that end the completion joined as parts of one answer (at least the last box)."""
    chain = [len(boxes) - 1]
    for i in range(len(boxes) - 2, -1, -1):
        if boxes[i][2] > boxes[i + 1][1]:  # a box inside a box is not a second part
            break
        between = text[boxes[i][2] : boxes[i + 1][1]]
        if len(between) > HEDGE_GAP_CHARS or not PART_JOINER_RE.fullmatch(between):
            break
        chain.insert(0, i)
    return chain


def _extract_math(text: str, compare_boxes: bool = True) -> Answer:
    found = find_boxed(text)
    if not found:
        return Answer(None, "no_marker")
    # An empty box or a blank to fill in is no answer (a model echoing "...within \\boxed{}"): a filled one before is.
    boxes = [(_box_answer(c), start, end) for c, start, end in found if c and not _is_placeholder(c)]
    if not boxes:
        return Answer(None, "empty", "boxed", len(found), found[-1][2], found[-1][0])
    content, start, end = boxes[-1]
    if not content:
        return Answer(None, "empty", "boxed", len(boxes), end, content)
    if _is_hedge(content):
        return Answer(None, "hedge", "boxed", len(boxes), end, content)
    chain = _final_parts(text, boxes)
    parts = list(dict.fromkeys(_canonical_box(boxes[i][0]) for i in chain))
    if len(parts) > 1:
        # Several different boxes joined as parts of one answer: a multi-part answer, which only a gold of that many
        # parts can equal (``rewards.verify.check``). Every earlier box must be one of the parts.
        earlier = {_canonical_box(c) for c, _, _ in boxes[: chain[0]]}
        values = tuple(dict.fromkeys(boxes[i][0] for i in chain))
        if earlier <= set(parts) and len(values) <= MAX_PARTS and not any(_is_hedge(v) for v in values):
            return Answer(None, "multi_part", "boxed", len(boxes), end, ", ".join(values), parts=values)
    # Every box must hold the same answer, as every "####" must in GSM8K: "\boxed{17} or \boxed{18}", or a box
    # around the gold in the reasoning and another around a different final answer, commit to no one answer. The
    # same answer written two ways ("\boxed{15\frac{39}{40}}, or \boxed{\frac{639}{40}}", as a MATH reference
    # solution does) is one answer.
    others = {_canonical_box(c) for c, _, _ in boxes[:-1]} - {_canonical_box(content)}
    if others:
        reason = "hedge" if start - boxes[-2][2] <= HEDGE_GAP_CHARS else "conflicting_markers"
        if len(others) > MAX_DISTINCT_BOXES or not compare_boxes:
            return Answer(None, reason, "boxed", len(boxes), end, content)
        from rewards.verify import NO_VERDICT_REASONS, TIME_BUDGET_S, Verdict, compare_answers  # verify imports us

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
    """Where a reasoning model's answer starts: after the last ``</think>`` (R1-style output; a chat template that
    pre-fills ``<think>`` leaves only the closing tag in the completion), 0 when the completion uses no think tags,
    None when it opened a think block that never closed (it has not answered yet).

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
    """The final answer a completion commits to.

    Args:
        completion: the model's text (None or empty gives ``reason="empty"``).
        task: ``"gsm8k"`` (``#### N``) or ``"math"`` (``\\boxed{}``).
        answer_line: also accept an explicit ``Answer: X`` line when the task's own marker is absent.
        think_tags: where the completion uses ``<think>`` tags, read only what follows the last ``</think>``; a
            think block that never closes has no answer (``reason="unfinished_think"``). On by default.
        compare_boxes: MATH boxes that differ as text are compared with math-verify (``\\boxed{0.5}`` and
            ``\\boxed{\\frac{1}{2}}`` are one answer); ``False`` calls them a hedge or a conflict without asking
            (what the format reward needs: it pays only a completion with one box).

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
