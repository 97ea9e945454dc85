"""What the over-optimisation experiment depends on beyond its configs (``Settings``, written to ``settings.json``)
and its arms: read by the launch (``reward_model_lab.overoptimisation``) and by the report
(``reward_model_lab.report``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

CHECKER = "checker"
CONFIGS = Path(__file__).resolve().parents[1] / "recipes" / "configs" / "lab_rm"


@dataclass
class Settings:
    """Everything a run depends on beyond its configs (written to ``settings.json``). The GRPO arms are
    ``grpo_config`` (the reward-model arms, one per beta) and ``checker_config`` (the control) run by ``recipes.grpo``;
    the reward model is ``rm_config`` run by ``recipes.reward_model``; ``grpo_flags`` / ``rm_flags`` are extra
    command-line overrides for them (a smaller batch, say)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    betas: list[float] = field(default_factory=lambda: [0.0, 0.01, 0.04, 0.2])
    checker_control: bool = True
    # 60 steps x 5 arms x 3 seeds: 13 min 44 s on the near-idle 2-core box (GRPO steps are ~90% of the time; 100 steps
    # took 21 minutes); by step 60 every reward-model arm has lost most of its true accuracy (docs/reward_model.md)
    steps: int = 60
    eval_every: int = 10
    eval_n: int = 64  # held-out problems per evaluation (greedy accuracy, one sample each for proxy and KL)
    probe_n: int = 50  # held-out problems the reward model's hack probes are built from
    pairs: str = "policy"  # "policy": the warm start's own answers; "reference": reference vs answer + 1
    pair_problems: int = 800
    pair_k: int = 8
    jobs: int = 2
    report_to: str = "none"  # "wandb": one W&B run per arm and seed (named <arm>-seed<k>, grouped by the out folder)
    policy: str | None = None  # default: the lab warm start (cpu_lab.warmstart.prepare_lab)
    train_data: str | None = None
    heldout_data: str | None = None
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
