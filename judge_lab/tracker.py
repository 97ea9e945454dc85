"""What the judge lab records per GRPO step, built on TRL's own hooks (no GRPO code is rewritten here).

- ``AnswerTap`` wraps the training reward (same ``__name__``, so TRL's ``rewards/<name>/mean`` keys do not change)
  and, through TRL's reward-side hooks, adds the ``correct`` and ``n_tokens`` columns to the completions table
  (``log_extra``) and the share correct plus the tracked answers' log-probabilities to the step's metrics
  (``log_metric``), so they reach ``log.jsonl`` and W&B like any TRL metric.
- ``ProbabilityTracker`` (a ``TrainerCallback``) measures, before each optimizer step (i.e. under the policy that
  generates that step's answers), the log-probability of named answers under the current policy and under the
  frozen reference, and the KL between them on those answers (TRL's k3 estimator summed over the answer's tokens).
  At the first step the policy IS the reference, so that KL is exactly 0: a KL penalty cannot hold back a jump
  that has not happened yet.
- ``LabStepLogger`` (a ``TrainerCallback``) writes one JSON line per step to ``steps.jsonl``: every answer with its
  reward, advantage, token length, correctness and judge score; each group's mean and std; the number correct; the
  tracker's values. The per-answer values are read from the trainer's completions buffer (``trainer._logs``, the
  data TRL itself logs as its completions table), so the advantages are TRL's own, not recomputed.

>>> rows = lab_dataset("Priya buys four boxes of six muffins and gives away seven. How many are left?", "17")
>>> rows[0]["answer"], rows[0]["prompt"][0]["content"].splitlines()[-1]
('17', "Finish your reply with a line 'Answer: <number>'.")
>>> k3_kl([-1.0, -2.0], [-1.0, -2.0])
0.0
"""

from __future__ import annotations

import math
from pathlib import Path

from transformers import TrainerCallback

from eval.jsonl import append_jsonl
from rewards.judge import answer_line_correctness_reward
from rewards.totals import weighted_totals

LAB_INSTRUCTION = "Finish your reply with a line 'Answer: <number>'."


def lab_dataset(question: str, answer: str, instruction: str = LAB_INSTRUCTION, copies: int = 1):
    """The single-prompt training set: ``copies`` identical rows with ``prompt``, ``question`` and ``answer``."""
    from datasets import Dataset

    prompt = [{"role": "user", "content": f"{question.strip()}\n\n{instruction}"}]
    return Dataset.from_list([{"prompt": prompt, "question": question.strip(), "answer": str(answer)}] * copies)


def k3_kl(policy_logps: list[float], ref_logps: list[float]) -> float:
    """Sum over tokens of TRL's per-token KL estimate ``exp(ref - pol) - (ref - pol) - 1`` (0 when they agree)."""
    total = 0.0
    for pol, ref in zip(policy_logps, ref_logps, strict=True):
        total += math.exp(ref - pol) - (ref - pol) - 1.0
    return total


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_") or "answer"


class ProbabilityTracker(TrainerCallback):
    """Log-probabilities of named answers to the lab's prompt under the current policy and the frozen reference.

    Args:
        prompt: the chat messages of the lab's prompt.
        answers: ``{name: answer text}``; each is scored as the complete reply (its tokens plus the end-of-turn token).
        temperature: logits are divided by it, as TRL does for its own log-probabilities.

    The reference is the trainer's ``ref_model`` when it has one (``beta > 0``), the base model with adapters off for
    LoRA, else the policy as it was when training began (computed once: the reference is frozen).
    ``latest`` holds the last measurement: ``{"step": s, name: {"logp_policy", "logp_ref", "kl", "n_tokens"}}``.
    """

    def __init__(self, prompt: list[dict], answers: dict[str, str], temperature: float = 1.0):
        if not answers:
            raise ValueError("tracked answers are empty: name at least one, e.g. {'short': 'Answer: 3.'}")
        self.prompt, self.answers, self.temperature = prompt, dict(answers), temperature
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
        import torch

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
        """Measure now and remember it as ``latest`` (and in ``history``)."""
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
            f"tracked/{_safe_name(name)}/{key}": values[key]
            for name, values in self.latest.items()
            if name != "step"
            for key in ("logp_policy", "logp_ref", "kl")
        }

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if getattr(self.trainer, "ref_model", None) is None and not hasattr(model, "disable_adapter"):
            self._initial_ref = self._token_logps(model, processing_class)  # the frozen reference = the start

    def on_step_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.measure(model, processing_class, state.global_step + 1)  # the step about to be generated and taken

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.measure(model, processing_class, state.global_step)
        self.latest["after_training"] = True


class AnswerTap:
    """Wraps the training reward: returns its scores unchanged and logs correctness, token lengths and the tracker.

    >>> tap = AnswerTap(lambda completions, **kw: [0.5] * len(completions))
    >>> extra, metrics = {}, {}
    >>> tap(prompts=["q"] * 2, completions=["Answer: 17", "Answer: 3."], completion_ids=[[1, 2, 3], [4]],
    ...     answer=["17", "17"], log_extra=extra.__setitem__, log_metric=metrics.__setitem__)
    [0.5, 0.5]
    >>> extra, metrics
    ({'correct': [True, False], 'n_tokens': [3, 1]}, {'lab/share_correct': 0.5})
    """

    def __init__(self, reward, tracker: ProbabilityTracker | None = None, checker=answer_line_correctness_reward):
        self.reward = reward
        self.tracker = tracker
        self.checker = checker  # the verdict logged as ``correct`` (the film's lab policy writes "#### N" instead)
        self.__name__ = getattr(reward, "__name__", type(reward).__name__)

    def __call__(self, prompts, completions, completion_ids=None, answer=None, log_extra=None, log_metric=None, **kw):
        scores = self.reward(
            prompts=prompts,
            completions=completions,
            completion_ids=completion_ids,
            answer=answer,
            log_extra=log_extra,
            log_metric=log_metric,
            **kw,
        )
        correct = [bool(c) for c in self.checker(completions=completions, answer=answer)]
        if log_extra is not None:
            log_extra("correct", correct)
            if completion_ids is not None:
                log_extra("n_tokens", [len(ids) for ids in completion_ids])
        if log_metric is not None:
            log_metric("lab/share_correct", sum(correct) / max(len(correct), 1))
            for name, value in (self.tracker.metrics() if self.tracker else {}).items():
                log_metric(name, value)
        return scores


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


class LabStepLogger(TrainerCallback):
    """One JSON line per logged step to ``path``: every answer with its reward, advantage, length and verdict.

    Needs ``logging_steps: 1`` and one generation per optimizer step (the lab's settings), so that each log holds
    exactly the answers of one step. Call ``attach(trainer)`` after building the trainer.
    """

    def __init__(self, path: str | Path, tracker: ProbabilityTracker | None = None):
        self.path = Path(path)
        self.tracker = tracker
        self.trainer = None

    def attach(self, trainer) -> LabStepLogger:
        self.trainer = trainer
        return self

    def step_record(self, step: int, logs: dict) -> dict:
        import torch
        from trl.trainer.utils import nanstd

        buffer = self.trainer._logs  # TRL's completions-table buffer: the latest generation batch
        names = list(buffer["rewards"])
        weights = self.trainer.reward_weights.tolist()
        total = torch.tensor(weighted_totals([list(buffer["rewards"][n]) for n in names], weights))  # [B], as TRL
        group = self.trainer.num_generations
        grouped = total.view(-1, group)  # [prompts, G]
        extra = buffer["extra"]
        answers = []
        for i, completion in enumerate(buffer["completion"]):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            answers.append(
                {
                    "text": text,
                    "reward": _finite(total[i].item()),
                    "advantage": buffer["advantages"][i],
                    "n_tokens": extra["n_tokens"][i] if "n_tokens" in extra else None,
                    "correct": extra["correct"][i] if "correct" in extra else None,
                    "judge_score": extra["judge_score"][i] if "judge_score" in extra else None,
                    **{f"reward/{n}": _finite(buffer["rewards"][n][i]) for n in names},
                }
            )
        lengths = [a["n_tokens"] for a in answers if a["n_tokens"] is not None]
        judged = [a["judge_score"] for a in answers if a["judge_score"] is not None]
        record = {
            "step": step,
            "n_answers": len(answers),
            "n_correct": sum(bool(a["correct"]) for a in answers),
            "mean_reward": _finite(torch.nanmean(total).item()),
            "group_mean": [_finite(v) for v in torch.nanmean(grouped, dim=1).tolist()],
            "group_std": [_finite(v) for v in nanstd(grouped, dim=1).tolist()],
            "mean_n_tokens": sum(lengths) / len(lengths) if lengths else None,
            "mean_judge_score": sum(judged) / len(judged) if judged else None,
            "n_judge_unscored": sum(a["judge_score"] is None for a in answers) if "judge_score" in extra else None,
            "kl": _finite(logs.get("kl")),
            "answers": answers,
        }
        if self.tracker is not None and self.tracker.latest.get("step") == step:
            record["tracked"] = {k: v for k, v in self.tracker.latest.items() if k != "step"}
        return record

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "reward" not in logs or self.trainer is None:
            return  # the end-of-training summary log holds no answers
        record = self.step_record(state.global_step, logs)
        append_jsonl(record, self.path)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.tracker is not None and self.tracker.latest.get("after_training"):
            tracked = {k: v for k, v in self.tracker.latest.items() if isinstance(v, dict)}
            append_jsonl({"step": state.global_step, "after_training": True, "tracked": tracked}, self.path)
