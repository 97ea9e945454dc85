"""What a run prints while it trains (``recipes.console``): one line per logged step with what a person watches, the
hack probes once as a small table, no dict of every metric and no progress bar between the lines; every logged value
still goes to ``log.jsonl`` (``JsonlLogCallback``).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_console.py
"""

from __future__ import annotations

import io
import re
import types

import pytest

from eval.jsonl import read_jsonl
from recipes import console, grpo, sft
from tests.helpers import parse_recipe_config, tiny_run_flags

GRPO_LOGS = {  # what TRL and the monitors log at one GRPO step (a few of some 60 keys)
    "loss": 0.0123,
    "grad_norm": 0.5,
    "learning_rate": 1e-06,
    "reward": 0.41,
    "reward_std": 0.3,
    "monitor/correct_rate": 0.38,
    "monitor/degenerate_share": 0.5,
    "monitor/length_correct": 14.2,
    "monitor/length_wrong": 21.8,
    "completions/clipped_ratio": 0.1,
    "kl": 0.003,
    "epoch": 0.2,
}


def state(step: int, max_steps: int = 72) -> types.SimpleNamespace:
    return types.SimpleNamespace(global_step=step, max_steps=max_steps, is_world_process_zero=True)


def test_a_grpo_line_holds_what_a_person_watches():
    line = console.step_line("grpo", GRPO_LOGS, step=12, max_steps=72, seconds_per_step=31.2)
    expected = "step 12/72  reward 0.41  correct 0.38  degenerate 0.50  len right/wrong 14/22  kl 0.003  31.2 s/step"
    assert line == expected


def test_kl_shows_only_when_logged_and_an_empty_class_has_no_length():
    logs = {k: v for k, v in GRPO_LOGS.items() if k != "kl"} | {"monitor/length_correct": None}
    line = console.step_line("grpo", logs, step=1, max_steps=4, seconds_per_step=0.25)
    assert line == "step 1/4  reward 0.41  correct 0.38  degenerate 0.50  len right/wrong -/22  0.25 s/step"


def test_a_held_out_check_joins_the_line_of_its_step():
    logs = GRPO_LOGS | {"eval/accuracy": 0.35, "eval/n": 100}
    line = console.step_line("grpo", logs, step=20, max_steps=72, seconds_per_step=31.0)
    assert "  held-out 0.35 (n=100)  31.0 s/step" in line


@pytest.mark.parametrize(
    "method, logs, expected",
    [
        # SFT: the loss and the learning rate
        ("sft", {"loss": 2.3131, "learning_rate": 0.001, "mean_token_accuracy": 0.2}, "step 3/4  loss 2.313  lr 0.001"),
        # DPO: TRL's reward accuracy (chosen above rejected) and margin
        (
            "dpo",
            {"loss": 0.6931, "rewards/accuracies": 0.5, "rewards/margins": 0.0123, "rewards/chosen": 0.1},
            "step 3/4  loss 0.6931  accuracy 0.50  margin 0.0123",
        ),
        # the reward model: pairwise accuracy and margin
        (
            "reward_model",
            {"loss": 0.6931, "accuracy": 0.75, "margin": 0.25},
            "step 3/4  loss 0.6931  accuracy 0.75  margin 0.25",
        ),
    ],
)
def test_each_method_shows_its_key_numbers(method, logs, expected):
    assert console.step_line(method, logs, step=3, max_steps=4, seconds_per_step=None) == expected


def test_an_evaluation_is_one_line_of_its_own():
    logs = {"eval_loss": 0.61, "eval_accuracy": 0.8, "eval_margin": 0.3, "eval_runtime": 1.2, "epoch": 1.0}
    assert console.eval_line("reward_model", logs, step=4) == "held-out at step 4  loss 0.61  accuracy 0.80  margin 0.3"


def test_the_probes_print_once_as_a_table_and_the_steps_as_lines():
    out = io.StringIO()
    callback = console.ConsoleCallback("grpo", stream=out)
    callback.on_train_begin(None, state(0, 2), None)
    probes = {"probe/genuine_correct": 1.1, "probe/genuine_wrong": 0.1, "probe/number_spray": 0.0}
    callback.on_log(None, state(1, 2), None, logs=GRPO_LOGS | probes | {"probe/violations": 0})
    callback.on_log(None, state(2, 2), None, logs=dict(GRPO_LOGS))
    callback.on_log(None, state(2, 2), None, logs={"train_runtime": 3.25, "train_loss": 0.0, "epoch": 0.5})
    callback.on_log(None, state(2, 2), None, logs={"final_eval/accuracy_after": 0.0, "epoch": 0.5})  # no line
    lines = out.getvalue().splitlines()
    assert sum("hack probes" in line for line in lines) == 1, lines
    table = lines[: [i for i, line in enumerate(lines) if line.startswith("step 1/2")][0]]
    assert any(re.search(r"genuine_correct +1\.10", line) for line in table), table
    assert any("number_spray" in line for line in table) and any("violations 0" in line for line in table)
    assert [line.split("  ")[0] for line in lines if line.startswith("step ")] == ["step 1/2", "step 2/2"]
    assert lines[-1] == "trained 2 steps in 3.2 s"
    assert not any("{" in line for line in lines)


def test_other_processes_print_nothing():
    out = io.StringIO()
    callback = console.ConsoleCallback("sft", stream=out)
    other = types.SimpleNamespace(global_step=1, max_steps=4, is_world_process_zero=False)
    callback.on_train_begin(None, other, None)
    callback.on_log(None, other, None, logs={"loss": 1.0, "learning_rate": 0.1})
    assert out.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_that_the_lines_print_above():
    out = Terminal()
    callback = console.ConsoleCallback("sft", stream=out)
    callback.on_train_begin(None, state(0, 4), None)
    callback.on_step_end(None, state(1, 4), None)
    callback.on_log(None, state(1, 4), None, logs={"loss": 1.0, "learning_rate": 0.1})
    callback.on_train_end(None, state(1, 4), None)
    assert "step 1/4  loss 1" in out.getvalue() and "1/4" in out.getvalue().replace("step 1/4", "")
    piped = io.StringIO()  # a file or a pipe: the lines only
    callback = console.ConsoleCallback("sft", stream=piped)
    callback.on_train_begin(None, state(0, 4), None)
    callback.on_step_end(None, state(1, 4), None)
    callback.on_log(None, state(1, 4), None, logs={"loss": 1.0, "learning_rate": 0.1})
    callback.on_train_end(None, state(1, 4), None)
    assert piped.getvalue().startswith("step 1/4  loss 1  lr 0.1  ") and "\r" not in piped.getvalue()


# --- real runs of the recipes on the tiny model --------------------------------------------------------------------


def printed_steps(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"step \d+/\d+  ", line)]


@pytest.mark.integration
def test_a_grpo_run_prints_one_line_a_step_and_the_probes_once(tiny_model_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), "--build_tiny_model", "false"]
    args += ["--data", str(data_dir / "gsm8k" / "train.jsonl"), "--eval_data", str(data_dir / "gsm8k" / "test.jsonl")]
    args += tiny_run_flags(beta=0.04)  # beta > 0: kl shows
    grpo.main(*parse_recipe_config(grpo, "recipes/configs/tiny/grpo_cpu.yaml", *args))
    printed = capsys.readouterr()
    steps = printed_steps(printed.out)
    assert [s.split("  ")[0] for s in steps] == ["step 1/2", "step 2/2"], printed.out[-3000:]
    for line in steps:
        for watched in ("reward ", "correct ", "degenerate ", "len right/wrong ", "kl ", " s/step"):
            assert watched in line, line
    assert "held-out " in steps[1]  # monitor_eval_steps: 2
    assert printed.out.count("hack probes: what") == 1  # the table (the summary names probes.json too)
    assert "{'" not in printed.out + printed.err  # no dict of every metric
    assert " 2/2 [" not in printed.err  # and no training progress bar between the lines
    logged = [r for r in read_jsonl(out / "log.jsonl") if "loss" in r]
    assert len(logged) == 2 and len(logged[0]) > 60  # every value still in log.jsonl


@pytest.mark.integration
def test_an_sft_run_prints_its_loss_and_learning_rate(tiny_model_dir, tmp_path, capsys):
    args = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(tmp_path / "out")]
    args += ["--max_steps", "2", "--eval_limit", "0", "--validation_steps", "2", "--disable_tqdm", "true"]
    sft.main(*parse_recipe_config(sft, "recipes/configs/tiny/sft_cpu.yaml", *args))
    printed = capsys.readouterr()
    steps = printed_steps(printed.out)
    assert len(steps) == 2, printed.out[-3000:]
    assert re.fullmatch(r"step 2/2  loss [\d.]+  lr 0\.001  [\d.]+ s/step", steps[1]), steps[1]
    assert "{'" not in printed.out + printed.err
