"""The over-optimisation experiment's settings and arms, shared by its launch and its report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

CHECKER = "checker"
CONFIGS = Path(__file__).resolve().parents[1] / "recipes" / "configs" / "lab_rm"


@dataclass
class Settings:
    """Everything a run depends on beyond its configs (written to ``settings.json``); the fields with a help are the
    command's options, ``grpo_flags`` / ``rm_flags`` extra overrides of the configs."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "seeds of every arm"})
    betas: list[float] = field(
        default_factory=lambda: [0.0, 0.01, 0.04, 0.2], metadata={"help": "KL coefficients: one reward-model arm each"}
    )
    checker_control: bool = field(  # on the command line: --no-checker-control, which the help describes
        default=True, metadata={"help": "leave out the control arm (the checker's reward, beta 0)"}
    )
    # 60 steps x 5 arms x 3 seeds: ~14 min on an idle 2-core box; by step 60 every reward-model arm has lost most of
    # its true accuracy (docs/reward_model.md)
    steps: int = field(default=60, metadata={"help": "GRPO steps per run"})
    eval_every: int = field(default=10, metadata={"help": "steps between evaluations"})
    eval_n: int = field(
        default=64,
        metadata={"help": "held-out problems per evaluation (greedy accuracy, one sample each for proxy and KL)"},
    )
    probe_n: int = 50  # held-out problems the reward model's hack probes are built from
    pairs: Literal["policy", "reference"] = field(
        default="policy",
        metadata={
            "help": "'policy': the warm start's own answers, correct vs wrong; 'reference': each problem's reference "
            "solution vs the same with the answer + 1 (mechanics only)"
        },
    )
    pair_problems: int = field(default=800, metadata={"help": "train problems sampled"})
    pair_k: int = field(default=8, metadata={"help": "answers sampled per problem"})
    jobs: int = field(default=2, metadata={"help": "runs at once, one torch thread each"})
    report_to: str = field(
        default="none",
        metadata={
            "help": "'wandb' logs every run's rm/* curves to W&B, one W&B run per arm and seed (named <arm>-seed<k>, "
            "grouped by the out folder; needs `wandb login`, WANDB_API_KEY or WANDB_MODE=offline)"
        },
    )
    # default: the lab warm start and its problems (cpu_lab.warmstart.prepare_lab)
    policy: str | None = field(default=None, metadata={"help": "a causal LM folder"})
    train_data: str | None = field(default=None, metadata={"help": "with --policy: GRPO and pair problems (.jsonl)"})
    heldout_data: str | None = field(default=None, metadata={"help": "with --policy: held-out problems (.jsonl)"})
    grpo_config: str = str(CONFIGS / "grpo_lab_rm.yaml")
    checker_config: str = str(CONFIGS / "grpo_lab_rm_checker.yaml")
    rm_config: str = str(CONFIGS / "reward_model_lab_rm.yaml")
    grpo_flags: list[str] = field(default_factory=list)
    rm_flags: list[str] = field(default_factory=list)


def arms(settings: Settings) -> list[tuple[str, float]]:
    """(arm name, beta); the checker control last.

    >>> arms(Settings(betas=[0.0, 0.2]))
    [('rm_beta0', 0.0), ('rm_beta0.2', 0.2), ('checker', 0.0)]
    """
    return [(f"rm_beta{b:g}", b) for b in settings.betas] + ([(CHECKER, 0.0)] if settings.checker_control else [])
