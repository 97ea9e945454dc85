"""recipes.dynamic_sampling: the batch a step trains on holds only groups with reward variance, refilled from fresh
prompts within the cap, with the metrics in log.jsonl; off, the trainer is TRL's as before.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_dynamic_sampling.py

The joining of rounds is tested on a scripted stand-in for TRL's generation (exact tensors, no model); the runs of
the real recipe use the tiny local model with toy rewards registered for the test only.
"""

from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import trl

from eval.jsonl import read_jsonl
from recipes import grpo, grpo_setup
from recipes.checks import ConfigError
from recipes.dynamic_sampling import check_dynamic_sampling, dynamic_sampling_trainer, take_groups
from rewards import registry
from rewards.completions import completion_text
from tests.helpers import parse_recipe_config, tiny_run_flags

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"
METRICS = ["dynamic_sampling/dropped_share", "dynamic_sampling/extra_rounds", "dynamic_sampling/degenerate_kept_share"]
PAD = 99  # the scripted tokenizer's pad id


# ------------------------------------------------------------------------------ joining rounds, on scripted outputs
def scripted_output(tag: int, rewards: list[float], prompt_width: int, completion_width: int) -> tuple:
    """One round of TRL's generation output: every value of row r is ``tag * 100 + r``, so a row shows where it came
    from; the last completion token of odd rows is padding. ``num_items_in_batch`` is wrong on purpose (recounted)."""
    n = len(rewards)
    rows = torch.arange(n) + tag * 100  # [B]
    completion_mask = torch.ones(n, completion_width, dtype=torch.long)
    completion_mask[1::2, -1] = 0
    output = {
        "prompt_ids": rows[:, None].repeat(1, prompt_width),
        "prompt_mask": torch.ones(n, prompt_width, dtype=torch.long),
        "completion_ids": rows[:, None].repeat(1, completion_width),
        "completion_mask": completion_mask,
        "advantages": rows.float(),
        "old_per_token_logps": -rows[:, None].float().repeat(1, completion_width),
        "num_items_in_batch": torch.tensor(-1),
    }
    return torch.tensor(rewards)[:, None], output  # rewards_per_func [B, 1]


class ScriptedGeneration:
    """Stands in for GRPOTrainer (G = 2): each generation call returns the next scripted round, and scores it through
    ``_calculate_rewards`` as TRL does."""

    def __init__(self, rounds, n_rows=20):
        self.rounds, self.calls = list(rounds), []
        self.num_generations, self.reward_weights = 2, torch.ones(1)
        self.args = SimpleNamespace(seed=0, gradient_accumulation_steps=1)
        self.state, self._step = SimpleNamespace(global_step=3), 0
        self.model = SimpleNamespace(training=True)
        self.train_dataset = [{"prompt": f"p{i}"} for i in range(n_rows)]
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._tokenizer = SimpleNamespace(pad_token_id=PAD)
        self.accelerator = SimpleNamespace(num_processes=1)

    def _calculate_rewards(self, inputs, *args):
        return self.rounds[len(self.calls) - 1][0]

    def _generate_and_score_completions(self, inputs):
        self.calls.append(inputs)
        self._calculate_rewards(inputs)
        return self.rounds[len(self.calls) - 1][1]


def scripted(rounds, max_rounds=3, **kwargs):
    return dynamic_sampling_trainer(ScriptedGeneration, max_rounds)(rounds, **kwargs)


def logged(trainer) -> dict:
    return {name: trainer._metrics["train"][name] for name in METRICS}


BATCH = [{"prompt": "a"}] * 2 + [{"prompt": "b"}] * 2 + [{"prompt": "c"}] * 2  # three groups of G = 2


def test_degenerate_groups_are_replaced_by_fresh_groups_with_their_own_advantages():
    first = scripted_output(0, [1, 0, 1, 1, 0, 0], prompt_width=3, completion_width=4)  # groups 1 and 2 degenerate
    fresh = scripted_output(1, [2, 2, 0, 1, 1, 0], prompt_width=5, completion_width=2)  # group 0 degenerate
    trainer = scripted([first, fresh])
    batch = trainer._generate_and_score_completions(BATCH)

    # rows 0-1 of the scheduled round, rows 2-5 of the fresh one: each with its own advantage and old log-probs
    assert batch["advantages"].tolist() == [0, 1, 102, 103, 104, 105]
    assert batch["prompt_ids"].tolist()[0] == [PAD, PAD, 0, 0, 0]  # prompts padded on the left to the widest
    assert batch["prompt_mask"].tolist()[0] == [0, 0, 1, 1, 1]
    assert batch["prompt_ids"].tolist()[2] == [102] * 5
    assert batch["completion_ids"].tolist()[2] == [102, 102, PAD, PAD]  # completions on the right
    assert batch["completion_mask"].tolist()[2:4] == [[1, 1, 0, 0], [1, 0, 0, 0]]
    assert batch["old_per_token_logps"].tolist()[3] == [-103, -103, 0, 0]
    assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item() == 4 + 3 + 2 + 1 + 2 + 1
    # one extra round, of as many distinct fresh prompts as the batch has groups, each G times
    assert len(trainer.calls) == 2
    prompts = [row["prompt"] for row in trainer.calls[1]]
    assert prompts[::2] == prompts[1::2] and len(set(prompts)) == 3
    assert logged(trainer) == {
        "dynamic_sampling/dropped_share": [3 / 6],  # 2 of the scheduled groups and 1 fresh one, of 6 generated
        "dynamic_sampling/extra_rounds": [1.0],
        "dynamic_sampling/degenerate_kept_share": [0.0],
    }


def test_at_the_cap_the_scheduled_batchs_own_degenerate_groups_fill_it():
    rounds = [scripted_output(tag, [1.0] * 6, 3, 4) for tag in range(3)]
    trainer = scripted(rounds, max_rounds=2)
    batch = trainer._generate_and_score_completions(BATCH)
    assert len(trainer.calls) == 3  # the scheduled round and two extra: the cap
    for key, value in rounds[0][1].items():  # a constant reward trains on the scheduled batch, as TRL would
        if key != "num_items_in_batch":
            assert torch.equal(batch[key], value), key
    assert batch["num_items_in_batch"].item() == rounds[0][1]["completion_mask"].sum().item()
    assert logged(trainer) == {
        "dynamic_sampling/dropped_share": [6 / 9],  # 9 degenerate groups generated, 3 kept to fill the batch
        "dynamic_sampling/extra_rounds": [2.0],
        "dynamic_sampling/degenerate_kept_share": [1.0],
    }


def test_a_short_batch_at_the_cap_keeps_what_it_found_then_the_first_degenerate_groups():
    first = scripted_output(0, [1, 1, 0, 0, 1, 0], 3, 4)  # groups 0 and 1 degenerate
    fresh = scripted_output(1, [1, 0, 5, 5, 5, 5], 3, 4)  # one useful group
    trainer = scripted([first, fresh], max_rounds=1)
    assert trainer._generate_and_score_completions(BATCH)["advantages"].tolist() == [4, 5, 100, 101, 0, 1]
    assert logged(trainer) == {
        "dynamic_sampling/dropped_share": [(2 + 2 - 1) / 6],  # group 1 of the scheduled batch and 2 fresh ones
        "dynamic_sampling/extra_rounds": [1.0],
        "dynamic_sampling/degenerate_kept_share": [1 / 3],  # group 0 of the scheduled batch
    }


def test_a_batch_with_nothing_to_drop_is_returned_as_it_is_and_evaluation_is_untouched():
    first = scripted_output(0, [1, 0, 0, 1, 2, 0], 3, 4)
    trainer = scripted([first])
    assert trainer._generate_and_score_completions(BATCH) is first[1]
    assert len(trainer.calls) == 1
    assert logged(trainer)["dynamic_sampling/extra_rounds"] == [0.0]
    evaluating = scripted([scripted_output(0, [1.0] * 6, 3, 4)])
    evaluating.model.training = False
    assert evaluating._generate_and_score_completions(BATCH) is evaluating.rounds[0][1]
    assert len(evaluating.calls) == 1 and not evaluating._metrics["train"]


def test_fresh_prompts_are_the_same_for_the_same_step_and_differ_between_steps():
    def drawn(step):
        trainer = scripted([scripted_output(0, [1.0] * 6, 3, 4)], n_rows=50)
        trainer.state.global_step = step
        return [row["prompt"] for row in trainer._fresh_prompts(3)]

    assert drawn(4) == drawn(4) != drawn(5)
    assert len(set(drawn(4))) == 9  # 3 groups x 3 rounds, no prompt twice


def test_joining_refuses_outputs_it_does_not_know():
    _, output = scripted_output(0, [1.0] * 2, 3, 4)
    with pytest.raises(ValueError, match="keys \\['pixel_values'\\]"):
        take_groups([(output | {"pixel_values": torch.zeros(2, 3)}, [0])], 2, PAD)


# --------------------------------------------------------------------------------------------- the checks, one line
@pytest.mark.parametrize(
    ("setting", "fix"),
    [
        ({"max_rounds": 0}, "set it to 1 or more"),  # a cap below 1
        ({"scale_rewards": "batch"}, "set scale_rewards to group or none"),  # advantages scaled by a whole round
        ({"aggregation": "normalize_then_sum"}, "set it to sum_then_normalize"),  # centred on a whole round
        ({"processes": 2}, "launch one process"),  # groups straddle ranks
    ],
)
def test_check_refuses_what_cannot_work_in_one_line_with_the_fix(setting, fix):
    kwargs = {"max_rounds": 2} | setting
    with pytest.raises(ValueError) as error:
        check_dynamic_sampling(True, kwargs.pop("max_rounds"), **kwargs)
    message = str(error.value)
    assert "\n" not in message and fix in message and "dynamic_sampling: false" in message
    check_dynamic_sampling(False, **{"max_rounds": 2} | setting)  # off: nothing to check


def test_the_recipe_refuses_the_option_before_any_model_loads(tmp_path):
    missing = ["--model_name_or_path", str(tmp_path / "no_model"), "--build_tiny_model", "false"]
    missing += ["--output_dir", str(tmp_path / "run")]
    on = ["--dynamic_sampling", "true"]
    for flags, fix in [
        (["--dynamic_sampling_max_rounds", "0"], "dynamic_sampling_max_rounds is 0: set it to 1 or more"),
        (["--scale_rewards", "batch"], "set scale_rewards to group or none"),
    ]:
        with pytest.raises(ConfigError) as error:  # the model folder does not exist: the check came first
            grpo.main(*parse_recipe_config(grpo, TINY_CONFIG, *missing, *on, *flags))
        assert fix in str(error.value) and "\n" not in str(error.value)
    grpo_setup.check_args(*parse_recipe_config(grpo, TINY_CONFIG, *on))  # the defaults pass
    with pytest.raises(ValueError, match="at least 2 generations.*\n.*num_generations: 2 or more"):  # groups of one
        parse_recipe_config(grpo, TINY_CONFIG, *on, "--num_generations", "1", as_run=True)  # TRL's GRPOConfig refuses


# ------------------------------------------------------------------------------------ the recipe on the tiny model
def parity_by_prompt(completions, answer, **kwargs):
    """Toy reward that depends on the prompt: 0.0 for every completion of a problem with an odd gold answer (its groups
    are degenerate), else 1.0 for a completion of even character length."""
    pairs = zip(completions, answer, strict=True)
    return [0.0 if int(gold) % 2 else float(len(completion_text(c)) % 2 == 0) for c, gold in pairs]


def constant_reward(completions, **kwargs):
    """Toy reward that pays every completion the same: every group is degenerate."""
    return [0.0] * len(completions)


class LossSpy(trl.GRPOTrainer):
    """TRL's trainer recording what each generation round returned and the batch each loss call sees."""

    rounds: list = []
    losses: list = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        type(self).rounds.append({k: v.clone() for k, v in output.items() if torch.is_tensor(v)})
        return output

    def compute_loss(self, model, inputs, *args, **kwargs):
        seen = {k: v.clone() for k, v in inputs.items() if torch.is_tensor(v)}
        with torch.no_grad():  # the policy's own log-probabilities of the batch, as the loss computes them
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            seen["policy_logps"], _, _ = self._get_per_token_logps_and_entropies(
                model, ids, mask, inputs["completion_ids"].size(1)
            )
        type(self).losses.append(seen)
        return super().compute_loss(model, inputs, *args, **kwargs)


@pytest.fixture
def spy(monkeypatch):
    monkeypatch.setattr(trl, "GRPOTrainer", LossSpy)  # grpo_setup looks it up at the call
    monkeypatch.setattr(LossSpy, "rounds", [])
    monkeypatch.setattr(LossSpy, "losses", [])
    return LossSpy


def run_recipe(tiny_model_dir, data_dir, out: Path, monkeypatch, reward, *overrides: str) -> list[dict]:
    """The recipe on the tiny config, 2 prompts x G = 4 a step, with ``reward`` alone; the log's step lines."""
    monkeypatch.setitem(registry.REGISTRY, "toy_reward", registry.RewardInfo(reward, "correctness", 1.0))
    args = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), "--build_tiny_model", "false"]
    args += ["--data", str(data_dir / "gsm8k" / "train.jsonl"), "--eval_data", str(data_dir / "gsm8k" / "test.jsonl")]
    args += [*tiny_run_flags(monitor_eval_steps=0, probe_problems=0), "--reward_funcs", "toy_reward"]
    args += ["--reward_weights", "1.0"]
    grpo.main(*parse_recipe_config(grpo, TINY_CONFIG, *args, *overrides))
    return [r for r in read_jsonl(out / "log.jsonl") if "loss" in r]


@pytest.mark.integration
@pytest.mark.parametrize(
    "extra",
    [
        [],  # TRL's default here: no old or reference log-probabilities in the batch
        ["--beta", "0.04", "--num_iterations", "2"],  # both: the reference model, and two passes over each batch
    ],
    ids=["plain", "old_and_ref_logps"],
)
def test_the_loss_sees_full_batches_without_a_degenerate_group(
    tiny_model_dir, data_dir, tmp_path, monkeypatch, spy, extra
):
    overrides = ["--dynamic_sampling", "true", "--dynamic_sampling_max_rounds", "8", "--max_steps", "2", *extra]
    steps = run_recipe(tiny_model_dir, data_dir, tmp_path / "run", monkeypatch, parity_by_prompt, *overrides)

    assert [r["step"] for r in steps] == [1, 2]
    assert len(spy.losses) == 2
    for batch in spy.losses:
        assert batch["advantages"].shape == (8,)  # full: 2 groups of 4
        # rewards are 0 or 1, so a group with both has no zero advantage, and a degenerate group only zeros
        assert (batch["advantages"] != 0).all(), batch["advantages"]
    # the metrics are on the log line of each step that generated (two passes over a batch: the first step only)
    generated = [r for r in steps if all(name in r for name in METRICS)]
    assert [r["step"] for r in generated] == ([1] if extra else [1, 2])
    # degenerate groups were generated and dropped (the case this test is about happened), and every round was counted
    assert any(r["dynamic_sampling/dropped_share"] > 0 for r in generated)
    assert len(spy.rounds) == len(generated) + sum(r["dynamic_sampling/extra_rounds"] for r in generated)
    assert all(r["dynamic_sampling/degenerate_kept_share"] == 0 for r in generated)  # the cap was never hit
    if extra:  # each row kept its own old and reference log-probabilities: before the first update all three agree
        first = spy.losses[0]
        tokens = first["completion_mask"].bool()
        for key in ("old_per_token_logps", "ref_per_token_logps"):
            assert torch.allclose(first[key][tokens], first["policy_logps"][tokens], atol=1e-5), key


@pytest.mark.integration
def test_at_the_cap_the_step_still_runs_and_the_log_says_so(tiny_model_dir, data_dir, tmp_path, monkeypatch, spy):
    overrides = ["--dynamic_sampling", "true", "--dynamic_sampling_max_rounds", "2", "--max_steps", "1"]
    [step] = run_recipe(tiny_model_dir, data_dir, tmp_path / "run", monkeypatch, constant_reward, *overrides)

    assert len(spy.rounds) == 3  # the scheduled round and two extra ones, then no more
    assert step["dynamic_sampling/extra_rounds"] == 2
    assert step["dynamic_sampling/dropped_share"] == pytest.approx(2 / 3)
    assert step["dynamic_sampling/degenerate_kept_share"] == 1
    assert step["frac_reward_zero_std"] == 1
    # the loss saw the scheduled batch (in TRL's shuffled order): its own degenerate groups
    [seen] = spy.losses
    scheduled = spy.rounds[0]
    assert sorted(seen["prompt_ids"].tolist()) == sorted(scheduled["prompt_ids"].tolist())
    assert sorted(seen["completion_ids"].tolist()) == sorted(scheduled["completion_ids"].tolist())


def built_trainer(tiny_model_dir, data_dir, tmp_path, *overrides: str):
    """The recipe's trainer for the tiny config, built as ``recipes.grpo.main`` builds it (no training)."""
    args = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(tmp_path), "--probe_problems", "0"]
    args += ["--data", str(data_dir / "gsm8k" / "train.jsonl")]
    script_args, training_args, model_args = parse_recipe_config(grpo, TINY_CONFIG, *args, *overrides)
    task, eval_task = grpo_setup.check_args(script_args, training_args, model_args)
    rows = grpo_setup.training_rows(script_args, task)
    rewards = grpo_setup.build_rewards(script_args.reward_funcs, script_args)
    monitors = grpo_setup.build_monitors(script_args, training_args, rows, rewards, task, eval_task)
    return grpo_setup.build_trainer(script_args, training_args, model_args, rows, monitors, [], [], None, {})


def test_off_the_trainer_is_trls_as_before(tiny_model_dir, data_dir, tmp_path):
    off = built_trainer(tiny_model_dir, data_dir, tmp_path)  # the default
    assert type(off).__mro__[1] is trl.GRPOTrainer  # the monitors' subclass of TRL's trainer, nothing between
    for name in ("_generate_and_score_completions", "_calculate_rewards"):
        assert getattr(type(off), name) is getattr(trl.GRPOTrainer, name)
    on = built_trainer(tiny_model_dir, data_dir, tmp_path, "--dynamic_sampling", "true")
    assert type(on).dynamic_sampling_max_rounds == 3  # the option's default
    assert type(on)._generate_and_score_completions is not trl.GRPOTrainer._generate_and_score_completions
