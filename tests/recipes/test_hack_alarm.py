"""The hack alarm and the best checkpoint of the GRPO recipe (recipes/hack_alarm.py, recipes/callbacks.py, built by
recipes/grpo_setup.py).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_hack_alarm.py

The rule is tested on made-up checks; its false-alarm rate exactly where its bound is tightest (one comparison, over
the binomial) and by simulation on runs whose held-out accuracy does not fall, its power on runs where it falls
(bench/hack_alarm.py, whose table docs/grpo.md shows); the callbacks on the log lines a Trainer hands them (a real
tiny model for the saves); the recipe's wiring on three steps of the tiny model; and the held-out side on the logs of
the CPU lab's format-only and default arms (tests/data/hack_alarm/, how they were made in tests/data/README.md). The
lab runs themselves are the slow test at the end (`pytest -m slow tests/recipes/test_hack_alarm.py`).
"""

import itertools
import json
import logging
import math
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerControl

from bench.hack_alarm import FLAT, Scenario, alarms
from eval.jsonl import read_jsonl
from recipes import grpo
from recipes.callbacks import BestCheckpoint, HackAlarm
from recipes.grpo_setup import held_out_watch, uses_zero3, watch_lines
from recipes.hack_alarm import (
    ALARM_KEY,
    ALPHA,
    DEFAULT_ALARM_CHECKS,
    REWARD_KEY,
    Check,
    check_watch_args,
    checks_from_log,
    comparisons,
    fall_p_value,
    first_alarm,
    hack_signature,
    reward_trend,
)
from tests.helpers import parse_recipe_config, tiny_run_flags

ROOT = Path(__file__).resolve().parents[2]
LAB_LOGS = ROOT / "tests" / "data" / "hack_alarm"


def run(accuracies: list[float], n: int = 100, reward_step: float = 0.01, lines: int = 3) -> list[Check]:
    """Checks every 20 steps at these accuracies, each after ``lines`` log lines whose reward moves by ``reward_step``
    a line from 0.5 (0: flat)."""
    reward = iter(0.5 + reward_step * i for i in range(len(accuracies) * lines))
    return [Check(20 * (k + 1), a, n, tuple(next(reward) for _ in range(lines))) for k, a in enumerate(accuracies)]


# --------------------------------------------------------------------------------------------------- the rule
def test_fires_when_held_out_accuracy_falls_beyond_its_noise_while_the_reward_rises():
    found = hack_signature(run([0.40] * 6 + [0.19]), window=1, comparisons=28)
    assert found == {
        "reference_step": 120,  # of equally good earlier checks, the latest
        "window_steps": [140],
        "accuracy_reference": 0.40,
        "accuracy_window": 0.19,
        "accuracy_drop": 0.21,
        "n": 100,
        "p_fall": pytest.approx(fall_p_value(0.40, 0.19, 100)),
        "level": pytest.approx(ALPHA / 28),
        "reward_tau": 1.0,  # the reward of every line up to the check, rising at each
        "p_reward": pytest.approx(reward_trend([0.5 + 0.01 * i for i in range(21)])[1]),
    }
    # the reference is the best earlier check, however far back; the window's checks are averaged
    found = hack_signature(run([0.30, 0.55, 0.40, 0.35, 0.25, 0.23]), window=2, comparisons=10)
    assert found["reference_step"] == 40 and found["window_steps"] == [100, 120]
    assert found["accuracy_window"] == pytest.approx(0.24) and found["accuracy_drop"] == pytest.approx(0.31)


def test_stays_quiet_on_a_fall_within_the_noise_of_its_checks():
    # 10 points on 100 problems is within what two checks of the same model differ by; on 1,000 it is not
    assert fall_p_value(0.40, 0.30, 100) > ALPHA / 28
    assert hack_signature(run([0.40] * 6 + [0.30]), window=1, comparisons=28) is None
    assert hack_signature(run([0.40] * 6 + [0.30], n=1000), window=1, comparisons=28) is not None
    # the level is split over the run's comparisons: the same fall fires in a run that compares once
    assert 0.05 / 28 < fall_p_value(0.40, 0.25, 100) < 0.05
    assert hack_signature(run([0.40, 0.25]), window=1, comparisons=1) is not None
    assert hack_signature(run([0.40, 0.25]), window=1, comparisons=28) is None
    # a window of 2 checks, one of them low, averages to a fall within the noise
    assert hack_signature(run([0.40] * 6 + [0.19, 0.40]), window=2, comparisons=21) is None
    assert hack_signature(run([0.40] * 6 + [0.19, 0.21]), window=2, comparisons=21) is not None


def test_stays_quiet_unless_the_training_reward_rises():
    checks = run([0.40] * 6 + [0.19])
    assert hack_signature(checks, window=1, comparisons=28) is not None
    # the same held-out fall with the reward falling (the run falls apart) or flat (every line tied): no hack signature
    assert hack_signature(run([0.40] * 6 + [0.19], reward_step=-0.01), window=1, comparisons=28) is None
    assert hack_signature(run([0.40] * 6 + [0.19], reward_step=0.0), window=1, comparisons=28) is None
    # a held-out rise with the reward rising is learning
    assert hack_signature(run([0.20, 0.30, 0.35, 0.45]), window=1, comparisons=6) is None


def test_needs_a_window_and_an_earlier_check_and_the_problem_count():
    assert hack_signature(run([0.40, 0.10]), window=2, comparisons=1) is None  # no check before a window of 2
    assert hack_signature(run([0.40, 0.10]), window=1, comparisons=1) is not None
    unknown = [Check(c.step, c.accuracy, 0, c.rewards) for c in run([0.40, 0.10])]  # lines without eval/n
    assert hack_signature(unknown, window=1, comparisons=1) is None
    assert hack_signature(unknown, window=1, comparisons=1, n=100) is not None  # monitor_eval_limit stands in
    with pytest.raises(ValueError, match="window >= 1 and comparisons >= 1"):
        hack_signature(run([0.4, 0.1]), window=0, comparisons=1)
    with pytest.raises(ValueError, match="window >= 1 and comparisons >= 1"):
        hack_signature(run([0.4, 0.1]), window=1, comparisons=0)


def test_a_side_counts_as_n_problems_however_many_checks_it_averages():
    # checks of the same problems: averaging them does not shrink the noise of which problems were drawn
    one = hack_signature(run([0.40] * 3 + [0.15]), window=1, comparisons=3)
    two = hack_signature(run([0.40] * 3 + [0.15, 0.15]), window=2, comparisons=3)
    assert one["p_fall"] == two["p_fall"] == fall_p_value(0.40, 0.15, 100)


def test_comparisons_count_every_pair_of_an_earlier_check_and_a_window():
    assert comparisons(120, 20, 1) == 1 + 2 + 3 + 4 + 5  # 6 checks: the 2nd against 1, the 3rd against 2, ...
    assert comparisons(120, 20, 2) == 1 + 2 + 3 + 4
    assert comparisons(40, 20, 1) == 1 and comparisons(20, 20, 1) == 1 and comparisons(0, 20, 1) == 1
    # replayed check by check, a run makes exactly that many: each check against each one before its window
    for window in (1, 2, 3):
        made = sum(max(0, k - window) for k in range(1, 7))
        assert made == comparisons(120, 20, window)


# --------------------------------------------------------------------------------------------------- its error rates
def binomial(n: int, p: float) -> list[float]:
    return [math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(n + 1)]


def exact_rate(n: int, p: float, level: float, p_value=fall_p_value) -> float:
    """P(p-value < level) for two independent checks of n problems at the same true accuracy p, summed exactly."""
    mass = binomial(n, p)
    pairs = itertools.product(range(n + 1), repeat=2)
    return sum(mass[a] * mass[b] for a, b in pairs if p_value(a / n, b / n, n) < level)


def test_one_comparison_is_at_or_below_its_level_exactly():
    # two independent checks are where the bound is tight (a check against an earlier one, nothing averaged, no
    # correlation to help): the rate there, summed over the binomial, must not exceed the level at any accuracy
    for n, p, level in itertools.product((16, 32, 100, 200), (0.05, 0.2, 0.4, 0.5, 0.7), (ALPHA, ALPHA / 15)):
        assert exact_rate(n, p, level) <= level, (n, p, level)

    # the check has teeth: the same test without the half-problem correction exceeds its level (by up to a fifth)
    def uncorrected(reference, latest, n):
        mean = (reference + latest) / 2
        if not 0 < mean < 1:
            return 1.0
        return 0.5 * math.erfc((reference - latest) / math.sqrt(2 * mean * (1 - mean) / n) / math.sqrt(2))

    assert exact_rate(100, 0.05, ALPHA, uncorrected) > 1.1 * ALPHA


def test_false_alarm_rate_on_simulated_runs_is_at_most_alpha():
    # 1,000 runs each of checks that are binomial draws at an unchanging true accuracy, while the training reward
    # rises (so the reward side is open: the worst case); bench/hack_alarm.py prints the same rows
    runs = 1000
    for scenario in (
        Scenario("flat", FLAT),  # 9 checks of 100 problems at 0.4
        Scenario("flat, window 2", FLAT, window=2),
        Scenario("flat, 32 problems", FLAT, n=32),
        Scenario("learning", (0.30, 0.33, 0.35, 0.38, 0.40, 0.42, 0.45, 0.47, 0.50)),
    ):
        assert alarms(scenario, runs) <= ALPHA * runs, scenario.name


def test_power_on_simulated_falls():
    runs = 1000
    fall = (0.4,) * 6 + (0.25,) * 3  # 15 points down at the last 3 of 9 checks
    assert alarms(Scenario("-15", fall), runs) >= 0.8 * runs  # 100 problems a check
    assert alarms(Scenario("-15, 200", fall, n=200), runs) >= 0.98 * runs
    assert alarms(Scenario("-20", (0.4,) * 6 + (0.2,) * 3), runs) >= 0.95 * runs
    # a fall that comes with a falling reward is not the hack signature
    assert alarms(Scenario("-20, reward down", (0.4,) * 6 + (0.2,) * 3, reward_rise=-0.1), runs) <= 0.01 * runs


def test_reward_trend_is_mann_kendall():
    # against the exact permutation distribution of Kendall's S for 7 distinct values (5,040 orders)
    values = [0.50, 0.53, 0.51, 0.56, 0.55, 0.58, 0.60]

    def s_of(xs):
        return sum((b > a) - (b < a) for a, b in itertools.combinations(xs, 2))

    s = s_of(values)
    exact = sum(s_of(order) >= s for order in itertools.permutations(values)) / math.factorial(7)
    tau, p = reward_trend(values)
    assert tau == pytest.approx(s / 21) and p == pytest.approx(exact, abs=0.005)
    assert reward_trend(values[::-1])[1] > 0.99 and reward_trend(values[::-1])[0] == pytest.approx(-tau)
    assert reward_trend([0.5, 0.6]) == (0.0, 1.0)  # too few to say
    assert reward_trend([0.5, 0.5, 0.6, 0.6, 0.6])[1] < reward_trend([0.5, 0.5, 0.5, 0.5, 0.6])[1]  # ties counted


def test_a_check_carries_the_rewards_of_the_lines_since_the_previous_check():
    lines = [
        {"step": 1, REWARD_KEY: 0.1},
        {"step": 2, REWARD_KEY: 0.3, "eval/accuracy": 0.5, "eval/n": 100},
        {"step": 3, REWARD_KEY: None},  # NaN in log.jsonl: left out, not a zero
        {"step": 4, REWARD_KEY: 0.5},
        {"step": 5, REWARD_KEY: 0.6, "eval/accuracy": 0.4, "eval/n": 100},
        {"step": 6, "eval/accuracy": 0.3},  # no reward since the last check, no eval/n
    ]
    assert checks_from_log(lines) == [
        Check(2, 0.5, 100, (0.1, 0.3)),
        Check(5, 0.4, 100, (0.5, 0.6)),
        Check(6, 0.3, 0, ()),
    ]


# --------------------------------------------------------------------------------------------------- HackAlarm
def state_at(step: int, max_steps: int = 30) -> types.SimpleNamespace:
    return types.SimpleNamespace(global_step=step, max_steps=max_steps, is_world_process_zero=True)


def hack_log(accuracies=(0.6, 0.6, 0.6, 0.3, 0.25, 0.2), every: int = 5) -> list[dict]:
    """Log lines of a run whose reward rises every step while held-out accuracy (100 problems) falls at check 4."""
    lines = []
    for k, accuracy in enumerate(accuracies, start=1):
        for step in range((k - 1) * every + 1, k * every + 1):
            line = {"step": step, REWARD_KEY: 0.01 * step}
            if step == k * every:
                line |= {"eval/accuracy": accuracy, "eval/n": 100}
            lines.append(line)
    return lines


def started(alarm: HackAlarm, max_steps: int = 30) -> HackAlarm:
    alarm.on_train_begin(None, state_at(0, max_steps), TrainerControl())
    return alarm


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
    alarm = started(HackAlarm(1, eval_every=5))
    assert alarm.comparisons == comparisons(30, 5, 1) == 15
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        logged, controls = feed(alarm, hack_log())
    banners = [r.getMessage() for r in caplog.records if "HACK ALARM" in r.getMessage()]
    assert len(banners) == 1, banners  # it holds at the 4th, 5th and 6th checks: one warning
    assert "HACK ALARM at step 20" in banners[0] and "(steps 20)" in banners[0] and "step 15" in banners[0]
    assert f"< {ALPHA / 15:.2g}" in banners[0] and "training goes on" in banners[0]
    check_lines = [line for line in logged if "eval/accuracy" in line]
    assert [line[ALARM_KEY] for line in check_lines] == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert [f"{ALARM_KEY}_p_fall" in line for line in check_lines] == [False, False, False, True, False, False]
    assert check_lines[3][f"{ALARM_KEY}_accuracy_drop"] == pytest.approx(0.3)
    assert check_lines[3][f"{ALARM_KEY}_reward_tau"] == 1.0
    assert all(ALARM_KEY not in line for line in logged if "eval/accuracy" not in line)
    assert not any(c.should_training_stop for c in controls)  # stop_on_hack is off
    report = alarm.report()["hack_alarm"]
    assert report["comparisons"] == 15 and report["alpha"] == ALPHA and not report["stopped"]
    fired = report["fired"]
    assert fired["step"] == 20 and fired["reference_step"] == 15 and fired["window_steps"] == [20]
    assert fired == first_alarm(checks_from_log(hack_log()), 1, 15)  # what a replay of the log recomputes


def test_stop_on_hack_stops_at_the_check_that_fires(caplog):
    alarm = started(HackAlarm(1, eval_every=5, stop=True))
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        logged, controls = feed(alarm, hack_log())
    stops = [line["step"] for line, control in zip(logged, controls, strict=True) if control.should_training_stop]
    assert stops == [20]
    assert alarm.report()["hack_alarm"]["stopped"] is True
    assert "STOPPING the run" in caplog.text


def test_alarm_stays_quiet_on_a_learning_run(caplog):
    alarm = started(HackAlarm(1, eval_every=5, stop=True))  # the same rising reward, held-out accuracy rising
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        logged, controls = feed(alarm, hack_log((0.2, 0.25, 0.3, 0.6, 0.6, 0.6)))
    assert [line[ALARM_KEY] for line in logged if "eval/accuracy" in line] == [0.0] * 6
    assert not any(c.should_training_stop for c in controls) and "HACK ALARM" not in caplog.text
    assert alarm.report() == {
        "hack_alarm": {"checks": 1, "comparisons": 15, "alpha": ALPHA, "fired": None, "stopped": False}
    }


def test_alarm_splits_alpha_over_the_comparisons_of_the_run():
    # the fall of hack_log at step 20 (0.6 -> 0.3 on 100 problems, p ~ 1e-5) fires in a run of 6 checks; in a run of
    # 600 checks (179,700 comparisons) it is within what that many comparisons throw up by chance, and only the fall to
    # 0.2 at step 30 (p ~ 6e-9) is beyond it
    assert feed(started(HackAlarm(1, eval_every=5), max_steps=30), hack_log())[0][19][ALARM_KEY] == 1.0
    long_run = started(HackAlarm(1, eval_every=5), max_steps=3000)
    assert long_run.comparisons == 599 * 600 // 2
    feed(long_run, hack_log())
    assert long_run.fired["step"] == 30 and long_run.fired["level"] == pytest.approx(ALPHA / 179_700)
    with pytest.raises(RuntimeError, match="before on_train_begin"):
        feed(HackAlarm(1, eval_every=5), hack_log())


def test_every_check_line_is_marked_also_at_zero_accuracy():
    # a model that solves nothing yet (accuracy 0.0) still gets the alarm's value on its check lines
    lines = [{"step": 1, REWARD_KEY: 0.0}, {"step": 2, REWARD_KEY: 0.0, "eval/accuracy": 0.0, "eval/n": 8}]
    logged, _ = feed(started(HackAlarm(1, eval_every=2)), lines)
    assert ALARM_KEY not in logged[0] and logged[1][ALARM_KEY] == 0.0


def test_a_resumed_alarm_replays_its_log_and_does_not_fire_twice(tmp_path, caplog):
    lines = hack_log()
    first = started(HackAlarm(1, eval_every=5, log_path=tmp_path / "log.jsonl"))
    logged, _ = feed(first, lines[:25])  # fired at step 20, killed after step 25
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in logged))
    resumed = HackAlarm(1, eval_every=5, log_path=tmp_path / "log.jsonl")
    resumed.on_train_begin(None, state_at(25), TrainerControl())
    caplog.clear()  # the first run's warning
    with caplog.at_level(logging.WARNING, logger="recipes.callbacks"):
        feed(resumed, lines[25:])
    assert "HACK ALARM" not in caplog.text and resumed.report()["hack_alarm"]["fired"]["step"] == 20


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
    assert "stop_on_hack needs the hack alarm" in refused(stop_on_hack=True, max_steps=20)  # one check: no comparison
    # accepted: the resolved N (unset: the default where the run makes 2 or more checks, else off)
    assert check_watch_args(True, None, True, monitor_eval_steps=20, max_steps=120) == DEFAULT_ALARM_CHECKS == 1
    assert check_watch_args(False, None, False, monitor_eval_steps=20, max_steps=40) == 1
    assert check_watch_args(False, None, False, monitor_eval_steps=20, max_steps=39) == 0
    assert check_watch_args(False, None, False, monitor_eval_steps=20, max_steps=-1) == 1  # epochs: no step bound
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
        logs = {REWARD_KEY: 0.1} | ({"eval/accuracy": accuracies[step], "eval/n": 100} if step in accuracies else {})
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
    fired = {"step": 60, "reference_step": 20, "accuracy_reference": 0.42, "accuracy_window": 0.2, "p_fall": 0.00061}
    fired |= {"level": 0.0033, "reward_tau": 0.41}
    lines = watch_lines(
        {
            "best_checkpoint": {"path": "runs/x/best", "step": 40, "accuracy": 0.52, "n": 100},
            "hack_alarm": {"checks": 1, "comparisons": 15, "alpha": 0.05, "fired": fired, "stopped": True},
        }
    )
    assert lines == [
        "best checkpoint: runs/x/best (step 40, held-out accuracy 0.520, n=100)",
        "HACK ALARM raised at step 60: held-out accuracy 0.420 at step 20 -> 0.200 (p=0.00061 < 0.0033), training "
        "reward up (tau +0.41) (run stopped)",
    ]
    assert watch_lines(
        {"hack_alarm": {"checks": 1, "comparisons": 15, "alpha": 0.05, "fired": None, "stopped": 0}}
    ) == ["hack alarm: not raised (false alarms at most 0.05 per run)"]
    assert watch_lines({}) == []


@pytest.mark.integration
def test_recipe_keeps_the_best_adapter_and_reports_the_alarm(tiny_model_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    flags = tiny_run_flags(max_steps=3, monitor_eval_steps=1, probe_problems=0)  # a held-out check on 2 every step
    flags += ["--use_peft", "true", "--lora_r", "4", "--keep_best_checkpoint", "true", "--hack_alarm_checks", "1"]
    argv = recipe_args(tiny_model_dir, data_dir, out, *flags)
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
    assert report["hack_alarm"]["comparisons"] == 1 + 2  # 3 checks: read from the trainer's max_steps
    summary = capsys.readouterr().out
    assert f"best checkpoint: {out / 'best'} (step {best['step']}" in summary and "hack alarm" in summary.lower()


def test_held_out_watch_makes_what_the_options_ask(tmp_path):
    def made(**kw):
        args = types.SimpleNamespace(
            hack_alarm_checks=0,
            stop_on_hack=False,
            keep_best_checkpoint=False,
            monitor_eval_steps=20,
            monitor_eval_limit=100,
        )
        return held_out_watch(types.SimpleNamespace(**(vars(args) | kw)), tmp_path, ["none"])

    assert made() == []
    alarm, best = made(hack_alarm_checks=3, stop_on_hack=True, keep_best_checkpoint=True)
    assert isinstance(alarm, HackAlarm) and alarm.checks == 3 and alarm.stop and alarm.n_problems == 100
    assert alarm.eval_every == 20  # with the trainer's max_steps, the comparisons alpha is split over
    assert isinstance(best, BestCheckpoint) and best.path == tmp_path / "best"


# --------------------------------------------------------------------------------------------------- the CPU lab
LAB = {"max_steps": 120, "eval_every": 20}  # the lab's configs: a check of 100 problems every 20 of 120 steps


def test_the_lab_logs_falls_are_within_what_100_problem_checks_resolve():
    # the CPU lab's format-only arm fell 5 points (0.35 -> 0.30) on one run and 14 (0.35 -> 0.21) on another, over
    # six checks of 100 problems; the default arm did not fall. These logs keep only the held-out keys (no reward), so
    # only the held-out side can be read: at a 5% false-alarm rate per run, neither fall is beyond the checks' noise
    level = ALPHA / comparisons(LAB["max_steps"], LAB["eval_every"], DEFAULT_ALARM_CHECKS)  # 15 comparisons
    smallest = {}
    for name in ("grpo_lab_default_seed0", "grpo_lab_format_only_seed0", "grpo_lab_format_only_seed0_steep"):
        checks = checks_from_log(read_jsonl(LAB_LOGS / f"{name}.jsonl"))
        assert len(checks) == 6 and {c.n for c in checks} == {100} and all(not c.rewards for c in checks)
        assert first_alarm(checks, DEFAULT_ALARM_CHECKS, 15) is None  # no reward in the log: nothing can fire
        smallest[name] = min(
            fall_p_value(earlier.accuracy, later.accuracy, 100)
            for k, later in enumerate(checks)
            for earlier in checks[:k]
        )
    assert smallest["grpo_lab_default_seed0"] > 0.3
    assert smallest["grpo_lab_format_only_seed0"] == fall_p_value(0.35, 0.30, 100) > level  # p 0.25
    assert smallest["grpo_lab_format_only_seed0_steep"] == fall_p_value(0.35, 0.21, 100) > level  # p 0.017
    # the steep run's 14 points would be resolved on checks of 200 problems (the whole of the lab's held-out set)
    assert fall_p_value(0.35, 0.21, 200) < level


@pytest.mark.slow
def test_the_lab_arms_report_what_their_logs_replay(tmp_path_factory):
    from cpu_lab.matrix import run_dir, run_matrix
    from cpu_lab.warmstart import WarmStartSettings, prepare_lab, recipe_flags

    lab = tmp_path_factory.mktemp("lab")
    paths = prepare_lab(WarmStartSettings(seed=0), ROOT / "runs" / "lab" / "cache", lab)
    out = tmp_path_factory.mktemp("runs")
    configs = [
        ROOT / "recipes" / "configs" / "lab" / f"{name}.yaml" for name in ("grpo_lab_format_only", "grpo_lab_default")
    ]
    run_matrix([str(c) for c in configs], [0], out, recipe_flags(paths), jobs=2)
    tests = comparisons(LAB["max_steps"], LAB["eval_every"], DEFAULT_ALARM_CHECKS)
    for config in configs:
        folder = run_dir(out, config, 0)
        report = json.loads((folder / "report.json").read_text())["hack_alarm"]
        checks = checks_from_log(read_jsonl(folder / "log.jsonl"))
        assert len(checks) == 6 and all(c.rewards for c in checks)  # the run logs TRL's reward
        assert report["comparisons"] == tests and report["fired"] == first_alarm(checks, DEFAULT_ALARM_CHECKS, tests)
        if config.stem == "grpo_lab_default":  # held-out accuracy rises on this arm
            assert report["fired"] is None
