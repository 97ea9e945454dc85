"""Online dynamic sampling (DAPO, Yu et al. 2025): a generation batch trains only on groups that teach something.

A group whose completions all score alike has advantage 0: tokens in the loss's denominator, no gradient. Such groups
are replaced by groups of fresh prompts (seeded by the run's seed and step) for at most ``max_rounds`` extra rounds;
if the batch is still short, the scheduled batch's own degenerate groups fill it. Each kept group keeps its own
round's advantages, so only per-group advantages are allowed. ``dynamic_sampling/degenerate_kept_share`` is above 0
only when the cap was hit; TRL's and the monitors' metrics cover every round generated.

One process only (a group may straddle two ranks' batches): ``check_dynamic_sampling`` refuses the rest before any
model loads.

>>> check_dynamic_sampling(True, 0)
Traceback (most recent call last):
...
ValueError: dynamic_sampling_max_rounds is 0: set it to 1 or more (extra generation rounds per batch), or set dynamic_sampling: false
"""  # noqa: E501

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from trl.trainer.utils import nanstd

METRIC = "dynamic_sampling/"
# Per-row tensors of TRL 1.16's generation output for a text model, with the side and the value they are padded with
# (None: no padding, one value a row). Any other key is refused rather than concatenated blindly.
PADDING = {
    "prompt_ids": ("left", "pad"),
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", "pad"),
    "completion_mask": ("right", 0),
    "tool_mask": ("right", 1),  # TRL's own padding value
    "old_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0),
    "sampling_per_token_logps": ("right", 0.0),
    "importance_sampling_ratio": ("right", 1.0),  # exp(0): a masked token's ratio
    "advantages": (None, None),
}


def check_dynamic_sampling(
    enabled: bool,
    max_rounds: int,
    *,
    scale_rewards: str = "group",
    aggregation: str = "sum_then_normalize",
    processes: int = 1,
) -> None:
    """Refuse, in one line with the fix, a dynamic-sampling setting that cannot work (nothing to check when off).
    ``scale_rewards`` as TRL's ``GRPOConfig`` leaves it (a bool made a name); a group of one completion, which would
    always be degenerate, is refused by ``GRPOConfig`` itself."""
    if not enabled:
        return
    off = "or set dynamic_sampling: false"
    if max_rounds < 1:
        raise ValueError(
            f"dynamic_sampling_max_rounds is {max_rounds}: set it to 1 or more (extra generation rounds per batch), "
            f"{off}"
        )
    if scale_rewards == "batch":
        raise ValueError(
            "dynamic_sampling keeps each group's advantages from its own round, and scale_rewards: batch divides them "
            f"by a whole round's std: set scale_rewards to group or none, {off}"
        )
    if aggregation != "sum_then_normalize":
        raise ValueError(
            f"dynamic_sampling keeps each group's advantages from its own round, and multi_objective_aggregation "
            f"{aggregation} centres them on a whole round: set it to sum_then_normalize, {off}"
        )
    if processes > 1:
        raise ValueError(
            f"dynamic_sampling runs on one process, not {processes} (a group may straddle two ranks' batches): "
            f"launch one process, {off}"
        )


def degenerate_groups(rewards_per_func: torch.Tensor, weights: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[n_groups]`` True where a group's total weighted reward has zero std (TRL's ``frac_reward_zero_std`` test)
    or fewer than two of its completions are scorable.

    >>> nan = float("nan")
    >>> rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, nan], [nan, nan]])  # [B, funcs]
    >>> degenerate_groups(rewards, torch.tensor([1.0, 1.0]), 2).tolist()  # totals [1, 1], [1, 1], [1, unscorable]
    [True, True, True]
    >>> degenerate_groups(rewards, torch.tensor([1.0, 0.5]), 2).tolist()  # totals [1, 1], [0.5, 1], [1, unscorable]
    [True, False, True]
    """
    totals = (rewards_per_func * weights.to(rewards_per_func.device)).nansum(dim=1)  # [B]
    totals[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # unscorable, as TRL marks it
    grouped = totals.view(-1, group_size)  # [n_groups, G]
    std = nanstd(grouped, dim=1)
    scored = (~torch.isnan(grouped)).sum(dim=1)
    return torch.isclose(std, torch.zeros_like(std)) | (scored < 2)


def take_groups(parts: list[tuple[dict, list[int]]], group_size: int, pad_token_id: int) -> dict:
    """One generation output of the groups ``indices`` of each ``(output, indices)`` in ``parts``, padded to the
    widest part, with ``num_items_in_batch`` recounted."""
    keys = set(parts[0][0])
    for output, _ in parts:
        unknown = set(output) - set(PADDING) - {"num_items_in_batch"}
        if unknown or set(output) != keys:
            raise ValueError(
                f"dynamic sampling cannot join generation outputs with keys {sorted(unknown or set(output) ^ keys)} "
                "(it handles text batches): set dynamic_sampling: false"
            )
    joined = {}
    for key in keys - {"num_items_in_batch"}:
        side, value = PADDING[key]
        pieces = []
        for output, indices in parts:
            rows = [g * group_size + k for g in indices for k in range(group_size)]
            pieces.append(output[key][rows])
        if side is not None:
            width = max(p.size(1) for p in pieces)
            value = pad_token_id if value == "pad" else value
            pieces = [
                F.pad(p, (width - p.size(1), 0) if side == "left" else (0, width - p.size(1)), value=value)
                for p in pieces
            ]
        joined[key] = torch.cat(pieces)
    loss_mask = joined["completion_mask"] * joined["tool_mask"] if "tool_mask" in joined else joined["completion_mask"]
    joined["num_items_in_batch"] = loss_mask.sum()  # one process: TRL's gather is the identity
    return joined


def dynamic_sampling_trainer(trainer_class: type, max_rounds: int) -> type:
    """``trainer_class`` (a ``GRPOTrainer``) whose training batches keep only groups with reward variance."""

    class DynamicSampling(trainer_class):
        dynamic_sampling_max_rounds = max_rounds

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.accelerator.num_processes > 1:  # check_dynamic_sampling refuses it before any model loads
                raise ValueError("dynamic_sampling runs on one process: launch one, or set dynamic_sampling: false")
            self._scored_rewards = None

        def _calculate_rewards(self, *args, **kwargs):
            self._scored_rewards = super()._calculate_rewards(*args, **kwargs)  # [B, n_funcs], weights not applied
            return self._scored_rewards

        def _generate_and_score_completions(self, inputs):
            if not self.model.training:  # evaluation batches are scored as they are
                return super()._generate_and_score_completions(inputs)
            size = self.num_generations
            n_groups = len(inputs) // size
            first = super()._generate_and_score_completions(inputs)
            degenerate = self._degenerate()
            kept = [(first, [g for g in range(n_groups) if not degenerate[g]])]
            have, generated, dropped, rounds = len(kept[0][1]), n_groups, sum(degenerate), 0
            fresh = self._fresh_prompts(n_groups) if have < n_groups else []
            while have < n_groups and rounds < self.dynamic_sampling_max_rounds:
                batch = fresh[rounds * n_groups : (rounds + 1) * n_groups]
                rounds += 1
                output = super()._generate_and_score_completions([row for row in batch for _ in range(size)])
                flags = self._degenerate()
                useful = [g for g, bad in enumerate(flags) if not bad][: n_groups - have]
                kept.append((output, useful))
                have, generated, dropped = have + len(useful), generated + len(batch), dropped + sum(flags)
            fill = [g for g in range(n_groups) if degenerate[g]][: n_groups - have]  # the cap was hit: TRL's batch
            self._log_dynamic_sampling(dropped - len(fill), generated, rounds, len(fill), n_groups)
            if not rounds and not fill:  # nothing to drop
                return first
            kept.append((first, fill))
            return take_groups([part for part in kept if part[1]], size, self._tokenizer.pad_token_id)

        def _degenerate(self) -> list[bool]:
            return degenerate_groups(self._scored_rewards, self.reward_weights, self.num_generations).tolist()

        def _fresh_prompts(self, n_groups: int) -> list[dict]:
            """Enough training rows for every extra round, none twice (unless the data set is smaller)."""
            data = self.train_dataset
            if not hasattr(data, "__len__"):
                raise ValueError("dynamic sampling draws prompts by index: train on a map-style dataset")
            micro = self._step % self.args.gradient_accumulation_steps  # _step restarts at 0 on resume, not this
            rng = random.Random(f"dynamic_sampling:{self.args.seed}:{self.state.global_step}:{micro}")
            wanted = n_groups * self.dynamic_sampling_max_rounds
            order = rng.sample(range(len(data)), min(wanted, len(data)))
            indices = [order[i % len(order)] for i in range(wanted)]
            if hasattr(data, "__getitems__"):  # one fetch, as the DataLoader makes it
                return list(data.__getitems__(indices))
            return [data[i] for i in indices]

        def _log_dynamic_sampling(self, dropped, generated, rounds, filled, n_groups) -> None:
            metrics = self._metrics["train"]
            metrics[f"{METRIC}dropped_share"].append(dropped / generated)
            metrics[f"{METRIC}extra_rounds"].append(float(rounds))
            metrics[f"{METRIC}degenerate_kept_share"].append(filled / n_groups)

    # TRL names the model card after the trainer's class
    DynamicSampling.__name__ = DynamicSampling.__qualname__ = trainer_class.__name__
    return DynamicSampling
