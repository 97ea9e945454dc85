"""End-to-end eval on the tiny local model: the CLI, output files, resume after a kill, errors before model load.

Accuracy of the random tiny model is ~0; these tests check the pipeline, not the model.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_run.py
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import eval.__main__ as cli
import eval.folder
import eval.samples
from eval.fingerprint import source_fingerprint
from eval.folder import (
    CONFIG_FILE,
    LOCK_FILE,
    RESULTS_FILE,
    RESUME_KEYS,
    SAMPLES_FILE,
    FolderBusyError,
    prepare_folder,
    read_samples,
)
from eval.jsonl import read_jsonl, write_jsonl
from eval.predictions import score_predictions
from eval.run import evaluate
from recipes.tiny_model import save_tiny_model

ROOT = Path(__file__).resolve().parents[2]
DATA = {"gsm8k": "gsm8k/test.jsonl", "math500": "math500/test.jsonl"}


def run_cli(tiny_model_dir, data_dir, task, out, *extra):
    args = ["run", "--model", str(tiny_model_dir), "--task", task, "--data", str(data_dir / DATA[task])]
    cli.main([*args, "--limit", "10", "--max-new-tokens", "8", "--out", str(out), *extra])


@pytest.mark.parametrize("task", ["gsm8k", "math500"])
def test_run_cli_writes_all_outputs(tiny_model_dir, data_dir, tmp_path, task):
    run_cli(tiny_model_dir, data_dir, task, tmp_path)
    samples = read_jsonl(tmp_path / "samples.jsonl")
    results = json.loads((tmp_path / "results.json").read_text())
    assert [s["index"] for s in samples] == list(range(10))
    assert all(isinstance(s["correct"], bool) and s["n_tokens"] <= 8 for s in samples)
    assert all(s["timeout"] is False for s in samples) and results["timeout_rate"] == 0.0  # the scorer's flag
    assert results["n"] == 10 and results["max_new_tokens"] == 8
    # An untrained model never stops within 8 tokens: truncation is measured, not assumed.
    assert results["truncation_rate"] == sum(s["truncated"] for s in samples) / 10
    assert 0 <= results["ci"][0] <= results["accuracy"] <= results["ci"][1] and results["ci_level"] == 0.95
    assert (tmp_path / "lengths.png").read_bytes()[:4] == b"\x89PNG"
    assert "95% CI" in (tmp_path / "summary.md").read_text()
    if task == "math500":
        assert sum(g["n"] for g in results["by_subject"].values()) == 10 and "by_level" in results


def test_compare_cli_prints_difference(tiny_model_dir, data_dir, tmp_path, capsys):
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path / "a")
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path / "b")
    capsys.readouterr()
    cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    # greedy decoding of the same model: same answers, zero difference over 10 shared problems
    assert "B - A accuracy: +0.0 points" in out and "10 shared problems" in out


def test_resume_after_torn_last_line_gives_each_problem_once(tiny_model_dir, data_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    kwargs = dict(data=str(data_dir / DATA["gsm8k"]), limit=10, max_new_tokens=8, batch_size=1, progress=False)
    full = evaluate(model, tokenizer, "gsm8k", out_dir=tmp_path / "full", **kwargs)
    lines = (tmp_path / "full" / "samples.jsonl").read_text().splitlines(keepends=True)
    # Simulate a kill mid-write: 4 complete lines, then half of the 5th.
    part = tmp_path / "part"
    part.mkdir()
    (part / "samples.jsonl").write_text("".join(lines[:4]) + lines[4][: len(lines[4]) // 2])
    (part / "run_config.json").write_text((tmp_path / "full" / "run_config.json").read_text())
    resumed = evaluate(model, tokenizer, "gsm8k", out_dir=part, **kwargs)
    samples = read_jsonl(part / "samples.jsonl")
    assert [s["index"] for s in samples] == list(range(10))
    assert samples == read_jsonl(tmp_path / "full" / "samples.jsonl")
    assert resumed["accuracy"] == full["accuracy"] and resumed["length_tokens"] == full["length_tokens"]


def test_resume_scores_timed_out_samples_again(tiny_model_dir, data_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    kwargs = dict(data=str(data_dir / DATA["gsm8k"]), limit=4, max_new_tokens=4, batch_size=2, progress=False)
    evaluate(model, tokenizer, "gsm8k", out_dir=tmp_path, **kwargs)
    samples = read_jsonl(tmp_path / SAMPLES_FILE)
    # Problem 1 timed out (as the scorer reports it) on a completion that is correct; problem 2 holds a correct
    # completion scored wrong without a timeout: a stored verdict, which a resume keeps.
    samples[1] |= {"completion": f"#### {samples[1]['gold']}", "correct": False, "reason": "timeout", "timeout": True}
    samples[2] |= {"completion": f"#### {samples[2]['gold']}", "correct": False, "timeout": False}
    write_jsonl(samples, tmp_path / SAMPLES_FILE)
    resumed = evaluate(model, tokenizer, "gsm8k", out_dir=tmp_path, **kwargs)
    again = read_jsonl(tmp_path / SAMPLES_FILE)
    assert [x["index"] for x in again] == [0, 1, 2, 3]
    assert (again[1]["correct"], again[1]["reason"], again[1]["timeout"]) == (True, "ok", False)
    assert again[2] == samples[2] and again[0] == samples[0]
    assert resumed["n_correct"] == 1 + samples[0]["correct"] + samples[3]["correct"] and resumed["timeouts"] == []


def test_resume_refuses_other_settings(tiny_model_dir, data_dir, tmp_path, capsys):
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path, "--seed", "2")
    before = (tmp_path / SAMPLES_FILE).read_text()
    with pytest.raises(SystemExit) as exit_info:
        run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path, "--seed", "2", "--max-new-tokens", "12")
    assert exit_info.value.code == 2
    assert "max_new_tokens was 8, now 12" in capsys.readouterr().err
    assert (tmp_path / SAMPLES_FILE).read_text() == before  # nothing was added to the old run's samples
    # the same settings with a larger --limit resume
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path, "--seed", "2", "--limit", "12")
    assert len(read_jsonl(tmp_path / SAMPLES_FILE)) == 12


def test_kill_9_then_rerun_continues(tiny_model_dir, data_dir, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "eval", "run", "--model", str(tiny_model_dir), "--task", "gsm8k"]
    command += ["--data", str(data_dir / DATA["gsm8k"]), "--limit", "6", "--batch-size", "1"]
    command += ["--max-new-tokens", "120", "--out", str(out)]  # ~0.3 s per problem: time to kill it mid-run
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (out / "samples.jsonl").exists() and (out / "samples.jsonl").stat().st_size > 0:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    assert proc.wait() == -signal.SIGKILL, "the run finished before it could be killed: raise --max-new-tokens"
    assert 1 <= len(read_samples(out / "samples.jsonl")) < 6
    cli.main(command[3:])  # the same command, in process
    samples = read_jsonl(out / "samples.jsonl")
    assert [s["index"] for s in samples] == list(range(6))


@contextmanager
def folder_locked_by_another_process(folder: Path):
    """A live process holding eval's lock on ``folder`` (flock is per open file, so only another process tests it
    for real); yields the process, killed with SIGKILL at the end if it is still alive."""
    hold = "import sys, time\nfrom eval.folder import lock_output_folder\nwith lock_output_folder(sys.argv[1]):\n"
    hold += "    print('held', flush=True)\n    time.sleep(300)\n"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", hold, str(folder)], cwd=ROOT, env=env, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_a_second_run_into_a_busy_folder_is_refused_before_its_model_loads(
    tiny_model_dir, data_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    real_load_model, loads = cli.load_model, []
    monkeypatch.setattr(cli, "load_model", lambda *args: loads.append(args) or real_load_model(*args))
    with folder_locked_by_another_process(out) as holder:
        with pytest.raises(SystemExit) as exit_info:
            run_cli(tiny_model_dir, data_dir, "gsm8k", out)
        assert exit_info.value.code == 2 and loads == []  # refused before the model was loaded
        message = capsys.readouterr().err
        assert f"{out} is being written by another process (pid {holder.pid})" in message
        assert "Wait for it to finish" in message and "pass another --out" in message
        # evaluate itself (what the recipes call) is refused the same way, and writes nothing
        with pytest.raises(FolderBusyError, match=f"pid {holder.pid}"):
            evaluate(None, None, "gsm8k", data=str(data_dir / DATA["gsm8k"]), limit=2, out_dir=out)
        with pytest.raises(FolderBusyError):  # and so is `eval score` into it
            score_predictions(
                "gsm8k", write_jsonl([{"completion": "#### 1", "answer": "1"}], tmp_path / "p.jsonl"), out
            )
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
        holder.send_signal(signal.SIGKILL)  # what `kill -9` leaves: the lock file, with the dead holder's pid
        assert holder.wait() == -signal.SIGKILL
        assert (out / LOCK_FILE).read_text() == f"{holder.pid}\n"
    run_cli(tiny_model_dir, data_dir, "gsm8k", out)  # nothing to clean: the OS released the lock with its process
    assert [s["index"] for s in read_jsonl(out / SAMPLES_FILE)] == list(range(10)) and len(loads) == 1
    # the run took the dead holder's lock file over and removed it when it ended: only the run's files are left
    assert sorted(p.name for p in out.iterdir()) == [
        "lengths.png",
        "results.json",
        "run_config.json",
        "samples.jsonl",
        "summary.md",
    ]
    before = (out / SAMPLES_FILE).read_text()
    run_cli(tiny_model_dir, data_dir, "gsm8k", out)  # a finished run resumes to itself
    assert (out / SAMPLES_FILE).read_text() == before and len(loads) == 2
    cli.main(["compare", str(out), str(out)])
    assert "10 shared problems" in capsys.readouterr().out


@pytest.mark.heavy  # starts a process
def test_the_lock_is_per_process_and_released_when_its_holder_is_done(tmp_path):
    out = tmp_path / "run"
    try_lock = "import sys\nfrom eval.folder import lock_output_folder\nwith lock_output_folder(sys.argv[1]):\n    pass"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    def another_process_locks() -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", try_lock, str(out)]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    with eval.folder.lock_output_folder(out):
        with eval.folder.lock_output_folder(out):  # nested in one process (the CLI, then evaluate): allowed
            pass
        other = another_process_locks()  # the inner exit did not release it
        assert other.returncode == 1 and f"FolderBusyError: {out} is being written" in other.stderr
        assert f"(pid {os.getpid()})" in other.stderr
    assert another_process_locks().returncode == 0


def test_a_lock_file_removed_between_open_and_lock_is_opened_again(tmp_path, monkeypatch):
    # The holder that ends removes the lock file; a process that opened it just before must not lock the removed
    # file (a third process would then lock a new one beside it): it finds the path names another file and retries.
    out = tmp_path / "run"
    real_flock, calls = eval.folder.fcntl.flock, []

    def flock_after_the_holder_removed_it(fd, operation):
        calls.append(fd)
        if len(calls) == 1:
            (out / LOCK_FILE).unlink()
        return real_flock(fd, operation)

    monkeypatch.setattr(eval.folder.fcntl, "flock", flock_after_the_holder_removed_it)
    with eval.folder.lock_output_folder(out):
        assert len(calls) == 2  # the first file was let go
        assert (out / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert not (out / LOCK_FILE).exists()


def test_sampling_reports_pass_at_k(tiny_model_dir, data_dir, tmp_path):
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path, "--num-samples", "3", "--temperature", "1.0")
    results = json.loads((tmp_path / "results.json").read_text())
    samples = read_jsonl(tmp_path / "samples.jsonl")
    assert set(results["pass_at_k"]) == {"1", "2", "3"} and results["n_samples"] == 30
    assert all(len(s["samples"]) == 3 for s in samples)
    assert len({x["completion"] for x in samples[0]["samples"]}) > 1  # temperature 1: the samples differ


@pytest.fixture(scope="module")
def lora_adapter(tiny_model_dir, tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    out = tmp_path_factory.mktemp("adapter")
    peft_model.save_pretrained(out)
    return out


def test_run_with_lora_adapter(tiny_model_dir, data_dir, tmp_path, lora_adapter):
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path, "--adapter", str(lora_adapter))
    assert json.loads((tmp_path / "results.json").read_text())["adapter"] == str(lora_adapter)


@pytest.fixture(scope="module")
def sampled_run(tiny_model_dir, data_dir, lora_adapter, tmp_path_factory) -> Path:
    """A finished `eval run` whose every resume setting differs from its default (adapter, seed 3, K = 2 at
    temperature 0.7, budget 8), so that a setting the CLI failed to record would show."""
    out = tmp_path_factory.mktemp("sampled_run")
    extra = ["--adapter", str(lora_adapter), "--seed", "3", "--num-samples", "2", "--temperature", "0.7"]
    run_cli(tiny_model_dir, data_dir, "gsm8k", out, *extra)
    return out


def test_run_records_every_resume_setting(sampled_run, tiny_model_dir, data_dir, lora_adapter):
    config = json.loads((sampled_run / CONFIG_FILE).read_text())
    expected = {
        "command": "run",
        "model": str(tiny_model_dir),
        "adapter": str(lora_adapter),
        "backend": "hf",
        "task": "gsm8k",
        "data": str(data_dir / DATA["gsm8k"]),
        "seed": 3,
        "max_new_tokens": 8,
        "temperature": 0.7,
        "num_samples": 2,
        "model_fingerprint": source_fingerprint(str(tiny_model_dir), str(lora_adapter)),
    }
    assert set(RESUME_KEYS) == set(expected)
    assert {k: config[k] for k in RESUME_KEYS} == expected


@pytest.mark.parametrize(
    "key, new",
    [
        ("model", "Qwen/Qwen2.5-0.5B-Instruct"),  # another model
        ("adapter", None),  # the base model without the adapter
        ("backend", "vllm"),
        ("task", "math500"),
        ("data", "openai/gsm8k"),  # the hub copy instead of the local file
        ("seed", 4),
        ("max_new_tokens", 16),
        ("temperature", 1.0),
        ("num_samples", 4),
        ("model_fingerprint", "files:0123"),  # the same names, other weights (retrained into the same folder)
    ],
)
def test_resume_refuses_each_changed_setting(sampled_run, tmp_path, key, new):
    import shutil

    out = shutil.copytree(sampled_run, tmp_path / "run")
    config = json.loads((out / CONFIG_FILE).read_text())
    assert config[key] != new
    with pytest.raises(ValueError) as error:
        prepare_folder(out, {**config, key: new})
    message = str(error.value)
    assert f"{key} was {config[key]!r}, now {new!r}" in message  # the key, the old and the new value
    assert "--overwrite" in message and "another --out folder" in message and "\n" not in message  # the fix
    assert message.count(" was ") == 1  # only the setting that changed is named
    assert json.loads((out / CONFIG_FILE).read_text()) == config  # the old run's settings are kept


def test_resume_accepts_other_limit_and_a_folder_without_samples(sampled_run, tmp_path):
    import shutil

    out = shutil.copytree(sampled_run, tmp_path / "run")
    config = json.loads((out / CONFIG_FILE).read_text())
    prepare_folder(out, {**config, "limit": 20, "batch_size": 3})  # not a resume setting: accepted
    assert json.loads((out / CONFIG_FILE).read_text())["limit"] == 20
    # killed before its first problem was written: an empty samples file holds nothing to mix with
    (out / SAMPLES_FILE).write_text("")
    (out / RESULTS_FILE).unlink()
    prepare_folder(out, {**config, "seed": 9})
    assert json.loads((out / CONFIG_FILE).read_text())["seed"] == 9


def test_resume_refuses_samples_of_unknown_settings(sampled_run, data_dir, tmp_path):
    import shutil

    config = json.loads((sampled_run / CONFIG_FILE).read_text())
    # an `eval score` folder ...
    scored = tmp_path / "scored"
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text('{"completion": "#### 18", "answer": "18"}\n')
    score_predictions("gsm8k", predictions, scored)
    with pytest.raises(ValueError, match="holds the output of `eval score`: pass --overwrite"):
        prepare_folder(scored, config)
    # ... and samples that no run_config.json describes (a folder of unknown origin)
    out = shutil.copytree(sampled_run, tmp_path / "run")
    (out / CONFIG_FILE).unlink()
    with pytest.raises(ValueError, match=f"holds output without a {CONFIG_FILE}.*--overwrite"):
        prepare_folder(out, config)
    # a folder written by `eval run` before it recorded the model's fingerprint: which model made it is unknown
    (out / CONFIG_FILE).write_text(
        json.dumps({k: v for k, v in config.items() if k not in ("command", "model_fingerprint")})
    )
    with pytest.raises(ValueError, match="model_fingerprint not recorded"):
        prepare_folder(out, config)


def test_score_lists_timeouts_and_two_scorings_differ_only_there(tmp_path, monkeypatch, caplog):
    # 6 problems of K = 3 completions; the first scoring times out on sample 1 of problem 1, the second on sample 2
    # of problem 4. Everything else must be scored the same, and each run lists what timed out.
    rows = [{"completion": [f"#### {n}", f"#### {n + 10}", f"so #### {n}"], "answer": f"#### {n}"} for n in range(6)]
    path = tmp_path / "preds.jsonl"
    write_jsonl(rows, path)
    runs = []
    for name, timing_out in (("first", {"#### 11"}), ("second", {"so #### 4"})):
        real = eval.samples.score_completion

        def score(completion, gold, task_name, timing_out=timing_out, real=real):
            result = real(completion, gold, task_name)
            if completion in timing_out:
                return {**result, "correct": False, "reason": "timeout", "timeout": True}
            return {**result, "timeout": False}

        monkeypatch.setattr(eval.samples, "score_completion", score)
        results = score_predictions("gsm8k", path, tmp_path / name)
        monkeypatch.undo()
        runs.append((results, read_jsonl(tmp_path / name / SAMPLES_FILE)))
    (first, samples_1), (second, samples_2) = runs
    assert first["timeouts"] == [{"index": 1, "sample": 1}] and first["timeout_rate"] == pytest.approx(1 / 18)
    assert second["timeouts"] == [{"index": 4, "sample": 2}]
    differing = {i for i, (x, y) in enumerate(zip(samples_1, samples_2, strict=True)) if x != y}
    listed = {t["index"] for t in first["timeouts"] + second["timeouts"]}
    assert differing == listed
    assert "1/1" in (tmp_path / "first" / "summary.md").read_text()
    assert "4/2" in caplog.text and "ran out of scoring time" in caplog.text


@pytest.fixture(scope="module")
def wider_model_dir(tiny_model_dir, tmp_path_factory):
    # same folder name as the tiny model, so only the shape check can tell them apart
    return save_tiny_model(tmp_path_factory.mktemp("wider") / tiny_model_dir.name, hidden_size=32)


def _edit_adapter(adapter: Path, tmp_path: Path, **changes) -> Path:
    import shutil

    copy = shutil.copytree(adapter, tmp_path / "edited_adapter")
    config = json.loads((copy / "adapter_config.json").read_text())
    (copy / "adapter_config.json").write_text(json.dumps({**config, **changes}))
    return copy


@pytest.mark.parametrize(
    "case, error",
    [
        ("unknown_task", "unknown task 'gsm9k'"),  # typo in --task
        ("missing_data", "does not exist"),  # --data path that is not there
        ("data_without_fields", "has no \\['question'\\] column"),  # MATH file given to a GSM8K run
        ("greedy_k", "identical answers"),  # --num-samples 4 at temperature 0
        ("vllm", "vllm"),  # vLLM is not installed here (or no GPU)
        ("adapter_missing", "no adapter_config.json"),  # --adapter folder without an adapter
        ("adapter_other_base", "was trained on 'Qwen/Qwen2.5-7B'"),  # adapter of another model
        ("adapter_other_modules", "targets modules \\['wq'\\]"),  # adapter of another architecture
        ("adapter_other_size", "trained on a model of another size"),  # same names, other hidden size
    ],
)
def test_bad_input_fails_before_model_load(
    case, error, tiny_model_dir, wider_model_dir, data_dir, lora_adapter, tmp_path, monkeypatch, capsys
):
    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(cli, "load_model", no_load)
    model, task, data = str(tiny_model_dir), "gsm8k", str(data_dir / DATA["gsm8k"])
    extra = []
    if case == "unknown_task":
        task = "gsm9k"
    elif case == "missing_data":
        data = str(tmp_path / "nope.jsonl")
    elif case == "data_without_fields":
        data = str(data_dir / DATA["math500"])
    elif case == "greedy_k":
        extra = ["--num-samples", "4"]
    elif case == "vllm":
        extra = ["--backend", "vllm"]
    elif case == "adapter_missing":
        extra = ["--adapter", str(tmp_path)]
    elif case == "adapter_other_base":
        extra = ["--adapter", str(_edit_adapter(lora_adapter, tmp_path, base_model_name_or_path="Qwen/Qwen2.5-7B"))]
    elif case == "adapter_other_modules":
        extra = ["--adapter", str(_edit_adapter(lora_adapter, tmp_path, target_modules=["wq"]))]
    elif case == "adapter_other_size":
        model = str(wider_model_dir)  # same folder name, half the hidden size
        extra = ["--adapter", str(lora_adapter)]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--model", model, "--task", task, "--data", data, "--out", str(tmp_path / "o"), *extra])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert re.search(error, message), message


def test_wandb_offline_logs_summary_and_table(tiny_model_dir, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path / "out", "--wandb")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def fake_wandb(monkeypatch) -> dict:
    """A stand-in ``wandb`` module; what ``log_to_wandb`` logs lands in the returned dict under ``"log"``."""
    import types

    sent = {}

    class Run:
        summary = {}

        def log(self, data):
            sent["log"] = data

        def finish(self):
            pass

    class Table:
        def __init__(self, columns):
            self.columns, self.rows = columns, []

        def add_data(self, *row):
            self.rows.append(dict(zip(self.columns, row, strict=True)))

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kwargs: Run(), Table=Table))
    return sent


def test_wandb_gets_the_timeout_rate_and_a_timeout_column(monkeypatch):
    # A stand-in wandb module records what log_to_wandb sends; 2 problems of K = 2, one sample timed out.
    from eval.metrics import summarize
    from eval.run import log_to_wandb

    sent = fake_wandb(monkeypatch)
    base = {"question": "q", "gold": "1", "extracted": None, "reason": "ok", "format_ok": True, "empty": False}
    base |= {"n_tokens": 5, "truncated": False}
    samples = [
        [{**base, "completion": "a", "correct": True, "timeout": False}, {**base, "completion": "b", "correct": False}],
        [{**base, "completion": "c", "correct": False, "timeout": True}, {**base, "completion": "d", "correct": True}],
    ]
    records = [{"index": i, "question": "q", "gold": "1", "samples": s} for i, s in enumerate(samples)]
    results = {"task": "gsm8k", **summarize(records)}
    log_to_wandb(results, records, {"task": "gsm8k"})
    assert sent["log"]["timeout_rate"] == 0.25
    assert [row["timeout"] for row in sent["log"]["samples"].rows] == [False, False, True, False]


LENIENT_FIELDS = ("lenient_extracted", "lenient_from", "lenient_correct", "lenient_timeout")


def test_run_reports_lenient_accuracy_and_compare_prints_both(tiny_model_dir, data_dir, tmp_path, capsys):
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path / "a")
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path / "b")
    samples = read_jsonl(tmp_path / "a" / SAMPLES_FILE)
    assert all(set(LENIENT_FIELDS) <= set(s) and isinstance(s["lenient_correct"], bool) for s in samples)
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert results["lenient_n_correct"] == sum(s["lenient_correct"] for s in samples)
    assert results["lenient_gap"] == pytest.approx(results["lenient_accuracy"] - results["accuracy"])
    assert 0 <= results["lenient_ci"][0] <= results["lenient_accuracy"] <= results["lenient_ci"][1]
    assert results["lenient_rule"] == "last number in the completion (lm-eval flexible-extract)"
    assert "| lenient accuracy: last number" in (tmp_path / "a" / "summary.md").read_text()
    capsys.readouterr()
    cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert "| lenient accuracy |" in out and "| lenient - strict gap |" in out
    assert "B - A lenient accuracy: +0.0 points, 95% CI [0.0, 0.0] (paired bootstrap" in out


def _strip_lenient(folder: Path) -> list[dict]:
    samples = [{k: v for k, v in s.items() if k not in LENIENT_FIELDS} for s in read_jsonl(folder / SAMPLES_FILE)]
    write_jsonl(samples, folder / SAMPLES_FILE)
    return samples


def test_resume_gives_old_samples_their_lenient_verdict_and_keeps_the_strict_one(
    tiny_model_dir, data_dir, tmp_path, caplog
):
    # samples stored without lenient fields (scored before there was a lenient rule) get them from their stored
    # completions on resume; nothing is generated again and the stored strict verdicts stay as they are
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    kwargs = dict(data=str(data_dir / DATA["gsm8k"]), limit=4, max_new_tokens=4, batch_size=2, progress=False)
    evaluate(model, tokenizer, "gsm8k", out_dir=tmp_path, **kwargs)
    samples = _strip_lenient(tmp_path)
    samples[1] |= {"completion": f"so she makes {samples[1]['gold']}", "correct": False}  # lenient right, strict not
    write_jsonl(samples, tmp_path / SAMPLES_FILE)
    with caplog.at_level("INFO", logger="eval.run"):
        resumed = evaluate(model, tokenizer, "gsm8k", out_dir=tmp_path, **kwargs)
    assert "added the lenient verdict to 4 stored samples" in caplog.text
    again = read_jsonl(tmp_path / SAMPLES_FILE)
    assert [{k: v for k, v in s.items() if k not in LENIENT_FIELDS} for s in again] == samples
    assert (again[1]["correct"], again[1]["lenient_correct"], again[1]["lenient_extracted"]) == (
        False,
        True,
        samples[1]["gold"],
    )
    assert resumed["lenient_n_correct"] == sum(s["lenient_correct"] for s in again) >= 1


def test_compare_with_a_run_without_lenient_verdicts_says_so(tiny_model_dir, data_dir, tmp_path, capsys):
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path / "a")
    run_cli(tiny_model_dir, data_dir, "gsm8k", tmp_path / "old")
    _strip_lenient(tmp_path / "old")
    results = json.loads((tmp_path / "old" / "results.json").read_text())
    (tmp_path / "old" / "results.json").write_text(json.dumps({k: v for k, v in results.items() if "lenient" not in k}))
    capsys.readouterr()
    cli.main(["compare", str(tmp_path / "old"), str(tmp_path / "a")])
    out = capsys.readouterr().out
    assert re.search(r"\| lenient accuracy \| n/a \| \d+\.\d% \|", out)
    assert "B - A lenient accuracy: n/a (a run's samples have no lenient verdict: rerun its `eval run`" in out
    assert "B - A accuracy: +0.0 points" in out  # the strict comparison is unaffected


def test_wandb_gets_the_lenient_accuracy_and_columns(monkeypatch):
    from eval.metrics import summarize
    from eval.run import log_to_wandb

    sent = fake_wandb(monkeypatch)
    base = {"question": "q", "gold": "8", "reason": "ok", "format_ok": True, "empty": False, "n_tokens": 5}
    base |= {"truncated": False, "timeout": False, "lenient_from": "last_number", "lenient_timeout": False}
    records = [
        {**base, "index": 0, "completion": "#### 8", "extracted": "8", "correct": True}
        | {"lenient_extracted": "8", "lenient_correct": True},
        {**base, "index": 1, "completion": "so 8", "extracted": None, "correct": False}
        | {"lenient_extracted": "8", "lenient_correct": True},
    ]
    log_to_wandb({"task": "gsm8k", **summarize(records)}, records, {"task": "gsm8k"})
    assert sent["log"]["accuracy"] == 0.5 and sent["log"]["lenient_accuracy"] == 1.0
    assert sent["log"]["lenient_gap"] == 0.5 and sent["log"]["lenient_only_correct"] == 1
    rows = sent["log"]["samples"].rows
    assert [(r["lenient_extracted"], r["lenient_correct"]) for r in rows] == [("8", True), ("8", True)]
