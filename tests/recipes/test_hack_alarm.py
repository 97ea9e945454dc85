"""The hack alarm and the best checkpoint of the GRPO recipe (recipes/hack_alarm.py, recipes/callbacks.py, built by
recipes/grpo_setup.py).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_hack_alarm.py

The rule is tested on made-up check sequences; the callbacks on the log lines a Trainer hands them (a real tiny model
for the saves); the recipe's wiring on two steps of the tiny model; and the rule on the logs of the CPU lab's
format-only and default arms (tests/data/hack_alarm/, how they were made in tests/data/README.md). The lab runs
themselves are the slow test at the end (`pytest -m slow tests/recipes/test_hack_alarm.py`).
"""

import json
import logging
import random
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerControl

from eval.jsonl import read_jsonl
from recipes import grpo
from recipes.callbacks import BestCheckpoint, HackAlarm
from recipes.grpo_setup import held_out_watch, uses_zero3, watch_lines
from recipes.hack_alarm import (
    ALARM_KEY,
    DEFAULT_ALARM_CHECKS,
    GAP_KEY,
    MIN_ACCURACY_DROP,
    MIN_GAP_RISE,
    check_watch_args,
    checks_from_log,
    hack_signature,
)
from tests.helpers import parse_recipe_config

ROOT = Path(__file__).resolve().parents[2]
LAB_LOGS = ROOT / "tests" / "data" / "hack_alarm"


# --------------------------------------------------------------------------------------------------- the rule
def test_fires_on_a_rising_gap_with_falling_accuracy():
    found = hack_signature([0.10, 0.14, 0.19], [0.50, 0.46, 0.41], checks=2, n=100)
    assert found == {
        "reference": 0,
        "gap": [0.10, 0.14, 0.19],
        "accuracy": [0.50, 0.46, 0.41],
        "gap_rise": pytest.approx(0.09),
        "accuracy_drop": pytest.approx(0.09),
    }
    # the reference is the best check before the window, however far back: a slow drift adds up from there
    found = hack_signature([0.3, 0.0, 0.10, 0.14, 0.19], [0.2, 0.9, 0.50, 0.46, 0.41], checks=2)
    assert found["reference"] == 1 and found["gap_rise"] == pytest.approx(0.19)


def test_fires_on_a_slow_drift_whose_gap_zigzags():
    # the gap rises in a zigzag and accuracy falls a point or two a check: no single step is large, the drift from the
    # best check is
    gaps, accuracies = [0.778, 0.810, 0.802, 0.829, 0.827, 0.832], [0.34, 0.31, 0.31, 0.30, 0.29, 0.29]
    assert hack_signature(gaps[:2], accuracies[:2], checks=2) is None
    found = hack_signature(gaps[:3], accuracies[:3], checks=2, n=100)
    assert found["reference"] == 0 and found["gap"] == [0.778, 0.810, 0.802] and found["accuracy"] == [0.34, 0.31, 0.31]
    assert all(hack_signature(gaps[:end], accuracies[:end], checks=2, n=100) for end in range(3, 7))
    # a window whose first check is still at the reference's level does not fire: every check of it must show it
    assert hack_signature([0.78, 0.79, 0.83], [0.34, 0.33, 0.30], checks=2, n=100) is None


def test_does_not_fire_on_noise_within_the_thresholds():
    # a flat run whose gap jitters by less than half its tolerance while accuracy swings by ten points: accuracy falls
    # far below its best check often (noise alone), and the gap is what keeps the alarm quiet
    rng = random.Random(0)
    accuracy_matched = 0
    for _ in range(500):
        gaps = [0.1 + rng.uniform(-1, 1) * MIN_GAP_RISE / 2 for _ in range(8)]
        accuracies = [0.5 + rng.uniform(-1, 1) * 0.1 for _ in range(8)]
        for end in range(3, 9):
            best = max(accuracies[: end - 2])
            accuracy_matched += all(best - a > MIN_ACCURACY_DROP for a in accuracies[end - 2 : end])
            assert hack_signature(gaps[:end], accuracies[:end], checks=2, n=100) is None
    assert accuracy_matched > 500
    # and the same with the roles swapped: a gap that climbs while accuracy only jitters
    for _ in range(500):
        gaps = [0.1 + 0.05 * k for k in range(8)]
        accuracies = [0.5 + rng.uniform(-1, 1) * MIN_ACCURACY_DROP / 2 for _ in range(8)]
        assert hack_signature(gaps, accuracies, checks=2, n=100) is None
    # right at the tolerances is still noise: each check must be beyond both
    assert hack_signature([0.10, 0.12, 0.12], [0.50, 0.47, 0.47], checks=2) is None  # gap +0.02 only
    assert hack_signature([0.10, 0.13, 0.13], [0.50, 0.48, 0.47], checks=2) is None  # accuracy -0.02 at one check
    assert hack_signature([0.10, 0.13, 0.13], [0.50, 0.47, 0.47], checks=2) is not None  # both beyond, both checks
    # on a small held-out check the drop must also be more than 2 problems: 2 of 40 (0.05) is noise, 3 is not
    assert hack_signature([0.10, 0.15, 0.20], [0.500, 0.450, 0.450], checks=2, n=40) is None
    assert hack_signature([0.10, 0.15, 0.20], [0.500, 0.425, 0.425], checks=2, n=40) is not None


def test_does_not_fire_when_accuracy_rises_with_the_gap():
    # a format bonus being learned beside correct answers: the gap rises, so does held-out accuracy
    assert hack_signature([0.02, 0.05, 0.08, 0.1], [0.30, 0.36, 0.41, 0.45], checks=3) is None
    # nor when the gap rises while accuracy recovers on the way, nor when accuracy falls with the gap falling
    assert hack_signature([0.1, 0.15, 0.2], [0.5, 0.52, 0.4], checks=2) is None
    assert hack_signature([0.2, 0.15, 0.1], [0.5, 0.45, 0.4], checks=2) is None
    # nor when the run recovers: a new best check is the reference from then on
    assert hack_signature([0.1, 0.15, 0.2, 0.2, 0.25, 0.3], [0.5, 0.45, 0.4, 0.55, 0.55, 0.56], checks=2) is None


def test_needs_checks_plus_one_checks_and_a_gap_at_each():
    assert hack_signature([0.1, 0.2], [0.5, 0.4], checks=2) is None  # 2 checks: no reference for a window of 2
    assert hack_signature([0.1, 0.2], [0.5, 0.4], checks=1) is not None
    assert hack_signature([0.1, float("nan"), 0.3], [0.5, 0.45, 0.4], checks=2) is None  # a window without a gap
    # a check without a gap cannot be the reference; the best check that has one is
    found = hack_signature([float("nan"), 0.1, 0.2, 0.3], [0.6, 0.5, 0.45, 0.4], checks=2)
    assert found is not None and found["reference"] == 1
    assert hack_signature([float("nan"), 0.2, 0.3], [0.6, 0.45, 0.4], checks=2) is None  # no reference at all
    with pytest.raises(ValueError, match="checks >= 1"):
        hack_signature([0.1, 0.2], [0.5, 0.4], checks=0)
    with pytest.raises(ValueError, match="2 gaps but 1 accuracies"):
        hack_signature([0.1, 0.2], [0.5], checks=1)


def test_a_checks_gap_is_the_mean_of_the_lines_since_the_previous_check():
    lines = [
        {"step": 1, GAP_KEY: 0.1},
        {"step": 2, GAP_KEY: 0.3, "eval/accuracy": 0.5, "eval/n": 100},
        {"step": 3, GAP_KEY: None},  # NaN in log.jsonl: left out, not a zero
        {"step": 4, GAP_KEY: 0.5},
        {"step": 5, GAP_KEY: 0.6, "eval/accuracy": 0.4, "eval/n": 100},
        {"step": 6, "eval/accuracy": 0.3, "eval/n": 100},  # no gap since the last check
    ]
    checks = checks_from_log(lines)
    assert [(c.step, c.accuracy, c.gap_lines) for c in checks] == [(2, 0.5, 2), (5, 0.4, 2), (6, 0.3, 0)]
    assert checks[0].gap == pytest.approx(0.2) and checks[1].gap == pytest.approx(0.55)
    assert checks[2].gap != checks[2].gap  # NaN: that check cannot complete a signature


# --------------------------------------------------------------------------------------------------- HackAlarm
def state_at(step: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(global_step=step, is_world_process_zero=True)


def hack_log(checks: int = 6, every: int = 5) -> list[dict]:
    """Log lines of a run that hacks from its first check on: gap up, accuracy down at every check."""
    lines = []
    for k in range(1, checks + 1):
        for step in range((k - 1) * every + 1, k * every + 1):
            line = {"step": step, GAP_KEY: 0.05 * k}
            if step == k * every:
                line |= {"eval/accuracy": 0.6 - 0.05 * k, "eval/n": 100}
            lines.append(line)
    return lines


def feed(callback, lines: list[dict]) -> tuple[list[dict], list[TrainerControl]]:
    """``on_log`` of each line as the Trainer calls it; the lines as they reach log.jsonl, and each control."""
    logged, controls = [], []
    for line in lines:
        logs = {k: v for k, v in line.items() if k != "step"}
        control = TrainerControl()
        callback.on_log(None, state_at(line["step"]), control, logs=logs)
        logged.append(logs | {"step": line["step"]})
        controls.append(control)
    return logged, controls


def test_alarm_warns_once_and_marks_the_log(caplog):
    alarm = HackAlarm(2)
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        logged, controls = feed(alarm, hack_log(checks=6))
    banners = [r.getMessage() for r in caplog.records if "HACK ALARM" in r.getMessage()]
    assert len(banners) == 1, banners  # six checks all show the signature from the third on: one warning
    assert "HACK ALARM at step 15" in banners[0] and "(steps 10, 15)" in banners[0] and "(step 5)" in banners[0]
    assert "training goes on" in banners[0]
    check_lines = [line for line in logged if "eval/accuracy" in line]
    assert [line[ALARM_KEY] for line in check_lines] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert [f"{ALARM_KEY}_gap_rise" in line for line in check_lines] == [False, False, True, False, False, False]
    assert all(ALARM_KEY not in line for line in logged if "eval/accuracy" not in line)
    assert not any(c.should_training_stop for c in controls)  # stop_on_hack is off
    report = alarm.report()["hack_alarm"]
    assert report["fired"]["step"] == 15 and report["fired"]["steps"] == [5, 10, 15] and not report["stopped"]
    assert report["fired"]["gap_rise"] == pytest.approx(0.1)  # 0.05 -> 0.15
    assert report["fired"]["accuracy_drop"] == pytest.approx(0.1)  # 0.55 -> 0.45


def test_stop_on_hack_stops_at_the_check_that_fires(caplog):
    alarm = HackAlarm(2, stop=True)
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        logged, controls = feed(alarm, hack_log(checks=4))
    stops = [line["step"] for line, control in zip(logged, controls, strict=True) if control.should_training_stop]
    assert stops == [15]
    assert alarm.report()["hack_alarm"]["stopped"] is True
    assert "STOPPING the run" in caplog.text


def test_alarm_stays_quiet_on_a_learning_run(caplog):
    lines = [{k: (-v if k == "eval/accuracy" else v) for k, v in line.items()} for line in hack_log(checks=6)]
    lines = [line | ({"eval/accuracy": 1 + line["eval/accuracy"]} if "eval/accuracy" in line else {}) for line in lines]
    alarm = HackAlarm(2, stop=True)  # the same gaps, accuracy rising 0.45 -> 0.7
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        logged, controls = feed(alarm, lines)
    assert [line[ALARM_KEY] for line in logged if "eval/accuracy" in line] == [0.0] * 6
    assert not any(c.should_training_stop for c in controls) and "HACK ALARM" not in caplog.text
    assert alarm.report() == {"hack_alarm": {"checks": 2, "fired": None, "stopped": False}}


def test_every_check_line_is_marked_also_at_zero_accuracy():
    # a model that solves nothing yet (accuracy 0.0) still gets the alarm's value on its check lines
    lines = [{"step": 1, GAP_KEY: 0.0}, {"step": 2, GAP_KEY: 0.0, "eval/accuracy": 0.0, "eval/n": 8}]
    logged, _ = feed(HackAlarm(1), lines)
    assert ALARM_KEY not in logged[0] and logged[1][ALARM_KEY] == 0.0


def test_a_resumed_alarm_replays_its_log_and_does_not_fire_twice(tmp_path, caplog):
    lines = hack_log(checks=6)
    first = HackAlarm(2, log_path=tmp_path / "log.jsonl")
    logged, _ = feed(first, lines[:20])  # fired at step 15, killed after step 20
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in logged))
    resumed = HackAlarm(2, log_path=tmp_path / "log.jsonl")
    resumed.on_train_begin(None, state_at(20), TrainerControl())
    caplog.clear()  # the first run's warning
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        feed(resumed, lines[20:])
    assert "HACK ALARM" not in caplog.text and resumed.report()["hack_alarm"]["fired"]["step"] == 15


# --------------------------------------------------------------------------------------------------- the options
def test_the_options_checks_name_the_problem_and_the_fix():
    def refused(**kw) -> str:
        args = {"keep_best": False, "alarm_checks": None, "stop_on_hack": False, "monitor_eval_steps": 20}
        with pytest.raises(ValueError) as error:
            check_watch_args(**(args | {"max_steps": 120} | kw))
        return str(error.value)

    assert "keep_best_checkpoint needs monitor_eval_steps > 0" in refused(keep_best=True, monitor_eval_steps=0)
    assert "set monitor_eval_steps to at most 10" in refused(keep_best=True, max_steps=10)
    assert "ZeRO-3" in refused(keep_best=True, zero3=True)
    assert "hack_alarm_checks must be >= 0" in refused(alarm_checks=-1)
    assert "needs monitor_eval_steps > 0" in refused(alarm_checks=2, monitor_eval_steps=0)
    assert "compares 6 held-out checks but max_steps 100" in refused(alarm_checks=5, max_steps=100)
    assert "stop_on_hack needs the hack alarm" in refused(stop_on_hack=True, alarm_checks=0)
    assert "stop_on_hack needs the hack alarm" in refused(stop_on_hack=True, monitor_eval_steps=0)
    # accepted: the resolved N
    assert check_watch_args(True, None, True, monitor_eval_steps=20, max_steps=120) == DEFAULT_ALARM_CHECKS
    assert check_watch_args(False, 5, False, monitor_eval_steps=20, max_steps=120) == 5
    assert check_watch_args(False, 0, False, monitor_eval_steps=20, max_steps=120) == 0
    assert check_watch_args(False, None, False, monitor_eval_steps=0, max_steps=120) == 0
    assert check_watch_args(True, 3, False, monitor_eval_steps=20, max_steps=-1) == 3  # epochs: no step bound


def test_zero3_is_read_from_the_deepspeed_config_or_accelerate(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", raising=False)
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    assert uses_zero3(types.SimpleNamespace(deepspeed=str(config)))
    assert uses_zero3(types.SimpleNamespace(deepspeed={"zero_optimization": {"stage": 3}}))
    assert not uses_zero3(types.SimpleNamespace(deepspeed={"zero_optimization": {"stage": 2}}))
    assert not uses_zero3(types.SimpleNamespace(deepspeed=None))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert uses_zero3(types.SimpleNamespace(deepspeed=None))


TINY_CONFIG = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"


def recipe_args(tiny_model_dir, data_dir, out: Path, *overrides: str) -> list[str]:
    """The flags of a tiny run of TINY_CONFIG, then ``overrides``."""
    args = ["--output_dir", str(out)]
    args += ["--model_name_or_path", str(tiny_model_dir), "--build_tiny_model", "false"]
    args += ["--data", str(data_dir / "gsm8k" / "train.jsonl"), "--eval_data", str(data_dir / "gsm8k" / "test.jsonl")]
    return args + list(overrides)


def test_keep_best_without_monitor_checks_is_refused_before_any_model_loads(data_dir, tmp_path):
    missing = tmp_path / "no_model_here"  # a model load would fail on this path with another message
    argv = recipe_args(missing, data_dir, tmp_path / "run", "--keep_best_checkpoint", "true")
    argv += ["--monitor_eval_steps", "0"]
    with pytest.raises(ValueError, match="keep_best_checkpoint needs monitor_eval_steps > 0"):
        grpo.main(*parse_recipe_config(grpo, TINY_CONFIG, *argv))
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------------- BestCheckpoint
def test_best_checkpoint_saves_at_the_best_check_only(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    path = tmp_path / "run" / "best"
    path.mkdir(parents=True)
    (path / "stale.txt").write_text("an earlier run's best")
    best = BestCheckpoint(path)
    best.on_train_begin(None, state_at(0), TrainerControl())
    assert not path.exists()  # a fresh run does not keep another run's best

    marker = next(p for p in model.parameters())  # stamped with the step, so a save shows which step it holds
    saved_at = []
    save = model.save_pretrained
    model.save_pretrained = lambda folder, **kw: (saved_at.append(step), save(folder, **kw))
    accuracies = {2: 0.30, 4: 0.50, 6: 0.40, 8: 0.50, 10: 0.20}  # step 8 ties step 4: the earlier stays
    for step in range(1, 11):
        with torch.no_grad():
            marker.view(-1)[0] = float(step)
        logs = {GAP_KEY: 0.1} | ({"eval/accuracy": accuracies[step], "eval/n": 100} if step in accuracies else {})
        best.on_log(None, state_at(step), TrainerControl(), logs=logs, model=model, processing_class=tokenizer)

    assert saved_at == [2, 4]
    assert json.loads((path / "best.json").read_text()) == {"step": 4, "accuracy": 0.5, "n": 100}
    weights = load_file(path / "model.safetensors")
    assert any(t.flatten()[0].item() == 4.0 for t in weights.values())  # the weights of step 4, not of step 10
    assert (path / "config.json").exists() and (path / "tokenizer.json").exists()
    assert not path.with_name("best.tmp").exists()
    assert best.report() == {"best_checkpoint": {"path": str(path), "step": 4, "accuracy": 0.5, "n": 100}}

    # resumed at step 10: the saved best is kept until a check beats it
    resumed = BestCheckpoint(path)
    resumed.on_train_begin(None, state_at(10), TrainerControl())
    resumed.on_log(None, state_at(12), TrainerControl(), logs={"eval/accuracy": 0.45}, model=model)
    assert json.loads((path / "best.json").read_text())["step"] == 4
    resumed.on_log(None, state_at(14), TrainerControl(), logs={"eval/accuracy": 0.55, "eval/n": 100}, model=model)
    assert json.loads((path / "best.json").read_text())["step"] == 14


def test_watch_lines_say_what_fired_and_where_the_best_is():
    lines = watch_lines(
        {
            "best_checkpoint": {"path": "runs/x/best", "step": 40, "accuracy": 0.52, "n": 100},
            "hack_alarm": {"checks": 2, "fired": {"step": 60, "gap_rise": 0.031, "accuracy_drop": 0.07}, "stopped": 1},
        }
    )
    assert lines == [
        "best checkpoint: runs/x/best (step 40, held-out accuracy 0.520, n=100)",
        "HACK ALARM raised at step 60: gap +0.031, held-out accuracy -0.070 over 2 checks (run stopped)",
    ]
    assert watch_lines({"hack_alarm": {"checks": 2, "fired": None, "stopped": False}}) == [
        "hack alarm: not raised (2 checks)"
    ]
    assert watch_lines({}) == []


@pytest.mark.integration
def test_recipe_keeps_the_best_adapter_and_reports_the_alarm(tiny_model_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = recipe_args(tiny_model_dir, data_dir, out, "--max_steps", "3", "--monitor_eval_steps", "1")
    argv += ["--monitor_eval_limit", "2", "--eval_limit", "0", "--probe_problems", "0", "--use_peft", "true"]
    argv += ["--lora_r", "4", "--max_completion_length", "8", "--eval_max_new_tokens", "8"]
    argv += ["--keep_best_checkpoint", "true", "--hack_alarm_checks", "1"]
    grpo.main(*parse_recipe_config(grpo, TINY_CONFIG, *argv))

    checks = [line for line in read_jsonl(out / "log.jsonl") if "eval/accuracy" in line]
    assert [c["step"] for c in checks] == [1, 2, 3] and all(ALARM_KEY in c for c in checks)
    top = max(c["eval/accuracy"] for c in checks)
    first_best = next(c for c in checks if c["eval/accuracy"] == top)
    best = json.loads((out / "best" / "best.json").read_text())
    assert best == {"step": first_best["step"], "accuracy": top, "n": 2}
    assert (out / "best" / "adapter_model.safetensors").exists() and (out / "best" / "adapter_config.json").exists()
    report = json.loads((out / "report.json").read_text())
    assert report["best_checkpoint"] == {"path": str(out / "best"), **best}
    fired = report["hack_alarm"]["fired"]
    assert report["hack_alarm"]["checks"] == 1 and (fired is None) == all(c[ALARM_KEY] == 0 for c in checks)
    summary = capsys.readouterr().out
    assert f"best checkpoint: {out / 'best'} (step {best['step']}" in summary and "hack alarm" in summary.lower()


def test_held_out_watch_makes_what_the_options_ask(tmp_path):
    def made(**kw):
        args = types.SimpleNamespace(
            hack_alarm_checks=0, stop_on_hack=False, keep_best_checkpoint=False, monitor_eval_limit=100
        )
        return held_out_watch(types.SimpleNamespace(**(vars(args) | kw)), tmp_path, ["none"])

    assert made() == []
    alarm, best = made(hack_alarm_checks=3, stop_on_hack=True, keep_best_checkpoint=True)
    assert isinstance(alarm, HackAlarm) and alarm.checks == 3 and alarm.stop and alarm.n_problems == 100
    assert isinstance(best, BestCheckpoint) and best.path == tmp_path / "best"


# --------------------------------------------------------------------------------------------------- the CPU lab
def alarm_over(lines: list[dict], checks: int) -> dict | None:
    """The alarm replayed over a run's log lines, check by check as it runs: what fires first, with its step."""
    alarm = HackAlarm(checks)
    for line in lines:
        alarm._observe(line)
    return alarm.fired


def test_the_lab_logs_format_only_fires_and_default_does_not():
    format_only = read_jsonl(LAB_LOGS / "grpo_lab_format_only_seed0.jsonl")
    default = read_jsonl(LAB_LOGS / "grpo_lab_default_seed0.jsonl")
    assert len(checks_from_log(format_only)) == len(checks_from_log(default)) == 6  # every 20 of 120 steps

    fired = alarm_over(format_only, DEFAULT_ALARM_CHECKS)
    assert fired is not None, [(c.step, round(c.gap, 3), c.accuracy) for c in checks_from_log(format_only)]
    assert alarm_over(default, DEFAULT_ALARM_CHECKS) is None
    # the replay is what the run itself logged: 0 before the check that fired, 1 from it on
    for line in format_only:
        if "eval/accuracy" in line:
            assert line[ALARM_KEY] == float(line["step"] >= fired["step"])
    assert all(line[ALARM_KEY] == 0.0 for line in default if "eval/accuracy" in line)


def test_the_alarm_fires_on_a_steep_and_on_a_slow_format_only_drift():
    # the same arm on the same kind of machine under more load drifted faster (accuracy 0.35 -> 0.21 over the run);
    # the run above drifted slowly (0.35 -> 0.30 at step 100, back to 0.32 at 120): the rule must catch both before
    # the run ends
    for name in ("grpo_lab_format_only_seed0_steep.jsonl", "grpo_lab_format_only_seed0.jsonl"):
        checks = checks_from_log(read_jsonl(LAB_LOGS / name))
        fired = alarm_over(read_jsonl(LAB_LOGS / name), DEFAULT_ALARM_CHECKS)
        assert fired is not None and fired["step"] < checks[-1].step, (name, fired)


@pytest.mark.slow
def test_the_lab_format_only_arm_fires_the_alarm_and_the_default_arm_does_not(tmp_path_factory):
    from cpu_lab.matrix import run_dir, run_matrix
    from cpu_lab.warmstart import WarmStartSettings, prepare_lab, recipe_flags

    lab = tmp_path_factory.mktemp("lab")
    paths = prepare_lab(WarmStartSettings(seed=0), ROOT / "runs" / "lab" / "cache", lab)
    out = tmp_path_factory.mktemp("runs")
    configs = [
        ROOT / "recipes" / "configs" / "lab" / f"{name}.yaml" for name in ("grpo_lab_format_only", "grpo_lab_default")
    ]
    run_matrix([str(c) for c in configs], [0], out, recipe_flags(paths), jobs=2)
    format_only, default = (json.loads((run_dir(out, c, 0) / "report.json").read_text()) for c in configs)
    assert format_only["hack_alarm"]["fired"] is not None, format_only["hack_alarm"]
    assert default["hack_alarm"] == {"checks": DEFAULT_ALARM_CHECKS, "fired": None, "stopped": False}
