"""The GPU-only paths, checked on CPU: vLLM decisions with a stand-in ``vllm`` package and a pretend GPU,
precision of full fine-tuning and QLoRA adapters, RNG isolation of evals, one tokenization rule for both backends,
vLLM batching with an exact resume, and model-init pass-through.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_gpu_paths.py

What only a GPU can check (vLLM itself, its LoRA path, memory peaks) is listed in docs/gpu.md.
"""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import trl.trainer.grpo_trainer  # noqa: F401 - imported for real, before any test pretends vLLM is installed

from eval.jsonl import read_jsonl
from recipes import checks, grpo
from recipes.grpo_setup import check_args
from recipes.parser import load_config
from recipes.tiny_model import build_model, build_tokenizer, save_tiny_model
from tests.helpers import parse_recipe_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "recipes" / "configs"
QLORA = CONFIGS / "gsm8k" / "qwen2.5-1.5b-instruct" / "grpo_qlora_drgrpo_b0.yaml"
LORA = CONFIGS / "gsm8k" / "qwen2.5-0.5b-instruct" / "grpo_lora_b0.yaml"
FAKE_VLLM = """
class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

class LLM:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the stand-in vllm cannot load models")
"""


@pytest.fixture
def pretend_vllm_gpu(monkeypatch, tmp_path):
    """A stand-in ``vllm`` package on sys.path and ``torch.cuda.is_available() == True``: what a GPU box shows."""
    from trl import GRPOConfig, ModelConfig, TrlParser  # noqa: F401 - imported for real before the pretence starts

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    yield
    sys.modules.pop("vllm", None)  # the stand-in imported during the test (monkeypatch restores only what it removed)
    import transformers.utils.import_utils as transformers_imports
    import trl.import_utils as trl_imports

    for module in (trl_imports, transformers_imports):  # forget any "vllm is available" cached during the pretence
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


ON_CPU = ("--use_cpu", "true")


# --- which backend generates -----------------------------------------------------------------------------------


def test_qlora_generates_with_transformers_where_vllm_could_run(pretend_vllm_gpu, capsys):
    lora = parse_recipe_config(grpo, LORA, *ON_CPU, as_run=True)
    check_args(*lora)
    assert lora[1].use_vllm is True  # control: vLLM and a GPU are there, so a LoRA config uses vLLM
    qlora = parse_recipe_config(grpo, QLORA, *ON_CPU, as_run=True)
    check_args(*qlora)
    assert qlora[1].use_vllm is False  # 4-bit: TRL's weight sync to vLLM fails (huggingface/trl#4973)
    assert "trl#4973" in capsys.readouterr().out  # and the recipe says so, in one line


@pytest.mark.parametrize("flag", [["--use_vllm", "false"], ["--use-vllm=false"]], ids=["underscore", "dash"])
def test_explicit_use_vllm_false_beats_use_vllm_if_available(pretend_vllm_gpu, flag):
    parsed = parse_recipe_config(grpo, LORA, *ON_CPU, *flag, as_run=True)
    check_args(*parsed)
    assert parsed[1].use_vllm is False


@pytest.mark.parametrize(
    "version, accepted", [("0.31.0", True), ("0.22.0", True), ("0.32.0", False), ("0.21.1", False)]
)
def test_vllm_outside_trls_range_is_refused_with_the_pin(pretend_vllm_gpu, tmp_path, version, accepted):
    dist = tmp_path / f"vllm-{version}.dist-info"  # next to the stand-in package, found by importlib.metadata
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    if accepted:
        checks.check_vllm(True, "colocate")
    else:
        with pytest.raises(ValueError, match=r"outside the range TRL 1.16 supports .*vllm==0.31.0"):
            checks.check_vllm(True, "colocate")


# --- precision ---------------------------------------------------------------------------------------------------


def share_changed_by_adamw(dtype: torch.dtype, steps: int = 10, lr: float = 1e-5) -> float:
    """Share of N(0, 0.02) weights held in ``dtype`` that AdamW (random gradients) changed after ``steps`` steps."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter((torch.randn(256, 256, generator=gen) * 0.02).to(dtype))
    start = weight.detach().clone()
    optimizer = torch.optim.AdamW([weight], lr=lr, weight_decay=0.0)
    for _ in range(steps):
        weight.grad = torch.randn(256, 256, generator=gen).to(dtype)
        optimizer.step()
    return (weight.detach() != start).float().mean().item()


def test_bf16_weights_lose_most_adamw_updates_float32_master_weights_keep_them():
    # lr 1e-5 (the judge-lab configs): an update of ~1e-5 is below half a bf16 step for most weights of 0.02
    in_bf16, in_float32 = share_changed_by_adamw(torch.bfloat16), share_changed_by_adamw(torch.float32)
    print(f"share of weights changed by 10 AdamW steps at lr 1e-5: bf16 {in_bf16:.1%}, float32 {in_float32:.1%}")
    assert in_bf16 < 0.5 < 0.99 < in_float32


def test_full_finetuning_in_bf16_is_refused_before_any_model_loads(monkeypatch):
    full = CONFIGS / "tiny" / "grpo_cpu.yaml"  # full fine-tuning
    parsed = parse_recipe_config(grpo, full, *ON_CPU, "--dtype", "bfloat16", as_run=True)
    with pytest.raises(ValueError, match="dtype: float32 and keep bf16: true"):
        check_args(*parsed)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # DeepSpeed keeps float32 master weights itself
    check_args(*parsed)


@pytest.mark.heavy  # builds a model
def test_qlora_adapters_move_at_the_configs_learning_rate():
    """TRL casts a quantized model's adapters to bf16; at the QLoRA config's learning rate AdamW must still move
    nearly every lora_A entry (at the old 5e-6, 93% of them never changed in 10 steps)."""
    from peft import LoraConfig, get_peft_model

    config = load_config(QLORA)
    shares = {}
    for lr in (5e-6, config["learning_rate"]):
        torch.manual_seed(0)
        layer = torch.nn.Sequential(torch.nn.Linear(1536, 1536, bias=False))  # Qwen2.5-1.5B's hidden size
        lora = LoraConfig(r=config["lora_r"], lora_alpha=config["lora_alpha"], target_modules=["0"])
        model = get_peft_model(layer, lora)
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            p.data = p.data.to(torch.bfloat16)  # what GRPOTrainer does for a quantized model (grpo_trainer.py)
        [lora_a] = [p for n, p in model.named_parameters() if "lora_A" in n]
        start = lora_a.detach().clone()
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        for _ in range(10):
            for p in params:
                p.grad = torch.randn_like(p)
            optimizer.step()
        shares[lr] = (lora_a.detach() != start).float().mean().item()
    assert shares[5e-6] < 0.2  # the defect, reproduced: most of lora_A frozen by rounding
    assert shares[config["learning_rate"]] > 0.9, shares


# --- generation: RNG, tokenization, vLLM batching -------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = save_tiny_model(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


@pytest.mark.heavy  # builds a model
def test_an_eval_leaves_the_trainers_random_stream_alone(tiny, data_dir):
    from eval.run import evaluate

    model, tokenizer = tiny
    torch.manual_seed(123)
    expected = torch.rand(4)
    settings = {"data": str(data_dir / "gsm8k" / "test.jsonl"), "limit": 2, "max_new_tokens": 4, "temperature": 1.0}
    settings |= {"seed": 7, "progress": False}
    torch.manual_seed(123)
    first = evaluate(model, tokenizer, "gsm8k", **settings)
    assert torch.equal(torch.rand(4), expected)  # the stream continues as if no eval ran
    again = evaluate(model, tokenizer, "gsm8k", **settings)
    assert again["length_tokens"] == first["length_tokens"]  # and the eval itself is still seeded


def bos_tokenizer(tokenizer):
    """The tiny tokenizer made to add a BOS to every encoding, with a chat template that writes it too (Llama-style)."""
    import copy

    from tokenizers.processors import TemplateProcessing

    tok = copy.deepcopy(tokenizer)
    tok.bos_token = "<|endoftext|>"  # a token the tiny model knows (its config's bos_token_id)
    bos = tok.bos_token_id
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[(tok.bos_token, bos)]
    )
    tok.chat_template = "{{ bos_token }}" + tok.chat_template
    assert tok("x")["input_ids"][0] == bos  # the tokenizer does add BOS
    return tok


class RecordingLLM:
    """Stands in for ``vllm.LLM``: records each call; a sample's text is made of its request's seed."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params):
        self.calls.append((prompts, params))
        return [
            SimpleNamespace(
                outputs=[SimpleNamespace(text=f"#### {p.seed}", token_ids=[1, 2], finish_reason="stop")] * p.n
            )
            for p in params
        ]


@pytest.mark.heavy  # builds a model
def test_both_backends_send_the_same_ids_with_one_bos(tiny, pretend_vllm_gpu, monkeypatch):
    from eval.generate import encode_prompts, generate

    model, tokenizer = tiny
    tok = bos_tokenizer(tokenizer)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    prompts = [[{"role": "user", "content": "What is 2+2?"}]]
    [ids] = encode_prompts(tok, prompts)
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    seen = {}
    real_generate = model.generate

    def spy(**kwargs):
        seen["hf"] = kwargs["input_ids"][0].tolist()
        return real_generate(**kwargs)

    monkeypatch.setattr(model, "generate", spy)
    generate(model, tok, prompts, max_new_tokens=2)
    llm = RecordingLLM()
    generate(llm, tok, prompts, max_new_tokens=2, backend="vllm")
    [[vllm_prompt], _] = llm.calls[0]
    assert seen["hf"] == ids == vllm_prompt["prompt_token_ids"]  # token ids, so vLLM adds no second BOS


@pytest.mark.heavy  # builds a model
def test_vllm_gets_all_pending_prompts_in_one_call_and_a_resume_is_exact(tiny, pretend_vllm_gpu, data_dir, tmp_path):
    from eval.folder import SAMPLES_FILE
    from eval.run import evaluate

    _, tokenizer = tiny
    data = str(data_dir / "gsm8k" / "test.jsonl")
    kwargs = dict(data=data, max_new_tokens=4, temperature=1.0, num_samples=2, seed=5, backend="vllm", progress=False)
    kwargs["run_info"] = {"model_fingerprint": "recording-llm"}  # a vLLM model has no weights to fingerprint
    llm = RecordingLLM()
    evaluate(llm, tokenizer, "gsm8k", limit=40, out_dir=tmp_path / "fresh", batch_size=4, **kwargs)
    assert [len(prompts) for prompts, _ in llm.calls] == [40]  # not ten calls of 4
    resumed = RecordingLLM()
    evaluate(resumed, tokenizer, "gsm8k", limit=13, out_dir=tmp_path / "resumed", batch_size=4, **kwargs)  # killed
    evaluate(resumed, tokenizer, "gsm8k", limit=40, out_dir=tmp_path / "resumed", batch_size=4, **kwargs)
    assert [len(prompts) for prompts, _ in resumed.calls] == [13, 27]

    def samples(folder):
        return [row["samples"] for row in read_jsonl(folder / SAMPLES_FILE)]

    assert samples(tmp_path / "resumed") == samples(tmp_path / "fresh")  # per-problem seeds: same samples


def test_rollouts_refuse_an_adapter_with_vllm_before_loading(pretend_vllm_gpu, tmp_path, data_dir, capsys):
    from training_data.rollouts import main

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    data = str(data_dir / "gsm8k" / "test.jsonl")
    command = ["sample", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--adapter", str(adapter), "--backend", "vllm"]
    with pytest.raises(SystemExit) as stop:  # the command line says it in one line, before any model is looked up
        main([*command, "--task", "gsm8k", "--data", data, "--out", str(tmp_path / "o")])
    assert stop.value.code == 2
    assert "would sample it, not the adapter" in capsys.readouterr().err


# --- model building ----------------------------------------------------------------------------------------------


class TrainerBuilt(Exception):
    """Raised by the stand-in trainer: the recipe got as far as building it."""


@pytest.mark.heavy  # builds a model
@pytest.mark.parametrize(
    "module_name, config",
    [
        ("recipes.grpo", "tiny/grpo_cpu.yaml"),
        ("recipes.grpo", "judge_lab/tiny/judge_lab_tiny_checker_b0.04.yaml"),
        ("recipes.dpo", "tiny/dpo_cpu_lora.yaml"),
    ],
)
def test_recipes_pass_attention_and_revision_to_model_loading(module_name, config, monkeypatch, tmp_path, data_dir):
    import importlib

    import trl

    class StandInTrainer:  # a class: the GRPO recipe subclasses it (recipes.monitors.make_monitored_trainer_class)
        def __init__(self, *args, model, **kwargs):
            raise TrainerBuilt(model, kwargs["args"].model_init_kwargs)

    monkeypatch.setattr(trl, "GRPOTrainer", StandInTrainer)
    monkeypatch.setattr(trl, "DPOTrainer", StandInTrainer)
    module = importlib.import_module(module_name)
    flags = [
        "--attn_implementation",
        "eager",
        "--model_revision",
        "v1.2",
        "--output_dir",
        str(tmp_path / "out"),
        "--model_name_or_path",
        str(tmp_path / "model"),
        "--build_tiny_model",  # the tiny model, built there
        "true",
        "--report_to",
        "none",
    ]
    if module_name == "recipes.dpo":  # DPO checks its preference data before building the model
        from eval.jsonl import write_jsonl
        from training_data.rollouts import reference_rollouts

        rows = reference_rollouts("gsm8k_train", str(data_dir / "gsm8k" / "train.jsonl"), limit=4)
        flags += ["--data", str(write_jsonl(rows, tmp_path / "rollouts.jsonl"))]
    parsed = parse_recipe_config(module, CONFIGS / config, *flags, as_run=True)
    with pytest.raises(TrainerBuilt) as built:
        module.main(*parsed)
    kwargs = built.value.args[1]
    assert kwargs["attn_implementation"] == "eager" and kwargs["revision"] == "v1.2"
    assert kwargs["dtype"] == "float32"


@pytest.mark.heavy  # builds a model
def test_merge_drift_bench_tells_bf16_from_float32():
    """bench/lora_merge_drift.py's measurement on the tiny model: bf16 merge/unmerge cycles move the base, float32
    ones (almost) do not. The GPU run of the bench cannot be debugged there, so its measuring code is run here."""
    from bench.lora_merge_drift import measure

    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    bf16, fp32 = (measure(model, ids, dtype, cycles=30, lr=1e-3, rank=4) for dtype in ("bfloat16", "float32"))
    assert bf16["share_of_weights_changed"] > 0.1 and bf16["max_abs_logit_change"] > 0
    assert fp32["max_abs_drift"] < 1e-6 < bf16["max_abs_drift"]
