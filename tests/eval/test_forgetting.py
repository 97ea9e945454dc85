"""`eval forgetting` on the tiny model: zero against itself, KL > 0 and the right sign of the log-likelihood change
for copies nudged toward and away from the reference text, the numbers against per-document forward passes, a LoRA
run folder against the same adapter merged, chat rows through the chat template, and every bad input refused in one
line before a model loads. Reference text: GSM8K reference solutions (tests/data/gsm8k/train.jsonl, field `answer`).

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_forgetting.py
"""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import eval.__main__ as cli
from eval.forgetting import document_scores, encode_documents, read_reference

REFERENCE = "gsm8k/train.jsonl"
N_DOCS, MAX_LENGTH = 6, 96  # lengths differ below 96 tokens, so batches of 4 carry padding


def forgetting(base, model, data, out, *extra) -> dict:
    argv = ["forgetting", "--base", str(base), "--model", str(model), "--data", str(data), "--field", "answer"]
    cli.main([*argv, "--limit", str(N_DOCS), "--max-length", str(MAX_LENGTH), "--out", str(out), *extra])
    return json.loads((Path(out) / "forgetting.json").read_text())


def reference_ids(tokenizer, data_dir) -> list[list[int]]:
    return encode_documents(tokenizer, read_reference(data_dir / REFERENCE, "answer", N_DOCS), MAX_LENGTH)[0]


def nudged_copy(model_dir: Path, data_dir: Path, out: Path, sign: float) -> Path:
    """The tiny model after a few SGD steps on the reference documents: toward them (sign +1: descending their
    loss) or away from them (sign -1: ascending it)."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # a random ~100k-parameter model: big steps move it
    for _ in range(3):
        for ids in reference_ids(tokenizer, data_dir):
            ids = torch.tensor([ids])
            (sign * model(input_ids=ids, labels=ids).loss).backward()
            optimizer.step()
            optimizer.zero_grad()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def toward(tiny_model_dir, data_dir, tmp_path_factory) -> Path:
    return nudged_copy(tiny_model_dir, data_dir, tmp_path_factory.mktemp("toward"), +1.0)


@pytest.fixture(scope="module")
def away(tiny_model_dir, data_dir, tmp_path_factory) -> Path:
    return nudged_copy(tiny_model_dir, data_dir, tmp_path_factory.mktemp("away"), -1.0)


def test_a_model_against_itself_gives_zero(tiny_model_dir, data_dir, tmp_path, capsys):
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")  # loaded twice: two models, the same weights
    for model in (tiny_model_dir, copy):
        result = forgetting(tiny_model_dir, model, data_dir / REFERENCE, tmp_path / "out")
        assert result["kl"] == {"mean": 0.0, "ci": [0.0, 0.0]}
        assert result["delta_log_likelihood"] == {"mean": 0.0, "ci": [0.0, 0.0]}
        assert result["n_documents"] == N_DOCS and result["base_log_likelihood"] < 0
    assert "KL(base || model) 0.0000 nats/token" in capsys.readouterr().out


def test_a_copy_nudged_toward_the_text_gains_likelihood_and_one_nudged_away_loses_it(
    tiny_model_dir, data_dir, toward, away, tmp_path
):
    gained = forgetting(tiny_model_dir, toward, data_dir / REFERENCE, tmp_path / "toward")
    lost = forgetting(tiny_model_dir, away, data_dir / REFERENCE, tmp_path / "away")
    for result in (gained, lost):
        assert result["kl"]["mean"] > 0 and result["kl"]["ci"][0] > 0
        assert all(d["kl"] > 0 for d in result["documents"])
    assert gained["delta_log_likelihood"]["ci"][0] > 0  # the whole interval above 0
    assert lost["delta_log_likelihood"]["ci"][1] < 0
    delta = gained["model_log_likelihood"] - gained["base_log_likelihood"]
    assert gained["delta_log_likelihood"]["mean"] == pytest.approx(delta)


def test_batched_numbers_equal_one_document_at_a_time(tiny_model_dir, data_dir, toward):
    # Padding must change nothing: each document's log-likelihoods are minus its own loss in a batch of one, and its
    # KL is the same as computed alone.
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(toward)
    documents = reference_ids(AutoTokenizer.from_pretrained(tiny_model_dir), data_dir)
    assert len({len(d) for d in documents}) > 1  # documents of several lengths: the batches are padded
    batched = document_scores(base, model, documents, batch_size=4)
    alone = document_scores(base, model, documents, batch_size=1)
    for ids, b, a in zip(documents, batched, alone, strict=True):
        ids = torch.tensor([ids])
        with torch.no_grad():
            assert b["base_log_likelihood"] == pytest.approx(-base(input_ids=ids, labels=ids).loss.item(), abs=1e-5)
            assert b["model_log_likelihood"] == pytest.approx(-model(input_ids=ids, labels=ids).loss.item(), abs=1e-5)
        assert b["kl"] == pytest.approx(a["kl"], abs=1e-6) and b["n_tokens"] == ids.shape[1] - 1
        with torch.no_grad():  # KL(base || model) by its definition: sum over the vocabulary of p log(p / q)
            p = torch.softmax(base(input_ids=ids).logits[0, :-1].double(), -1)
            q = torch.softmax(model(input_ids=ids).logits[0, :-1].double(), -1)
        assert b["kl"] == pytest.approx((p * (p / q).log()).sum(-1).mean().item(), rel=1e-4)
        assert b["kl"] != pytest.approx((q * (q / p).log()).sum(-1).mean().item(), rel=1e-2)  # not KL(model || base)


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    """A LoRA run folder (peft adapter with non-zero B, so it changes the model) and the same adapter merged into a
    full model folder."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    adapter, merged = tmp_path_factory.mktemp("lora_run"), tmp_path_factory.mktemp("merged")
    peft_model.save_pretrained(adapter)
    peft_model.merge_and_unload().save_pretrained(merged)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(merged)
    return adapter, merged


def test_a_lora_run_folder_measures_as_its_merged_model(tiny_model_dir, data_dir, lora_run, tmp_path):
    adapter, merged = lora_run
    with_adapter = forgetting(tiny_model_dir, adapter, data_dir / REFERENCE, tmp_path / "adapter")
    with_merged = forgetting(tiny_model_dir, merged, data_dir / REFERENCE, tmp_path / "merged")
    assert with_adapter["adapter"] is True and with_merged["adapter"] is False
    assert with_adapter["kl"]["mean"] > 0
    assert with_adapter["kl"]["mean"] == pytest.approx(with_merged["kl"]["mean"], rel=1e-3)
    assert with_adapter["delta_log_likelihood"]["mean"] == pytest.approx(
        with_merged["delta_log_likelihood"]["mean"], rel=1e-3
    )


def test_chat_rows_read_as_their_chat_template_text(tiny_model_dir, toward, tmp_path):
    conversations = [
        [{"role": "user", "content": "What is 3 + 5?"}, {"role": "assistant", "content": "3 + 5 = 8. #### 8"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a clip."}],
    ]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    as_text = [tokenizer.apply_chat_template(m, tokenize=False) for m in conversations]
    assert as_text[0].startswith("<|im_start|>system\n")  # the template wrote the turns
    chat, text = tmp_path / "chat.jsonl", tmp_path / "text.jsonl"
    chat.write_text("".join(json.dumps({"answer": m}) + "\n" for m in conversations))
    text.write_text("".join(json.dumps({"answer": t}) + "\n" for t in as_text))
    from_chat = forgetting(tiny_model_dir, toward, chat, tmp_path / "chat")
    from_text = forgetting(tiny_model_dir, toward, text, tmp_path / "text")
    assert from_chat["documents"] == from_text["documents"] and from_chat["kl"]["mean"] > 0


def _edit_json(folder: Path, name: str, **changes) -> None:
    path = folder / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(
    "case, error",
    [
        ("missing_data", "nope.jsonl does not exist"),
        ("missing_field", "row 1 has no field 'text' .*pass --field"),
        ("not_text", "row 2: field 'answer' is neither text nor a list of chat messages"),
        ("empty_text", "row 1: field 'answer' is empty"),
        ("limit_0", "--limit 0: pass a number of documents >= 1"),
        ("max_length_1", "--max-length 1: pass at least 2 tokens"),
        ("batch_size_0", "--batch-size 0"),
        ("missing_model", "--model .*does not exist"),
        ("other_vocabulary", "--model .* has a vocabulary of 999 tokens"),
        ("adapter_of_another_base", "--model .* was trained on 'Qwen/Qwen2.5-7B', not on --base"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_a_model_loads(
    case, error, tiny_model_dir, data_dir, lora_run, tmp_path, monkeypatch, capsys
):
    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(cli, "load_model", no_load)
    model, data, extra = str(tiny_model_dir), data_dir / REFERENCE, ["--field", "answer"]
    if case == "missing_data":
        data = tmp_path / "nope.jsonl"
    elif case == "missing_field":
        extra = []  # the default field, text, is not in GSM8K rows
    elif case in ("not_text", "empty_text"):
        data = tmp_path / "bad.jsonl"
        value = 3 if case == "not_text" else "  "
        data.write_text(json.dumps({"answer": "fine"}) * (case == "not_text") + "\n" + json.dumps({"answer": value}))
    elif case == "limit_0":
        extra += ["--limit", "0"]
    elif case == "max_length_1":
        extra += ["--max-length", "1"]
    elif case == "batch_size_0":
        extra += ["--batch-size", "0"]
    elif case == "missing_model":
        model = str(tmp_path / "no_such_model")
    elif case == "other_vocabulary":
        model = shutil.copytree(tiny_model_dir, tmp_path / "other")
        _edit_json(model, "config.json", vocab_size=999)
    elif case == "adapter_of_another_base":
        model = shutil.copytree(lora_run[0], tmp_path / "adapter")
        _edit_json(model, "adapter_config.json", base_model_name_or_path="Qwen/Qwen2.5-7B")
    argv = ["forgetting", "--base", str(tiny_model_dir), "--model", str(model), "--data", str(data), *extra]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(error, err), err
    assert not (tmp_path / "out").exists()
