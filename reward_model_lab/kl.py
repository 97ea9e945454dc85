"""The leash curve of a GRPO run against a reward model: true held-out accuracy, the proxy reward and KL(policy ||
start), measured every few steps."""

from __future__ import annotations

import math
from itertools import islice
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, TrainerCallback

from eval.generate import encode_prompts, forked_rng
from eval.jsonl import append_jsonl, iter_jsonl
from eval.tasks import get_task
from recipes.grpo_setup import build_reward_model
from rewards.correctness import gsm8k_correctness_reward
from rewards.reward_model import RewardModelReward

CURVE_FILE = "curve.jsonl"


def read_rows(path, limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (all when None) of a JSONL file, through eval's strict reader."""
    return list(islice((row for _, row in iter_jsonl(Path(path), "a file this experiment wrote: rerun it")), limit))


def sample_with_kl(model, ref_model, tokenizer, prompts: list[list[dict]], max_new_tokens: int, seed: int):
    """One answer per prompt sampled at temperature 1 from ``model``, and per answer the sum over its tokens (up to
    and including the end-of-sequence token) of ``log pi - log pi_ref``: its mean estimates KL(pi || pi_ref)."""
    ids = encode_prompts(tokenizer, prompts)
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])  # left padding: [B, P]
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    was_training = model.training
    model.eval()
    with torch.no_grad(), forked_rng(seed, model.device):  # the trainer's own sampling stream is left untouched
        out = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
        )
        answer = out[:, width:]  # [B, C]
        eos = torch.tensor(
            sorted(
                {
                    tokenizer.eos_token_id,
                    *(
                        [model.generation_config.eos_token_id]
                        if isinstance(model.generation_config.eos_token_id, int)
                        else model.generation_config.eos_token_id or []
                    ),
                }
            )
        )
        ended = torch.isin(answer, eos).int()
        keep = (ended.cumsum(1) - ended) == 0  # tokens up to and including the first end-of-sequence token
        full_mask = torch.cat([mask, keep.int()], dim=1)

        def logprobs(m):
            logits = m(input_ids=out, attention_mask=full_mask).logits[:, width - 1 : -1].float()  # [B, C, V]
            return torch.log_softmax(logits, -1).gather(-1, answer.unsqueeze(-1)).squeeze(-1)  # [B, C]

        kl = ((logprobs(model) - logprobs(ref_model)) * keep).sum(1)  # [B]
    model.train(was_training)
    texts = [tokenizer.decode(a[k], skip_special_tokens=True) for a, k in zip(answer, keep, strict=True)]
    return texts, kl.tolist()


class LeashCurve(TrainerCallback):
    """At step 0, every ``every`` steps and at the end, on ``eval_n`` held-out problems: the true accuracy (greedy,
    the checker), the reward model's mean score of one sampled answer per problem and KL(policy || warm start) on those
    samples, to ``curve.jsonl`` and, as ``leash/*``, the run's log."""

    def __init__(self, context, rm, every: int, eval_n: int):
        self.context, self.rm, self.every, self.eval_n = context, rm, every, eval_n
        self.path = context.output_dir / CURVE_FILE
        self.run_files = (CURVE_FILE,)  # a resumed run appends to it
        self.ref = self.tokenizer = None
        self.rows: list[dict] = []

    def measure(self, model, tokenizer, step: int) -> dict:
        args = self.context.script_args
        accuracy = self.context.held_out(model, tokenizer, step)["eval/accuracy"]
        task, problems = get_task(args.eval_task), read_rows(args.eval_data, self.eval_n)
        prompts = [task.prompt(p["question"]) for p in problems]
        seed, budget = self.context.training_args.seed + step, self.context.training_args.max_completion_length
        texts, kls = sample_with_kl(model, self.ref, tokenizer, prompts, budget, seed)
        scores, _ = self.rm.score(prompts, texts)
        correct = gsm8k_correctness_reward(texts, answer=[task.gold(p) for p in problems])
        kl = sum(kls) / len(kls)
        row = {
            "step": step,
            "rm/true_accuracy": accuracy,
            "rm/proxy_reward": sum(scores) / len(scores),
            "rm/kl": kl,
            "rm/sqrt_kl": math.sqrt(max(kl, 0.0)),
            "rm/sampled_accuracy": sum(c or 0 for c in correct) / len(correct),
        }
        wrong = sorted(((sc, t) for sc, t, c in zip(scores, texts, correct, strict=True) if not c), reverse=True)
        self.rows.append(row)
        append_jsonl(row | {"top_wrong": wrong[:5]}, self.path)
        # leash/*, not rm/*: the reward model's own rm/* values of the training batch share the log line
        self.context.log({f"leash/{k.split('/', 1)[1]}": v for k, v in row.items() if k != "step"})
        return row

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.tokenizer = processing_class
        self.ref = AutoModelForCausalLM.from_pretrained(self.context.model_args.model_name_or_path).eval()
        if state.global_step == 0:  # a resumed run measured its start already
            self.measure(model, processing_class, 0)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.measure(model, self.tokenizer, state.global_step)
            control.should_log = True
        return control


def leash_curve(context) -> LeashCurve:
    """The GRPO recipe's callback hook (``callbacks: [reward_model_lab.overoptimisation:leash_curve]``); the proxy is
    the run's reward model, else ``reward_model_path`` (the checker control's)."""
    args = context.script_args
    if args.monitor_eval_steps < 1 or not args.eval_data:
        raise ValueError(
            "the leash curve measures the held-out set every monitor_eval_steps: set monitor_eval_steps (e.g. 10) and "
            "eval_data (the lab's held-out .jsonl)"
        )
    rm = next((f for f in context.reward_funcs if isinstance(f, RewardModelReward)), None)
    return LeashCurve(
        context, rm or build_reward_model(args.reward_model_path), args.monitor_eval_steps, args.monitor_eval_limit
    )
