from transformers import AutoModelForCausalLM, AutoTokenizer

from recipes import tiny_model
from recipes.tiny_model import may_build_at


def test_tiny_model_round_trips(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert 50_000 < model.num_parameters() < 200_000  # "~100k parameters"
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    # chat-template words are whole tokens, digits are single tokens (Qwen2 split)
    assert "assistant" in tok.convert_ids_to_tokens(tok("<|im_start|>assistant").input_ids)
    assert tok.convert_ids_to_tokens(tok("#### 123").input_ids)[-3:] == ["1", "2", "3"]
    batch = tok([text, "hi"], return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape[0] == 2


def test_the_tiny_model_is_built_only_where_it_is_meant_to_be(tmp_path, monkeypatch):
    import doctest

    import pytest

    assert doctest.testmod(tiny_model).failed == 0
    monkeypatch.chdir(tmp_path)  # TINY_MODEL_DIR is relative to the working folder
    assert may_build_at("runs/tiny_model", False, True) and may_build_at("./runs/tiny_model/", False, True)
    assert may_build_at(str(tmp_path / "mine"), False, False)  # the config names both: its own folder
    assert may_build_at(str(tmp_path / "mine"), True, True)  # --build_tiny_model true beside the path: asked for
    assert not may_build_at("HuggingFaceTB/SmolLM2-135M", False, True)  # a hub id loads from the hub
    assert not may_build_at("HuggingFaceTB/SmolLM2-135M", False, False)
    with pytest.raises(ValueError, match="reads as a hub id"):  # asked for, but the folder would pass for a hub id
        may_build_at("HuggingFaceTB/SmolLM2-135M", True, True)
    with pytest.raises(ValueError, match="--build_tiny_model true"):  # a typo'd model path on the command line
        may_build_at(str(tmp_path / "my_sft_modle"), False, True)
