"""The laptop film's command (judge_lab/film.py) end to end on the tiny model as policy AND judge, two runs briefly.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/judge_lab/test_judge_lab_film.py``. The tiny model's
answers and its judging are noise; this checks the wiring: the lab's question and instruction reach the policy, the
judge is read in log-probability mode, the verdict is the lab's ``####`` checker, and the report, noise probe and
film.md are written.
"""

from __future__ import annotations

import json

import pytest

from eval.jsonl import read_jsonl, write_jsonl
from judge_lab import film as judge_film

HELDOUT = [
    {
        "question": "Tom has 30 apples. Tom buys 12 more apples. How many apples does Tom have now?",
        "answer": "30 + 12 = 42\n#### 42",
        "final": "42",
    },
]


@pytest.mark.integration
def test_film_runs_two_settings_and_writes_its_report(tiny_model_dir, tmp_path, capsys):
    heldout = tmp_path / "heldout.jsonl"
    write_jsonl(HELDOUT, heldout)
    out = tmp_path / "film"
    judge_film.main(
        [
            "--policy",
            str(tiny_model_dir),
            "--judge",
            str(tiny_model_dir),
            "--heldout",
            str(heldout),
            "--steps",
            "2",
            "--only",
            "judge_grpo_b0",
            "checker_dr_grpo_b0.04",
            "--min_score_mass",
            "0",
            "--noise_n",
            "1",
            "--out",
            str(out),
        ]
    )
    film = (out / "film.md").read_text()
    assert "| judge_grpo_b0 |" in film and "| checker_dr_grpo_b0.04 |" in film and "Gold 42" in film
    # every run is the GRPO recipe with its monitors: the gap column comes from each run's log.jsonl, the probes too
    judge_log = [r for r in read_jsonl(out / "judge_grpo_b0" / "log.jsonl") if "loss" in r]
    gaps = [r["monitor/reward_correctness_gap"] for r in judge_log]
    row = next(line for line in film.splitlines() if line.startswith("| judge_grpo_b0 |"))
    assert f"| {gaps[0]:.3f} -> {gaps[-1]:.3f} |" in row and " of 27 |" in row
    assert (out / "judge_grpo_b0" / "probes.json").exists() and "probe/violations" in judge_log[0]
    judge_steps = read_jsonl(out / "judge_grpo_b0" / "steps.jsonl")
    answers = [a for s in judge_steps if not s.get("after_training") for a in s["answers"]]
    assert len(answers) == 16 and all(a["reward"] is not None for a in answers)  # log-probability mode: all scored
    assert [a["reward"] for a in answers] == pytest.approx([a["judge_score"] / 10 for a in answers])
    config = json.loads((out / "checker_dr_grpo_b0.04" / "resolved_config.json").read_text())
    flat = json.dumps(config)
    assert "gsm8k_correctness" in flat and "End with #### and the number." in flat and '"dr_grpo"' in flat
    noise = json.loads((out / "noise" / "judge_noise.json").read_text())
    assert noise["answer"] == "#### 30" and noise["score_probs"] is not None  # the echo of the question's number
    assert (out / "report" / "lab_report.md").exists()


def test_film_refuses_a_missing_policy_before_loading(tmp_path, capsys):
    with pytest.raises(SystemExit):
        judge_film.main(["--policy", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    assert "python -m cpu_lab.warmstart" in capsys.readouterr().err
