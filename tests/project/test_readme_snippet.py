"""The README's Python snippet (leash's rewards and monitors in a plain TRL ``GRPOTrainer`` script) runs as written.

The snippet is the README's one ``python`` block. It runs here for one GRPO step on the tiny local model
(tests/conftest.py), with three things swapped for this machine and nothing else changed: the hub model id for the tiny
model's folder, ``load_rows`` for the shipped GSM8K training subset (tests/data, no download), and ``GRPOConfig`` for
one that adds a test's size (one step, short completions, CPU, float32, no W&B) to the snippet's own arguments. The
untrained model answers nothing right, so every group is all-wrong and no parameter moves: what is checked is what the
snippet shows, that the rewards, the monitors and the probes are wired into TRL's trainer and its log.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/project/test_readme_snippet.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HUB_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def readme_snippet() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert len(blocks) == 1, f"README.md should hold one python block (the TRL snippet), not {len(blocks)}"
    return blocks[0]


def test_the_snippet_is_short_and_uses_the_public_names():
    code = readme_snippet()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 16, f"the snippet has {len(lines)} lines: a user should read it at a glance"
    assert max(len(line) for line in code.splitlines()) <= 120
    for name in ("GRPOTrainer", "get_reward", "RewardMonitor", "MonitorCallback", "trainer.train()", HUB_MODEL):
        assert name in code, name


def test_the_snippet_trains_one_step_with_the_rewards_and_monitors(tiny_model_dir, data_dir, tmp_path, monkeypatch):
    import trl

    from eval import tasks

    real_config, real_load_rows = trl.GRPOConfig, tasks.load_rows

    def small_config(**kwargs):
        test_size = {
            "output_dir": str(tmp_path / "run"),
            "max_steps": 1,
            "max_completion_length": 16,  # the tiny model says nothing worth more
            "use_cpu": True,
            "bf16": False,  # float32: bf16 is emulated, slowly, on a CPU without bf16 units
            "report_to": "none",
            "logging_steps": 1,
            "save_strategy": "no",
        }
        return real_config(**{**kwargs, **test_size})

    def shipped_rows(task, data=None, **kwargs):
        return real_load_rows(task, str(data_dir / "gsm8k" / "train.jsonl")).select(range(16))

    monkeypatch.setattr(trl, "GRPOConfig", small_config)
    monkeypatch.setattr(tasks, "load_rows", shipped_rows)
    code = readme_snippet()
    namespace: dict = {}
    exec(compile(code.replace(HUB_MODEL, str(tiny_model_dir)), str(README), "exec"), namespace)

    trainer = namespace["trainer"]
    assert trainer.state.global_step == 1
    (logged,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    # the rewards kept their names under the monitor, so TRL's keys are the rewards' own
    assert {"rewards/gsm8k_correctness_reward/mean", "rewards/gsm8k_format_reward/mean"} <= logged.keys()
    # the monitors read every completion of the batch: the untrained model's groups are all wrong
    assert logged["monitor/degenerate_all_wrong_share"] == 1.0
    assert logged["monitor/correct_rate"] == 0.0
    assert "monitor/reward_correctness_gap" in logged
    # the probes were scored under the snippet's rewards before the first step, and reached the log
    assert logged["probe/genuine_correct"] == pytest.approx(1.1)  # a correct answer, formatted: 1.0 + 0.1
    assert logged["probe/violations"] == 0
    probes = json.loads((tmp_path / "run" / "probes.json").read_text())
    assert probes["bare_wrong"]["score"] == pytest.approx(0.1)  # "#### 19" with no work: the format bonus only
