"""The demo's verdicts, computed from synthetic run folders (the real runs are in tests/test_cpu_lab_slow.py).

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_cpu_lab_demo.py
"""

import json
from pathlib import Path

from cpu_lab import demo, matrix
from tests.test_cpu_lab_matrix import fake_run


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
    assert "ROSE: the default gain may not be signal" in text  # the random control must not rise
    assert "training reward 0.900 → 0.990" in text and "the hacking signature" in text
    assert "`bare_wrong` scores 1.000" in text and "hedge" not in text  # only the probes that pass are named
    assert "wrong answers 20.0 vs 25.0 tokens" in text


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
    monkeypatch.setattr(demo.matrix, "run_matrix", lambda configs, seeds, out, extra, jobs: seen.update({out: extra}))
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
