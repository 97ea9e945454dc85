"""The docs say what is true now: no page cites a commit.

Code history belongs in CHANGELOG.md. A page that compares with an earlier version names it in words ("the previous
checker") beside its measured figure. A commit citation here is a 7-40 character hex token with both letters and
digits that either resolves as a commit of this checkout or follows a word that cites one ("commit 1a2b3c4", "since
1a2b3c4", "the checker of 1a2b3c4"). Hex tokens the docs carry on purpose (digests a command prints, cache keys) are
listed in ALLOWED with the reason.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]

# A whole token: not part of a longer word, path segment or number.
HEX = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
# The words that cite a commit when they come right before the token ("the code before commit X", "fixed in X").
CITING = re.compile(r"\b(?:commits?|since|before|after|at|of|in|from)\s+(?:commit\s+)?$", re.IGNORECASE)

ALLOWED = {
    "086132dc1738": "the lab warm start's cache folder name (runs/lab/cache/warmstart-KEY), a key of its settings",
    "5ca7d22424a1a04e": "bench.rewards_fuzz's digest of every score, as the command beside it prints it",
    "d3f4ad0470da7dca": "bench.rewards_fuzz's digest of every score, as the command beside it prints it",
}


def hash_like(token):
    """7-40 hex characters with a letter and a digit: a word like "deadbeef" or a number like 1234567 is not one."""
    return bool(re.search(r"[a-f]", token)) and bool(re.search(r"[0-9]", token))


def commits_among(tokens, root=ROOT):
    """The tokens that name a commit of the git checkout at root (none when there is no git or no checkout)."""
    tokens = sorted(set(tokens))
    if not tokens or shutil.which("git") is None or not (root / ".git").exists():
        return set()
    query = "".join(f"{token}^{{commit}}\n" for token in tokens)
    out = subprocess.run(
        ["git", "cat-file", "--batch-check"], cwd=root, input=query, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    # one answer line per query line, in order: "<sha> commit <size>", or "<query> missing"
    return {token for token, answer in zip(tokens, out, strict=True) if not answer.endswith("missing")}


def citations(text, commits=frozenset()):
    """(line number, token) for each commit the text cites: a hash-like token after a citing word, or one in commits."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in HEX.finditer(line):
            token = match.group()
            if not hash_like(token) or token in ALLOWED:
                continue
            if token in commits or CITING.search(line[: match.start()]):
                found.append((number, token))
    return found


@pytest.mark.heavy  # starts a process
def test_no_page_cites_a_commit():
    texts = {page: page.read_text(encoding="utf-8") for page in PAGES}
    commits = commits_among(t.group() for text in texts.values() for t in HEX.finditer(text) if hash_like(t.group()))
    cited = [
        f"{page.relative_to(ROOT)}:{number}: {token}"
        for page, text in texts.items()
        for number, token in citations(text, commits)
    ]
    assert not cited, (
        "these lines cite a commit; say what is true now, or name the compared version in words, and put the history "
        "in CHANGELOG.md (a digest the docs need goes in ALLOWED with its reason):\n" + "\n".join(cited)
    )


@pytest.mark.parametrize(
    "line",
    [
        "Measured with the code before commit 1a78e92, 2026-11-30.",
        "The slow tier (commit 24b572b, 2026-12-01) passed.",
        "a module of its own since c52767e",
        "every output was scored by the checker of 51082e7 and by the current one",
    ],
)
def test_the_detector_finds_a_citation_by_its_words(line):
    assert citations("intro\n" + line) == [(2, HEX.search(line).group())]


@pytest.mark.heavy  # starts a process
def test_the_detector_finds_a_commit_of_this_checkout_without_a_citing_word():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: only the citing words can tell a commit")
    head = subprocess.run(
        ["git", "rev-parse", "--short=9", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    if not hash_like(head):
        pytest.skip(f"HEAD's short hash {head} has no letter or no digit")
    line = f"git worktree add /tmp/before {head}"
    assert commits_among([head, "0123456789abcdef0123"]) == {head}
    assert citations(line, commits_among([head])) == [(1, head)]


@pytest.mark.parametrize(
    "line",
    [
        "run 1    14.3 s    0    5ca7d22424a1a04e   5.0",  # an allowed digest
        "the warm start `runs/lab/cache/warmstart-086132dc1738`",  # an allowed cache key
        "the worker's pipe is 0xdeadbeef, and 1234567 completions",  # no letter-and-digit token
        "a 6-digit colour, before #a1b2c3",  # too short
        "the checker of sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # longer than 40
    ],
)
def test_the_detector_leaves_digests_and_other_hex_alone(line):
    assert citations(line) == []


def test_each_allowed_token_has_a_reason_and_is_hash_like():
    for token, reason in ALLOWED.items():
        assert HEX.fullmatch(token) and hash_like(token), token
        assert len(reason.split()) >= 4, f"{token}: say why the docs carry it"
