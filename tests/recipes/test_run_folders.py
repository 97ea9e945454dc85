"""One output folder, one run (``recipes.run_folder``, through ``recipes.common``): a resume continues only the same
run, two runs never write one folder at once, a fresh run does not mix with another run's outputs, and Ctrl-C ends in
one line that says how to go on. Tiny GRPO and SFT runs of two steps on the local tiny model.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_run_folders.py
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import PreTrainedModel

from eval.jsonl import read_jsonl
from recipes import common, grpo, run_folder
from recipes.checks import ConfigError
from tests.helpers import parse_recipe_config, tiny_run_flags

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"
SFT = ROOT / "recipes" / "configs" / "tiny" / "sft_cpu.yaml"
# two short steps, no held-out evaluation: the folder's life is what is tested
FAST = [*tiny_run_flags(monitor_eval_steps=0), "--build_tiny_model", "false"]
EVERY_STEP = ("--save_strategy", "steps", "--save_steps", "1")  # a checkpoint after each step


def grpo_argv(model: Path, out: Path, *extra: str) -> list[str]:
    return ["--config", str(GRPO), "--model_name_or_path", str(model), "--output_dir", str(out), *FAST, *extra]


def run_grpo(model: Path, out: Path, *extra: str) -> dict:
    return grpo.main(*parse_recipe_config(grpo, GRPO, *grpo_argv(model, out, *extra)[2:]))


def run_cli(argv: list[str], monkeypatch) -> int:
    """``python -m recipes.grpo argv`` in this process: the exit status (0 when it returns)."""
    monkeypatch.setattr(sys, "argv", ["recipes.grpo", *argv])
    try:
        common.run_cli(grpo.make_parser, grpo.main)
    except SystemExit as exit:
        return exit.code
    except KeyboardInterrupt:  # escaping, it would stop pytest itself
        pytest.fail("KeyboardInterrupt escaped the command line")
    return 0


PROGRESS_BAR = re.compile(r"\[\d\d:\d\d")  # tqdm's elapsed time
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the cursor moves of nested progress bars


def one_line(capsys, prefix: str = "error: ") -> str:
    """The one line a stopped command prints to stderr (no traceback); progress bars are not lines of it."""
    err = capsys.readouterr().err
    lines = [ANSI.sub("", line).strip() for line in err.splitlines()]
    lines = [line for line in lines if line and not PROGRESS_BAR.search(line)]
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith(prefix), err[-3000:]
    return lines[0]


def no_model_loads(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))


def is_locked(out: Path) -> bool:
    """Whether some open file holds the folder's lock (flock locks of two opens conflict, in one process too)."""
    path = out / ".lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's own lock
    return False


def logged_steps(out: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(out / "log.jsonl") if "loss" in r]


@pytest.fixture(scope="module")
def checkpointed_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A finished two-step GRPO run with checkpoint-1 and checkpoint-2."""
    out = tmp_path_factory.mktemp("grpo") / "run"
    run_grpo(tiny_model_dir, out, *EVERY_STEP)
    assert (out / "checkpoint-2").is_dir() and (out / "report.json").is_file()
    return out


@pytest.fixture
def run_copy(checkpointed_run, tmp_path) -> Path:
    return Path(shutil.copytree(checkpointed_run, tmp_path / "run"))


# --- a resume continues only the same run ---------------------------------------------------------------------------


def test_resuming_with_other_training_settings_is_refused_in_one_line_before_a_model_loads(
    tiny_model_dir, run_copy, monkeypatch, capsys
):
    config_before = (run_copy / "resolved_config.json").read_text()
    log_before = (run_copy / "log.jsonl").read_text()
    no_model_loads(monkeypatch)
    changed = ["--max_steps", "3", "--learning_rate", "1e-4"]
    changed += ["--reward_funcs", "gsm8k_correctness", "--reward_weights", "1.0"]
    assert run_cli(grpo_argv(tiny_model_dir, run_copy, *changed), monkeypatch) == 2
    line = one_line(capsys)
    for part in ("learning_rate 0.001 -> 0.0001", "reward_funcs", "reward_weights", "--output_dir", "--overwrite"):
        assert part in line, line
    assert "max_steps" not in line, line  # a longer run is allowed: not one of the differences
    assert str(run_copy / "checkpoint-2") in line, line
    assert (run_copy / "resolved_config.json").read_text() == config_before  # nothing rewritten
    assert (run_copy / "log.jsonl").read_text() == log_before
    assert not is_locked(run_copy)


def test_a_resume_may_run_longer_and_log_otherwise_and_records_what_changed_at_which_step(
    tiny_model_dir, run_copy, capsys
):
    run_grpo(tiny_model_dir, run_copy, "--max_steps", "3", "--logging_steps", "2", "--save_strategy", "no")
    assert f"resuming from {run_copy / 'checkpoint-2'}" in capsys.readouterr().out
    config = json.loads((run_copy / "resolved_config.json").read_text())
    assert config["max_steps"] == 3 and config["logging_steps"] == 2  # the values the folder's outputs end with
    first, resumed = config["segments"]
    assert first["step"] == 0 and "changed" not in first
    assert resumed["step"] == 2 and resumed["checkpoint"] == "checkpoint-2"
    assert resumed["changed"] == {
        "max_steps": [2, 3],
        "logging_steps": [1, 2],
        "save_strategy": ["steps", "no"],
        "save_steps": [1, 500],
    }


@pytest.mark.parametrize(
    "old, new, refused",
    [
        ({"learning_rate": 1e-3}, {"learning_rate": 1e-4}, ["learning_rate 0.001 -> 0.0001"]),
        ({"max_steps": 60}, {"max_steps": 65}, []),  # a run may go on for longer
        ({"max_steps": 60}, {"max_steps": 50}, ["max_steps 60 -> 50 (a resume may only raise it)"]),
        ({"max_steps": -1, "num_train_epochs": 1.0}, {"max_steps": -1, "num_train_epochs": 2.0}, []),
        ({"max_steps": -1}, {"max_steps": 40}, ["max_steps -1 -> 40 (-1 trains num_train_epochs: a resume keeps it)"]),
        ({"max_steps": 5, "num_train_epochs": 3.0}, {"max_steps": 5, "num_train_epochs": 1.0}, []),  # unused
        ({"logging_steps": 1, "report_to": []}, {"logging_steps": 5, "report_to": ["wandb"]}, []),
        ({"monitor_eval_steps": 2, "save_steps": 1}, {"monitor_eval_steps": 4, "save_steps": 10}, []),
        ({"beta": 0.0, "seed": 0}, {"beta": 0.04, "seed": 1}, ["beta 0.0 -> 0.04", "seed 0 -> 1"]),
        ({"lora_r": 16}, {"lora_r": 8}, ["lora_r 16 -> 8"]),
        ({"temperature": 1.0}, {"temperature": 0.7}, ["temperature 1.0 -> 0.7"]),
        ({"segments": [{"step": 0}]}, {}, []),  # the folder's record, not a setting
        ({"added_later": 1}, {}, []),  # a setting one side does not know: a version apart, not a change
    ],
)
def test_what_may_change_on_a_resume(old, new, refused):
    assert run_folder.training_changes(old, new) == refused


def test_the_allow_list_names_only_options_of_the_recipes():
    known = set()
    for recipe in ("grpo", "sft", "dpo", "reward_model"):
        parser = __import__(f"recipes.{recipe}", fromlist=["make_parser"]).make_parser()
        known |= {a.dest for a in parser._actions}
    assert set(run_folder.MAY_CHANGE_ON_RESUME) <= known, set(run_folder.MAY_CHANGE_ON_RESUME) - known


# --- one run at a time in a folder ------------------------------------------------------------------------------------

HOLD = "import sys, time\nfrom eval.folder import lock_output_folder\nwith lock_output_folder(sys.argv[1]):\n"
HOLD += "    print('held', flush=True)\n    time.sleep(120)\n"


def test_a_second_run_into_a_folder_being_written_is_refused_naming_the_other_process(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        no_model_loads(monkeypatch)
        assert run_cli(grpo_argv(tiny_model_dir, out), monkeypatch) == 2
        line = one_line(capsys)
    finally:
        holder.kill()
        holder.wait()
    assert f"pid {holder.pid}" in line and "lock_output_folder" in line, line  # the pid and its command
    assert str(out) in line and "--output_dir" in line, line
    assert not (out / "resolved_config.json").exists()


class StepProbe:
    """Stands in for ``JsonlLogCallback.on_step_end``: at ``step`` it records whether the folder is locked and what
    is in it, then raises ``error`` (None: nothing)."""

    def __init__(self, step: int, error: BaseException | None = None):
        self.step, self.error, self.seen = step, error, {}

    def __call__(self, args, state, control, **kwargs):  # a class attribute that is no function: not bound
        if state.global_step == self.step:
            out = Path(args.output_dir)
            self.seen = {"locked": is_locked(out), "files": sorted(p.name for p in out.iterdir())}
            if self.error is not None:
                raise self.error


@pytest.mark.parametrize("error", [None, RuntimeError("a failing step")], ids=["success", "failure"])
def test_the_folder_is_locked_while_the_run_lives_and_released_when_it_ends(
    tiny_model_dir, tmp_path, monkeypatch, error
):
    out = tmp_path / "run"
    probe = StepProbe(1, error)
    monkeypatch.setattr(common.JsonlLogCallback, "on_step_end", probe, raising=False)
    if error is None:
        run_grpo(tiny_model_dir, out)
    else:
        with pytest.raises(RuntimeError, match="a failing step"):
            run_grpo(tiny_model_dir, out)
    assert probe.seen["locked"]
    assert not is_locked(out)


# --- a fresh run never mixes with another run's outputs --------------------------------------------------------------


def test_a_fresh_run_into_the_folder_of_a_run_with_other_settings_is_refused(tiny_model_dir, run_copy):
    with pytest.raises(ConfigError) as refused:
        run_grpo(tiny_model_dir, run_copy, "--resume", "false", "--learning_rate", "1e-4")
    message = str(refused.value)
    assert "learning_rate 0.001 -> 0.0001" in message and "--overwrite" in message and "\n" not in message, message
    assert (run_copy / "report.json").exists() and (run_copy / "checkpoint-2").exists()  # nothing removed


def test_a_finished_run_with_no_checkpoint_is_not_trained_over_without_overwrite(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    run_grpo(tiny_model_dir, out, "--max_steps", "1")
    report = (out / "report.json").read_text()
    with pytest.raises(ConfigError) as refused:
        run_grpo(tiny_model_dir, out, "--max_steps", "1")
    message = str(refused.value)
    assert "finished" in message and "no checkpoint" in message and "--overwrite" in message, message
    assert (out / "report.json").read_text() == report


def test_outputs_without_a_resolved_config_are_refused_as_of_unknown_origin(tiny_model_dir, run_copy):
    (run_copy / "resolved_config.json").unlink()  # what another tool, or a hand, leaves
    with pytest.raises(ConfigError) as refused:
        run_grpo(tiny_model_dir, run_copy)
    message = str(refused.value)
    assert "resolved_config.json" in message and "checkpoint-2" in message and "--overwrite" in message, message


def test_overwrite_clears_the_old_run_before_anything_new_is_written(tiny_model_dir, run_copy, monkeypatch):
    (run_copy / "run.log").write_text("a launcher's log of this folder\n")  # not a run's output: kept
    probe = StepProbe(1)
    monkeypatch.setattr(common.JsonlLogCallback, "on_step_end", probe, raising=False)
    run_grpo(tiny_model_dir, run_copy, "--overwrite", "--learning_rate", "1e-4", "--max_steps", "1")
    old_outputs = {"report.json", "model.safetensors", "checkpoint-1", "checkpoint-2", "README.md", "log.jsonl"}
    assert not old_outputs & set(probe.seen["files"]), probe.seen["files"]  # during training: none of the old run's
    assert not list(run_copy.glob("checkpoint-*"))  # the new run saves none
    assert (run_copy / "run.log").exists()
    config = json.loads((run_copy / "resolved_config.json").read_text())
    assert config["learning_rate"] == 1e-4 and [s["step"] for s in config["segments"]] == [0]
    assert logged_steps(run_copy) == [1]  # the old run's two steps are gone


def test_an_interrupted_run_of_the_same_settings_with_no_checkpoint_starts_over(tiny_model_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(common.JsonlLogCallback, "on_step_end", StepProbe(2, KeyboardInterrupt()), raising=False)
    with pytest.raises(KeyboardInterrupt):
        run_grpo(tiny_model_dir, out)
    monkeypatch.undo()
    assert logged_steps(out) == [1] and not (out / "report.json").exists()
    run_grpo(tiny_model_dir, out)  # the same command again: nothing to resume, so it starts over
    assert logged_steps(out) == [1, 2]


# --- Ctrl-C -----------------------------------------------------------------------------------------------------------


def test_ctrl_c_prints_one_line_with_the_command_that_resumes_and_exits_130(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    argv = grpo_argv(tiny_model_dir, out, "--max_steps", "3", *EVERY_STEP)
    monkeypatch.setattr(common.JsonlLogCallback, "on_step_end", StepProbe(2, KeyboardInterrupt()), raising=False)
    assert run_cli(argv, monkeypatch) == 130
    line = one_line(capsys, prefix="interrupted at step 2")
    assert str(out / "checkpoint-1") in line and "python -m recipes.grpo " in line, line
    assert " ".join(argv[-4:]) in line, line  # the command as it was given
    assert not is_locked(out)
    monkeypatch.setattr(common.JsonlLogCallback, "on_step_end", StepProbe(0), raising=False)
    assert run_cli(argv, monkeypatch) == 0  # that command resumes
    assert f"resuming from {out / 'checkpoint-1'}" in capsys.readouterr().out
    assert logged_steps(out) == [1, 2, 3]  # stopped before step 2 was logged; trained again from checkpoint-1


def test_ctrl_c_of_a_run_that_saves_no_checkpoints_says_a_rerun_starts_over(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    argv = grpo_argv(tiny_model_dir, out, "--resume", "false", "--overwrite")
    monkeypatch.setattr(common.JsonlLogCallback, "on_step_end", StepProbe(1, KeyboardInterrupt()), raising=False)
    assert run_cli(argv, monkeypatch) == 130
    line = one_line(capsys, prefix="interrupted at step 1")
    assert "saves no checkpoints" in line and "starts over" in line and "python -m recipes.grpo " in line, line


def test_sigint_to_a_running_recipe_ends_in_one_line_and_status_130(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    argv = ["--config", str(SFT), "--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out)]
    argv += ["--max_steps", "100000", "--eval_limit", "0", "--build_tiny_model", "false", "--validation_steps", "1000"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")} | {"OMP_NUM_THREADS": "1"}
    # SIGINT as at a terminal: a test run started in the background (`make test &`) ignores SIGINT, and so would the run
    proc = subprocess.Popen(
        [sys.executable, "-m", "recipes.sft", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        started = time.monotonic()
        while not (out / "log.jsonl").exists() and proc.poll() is None and time.monotonic() < started + 240:
            time.sleep(0.2)
        logged = (out / "log.jsonl").exists()
        when = f"SIGINT sent {time.monotonic() - started:.0f} s after the start, log.jsonl written: {logged}"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the run did not end within 120 s of SIGINT ({when}); its stderr ends:\n{err[-3000:]}")
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("interrupted at step")]
    assert len(lines) == 1 and "python -m recipes.sft " in lines[0] and "starts over" in lines[0], err[-3000:]
    assert not is_locked(out)
