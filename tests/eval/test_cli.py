"""The command line's first contact: what it prints, what it refuses before a model loads, what it leaves behind, and
a help that imports no model library. On the tiny local model.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_cli.py
"""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import eval.__main__ as cli
from eval.folder import LOCK_FILE, SAMPLES_FILE
from eval.jsonl import write_jsonl

ROOT = Path(__file__).resolve().parents[2]
GSM8K = ROOT / "tests" / "data" / "gsm8k" / "test.jsonl"
HEAVY = ("torch", "transformers", "peft", "datasets", "vllm", "matplotlib", "wandb")


def run_args(model: Path, out: Path, *extra: str) -> list[str]:
    command = ["run", "--model", str(model), "--task", "gsm8k", "--data", str(GSM8K), "--limit", "2"]
    return [*command, "--max-new-tokens", "4", "--out", str(out), *extra]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    return one_error_line(capsys)


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(cli, "load_model", refuse)


def test_run_and_score_print_where_they_wrote(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    cli.main(run_args(tiny_model_dir, out))
    printed = capsys.readouterr().out
    assert f"written to {out}: summary.md, results.json, samples.jsonl" in printed, printed
    predictions = write_jsonl([{"completion": "#### 18", "answer": "18"}], tmp_path / "p.jsonl")
    cli.main(["score", "--task", "gsm8k", "--predictions", str(predictions), "--out", str(tmp_path / "scored")])
    printed = capsys.readouterr().out
    assert f"written to {tmp_path / 'scored'}: summary.md, results.json, samples.jsonl" in printed, printed
    # eval score has no model settings: its summary ends with its table, not with an empty "Settings:" line
    summary = (tmp_path / "scored" / "summary.md").read_text()
    assert "Settings:" not in summary and summary.endswith("|\n"), summary[-200:]
    assert "Settings: model=" in (out / "summary.md").read_text()


def test_lock_file_is_removed_when_a_run_ends_well_or_badly(tiny_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    cli.main(run_args(tiny_model_dir, out))
    assert not (out / LOCK_FILE).exists() and (out / "results.json").exists()
    predictions = write_jsonl([{"completion": "#### 18", "answer": "18"}], tmp_path / "p.jsonl")
    cli.main(["score", "--task", "gsm8k", "--predictions", str(predictions), "--out", str(tmp_path / "scored")])
    assert not (tmp_path / "scored" / LOCK_FILE).exists()

    def broken_load(*args):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(cli, "load_model", broken_load)
    capsys.readouterr()
    assert "out of memory" in refused(run_args(tiny_model_dir, tmp_path / "failed"), capsys)
    assert not (tmp_path / "failed" / LOCK_FILE).exists()


def test_score_writes_samples_with_the_file_mode_of_run(tiny_model_dir, tmp_path):
    old = os.umask(0o022)
    try:
        cli.main(run_args(tiny_model_dir, tmp_path / "run"))
        predictions = write_jsonl([{"completion": "#### 18", "answer": "18"}], tmp_path / "p.jsonl")
        cli.main(["score", "--task", "gsm8k", "--predictions", str(predictions), "--out", str(tmp_path / "scored")])
    finally:
        os.umask(old)
    modes = [stat.S_IMODE((tmp_path / name / SAMPLES_FILE).stat().st_mode) for name in ("run", "scored")]
    assert modes == [0o644, 0o644], [oct(m) for m in modes]


@pytest.mark.parametrize("marker", ["resolved_config.json", "log.jsonl", "checkpoint-2"])
def test_score_into_a_training_run_folder_is_refused(marker, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    if marker.startswith("checkpoint"):
        (run / marker).mkdir()
    else:
        (run / marker).write_text("{}\n")
    predictions = write_jsonl([{"completion": "#### 18", "answer": "18"}], tmp_path / "p.jsonl")
    line = refused(["score", "--task", "gsm8k", "--predictions", str(predictions), "--out", str(run)], capsys)
    assert f"--out {run} is a training run's folder (it holds {marker})" in line, line
    assert f"{run / 'eval_score'}" in line, line
    assert sorted(p.name for p in run.iterdir()) == [marker]  # nothing written, no lock left


def test_compare_of_a_training_folder_names_its_eval_folders(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "resolved_config.json").write_text("{}\n")
    line = refused(["compare", str(run), str(run)], capsys)
    assert f"{run} is a training run's folder" in line, line
    assert f"python -m eval compare {run / 'eval_before'} {run / 'eval_after'}" in line, line


def test_score_math500_on_gsm8k_golds_warns_once(tmp_path, caplog):
    rows = [{"completion": "\\boxed{18}", "answer": "She sells 16 - 3 - 4 = 9 eggs.\n#### 18"} for _ in range(3)]
    predictions = write_jsonl(rows, tmp_path / "p.jsonl")
    cli.main(["score", "--task", "math500", "--predictions", str(predictions), "--out", str(tmp_path / "s")])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "GSM8K" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert "3 of 3 gold answers (answer) look like GSM8K solutions" in warnings[0] and "--task gsm8k" in warnings[0]
    caplog.clear()
    write_jsonl([{"completion": "\\boxed{18}", "answer": "18"}], predictions)  # a MATH gold: no warning
    cli.main(["score", "--task", "math500", "--predictions", str(predictions), "--out", str(tmp_path / "t")])
    assert "GSM8K" not in caplog.text


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--dtype", "float8"], "--dtype float8: pass one of auto, bfloat16, float16, float32"),
        (["--temperature", "-1"], "--temperature -1.0: pass 0 (greedy) or more"),
        (["--num-samples", "0"], "--num-samples 0: pass 1 or more"),
        (["--limit", "0"], "--limit 0: pass 1 or more problems"),
        (["--max-new-tokens", "0"], "--max-new-tokens 0: pass 1 or more"),
        (["--batch-size", "0"], "--batch-size 0: pass 1 or more"),
    ],
)
def test_nonsense_run_settings_are_refused_before_the_model_and_leave_nothing(
    flags, error, tiny_model_dir, tmp_path, no_model_load, capsys
):
    out = tmp_path / "o"
    line = refused(run_args(tiny_model_dir, out, *flags), capsys)
    assert line == f"error: {error}" or error in line, line
    assert not out.exists()  # no folder, no lock


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_an_empty_data_file_is_one_line(content, tiny_model_dir, tmp_path, no_model_load, capsys):
    data = tmp_path / "empty.jsonl"
    data.write_text(content)
    argv = ["run", "--model", str(tiny_model_dir), "--task", "gsm8k", "--data", str(data), "--out", str(tmp_path / "o")]
    line = refused(argv, capsys)
    assert f"data file {data} holds no rows" in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["merge", "--help"], ["score", "--help"]])
def test_help_imports_no_model_library(argv):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "eval", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "usage: python -m eval" in done.stdout, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
