"""The over-optimisation experiment (reward_model_lab/: overoptimisation.py, kl.py, report.py) end to end at a tiny
size: a random ~100k-parameter model, reference pairs, 2 GRPO steps per arm (mechanics, not learning). The real run,
on the lab warm start, is in the slow tier.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/reward_model_lab/test_reward_model_lab.py -q
    # the slow tier: 39 min on the shared 2-core box at load 12-16 (docs/reward_model.md)
    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/reward_model_lab/test_reward_model_lab.py -q -m slow
"""

import json
import math

import pytest

from cpu_lab.problems import heldout_problems, train_problems
from eval.jsonl import read_jsonl, write_jsonl
from reward_model_lab.overoptimisation import Settings, arms, main, run
from reward_model_lab.report import mean_curve


def test_tiny_experiment_writes_curves_plots_and_report(tiny_model_dir, tmp_path):
    train = write_jsonl(train_problems(16, seed=0), tmp_path / "data" / "train.jsonl")
    heldout = write_jsonl(heldout_problems(n=8), tmp_path / "data" / "heldout.jsonl")
    settings = Settings(
        seeds=[0],
        betas=[0.0, 0.2],
        steps=2,
        eval_every=1,
        eval_n=4,  # 3 evaluations per run: steps 0, 1, 2
        pairs="reference",
        pair_problems=16,
        rm_flags=["--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8"],
        grpo_flags=["--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "8"],
        jobs=2,  # the default: each arm its own process through the labs' runner (cpu_lab.runner.run_at_once)
        probe_n=2,  # probes of 2 problems: the padded ones are long
        policy=str(tiny_model_dir),
        train_data=str(train),
        heldout_data=str(heldout),
    )
    report = run(settings, tmp_path / "out")
    out = tmp_path / "out"
    assert json.loads((out / "rm" / "report.json").read_text())["first_loss_ok"] is True
    for arm, beta in arms(settings):
        for seed in settings.seeds:
            rows = read_jsonl(out / arm / f"seed{seed}" / "curve.jsonl")
            assert [r["step"] for r in rows] == [0, 1, 2]
            assert abs(rows[0]["rm/kl"]) < 1e-4  # step 0: the policy IS the reference
            assert all(math.isclose(r["rm/sqrt_kl"], math.sqrt(max(r["rm/kl"], 0))) for r in rows)
            log = read_jsonl(out / arm / f"seed{seed}" / "log.jsonl")
            at = {r["step"]: r for r in log if "loss" in r}
            for row in rows[1:]:  # the curve reaches the trainer's log (W&B) and is the recipe's held-out accuracy
                assert at[row["step"]]["leash/proxy_reward"] == pytest.approx(row["rm/proxy_reward"])
                assert at[row["step"]]["eval/accuracy"] == row["rm/true_accuracy"]
            if arm != "checker":
                assert any("rewards/reward_model_reward/mean" in r for r in log)  # trained against the RM
                assert log[0]["rewards/gsm8k_correctness_reward/mean"] is not None  # the checker, watched at 0
            assert ("kl" in log[0]) == (beta > 0)  # TRL computes its KL term only when beta > 0
            # the recipe's monitors and probes ran: the gap the report draws is in the log
            assert all(math.isfinite(r["monitor/reward_correctness_gap"]) for r in log if "loss" in r)
            assert (out / arm / f"seed{seed}" / "probes.json").exists() and "probe/violations" in log[0]
            # run as `python -m recipes.grpo` by the runner: its output in run.log, what the run was in run.json
            assert "recipes.grpo: " in (out / arm / f"seed{seed}" / "run.log").read_text()
            run_record = json.loads((out / arm / f"seed{seed}" / "run.json").read_text())
            assert (run_record["arm"], run_record["beta"], run_record["seed"]) == (arm, beta, seed)
    text = report.read_text()
    assert (out / "overoptimisation.png").stat().st_size > 0 and "| rm_beta0.2 |" in text and "| checker |" in text
    assert "Probes that break their rule" in text
    assert "Finished runs per arm: rm_beta0 1, rm_beta0.2 1, checker 1" in text
    gap_rows = [line for line in text.splitlines() if line.startswith("| rm_beta0 |")]
    assert len(gap_rows) == 3 and gap_rows[-1].startswith("| rm_beta0 | - | ")  # the gap table: none at step 0
    (out / "checker" / "seed0" / "curve.jsonl").write_text("")  # a run still in progress: left out of the report
    rewritten = main(["--report-only", "--out", str(out)]).read_text()
    assert "| checker |" not in rewritten and "| rm_beta0.2 |" in rewritten and "--report-only" in rewritten


def test_mean_curve_averages_seeds_step_by_step():
    runs = [[{"a": 1.0}, {"a": 3.0}], [{"a": 3.0}, {"a": 5.0}, {"a": 9.0}]]
    assert mean_curve(runs, "a") == [2.0, 4.0]  # up to the shorter run


def test_leash_measurement_leaves_the_trainers_random_stream_alone(tiny_model_dir):
    # sample_with_kl runs inside training (every eval_every steps): it must seed a fork, not torch's global stream
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reward_model_lab.kl import sample_with_kl

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = [[{"role": "user", "content": "1 + 2?"}]]
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    first = sample_with_kl(model, model, tokenizer, prompts, max_new_tokens=4, seed=3)
    assert torch.equal(torch.rand(3), expected)
    assert sample_with_kl(model, model, tokenizer, prompts, max_new_tokens=4, seed=3) == first  # still seeded


@pytest.mark.slow
def test_overoptimisation_on_the_lab_warm_start(tmp_path):
    """The real experiment at its default length (60 steps), one seed, two arms: against the reward model with beta 0
    the proxy rises; a large beta holds the policy closer to the warm start."""
    main(["--seeds", "0", "--betas", "0", "0.2", "--no-checker-control", "--out", str(tmp_path)])
    curves = {arm: read_jsonl(tmp_path / arm / "seed0" / "curve.jsonl") for arm in ("rm_beta0", "rm_beta0.2")}
    assert [row["step"] for row in curves["rm_beta0"]] == list(range(0, 61, 10))  # the default length and cadence
    assert curves["rm_beta0"][-1]["rm/proxy_reward"] > curves["rm_beta0"][0]["rm/proxy_reward"]
    assert curves["rm_beta0.2"][-1]["rm/kl"] < curves["rm_beta0"][-1]["rm/kl"]
