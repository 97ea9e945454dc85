"""The two biases of GRPO's loss, measured in TRL 1.16's GRPOTrainer on crafted batches (docs/loss_variants.md).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_trl_loss_bias.py

Nothing here re-implements a formula. A tiny Qwen2 (recipes/tiny_model.py, in memory) goes into the GRPO recipe's
trainer (``recipes.grpo_setup.grpo_trainer``: TRL's GRPOTrainer, whose loss it leaves alone, with the monitors' log)
whose ``rollout_func`` (TRL's hook for custom generation) hands back fixed completions and whose reward function hands
back fixed rewards; ``_generate_and_score_completions`` then computes the advantages exactly as in training, and
``compute_loss`` + ``backward`` give the gradient that reaches each completion token's log-probability (kept with
``retain_grad`` on the tensor TRL's ``_get_per_token_logps_and_entropies`` returns).

1. Std scaling: TRL divides by the group's *sample* std (``trl.trainer.utils.nanstd``, Bessel's correction), so a lone
   wrong answer among right ones gets a larger advantage than any answer of a split group.
2. Length: under ``grpo`` each answer's token losses are averaged over its own length, so a long wrong answer's tokens
   are pushed down less than a short one's; ``dr_grpo`` (and the token-sum losses) do not do that.
"""

import dataclasses
import math

import pytest
import torch

from recipes.grpo_setup import grpo_trainer
from recipes.tiny_model import build_model, build_tokenizer

pytestmark = pytest.mark.heavy  # every test builds the tiny model and its trainer

SHORT, LONG = 2, 16  # tokens in the short and the long wrong answer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def score_batch(tokenizer, tmp_path, monkeypatch, rewards, lengths, loss_type="grpo", **config):
    """The recipe's GRPOTrainer on the tiny model, and TRL's scored batch for completions of ``lengths`` tokens paid
    ``rewards`` (consecutive groups of 4)."""
    import datasets
    from trl import GRPOConfig

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16
    digit = tokenizer("7")["input_ids"]

    def fixed_rollout(prompts, trainer):
        return {
            "prompt_ids": [tokenizer("Q")["input_ids"]] * len(prompts),
            "completion_ids": [digit * n for n in lengths],
            "logprobs": None,  # no vLLM sampler, so no sampling log-probs
        }

    def fixed_reward(completions, **kwargs):
        return [float(r) for r in rewards]

    args = GRPOConfig(
        output_dir=str(tmp_path),
        loss_type=loss_type,
        num_generations=4,  # group size
        per_device_train_batch_size=len(rewards),  # the whole crafted batch is one micro-batch
        max_completion_length=LONG,  # dr_grpo's constant divisor
        beta=0.0,  # no reference model: the policy term alone
        use_cpu=True,
        report_to="none",
        **config,
    )
    trainer = grpo_trainer(
        model=build_model(tokenizer),
        args=args,
        reward_funcs=fixed_reward,
        train_dataset=datasets.Dataset.from_dict({"prompt": ["Q"] * len(rewards)}),
        processing_class=tokenizer,
        rollout_func=fixed_rollout,
    )
    trainer.model.train()
    return trainer, trainer._generate_and_score_completions([{"prompt": "Q"}] * len(rewards))


def per_token_gradient(trainer, batch, monkeypatch) -> torch.Tensor:
    """d loss / d log-prob of every completion token, through TRL's compute_loss and autograd.  # [B, T]"""
    seen = []
    real = trainer._get_per_token_logps_and_entropies

    def keep_gradient(*args, **kwargs):
        logps, entropies, aux = real(*args, **kwargs)
        logps.retain_grad()
        seen.append(logps)
        return logps, entropies, aux

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", keep_gradient)
    trainer.current_gradient_accumulation_steps = 1  # what the training loop sets: one micro-batch per step
    trainer.compute_loss(trainer.model, batch).backward()
    return seen[-1].grad


def test_a_lone_wrong_answer_gets_a_larger_advantage_than_a_split_group(tokenizer, tmp_path, monkeypatch):
    # group A: three right, one wrong; group B: two right, two wrong (the curriculum's example)
    _, batch = score_batch(tokenizer, tmp_path, monkeypatch, [1, 1, 1, 0, 1, 0, 0, 1], [2] * 8, scale_rewards="group")
    advantages = batch["advantages"].tolist()
    group_a, group_b = advantages[:4], advantages[4:]
    assert abs(group_a[3]) > max(abs(a) for a in group_b)
    # TRL's values, pinned: sample std (divisor n-1) of (1,1,1,0) is 0.5 and of (1,0,0,1) is 0.577, so -0.75/0.5 = -1.5
    # and +-0.5/0.577 = +-0.866; TRL adds 1e-4 to the std, hence abs=1e-3
    assert group_a == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-3)
    assert group_b == pytest.approx([math.sqrt(3) / 2 * s for s in (1, -1, -1, 1)], abs=1e-3)
    # the population std (divisor n, the curriculum's worked numbers) would have given -1.73 and +-1
    assert group_a[3] != pytest.approx(-math.sqrt(3), abs=0.1) and group_b[0] != pytest.approx(1.0, abs=0.1)
    # Dr. GRPO's scale_rewards none keeps the raw difference from the group mean: the same order, -0.75 against +-0.5
    _, batch = score_batch(tokenizer, tmp_path, monkeypatch, [1, 1, 1, 0, 1, 0, 0, 1], [2] * 8, scale_rewards="none")
    assert batch["advantages"].tolist() == pytest.approx([0.25, 0.25, 0.25, -0.75, 0.5, -0.5, -0.5, 0.5])


# (name, loss_type, extra config, gradient ratio short/long wrong answer): per-answer length averaging gives LONG/SHORT
VARIANTS = [
    ("grpo", "grpo", {}, LONG / SHORT),  # token losses averaged per answer, then over answers
    ("dr_grpo", "dr_grpo", {"scale_rewards": "none"}, 1.0),  # summed, divided by a constant (max_completion_length)
    ("dapo", "dapo", {}, 1.0),  # summed, divided by the tokens of the whole batch
    ("bnpo", "bnpo", {}, 1.0),  # summed, divided by the tokens of the local batch
    ("cispo", "cispo", {"epsilon_high": 5.0}, 1.0),  # as dapo; epsilon_high caps the importance ratio
    ("sapo", "sapo", {}, LONG / SHORT),  # averaged per answer like grpo
    ("gspo", "grpo", {"importance_sampling_level": "sequence"}, LONG / SHORT),  # grpo's averaging, one ratio per answer
]


@pytest.mark.parametrize("name, loss_type, config, ratio", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_per_token_gradient_of_a_wrong_answer_by_its_length(
    tokenizer, tmp_path, monkeypatch, name, loss_type, config, ratio
):
    # one group: two right answers of 4 tokens, two wrong ones of SHORT and LONG tokens (the same advantage)
    trainer, batch = score_batch(
        tokenizer, tmp_path, monkeypatch, [1, 1, 0, 0], [4, 4, SHORT, LONG], loss_type, **config
    )
    assert batch["advantages"][2] == batch["advantages"][3] < 0
    gradient = per_token_gradient(trainer, batch, monkeypatch)
    short, long = gradient[2, :SHORT], gradient[3, :LONG]
    assert torch.allclose(short, short[0]) and torch.allclose(long, long[0])  # every token of an answer alike
    assert (short[0] / long[0]).item() == pytest.approx(ratio, rel=1e-4)
    assert short[0] > 0  # gradient descent lowers a wrong answer's log-probability


def gradients(tokenizer, tmp_path, monkeypatch, loss_type, **config):
    trainer, batch = score_batch(
        tokenizer, tmp_path, monkeypatch, [1, 1, 0, 0], [4, 4, SHORT, LONG], loss_type, **config
    )
    return per_token_gradient(trainer, batch, monkeypatch)


def test_on_policy_the_clip_variants_equal_their_base_loss(tokenizer, tmp_path, monkeypatch):
    """With one gradient step per generation the importance ratio is 1, so cispo trains as dapo, and sapo and GSPO as
    grpo: the lab's loss axis reuses each batch (steps_per_generation: 2) so that they can differ at all."""
    grpo, dapo = (
        gradients(tokenizer, tmp_path, monkeypatch, "grpo"),
        gradients(tokenizer, tmp_path, monkeypatch, "dapo"),
    )
    assert not torch.allclose(grpo, dapo)  # the two normalisations do differ
    assert torch.allclose(gradients(tokenizer, tmp_path, monkeypatch, "cispo", epsilon_high=5.0), dapo)
    assert torch.allclose(gradients(tokenizer, tmp_path, monkeypatch, "sapo"), grpo)
    assert torch.allclose(
        gradients(tokenizer, tmp_path, monkeypatch, "grpo", importance_sampling_level="sequence"), grpo
    )


def test_cispo_without_epsilon_high_shrinks_every_gradient_to_the_clip_epsilon(tokenizer, tmp_path, monkeypatch):
    """cispo caps the importance ratio at epsilon_high, which defaults to epsilon (0.2): a ratio of 1 is cut to 0.2, so
    every token's gradient is 0.2 of dapo's. The loss-axis config sets epsilon_high: 5.0 (TRL's recommended value)."""
    from trl import GRPOConfig

    epsilon = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}["epsilon"]
    dapo = gradients(tokenizer, tmp_path, monkeypatch, "dapo")
    cispo = gradients(tokenizer, tmp_path, monkeypatch, "cispo")
    assert torch.allclose(cispo, epsilon * dapo)
