"""The DPO recipe on the tiny model: the real configs, first-loss check, parameters that move, validation, resuming,
and writes from the main process only.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_dpo.py
"""

import logging
import math
import re
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerControl

from eval.jsonl import read_jsonl, write_jsonl
from recipes.dpo import main
from recipes.first_loss import FirstLossCheck, expected_first_loss
from tests.helpers import as_flags, parse_recipe_config, write_reference_pairs

CONFIG = "recipes/configs/tiny/dpo_cpu.yaml"
LORA_CONFIG = "recipes/configs/tiny/dpo_cpu_lora.yaml"
GSM8K_CONFIGS = sorted(str(p) for p in Path("recipes/configs/gsm8k").glob("**/dpo*.yaml"))


@pytest.fixture(scope="module")
def reference_pairs(data_dir, tmp_path_factory):
    """4 pairs: GSM8K reference solutions (correct) and the same with a wrong final answer."""
    return write_reference_pairs(data_dir, tmp_path_factory.mktemp("rollouts"), limit=4)


def run_args(model_dir, data, out, *extra, config=CONFIG):
    # 2 steps of 2 pairs; the before/after evaluation runs, briefly
    tiny = dict(max_steps=2, per_device_train_batch_size=2, eval_limit=2, eval_max_new_tokens=4)
    flags = as_flags(model_name_or_path=model_dir, build_tiny_model=False, data=data, output_dir=out, **tiny)
    return parse_recipe_config("dpo", config, *flags, *extra)


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize(
    "config",
    [
        CONFIG,  # full fine-tuning: TRL reloads the reference from the model path
        LORA_CONFIG,  # LoRA: the reference is the base with adapters disabled
    ],
)
def test_two_step_dpo_run(tiny_model_dir, reference_pairs, tmp_path, config):
    report = main(*run_args(tiny_model_dir, reference_pairs, tmp_path, config=config))

    log = read_jsonl(tmp_path / "log.jsonl")
    losses = [r for r in log if "loss" in r and "train_loss" not in r]
    assert losses[0]["step"] == 1 and abs(losses[0]["loss"] - math.log(2)) < 1e-4  # policy == reference
    assert report["first_loss_ok"] is True
    assert [r["step"] for r in losses] == [1, 2]
    assert report["pairs"] == 4 and report["pair_report"]["problems_with_pairs"] == 4
    assert {"before", "after"} <= set(report)
    assert (tmp_path / "eval_before" / "results.json").exists() and (tmp_path / "eval_after" / "results.json").exists()

    if config == LORA_CONFIG:  # the adapter moved away from its zero start
        adapter = load_file(str(tmp_path / "adapter_model.safetensors"))
        lora_b = [v for k, v in adapter.items() if "lora_B" in k]
        assert lora_b and any(v.abs().max() > 0 for v in lora_b)
    else:
        before, after = weights(tiny_model_dir), weights(tmp_path)
        assert any(not torch.equal(before[k], after[k]) for k in before)


def write(path, rows):
    return str(write_jsonl(rows, path))


@pytest.mark.parametrize(
    "rows, flags, message",
    [
        # pairs without a rejected column
        ([{"prompt": "Q", "chosen": "good"}], [], r"no \['rejected'\] column"),
        # rollouts where every answer is wrong: no pair at all
        (
            [
                {
                    "id": 0,
                    "prompt": [],
                    "pass_rate": 0.0,
                    "completions": [{"text": "#### 1", "correct": False, "n_tokens": 3}],
                }
            ],
            [],
            "no preference pair",
        ),
        # a misspelt loss
        ([{"prompt": "Q", "chosen": "good", "rejected": "bad"}], ["--loss_type", "sigmiod"], "unknown DPO loss"),
        # an unknown eval task
        ([{"prompt": "Q", "chosen": "good", "rejected": "bad"}], ["--eval_task", "gsm9k"], "unknown task"),
    ],
)
def test_errors_before_model_load(tmp_path, rows, flags, message):
    data = write(tmp_path / "data.jsonl", rows)
    # the model path does not exist: an error naming the data/config problem proves nothing was loaded first
    args = parse_recipe_config(
        "dpo",
        CONFIG,
        "--model_name_or_path",
        str(tmp_path / "no_model"),
        "--build_tiny_model",
        "false",
        "--data",
        data,
        "--output_dir",
        str(tmp_path / "out"),
        *flags,
    )
    with pytest.raises(ValueError, match=message):
        main(*args)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "recipe, config", [("dpo", CONFIG), ("reward_model", "recipes/configs/tiny/reward_model_cpu.yaml")]
)
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max_pairs_per_problem", "-1"], "max_pairs_per_problem=-1: give a number of pairs >= 1, or 0"),
        (["--length_tolerance", "-0.1"], "length_tolerance=-0.1: give a largest"),
    ],
)
def test_pair_settings_are_refused_as_they_are_parsed(recipe, config, flags, message):
    """A negative cap would drop pairs silently and a negative tolerance would leave none: both are refused by the
    pair options themselves, before the data is read."""
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_recipe_config(recipe, config, "--data", "no/such.jsonl", *flags)
    parse_recipe_config(recipe, config, "--data", "no/such.jsonl", "--max_pairs_per_problem", "0")  # 0: no cap


def state(step):
    return types.SimpleNamespace(global_step=step)


@pytest.mark.parametrize(
    "step, logs, ok",
    [
        (1, {"loss": 0.693147, "rewards/chosen": 0.0, "rewards/rejected": 0.0}, True),  # the reference is the policy
        (1, {"loss": 0.70, "rewards/chosen": 0.0, "rewards/rejected": 0.0}, False),  # loss off by 7e-3
        (1, {"loss": 0.693147, "rewards/chosen": 0.05, "rewards/rejected": 0.0}, False),  # implicit reward not 0
        (5, {"loss": 0.693147}, False),  # logged after 5 steps: cannot be checked
    ],
)
def test_first_loss_check(caplog, step, logs, ok):
    check = FirstLossCheck(math.log(2))
    with caplog.at_level(logging.WARNING, logger="recipes.first_loss"):
        check.on_log(None, state(step), None, logs=logs)
    assert check.ok is ok
    assert bool(caplog.records) is not ok  # a warning exactly when the check fails
    check.on_log(None, state(step + 1), None, logs={"loss": 5.0})  # later logs do not re-run the check
    assert check.ok is ok


def first_losses(folder):
    """The logged training losses (not the end-of-training summary), with their steps."""
    return [(r["step"], r["loss"]) for r in read_jsonl(folder / "log.jsonl") if "loss" in r]


@pytest.mark.parametrize("config", GSM8K_CONFIGS)
def test_first_loss_is_checked_with_the_shipped_gsm8k_settings(tiny_model_dir, reference_pairs, tmp_path, config):
    # The shipped GPU configs log every 5 steps and accumulate gradients: the check must still see step 1 alone.
    # Only what a CPU and the tiny model need is overridden; logging_steps, gradient accumulation, LoRA, warmup,
    # gradient checkpointing and the loss settings come from the YAML.
    script_args, training_args, model_args = run_args(  # the later flags override run_args' own
        tiny_model_dir,
        reference_pairs,
        tmp_path,
        "--max_steps",
        "1",  # one step: without the check's own log, none has "loss"
        "--per_device_train_batch_size",
        "1",  # 1 pair per micro-batch, YAML's accumulation steps per step
        "--dtype",
        "float32",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        "--eval_limit",
        "0",
        "--max_length",
        "512",
        "--save_strategy",
        "no",
        config=config,
    )
    assert training_args.logging_steps == 5 and training_args.gradient_accumulation_steps > 1  # not the defaults
    assert not training_args.logging_first_step  # the YAML does not ask for step 1: the check must
    report = main(script_args, training_args, model_args)
    assert first_losses(tmp_path) == [(1, report["first_loss"])]
    assert abs(report["first_loss"] - math.log(2)) < 1e-4 and report["first_loss_ok"] is True


def test_first_loss_follows_loss_weights(tiny_model_dir, reference_pairs, tmp_path):
    # two log-sigmoid losses weighted 0.7 and 0.2: the first loss is 0.9 ln 2, neither ln 2 nor 2 ln 2
    args = run_args(
        tiny_model_dir,
        reference_pairs,
        tmp_path,
        "--eval_limit",
        "0",
        "--logging_steps",
        "3",  # step 1 is logged by the check, not by the schedule
        "--loss_type",
        "sigmoid",
        "robust",
        "--loss_weights",
        "0.7",
        "0.2",
        "--label_smoothing",
        "0.1",  # robust stays ln 2 per pair at the start, whatever the smoothing
    )
    report = main(*args)
    assert abs(report["first_loss"] - 0.9 * math.log(2)) < 1e-4  # what TRL computed
    assert abs(report["first_loss_expected"] - 0.9 * math.log(2)) < 1e-9  # what the check predicted
    assert report["first_loss_ok"] is True
    assert [step for step, _ in first_losses(tmp_path)] == [1]


def test_use_weighting_checks_rewards_and_says_the_loss_is_not_predicted(tiny_model_dir, reference_pairs, tmp_path):
    args = parse_recipe_config(
        "dpo",
        CONFIG,
        "--model_name_or_path",
        str(tiny_model_dir),
        "--build_tiny_model",
        "false",
        "--data",
        reference_pairs,
        "--output_dir",
        str(tmp_path),
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "2",
        "--eval_limit",
        "0",
        "--logging_steps",
        "4",
        "--use_weighting",
        "true",
        "--loss_weights",
        "0.6",
    )
    report = main(*args)
    assert report["first_loss_expected"] is None and "use_weighting" in report["first_loss_note"]
    assert report["first_loss"] is not None and report["first_loss_ok"] is True  # the implicit rewards were 0
    # WPO's weights come from the policy's token probabilities: 0.6 ln 2 is not what TRL computed
    assert abs(report["first_loss"] - 0.6 * math.log(2)) > 1e-3


@pytest.mark.parametrize(
    "loss_types, weights, use_weighting, expected",
    [
        (["sigmoid"], None, False, math.log(2)),  # TRL's default
        (["sigmoid", "robust"], [0.7, 0.2], False, 0.9 * math.log(2)),  # weighted sum of ln 2 terms
        (["sigmoid_norm"], [2.5], False, 2.5 * math.log(2)),  # a weight above 1
        (["sigmoid"], [0.6], True, None),  # WPO weights: depends on the model and the batch
        (["sigmoid", "sft"], [1.0, 0.5], False, None),  # the SFT term is the model's NLL on the data
        (["ipo"], None, False, None),  # not a log-sigmoid loss
    ],
)
def test_expected_first_loss(loss_types, weights, use_weighting, expected):
    value, note = expected_first_loss(loss_types, weights, use_weighting)
    assert (value is None) is (expected is None) and note
    if expected is not None:
        assert abs(value - expected) < 1e-12
    else:
        assert note.startswith("not predicted")


def test_check_asks_the_trainer_to_log_step_1_only():
    from transformers import TrainerControl

    check = FirstLossCheck(math.log(2))
    first, later = TrainerControl(), TrainerControl()
    check.on_step_end(None, state(1), first)
    check.on_step_end(None, state(2), later)
    assert first.should_log and not later.should_log


def test_unpredicted_loss_still_checks_the_rewards(caplog):
    ok = FirstLossCheck(None, "not predicted: use_weighting")
    ok.on_log(None, state(1), None, logs={"loss": 0.41, "rewards/chosen": 0.0, "rewards/rejected": 0.0})
    bad = FirstLossCheck(None, "not predicted: use_weighting")
    with caplog.at_level(logging.WARNING, logger="recipes.first_loss"):
        bad.on_log(None, state(1), None, logs={"loss": 0.41, "rewards/chosen": 0.0, "rewards/rejected": -0.2})
    assert ok.ok is True and bad.ok is False and "rewards/rejected" in caplog.text


def test_resumed_run_is_not_checked(caplog):
    # a run resumed at step 6 starts from a trained policy: no verdict, no false alarm
    from transformers import TrainerControl

    check = FirstLossCheck(math.log(2))
    check.on_step_end(None, state(7), TrainerControl())
    with caplog.at_level(logging.WARNING, logger="recipes.first_loss"):
        check.on_log(None, state(10), None, logs={"loss": 0.31})
    assert check.ok is None and check.resumed_at == 7 and not caplog.records


def test_the_check_reports_its_outcome_under_the_report_json_keys():
    check = FirstLossCheck(0.5, "ln 2 x (0.72)")
    assert check.report() == {
        "first_loss": None,
        "first_loss_ok": None,
        "first_loss_expected": 0.5,
        "first_loss_note": "ln 2 x (0.72)",
    }
    check.on_log(None, state(1), None, logs={"loss": 0.75})
    assert check.report()["first_loss"] == 0.75 and check.report()["first_loss_ok"] is False


def test_only_the_main_process_writes(tiny_model_dir, reference_pairs, tmp_path, monkeypatch):
    # a second process of `accelerate launch`: it trains and evaluates like the main one, and writes none of the files
    # the main process writes (the eval reports, report.json, resolved_config.json)
    from trl import DPOConfig

    monkeypatch.setattr(DPOConfig, "process_index", property(lambda self: 1))  # what run_setup reads
    report = main(*run_args(tiny_model_dir, reference_pairs, tmp_path))
    assert {"before", "after"} <= set(report)  # it evaluated ...
    for name in ("eval_before", "eval_after", "report.json", "resolved_config.json"):
        assert not (tmp_path / name).exists(), name  # ... and wrote nothing


def test_a_run_started_again_resumes_from_its_last_checkpoint(tiny_model_dir, reference_pairs, tmp_path, capsys):
    no_eval = ("--eval_limit", "0")
    main(
        *run_args(tiny_model_dir, reference_pairs, tmp_path, *no_eval, "--save_strategy", "steps", "--save_steps", "1")
    )
    assert (tmp_path / "checkpoint-2").is_dir()
    report = main(*run_args(tiny_model_dir, reference_pairs, tmp_path, *no_eval, "--max_steps", "3"))
    assert f"resuming from {tmp_path / 'checkpoint-2'}" in capsys.readouterr().out
    assert [step for step, _ in first_losses(tmp_path)] == [1, 2, 3]  # step 3 only, appended to the first run's log
    assert report["first_loss_ok"] is None  # a resumed policy is no longer the reference: not judged


# --- the first-loss check on stand-ins: what it logs, the edges of its tolerance, when a run counts as resumed ---


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
