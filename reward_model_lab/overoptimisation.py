"""The leash, measured: GRPO against a learned reward model on the CPU lab, proxy reward and true accuracy against
sqrt(KL) (Gao et al., "Scaling Laws for Reward Model Overoptimization", 2022), for several KL coefficients beta and a
checker-reward control.

    python -m reward_model_lab.overoptimisation              # warm start (cached), pairs, RM, 5 arms x 3 seeds, report
    python -m reward_model_lab.overoptimisation --steps 100 --eval-every 20   # longer (~21 min on the idle 2-core box)
    python -m reward_model_lab.overoptimisation --steps 30 --seeds 0          # shorter

What it does, in order (everything lands in ``--out``, default ``runs/lab/overoptimisation``):
1. the lab warm start answers ``--pair-problems`` train problems ``--pair-k`` times; ``training_data.pairs`` makes
   correct-vs-wrong pairs of them (``--pairs reference``: reference solutions vs the answer + 1, mechanics only);
2. ``recipes.reward_model`` trains the reward model on them (held-out pairwise accuracy in ``rm/report.json``);
3. ``recipes.grpo`` runs from the warm start against the reward model for each beta (the checker watched at weight 0),
   and with the checker's reward at beta 0 as the control, for every seed (``--jobs`` at once, ``<arm>/seed<k>/``);
4. every ``--eval-every`` steps the run's ``leash_curve`` callback measures the TRUE held-out accuracy (greedy, the
   checker), the PROXY reward (the reward model's mean score of one sampled answer per problem) and KL(policy || warm
   start) on those samples: ``<arm>/seed<k>/curve.jsonl``;
5. ``report.md`` and ``overoptimisation.png``: both quantities against sqrt(KL), the monitors' reward-correctness gap,
   the reward model's hack probes and the highest-scored wrong answers (what the policy learned to please it with).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import asdict, fields
from pathlib import Path

from cpu_lab.dataclass_flags import add_fields, from_args
from cpu_lab.runner import Run, parse, run_at_once, run_one
from cpu_lab.warmstart import prepare_lab
from eval.jsonl import write_jsonl
from recipes.checks import check_wandb
from reward_model_lab.settings import CHECKER, Settings, arms
from training_data.rollouts import reference_rollouts, sample_rollouts

# torch, transformers and reward_model_lab.kl are imported after the arguments are parsed: --help answers without them.

logger = logging.getLogger(__name__)


def __getattr__(name: str):
    """``leash_curve``, the name the lab's configs give the recipe's callback hook, imported only when asked for: torch
    and transformers load with it, not with this command's ``--help``."""
    if name == "leash_curve":
        from reward_model_lab.kl import leash_curve

        return leash_curve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def arm_run(arm: str, beta: float, seed: int, paths: dict, settings: Settings, out: Path):
    """One arm's GRPO run for the labs' runner (``cpu_lab.runner``), with the flags the experiment sets."""
    s = settings
    flags = ["--model_name_or_path", str(paths["policy"]), "--data", str(paths["train"])]
    flags += ["--eval_data", str(paths["heldout"]), "--reward_model_path", str(paths["rm"])]
    flags += ["--beta", str(beta), "--run_name", f"{arm}-seed{seed}", "--max_steps", str(s.steps)]
    flags += ["--monitor_eval_steps", str(s.eval_every), "--monitor_eval_limit", str(s.eval_n)]
    flags += ["--logging_steps", str(max(1, s.eval_every // 4)), "--report_to", s.report_to, "--resume", "false"]
    config = s.checker_config if arm == CHECKER else s.grpo_config
    return Run(config, seed, out / arm / f"seed{seed}", flags + list(s.grpo_flags))


def run_arms(settings: Settings, paths: dict, out: Path) -> list[Path]:
    """Every arm x seed through the labs' runner, ``jobs`` at once (each its own process with one torch thread) or in
    turn in this process with every CPU thread; returns the run folders, each with a ``run.json``."""
    jobs = [
        (arm, beta, arm_run(arm, beta, seed, paths, settings, out))
        for seed in settings.seeds
        for arm, beta in arms(settings)
    ]
    if settings.jobs == 1:
        import torch

        torch.set_num_threads(max(1, os.cpu_count() or 1))
        for _, _, job in jobs:
            run_one(*job)
    else:
        run_at_once([job for _, _, job in jobs], settings.jobs, threads=1, label="overoptimisation")
    for arm, beta, job in jobs:
        seconds = json.loads((job.out_dir / "report.json").read_text())["seconds"]
        (job.out_dir / "run.json").write_text(
            json.dumps({"arm": arm, "beta": beta, "seed": job.seed, "seconds": seconds})
        )
    return [job.out_dir for _, _, job in jobs]


def policy_budget(settings: Settings) -> int:
    """The arms' ``max_completion_length`` (their config with ``grpo_flags``): the pairs are sampled with it too."""
    _, (_, training_args, _) = parse(settings.grpo_config, settings.grpo_flags)
    return training_args.max_completion_length


def prepare(settings: Settings, out: Path) -> dict:
    """Policy, data, pairs and the trained reward model (reused when ``rm/report.json`` exists)."""
    if settings.policy is None:
        lab = prepare_lab()
        paths = {"policy": lab["model"], "train": lab["train"], "heldout": lab["heldout"]}
    else:
        paths = {
            "policy": Path(settings.policy),
            "train": Path(settings.train_data),
            "heldout": Path(settings.heldout_data),
        }
    paths["rm"] = out / "rm"
    # what the reward model depends on: a different warm start, pair setting or RM config trains a new one
    made_from = {"policy": str(Path(paths["policy"]).resolve()), "train": str(Path(paths["train"]).resolve())} | {
        k: v for k, v in asdict(settings).items() if k.startswith(("pair", "rm_"))
    }
    made_from |= {
        "rm_config_text": Path(settings.rm_config).read_text(),
        "max_completion_length": policy_budget(settings),
    }
    made_from_path = out / "rm_made_from.json"
    if (paths["rm"] / "report.json").exists():
        if made_from_path.exists() and json.loads(made_from_path.read_text()) == made_from:
            logger.info("reusing the reward model in %s", paths["rm"])
            return paths
        logger.info(
            "the reward model in %s was made from other settings (or unknown ones): training it again", paths["rm"]
        )
    rollouts = out / "rollouts"
    if settings.pairs == "reference":
        write_jsonl(
            reference_rollouts("lab", str(paths["train"]), limit=settings.pair_problems), rollouts / "rollouts.jsonl"
        )
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(paths["policy"])
        tokenizer = AutoTokenizer.from_pretrained(paths["policy"])
        sample_rollouts(
            model,
            tokenizer,
            "lab",
            rollouts,
            data=str(paths["train"]),
            limit=settings.pair_problems,
            k=settings.pair_k,
            max_new_tokens=made_from["max_completion_length"],
        )
    flags = ["--model_name_or_path", str(paths["policy"]), "--data", str(rollouts / "rollouts.jsonl")]
    run_one(settings.rm_config, None, paths["rm"], [*flags, *settings.rm_flags])  # recipes.reward_model
    made_from_path.write_text(json.dumps(made_from, indent=1))
    return paths


def run(settings: Settings, out: Path) -> Path:
    """The whole experiment; returns the report's path."""
    from reward_model_lab.report import write_report

    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_RUN_GROUP", f"overoptimisation-{out.name}")  # read by wandb.init in every run
    (out / "settings.json").write_text(json.dumps(asdict(settings), indent=1))
    paths = prepare(settings, out)
    prepared = time.monotonic() - started
    run_arms(settings, paths, out)
    return write_report(out, settings, paths, prepared, time.monotonic() - started)


def make_parser() -> argparse.ArgumentParser:
    """The lab's command line: what it does and how to run it first, then its options by group."""
    summary = "\n\n".join(__doc__.split("\n\n")[:2])  # the first paragraph and the commands
    parser = argparse.ArgumentParser(
        prog="python -m reward_model_lab.overoptimisation",
        description=summary,
        epilog="Step by step, with what each writes: pydoc reward_model_lab.overoptimisation; results and how to "
        "read them: docs/reward_model.md",
        formatter_class=type(
            "Formatter", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}
        ),
    )
    groups = {  # Settings' fields, as flags of their spelling (--eval-every), by group
        "the arms": ["seeds", "betas", "checker_control"],
        "length of each GRPO run": ["steps", "eval_every", "eval_n", "jobs"],
        "the reward model's preference pairs": ["pairs", "pair_problems", "pair_k"],
        "another policy and data (default: the CPU lab's warm start and problems)": [
            "policy",
            "train_data",
            "heldout_data",
        ],
    }
    for title, names in groups.items():
        add_fields(parser.add_argument_group(title), Settings, names)
    out = parser.add_argument_group("output")
    out.add_argument("--out", default="runs/lab/overoptimisation", help="folder of every run and the report")
    add_fields(out, Settings, ["report_to"])
    out.add_argument("--report-only", action="store_true", help="rewrite the report of --out from its finished runs")
    return parser


def main(argv: list[str] | None = None) -> Path:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        check_wandb([args.report_to])  # before the warm start, the pairs and the reward model, not at the first run
    except ValueError as error:
        parser.error(str(error).replace("report_to includes wandb", "--report-to wandb"))
    if args.report_only:
        from reward_model_lab.report import write_report

        out = Path(args.out)
        known = {f.name for f in fields(Settings)}
        settings = Settings(**{k: v for k, v in json.loads((out / "settings.json").read_text()).items() if k in known})
        policy = Path(settings.policy) if settings.policy else Path("runs/lab/warmstart")
        train, heldout = (
            settings.train_data or "runs/lab/data/train.jsonl",
            settings.heldout_data or "runs/lab/data/heldout.jsonl",
        )
        paths = {"policy": policy, "train": Path(train), "heldout": Path(heldout), "rm": out / "rm"}
        report = write_report(out, settings, paths, None, time.time() - (out / "settings.json").stat().st_mtime)
        print(f"report: {report}")
        return report
    if args.policy and not (args.train_data and args.heldout_data):
        parser.error("--policy needs --train-data and --heldout-data (lab-style .jsonl with question and answer)")
    if min(args.steps, args.eval_every, args.eval_n, args.jobs, args.pair_problems, args.pair_k) < 1:
        parser.error("--steps, --eval-every, --eval-n, --jobs, --pair-problems and --pair-k must be >= 1")
    settings = from_args(Settings, args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = run(settings, Path(args.out))
    print(f"report: {report}")
    return report


if __name__ == "__main__":
    main()
