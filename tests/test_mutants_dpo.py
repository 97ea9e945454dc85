"""Behaviour of the DPO first-loss check (recipes.first_loss.FirstLossCheck, expected_first_loss) that mutation testing
(`make mutate`, docs/mutation.md) found unpinned: what it logs, the edges of its tolerance, when a run counts as
resumed. No model is trained here; the trainer's state and control are stand-ins.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_dpo.py
"""

import logging
import math
import types

import pytest
from transformers import TrainerControl

from recipes.first_loss import FirstLossCheck, expected_first_loss


def state(step: int):
    return types.SimpleNamespace(global_step=step)


def messages(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "recipes.first_loss"]


def test_nothing_is_known_before_the_first_log():
    check = FirstLossCheck(math.log(2))
    assert check.first_loss is None and check.ok is None and check.resumed_at is None


@pytest.mark.parametrize(
    "steps, resumed_at",
    [
        ([1, 2, 3], None),  # a fresh run: step 1 first
        ([2, 3], 2),  # the first step seen is 2: resumed
        ([1, 5], None),  # a later step after step 1 is no resume
    ],
)
def test_a_run_is_resumed_when_its_first_step_is_past_1(caplog, steps, resumed_at):
    check = FirstLossCheck(math.log(2))
    with caplog.at_level(logging.INFO, logger="recipes.first_loss"):
        controls = [check.on_step_end(None, state(s), TrainerControl()) for s in steps]
    assert check.resumed_at == resumed_at
    assert [c.should_log for c in controls] == [s == 1 for s in steps]
    expected = f"first step seen is {resumed_at} (resumed): the policy == reference check does not apply"
    assert messages(caplog) == ([("INFO", expected)] if resumed_at else [])


def test_logs_without_a_loss_are_not_the_first_loss():
    check = FirstLossCheck(math.log(2))
    check.on_log(None, state(1), None, logs={"grad_norm": 1.0})
    assert check.ok is None and check.first_loss is None


def test_a_first_loss_logged_late_is_said(caplog):
    check = FirstLossCheck(math.log(2))
    with caplog.at_level(logging.WARNING, logger="recipes.first_loss"):
        check.on_log(None, state(3), None, logs={"loss": 0.5})
    assert check.ok is False
    assert messages(caplog) == [("WARNING", "first loss logged at step 3, not 1: cannot check policy == reference")]


def test_rewards_that_are_not_logged_count_as_0():
    check = FirstLossCheck(0.5)
    check.on_log(None, state(1), None, logs={"loss": 0.5})
    assert check.ok is True and check.first_loss == 0.5


def test_exactly_at_the_tolerance_is_within_it():
    check = FirstLossCheck(0.5, tolerance=0.25)  # binary fractions: the gaps below are exactly 0.25
    check.on_log(None, state(1), None, logs={"loss": 0.75, "rewards/chosen": 0.25, "rewards/rejected": -0.25})
    assert check.ok is True


def test_the_warning_names_every_problem_loss_first(caplog):
    check = FirstLossCheck(0.5, "ln 2 x (0.72)", tolerance=0.25)
    with caplog.at_level(logging.WARNING, logger="recipes.first_loss"):
        check.on_log(None, state(1), None, logs={"loss": 1.0, "rewards/chosen": 0.5, "rewards/rejected": -0.5})
    bar = "!" * 100
    said = (
        f"\n{bar}\nDPO REFERENCE IS NOT THE STARTING POLICY: first loss 1.000000, expected 0.500000 (ln 2 x (0.72)); "
        "rewards/chosen = 0.500000, not 0; rewards/rejected = -0.500000, not 0.\nThe reference model differs from the "
        "model being trained (another checkpoint, dtype, adapter, quantization or dropout); the KL anchor is wrong."
        f"\n{bar}"
    )
    assert messages(caplog) == [("WARNING", said)]


@pytest.mark.parametrize(
    "expected, note, said",
    [
        (0.5, "ln 2 x (0.72)", "first DPO loss 0.500000 = ln 2 x (0.72): the reference is the starting policy"),
        (None, "not predicted: WPO", "first DPO loss 0.500000 (not predicted: WPO); implicit rewards 0: the reference "
         "is the starting policy"),
    ],
)  # fmt: skip
def test_a_passed_check_says_so(caplog, expected, note, said):
    check = FirstLossCheck(expected, note)
    with caplog.at_level(logging.INFO, logger="recipes.first_loss"):
        check.on_log(None, state(1), None, logs={"loss": 0.5, "rewards/chosen": 0.0, "rewards/rejected": 0.0})
    assert check.ok is True and messages(caplog) == [("INFO", said)]


def test_the_wpo_reason_names_the_weights():
    loss, why = expected_first_loss(["sigmoid"], None, True)
    assert loss is None
    assert why == (
        "not predicted: use_weighting (WPO) multiplies each pair's loss by weights computed from the policy's own "
        "token probabilities on that pair, so it depends on the model and the batch"
    )
