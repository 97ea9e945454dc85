"""The lab's SFT warm start, shrunk to seconds: it trains with TRL's SFTTrainer, stops on a VALIDATION threshold (the
held-out set is read once, after the stop), and a second call with the same settings reuses the cached folder.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_cpu_lab_warmstart.py
"""

import json
from pathlib import Path

import pytest

from cpu_lab.problems import Difficulty, heldout_problems, validation_problems
from cpu_lab.warmstart import WarmStartSettings, lab_tokenizer, sft_rows, warm_start
from eval.jsonl import read_jsonl

# A model and run small enough for a unit test; the lab's real settings are WarmStartSettings() defaults.
TINY = dict(
    vocab_size=300,  # small: the byte alphabet, special tokens and a few merges
    hidden_size=32,
    num_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=64,
    n_train=64,
    batch_size=8,
    learning_rate=1e-2,  # large: three steps must visibly move the weights
    warmup_steps=0,
    max_new_tokens=8,
)


def test_few_sft_steps_train_save_and_cache(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipes.tiny_model import build_model

    settings = WarmStartSettings(**TINY, max_steps=3, eval_every=3, validation_n=5, heldout_n=4, stop_at_accuracy=1.0)
    out = warm_start(settings, tmp_path)  # real greedy evaluations through eval.run.evaluate
    record = json.loads((out / "warmstart.json").read_text())
    assert out.name == f"warmstart-{settings.key()}"
    assert record["steps"] == 3 and [c["step"] for c in record["curve"]] == [3]
    assert not record["reached_threshold"]  # a 3-step model does not solve everything
    assert 0.0 <= record["validation_accuracy"] <= 1.0 and 0.0 <= record["heldout_accuracy"] <= 1.0
    read = lambda name: read_jsonl(out / name)  # noqa: E731
    assert read("validation.jsonl") == validation_problems(settings.difficulty, 5, heldout_n=4)
    assert read("heldout.jsonl") == heldout_problems(settings.difficulty, 4)
    trained = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    initial = build_model(
        tokenizer,
        hidden_size=32,
        num_layers=1,
        seed=0,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
    )
    assert not torch.equal(trained.model.embed_tokens.weight, initial.model.embed_tokens.weight)

    calls = []
    again = warm_start(settings, tmp_path, accuracy_fn=lambda *a: calls.append(a) or 0.0)
    assert again == out and calls == []  # reused from the cache: no training, no evaluation


def test_stops_on_validation_and_reads_heldout_once_after_the_stop(tmp_path):
    # validation evaluations at steps 1, 2, 3...: the threshold 0.4 is crossed at step 2. The held-out set scores 0.95
    # whenever it is read, so a rule that looked at it would stop at step 1.
    validation = iter([0.1, 0.5, 0.9])
    calls = []

    def accuracy(model, tokenizer, data_path, limit, max_new_tokens):
        calls.append((data_path.name, limit))
        return 0.95 if data_path.name == "heldout.jsonl" else next(validation)

    settings = WarmStartSettings(**TINY, max_steps=10, eval_every=1, validation_n=6, heldout_n=4, stop_at_accuracy=0.4)
    out = warm_start(settings, tmp_path, accuracy_fn=accuracy)
    record = json.loads((out / "warmstart.json").read_text())
    assert calls == [("validation.jsonl", 6), ("validation.jsonl", 6), ("heldout.jsonl", 4)]
    assert record["steps"] == 2 and record["validation_accuracy"] == 0.5 and record["reached_threshold"]
    assert record["heldout_accuracy"] == 0.95
    assert [c["validation_accuracy"] for c in record["curve"]] == [0.1, 0.5]


def test_sft_rows_are_prompt_completion_with_the_lab_prompt():
    from eval.tasks import get_task

    row = sft_rows([{"question": "Tom has 3 apples.", "answer": "#### 3"}])[0]
    assert row["prompt"] == get_task("lab").prompt("Tom has 3 apples.")  # the prompt the lab configs' eval/GRPO use
    assert row["completion"] == [{"role": "assistant", "content": "#### 3"}]


def test_lab_configs_prompt_as_the_warm_start_was_trained():
    import yaml

    from cpu_lab.warmstart import TASK

    for config in Path("recipes/configs/lab").glob("grpo_lab_*.yaml"):
        values = yaml.safe_load(config.read_text())
        assert (values["task"], values["eval_task"]) == (TASK, TASK), config


def test_lab_prompt_is_short_and_has_no_system_turn():
    # every prompt token is paid for in SFT and in each GRPO step: the lab's template drops Qwen's default system turn
    from eval.tasks import get_task

    tok = lab_tokenizer(WarmStartSettings(difficulty=Difficulty(max_number=20)))
    text = tok.apply_chat_template(
        get_task("lab").prompt("Tom has 3 apples."), tokenize=False, add_generation_prompt=True
    )
    assert (
        text
        == "<|im_start|>user\nTom has 3 apples.\n\nEnd with #### and the number.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tokenizer_keeps_chat_words_whole_and_digits_single():
    tok = lab_tokenizer(WarmStartSettings(difficulty=Difficulty(max_number=20)))
    assert tok.tokenize("assistant") == ["assistant"]
    assert tok.tokenize("123") == ["1", "2", "3"]


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(stop_at_accuracy=0.0), "stop_at_accuracy"),  # a threshold every model meets
        (dict(stop_at_accuracy=1.5), "stop_at_accuracy"),  # a threshold no model meets
        (dict(eval_every=0), "eval_every"),  # never evaluated, never stops
    ],
)
def test_bad_settings_fail_before_any_training(bad, message):
    with pytest.raises(ValueError, match=message):
        WarmStartSettings(**bad)


def test_cache_key_changes_with_the_prompt(monkeypatch):
    # a model warm-started on one instruction must not be reused for another (the cache is keyed by settings+prompt)
    from dataclasses import replace

    from cpu_lab.warmstart import TASK, WarmStartSettings
    from eval import tasks

    before = WarmStartSettings().key()
    monkeypatch.setitem(tasks.TASKS, TASK, replace(tasks.TASKS[TASK], instruction="Write #### then the answer."))
    assert WarmStartSettings().key() != before


@pytest.mark.parametrize("seed_name", ["VALIDATION_SEED", "HELDOUT_SEED"])
def test_cache_key_changes_with_the_splits(monkeypatch, seed_name):
    # a warm start stopped on one validation set (and trained on data that leaves out one pair of sets) must not be
    # reused for another: the splits' seeds are part of the key
    from cpu_lab import problems

    before = WarmStartSettings().key()
    monkeypatch.setattr(problems, seed_name, getattr(problems, seed_name) + 1)
    assert WarmStartSettings().key() != before


def test_cache_key_changes_with_the_validation_size():
    assert WarmStartSettings(validation_n=100).key() != WarmStartSettings().key()
