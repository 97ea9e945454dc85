"""The matrix runner's table, read from synthetic run folders shaped like the GRPO recipe's outputs.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_matrix.py
"""

import hashlib
import json
import os
import statistics
import threading
from pathlib import Path

import pytest

from cpu_lab import matrix, runner
from tests.helpers import tiny_run_flags


def fake_run(root, config, seed, before, after, rewards, gaps, degenerate, length_correct=12.0, length_wrong=20.0):
    """A run folder as recipes/grpo.py leaves it: report.json (evals before/after) and log.jsonl (one row per log)."""
    folder = root / config / f"seed{seed}"
    folder.mkdir(parents=True)

    def result(acc):
        lengths = {
            "correct": {"n": 1, "mean": length_correct, "median": length_correct},
            "wrong": {"n": 1, "mean": length_wrong, "median": length_wrong},
        }
        return {"accuracy": acc, "n": 200, "length_tokens": lengths}

    (folder / "report.json").write_text(json.dumps({"before": result(before), "after": result(after), "seconds": 12.5}))
    rows = [{"step": 0, "probe/violations": 0}]  # the probe row logged at the start carries no training metrics
    for i, (reward, gap, deg) in enumerate(zip(rewards, gaps, degenerate, strict=True)):
        rows.append(
            {
                "step": 5 * (i + 1),
                "reward": reward,
                "monitor/reward_correctness_gap": gap,
                "monitor/degenerate_share": deg,
                "eval/accuracy": after,
            }
        )
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def matrix_dir(tmp_path):
    # config a: two seeds, rewards rise; 8 log rows so the first/last quarter are 2 rows each
    fake_run(tmp_path, "grpo_lab_a", 0, 0.30, 0.50, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [0.1] * 8, [0.5] * 8)
    fake_run(tmp_path, "grpo_lab_a", 1, 0.30, 0.60, [0.1] * 8, [0.2] * 8, [0.3] * 8)
    # config b: one seed (no std), a gap that grows: reward pays something other than correctness
    fake_run(tmp_path, "grpo_lab_b", 0, 0.30, 0.20, [0.5] * 8, [0.0] * 6 + [0.4, 0.6], [0.9] * 8, length_wrong=31.0)
    return tmp_path


def test_summaries_read_the_recipe_outputs(matrix_dir):
    groups = matrix.collect(matrix_dir)
    assert list(groups) == ["grpo_lab_a", "grpo_lab_b"]
    a0, a1 = groups["grpo_lab_a"]
    assert (a0.seed, a0.accuracy_before, a0.accuracy_after, a0.steps, a0.seconds) == (0, 0.30, 0.50, 40, 12.5)
    assert a0.reward_start == pytest.approx(0.15) and a0.reward_end == pytest.approx(0.75)  # first/last 2 of 8
    assert a0.degenerate_share == 0.5 and a1.gap_end == pytest.approx(0.2)
    (b,) = groups["grpo_lab_b"]
    assert b.gap_end == pytest.approx(0.5) and b.length_wrong == 31.0


def test_table_has_mean_and_std_across_seeds(matrix_dir):
    table = matrix.comparison_table(matrix.collect(matrix_dir))
    row_a = next(line for line in table.splitlines() if line.startswith("| grpo_lab_a"))
    assert f"0.550 ± {statistics.stdev([0.5, 0.6]):.3f}" in row_a  # 0.550 ± 0.071
    assert "| 0, 1 |" in row_a and "| 0.40 |" in row_a  # degenerate share: mean of 0.5 and 0.3
    row_b = next(line for line in table.splitlines() if line.startswith("| grpo_lab_b"))
    assert "0.200 (1 seed)" in row_b and "| 31.0 |" in row_b and "0.500 → 0.500" in row_b


def test_write_table_makes_markdown_and_plots(matrix_dir):
    path = matrix.write_table(matrix_dir)
    text = path.read_text()
    assert "grpo_lab_a" in text and "![accuracy](accuracy.png)" in text
    assert (matrix_dir / "accuracy.png").stat().st_size > 0 and (matrix_dir / "curves.png").stat().st_size > 0


def test_run_without_report_falls_back_to_the_logged_accuracy(tmp_path):
    folder = fake_run(tmp_path, "grpo_lab_c", 0, 0.1, 0.42, [0.1] * 4, [0.0] * 4, [0.0] * 4)
    (folder / "report.json").unlink()  # e.g. a run killed before its final evaluation
    (run,) = matrix.collect(tmp_path)["grpo_lab_c"]
    assert run.accuracy_after == 0.42 and run.accuracy_before is None


@pytest.mark.parametrize(
    "configs, message",
    [
        (["recipes/configs/lab/train_lab.yaml"], "must start with one of"),  # no recipe for this prefix
        (["recipes/configs/lab/grpo_lab_missing.yaml"], "does not exist"),  # a typo in the path
    ],
)
def test_bad_configs_fail_before_any_run(tmp_path, configs, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        matrix.run_matrix(configs, [0], tmp_path)


def test_empty_folder_says_what_is_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="no runs under"):
        matrix.write_table(tmp_path)


def test_jobs_run_at_once_in_their_own_processes_and_a_failure_names_its_log(
    tmp_path, tiny_model_dir, data_dir, capsys
):
    """Two real 1-step GRPO runs at once, plus one whose config is refused: the good ones finish, the error names
    the bad run's log. The subprocesses get the split thread count."""
    bad = tmp_path / "grpo_bad.yaml"  # a misspelt key: refused from the table of options, before TRL loads
    bad.write_text(
        Path("recipes/configs/tiny/grpo_cpu.yaml").read_text().replace("num_generations: 4", "num_generation: 4")
    )
    configs = ["recipes/configs/tiny/grpo_cpu.yaml", "recipes/configs/tiny/grpo_cpu_lora_drgrpo.yaml", str(bad)]
    extra = ["--model_name_or_path", str(tiny_model_dir)]
    extra += tiny_run_flags(max_steps=1, eval_limit=2, monitor_eval_steps=0, probe_problems=0)
    out = tmp_path / "m"
    with pytest.raises(RuntimeError, match=r"1 run\(s\) failed: .*grpo_bad/seed0 \(exit 2; see .*run.log\)"):
        matrix.run_matrix(configs, [0], out, extra, jobs=2)
    for name in ("grpo_cpu", "grpo_cpu_lora_drgrpo"):
        assert (out / name / "seed0" / "report.json").exists()
        assert "train log (JSON lines)" in (out / name / "seed0" / "run.log").read_text()
    assert "num_generations" in (out / "grpo_bad" / "seed0" / "run.log").read_text()
    printed = capsys.readouterr().out
    assert (
        printed.count("[matrix] finished") == 2
        and "[matrix] FAILED" in printed
        and f"({max(1, os.cpu_count() // 2)} thread(s);" in printed
    )
    # a rerun skips the finished runs and retries only the failed one
    finished = {p: p.stat().st_mtime_ns for p in out.glob("*/seed0/report.json")}
    with pytest.raises(RuntimeError, match="grpo_bad"):
        matrix.run_matrix(configs, [0], out, extra, jobs=2)
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/seed0/report.json")} == finished


def test_jobs_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        matrix.run_matrix(["recipes/configs/tiny/grpo_cpu.yaml"], [0], tmp_path, jobs=0)


def test_an_error_while_jobs_run_stops_the_runs_still_going(tmp_path, monkeypatch):
    class FakeRun:  # a subprocess.Popen stand-in: the first finishes once the second has started, which never does
        def __init__(self, done):
            self.done, self.terminated, self.stopped = done, False, threading.Event()

        def wait(self):
            (both_started if self.done else self.stopped).wait(timeout=60)
            return 0 if self.done else -15

        def terminate(self):
            self.terminated = True
            self.stopped.set()

    started, both_started = [], threading.Event()

    def start(*args):
        started.append(FakeRun(done=not started))
        if len(started) == 2:
            both_started.set()
        return started[-1]

    monkeypatch.setattr(runner, "run_subprocess", start)
    monkeypatch.setattr(matrix, "summarize_run", lambda folder: 1 / 0)  # reading the finished run fails
    configs = ["recipes/configs/tiny/grpo_cpu.yaml", "recipes/configs/tiny/grpo_cpu_lora_drgrpo.yaml"]
    with pytest.raises(ZeroDivisionError):
        matrix.run_matrix(configs, [0], tmp_path, jobs=2)
    assert [run.terminated for run in started] == [False, True]


@pytest.mark.integration
def test_loss_axis_runs_every_variant_with_its_trl_parameters(tmp_path, tiny_model_dir):
    """Every loss-axis config, 2 real GRPO steps on the tiny model: TRL 1.16 accepts each variant, the run resolves the
    parameters its config names, and the table has one row per loss with its seconds per step."""
    from cpu_lab.problems import write_lab_data

    paths = write_lab_data(tmp_path / "data", n_train=64)
    train, heldout = paths["train"], paths["test"]
    extra = [
        "--model_name_or_path",
        str(tiny_model_dir),
        "--data",
        str(train),
        "--eval_data",
        str(heldout),
        *tiny_run_flags(eval_limit=2, monitor_eval_steps=0, probe_problems=0, logging_steps=1),
        *("--per_device_train_batch_size", "8"),  # 1 prompt x G=8 per step: seconds, not minutes
    ]
    out = tmp_path / "losses"
    matrix.main(["--losses", ",".join(matrix.LOSSES), "--seeds", "0", "--out", str(out), "--", *extra])
    expected = {  # what each variant's config must hand to TRL (the rest is shared)
        "grpo": {"loss_type": "grpo", "scale_rewards": "group", "importance_sampling_level": "token"},
        "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "dapo": {"loss_type": "dapo", "epsilon_high": 0.28},
        "bnpo": {"loss_type": "bnpo"},
        "cispo": {"loss_type": "cispo", "epsilon_high": 5.0},
        "sapo": {"loss_type": "sapo", "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05},
        "gspo": {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
    }
    for loss, keys in expected.items():
        folder = out / f"grpo_lab_loss_{loss}" / "seed0"
        resolved = json.loads((folder / "resolved_config.json").read_text())  # every parsed field, as the run saw it
        assert {k: resolved.get(k) for k in keys} == keys, loss
        assert resolved["steps_per_generation"] == 2  # every variant reuses its batch once: the clip terms can act
        rows = matrix.read_log(folder / "log.jsonl")
        clip_metric = "cispo_clip_ratio" if loss == "cispo" else "clip_ratio/region_mean" if loss != "sapo" else None
        assert clip_metric is None or any(clip_metric in r for r in rows), (loss, clip_metric)  # TRL ran that loss
    table = (out / "matrix.md").read_text()
    for loss in matrix.LOSSES:
        row = next(line for line in table.splitlines() if line.startswith(f"| grpo_lab_loss_{loss} |"))
        assert row.rstrip(" |").split("|")[-1].strip().endswith("(1 seed)")  # seconds per step was logged


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--losses", "grpo,drgrpo"], "unknown loss"),  # a typo in a loss name
        (["--losses", "grpo", "--seeds", "0,x"], "--seeds takes whole numbers"),
        ([], "give --configs or --losses"),
    ],
)
def test_bad_loss_axis_arguments_fail_before_any_run(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        matrix.main([*argv, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err


def test_a_finished_run_is_reused_only_with_the_settings_it_was_made_with(tmp_path, monkeypatch, capsys):
    """A rerun into the same folder skips a finished run only if its config settings, seed and extra flags are the ones
    it was started with; otherwise it refuses before any run starts and names what changed (a config taken from 30
    to 80 steps: the 30-step runs must not fill the 80-step table)."""
    config = tmp_path / "grpo_lab_x.yaml"
    config.write_text("max_steps: 30\n")
    started = []
    monkeypatch.setattr(
        matrix,
        "run_one",
        lambda c, seed, folder, extra: started.append(folder) or (folder / "report.json").write_text("{}"),
    )
    out = tmp_path / "m"
    matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "30"])
    assert len(started) == 2 and (out / "grpo_lab_x" / "seed0" / matrix.SETTINGS_FILE).exists()
    matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "30"])  # same settings: both skipped
    assert len(started) == 2 and capsys.readouterr().out.count("with the same settings, skipped") == 2
    with pytest.raises(ValueError, match=r"seed0 finished with other settings \(extra_args: .*'30'.*'80'.*--out"):
        matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "80"])
    config.write_text("max_steps: 80\n")  # the config's settings changed, not its name
    with pytest.raises(ValueError, match="config option max_steps: 30 then, 80 now"):
        matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "30"])
    assert len(started) == 2  # nothing ran after a refusal
    config.write_text("# thirty steps\nmax_steps:   30  # a comment changes no setting\n")
    matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "30"])  # reused: the same settings
    assert len(started) == 2 and capsys.readouterr().out.count("with the same settings, skipped") == 2
    # how the run saved or logged changes nothing it trained: reused, and said; with a trained option, refused
    config.write_text("max_steps: 30\nsave_strategy: steps\nsave_steps: 8\nlogging_steps: 5\n")
    matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "30"])
    assert len(started) == 2
    assert capsys.readouterr().out.count("differs only in logging_steps, save_steps, save_strategy, which") == 2
    config.write_text("max_steps: 30\nsave_steps: 8\nlearning_rate: 0.001\n")
    with pytest.raises(ValueError, match=r"\(config option learning_rate: None then, 0.001 now\): pass"):
        matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "30"])
    config.write_text("# thirty steps\nmax_steps:   30  # a comment changes no setting\n")
    # a record of the config's text (made before settings were recorded): reused while the text is the same
    record = out / "grpo_lab_x" / "seed0" / matrix.SETTINGS_FILE
    current = record.read_text()
    old = json.loads(current)
    del old["config_settings"]
    old["config_sha256"] = hashlib.sha256(config.read_bytes()).hexdigest()
    record.write_text(json.dumps(old))
    matrix.run_matrix([str(config)], [0], out, ["--max_steps", "30"])
    config.write_text("max_steps: 30\n")
    with pytest.raises(ValueError, match="a config text since changed"):
        matrix.run_matrix([str(config)], [0], out, ["--max_steps", "30"])
    assert len(started) == 2
    record.write_text(current)
    # a run folder from before the settings were recorded is still skipped, and says it was not checked
    (out / "grpo_lab_x" / "seed1" / matrix.SETTINGS_FILE).unlink()
    config.write_text("max_steps: 30\n")
    matrix.run_matrix([str(config)], [0, 1], out, ["--max_steps", "30"])
    assert len(started) == 2 and "not checked" in capsys.readouterr().out


def test_a_run_without_held_out_readings_does_not_call_its_last_check_held_out_accuracy(tmp_path):
    """The real-model lab's runs read no held-out set themselves (``--eval_limit 0``): the line printed when one ends
    names its last in-training check as what it is, not as the held-out accuracy after training."""
    import json

    from cpu_lab import matrix

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "log.jsonl").write_text(json.dumps({"step": 4, "reward": 0.5, "eval/accuracy": 0.5}) + "\n")
    (folder / "report.json").write_text(json.dumps({"seconds": 3.0}))
    assert matrix._accuracies(folder) == "no held-out reading of its own; last in-training check 0.500"
    sft = tmp_path / "sft"  # an SFT run's checks are on dev, in its report (its log has no eval/accuracy)
    sft.mkdir()
    (sft / "log.jsonl").write_text(json.dumps({"step": 5, "loss": 0.1}) + "\n")
    (sft / "report.json").write_text(json.dumps({"seconds": 3.0, "validation": {"last": 0.575, "best": 0.67}}))
    assert matrix._accuracies(sft) == "no held-out reading of its own; last in-training check 0.575"
    result = {"accuracy": 0.25, "ci": [0.1, 0.4], "n": 4}
    (folder / "report.json").write_text(json.dumps({"before": result, "after": result | {"accuracy": 0.75}}))
    assert matrix._accuracies(folder) == "held-out accuracy 0.250 -> 0.750"
