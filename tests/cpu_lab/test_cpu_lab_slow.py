"""Opt-in regression runs of the CPU lab (`make test-slow`, or `pytest -m slow tests/cpu_lab/test_cpu_lab_slow.py`).

They train for real, for two seeds: each seed's warm start (cached under runs/lab/cache, so only the first run pays
for it; it stops on the validation split, never on the held-out set) and short GRPO runs of the lab configs through
the recipe, two at a time as in the demo. Per seed: the default rewards (under the curriculum, which must log its
difficulty every step) must gain, the random-reward control must not. Seed 0 also runs the format-only config for
the hack signature. docs/cpu_lab.md has their measured times and numbers.
"""

from pathlib import Path

import pytest

from cpu_lab.matrix import run_dir, run_matrix, summarize_run
from cpu_lab.warmstart import WarmStartSettings, prepare_lab, recipe_flags

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "recipes" / "configs" / "lab"
SEEDS = [0, 1]  # each its own warm start and GRPO sampling
STEPS = 120  # GRPO steps per run, as in `make demo`
# Margins, in accuracy fractions on the 200 held-out problems. One standard error of such an accuracy near 50% is
# 3.5 points; a before -> after difference of the same problems has about the same noise again (docs/cpu_lab.md).
# MIN_GAIN: two standard errors. At the demo's beta 0.3, five seeds (docs/cpu_lab.md, "Five seeds at beta 0.3")
# gained +9.5 to +17.5 with the default rewards; the arms without a correctness signal moved -6.5 to +2.5. The
# random control is checked one-sided here (it must not rise): by the lab's own two-sided ±3 rule it does not hold on
# every seed, which the docs and the demo's verdict say.
MIN_GAIN = 0.07  # the default rewards must add at least this
NOISE = 0.035  # the controls must not rise by more than one standard error

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=SEEDS, ids=lambda seed: f"seed{seed}")
def runs(request, tmp_path_factory):
    """One seed's runs, all from that seed's warm start, two at once (two processes, cpu_count // 2 threads each)."""
    seed = request.param
    lab = tmp_path_factory.mktemp(f"lab{seed}")
    paths = prepare_lab(WarmStartSettings(seed=seed), ROOT / "runs" / "lab" / "cache", lab)
    extra = [
        *recipe_flags(paths),
        "--max_steps",
        str(STEPS),
    ]
    out = tmp_path_factory.mktemp(f"runs{seed}")
    names = ["grpo_lab_default", "grpo_lab_random"] + (["grpo_lab_format_only"] if seed == SEEDS[0] else [])
    configs = [CONFIGS / f"{name}.yaml" for name in names]
    run_matrix([str(c) for c in configs], [seed], out, extra, jobs=2)
    return {c.stem: summarize_run(run_dir(out, c, seed)) for c in configs} | {"_out": out}  # _out: the logs' root


def test_default_rewards_improve_heldout_accuracy(runs):
    run = runs["grpo_lab_default"]
    before, after = run.accuracy_before, run.accuracy_after
    assert after - before >= MIN_GAIN, (
        f"seed {run.seed}: held-out accuracy {before:.3f} -> {after:.3f}, expected at least +{MIN_GAIN}"
    )


def test_random_reward_does_not_improve_heldout_accuracy(runs):
    # the control: the same steps with a reward that carries no signal must not gain, or the default's gain is not
    # the signal's
    run = runs["grpo_lab_random"]
    before, after = run.accuracy_before, run.accuracy_after
    assert after <= before + NOISE, f"seed {run.seed}: random reward took accuracy {before:.3f} -> {after:.3f}"


def test_hackable_reward_raises_reward_not_accuracy(runs):
    if "grpo_lab_format_only" not in runs:
        pytest.skip(f"the format-only run is checked on seed {SEEDS[0]} only (time)")
    run = runs["grpo_lab_format_only"]
    assert run.reward_end > run.reward_start, f"format reward {run.reward_start:.3f} -> {run.reward_end:.3f}"
    assert run.accuracy_after <= run.accuracy_before + NOISE, (
        f"accuracy rose {run.accuracy_before:.3f} -> {run.accuracy_after:.3f} under a format-only reward"
    )


def test_default_run_logs_its_curriculum_every_step(runs):
    # the default config trains under cpu_lab.curriculum: every training step's log line carries the difficulty it
    # drew at and the pass rate that moves it, beside the monitors' measured degenerate share
    from cpu_lab.curriculum import LADDER
    from cpu_lab.matrix import read_log

    run = runs["grpo_lab_default"]
    folder = run_dir(runs["_out"], CONFIGS / "grpo_lab_default.yaml", run.seed)
    steps = [r for r in read_log(folder / "log.jsonl") if "loss" in r]
    assert len(steps) == STEPS
    for r in steps:
        assert 0 <= r["curriculum/difficulty"] <= len(LADDER) - 1 and 0 <= r["curriculum/pass_rate"] <= 1
        assert 0 <= r["monitor/degenerate_share"] <= 1 and 0 <= r["curriculum/degenerate_predicted_share"] <= 1
