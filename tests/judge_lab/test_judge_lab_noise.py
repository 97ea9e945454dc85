"""The judge-noise probe against the local chat-completions server of tests/judge_server.py.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/judge_lab/test_judge_lab_noise.py``.
"""

from __future__ import annotations

import json

import pytest

from eval.jsonl import write_jsonl
from judge_lab import noise as judge_noise
from tests.judge_server import FakeJudgeServer


def probe(server, tmp_path, answers: list[str], *flags: str) -> dict:
    """``judge_lab.noise`` against ``server``, with ``answers`` scored twice; its files in ``tmp_path/noise``."""
    answers_file = write_jsonl([{"answer": a} for a in answers], tmp_path / "answers.jsonl")
    common = ["--judge_base_url", server.base_url, "--judge_model", "fake", "--answers_file", str(answers_file)]
    return judge_noise.main([*common, *flags, "--out", str(tmp_path / "noise")])


def test_noise_probe_reports_distribution_and_changes(tmp_path, capsys):
    out = tmp_path / "noise"
    with FakeJudgeServer() as server:
        result = probe(server, tmp_path, ["NOISY", "SCORE 7", "GARBAGE"], "--answer", "NOISY", "--n", "9")
    # the server answers NOISY with 2, 8, 9 in turn: nine requests give three of each
    assert result["repeat"]["distribution"] == {"2": 3, "8": 3, "9": 3}
    assert result["repeat"]["n_unscored"] == 0 and result["repeat"]["mean"] == 6.333
    # scored twice: NOISY changes (its 10th and 11th requests: 2 then 8), SCORE 7 does not, GARBAGE is never scored
    rows = {row["answer"]: (row["first"], row["second"]) for row in result["twice_scores"]}
    assert rows == {"NOISY": (2.0, 8.0), "SCORE 7": (7.0, 7.0), "GARBAGE": (None, None)}
    assert result["twice"] == {"n_answers": 3, "n_changed": 1, "n_unscored_pairs": 1, "mean_abs_change": 3.0}
    assert json.loads((out / "judge_noise.json").read_text())["twice"]["n_changed"] == 1
    assert "1 of 3 changed score" in (out / "judge_noise.md").read_text()
    assert "1 changed" in capsys.readouterr().out


def test_noise_probe_in_logprob_mode(tmp_path):
    with FakeJudgeServer() as server:
        flags = ["--judge_mode", "logprob", "--answer", "LP 8=0.6,9=0.4", "--n", "3"]
        result = probe(server, tmp_path, ["LP 7=1.0", "LP The=0.9,2=0.1"], *flags)
        assert all(r["logprobs"] is True for r in server.requests)  # every request asked for log-probabilities
    # the expected score 0.6 x 8 + 0.4 x 9, three times; its distribution over 0-10 is reported
    assert result["repeat"]["distribution"] == {"8.4": 3}
    assert result["score_probs"] == [0.0] * 8 + [0.6, 0.4, 0.0]
    # 0.1 of the mass on a score is under the 0.5 default: no score either time
    rows = {row["answer"]: (row["first"], row["second"]) for row in result["twice_scores"]}
    assert rows == {"LP 7=1.0": (7.0, 7.0), "LP The=0.9,2=0.1": (None, None)}
    assert result["judge_stats"]["low_mass"] == 2
    assert "Score-token probabilities (mass 1.000)" in (tmp_path / "noise" / "judge_noise.md").read_text()


def test_noise_probe_rejects_a_bad_judge_mode_before_loading(tmp_path, capsys):
    with pytest.raises(SystemExit):
        judge_noise.main(
            [
                "--judge_backend",
                "hf",
                "--judge_model",
                "/nonexistent",
                "--judge_mode",
                "logprob",
                "--judge_min_score_mass",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
    assert "min_score_mass must be in [0, 1]" in capsys.readouterr().err
