"""recipes.cpu_speed: the two CPU speed-ups change no number, and do remove the work they claim to."""

import pytest
import torch
import trl
import trl.trainer.utils as trl_utils

from recipes.cpu_speed import completion_positions_only, fast_cpu_trainer
from recipes.grpo_setup import grpo_trainer
from recipes.tiny_model import build_model, build_tokenizer


def tiny(seed=0):
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed).eval()
    return tokenizer, model


def scored(model, ids, labels):
    """Per-token log-probabilities and entropies through TRL's fused head, and the rows the head projected."""
    rows = []
    apply = trl_utils._ChunkedLogProbFunction.apply

    def spy(hidden, *rest):
        rows.append(hidden.shape[0])
        return apply(hidden, *rest)

    trl_utils._ChunkedLogProbFunction.apply = spy
    try:
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
    finally:
        trl_utils._ChunkedLogProbFunction.apply = apply
    return out, rows


@pytest.mark.heavy  # builds a model
def test_completion_positions_only_scores_the_same_tokens_with_fewer_rows():
    _, model = tiny()
    trl_utils.add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 20))
    labels = ids.clone()
    labels[:, :12] = -100  # a prompt of 12 tokens: no label, never scored
    with torch.no_grad():
        full, full_rows = scored(model, ids, labels)
        with completion_positions_only():
            compact, compact_rows = scored(model, ids, labels)
    mask = labels[:, 1:] != -100  # the head scores position t against the label at t + 1
    assert full_rows == [3 * 19] and compact_rows == [int(mask.sum())] == [3 * 8]  # the prompt is not projected
    for name in ("log_probs", "entropy"):
        a, b = getattr(full, name), getattr(compact, name)
        assert torch.allclose(a[mask], b[mask], atol=1e-6), name
    assert trl_utils._use_triton(torch.device("cpu")) is False  # the context restores TRL's test


def test_completion_positions_only_restores_trls_test_after_an_error():
    before = trl_utils._use_triton
    try:
        with completion_positions_only():
            assert trl_utils._use_triton(torch.device("cpu")) is True
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert trl_utils._use_triton is before


class Recorder:
    """Stands in for GRPOTrainer: records whether each call ran under autocast and under the compact head."""

    def __init__(self, bf16):
        self.args = type("Args", (), {"bf16": bf16})()
        self.accelerator = type("Accelerator", (), {"device": torch.device("cpu")})()
        self.calls = []

    def _generate(self, prompts):
        self.calls.append(("generate", torch.is_autocast_enabled("cpu")))
        return prompts

    def _get_per_token_logps_and_entropies(self, *args):
        self.calls.append(("score", trl_utils._use_triton(torch.device("cpu"))))
        return args


def test_fast_cpu_trainer_generates_in_one_autocast_region_only_under_bf16():
    fast = fast_cpu_trainer(Recorder)
    assert fast.__name__ == "Recorder"
    on, off = fast(bf16=True), fast(bf16=False)
    for trainer in (on, off):
        assert trainer._generate(["p"]) == ["p"]
        assert trainer._get_per_token_logps_and_entropies(1, 2) == (1, 2)
    assert on.calls == [("generate", True), ("score", True)]
    assert off.calls == [("generate", False), ("score", True)]


@pytest.mark.heavy  # builds a model
def test_generation_inside_one_autocast_region_gives_the_same_tokens():
    """torch keeps autocast's casts inside an outer region: the same bf16 weights, so the same greedy tokens."""
    tokenizer, model = tiny(seed=1)
    ids = tokenizer("12 + 30 =", return_tensors="pt").input_ids
    settings = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": tokenizer.pad_token_id or 0}

    def per_forward():  # accelerate's way: a region around each forward
        forward = model.forward
        model.forward = torch.autocast("cpu", dtype=torch.bfloat16)(forward)
        try:
            return model.generate(ids, **settings)
        finally:
            model.forward = forward

    with torch.no_grad():
        each = per_forward()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            once = per_forward()
    assert torch.equal(each, once)


class StubTrainer:
    """Stands in for trl.GRPOTrainer in grpo_trainer: keeps its keyword arguments."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def _generate(self, prompts):
        return prompts


def test_the_recipe_trains_with_the_speed_ups_only_on_a_cpu_under_bf16(monkeypatch):
    monkeypatch.setattr(trl, "GRPOTrainer", StubTrainer)
    cpu = torch.device("cpu")

    def uses_them(bf16, use_cpu=True, device=cpu, cpu_speedups=True):
        args = type("Args", (), {"bf16": bf16, "use_cpu": use_cpu, "device": device})()
        trainer = grpo_trainer(args=args, cpu_speedups=cpu_speedups)
        assert trainer.kwargs["args"] is args  # the trainer's own arguments reach it
        return any(cls.__module__ == "recipes.cpu_speed" for cls in type(trainer).__mro__)

    assert uses_them(bf16=True)
    assert uses_them(bf16=True, use_cpu=False)  # no accelerator: the run is on the CPU anyway
    assert not uses_them(bf16=False)  # float32: TRL's trainer as it is (not what was measured)
    assert not uses_them(bf16=True, cpu_speedups=False)  # the option turns them off
    assert not uses_them(bf16=True, use_cpu=False, device=torch.device("meta"))  # an accelerator's run
