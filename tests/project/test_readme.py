"""The README's commands run as written, and every docs link resolves.

The commands are the README's fenced ``bash`` blocks and its inline code that starts with ``python -m``, ``make``,
``accelerate launch`` or ``bash``. For each ``python -m X ...``: module X exists, ``python -m X --help`` (or
``X SUBCOMMAND --help``) exits 0, and its help knows every ``--flag`` the README passes. For each ``make T``: the
Makefile has target T (``make -n T``). Every repository path the README names (configs, scripts, docs, test files)
exists, and every Markdown link in README.md, CONTRIBUTING.md, CHANGELOG.md and docs/*.md resolves, anchors included.
Renaming a flag, a module, a config or a doc fails here until the README follows.

The ``--help`` calls run in one subprocess (``runpy``, each module once), so TRL is imported once.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINKED_PAGES = [README, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
REPO_DIRS = ("recipes", "docs", "tests", "bench", "rewards", "eval", "cpu_lab", "judge_lab", "reward_model_lab")
REPO_DIRS += ("training_data", ".ci")
TOP_FILES = re.compile(r"(requirements[\w-]*\.txt|pyproject\.toml|Makefile|LICENSE|CHANGELOG\.md|CONTRIBUTING\.md)")
COMMAND_START = re.compile(r"(?:[A-Z_]+=\S+\s+)*(?:python3? -m |\.venv/bin/python -m |make\b|accelerate launch |bash )")
ALTERNATIVES = "\N{BROKEN BAR}"  # `eval run\|score\|compare` in a table cell: one of the three


def strip_comment(line: str) -> str:
    """The line without its shell comment: a `#` at the start or after a blank, outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def simple_commands(text: str) -> list[list[str]]:
    """Shell text -> its simple commands as token lists (split on ;, &&, ||, |)."""
    commands = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        lexer = shlex.shlex(strip_comment(line), posix=True, punctuation_chars=";|&")
        lexer.whitespace_split, lexer.commenters = True, ""
        current: list[str] = []
        for token in lexer:
            if set(token) <= set(";|&"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    return [c for c in commands if c]


def readme_commands() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    fenced = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    inline = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    inline = [span.replace("\\|", ALTERNATIVES) for span in inline if COMMAND_START.match(span)]
    commands = [c for block in fenced for c in simple_commands(block)] + [c for s in inline for c in simple_commands(s)]
    unique = {tuple(c): c for c in commands}  # the same command twice is checked once
    return list(unique.values())


def without_env(tokens: list[str]) -> list[str]:
    """Drop leading VAR=value assignments."""
    i = 0
    while i < len(tokens) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[i]):
        i += 1
    return tokens[i:]


def module_call(tokens: list[str]) -> tuple[str, list[str]] | None:
    """`python -m X args` or `accelerate launch ... -m X args` -> (X, args)."""
    tokens = without_env(tokens)
    if len(tokens) >= 3 and tokens[0] in ("python", "python3", ".venv/bin/python") and tokens[1] == "-m":
        return tokens[2], tokens[3:]
    if tokens[:2] == ["accelerate", "launch"] and "-m" in tokens:
        i = tokens.index("-m")
        return tokens[i + 1], tokens[i + 2 :]
    return None


def subcommand(args: list[str]) -> list[str]:
    """The candidate subcommands: a bare first word (`run`, or `run¦score¦compare`)."""
    if args and re.fullmatch(rf"[a-z_]+(?:{ALTERNATIVES}[a-z_]+)*", args[0]):
        return args[0].split(ALTERNATIVES)
    return []


def flags(args: list[str]) -> set[str]:
    """The --flags passed, up to a bare `--` (what follows goes to another program)."""
    found = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            found.add(arg.split("=", 1)[0])
    return found


def repo_paths(tokens: list[str]) -> list[str]:
    """Tokens (and the words of VAR=value assignments) that name a file or folder of the repository."""
    words = []
    for token in tokens:
        value = token.split("=", 1)[1] if re.fullmatch(r"[A-Z_]+=.*", token) else token
        words += value.split()
    return [w for w in words if is_repo_path(w)]


def is_repo_path(word: str) -> bool:
    if any(char in word for char in "<>*{}$"):
        return False
    return word.split("/")[0] in REPO_DIRS and "/" in word or bool(TOP_FILES.fullmatch(word))


COMMANDS = readme_commands()
MODULE_CALLS = [(c, call) for c in COMMANDS if (call := module_call(c))]
MAKE_CALLS = [without_env(c) for c in COMMANDS if without_env(c)[:1] == ["make"]]

RUNNER = r"""
import contextlib, importlib, io, json, runpy, sys
results = []
for module, argv in json.loads(sys.argv[1]):
    out, code = io.StringIO(), "returned without exiting: does it parse its arguments?"
    sys.argv = [module, *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else str(exit.code))
    except BaseException as error:
        code = f"{type(error).__name__}: {error}"
    takes_config = False  # TRL's parser reads --config itself, so its help does not list it
    with contextlib.suppress(Exception), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        factory, trl = getattr(importlib.import_module(module), "make_parser", None), sys.modules.get("trl")
        takes_config = bool(factory and trl and isinstance(factory(), trl.TrlParser))
    results.append([module, argv, code, out.getvalue(), takes_config])
sys.__stdout__.write("\nREADME-HELP " + json.dumps(results) + "\n")
"""


@pytest.fixture(scope="module")
def help_texts() -> dict[tuple[str, ...], tuple[object, str, bool]]:
    """`--help` of every module (and subcommand) the README calls, each once, in one subprocess."""
    wanted = []
    for _, (module, args) in MODULE_CALLS:
        wanted.append((module, ["--help"]))
        wanted += [(module, [sub, "--help"]) for sub in subcommand(args)]
    wanted = [list(w) for w in dict.fromkeys((m, tuple(a)) for m, a in wanted)]
    env_python = sys.executable
    proc = subprocess.run(
        [env_python, "-c", RUNNER, json.dumps(wanted)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("README-HELP ")), None)
    assert line, f"the --help runner failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    results = json.loads(line[len("README-HELP ") :])
    return {(module, *argv): (code, text, takes_config) for module, argv, code, text, takes_config in results}


def test_the_readme_has_commands_to_check():
    assert len(MODULE_CALLS) >= 8 and len(MAKE_CALLS) >= 4, (MODULE_CALLS, MAKE_CALLS)


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize("command, call", MODULE_CALLS, ids=[" ".join(c)[:80] for c, _ in MODULE_CALLS])
def test_a_python_command_runs_as_written(command, call, help_texts):
    module, args = call
    code, text, takes_config = help_texts[(module, "--help")]
    assert code == 0, f"`python -m {module} --help` failed ({code}):\n{text[-1500:]}"
    subs = subcommand(args)
    choices = re.search(r"\{([\w,]+)\}", text)
    helps = [text]
    if subs and choices and subs[0] in choices.group(1).split(","):
        helps = []
        for sub in subs:
            sub_code, sub_text, _ = help_texts[(module, sub, "--help")]
            assert sub_code == 0, f"`python -m {module} {sub} --help` failed ({sub_code}):\n{sub_text[-1500:]}"
            helps.append(sub_text)
    elif subs and choices:
        pytest.fail(f"`python -m {module}` has no subcommand {subs[0]!r}: it knows {{{choices.group(1)}}}")
    for flag in sorted(flags(args) - ({"--config"} if takes_config else set())):
        for help_text in helps:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (
                f"`python -m {module}` does not know {flag} (README: `{' '.join(command)}`)"
            )


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize("command", MAKE_CALLS, ids=[" ".join(c)[:80] for c in MAKE_CALLS])
def test_a_make_command_names_a_target_of_the_makefile(command):
    targets = [t for t in command[1:] if not t.startswith("-") and "=" not in t]
    assignments = [t for t in command[1:] if "=" in t]
    for target in targets:
        proc = subprocess.run(["make", "-n", target, *assignments], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, f"`make {target}`: {proc.stderr.strip()[-500:]}"


def readme_named_paths() -> list[str]:
    text = README.read_text(encoding="utf-8")
    paths = [p for c in COMMANDS for p in repo_paths(c)]
    paths += [span for span in re.findall(r"`([^`\s]+)`", text) if is_repo_path(span)]
    return sorted(set(paths))


@pytest.mark.parametrize("path", readme_named_paths())
def test_a_path_the_readme_names_exists(path):
    assert (ROOT / path).exists(), f"README.md names {path}, which does not exist"


def slugs(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def links() -> list[tuple[str, str]]:
    found = []
    for page in LINKED_PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        text = re.sub(r"`[^`]*`", "", text)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"[a-z]+:", target):
                found.append((str(page.relative_to(ROOT)), target))
    return found


@pytest.mark.parametrize("page, target", links(), ids=[f"{p}->{t}" for p, t in links()])
def test_a_markdown_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    resolved = (ROOT / page).parent / path if path else ROOT / page
    assert resolved.exists(), f"{page} links to {target}: {resolved.relative_to(ROOT)} does not exist"
    if anchor and resolved.suffix == ".md":
        assert anchor in slugs(resolved), f"{page} links to {target}: no heading with anchor #{anchor}"


def test_the_readme_names_no_path_outside_the_repository():
    # a path that climbs out of the checkout ("../data", "../x/y") exists on no user's machine
    outside = re.findall(r"(?<![\w.])\.\./[\w.-]+", README.read_text(encoding="utf-8"))
    assert outside == []


def test_the_command_parser_reads_what_a_shell_reads():
    assert simple_commands('A=1 python -m x --y "#### 42" a#b  # note\nmake t && make u') == [
        ["A=1", "python", "-m", "x", "--y", "#### 42", "a#b"],
        ["make", "t"],
        ["make", "u"],
    ]
    assert module_call(["accelerate", "launch", "--config_file", "c.yaml", "-m", "m", "--k"]) == ("m", ["--k"])
    assert flags(["--a=1", "--b", "x", "--", "--c"]) == {"--a", "--b"}
    assert subcommand([f"run{ALTERNATIVES}score", "--x"]) == ["run", "score"]
