"""Tracked answers: the log-probability of named replies to a training prompt under the policy and the frozen
reference, measured before every optimizer step.

Logged as ``tracked/<name>/logp_policy``, ``logp_ref`` and ``kl`` (TRL's k3 estimator over the answer's tokens). A
known hack reply tracked this way shows the policy moving towards it long before it is sampled often. The first
step's KL is exactly 0 (the policy is the reference): a KL penalty cannot hold back a jump that has not happened yet.

>>> k3_kl([-1.0, -2.0], [-1.0, -2.0])
0.0
>>> safe_name("short wrong!")
'short_wrong'
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from transformers import TrainerCallback


def k3_kl(policy_logps: list[float], ref_logps: list[float]) -> float:
    """Sum over tokens of TRL's per-token KL estimate ``exp(ref - pol) - (ref - pol) - 1`` (0 when they agree)."""
    total = 0.0
    for pol, ref in zip(policy_logps, ref_logps, strict=True):
        total += math.exp(ref - pol) - (ref - pol) - 1.0
    return total


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_") or "answer"


def check_tracked(names: list[str], answers: list[str]) -> None:
    """``tracked_names`` and ``tracked_answers`` must be parallel lists of distinct names.

    >>> check_tracked(["short"], ["Answer: 3.", "Answer: 17"])
    Traceback (most recent call last):
    ...
    ValueError: tracked_names (1) and tracked_answers (2) must be parallel lists: one name per tracked answer text
    """
    if len(names) != len(answers):
        raise ValueError(
            f"tracked_names ({len(names)}) and tracked_answers ({len(answers)}) must be parallel lists: one name per "
            "tracked answer text"
        )
    if len({safe_name(n) for n in names}) != len(names):
        raise ValueError(f"tracked_names {names} repeat a name (after non-alphanumerics become '_'): use distinct ones")


class ProbabilityTracker(TrainerCallback):
    """Log-probabilities of named answers to one prompt under the current policy and the frozen reference.

    Each answer is scored as the complete reply, end-of-turn token included. The reference is the trainer's
    ``ref_model``, the base model with adapters off for LoRA, else the policy as training (or a resume) began. Call
    ``attach(trainer)`` after building the trainer.
    """

    def __init__(
        self,
        prompt: list[dict],
        answers: dict[str, str],
        temperature: float = 1.0,
        log: Callable[[dict], None] | None = None,
    ):
        if not answers:
            raise ValueError("tracked answers are empty: name at least one, e.g. {'short': 'Answer: 3.'}")
        self.prompt, self.answers, self.temperature, self.log = prompt, dict(answers), temperature, log
        self.trainer = None  # set by attach(): the reference model lives on the trainer
        self.latest: dict = {}
        self.history: list[dict] = []
        self._initial_ref: dict[str, list[float]] | None = None

    def attach(self, trainer) -> ProbabilityTracker:
        self.trainer = trainer
        return self

    def _sequences(self, tokenizer):
        text = tokenizer.apply_chat_template(self.prompt, tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(text, add_special_tokens=False).input_ids
        for name, answer in self.answers.items():
            answer_ids = tokenizer(answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
            yield name, prompt_ids, answer_ids

    def _token_logps(self, model, tokenizer) -> dict[str, list[float]]:
        was_training = model.training
        model.eval()  # no dropout: the policy and the reference must be compared on equal terms
        try:
            out = {}
            with torch.no_grad():
                for name, prompt_ids, answer_ids in self._sequences(tokenizer):
                    ids = torch.tensor([prompt_ids + answer_ids], device=model.device)
                    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float() / self.temperature
                    logps = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt_ids) :, None])[:, 0]
                    out[name] = logps.tolist()  # [answer tokens]
            return out
        finally:
            model.train(was_training)

    def _reference_logps(self, model, tokenizer) -> dict[str, list[float]]:
        ref_model = getattr(self.trainer, "ref_model", None)
        if ref_model is not None:
            return self._token_logps(ref_model, tokenizer)
        if hasattr(model, "disable_adapter"):  # PEFT: the reference is the base model
            with model.disable_adapter():
                return self._token_logps(model, tokenizer)
        if self._initial_ref is None:
            self._initial_ref = self._token_logps(model, tokenizer)
        return self._initial_ref

    def measure(self, model, tokenizer, step: int) -> dict:
        policy = self._token_logps(model, tokenizer)
        reference = self._reference_logps(model, tokenizer)
        record = {"step": step}
        for name in self.answers:
            record[name] = {
                "logp_policy": sum(policy[name]),
                "logp_ref": sum(reference[name]),
                "kl": k3_kl(policy[name], reference[name]),
                "n_tokens": len(policy[name]),
            }
        self.latest = record
        self.history.append(record)
        return record

    def metrics(self) -> dict[str, float]:
        """The latest measurement as flat metric names (``tracked/<name>/logp_policy`` ...)."""
        return {
            f"tracked/{safe_name(name)}/{key}": values[key]
            for name, values in self.latest.items()
            if isinstance(values, dict)
            for key in ("logp_policy", "logp_ref", "kl")
        }

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if getattr(self.trainer, "ref_model", None) is None and not hasattr(model, "disable_adapter"):
            self._initial_ref = self._token_logps(model, processing_class)  # the frozen reference = the start

    def on_step_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.measure(model, processing_class, state.global_step + 1)  # the step about to be generated and taken
        if self.log is not None:
            self.log(self.metrics())

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.measure(model, processing_class, state.global_step)
        self.latest["after_training"] = True


__all__ = ["ProbabilityTracker", "check_tracked", "k3_kl", "safe_name"]
