"""Shared fixtures: a tiny local model (built once per session, never downloaded), the offline data, and a judge
server on 127.0.0.1 with the log it writes; the rule of the quick tier (`--quick`) and its guard.

Run the default tier with `make test` (OMP_NUM_THREADS=1: two threads on a busy 2-core box are ~30x slower), the quick
tier (no model, no process) with `make test-quick`.
"""

import os
import sys
from collections import OrderedDict
from pathlib import Path

import pytest

from rewards import verify

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"  # small copies and subsets, each with its source and license (tests/data/README.md)


@pytest.fixture(scope="session", autouse=True)
def leash_cache(tmp_path_factory):
    """leash's own cache (the recipes' saved tables of options, ``recipes.parser.table_path``) in a folder of the
    session, for this process and the commands it starts: no test reads or writes ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LEASH_CACHE_DIR", str(tmp_path_factory.mktemp("leash_cache")))
        yield


@pytest.fixture(autouse=True)
def fresh_verdict_memory(monkeypatch):
    """Every test starts with no math-verify verdict or give-up remembered from another test: a stand-in pool or a
    loaded moment in one test must not decide how a later test's answers are paid."""
    monkeypatch.setattr(verify, "_CACHE", OrderedDict())
    monkeypatch.setattr(verify, "_GIVEN_UP", {})


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data shipped with the tests: GSM8K test and MATH-500 whole, subsets of the rest."""
    return DATA


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The full offline files (``LEASH_DATA``), for the opt-in tier; skips with the way to get them when absent."""
    folder = os.environ.get("LEASH_DATA")
    if not folder:
        pytest.skip("reads the full data files: make test-data LEASH_DATA=DIR (tests/data/README.md)")
    if not Path(folder).is_dir():
        pytest.fail(f"LEASH_DATA={folder} is not a folder: point it at the full data files (tests/data/README.md)")
    return Path(folder)


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="the quick tier (make test-quick): leave out the tests marked heavy, and fail any other test that "
        "builds a torch model or starts a process",
    )


# --- the quick tier ---
# A test is heavy when it builds or loads a torch model (transformers and TRL models are torch modules), trains, or
# starts a process. The rule marks heavy the tests that use a fixture of HEAVY_FIXTURES (directly or through another
# fixture) and the integration tests; a test the rule cannot see through carries @pytest.mark.heavy itself. `--quick`
# leaves the heavy tests out and guards the rest: a test that builds a torch module (outside an import) or starts a
# process other than a math-verify worker (rewards.verify's pool: the library's own, started once and shared) fails and
# says to mark it, so a new heavy test cannot slip into the quick tier unmarked.
HEAVY_FIXTURES = {"tiny_model_dir"}  # each builds or loads a model
MODEL_BUILDERS = ("build_model(", "save_tiny_model(", "from_pretrained(")  # a doctest that calls one is heavy
PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec"}
_VERIFY_WORKER = verify._WORKER_SCRIPT  # read now: a test may point rewards.verify at another script
_GUARD = {"installed": False, "on": False}


def is_heavy(item) -> bool:
    """Whether the quick tier leaves ``item`` out: marked heavy or integration, using a fixture of HEAVY_FIXTURES, or
    a doctest that calls one of MODEL_BUILDERS."""
    if item.get_closest_marker("heavy") or item.get_closest_marker("integration"):
        return True
    examples = getattr(getattr(item, "dtest", None), "examples", ())
    if any(call in example.source for example in examples for call in MODEL_BUILDERS):
        return True
    return not HEAVY_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config, items):
    for item in items:
        # `-m full_data` selects the tests that read the full files (make test-data)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "full_data" in getattr(item, "fixturenames", ()) or "full_data" in params.values():
            item.add_marker(pytest.mark.full_data)
        if is_heavy(item):
            item.add_marker(pytest.mark.heavy)  # so that `-m heavy` lists them
    if config.getoption("quick"):
        heavy = [item for item in items if item.get_closest_marker("heavy")]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            items[:] = [item for item in items if not item.get_closest_marker("heavy")]


def _refuse(what: str) -> None:
    """Fails the quick-tier test that is running (pytest.fail is a BaseException: `except Exception` cannot hide it)."""
    pytest.fail(f"{what}: a heavy test, which the quick tier leaves out; mark it @pytest.mark.heavy")


def _audit(event: str, args: tuple) -> None:
    if not _GUARD["on"] or event not in PROCESS_EVENTS:
        return
    argv = args[1] if event == "subprocess.Popen" else args
    if event == "subprocess.Popen" and _VERIFY_WORKER in [str(arg) for arg in argv or ()]:
        return  # a math-verify worker of rewards.verify's pool
    _refuse(f"starts a process ({event}: {argv!r:.200})")


def _importing() -> bool:
    """Whether an import is under way: a library that builds torch modules as it loads (transformers.activations builds
    its activation functions) builds no model, and the test that happens to load it first is not heavy for it."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == "<frozen importlib._bootstrap>":
            return True
        frame = frame.f_back
    return False


def pytest_configure(config):
    if not config.getoption("quick", False):
        return
    import multiprocessing.process
    import platform

    import torch

    platform.processor()  # runs `uname -p` once a process (the OpenAI client asks): now, not in a test
    if not _GUARD["installed"]:  # an audit hook stays for the life of the process: one, switched by _GUARD["on"]
        sys.addaudithook(_audit)
        _GUARD["installed"] = True
    module_init, process_start = torch.nn.Module.__init__, multiprocessing.process.BaseProcess.start

    def guarded_module_init(self, *args, **kwargs):
        if _GUARD["on"] and not _importing():
            _refuse(f"builds a torch model ({type(self).__name__})")
        module_init(self, *args, **kwargs)

    def guarded_process_start(self):
        if _GUARD["on"]:
            _refuse(f"starts a process ({type(self).__name__})")
        process_start(self)

    torch.nn.Module.__init__ = guarded_module_init
    multiprocessing.process.BaseProcess.start = guarded_process_start
    config.add_cleanup(lambda: setattr(torch.nn.Module, "__init__", module_init))
    config.add_cleanup(lambda: setattr(multiprocessing.process.BaseProcess, "start", process_start))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # the guard covers a test's set-up (its fixtures, a session one's first use included), call and teardown
    if not item.config.getoption("quick", False):
        return (yield)
    was_on, _GUARD["on"] = _GUARD["on"], True
    try:
        return (yield)
    finally:
        _GUARD["on"] = was_on


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A ~100k-parameter Qwen2ForCausalLM and byte-level BPE tokenizer, saved to a temp folder."""
    from recipes.tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture
def server():
    """The chat-completions judge server of tests/judge_server.py, running on 127.0.0.1 for one test."""
    from tests.judge_server import FakeJudgeServer

    with FakeJudgeServer() as s:
        yield s


@pytest.fixture
def judge_log(tmp_path, monkeypatch):
    """Every log record of the run, at DEBUG, written to a file (to grep for the key afterwards); the judge's key
    variable holds the sentinel key (tests/judge_server.py)."""
    import logging

    from tests.judge_server import KEY_ENV, SENTINEL_KEY

    monkeypatch.setenv(KEY_ENV, SENTINEL_KEY)
    path = tmp_path / "judge.log"
    handler = logging.FileHandler(path)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield path
    root.removeHandler(handler)
    root.setLevel(old_level)
    handler.close()


@pytest.fixture(autouse=True)
def _fresh_wandb_session():
    """W&B keeps one process-wide session whose settings (WANDB_DIR, mode) freeze at the first run; tests that
    log to W&B each need their own, or a later test's offline run lands in an earlier test's folder."""
    yield
    import sys

    if "wandb" in sys.modules:
        import wandb

        wandb.finish()
        wandb.teardown()


class ScriptedPool:
    """Stands in for the math-verify worker pool: replies from a script (an empty script fails the test) and records
    each question as (gold, pred, budget)."""

    def __init__(self, verdicts):
        self.verdicts, self.asked = list(verdicts), []

    @property
    def budgets(self) -> list[float]:
        return [budget for _, _, budget in self.asked]

    def compare(self, gold, pred, timeout):
        self.asked.append((gold, pred, timeout))
        assert self.verdicts, f"math-verify was asked about {pred!r} vs {gold!r}"
        return self.verdicts.pop(0)


@pytest.fixture
def scripted_pool(monkeypatch):
    """``scripted_pool(*verdicts)`` installs a ``ScriptedPool`` as rewards.verify's pool and returns it; the verdict
    cache and the memo of pairs given up start empty (``fresh_verdict_memory``), so the script answers."""

    def install(*verdicts) -> ScriptedPool:
        pool = ScriptedPool(verdicts)
        monkeypatch.setattr(verify, "_POOL", pool)
        return pool

    return install


def pytest_collection_finish(session):
    # Trainer.train starts with accelerate's free_memory(), a gc.collect(): in this process, which holds every test
    # module and the libraries they import, each took ~0.55 s on the AVX2-only CPU (11 s of test_grpo.py's 60). The
    # objects alive now live as long as the session: frozen out of the scans, a collection sees what tests create.
    import gc

    gc.collect()
    gc.freeze()
