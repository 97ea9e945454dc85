"""The quick tier (`make test-quick`, `pytest --quick`): which tests it leaves out, and that its guard fails a test
that builds a torch model or starts a process without the mark.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/project/test_quick_tier.py

Each test runs a small test file in a pytest session of its own (pytester, in this process), under the rule and the
guard of tests/conftest.py.
"""

import multiprocessing.process

import pytest
import torch  # loaded before any inner session: pytester unloads what a session loaded, and torch cannot load twice

pytest_plugins = ["pytester"]

SAMPLE = """
import subprocess
import sys

import pytest


@pytest.fixture
def tiny_model_dir(tmp_path):  # a stand-in: the rule goes by the fixture's name
    return tmp_path


@pytest.fixture
def model_folder(tiny_model_dir):  # reaches the model through another fixture
    return tiny_model_dir


def test_pure():
    assert sum([1, 2]) == 3


def test_a_math_verify_comparison():  # the library's own worker pool may start its workers
    from rewards.verify import answers_match, warm_up

    warm_up(1)  # as the recipes do: a worker's cold start on a loaded machine can outlast a comparison's budget
    assert answers_match("\\\\dfrac{2}{4}", "\\\\frac{1}{2}", task="math")


def test_loads_a_library_that_builds_torch_modules_as_it_loads():
    import tier_sample_activations  # noqa: F401


def test_uses_the_model_fixture(tiny_model_dir):
    pass


def test_uses_it_through_another_fixture(model_folder):
    pass


@pytest.mark.heavy
def test_marked_heavy():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.integration
def test_marked_integration():
    pass


def test_builds_a_torch_module():
    import torch

    torch.nn.Linear(2, 2)


def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_hides_the_process_behind_except_exception():
    try:
        subprocess.run(["true"])
    except Exception:
        pass
"""

DOCTESTS = '''
def tiny():
    """
    >>> from recipes.tiny_model import build_model, build_tokenizer
    >>> model = build_model(build_tokenizer())
    """


def plain():
    """
    >>> 1 + 1
    2
    """
'''

HEAVY = {
    "test_uses_the_model_fixture",
    "test_uses_it_through_another_fixture",
    "test_marked_heavy",
    "test_marked_integration",
    "tier_sample_lib.tiny",  # a doctest that builds a model
}
UNMARKED = {"test_builds_a_torch_module", "test_starts_a_process", "test_hides_the_process_behind_except_exception"}
LIGHT = {
    "test_pure",
    "test_a_math_verify_comparison",
    "test_loads_a_library_that_builds_torch_modules_as_it_loads",
    "tier_sample_lib.plain",
}


@pytest.fixture
def sample(pytester):
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")  # the real hooks and fixtures
    pytester.makeini("[pytest]\nmarkers =\n    heavy\n    integration\n")
    pytester.makepyfile(test_tier_sample=SAMPLE, tier_sample_lib=DOCTESTS)
    activations = "import torch\n\nGELU = torch.nn.GELU()  # as transformers.activations builds its own\n"
    pytester.makepyfile(tier_sample_activations=activations)
    pytester.syspathinsert()
    return pytester


def run(pytester, *args):
    # the library is not collected: its import happens in the test, with the guard on
    ignore = "--ignore=tier_sample_activations.py"
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--import-mode=importlib", ignore, *args)


def selected(result) -> set[str]:
    return {line.split("::")[-1] for line in result.outlines if "::" in line}


def test_the_default_tier_runs_every_test_and_marks_the_heavy_ones(sample):
    assert selected(run(sample, "--collect-only", "-q", "--doctest-modules")) == HEAVY | UNMARKED | LIGHT
    assert selected(run(sample, "--collect-only", "-q", "--doctest-modules", "-m", "heavy")) == HEAVY


def test_the_quick_tier_leaves_the_heavy_tests_out_and_fails_the_unmarked_ones(sample):
    result = run(sample, "--quick", "--doctest-modules")
    result.assert_outcomes(passed=len(LIGHT), failed=len(UNMARKED), deselected=len(HEAVY))
    result.stdout.fnmatch_lines(
        [
            "*_ test_builds_a_torch_module _*",
            "E * builds a torch model (Linear): a heavy test, which the quick tier leaves out; mark it *",
            "*_ test_starts_a_process _*",
            "E * starts a process (subprocess.Popen: [[]*, '-c', 'pass']): a heavy test*",
            "*_ test_hides_the_process_behind_except_exception _*",  # a BaseException: `except Exception` misses it
            "E * starts a process (subprocess.Popen: [[]'true']): a heavy test*",
        ]
    )


def test_a_quick_session_puts_back_what_it_guarded(sample):
    guarded = torch.nn.Module.__init__, multiprocessing.process.BaseProcess.start
    run(sample, "--quick", "-k", "pure").assert_outcomes(passed=1, deselected=9)
    assert (torch.nn.Module.__init__, multiprocessing.process.BaseProcess.start) == guarded
