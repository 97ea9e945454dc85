"""Opt-in regression runs of the CPU lab (`make test-slow`, or `pytest -m slow tests/test_lab_slow.py`).

They train for real: the warm start (cached under runs/lab/cache, so only the first run pays for it) and short GRPO
runs of the lab configs through the recipe, with a fixed seed. docs/lab.md has their measured times.
"""

from pathlib import Path

import pytest

from lab.matrix import run_one, summarize_run
from lab.warmstart import WarmStartSettings, prepare_lab

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "configs" / "lab"
SEED = 0
STEPS = 150  # GRPO steps per run; the short demo's 40 gave only +5.5 points (docs/lab.md)
MIN_GAIN = 0.08  # held-out accuracy (fraction) the default rewards must add; measured +0.135 at 150 steps, seed 0
NOISE = 0.035  # one standard error of a 200-problem accuracy near 50%

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    paths = prepare_lab(WarmStartSettings(seed=SEED), ROOT / "runs" / "lab" / "cache", tmp_path_factory.mktemp("lab"))
    extra = ["--model_name_or_path", str(paths["model"]), "--data", str(paths["train"]),
             "--eval_data", str(paths["heldout"]), "--max_steps", str(STEPS)]  # fmt: skip
    return extra, tmp_path_factory.mktemp("runs")


def test_default_rewards_improve_heldout_accuracy(lab):
    extra, runs = lab
    folder = runs / "grpo_lab_default" / f"seed{SEED}"
    report = run_one(CONFIGS / "grpo_lab_default.yaml", SEED, folder, extra)
    before, after = report["before"]["accuracy"], report["after"]["accuracy"]
    assert after - before >= MIN_GAIN, f"held-out accuracy {before:.3f} -> {after:.3f}, expected +{MIN_GAIN}"


def test_hackable_reward_raises_reward_not_accuracy(lab):
    extra, runs = lab
    folder = runs / "grpo_lab_format_only" / f"seed{SEED}"
    run_one(CONFIGS / "grpo_lab_format_only.yaml", SEED, folder, extra)
    run = summarize_run(folder)
    assert run.reward_end > run.reward_start, f"format reward {run.reward_start:.3f} -> {run.reward_end:.3f}"
    assert run.accuracy_after <= run.accuracy_before + NOISE, (
        f"accuracy rose {run.accuracy_before:.3f} -> {run.accuracy_after:.3f} under a format-only reward"
    )
