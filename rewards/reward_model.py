"""A learned Bradley-Terry reward model (``recipes/reward_model.py`` trains one) as a TRL-contract reward.

Scores the text as TRL's ``GRPOTrainer`` builds it for a model reward, and logs ``rm/proxy_reward`` beside
``rm/true_accuracy`` (the checker's verdict), so proxy and truth land on one W&B panel.

>>> import os; os.environ.pop("LEASH_REWARD_MODEL", None) and None
>>> RewardModelReward()(prompts=[[{"role": "user", "content": "1+1?"}]], completions=["#### 2"])
Traceback (most recent call last):
...
ValueError: the reward_model reward needs a trained reward model: set LEASH_REWARD_MODEL to the output_dir of `python -m recipes.reward_model` (or build one with rewards.reward_model.RewardModelReward(path))
"""  # noqa: E501

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from rewards.completions import completion_text, length_batches
from rewards.correctness import gsm8k_correctness_reward, math_correctness_reward

logger = logging.getLogger(__name__)

ENV_PATH, ENV_MAX_LENGTH, ENV_BATCH_SIZE = (
    "LEASH_REWARD_MODEL",
    "LEASH_REWARD_MODEL_MAX_LENGTH",
    "LEASH_REWARD_MODEL_BATCH_SIZE",
)
ENV_ANSWER_STYLE = "LEASH_REWARD_MODEL_ANSWER_STYLE"  # rm/true_accuracy checks "gsm8k" (default) or "math"
DEFAULT_MAX_LENGTH = 1024  # RewardConfig's default max_length: what the recipe trains on unless told otherwise
DEFAULT_BATCH_SIZE = 32


def check_reward_model(path: str | Path) -> None:
    """Refuse, before loading any weight, a folder that is missing, not a one-label sequence classifier, or has a
    tokenizer with no chat template.

    >>> check_reward_model("runs/no/such/rm")
    Traceback (most recent call last):
    ...
    FileNotFoundError: reward model runs/no/such/rm does not exist: train one with `python -m recipes.reward_model --config recipes/configs/tiny/reward_model_cpu.yaml` and point reward_model_path (or LEASH_REWARD_MODEL, or --reward-model) at its output_dir
    """  # noqa: E501
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"reward model {path} does not exist: train one with `python -m recipes.reward_model --config "
            "recipes/configs/tiny/reward_model_cpu.yaml` and point reward_model_path (or LEASH_REWARD_MODEL, or "
            "--reward-model) at its output_dir"
            if not path.exists()
            else f"reward model {path} has no config.json: give the output_dir of `python -m recipes.reward_model`"
        )
    config = json.loads((path / "config.json").read_text())
    architectures = config.get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise ValueError(
            f"{path} is a {architectures or 'model without architectures'}, not a sequence classifier: a reward model "
            "scores with a one-label head (AutoModelForSequenceClassification). Train one from this model with "
            "`python -m recipes.reward_model --model_name_or_path " + str(path) + "`"
        )
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 1)
    if labels != 1:
        raise ValueError(f"{path} has {labels} labels: a reward model has one score (num_labels=1)")
    check_chat_template(path)


def check_chat_template(path: str | Path) -> None:
    """The tokenizer in ``path`` must have a chat template: the reward model reads conversations through it, in
    training and in scoring alike."""
    from transformers import AutoTokenizer  # seconds; rewards (and `eval score`) import without transformers

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"the tokenizer of {path} has no chat template: the reward model reads prompt + answer as a conversation. "
            "Use an instruct model's tokenizer, or set chat_template_path: to a tokenizer or .jinja file"
        )


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name}={value!r}: give a positive integer")
    return int(value)


class RewardModelReward:
    """TRL reward: a trained reward model's score for prompt + completion (unbounded); long ones keep their LAST tokens,
    where the final answer is."""

    def __init__(
        self,
        path: str | Path | None = None,
        max_length: int | None = None,
        batch_size: int | None = None,
        name: str = "reward_model_reward",
    ):
        self.path, self.max_length, self.batch_size, self.__name__ = path, max_length, batch_size, name
        self.model = self.tokenizer = None

    def __repr__(self) -> str:
        return f"RewardModelReward({str(self.path)!r})" if self.path else "RewardModelReward(LEASH_REWARD_MODEL)"

    def __getstate__(self):  # picklable for async workers: the model is loaded again where it is used
        return {**self.__dict__, "model": None, "tokenizer": None}

    def load(self) -> RewardModelReward:
        """Load the model and tokenizer once (eval mode, the process's device)."""
        if self.model is not None:
            return self
        from accelerate import PartialState  # accelerate, transformers: ~3 s; rewards import without them
        from transformers import AutoModelForSequenceClassification, AutoTokenizer  # as accelerate

        if self.path is None:
            self.path = os.environ.get(ENV_PATH)
            if not self.path:
                raise ValueError(
                    f"the reward_model reward needs a trained reward model: set {ENV_PATH} to the output_dir of "
                    "`python -m recipes.reward_model` (or build one with rewards.reward_model.RewardModelReward(path))"
                )
        self.max_length = self.max_length or _env_int(ENV_MAX_LENGTH, DEFAULT_MAX_LENGTH)
        self.batch_size = self.batch_size or _env_int(ENV_BATCH_SIZE, DEFAULT_BATCH_SIZE)
        check_reward_model(self.path)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForSequenceClassification.from_pretrained(str(self.path), dtype="float32")
        model.config.pad_token_id = self.tokenizer.pad_token_id  # the head reads the last non-pad token
        self.model = model.to(PartialState().device).eval()
        return self

    def texts(self, prompts, completions) -> list[str]:
        """prompt + completion through the chat template, as TRL's GRPOTrainer and RewardTrainer build them."""
        from trl.data_utils import apply_chat_template  # imports transformers: as in load

        out = []
        for prompt, completion in zip(prompts, completions, strict=True):
            if isinstance(prompt, str):  # plain text: TRL concatenates
                out.append(prompt + completion_text(completion))
                continue
            answer = [{"role": "assistant", "content": completion_text(completion)}]
            out.append(apply_chat_template({"messages": list(prompt) + answer}, self.tokenizer)["text"])
        return out

    def score(self, prompts, completions) -> tuple[list[float], float]:
        """Scores, and the share of sequences cut to ``max_length``."""
        import torch  # as in load

        self.load()
        texts = self.texts(prompts, completions)
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        cut = sum(len(x) > self.max_length for x in ids)
        ids = [x[-self.max_length :] for x in ids]  # keep the end: the final answer is what the model judges
        scores: dict[int, float] = {}
        device, pad = next(self.model.parameters()).device, self.tokenizer.pad_token_id
        with torch.inference_mode():
            for rows in length_batches([len(x) for x in ids], self.batch_size):
                chunk = [ids[i] for i in rows]
                width = max(len(x) for x in chunk)
                input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in chunk], device=device)  # [b, T]
                mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in chunk], device=device)
                logits = self.model(input_ids=input_ids, attention_mask=mask).logits  # [b, 1]
                scores.update(zip(rows, logits[:, 0].float().tolist(), strict=True))
        return [scores[i] for i in range(len(ids))], cut / max(len(ids), 1)

    def __call__(self, prompts, completions, answer=None, log_metric=None, **kwargs) -> list[float]:
        scores, truncated = self.score(prompts, completions)
        if log_metric is not None and scores:
            log_metric("rm/proxy_reward", sum(scores) / len(scores))
            log_metric("rm/truncated_frac", truncated)
            if answer is not None:
                style = os.environ.get(ENV_ANSWER_STYLE, "gsm8k")
                checker = math_correctness_reward if style == "math" else gsm8k_correctness_reward
                verdicts = checker(completions, answer=answer)
                known = [v for v in verdicts if v is not None]
                if known:
                    log_metric("rm/true_accuracy", sum(known) / len(known))
        return scores


__all__ = ["RewardModelReward", "check_chat_template", "check_reward_model"]
