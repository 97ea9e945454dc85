"""Opt-in regression runs of the CPU lab (`make test-slow`, or `pytest -m slow tests/test_lab_slow.py`).

They train for real: the warm start (cached under runs/lab/cache, so only the first run pays for it) and short GRPO
runs of the lab configs through the recipe, with a fixed seed. docs/lab.md has their measured times.
"""

from pathlib import Path

import pytest

from lab.matrix import run_dir, run_matrix, summarize_run
from lab.warmstart import WarmStartSettings, prepare_lab

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "configs" / "lab"
SEED = 0
STEPS = 120  # GRPO steps per run, as in `make demo`
MIN_GAIN = 0.12  # held-out accuracy (fraction) the default rewards must add; measured +0.19 at 120 steps, seed 0
NOISE = 0.035  # one standard error of a 200-problem accuracy near 50%

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both runs at once, as the demo runs them (two processes, cpu_count // 2 threads each)."""
    paths = prepare_lab(WarmStartSettings(seed=SEED), ROOT / "runs" / "lab" / "cache", tmp_path_factory.mktemp("lab"))
    extra = ["--model_name_or_path", str(paths["model"]), "--data", str(paths["train"]),
             "--eval_data", str(paths["heldout"]), "--max_steps", str(STEPS)]  # fmt: skip
    out = tmp_path_factory.mktemp("runs")
    configs = [CONFIGS / "grpo_lab_default.yaml", CONFIGS / "grpo_lab_format_only.yaml"]
    run_matrix([str(c) for c in configs], [SEED], out, extra, jobs=2)
    return {c.stem: summarize_run(run_dir(out, c, SEED)) for c in configs}


def test_default_rewards_improve_heldout_accuracy(runs):
    run = runs["grpo_lab_default"]
    before, after = run.accuracy_before, run.accuracy_after
    assert after - before >= MIN_GAIN, f"held-out accuracy {before:.3f} -> {after:.3f}, expected +{MIN_GAIN}"


def test_hackable_reward_raises_reward_not_accuracy(runs):
    run = runs["grpo_lab_format_only"]
    assert run.reward_end > run.reward_start, f"format reward {run.reward_start:.3f} -> {run.reward_end:.3f}"
    assert run.accuracy_after <= run.accuracy_before + NOISE, (
        f"accuracy rose {run.accuracy_before:.3f} -> {run.accuracy_after:.3f} under a format-only reward"
    )
