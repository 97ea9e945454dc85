"""The real-model lab (``cpu_lab.real``): its report from run folders, its errors, and (slow tier) its mechanics on
SmolLM2 in a few steps: every stage through its recipe, every arm's monitors, probes and before/after evals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_lab import real
from eval.jsonl import write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def _result(correct: list[bool], formatted: float) -> dict:
    from eval.metrics import wilson_interval

    k, n = sum(correct), len(correct)
    return {
        "accuracy": k / n,
        "n": n,
        "n_correct": k,
        "ci": list(wilson_interval(k, n)),
        "format_rate": formatted,
        "length_tokens": {"correct": {"n": k, "mean": 12.0}, "wrong": {"n": n - k, "mean": 20.0}},
    }


def _run(folder: Path, before: list[bool], after: list[bool], config: str, log: list[dict]) -> None:
    folder.mkdir(parents=True)
    for name, verdicts in (("eval_before", before), ("eval_after", after)):
        rows = [{"index": i, "correct": c, "completion": "#### 1"} for i, c in enumerate(verdicts)]
        write_jsonl(rows, folder / name / "samples.jsonl")
    report = {"before": _result(before, 0.5), "after": _result(after, 0.9), "steps": len(log), "seconds": 12.0}
    (folder / "report.json").write_text(json.dumps(report))
    write_jsonl(log, folder / "log.jsonl")
    settings = {"config": config, "config_sha256": "x", "seed": 0, "extra_args": ["--max_steps", "3"]}
    (folder / "matrix_run.json").write_text(json.dumps(settings))


def test_report_gives_each_run_its_accuracies_intervals_and_paired_gain(tmp_path):
    n = 40
    before = [i < 10 for i in range(n)]  # 10/40
    after = [i < 18 for i in range(n)]  # 18/40: +20 points, the same problems plus eight
    log = [
        {"step": s, "reward": 0.5 + 0.1 * s, "monitor/correct_rate": 0.3 + 0.05 * s, "monitor/degenerate_share": 0.5}
        for s in (1, 2, 3)
    ]
    sft = tmp_path / "sft" / "sft_smollm2" / "seed0"
    _run(sft, [False] * n, before, str(real.SFT_CONFIG), [{"step": 1, "loss": 1.0}])
    report = json.loads((sft / "report.json").read_text())
    report |= {"rows": 100, "validation": {"why": "reached 0.5", "last": 0.52, "last_step": 50}}
    (sft / "report.json").write_text(json.dumps(report))
    for arm, (a, b) in {"grpo_real_default": (before, after), "grpo_real_random": (before, before)}.items():
        _run(tmp_path / "grpo" / arm / "seed0", a, b, f"recipes/configs/real_lab/{arm}.yaml", log)

    text = real.write_report(tmp_path, {"SFT": 10.0}).read_text()

    table = [line for line in text.splitlines() if line.startswith("| grpo_real") and "[" in line]  # with intervals
    rows = {line.split(" | ")[0].strip("| "): line for line in table}
    assert "+20.0 [" in rows["grpo_real_default"] and "0.250 [" in rows["grpo_real_default"]
    low, high = (float(x) for x in re.search(r"\+20\.0 \[([-+\d.]+), ([-+\d.]+)\]", rows["grpo_real_default"]).groups())
    assert 0 < low < 20 < high  # eight problems turned right, none wrong: the paired interval excludes 0
    assert "+0.0 [+0.0, +0.0]" in rows["grpo_real_random"]  # the same verdicts: no gain, no spread
    assert "stopped at step" in text and "reached 0.5" in text
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "python -m recipes.grpo --config recipes/configs/real_lab/grpo_real_default.yaml" in text
    assert "python -m recipes.sft --config recipes/configs/real_lab/sft_smollm2.yaml" in text


N_PROBLEMS = 40
SOLVED_10 = [i < 10 for i in range(N_PROBLEMS)]


@pytest.mark.parametrize(
    "default_after, random_after, answer",
    [
        ([i < 18 for i in range(N_PROBLEMS)], SOLVED_10, "Yes: +20.0 points"),  # +8 problems, control unmoved
        ([i < 18 for i in range(N_PROBLEMS)], [i < 2 for i in range(N_PROBLEMS)], "No verdict"),  # control -20
        ([i < 18 for i in range(N_PROBLEMS)], None, "Not shown: the random-reward control has not run"),
        ([i < 11 for i in range(N_PROBLEMS)], SOLVED_10, "Not shown: +2.5 points"),  # one problem: interval has 0
        ([i < 4 for i in range(N_PROBLEMS)], SOLVED_10, "No: -15.0 points"),
    ],
)
def test_report_leads_with_whether_rl_helped_against_its_controls(tmp_path, default_after, random_after, answer):
    log = [{"step": s, "reward": 0.1 * s} for s in (1, 2, 3, 4)]
    _run(
        tmp_path / "grpo" / "grpo_real_default" / "seed0",
        SOLVED_10,
        default_after,
        "recipes/configs/real_lab/grpo_real_default.yaml",
        log,
    )
    if random_after is not None:
        _run(
            tmp_path / "grpo" / "grpo_real_random" / "seed0",
            SOLVED_10,
            random_after,
            "recipes/configs/real_lab/grpo_real_random.yaml",
            log,
        )
    _run(
        tmp_path / "grpo" / "grpo_real_format_only" / "seed0",
        SOLVED_10,
        SOLVED_10,
        "recipes/configs/real_lab/grpo_real_format_only.yaml",
        log,
    )

    text = real.write_report(tmp_path, {}).read_text()

    lead = text.split("\n\n")[1]  # the paragraph under the title, before any table
    assert lead.startswith("**Did RL help?** " + answer), lead
    assert "format-only reward moved it +0.0 [+0.0, +0.0] points, its reward 0.100 → 0.400" in lead


def test_report_without_a_default_run_says_rl_is_not_measured(tmp_path):
    _run(
        tmp_path / "grpo" / "grpo_real_random" / "seed0",
        SOLVED_10,
        SOLVED_10,
        "recipes/configs/real_lab/grpo_real_random.yaml",
        [{"step": 1}],
    )
    assert "**Did RL help?** Not measured yet" in real.write_report(tmp_path, {}).read_text()


def test_the_lab_queues_every_grpo_run_at_once_so_both_cores_stay_busy(tmp_path, monkeypatch):
    """The default arm's seeds and the two controls go to one queue (a control beside seed 0), from the SFT model;
    two calls (one per arm) would leave a core idle while a lone run finished."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "lab"
    sft = out / "sft" / "sft_smollm2" / "seed0"

    def fake_sft(configs, seeds, folder, flags, **kw):
        run = Path(folder) / "sft_smollm2" / "seed0"
        _run(run, SOLVED_10, SOLVED_10, str(real.SFT_CONFIG), [{"step": 1, "loss": 1.0}])
        report = json.loads((run / "report.json").read_text()) | {"rows": 10}
        (run / "report.json").write_text(json.dumps(report))
        return [run]

    queued = []
    monkeypatch.setattr(real.matrix, "run_matrix", fake_sft)
    monkeypatch.setattr(real.matrix, "run_pairs", lambda pairs, folder, flags, **kw: queued.append((pairs, flags, kw)))

    real.main(["--model", str(model), "--out", str(out), "--seeds", "0,1,2"])
    real.main(["--model", str(model), "--out", str(tmp_path / "lab_default")])  # the default: seed 0 and 2 controls

    (pairs, flags, kw), (default_pairs, _, _) = queued  # one queue a lab
    names = [(Path(config).stem, seed) for config, seed in pairs]
    assert names == [
        ("grpo_real_default", 0),
        ("grpo_real_random", 0),
        ("grpo_real_format_only", 0),
        ("grpo_real_default", 1),
        ("grpo_real_default", 2),
    ]
    assert default_pairs == pairs[:3]
    assert kw["jobs"] == 2 and flags[flags.index("--model_name_or_path") + 1] == str(sft)
    assert len((out / "data" / "test.jsonl").read_text().splitlines()) == real.default_arm_config()["eval_limit"] == 500


def test_missing_model_is_one_clear_error_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        real.main(["--model", str(tmp_path / "nothing"), "--out", str(tmp_path / "lab")])
    assert err.value.code == 2
    assert "make real-model" in capsys.readouterr().err
    assert not (tmp_path / "lab").exists()  # no data written, no stage started


@pytest.mark.parametrize(
    "flags, message", [(["--seeds", "0,x"], "whole numbers"), (["--steps", "0"], "--steps must be >= 1")]
)
def test_bad_flags_are_one_clear_error_before_anything_runs(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as err:
        real.main([*flags, "--out", str(tmp_path / "lab")])
    assert err.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "lab").exists()


def test_report_only_without_runs_says_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="python -m cpu_lab.real"):
        real.main(["--report-only", "--out", str(tmp_path)])


@pytest.mark.slow
def test_real_lab_mechanics_on_smollm2(tmp_path):
    """Every stage on the real model for a step or two (the mechanics, not the gain): SFT through recipes.sft, five
    GRPO runs (LoRA) through recipes.grpo two at a time, each with its monitors, probes and before/after evals."""
    from recipes.real_model import require_real_model

    model = require_real_model()
    out = tmp_path / "real"
    cmd = [sys.executable, "-m", "cpu_lab.real", "--model", str(model), "--out", str(out)]
    cmd += ["--seeds", "0,1,2", "--steps", "1", "--sft-steps", "2", "--eval-limit", "4"]
    env = os.environ | {"OMP_NUM_THREADS": "2"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sft = json.loads((out / "sft" / "sft_smollm2" / "seed0" / "report.json").read_text())
    assert sft["steps"] == 2 and sft["before"]["n"] == 4 and sft["after"]["n"] == 4
    arms = {("grpo_real_default", s) for s in (0, 1, 2)} | {("grpo_real_random", 0), ("grpo_real_format_only", 0)}
    for arm, seed in arms:
        folder = out / "grpo" / arm / f"seed{seed}"
        settings = json.loads((folder / "matrix_run.json").read_text())
        assert str(out / "sft" / "sft_smollm2" / "seed0") in settings["extra_args"]  # GRPO starts from the SFT model
        rows = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
        assert any("monitor/correct_rate" in r and "monitor/degenerate_share" in r for r in rows)
        assert json.loads((folder / "probes.json").read_text())
        assert json.loads((folder / "report.json").read_text())["after"]["n"] == 4
        assert (folder / "adapter_config.json").exists()  # LoRA: the run saved an adapter, not a whole model
    text = (out / "report.md").read_text()
    assert all(f"| {arm} | {seed} |" in text for arm, seed in arms)
    assert (out / "curves.png").exists()


def test_summary_gives_first_and_last_quarter_of_the_monitors(tmp_path):
    folder = tmp_path / "run"
    log = [{"step": s, "reward": 0.0, "rewards/gsm8k_format_reward/mean": 0.01 * s} for s in range(1, 9)]
    log = [r | {"monitor/degenerate_all_wrong_share": 1.0 if r["step"] <= 4 else 0.5} for r in log]
    _run(folder, [False] * 4, [True, False, False, False], "recipes/configs/real_lab/grpo_gsm8k_smollm2.yaml", log)
    text = real.run_summary(folder)
    assert "| rewards/gsm8k_format_reward/mean | 0.015 | 0.075 |" in text  # steps 1-2 and 7-8 of 8
    assert "| monitor/degenerate_all_wrong_share | 1.000 | 0.500 |" in text
    assert "0.000 [" in text and "-> 0.250 [" in text
