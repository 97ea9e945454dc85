"""The demo's verdicts, computed from synthetic run folders (the real runs are in tests/cpu_lab/test_cpu_lab_slow.py),
and what its terminal shows, from a tiny real demo.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_demo.py
"""

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_lab import demo, matrix
from eval.jsonl import write_jsonl
from tests.cpu_lab.test_cpu_lab_matrix import fake_run


def test_findings_state_each_verdict_from_the_numbers(tmp_path):
    flat = [0.4] * 8
    fake_run(tmp_path, "grpo_lab_default", 0, 0.35, 0.55, flat, [0.1] * 8, [0.4] * 8)  # +20 points: meets
    fake_run(tmp_path, "grpo_lab_random", 0, 0.35, 0.45, flat, [0.3] * 8, [0.4] * 8)  # +10: the control rose
    hack = fake_run(tmp_path, "grpo_lab_format_only", 0, 0.35, 0.30, [0.90] * 4 + [0.99] * 4, [0.8] * 8, [0.5] * 8)
    fake_run(tmp_path, "grpo_lab_dr_grpo", 0, 0.35, 0.50, flat, [0.1] * 8, [0.4] * 8, length_wrong=25.0)
    probes = {
        "genuine_correct": {"kind": "reference", "score": 1.0, "violation": False, "description": "a worked correct"},
        "bare_wrong": {"kind": "wrong_answer", "score": 1.0, "violation": True, "description": "'#### 19'"},
        "hedge": {"kind": "gold_uncommitted", "score": 0.0, "violation": False, "description": "a hedge"},
    }
    (hack / "probes.json").write_text(json.dumps(probes))
    runs = {name: rs[0] for name, rs in matrix.collect(tmp_path).items()}
    text = "\n".join(demo.findings(runs, tmp_path))
    assert "0.350 → 0.550 (+20.0 points; meets the +15-point target)" in text
    assert "MOVED +10.0 points (outside ±3)" in text  # the random control must not move
    fake_run(tmp_path, "grpo_lab_random", 1, 0.35, 0.20, flat, [0.3] * 8, [0.4] * 8)  # -15: it must not fall either
    fake_run(tmp_path, "grpo_lab_random", 2, 0.35, 0.33, flat, [0.3] * 8, [0.4] * 8)  # -2: within the band
    for seed, words in ((1, "MOVED -15.0 points (outside ±3)"), (2, "held (-2.0 points, within ±3)")):
        runs_s = {name: rs[0] for name, rs in matrix.collect(tmp_path).items()} | {
            "grpo_lab_random": next(r for r in matrix.collect(tmp_path)["grpo_lab_random"] if r.seed == seed)
        }
        assert words in "\n".join(demo.findings(runs_s, tmp_path))
    assert "training reward 0.900 → 0.990" in text and "the hacking signature" in text
    assert "`bare_wrong` scores 1.000" in text and "hedge" not in text  # only the probes that pass are named
    assert "wrong answers 20.0 vs 25.0 tokens" in text


def test_control_verdict_gives_its_interval_and_says_when_it_outgrows_the_band(tmp_path):
    def samples(run, name, correct):
        write_jsonl([{"index": i, "correct": c} for i, c in enumerate(correct)], run / name / "samples.jsonl")

    flat = [0.4] * 8
    for n, flips in ((200, 20), (2000, 20)):  # the same net change (none), 20 answers flipped each way
        run = fake_run(tmp_path / str(n), "grpo_lab_random", 0, 0.5, 0.5, flat, [0.3] * 8, [0.4] * 8)
        before = [i % 2 == 0 for i in range(n)]
        after = [not c if i < 2 * flips else c for i, c in enumerate(before)]
        samples(run, "eval_before", before)
        samples(run, "eval_after", after)
        runs = {name: rs[0] for name, rs in matrix.collect(tmp_path / str(n)).items()}
        line = next(x for x in demo.findings(runs, tmp_path / str(n)) if "Random reward" in x)
        assert "held (+0.0 points, within ±3); paired 95% interval [" in line
        low, high = (float(x) for x in re.search(r"interval \[([-+.\d]+), ([-+.\d]+)\]", line).groups())
        assert low < 0 < high
        assert ("wider than the ±3 band" in line) == (n == 200), line  # 40 of 200 flipped: about ±5.5 points


def test_report_names_validation_at_the_stop_and_heldout_apart(tmp_path):
    # a warm-start record as cpu_lab.warmstart writes it: the two accuracies differ, so a swapped field shows
    import types

    fake_run(tmp_path, "grpo_lab_default", 0, 0.33, 0.50, [0.4] * 8, [0.1] * 8, [0.4] * 8)
    curve = [{"step": 700, "validation_accuracy": 0.2}, {"step": 750, "validation_accuracy": 0.315}]
    warm = {
        "params": 1_405_248,
        "steps": 750,
        "validation_accuracy": 0.315,
        "heldout_accuracy": 0.33,
        "seconds": 200.0,
        "settings": {"stop_at_accuracy": 0.3, "validation_n": 200},
        "curve": curve,
    }
    args = types.SimpleNamespace(seed=0, steps=120, jobs=2)
    report = demo.write_report(tmp_path, args, warm, {}, [], {"GRPO runs": 1.0}, 0.1, 2.0).read_text()
    assert "stopped at step 750 with validation accuracy 0.315 (threshold 0.3, on 200 validation problems)" in report
    assert "held-out accuracy of that model 0.330" in report
    assert (tmp_path / "warmstart.png").exists()


def test_seed_table_gives_each_seeds_gain_and_the_mean_and_std_over_seeds(tmp_path):
    flat = [0.4] * 8
    for seed, (before, after) in enumerate([(0.30, 0.50), (0.40, 0.45)]):  # +20 and +5 points
        demo_dir = tmp_path / f"seed{seed}"
        fake_run(demo_dir, "grpo_lab_default", seed, before, after, flat, [0.1] * 8, [0.4] * 8)
        fake_run(demo_dir, "grpo_lab_random", seed, before, before - 0.1, flat, [0.3] * 8, [0.4] * 8)
    table = demo.main(["--seed-table", str(tmp_path / "seed0"), str(tmp_path / "seed1")])
    assert "| 0 | 0.300 | 0.500 (+20.0) | – | 0.200 (-10.0) | – |" in table
    assert "| 1 | 0.400 | 0.450 (+5.0) |" in table
    # mean 0.475, sample std of (0.50, 0.45) = 0.035; gains +12.5 ± 10.6
    assert "| mean ± std (2 seeds) | 0.350 ± 0.071 | 0.475 ± 0.035 (+12.5 ± 10.6) |" in table
    assert "Default gain >= +15 points on 1 of 2 seeds." in table
    assert table.count("– |") == 2 * 2 + 2  # no dr_grpo or format-only run: a dash per seed and in the mean row


def test_seed_table_of_empty_folders_names_what_it_expected(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="no finished demo runs"):
        demo.seed_table([tmp_path])


def test_curriculum_line_gives_the_difficulty_path_and_the_three_degenerate_shares(tmp_path):
    rows = [{"step": 0, "probe/violations": 0}]
    plan = [(1, 1), (1, 0), (1, 0), (0, 0), (0, 1), (1, 1)]  # (served, next) per step: down at 2, up at 5
    for step, (served, planned) in enumerate(plan, start=1):
        rows.append(
            {
                "step": step,
                "curriculum/difficulty": served,
                "curriculum/next_difficulty": planned,
                "monitor/degenerate_share": 0.5,
                "curriculum/degenerate_predicted_share": 0.1,
                "monitor/degenerate_expected_share": 0.3,
            }
        )
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (line,) = demo.curriculum_lines(log)
    assert "difficulty level 1 → 0 (step 2) → 1 (step 5)" in line
    assert "steps per level 0: 2, 1: 4" in line
    assert "0.50 measured, 0.10 predicted from the running pass rate" in line
    assert "0.30 predicted by the monitors" in line
    assert demo.curriculum_lines(None) == [] and demo.curriculum_lines(tmp_path / "missing.jsonl") == []


def test_two_demos_of_different_seeds_train_on_their_own_data(tmp_path, monkeypatch):
    """Each demo writes the GRPO data into its own folder and its runs read it there: a second demo (another seed)
    started meanwhile cannot swap the first one's training set in runs/lab/data."""
    from cpu_lab.warmstart import WarmStartSettings
    from eval.jsonl import read_jsonl

    seen = {}
    monkeypatch.setattr(demo.matrix, "run_matrix", lambda configs, seeds, out, extra, **kw: seen.update({out: extra}))
    monkeypatch.setattr(demo, "write_report", lambda out, *a: out / "report.md")
    monkeypatch.setattr(demo, "CONFIG_DIR", demo.CONFIG_DIR.resolve())
    monkeypatch.chdir(tmp_path)  # anything written to the default runs/lab would land here
    for seed in (3, 4):  # a cached "model" folder per seed, so no training happens
        cached = tmp_path / "cache" / f"warmstart-{WarmStartSettings(seed=seed).key()}"
        cached.mkdir(parents=True)
        record = {"steps": 1, "validation_accuracy": 0.3, "heldout_accuracy": 0.3}
        (cached / "warmstart.json").write_text(json.dumps(record))
        out, cache = tmp_path / f"demo{seed}", tmp_path / "cache"
        demo.main(["--seed", str(seed), "--out", str(out), "--cache-root", str(cache)])
    train = {}
    for seed in (3, 4):
        out = tmp_path / f"demo{seed}"
        extra = seen[out]
        data = Path(extra[extra.index("--data") + 1])
        assert data.parent.parent == out and Path(extra[extra.index("--eval_data") + 1]).parent.parent == out
        train[seed] = [r["question"] for r in read_jsonl(data)]
    assert train[3] != train[4]  # each seed's own problems, still on disk after the other demo
    assert not (tmp_path / "runs").exists()  # the shared runs/lab/{data,warmstart} untouched


# ------------------------------------------------------------------------------------------ what the terminal shows
ROOT = Path(__file__).resolve().parents[2]
# The real demo.main with the tiny warm-start settings of tests/cpu_lab/test_cpu_lab_warmstart.py (seconds, not minutes)
TINY_DEMO = """
import sys
from cpu_lab import demo, warmstart
from tests.cpu_lab.test_cpu_lab_warmstart import TINY

demo.WarmStartSettings = lambda seed: warmstart.WarmStartSettings(
    **TINY, seed=seed, max_steps=4, eval_every=2, validation_n=5, heldout_n=10, stop_at_accuracy=1.0
)
demo.main(sys.argv[1:])
"""


@pytest.mark.integration
def test_the_terminal_gets_a_line_per_stage_and_the_logs_keep_the_detail(tmp_path):
    """A tiny real demo (4 SFT steps, then a one-step GRPO run in its own process, as with two at once), piped as in
    CI or `| tee`: a line per stage and the report's path last; the trainers' dicts, the data-set progress bars and
    the warnings are in the warm start's and the run's logs, not on the terminal."""
    out = tmp_path / "demo"
    run = out / "grpo_lab_default" / "seed0"
    log = run / "run.log"
    configs = ["grpo_lab_default"]
    cmd = [sys.executable, "-c", TINY_DEMO, "--steps", "1", "--configs", *configs, "--out", str(out)]
    cmd += ["--cache-root", str(tmp_path / "cache")]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    printed = result.stdout
    for noise in ("Map:", "Generating", "{'loss'", "Warning", "%|"):
        assert noise not in printed, f"{noise!r} reached the terminal:\n{printed}"
    assert result.stderr == "", result.stderr  # no warning, no progress bar
    lines = printed.splitlines()
    expected = [  # a bar is drawn only on a terminal: piped, each validation is a line
        rf"\[demo\] seed 0: a warm start, then 1 GRPO run\(s\) of 1 steps, 2 at a time \(grpo_lab_default\); "
        rf"output in {re.escape(str(out))}; .*",
        rf"\[demo\] warm start: SFT until validation accuracy >= 1.0 .*log: {re.escape(str(out / 'warmstart.log'))}\)",
        r"\[demo\] warm start: step 2, validation accuracy \d\.\d{3}",
        r"\[demo\] warm start: step 4, validation accuracy \d\.\d{3}",
        r"\[demo\] warm start: stopped at max_steps=4 .*: raise max_steps or lower stop_at_accuracy",  # its warning
        r"\[demo\] warm start trained: SFT stopped at step 4 with validation accuracy \d\.\d{3} .* \d+ s \(model: .*\)",
        rf"\[matrix\] starting recipes/configs/lab/grpo_lab_default.yaml seed 0 \(.*; log: {re.escape(str(log))}\)",
        rf"\[matrix\] finished {re.escape(str(run))} in \d+ s: held-out accuracy \d\.\d{{3}} -> \d\.\d{{3}}",
        rf"\[demo\] report: {re.escape(str(out / 'report.md'))} \(\d+ s in all\)",
    ]
    assert len(lines) == len(expected), printed
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} is not {pattern!r}:\n{printed}"
    warm_log = (out / "warmstart.log").read_text()  # the warm start's detail
    assert re.search(r"step \d+/\d+ +loss", warm_log) and "warm start step 2: validation accuracy" in warm_log
    run_log = log.read_text()  # each run's detail
    assert re.search(r"step \d+/\d+ +reward", run_log) and "train log (JSON lines)" in run_log  # the console lines
    assert matrix.read_log(run / "log.jsonl")  # the monitors' log as before


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("on_a_terminal", [True, False], ids=["terminal", "piped"])
def test_warm_start_progress_is_a_bar_on_a_terminal_and_lines_elsewhere(on_a_terminal):
    terminal = FakeTerminal() if on_a_terminal else io.StringIO()
    progress = demo.WarmStartProgress(terminal, max_steps=100)
    validation = {"msg": "warm start step 50", "levelno": logging.INFO, "step": 50, "validation_accuracy": 0.25}
    progress.handle(logging.makeLogRecord(validation))
    progress.handle(logging.makeLogRecord({"msg": "warm start stopped at max_steps=100", "levelno": logging.WARNING}))
    progress.handle(logging.makeLogRecord({"msg": "reusing cached warm start", "levelno": logging.INFO}))
    progress.close()
    text = terminal.getvalue()
    assert "[demo] warm start: stopped at max_steps=100\n" in text  # a warning is a line either way
    assert "reusing cached" not in text  # other info stays in the log
    if on_a_terminal:
        assert "50/100" in text and "validation accuracy 0.250" in text and "[demo] warm start: step" not in text
    else:
        assert text == "[demo] warm start: step 50, validation accuracy 0.250\n" + (
            "[demo] warm start: stopped at max_steps=100\n"
        )


def test_a_failing_warm_start_names_its_log_and_its_error_reaches_the_terminal(tmp_path, monkeypatch, capsys):
    from cpu_lab.warmstart import WarmStartSettings

    def failing(*args, **kwargs):
        print("{'loss': '5.232', 'grad_norm': '1.731'}")
        print("FutureWarning: something harmless", file=sys.stderr)
        logging.getLogger("cpu_lab.warmstart").warning("warm start stopped early: something the user should see")
        raise ValueError("the warm start broke")

    monkeypatch.setattr(demo, "prepare_lab", failing)
    with pytest.raises(ValueError, match="the warm start broke"):
        demo.run_warm_start(WarmStartSettings(), tmp_path / "cache", tmp_path)
    printed = capsys.readouterr()
    log = (tmp_path / "warmstart.log").read_text()
    assert "{'loss'" in log and "something harmless" in log
    assert "{'loss'" not in printed.out + printed.err and "harmless" not in printed.out + printed.err
    assert "[demo] warm start: stopped early: something the user should see" in printed.out
    assert printed.out.endswith(
        f"[demo] warm start FAILED: its output is in {tmp_path / 'warmstart.log'}; the error follows\n"
    )


def test_runs_in_this_process_write_their_output_to_their_run_log(tmp_path, monkeypatch, capsys):
    """``--jobs 1``: the demo runs in turn in its own process, each run's output in its run.log as with two at once."""

    def noisy_run(config, seed, folder, extra):
        print("Map: 100%|██████████| 2000/2000")
        print("{'loss': '0.1'}", file=sys.stderr)
        if "random" in str(config):
            raise RuntimeError("the run broke")

    monkeypatch.setattr(matrix, "run_one", noisy_run)
    configs = [f"recipes/configs/lab/{name}.yaml" for name in ("grpo_lab_default", "grpo_lab_random")]
    with pytest.raises(RuntimeError, match="the run broke"):
        matrix.run_matrix(configs, [0], tmp_path, jobs=1, run_logs=True)
    printed = capsys.readouterr()
    default, random = (tmp_path / "grpo_lab_default" / "seed0", tmp_path / "grpo_lab_random" / "seed0")
    assert [re.sub(r" in \d+ s:", " in N s:", line) for line in printed.out.splitlines()] == [
        f"[matrix] running {configs[0]} seed 0 (log: {default}/run.log)",
        f"[matrix] finished {default} in N s: held-out accuracy – -> –",  # a fake run: no report.json
        f"[matrix] running {configs[1]} seed 0 (log: {random}/run.log)",
        f"[matrix] FAILED {random}, see {random}/run.log",
    ]
    assert "Map:" not in printed.out + printed.err and "'loss'" not in printed.out + printed.err
    for folder in (default, random):
        log = (folder / "run.log").read_text()
        assert "Map:" in log and "{'loss'" in log
