"""``eval.generate``: K samples of a prompt share one reading of it (``generate_batch``), and give what K separate
readings would."""

from __future__ import annotations

import pytest
import torch

from eval.generate import encode_prompts, generate, generate_batch

QUESTIONS = ["1+1?", "What is 23 plus 45 minus 7, and then times 3?", "7*8"]  # different lengths: left padding


@pytest.fixture(scope="module")
def tiny():
    from recipes.tiny_model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    return build_model(tokenizer).eval(), tokenizer


def _batch(tokenizer):
    tokenizer.padding_side = "left"
    ids = encode_prompts(tokenizer, [[{"role": "user", "content": q}] for q in QUESTIONS])
    return tokenizer.pad({"input_ids": ids}, return_tensors="pt")


GREEDY = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, "max_new_tokens": 12}


@pytest.mark.heavy
@pytest.mark.parametrize("adapter", [False, True])
def test_k_answers_from_one_reading_of_each_prompt_match_a_reading_each(tiny, adapter):
    """Greedy, each of a prompt's K rows from the shared cache is the answer the prompt gets alone, token for token:
    the cache, its copies and the left-padded positions are right (with a LoRA adapter too, as eval reads an arm)."""
    model, tokenizer = tiny
    if adapter:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)).eval()
    enc = _batch(tokenizer)
    pad = {"pad_token_id": tokenizer.pad_token_id or 0, "eos_token_id": tokenizer.eos_token_id}
    shared = generate_batch(model, enc, 3, **GREEDY, **pad)
    alone = generate_batch(model, enc, 1, **GREEDY, **pad).repeat_interleave(3, dim=0)
    assert shared.shape == alone.shape and torch.equal(shared, alone)
    assert not torch.equal(shared[0], shared[3])  # the prompts differ, so a mix-up of rows would show


@pytest.mark.heavy
def test_sampled_answers_at_a_near_zero_temperature_are_the_greedy_answer(tiny):
    """Through ``generate``: K samples at temperature 1e-4 (all but greedy) from the shared reading each equal the
    greedy answer; the unshared path agrees."""
    model, tokenizer = tiny
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS]
    [greedy] = zip(*generate(model, tokenizer, prompts, max_new_tokens=12), strict=True)
    for share in (True, False):
        sampled = generate(
            model, tokenizer, prompts, max_new_tokens=12, temperature=1e-4, num_samples=4, share_prompts=share
        )
        assert [[g.text for g in answers] for answers in sampled] == [[g.text] * 4 for g in greedy]
