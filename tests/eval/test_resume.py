"""What an evaluation folder may be resumed or written by: only the same run of the same model.

The model's identity (its weights in memory, or the files the CLI loads), the recipes' eval_before/ and eval_after/
across fresh and resumed training runs, `eval score` into a folder that holds another run, temporary files left by a
killed write, and the CLI's help. Tiny local model; each test takes seconds.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_resume.py
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import eval.__main__ as cli
import eval.run
from eval.fingerprint import source_fingerprint, weights_fingerprint
from eval.folder import CONFIG_FILE, LENGTHS_FILE, RESULTS_FILE, SAMPLES_FILE, FolderHoldsAnotherRun
from eval.jsonl import read_jsonl, remove_stale_temps, write_jsonl
from eval.run import evaluate
from recipes import common, sft
from recipes.parser import load_config, recipe_configs
from tests.helpers import parse_recipe_config

ROOT = Path(__file__).resolve().parents[2]
GSM8K = "gsm8k/test.jsonl"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
MARKER = "MARKER of an earlier run"


def load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# --- the model's identity --------------------------------------------------------------------------------------------


def test_weights_fingerprint_follows_every_element_of_every_weight(tiny_model_dir):
    model, _ = load(tiny_model_dir)
    again, _ = load(tiny_model_dir)
    assert weights_fingerprint(model) == weights_fingerprint(again)  # the same weights, loaded twice
    base = weights_fingerprint(model)
    generator = torch.Generator().manual_seed(0)
    seen = set()
    for name, p in list(model.named_parameters())[:: max(1, len(list(model.parameters())) // 6)]:
        flat = p.data.view(-1)
        i = int(torch.randint(flat.numel(), (1,), generator=generator))  # an element anywhere in the tensor
        old = flat[i].item()
        flat[i] = old + 1e-3
        changed = weights_fingerprint(model)
        assert changed != base, f"{name}[{i}] changed but the fingerprint did not"
        seen.add(changed)
        flat[i] = old
        assert weights_fingerprint(model) == base  # restored: the same model again
    assert len(seen) > 1
    assert weights_fingerprint(model.to(torch.bfloat16)) != base  # the same values in another dtype: other bytes


def test_weights_fingerprint_of_a_lora_model_follows_the_adapter(tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    model, _ = load(tiny_model_dir)
    plain = weights_fingerprint(model)
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    before = weights_fingerprint(peft_model)
    assert before != plain
    lora_b = next(p for n, p in peft_model.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        lora_b[0, 0] += 0.5  # one step of training moves B off zero
    assert weights_fingerprint(peft_model) != before


def test_a_model_without_weights_needs_a_given_fingerprint(tmp_path, data_dir):
    message = "cannot fingerprint the model, a object with no parameters.*model_fingerprint"
    with pytest.raises(ValueError, match=message):
        evaluate(object(), None, "gsm8k", data=str(data_dir / GSM8K), limit=1, out_dir=tmp_path)


def test_source_fingerprint_follows_the_model_files_not_the_run_files(tiny_model_dir, tmp_path):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "model")
    first = source_fingerprint(str(folder))
    for name in ("log.jsonl", "report.json", "training_args.bin", "resolved_config.json"):
        (folder / name).write_text("written by a training run, not read by a model load")
    assert source_fingerprint(str(folder)) == first
    model, _ = load(folder)
    with torch.no_grad():
        next(model.parameters()).view(-1)[-1] += 1e-3
    model.save_pretrained(folder)  # retrained into the same folder
    assert source_fingerprint(str(folder)) != first
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"1")
    with_adapter = source_fingerprint(str(folder), str(adapter))
    (adapter / "adapter_model.safetensors").write_bytes(b"2")
    assert with_adapter != source_fingerprint(str(folder)) != source_fingerprint(str(folder), str(adapter))


# --- eval run: the same model resumes, another one is refused -------------------------------------------------------


def run_args(model, data_dir, out, *extra):
    args = ["run", "--model", str(model), "--task", "gsm8k", "--data", str(data_dir / GSM8K)]
    return [*args, "--limit", "3", "--max-new-tokens", "4", "--out", str(out), *extra]


def plant_marker(folder: Path) -> None:
    """Turn the samples of a finished evaluation in ``folder`` into all-correct marked ones, keeping its settings."""
    records = read_jsonl(folder / SAMPLES_FILE)
    for r in records:
        r |= {"completion": f"{MARKER} #### {r['gold']}", "correct": True, "lenient_correct": True}
    write_jsonl(records, folder / SAMPLES_FILE)


def test_eval_run_of_a_retrained_model_into_its_old_folder_is_refused_before_loading(
    tiny_model_dir, data_dir, tmp_path, monkeypatch, capsys
):
    model_dir = shutil.copytree(tiny_model_dir, tmp_path / "model")
    out = tmp_path / "out"
    cli.main(run_args(model_dir, data_dir, out))
    plant_marker(out)
    before = (out / SAMPLES_FILE).read_text()
    cli.main(run_args(model_dir, data_dir, out))  # the same model and settings: resumes, nothing generated again
    assert (out / SAMPLES_FILE).read_text() == before
    model, _ = load(model_dir)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 1e-3
    model.save_pretrained(model_dir)  # retrained into the same folder: the same --model, other weights

    loads = []
    real_load = cli.load_model
    monkeypatch.setattr(cli, "load_model", lambda *a: loads.append(a) or real_load(*a))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(run_args(model_dir, data_dir, out))
    assert exit_info.value.code == 2 and loads == []  # refused before the model loaded
    message = one_line_error(capsys)
    assert f"{out} holds a run with other settings (model_fingerprint was" in message and "--overwrite" in message
    assert (out / SAMPLES_FILE).read_text() == before  # nothing touched
    cli.main(run_args(model_dir, data_dir, out, "--overwrite"))
    assert MARKER not in (out / SAMPLES_FILE).read_text() and len(read_jsonl(out / SAMPLES_FILE)) == 3
    assert json.loads((out / CONFIG_FILE).read_text())["model_fingerprint"] == source_fingerprint(str(model_dir))


def test_evaluate_resumes_the_same_weights_only(tiny_model_dir, data_dir, tmp_path, monkeypatch):
    model, tokenizer = load(tiny_model_dir)
    kwargs = dict(data=str(data_dir / GSM8K), limit=3, max_new_tokens=4, progress=False, out_dir=tmp_path)
    evaluate(model, tokenizer, "gsm8k", **kwargs)
    plant_marker(tmp_path)
    calls = []
    real_generate = eval.run.generate
    monkeypatch.setattr(eval.run, "generate", lambda *a, **k: calls.append(1) or real_generate(*a, **k))
    again, _ = load(tiny_model_dir)
    assert evaluate(again, tokenizer, "gsm8k", **kwargs)["accuracy"] == 1.0 and calls == []  # same weights: resumed
    with torch.no_grad():
        next(again.parameters()).view(-1)[7] -= 1e-3
    with pytest.raises(FolderHoldsAnotherRun, match="model_fingerprint was 'weights:.*--overwrite"):
        evaluate(again, tokenizer, "gsm8k", **kwargs)
    results = evaluate(again, tokenizer, "gsm8k", **kwargs, overwrite=True)
    assert calls and MARKER not in (tmp_path / SAMPLES_FILE).read_text()
    assert results["n_correct"] == sum(r["correct"] for r in read_jsonl(tmp_path / SAMPLES_FILE))
    assert results["model_fingerprint"] == weights_fingerprint(again)


# --- recipes: a fresh run reuses nothing, a resumed one only the same weights' evaluations ---------------------------

SFT = "recipes/configs/tiny/sft_cpu.yaml"
SFT_FAST = ["--eval_limit", "3", "--eval_max_new_tokens", "4", "--validation_data", "", "--train_limit", "4"]


def run_sft(model_dir, out, *extra):
    flags = ["--model_name_or_path", str(model_dir), "--output_dir", str(out), *SFT_FAST, *extra]
    return sft.main(*parse_recipe_config(sft, SFT, *flags))


@pytest.fixture(scope="module")
def trained_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A finished one-step SFT run with a checkpoint, eval_before/ and eval_after/."""
    out = tmp_path_factory.mktemp("sft") / "out"
    run_sft(tiny_model_dir, out, "--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1")
    assert (out / "checkpoint-1").is_dir()
    return out


@pytest.fixture
def marked_run(trained_run, tmp_path) -> Path:
    """A copy of ``trained_run`` whose eval_before/ and eval_after/ hold marked, all-correct samples."""
    out = shutil.copytree(trained_run, tmp_path / "out")
    for name in common.EVAL_FOLDERS:
        plant_marker(out / name)
    return out


def check_report_is_of_its_samples(report: dict, out: Path) -> None:
    for key, name in (("before", "eval_before"), ("after", "eval_after")):
        records = read_jsonl(out / name / SAMPLES_FILE)
        assert report[key]["n_correct"] == sum(r["correct"] for r in records)


def test_a_fresh_training_run_reuses_no_evaluation_of_an_earlier_one(tiny_model_dir, marked_run, capsys):
    from transformers import AutoModelForCausalLM

    report = run_sft(tiny_model_dir, marked_run, "--max_steps", "1", "--overwrite", "--learning_rate", "3e-3")
    for name in common.EVAL_FOLDERS:
        assert MARKER not in (marked_run / name / SAMPLES_FILE).read_text(), name
    check_report_is_of_its_samples(report, marked_run)
    assert report["after"]["accuracy"] < 1.0  # the marker's 1.000 is not printed as this run's
    assert "held-out accuracy" in capsys.readouterr().out
    saved = AutoModelForCausalLM.from_pretrained(marked_run)
    assert report["after"]["model_fingerprint"] == weights_fingerprint(saved)  # eval_after evaluated these weights


def test_a_resumed_run_that_trains_further_evaluates_its_new_weights(tiny_model_dir, marked_run, capsys):
    report = run_sft(tiny_model_dir, marked_run, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1")
    assert "resuming from" in capsys.readouterr().out
    assert MARKER not in (marked_run / "eval_after" / SAMPLES_FILE).read_text()  # other weights: evaluated again
    assert MARKER in (marked_run / "eval_before" / SAMPLES_FILE).read_text()  # the same base model: resumed
    check_report_is_of_its_samples(report, marked_run)


def test_a_resumed_run_with_nothing_left_to_train_resumes_its_evaluations(tiny_model_dir, marked_run):
    report = run_sft(tiny_model_dir, marked_run, "--max_steps", "1")
    for name in common.EVAL_FOLDERS:  # the same weights as the run that made them: kept
        assert MARKER in (marked_run / name / SAMPLES_FILE).read_text(), name
    check_report_is_of_its_samples(report, marked_run)


@pytest.mark.parametrize(
    "checkpoint, flags, kept",
    [
        (False, [], False),  # resume on, nothing to resume: a fresh run
        (True, ["--no_resume"], False),  # a checkpoint there, but resume off
        (True, [], True),  # resumed: the fingerprints decide what is reused
        (False, ["--resume_from_checkpoint", "elsewhere/checkpoint-4"], True),  # resumed from another folder
    ],
)
def test_start_run_empties_the_eval_folders_of_a_fresh_run_only(tiny_model_dir, tmp_path, checkpoint, flags, kept):
    out = tmp_path / "out"
    for name in common.EVAL_FOLDERS:
        (out / name).mkdir(parents=True)
        for file in (SAMPLES_FILE, RESULTS_FILE, CONFIG_FILE, LENGTHS_FILE):
            (out / name / file).write_text("{}\n")
        (out / name / "notes.txt").write_text("not a run file")
    command = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), *flags]
    script_args, training_args, model_args = parse_recipe_config(sft, SFT, *command)
    if checkpoint:  # of a run of these settings (one of other settings, or of none, is refused: recipes.run_folder)
        (out / "checkpoint-2").mkdir()
        config = common.resolved_config(script_args, training_args, model_args)
        (out / "resolved_config.json").write_text(json.dumps(config))
    common.start_run(script_args, training_args, model_args, {"name": "t"})
    for name in common.EVAL_FOLDERS:
        assert (out / name / SAMPLES_FILE).exists() == kept and (out / name / LENGTHS_FILE).exists() == kept
        assert (out / name / "notes.txt").exists()  # only the run's own files go


# --- eval score: another run's folder is refused, the same scoring runs again ---------------------------------------


def score_args(predictions, out, *extra):
    return ["score", "--task", "gsm8k", "--predictions", str(predictions), "--out", str(out), *extra]


def test_score_into_an_eval_run_folder_is_refused_and_overwrite_replaces_it(tiny_model_dir, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    cli.main(run_args(tiny_model_dir, data_dir, out))
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert LENGTHS_FILE in files and CONFIG_FILE in files
    predictions = write_jsonl([{"completion": "#### 18", "answer": "#### 18"}], tmp_path / "preds.jsonl")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(score_args(predictions, out))
    assert exit_info.value.code == 2
    message = one_line_error(capsys)
    assert f"{out} holds the output of `eval run`" in message and "--overwrite" in message
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")} == files
    # the score tokenizer is not loaded for a refused folder either
    with pytest.raises(SystemExit):
        cli.main(score_args(predictions, out, "--tokenizer", str(tiny_model_dir)))
    assert "--overwrite" in one_line_error(capsys)

    cli.main(score_args(predictions, out, "--overwrite"))
    assert [r["completion"] for r in read_jsonl(out / SAMPLES_FILE)] == ["#### 18"]
    assert json.loads((out / CONFIG_FILE).read_text())["command"] == "score"
    assert not (out / LENGTHS_FILE).exists()  # no token counts to plot: no plot of the old run left behind
    cli.main(score_args(predictions, out))  # the same scoring again: allowed
    # an `eval run` into the scored folder is refused the same way, before its model loads
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(run_args(tiny_model_dir, data_dir, out))
    assert f"{out} holds the output of `eval score`" in one_line_error(capsys)


def test_score_refuses_another_predictions_file_and_resumes_its_own_with_a_tokenizer(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    predictions = write_jsonl([{"completion": "#### 18", "answer": "18"}], tmp_path / "preds.jsonl")
    cli.main(score_args(predictions, out, "--tokenizer", str(tiny_model_dir)))
    cli.main(score_args(predictions, out, "--tokenizer", str(tiny_model_dir)))  # same file, fields, tokenizer
    write_jsonl([{"completion": "#### 7", "answer": "18"}], predictions)  # regenerated under the same name
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(score_args(predictions, out, "--tokenizer", str(tiny_model_dir)))
    assert "predictions_sha256 was" in one_line_error(capsys)
    with pytest.raises(SystemExit):
        cli.main(score_args(predictions, out, "--completion-field", "answer"))
    message = one_line_error(capsys)
    assert "completion_field was 'completion', now 'answer'" in message and "tokenizer was" in message


def test_score_into_a_folder_of_unknown_origin_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / SAMPLES_FILE).write_text('{"index": 0}\n')
    predictions = write_jsonl([{"completion": "#### 18", "answer": "18"}], tmp_path / "preds.jsonl")
    with pytest.raises(SystemExit):
        cli.main(score_args(predictions, out))
    assert f"holds output without a {CONFIG_FILE}" in one_line_error(capsys)
    assert (out / SAMPLES_FILE).read_text() == '{"index": 0}\n'


# --- temporary files of killed writes --------------------------------------------------------------------------------

SLOW_WRITER = """
import sys, time
from eval.jsonl import write_jsonl
def rows():
    for i in range(2000):
        yield {"index": i, "completion": "x" * 1000}
    print("writing", flush=True)
    time.sleep(300)
write_jsonl(rows(), sys.argv[1])
"""


def start_slow_writer(path: Path) -> subprocess.Popen:
    """A process in the middle of ``write_jsonl(path)``: its temporary file is on disk, the write not finished."""
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(path)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"writing\n"
    return proc


def temps(folder: Path) -> list[Path]:
    return sorted(folder.glob(f".{SAMPLES_FILE}.*.tmp"))


@pytest.mark.heavy  # starts a process
def test_a_killed_score_leaves_a_temporary_file_that_the_rerun_removes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    writer = start_slow_writer(out / SAMPLES_FILE)  # what `eval score` does last, killed during it
    writer.send_signal(signal.SIGKILL)
    assert writer.wait() == -signal.SIGKILL
    writer.stdout.close()
    [left] = temps(out)
    assert left.stat().st_size > 1_000_000
    predictions = write_jsonl([{"completion": "#### 18", "answer": "18"}], tmp_path / "preds.jsonl")
    cli.main(score_args(predictions, out))
    assert temps(out) == [] and len(read_jsonl(out / SAMPLES_FILE)) == 1


@pytest.mark.heavy  # starts a process
def test_a_live_writers_temporary_file_is_left_alone(tmp_path):
    path = tmp_path / SAMPLES_FILE
    writer = start_slow_writer(path)
    try:
        [live] = temps(tmp_path)
        assert remove_stale_temps(tmp_path) == 0
        write_jsonl([{"index": 0}], path)  # another writer of the same file meanwhile
        assert temps(tmp_path) == [live] and read_jsonl(path) == [{"index": 0}]
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    assert remove_stale_temps(tmp_path) == 1 and temps(tmp_path) == []


def test_an_eval_run_removes_a_temporary_file_left_in_its_folder(tiny_model_dir, data_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / f".{SAMPLES_FILE}.k1ll3d.tmp").write_text('{"index": 0}\n')  # a rewrite of samples.jsonl, killed
    cli.main(run_args(tiny_model_dir, data_dir, out))
    assert temps(out) == []


# --- help -----------------------------------------------------------------------------------------------------------


def test_every_eval_option_has_help():
    import argparse

    parser = cli.make_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        for action in command._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"eval {name} {action.option_strings or action.dest} has no help text"


def lora_output_dirs() -> set[str]:
    """The folders the shipped LoRA configs save their adapter to (the recipes save to output_dir)."""
    dirs = set()
    for path in recipe_configs(ROOT / "recipes" / "configs"):
        config = load_config(path)
        if config.get("use_peft") and config.get("output_dir"):
            dirs.add(config["output_dir"])
    return dirs


def test_the_adapter_examples_are_folders_a_recipe_writes():
    texts = {"eval --help": cli.make_parser().format_help(), "docs/eval.md": (ROOT / "docs" / "eval.md").read_text()}
    dirs = lora_output_dirs()
    for where, text in texts.items():
        examples = [folder for folder in re.findall(r"--adapter ([\w./-]+)", text) if folder != "DIR"]
        assert examples, where
        for folder in examples:
            assert folder in dirs, f"{where}: --adapter {folder} is no output_dir of a LoRA config"
