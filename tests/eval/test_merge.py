"""`python -m eval merge`: a LoRA run folder merged into a full model folder, on the tiny local model.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_merge.py
"""

import json
import re
import shutil
import stat
from pathlib import Path

import pytest
from safetensors import safe_open

import eval.__main__ as cli
import eval.merge
from eval.folder import SAMPLES_FILE
from eval.jsonl import new_file_mode, read_jsonl

DATA = Path(__file__).resolve().parents[1] / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A LoRA run folder as the recipes leave it: the adapter (its base named by path) and the tokenizer beside it.
    The LoRA matrices are random, not peft's zero B, so that the merged model differs from its base."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    out = tmp_path_factory.mktemp("lora_run")
    get_peft_model(model, config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)
    return out


def eval_run(out: Path, *model_args: str) -> list[dict]:
    """The samples of `eval run` (greedy) on the first 4 GSM8K problems, 8 new tokens each."""
    command = ["run", *model_args, "--task", "gsm8k", "--data", str(DATA), "--limit", "4", "--max-new-tokens", "8"]
    cli.main([*command, "--out", str(out)])
    return read_jsonl(out / SAMPLES_FILE)


def test_merged_folder_answers_as_the_adapter_token_for_token(tiny_model_dir, lora_run, tmp_path, capsys):
    from transformers import AutoTokenizer

    merged = tmp_path / "merged"
    cli.main(["merge", "--adapter", str(lora_run), "--out", str(merged)])  # --base: the adapter's own
    printed = capsys.readouterr().out
    assert f"wrote {merged}" in printed and "python -m eval run --model" in printed
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in merged.iterdir()
    }
    assert not (merged / "adapter_config.json").exists()  # a full model: vLLM and eval run load it alone
    assert {stat.S_IMODE(p.stat().st_mode) for p in merged.iterdir()} == {new_file_mode()}  # readable as any file
    assert AutoTokenizer.from_pretrained(merged).chat_template == AutoTokenizer.from_pretrained(lora_run).chat_template
    base_file, merged_file = str(tiny_model_dir / "model.safetensors"), str(merged / "model.safetensors")
    with safe_open(base_file, "pt") as b, safe_open(merged_file, "pt") as m:
        name = next(k for k in m.keys() if k.endswith("q_proj.weight"))  # noqa: SIM118 - safe_open is not a dict
        assert m.get_tensor(name).dtype == b.get_tensor(name).dtype  # the base's dtype (float32) by default
        assert not m.get_tensor(name).equal(b.get_tensor(name))  # the adapter is in the weights

    with_adapter = eval_run(tmp_path / "a", "--model", str(tiny_model_dir), "--adapter", str(lora_run))
    alone = eval_run(tmp_path / "m", "--model", str(merged))
    assert [s["completion"] for s in alone] == [s["completion"] for s in with_adapter]
    assert [s["n_tokens"] for s in alone] == [s["n_tokens"] for s in with_adapter]


def test_eval_reads_a_float32_adapter_merged_and_a_half_precision_one_beside_its_weights(tiny_model_dir, lora_run):
    """In float32, `eval run` merges the adapter (no side matmuls a token) and reads what the adapter says; in
    bfloat16 a merge would round a small update away, so the adapter stays beside the weights."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged, _ = cli.load_model(str(tiny_model_dir), str(lora_run), "float32", "hf")
    assert not isinstance(merged, PeftModel) and not any("lora" in name for name, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    beside = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), lora_run
    )
    ids = torch.arange(3, 19).reshape(2, 8)
    with torch.no_grad():
        got, want, plain = (model.eval()(ids).logits for model in (merged, beside, base))
    assert torch.allclose(got, want, atol=1e-5)  # the adapter's answer
    assert not torch.allclose(got, plain, atol=1e-3)  # not the base's: the update is in the weights
    half, _ = cli.load_model(str(tiny_model_dir), str(lora_run), "bfloat16", "hf")
    assert isinstance(half, PeftModel)


def test_merge_writes_the_dtype_asked_for_and_overwrites_only_when_told(lora_run, tmp_path, capsys):
    merged = tmp_path / "merged"
    cli.main(["merge", "--adapter", str(lora_run), "--out", str(merged), "--dtype", "bfloat16"])
    with safe_open(str(merged / "model.safetensors"), "pt") as f:
        assert {str(f.get_slice(k).get_dtype()) for k in f.keys()} == {"BF16"}  # noqa: SIM118
    assert json.loads((merged / "config.json").read_text())["dtype"] == "bfloat16"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # a folder with something in it: refused
        cli.main(["merge", "--adapter", str(lora_run), "--out", str(merged)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "is not empty" in err and "--overwrite" in err, err
    (merged / "notes.txt").write_text("kept")
    cli.main(["merge", "--adapter", str(lora_run), "--out", str(merged), "--overwrite", "--dtype", "float32"])
    with safe_open(str(merged / "model.safetensors"), "pt") as f:
        assert {str(f.get_slice(k).get_dtype()) for k in f.keys()} == {"F32"}  # noqa: SIM118
    assert (merged / "notes.txt").read_text() == "kept"  # --overwrite replaces the model's files, nothing else


def _adapter_naming(lora_run: Path, tmp_path: Path, base: str) -> Path:
    copy = Path(shutil.copytree(lora_run, tmp_path / "run"))
    config = json.loads((copy / "adapter_config.json").read_text())
    (copy / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base}))
    return copy


@pytest.mark.parametrize(
    "case, error",
    [
        ("no_adapter_config", r"no adapter_config\.json there"),  # a folder that is not a peft adapter
        ("base_missing", r"names its base model .*/gone/tiny_model, which does not exist here: pass --base"),
        ("explicit_base_missing", r"--base .*nowhere.* does not exist"),  # --base that is not there
        ("bad_dtype", r"--dtype float8: pass one of float32, bfloat16, float16"),
        ("out_not_empty", r"is not empty.*--overwrite"),
        ("out_is_the_adapter", r"--out .* is the adapter's folder"),
    ],
)
def test_bad_merge_input_is_one_line_before_any_model_loads(case, error, lora_run, tmp_path, monkeypatch, capsys):
    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(eval.merge, "merge_adapter", no_load)
    monkeypatch.setattr(cli, "merge_adapter", no_load, raising=False)
    adapter, out, extra = str(lora_run), tmp_path / "merged", []
    if case == "no_adapter_config":
        adapter = str(tmp_path)
    elif case == "base_missing":
        adapter = str(_adapter_naming(lora_run, tmp_path, str(tmp_path / "gone" / "tiny_model")))
    elif case == "explicit_base_missing":
        extra = ["--base", str(tmp_path / "nowhere")]
    elif case == "bad_dtype":
        extra = ["--dtype", "float8"]
    elif case == "out_not_empty":
        out.mkdir()
        (out / "config.json").write_text("{}")
    elif case == "out_is_the_adapter":
        out = lora_run
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["merge", "--adapter", adapter, "--out", str(out), *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(error, err), err
    if case not in ("out_not_empty", "out_is_the_adapter"):
        assert not out.exists()  # nothing written


def test_vllm_with_an_adapter_names_the_merge_command(tiny_model_dir, lora_run, tmp_path, capsys):
    with pytest.raises(SystemExit):
        command = ["run", "--model", str(tiny_model_dir), "--adapter", str(lora_run), "--task", "gsm8k"]
        cli.main([*command, "--data", str(DATA), "--backend", "vllm", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert f"python -m eval merge --adapter {lora_run} --out" in err and "--model" in err, err
    assert not (tmp_path / "o").exists()
