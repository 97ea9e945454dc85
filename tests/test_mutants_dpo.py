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
        (
            None,
            "not predicted: WPO",
            "first DPO loss 0.500000 (not predicted: WPO); implicit rewards 0: the reference is the starting policy",
        ),
    ],
)
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


def test_every_log_sigmoid_loss_starts_at_ln_2_per_weight():
    loss, how = expected_first_loss(["sigmoid", "sigmoid_norm", "robust"], None, False)
    assert loss == pytest.approx(3 * math.log(2)) and how == "ln 2 x (1 + 1 + 1)"  # no weights: 1.0 each, as TRL


def test_losses_that_are_not_log_sigmoid_are_named_and_not_predicted():
    loss, why = expected_first_loss(["hinge", "sigmoid", "ipo"], [1.0, 0.5, 2.0], False)
    assert loss is None
    assert why == "not predicted: loss_type ['hinge', 'ipo'] is not a log-sigmoid loss (not ln 2 at the start)"


def test_the_default_tolerance_is_a_thousandth():
    near, far = FirstLossCheck(0.75), FirstLossCheck(0.75)
    near.on_log(None, state(1), None, logs={"loss": 0.7509, "rewards/chosen": -0.0009})
    far.on_log(None, state(1), None, logs={"loss": 0.7511})
    assert near.ok is True and far.ok is False


def test_the_reward_model_start_is_checked_and_worded_as_a_tie(caplog):
    from recipes.first_loss import REWARD_MODEL_START

    passed = FirstLossCheck(0.25, "log(1 + e^-1)", 0.125, REWARD_MODEL_START)
    failed = FirstLossCheck(0.25, "log(1 + e^-1)", 0.125, REWARD_MODEL_START)
    with caplog.at_level(logging.INFO, logger="recipes.first_loss"):
        passed.on_log(None, state(1), None, logs={"loss": 0.25, "min_reward": -0.125, "max_reward": 0.125})
        failed.on_log(None, state(1), None, logs={"loss": 0.25, "min_reward": -0.5, "rewards/chosen": 3.0})
        resumed = FirstLossCheck(0.25, "log(1 + e^-1)", 0.125, REWARD_MODEL_START)
        resumed.on_step_end(None, state(4), TrainerControl())
    bar = "!" * 100
    assert messages(caplog) == [
        ("INFO", "first reward-model loss 0.250000 = log(1 + e^-1): every pair starts tied"),
        (
            "WARNING",
            f"\n{bar}\nREWARD MODEL FIRST LOSS IS NOT A TIE: min_reward = -0.500000, not 0.\nThe score head was not "
            f"zero at the start, or the loss is not the one configured (margin).\n{bar}",
        ),
        ("INFO", "first step seen is 4 (resumed): the zero score head check does not apply"),
    ]
    assert (passed.ok, failed.ok) == (True, False)


def test_the_report_holds_the_outcome_for_report_json():
    check = FirstLossCheck(0.5, "ln 2 x (0.72)", tolerance=0.01)
    assert check.report() == {
        "first_loss": None,
        "first_loss_ok": None,
        "first_loss_expected": 0.5,
        "first_loss_note": "ln 2 x (0.72)",
    }
    check.on_log(None, state(1), None, logs={"loss": 0.505})
    assert check.report() == {
        "first_loss": 0.505,
        "first_loss_ok": True,
        "first_loss_expected": 0.5,
        "first_loss_note": "ln 2 x (0.72)",
    }


def test_a_reward_model_start_without_an_expected_loss_checks_the_scores(caplog):
    from recipes.first_loss import REWARD_MODEL_START

    check = FirstLossCheck(None, "margin from the data", 0.125, REWARD_MODEL_START)
    with caplog.at_level(logging.INFO, logger="recipes.first_loss"):
        check.on_log(None, state(1), None, logs={"loss": 0.9, "min_reward": 0.0, "max_reward": 0.0})
    said = "first reward-model loss 0.900000 (margin from the data); scores 0: every pair starts tied"
    assert check.ok is True and messages(caplog) == [("INFO", said)]


def test_without_a_note_the_report_says_nothing_about_the_expected_loss():
    assert FirstLossCheck(0.5).report()["first_loss_note"] == ""
