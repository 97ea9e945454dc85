"""Hostile completions at a completion's full length: what a degenerate or adversarial policy writes over and over
until its token limit (nested, repeated and unclosed boxes, braces, maths delimiters, backslashes, markers, emphasis).

Each keeps its verdict (pinned below), the extractor reads each in time linear in its length, and the fast paths of
the extractor give what its plain definitions give (a reference copy of each, here, on drawn text).
``bench.rewards_fuzz`` scores a batch of them through the five answer rewards.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_hostile_shapes.py
"""

import hashlib
import random
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rewards.verify
from rewards import get_reward
from rewards.answers import (
    GSM8K_MARKER,
    HEDGE_GAP_CHARS,
    HTML_EMPHASIS_RE,
    LATEX_EMPHASIS_RE,
    MARKDOWN_EMPHASIS_RE,
    MAX_DISTINCT_BOXES,
    MAX_PARTS,
    MAX_SEGMENT_CHARS,
    PART_JOINER_RE,
    Answer,
    _box_answer,
    _box_spans,
    _canonical_box,
    _extract_gsm8k,
    _extract_math,
    _html_matches,
    _html_pass,
    _is_filled,
    _is_hedge,
    _is_placeholder,
    _markdown_matches,
    _markdown_pass,
    _matching_braces,
    _single_number,
    extract_answer,
    find_boxed,
    strip_emphasis,
)
from rewards.verify import Verdict, warm_up


def _repeat(unit: str, size: int, head: str = "", tail: str = "") -> str:
    """``unit`` repeated to about ``size`` characters between ``head`` and ``tail``."""
    return head + unit * max(1, (size - len(head) - len(tail)) // len(unit)) + tail


def _nest(opening: str, closing: str, size: int, inner: str = "5", head: str = "", tail: str = "") -> str:
    """``opening`` ... ``inner`` ... ``closing``, nested to about ``size`` characters."""
    depth = max(1, (size - len(inner) - len(head) - len(tail)) // (len(opening) + len(closing)))
    return head + opening * depth + inner + closing * depth + tail


def _numbered(size: int, unit) -> str:
    """``unit(0) unit(1) ...`` to about ``size`` characters."""
    out, length = [], 0
    while length < size:
        out.append(unit(len(out)))
        length += len(out[-1])
    return "".join(out)


# name: a completion of about ``size`` characters, one thing repeated.
HOSTILE_SHAPES = {
    "nested_boxes": lambda size: _nest("\\boxed{", "}", size),  # \boxed{\boxed{...\boxed{5}...}}
    "nested_fbox_boxed": lambda size: _nest("\\fbox{\\boxed{", "}}", size),  # both box commands
    "nested_boxes_of_blanks": lambda size: _nest("\\boxed{\\quad", "}", size),  # a placeholder at each level
    "unclosed_boxes": lambda size: _repeat("\\boxed{", size),  # no box closes
    "unclosed_boxes_after_box": lambda size: _repeat("\\boxed{", size, head="\\boxed{5} "),
    "boxes_same": lambda size: _repeat("\\boxed{7} ", size),  # one answer boxed a thousand times
    "boxes_different": lambda size: _numbered(size, lambda i: f"\\boxed{{{i}}} "),  # a thousand candidates
    "boxes_joined": lambda size: _numbered(size, lambda i: f"x = \\boxed{{{i}}}, "),  # as parts of one answer
    "boxes_unbraced": lambda size: _repeat("\\boxed 5 ", size),  # "\boxed 5": one token after a space
    "box_of_braces": lambda size: _nest("{", "}", size, head="\\boxed{", tail="}"),
    "open_braces": lambda size: _repeat("{", size, tail="\\boxed{5}"),
    "close_braces": lambda size: _repeat("}", size, tail="\\boxed{5}"),
    "dollars": lambda size: _repeat("$x$ ", size, tail="\\boxed{5}"),  # inline maths, then the answer
    "display_maths": lambda size: _repeat("\\[x\\]", size, tail="\\boxed{5}"),
    "boxed_in_dollars": lambda size: _repeat("$\\boxed{1}$, ", size),
    "nested_fractions_in_box": lambda size: _nest("\\frac{1}{", "}", size, inner="2", head="\\boxed{", tail="}"),
    "unclosed_fractions": lambda size: _repeat("\\frac{", size, tail="\\boxed{5}"),
    "text_in_box": lambda size: _repeat("\\text{ a}", size, head="\\boxed{", tail="}"),
    "unclosed_text_in_box": lambda size: _repeat("\\text{", size, head="\\boxed{", tail="}"),
    "backslashes_in_box": lambda size: _repeat("\\\\", size, head="\\boxed{", tail="}"),
    "backslashes": lambda size: _repeat("\\", size, tail="\\boxed{5}"),
    "markers": lambda size: _repeat("####", size, tail="\\boxed{5}"),  # "####" with nothing after it
    "marker_lines": lambda size: _repeat("#### 1\n", size, tail="\\boxed{5}"),  # a final answer on every line
    "answer_lines": lambda size: _repeat("The answer is 5.\n", size),
    "hedges_in_box": lambda size: _repeat("1 or ", size, head="\\boxed{", tail="2}"),
    "unclosed_bold_in_box": lambda size: _repeat("(*1 ", size, head="\\boxed{", tail="}"),  # "*" nothing closes
    "unclosed_underlines_in_box": lambda size: _repeat("(_1 ", size, head="\\boxed{", tail="}"),
    "unclosed_tags_in_box": lambda size: _repeat("<b>", size, head="\\boxed{", tail="}"),
    "stars_in_box": lambda size: _repeat("*", size, head="\\boxed{", tail="}"),  # one run of "*"
    "blank_in_box": lambda size: _repeat("_", size, head="\\boxed{x = ", tail="}"),  # a line to fill in
    "nested_bold_in_box": lambda size: _nest("**", "**", size, inner="x", head="\\boxed{", tail="}"),
    "nested_tags_in_box": lambda size: _nest("<b>", "</b>", size, inner="x", head="\\boxed{", tail="}"),
    "nested_textbf_in_box": lambda size: _nest("\\textbf{", "}", size, inner="x", head="\\boxed{", tail="}"),
    "think_tags": lambda size: _repeat("<think>", size),  # a think block opened and never closed
}
HOSTILE_GOLDS = ["5", "27", "1", "\\frac{7}{3}", "x"]


def hostile_completions(n: int, seed: int = 0, sizes: tuple[int, int] = (4_000, 16_000)) -> list[tuple[str, str]]:
    """``n`` (completion, gold) pairs: the shapes in turn, each at a length drawn from ``sizes`` (4-16 KB: a
    completion's token limit), against golds drawn from ``HOSTILE_GOLDS``. The same list for the same arguments.

    >>> [(len(c), g) for c, g in hostile_completions(2)]
    [(10305, '\\\\frac{7}{3}'), (4651, '1')]
    """
    rng = random.Random(seed)
    names = list(HOSTILE_SHAPES)
    return [(HOSTILE_SHAPES[names[i % len(names)]](rng.randint(*sizes)), rng.choice(HOSTILE_GOLDS)) for i in range(n)]


@pytest.fixture(scope="module", autouse=True)
def _workers():
    warm_up()


# The verdicts at 3,000 characters, as the extractor gave them before it read hostile text in linear time:
# (shape, MATH answer (value, or its length when long; reason; boxes), GSM8K answer (value, reason, markers),
# scores against the gold 5 of math_format, math_correctness, gsm8k_format, gsm8k_correctness, number_anywhere).
PINNED = [
    ("nested_boxes", (None, "hedge", 374), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.5)),
    ("nested_fbox_boxed", (None, "hedge", 398), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.5)),
    ("nested_boxes_of_blanks", (None, "hedge", 230), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.5)),
    ("unclosed_boxes", (None, "no_marker", 0), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    ("unclosed_boxes_after_box", ("5", "ok", 1), (None, "no_marker", 0), (0.0, 1.0, 0.0, 0.0, 0.5)),
    ("boxes_same", ("7", "ok", 300), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    ("boxes_different", (None, "hedge", 260), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.5)),
    ("boxes_joined", (None, "hedge", 183), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.5)),
    ("boxes_unbraced", ("5", "ok", 333), (None, "no_marker", 0), (0.0, 1.0, 0.0, 0.0, 0.5)),
    ("box_of_braces", (2991, "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.5)),
    ("open_braces", ("5", "ok", 1), (None, "no_marker", 0), (0.1, 1.0, 0.0, 0.0, 0.5)),
    ("close_braces", ("5", "ok", 1), (None, "no_marker", 0), (0.1, 1.0, 0.0, 0.0, 0.5)),
    ("dollars", ("5", "ok", 1), (None, "no_marker", 0), (0.1, 1.0, 0.0, 0.0, 0.5)),
    ("display_maths", ("5", "ok", 1), (None, "no_marker", 0), (0.1, 1.0, 0.0, 0.0, 0.5)),
    ("boxed_in_dollars", ("1", "ok", 230), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    ("nested_fractions_in_box", (2991, "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("unclosed_fractions", ("5", "ok", 1), (None, "no_marker", 0), (0.1, 1.0, 0.0, 0.0, 0.5)),
    ("text_in_box", (2988, "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("unclosed_text_in_box", (None, "no_marker", 0), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    ("backslashes_in_box", (2992, "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("backslashes", ("5", "ok", 1), (None, "no_marker", 0), (0.1, 1.0, 0.0, 0.0, 0.5)),
    ("markers", ("5", "ok", 1), ("5", "ok", 747), (0.1, 1.0, 0.0, 1.0, 0.5)),
    ("marker_lines", ("5", "ok", 1), ("1", "ok", 427), (0.1, 1.0, 0.0, 0.0, 0.5)),
    ("answer_lines", (None, "no_marker", 0), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.5)),
    ("hedges_in_box", (None, "hedge", 1), (None, "no_marker", 0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    ("unclosed_bold_in_box", (2991, "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("unclosed_underlines_in_box", (2991, "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("unclosed_tags_in_box", (2991, "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("stars_in_box", ("**", "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("blank_in_box", ("x = __", "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("nested_bold_in_box", ("x", "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("nested_tags_in_box", ("x", "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("nested_textbf_in_box", ("x", "ok", 1), (None, "no_marker", 0), (0.1, 0.0, 0.0, 0.0, 0.0)),
    ("think_tags", (None, "unfinished_think", 0), (None, "unfinished_think", 0), (0.0, 0.0, 0.0, 0.0, 0.0)),
]
REWARDS = ["math_format", "math_correctness", "gsm8k_format", "gsm8k_correctness", "number_anywhere"]


def test_every_shape_is_pinned():
    assert [name for name, *_ in PINNED] == list(HOSTILE_SHAPES)


@pytest.mark.parametrize("name, math, gsm8k, scores", PINNED, ids=[name for name, *_ in PINNED])
def test_a_hostile_shape_keeps_its_verdict(name, math, gsm8k, scores):
    text = HOSTILE_SHAPES[name](3_000)
    found = []
    for task in ("math", "gsm8k"):
        answer = extract_answer(text, task=task)
        value = answer.value if answer.value is None or len(answer.value) <= 12 else len(answer.value)
        found.append((value, answer.reason, answer.n_markers))
    assert found == [math, gsm8k]
    assert tuple(get_reward(reward)([text], answer=["5"])[0] for reward in REWARDS) == scores


def _cpu_seconds(fn, calls: int, rounds: int = 3) -> float:
    """The least CPU time of ``rounds`` rounds of ``calls`` calls: CPU time, not wall-clock, and the least of several,
    so that a busy machine changes it little."""
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        times.append(time.process_time() - start)
    return min(times)


# Each took time quadratic in its length before (about 15x the time for 4x the length): a box around every box, or
# emphasis that nothing closes or that nests (one layer unwrapped per pass over the whole text). And the "####" lines,
# each read before: linear, but 20x slower.
TIMED = [
    ("nested_boxes", "math"),
    ("nested_fbox_boxed", "math"),
    ("nested_boxes_of_blanks", "math"),
    ("unclosed_bold_in_box", "math"),
    ("unclosed_underlines_in_box", "math"),
    ("unclosed_tags_in_box", "math"),
    ("stars_in_box", "math"),
    ("blank_in_box", "math"),
    ("nested_bold_in_box", "math"),
    ("nested_tags_in_box", "math"),
    ("nested_textbf_in_box", "math"),
    ("marker_lines", "gsm8k"),
]


@pytest.mark.parametrize("name, task", TIMED, ids=[name for name, _ in TIMED])
def test_a_hostile_shape_costs_time_linear_in_its_length_fast(name, task):
    short, long = HOSTILE_SHAPES[name](4_000), HOSTILE_SHAPES[name](16_000)
    calls = 1
    while _cpu_seconds(lambda: extract_answer(short, task=task), calls, rounds=1) < 0.01:  # rounds of 10 ms or more
        calls *= 2
    ratio = _cpu_seconds(lambda: extract_answer(long, task=task), calls) / _cpu_seconds(
        lambda: extract_answer(short, task=task), calls
    )
    assert ratio < 8, f"{name}: 4x the length took {ratio:.1f}x the time"  # quadratic: about 16x


# The plain definitions the fast paths must agree with, on drawn text.


def _strip_emphasis_by_sub(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = MARKDOWN_EMPHASIS_RE.sub(r"\2", text)
        text = HTML_EMPHASIS_RE.sub(r"\2", text)
        text = LATEX_EMPHASIS_RE.sub(r"\1", text)
    return text


EMPHASIS_TOKENS = [
    "*", "**", "_", "__", "a", "x", "1", " ", "\n", "(", ".", "<b>", "</b>", "<B >", "</b\n>", "<i>", "</I>", "<ı>",
    "</ı>", "<İ>", "</i>", "<strong>", "</strong>", "<", ">", "/", "\\textbf{", "\\emph {", "{", "}", "\\", "\u00a0",
]  # fmt: skip
emphasis_text = st.lists(
    st.sampled_from(EMPHASIS_TOKENS)
    | st.builds(lambda token, times: token * times, st.sampled_from(EMPHASIS_TOKENS), st.integers(2, 12))
    | st.builds(lambda char, times: char * times, st.sampled_from("*_"), st.integers(2, 30)),
    max_size=16,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=emphasis_text)
def test_strip_emphasis_is_the_three_substitutions_to_a_fixed_point(text):
    assert _markdown_pass(text, _markdown_matches(text)) == MARKDOWN_EMPHASIS_RE.sub(r"\2", text)
    assert _html_pass(text, _html_matches(text)) == HTML_EMPHASIS_RE.sub(r"\2", text)
    assert strip_emphasis(text) == _strip_emphasis_by_sub(text)


@pytest.mark.parametrize(
    "text",
    [
        "*" * 50,  # one run: 8 passes of the plain definition, 1 here
        "x = " + "_" * 49,
        "<b>" * 9 + "x" + "</b>" * 9,
        "\\textbf{" * 9 + "x" + "}" * 9,
        "**" * 9 + "x" + "**" * 9 + " and " + "<b>" * 3 + "y" + "</b>" * 3,
        "<b>" + "_" * 38 + "</b>" + "_" * 21 + "1",  # the runs join once the tags go: no shortcut then
        "<*b*>" + "*" * 20 + "x</b>",  # a tag appears once its stars go
        "\\text*bf*{" + "\\textbf{" * 4 + "x" + "}" * 5,
    ],
)
def test_strip_emphasis_of_nested_emphasis_is_the_plain_definitions(text):
    assert strip_emphasis(text) == _strip_emphasis_by_sub(text)


def _find_boxed_plainly(text: str) -> list[tuple[str, int, int]]:
    closing = _matching_braces(text)
    found = []
    for command in ("\\boxed", "\\fbox"):
        start = 0
        while (pos := text.find(command, start)) != -1:
            i = start = pos + len(command)
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == "{":
                if closing.get(i, -1) != -1:
                    found.append((text[i + 1 : closing[i]].strip(), pos, closing[i] + 1))
            elif i > pos + len(command) and i < len(text):
                m = re.match(r"[^\s$]+", text[i : i + MAX_SEGMENT_CHARS])
                if m:
                    found.append((m.group(0), pos, i + m.end()))
    return sorted(found, key=lambda f: f[1])


def _extract_math_plainly(text: str, compare_boxes: bool) -> Answer:
    """``_extract_math`` reading every box, as it is defined."""
    found = _find_boxed_plainly(text)
    if not found:
        return Answer(None, "no_marker")
    boxes = [(_box_answer(c), start, end) for c, start, end in found if c and not _is_placeholder(c)]
    if not boxes:
        return Answer(None, "empty", "boxed", len(found), found[-1][2], found[-1][0])
    content, start, end = boxes[-1]
    if not content:
        return Answer(None, "empty", "boxed", len(boxes), end, content)
    if _is_hedge(content):
        return Answer(None, "hedge", "boxed", len(boxes), end, content)
    chain = [len(boxes) - 1]
    for i in range(len(boxes) - 2, -1, -1):
        between = text[boxes[i][2] : boxes[i + 1][1]]
        if boxes[i][2] > boxes[i + 1][1] or len(between) > HEDGE_GAP_CHARS or not PART_JOINER_RE.fullmatch(between):
            break
        chain.insert(0, i)
    parts = list(dict.fromkeys(_canonical_box(boxes[i][0]) for i in chain))
    if len(parts) > 1:
        earlier = {_canonical_box(c) for c, _, _ in boxes[: chain[0]]}
        values = tuple(dict.fromkeys(boxes[i][0] for i in chain))
        if earlier <= set(parts) and len(values) <= MAX_PARTS and not any(_is_hedge(v) for v in values):
            return Answer(None, "multi_part", "boxed", len(boxes), end, ", ".join(values), parts=values)
    others = {_canonical_box(c) for c, _, _ in boxes[:-1]} - {_canonical_box(content)}
    if others:
        reason = "hedge" if start - boxes[-2][2] <= HEDGE_GAP_CHARS else "conflicting_markers"
        if len(others) > MAX_DISTINCT_BOXES or not compare_boxes:
            return Answer(None, reason, "boxed", len(boxes), end, content)
        for other in others:
            verdict = rewards.verify.compare_answers(
                other, content, task="math", timeout=rewards.verify.TIME_BUDGET_S / len(others)
            )
            if verdict is not Verdict.EQUAL:
                reason = rewards.verify.NO_VERDICT_REASONS.get(verdict, reason)
                return Answer(None, reason, "boxed", len(boxes), end, content)
    return Answer(content, "ok", "boxed", len(boxes), end, content)


def _extract_gsm8k_plainly(text: str) -> Answer:
    """``_extract_gsm8k`` reading every marker, as it is defined."""
    positions = [m.start() for m in re.finditer(re.escape(GSM8K_MARKER), text)]
    if not positions:
        return Answer(None, "no_marker")
    values, last_end, segment = [], -1, ""
    for pos in positions:
        start = pos + len(GSM8K_MARKER)
        line_end = text.find("\n", start, start + MAX_SEGMENT_CHARS)
        line_end = min(len(text), start + MAX_SEGMENT_CHARS) if line_end == -1 else line_end
        next_marker = text.find(GSM8K_MARKER, start, line_end)
        line_end = line_end if next_marker == -1 else next_marker
        segment, last_end = text[start:line_end], line_end
        values.append(_single_number(segment))
    value, reason = values[-1]
    if value is not None and len({v for v, _ in values if v is not None}) > 1:
        return Answer(None, "conflicting_markers", GSM8K_MARKER, len(positions), last_end, segment.strip())
    return Answer(value, reason, GSM8K_MARKER, len(positions), last_end, segment.strip())


BOX_TOKENS = [
    "\\boxed{", "\\boxed ", "\\fbox{", "\\boxed{}", "{", "}", " ", "\n", "1", "2", "x", " and ", ", ", "x = ", "\\quad",
    "\\phantom{2}", "\\ ", "\\", "_", "~", "*", "**", "<b>", "</b>", "\\textbf{", " or ", "\\text{ }", "\\dfrac",
    "\\frac{1}{2}", ".", "$", "\\,", "(a)", "\u00a0", "\\boxed{1}", "\\boxed{2}", "\\boxed{x}, ", "####", "#### 3",
    "3/4", "0.75", "?",
]  # fmt: skip
box_text = st.lists(st.sampled_from(BOX_TOKENS), max_size=30).map("".join)


def _scripted_comparison(pred, gold, task="gsm8k", timeout=0.8):
    """A stand-in for math-verify: a verdict that depends on the pair only, and every call recorded."""
    _scripted_comparison.calls.append((pred, gold, round(timeout, 6)))
    return [Verdict.EQUAL, Verdict.NOT_EQUAL, Verdict.TIMEOUT][
        hashlib.sha256(f"{pred}|{gold}".encode()).digest()[0] % 3
    ]


@settings(max_examples=300, deadline=None)
@given(text=box_text)
def test_the_extractor_reads_what_its_plain_definition_reads(text):
    assert [(text[b.inner : b.inner_end].strip(), b.start, b.end) for b in _box_spans(text)] == _find_boxed_plainly(
        text
    )
    assert find_boxed(text) == _find_boxed_plainly(text)
    for box in _box_spans(text):
        content = text[box.inner : box.inner_end].strip()
        assert _is_filled(text, box) == bool(content and not _is_placeholder(content))
    assert _extract_gsm8k(text) == _extract_gsm8k_plainly(text)
    assert _extract_math(text, compare_boxes=False) == _extract_math_plainly(text, compare_boxes=False)
    compare, rewards.verify.compare_answers = rewards.verify.compare_answers, _scripted_comparison
    try:
        _scripted_comparison.calls = []
        answer = _extract_math(text, compare_boxes=True)
        calls, _scripted_comparison.calls = _scripted_comparison.calls, []
        assert answer == _extract_math_plainly(text, compare_boxes=True)
        assert calls == _scripted_comparison.calls  # the same comparisons, in the same order
    finally:
        rewards.verify.compare_answers = compare
