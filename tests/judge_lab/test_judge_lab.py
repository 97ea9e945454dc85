"""The judge lab end to end on the tiny model: its real tiny config through the GRPO recipe (``python -m
recipes.grpo``), a few steps, per-step logs, the tracker, the monitors and the probes.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/judge_lab/test_judge_lab.py``. The judge is the local HTTP
server of tests/judge_server.py (its scores vary with the answer's length, so advantages are not all zero and the policy
moves), called with a sentinel key that must not appear in any file the run writes.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from eval.jsonl import read_jsonl
from recipes import grpo, grpo_setup
from tests.helpers import parse_recipe_config
from tests.judge_server import KEY_ENV, SENTINEL_KEY, FakeJudgeServer

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "recipes" / "configs" / "judge_lab"
TINY_JUDGE = CONFIGS / "tiny" / "judge_lab_tiny_judge_b0.04.yaml"
TINY_CHECKER = CONFIGS / "tiny" / "judge_lab_tiny_checker_b0.04.yaml"
BUILDS = ("--build_tiny_model", "true")  # a tiny model at a missing --model_name_or_path, were the checks to pass


@pytest.mark.integration
def test_judge_lab_on_tiny_model_logs_answers_tracker_and_never_the_key(tiny_model_dir, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(KEY_ENV, SENTINEL_KEY)
    monkeypatch.setenv("WANDB_MODE", "offline")  # W&B writes its run files locally: grepped below with the rest
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "run"))
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    logging.getLogger().addHandler(handler)
    out = tmp_path / "run"
    try:
        with FakeJudgeServer() as server:
            grpo.main(
                *parse_recipe_config(
                    grpo,
                    TINY_JUDGE,
                    *("--output_dir", str(out), "--model_name_or_path", str(tiny_model_dir)),
                    *("--judge_backend", "openai", "--judge_base_url", server.base_url, "--judge_model", "fake"),
                    *("--judge_api_key_env", KEY_ENV, "--judge_timeout_s", "5", "--report_to", "wandb"),
                )
            )
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert set(server.auth_headers) == {f"Bearer {SENTINEL_KEY}"}  # the key was used ...
    written = [p for p in out.rglob("*") if p.is_file()] + [log_file]
    assert any(p.suffix == ".wandb" for p in written)  # the offline W&B run (config, metrics, tables) is among them
    for path in written:  # ... and is in no file the run wrote, nor in what it printed
        assert SENTINEL_KEY.encode() not in path.read_bytes(), path
    printed = capfd.readouterr()
    assert SENTINEL_KEY not in printed.out + printed.err

    steps = [r for r in read_jsonl(out / "steps.jsonl") if not r.get("after_training")]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for record in steps:
        assert record["n_answers"] == 8 and len(record["answers"]) == 8
        answers = record["answers"]
        rewards = [a["reward"] for a in answers]
        assert all(r is not None for r in rewards) and record["n_judge_unscored"] == 0
        assert rewards == pytest.approx([a["judge_score"] / 10 for a in answers])  # reward = judge score / 10
        assert record["group_mean"][0] == pytest.approx(sum(rewards) / 8)
        std = record["group_std"][0]
        for a in answers:  # TRL's own advantages: (reward - group mean) / (group std + 1e-4)
            assert a["advantage"] == pytest.approx((a["reward"] - record["group_mean"][0]) / (std + 1e-4), abs=1e-4)
            assert 1 <= a["n_tokens"] <= 16 and a["correct"] is False
        assert record["n_correct"] == 0
        for tracked in record["tracked"].values():
            assert math.isfinite(tracked["logp_policy"]) and math.isfinite(tracked["logp_ref"])
            assert tracked["logp_policy"] < 0 and tracked["n_tokens"] > 0

    # beta > 0: at the first step the policy is the reference, so the KL on the tracked answers is exactly 0 ...
    first, later = steps[0]["tracked"], steps[-1]["tracked"]
    for name in ("short_wrong", "worked_correct"):
        assert first[name]["kl"] == 0.0 and first[name]["logp_policy"] == first[name]["logp_ref"]
        # ... and once the policy has moved, it is not (the judge's varied scores gave non-zero advantages)
        assert later[name]["kl"] > 0.0 and later[name]["logp_policy"] != later[name]["logp_ref"]
        assert later[name]["logp_ref"] == first[name]["logp_ref"]  # the reference is frozen
    trl_log = [r for r in read_jsonl(out / "log.jsonl") if "reward" in r]
    assert trl_log[0]["kl"] == 0.0  # TRL's own KL agrees at step 1
    assert trl_log[0]["tracked/short_wrong/kl"] == 0.0
    # the recipe's hack signals beside the judge score: the gap is the judge reward minus the checker's verdict (the
    # checker is watched at weight 0: never right here, so the gap is the whole judge reward), and the probes
    for line, record in zip(trl_log, steps, strict=True):
        assert line["monitor/correct_rate"] == record["n_correct"] / 8 == 0.0
        assert line["monitor/reward_correctness_gap"] == pytest.approx(record["mean_reward"], rel=1e-5)
        assert line["rewards/answer_line_correctness_reward/mean"] == 0.0  # computed and logged, not trained on
        assert line["reward"] == pytest.approx(line["rewards/llm_judge_reward/mean"], rel=1e-5)
    assert trl_log[0]["probe/violations"] >= 0 and math.isfinite(trl_log[0]["probe/genuine_correct"])
    probes = json.loads((out / "probes.json").read_text())
    assert probes["genuine_correct"]["score"] == pytest.approx(trl_log[0]["probe/genuine_correct"])
    report = json.loads((out / "report.json").read_text())
    assert report["reward_stats"]["llm_judge_reward"]["requests"] > 0  # the judge's counts, in the run's report
    final = read_jsonl(out / "steps.jsonl")[-1]
    assert final["after_training"] and math.isfinite(final["tracked"]["short_wrong"]["logp_policy"])

    # the report command draws the run: a PNG and a markdown table with one row per step
    from judge_lab import report as lab_report

    lab_report.main([str(out), "--out", str(tmp_path / "report")])
    assert (tmp_path / "report" / "lab_report.png").read_bytes()[:4] == b"\x89PNG"
    table = (tmp_path / "report" / "lab_report.md").read_text()
    judge_means = [f"{r['mean_judge_score']:.3g}" for r in steps]
    assert all(f"| {r['step']} | " in table for r in steps) and all(m in table for m in judge_means)
    gaps = [f"{r['monitor/reward_correctness_gap']:.3g}" for r in trl_log]
    assert all(f"| 0/8 | {g} |" in table for g in gaps)  # the gap column, drawn from the monitors' log


def run_two_steps(config, model_dir, tmp_path, *flags) -> tuple:
    """Two steps of a lab config on the tiny model in ``tmp_path/run``: the folder and its step records."""
    out = tmp_path / "run"
    run = ("--output_dir", str(out), "--model_name_or_path", str(model_dir), "--max_steps", "2")
    grpo.main(*parse_recipe_config(grpo, config, *run, *flags))
    steps = [r for r in read_jsonl(out / "steps.jsonl") if not r.get("after_training")]
    assert len(steps) == 2
    return out, steps


@pytest.mark.integration
def test_judge_lab_with_a_local_logprob_judge(tiny_model_dir, tmp_path):
    # the tiny model as a log-probability judge: every answer gets a score (no reply to parse), reward = score / 10
    judge = ("--judge_model", str(tiny_model_dir), "--judge_mode", "logprob", "--judge_min_score_mass", "0")
    out, steps = run_two_steps(TINY_JUDGE, tiny_model_dir, tmp_path, *judge)
    for record in steps:
        answers = record["answers"]
        assert record["n_judge_unscored"] == 0
        assert [a["reward"] for a in answers] == pytest.approx([a["judge_score"] / 10 for a in answers])
        assert all(0.0 <= a["judge_score"] <= 10.0 for a in answers)
        assert len({a["judge_score"] for a in answers}) > 1  # expected scores differ by answer: not a constant
    trl_log = [r for r in read_jsonl(out / "log.jsonl") if "reward" in r]
    assert trl_log[0]["judge/low_mass_frac"] == 0.0 and 0.0 < trl_log[0]["judge/score_mass_mean"] < 1.0


def test_the_monitors_verdict_is_the_watched_checker():
    # the judge config lists the strict checker at weight 0: the monitor's `correct` column (the step log's verdict)
    # is that checker's, and TRL gets no checker score where the judge could not score (the answer stays unscorable)
    from tests.recipes.test_monitors import call_batch

    args, training_args, _ = parse_recipe_config(
        grpo, TINY_JUDGE, "--num_generations", "4", "--per_device_train_batch_size", "4"
    )
    judge_scores = iter([[None, 0.6, 0.2, 0.9]])

    def judge(completions, **kwargs):
        return next(judge_scores)

    checker = grpo_setup.build_rewards(["answer_line_correctness"], args)[0]
    monitor = grpo_setup.reward_monitor(args.reward_funcs, [judge, checker], training_args, "gsm8k")
    assert (monitor.correctness_index, monitor.watched) == (1, [1])
    texts = ["24 - 7 = 17\nAnswer: 17", "Answer: 3.", "Answer: 17", "#### 17"]
    returned, logged, extra = call_batch(monitor, texts, ["17"] * 4, ["p"] * 4, [[1]] * 4)
    assert returned == [[None, 0.6, 0.2, 0.9], [None, 0.0, 1.0, 0.0]]  # what TRL gets from each function
    assert extra["correct"] == [True, False, True, False]  # the checker's verdict ("#### 17" is no Answer line)
    assert logged["monitor/unscorable_rate"] == 0.25
    assert logged["monitor/reward_correctness_gap"] == pytest.approx(((0.6 - 0) + (0.2 - 1) + (0.9 - 0)) / 3)


@pytest.mark.integration
def test_checker_lab_without_reference_model(tiny_model_dir, tmp_path):
    # beta 0: no reference model; the tracker's reference is the policy as training began
    out, steps = run_two_steps(TINY_CHECKER, tiny_model_dir, tmp_path, "--beta", "0")
    for record in steps:
        assert all(a["reward"] == 0.0 and a["correct"] is False for a in record["answers"])  # never right
        assert record["group_std"] == [0.0] and all(a["advantage"] == 0.0 for a in record["answers"])
        for tracked in record["tracked"].values():
            assert math.isfinite(tracked["logp_policy"]) and tracked["kl"] == 0.0  # zero advantage: no update


@pytest.mark.integration
def test_a_run_started_again_resumes_from_its_last_checkpoint(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    flags = ("--output_dir", str(out), "--model_name_or_path", str(tiny_model_dir))
    every_step = ("--save_strategy", "steps", "--save_steps", "1")  # a checkpoint after each step
    grpo.main(*parse_recipe_config(grpo, TINY_CHECKER, *flags, "--max_steps", "2", *every_step))
    assert (out / "checkpoint-2").is_dir()
    grpo.main(*parse_recipe_config(grpo, TINY_CHECKER, *flags, "--max_steps", "3"))
    assert f"resuming from {out / 'checkpoint-2'}" in capsys.readouterr().out
    # step 3 only, appended to both logs of the first run (each run ends with its after-training measurement)
    assert [r["step"] for r in read_jsonl(out / "steps.jsonl") if not r.get("after_training")] == [1, 2, 3]
    assert [r["step"] for r in read_jsonl(out / "log.jsonl") if "reward" in r] == [1, 2, 3]


JUDGED = ["--reward_funcs", "llm_judge", "answer_line_correctness", "--reward_weights", "1", "0"]
JUDGED += ["--reward_check", "warn"]  # the judge configs' reward set
BAD_OVERRIDES = [
    # (command-line overrides, message fragment)
    (["--reward_funcs", "math_correctness"], "is for math answers"),  # the other answer style
    (["--reward_funcs", "answer_line_correctness", "llm_judge", "--reward_weights", "0", "1"], "list the weight-0"),
    (["--tracked_names", "a", "b", "c"], "parallel"),  # three names, two texts
    (["--num_iterations", "2"], "one update per group"),  # several updates per group
    (["--per_device_train_batch_size", "16"], "one prompt"),  # two prompts per step (the step log's check)
    (["--logging_steps", "2"], "logging_steps: 1"),  # the step log writes one line per step
    (["--gold_answer", ""], "gold_answer is not"),  # the one question without its answer
    ([*JUDGED, "--judge_model", ""], "needs judge_model"),  # no judge
    ([*JUDGED, "--judge_model", "m", "--judge_api_key_env", "LEASH_UNSET_VAR_X"], "not set"),
    ([*JUDGED, "--judge_model", "m", "--judge_backend", "openai"], "needs a base_url"),  # no URL
    ([*JUDGED, "--judge_model", "m", "--judge_backend", "hf", "--judge_mode", "logprobs"], "judge mode 'logprobs'"),
    (  # not a share of probability
        [*JUDGED, "--judge_model", "m", "--judge_backend", "hf", "--judge_mode", "logprob"]
        + ["--judge_min_score_mass", "5"],
        "min_score_mass must be in",
    ),
]


@pytest.mark.parametrize("overrides,message", BAD_OVERRIDES)
def test_bad_lab_settings_fail_before_any_model_loads(tmp_path, overrides, message, monkeypatch):
    monkeypatch.delenv("LEASH_UNSET_VAR_X", raising=False)
    missing_model = str(tmp_path / "no_model_here")  # loading it would fail differently
    with pytest.raises(ValueError, match=message):  # a setting the options alone decide fails as they are parsed
        args = parse_recipe_config(
            grpo,
            TINY_CHECKER,
            "--output_dir",
            str(tmp_path / "o"),
            "--model_name_or_path",
            missing_model,
            *BUILDS,
            *overrides,
        )
        grpo.main(*args)
    assert not Path(missing_model).exists()


def test_unreachable_judge_fails_before_the_model_loads(tmp_path):
    args = parse_recipe_config(
        grpo,
        TINY_JUDGE,
        *("--output_dir", str(tmp_path / "o"), "--model_name_or_path", str(tmp_path / "none"), *BUILDS),
        *("--judge_backend", "openai", "--judge_base_url", "http://127.0.0.1:9/v1", "--judge_max_retries", "0"),
    )
    with pytest.raises(ValueError, match="judge endpoint http://127.0.0.1:9/v1 does not answer"):
        grpo.main(*args)


def test_every_lab_config_parses_and_passes_the_recipes_and_the_step_logs_checks(tmp_path):
    from judge_lab.tracker import lab_step_log

    configs = sorted(CONFIGS.rglob("judge_lab_*.yaml"))
    assert len(configs) == 6  # 2x2 GPU grid + 2 tiny
    grid = {}
    for config in configs:
        # the GPU configs ask for bf16
        args, training_args, model_args = parse_recipe_config(grpo, config, "--use_cpu", "true")
        grpo_setup.check_args(args, training_args, model_args)
        lab_step_log(grpo_setup.HookContext(args, training_args, model_args, tmp_path, None, [], args.reward_funcs))
        assert args.callbacks == ["judge_lab.tracker:lab_step_log"] and args.one_update_per_group
        assert training_args.num_generations == 8 and training_args.temperature == 1.0
        assert args.reward_funcs[-1] == "answer_line_correctness"  # the verdict: trained, or watched at weight 0
        if "tiny" not in config.parts:
            differ = ("beta", "output_dir", "distributed_state", "reward_weights")
            settings = {k: v for k, v in vars(training_args).items() if k not in differ}
            grid[(args.reward_funcs[0], training_args.beta)] = settings
    assert set(grid) == {(r, b) for r in ("llm_judge", "answer_line_correctness") for b in (0.0, 0.04)}
    first = next(iter(grid.values()))
    assert all(settings == first for settings in grid.values())  # the four differ only in reward and beta


def test_step_record_totals_weigh_each_reward_and_leave_a_failed_judge_out():
    # TRL's buffer after one step: 2 prompts x G=2, two reward functions weighted 10.0 and 0.5 (not the default 1.0);
    # the judge failed (NaN in every function) on the third answer
    import types

    import torch

    from judge_lab.tracker import LabStepLogger

    nan = float("nan")
    trainer = types.SimpleNamespace(
        reward_weights=torch.tensor([10.0, 0.5]),
        num_generations=2,
        _logs={
            "rewards": {"llm_judge": [1.0, 0.0, nan, 0.5], "answer_format": [0.1, 0.1, nan, nan]},
            "completion": ["Answer: 17", "Answer: 3", "?", "Answer: 16"],
            "advantages": [0.7, -0.7, 0.0, 0.0],
            "extra": {},
        },
    )
    record = LabStepLogger("unused.jsonl").attach(trainer).step_record(1, {})
    assert [a["reward"] for a in record["answers"]] == pytest.approx([10.05, 0.05, None, 5.0])
    assert record["mean_reward"] == pytest.approx((10.05 + 0.05 + 5.0) / 3)  # TRL's `reward`: the failed one left out
    assert record["group_mean"] == pytest.approx([5.05, 5.0])
