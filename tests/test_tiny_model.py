from transformers import AutoModelForCausalLM, AutoTokenizer


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
