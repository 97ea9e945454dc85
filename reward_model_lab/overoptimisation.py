"""The leash, measured: GRPO against a learned reward model on the CPU lab, proxy reward and true accuracy against
sqrt(KL) (Gao et al., "Scaling Laws for Reward Model Overoptimization", 2022), for several KL coefficients beta and a
checker-reward control.

    python -m reward_model_lab.overoptimisation              # warm start (cached), pairs, RM, 5 arms x 3 seeds, report
    python -m reward_model_lab.overoptimisation --steps 100 --eval-every 20   # longer (~21 min on the idle 2-core box)
    python -m reward_model_lab.overoptimisation --steps 30 --seeds 0          # shorter

What it does, in order (every step's outputs land in ``--out``, default ``runs/lab/overoptimisation``):
1. the lab warm start (``cpu_lab.warmstart``, cached) samples ``--pair-problems`` train problems x ``--pair-k``
   answers at temperature 1; ``training_data.pairs`` turns them into chosen-correct / rejected-wrong pairs
   (``--pairs reference`` uses each problem's reference solution against the same with the answer + 1 instead:
   mechanics only);
2. ``recipes.reward_model`` trains the reward model on them from ``recipes/configs/lab_rm/reward_model_lab_rm.yaml``:
   the warm start with a score head (held-out pairwise accuracy in ``rm/report.json``);
3. the GRPO recipe (``recipes.grpo``) from the warm start, for each beta with
   ``recipes/configs/lab_rm/grpo_lab_rm.yaml`` (the ``reward_model`` reward on ``reward_model_path``, the checker
   watched at weight 0) and, as the control, with ``grpo_lab_rm_checker.yaml`` (``gsm8k_correctness`` +
   ``gsm8k_format``, beta 0), for every seed; ``--jobs`` runs at once, each its own process with one torch thread
   and its output in ``<arm>/seed<k>/run.log`` (``cpu_lab.runner``). Each run is what
   ``python -m recipes.grpo --config <that config> --beta B --seed S`` runs, monitors and hack probes included;
4. every ``--eval-every`` steps (and at step 0 and the end), on the first ``--eval-n`` held-out problems, the run's
   ``leash_curve`` callback (the recipe's ``callbacks:`` hook) measures the TRUE accuracy (the recipe's held-out
   ``eval/accuracy``: greedy, the checker), the PROXY reward (the reward model's mean score of one answer sampled at
   temperature 1 per problem) and KL(policy || warm start) estimated on those samples (the sum over answer tokens of
   log pi - log pi_ref, averaged): ``<arm>/seed<k>/curve.jsonl``, and ``leash/*`` in the run's log;
5. ``report.md`` with ``overoptimisation.png`` (both quantities against sqrt(KL), sqrt(KL) by step and the monitors'
   ``monitor/reward_correctness_gap`` by step, from each run's ``log.jsonl``; mean over seeds), a table per arm, the
   gap at each evaluation, the reward model's hack-probe column (``eval.probe_matrix.reward_model_scores``) and the
   highest-scored wrong answers of the last evaluation of each reward-model arm (what the policy learned to please
   the reward model with).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

LAB_INSTRUCTION = "End with #### and the number."  # eval.tasks.TASKS["lab"].instruction: the prompt the RM reads
CHECKER = "checker"


def _read_jsonl(path, limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (all when None) of a JSONL file, through eval's strict reader."""
    from itertools import islice

    from eval.jsonl import iter_jsonl

    return list(islice((row for _, row in iter_jsonl(Path(path), "a file this experiment wrote: rerun it")), limit))


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


def sample_with_kl(model, ref_model, tokenizer, prompts: list[list[dict]], max_new_tokens: int, seed: int):
    """One answer per prompt sampled at temperature 1 from ``model``, and per answer the sum over its tokens (up to
    and including the end-of-sequence token) of ``log pi - log pi_ref``: its mean estimates KL(pi || pi_ref)."""
    import torch

    from eval.generate import encode_prompts, forked_rng

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


CURVE_FILE = "curve.jsonl"


class LeashCurve(TrainerCallback):
    """A GRPO run's leash curve: at step 0, every ``every`` steps and at the last step, on the first ``eval_n``
    held-out problems, the true accuracy (the recipe's held-out ``eval/accuracy``: greedy, the checker), the proxy
    reward (the reward model's mean score of one answer sampled at temperature 1 per problem) and KL(policy || warm
    start) estimated on those samples. Each row goes to ``curve.jsonl`` (with the highest-scored wrong answers) and,
    as ``leash/*``, into the run's log (log.jsonl, W&B). Built by ``leash_curve``, the recipe's callback hook."""

    def __init__(self, context, rm, every: int, eval_n: int):
        self.context, self.rm, self.every, self.eval_n = context, rm, every, eval_n
        self.path = context.output_dir / CURVE_FILE
        self.run_files = (CURVE_FILE,)  # a resumed run appends to it
        self.ref = self.tokenizer = None
        self.rows: list[dict] = []

    def measure(self, model, tokenizer, step: int) -> dict:
        from eval.jsonl import append_jsonl
        from eval.tasks import get_task
        from rewards.correctness import gsm8k_correctness_reward

        args = self.context.script_args
        accuracy = self.context.held_out(model, tokenizer, step)["eval/accuracy"]
        task, problems = get_task(args.eval_task), _read_jsonl(args.eval_data, self.eval_n)
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
        from transformers import AutoModelForCausalLM

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
    """The GRPO recipe's callback hook (``callbacks: [reward_model_lab.overoptimisation:leash_curve]``): the leash
    curve every ``monitor_eval_steps`` on ``monitor_eval_limit`` problems of ``eval_data``, its proxy the run's
    reward model (``reward_model`` among the rewards, else ``reward_model_path``: the checker control's)."""
    from recipes.reward_setup import build_reward_model
    from rewards.reward_model import RewardModelReward

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


def arm_run(arm: str, beta: float, seed: int, paths: dict, settings: Settings, out: Path):
    """One arm's GRPO run, for the labs' runner (``cpu_lab.runner``): what ``python -m recipes.grpo --config <the
    arm's config> --seed S --output_dir <out>/<arm>/seed<S>`` runs with the flags the experiment sets."""
    from cpu_lab.runner import Run

    s = settings
    flags = ["--model_name_or_path", str(paths["policy"]), "--data", str(paths["train"])]
    flags += ["--eval_data", str(paths["heldout"]), "--reward_model_path", str(paths["rm"])]
    flags += ["--beta", str(beta), "--run_name", f"{arm}-seed{seed}", "--max_steps", str(s.steps)]
    flags += ["--monitor_eval_steps", str(s.eval_every), "--monitor_eval_limit", str(s.eval_n)]
    flags += ["--logging_steps", str(max(1, s.eval_every // 4)), "--report_to", s.report_to, "--resume", "false"]
    config = s.checker_config if arm == CHECKER else s.grpo_config
    return Run(config, seed, out / arm / f"seed{seed}", flags + list(s.grpo_flags))


def run_arms(settings: Settings, paths: dict, out: Path) -> list[Path]:
    """Every arm x seed through the labs' runner: in turn in this process with every CPU thread (``jobs`` 1), or up to
    ``jobs`` at once, each its own process with one torch thread and its output in ``<arm>/seed<k>/run.log``. Each
    run's folder gets ``run.json`` (arm, beta, seed, seconds) beside ``curve.jsonl``, ``log.jsonl``, ``probes.json``
    and ``report.json``; returns the folders."""
    from cpu_lab.runner import run_at_once, run_one

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
    from cpu_lab.runner import parse

    _, (_, training_args, _) = parse(settings.grpo_config, settings.grpo_flags)
    return training_args.max_completion_length


def prepare(settings: Settings, out: Path) -> dict:
    """Policy, data, pairs and the trained reward model (reused when ``rm/report.json`` exists)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cpu_lab.runner import run_one
    from eval.jsonl import write_jsonl
    from training_data.rollouts import reference_rollouts, sample_rollouts

    if settings.policy is None:
        from cpu_lab.warmstart import prepare_lab

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
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_RUN_GROUP", f"overoptimisation-{out.name}")  # read by wandb.init in every run
    (out / "settings.json").write_text(json.dumps(asdict(settings), indent=1))
    paths = prepare(settings, out)
    prepared = time.monotonic() - started
    run_arms(settings, paths, out)
    return write_report(out, settings, paths, prepared, time.monotonic() - started)


def finished_runs(out: Path, settings: Settings) -> dict[str, list[Path]]:
    """{arm: the folders of its runs that reached ``settings.steps``} (``--report-only`` reports a run still in
    progress without it); arms with no finished run are left out."""
    finished = {}
    for arm, _ in arms(settings):
        folders = []
        for seed in settings.seeds:
            path = out / arm / f"seed{seed}" / CURVE_FILE
            rows = _read_jsonl(path) if path.exists() else []
            if rows and rows[-1]["step"] == settings.steps:
                folders.append(path.parent)
        if folders:
            finished[arm] = folders
    return finished


def read_curves(out: Path, settings: Settings) -> dict[str, list[list[dict]]]:
    """{arm: one curve (list of rows) per seed whose run reached ``settings.steps``}."""
    return {
        arm: [_read_jsonl(f / CURVE_FILE) for f in folders] for arm, folders in finished_runs(out, settings).items()
    }


GAP = "monitor/reward_correctness_gap"  # recipes.monitors: training reward minus the checker's verdict, per window


def read_gaps(out: Path, settings: Settings) -> dict[str, list[dict[int, float]]]:
    """{arm: per finished run, {step: the monitors' reward-correctness gap}} from the run's ``log.jsonl`` (the
    recipe's JSON-lines log: the value a user's own run of the arm logs)."""
    return {
        arm: [{r["step"]: r[GAP] for r in _read_jsonl(f / "log.jsonl") if r.get(GAP) is not None} for f in folders]
        for arm, folders in finished_runs(out, settings).items()
    }


def mean_gap(per_seed: list[dict[int, float]], step: int) -> float | None:
    """Mean over seeds of the gap logged at ``step`` (None where no seed logged one)."""
    values = [g[step] for g in per_seed if step in g]
    return statistics.fmean(values) if values else None


def mean_curve(runs: list[list[dict]], key: str) -> list[float]:
    """Mean over seeds at each evaluation (curves of one arm share their evaluation steps)."""
    return [statistics.fmean(run[i][key] for run in runs) for i in range(min(len(r) for r in runs))]


def std_curve(runs: list[list[dict]], key: str) -> list[float]:
    """Standard deviation over seeds at each evaluation (0 with one seed)."""
    return [statistics.stdev(r[i][key] for r in runs) if len(runs) > 1 else 0.0 for i in range(min(map(len, runs)))]


def _ms(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def write_report(out: Path, settings: Settings, paths: dict, prepared_s: float | None, total_s: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.probe_matrix import reward_model_scores
    from rewards.reward_model import RewardModelReward

    curves = read_curves(out, settings)
    gaps = read_gaps(out, settings)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    for arm, runs in curves.items():
        x = mean_curve(runs, "rm/sqrt_kl")
        for ax, key in zip(axes[:2], ("rm/proxy_reward", "rm/true_accuracy"), strict=True):
            ax.errorbar(x, mean_curve(runs, key), yerr=std_curve(runs, key), marker="o", capsize=2, label=arm)
        axes[2].errorbar(
            [row["step"] for row in runs[0][: len(x)]],
            x,
            yerr=std_curve(runs, "rm/sqrt_kl"),
            marker="o",
            capsize=2,
            label=arm,
        )
        logged = sorted({step for g in gaps[arm] for step in g})
        axes[3].plot(logged, [mean_gap(gaps[arm], step) for step in logged], marker=".", label=arm)
    titles = (
        "proxy reward (reward model)",
        "true held-out accuracy (checker, greedy)",
        "the leash: sqrt KL by step",
        "monitor/reward_correctness_gap (training batches)",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xlabel("sqrt(KL(policy || warm start))" if ax in axes[:2] else "GRPO step")
        ax.set_title(title)
        ax.legend(fontsize=8)
    axes[2].set_ylabel("sqrt(KL)")
    finished = ", ".join(f"{arm} {len(runs)}" for arm, runs in curves.items())
    fig.suptitle(f"mean ± std over the finished seeds (of {len(settings.seeds)}): {finished}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "overoptimisation.png", dpi=110)
    rm_report = json.loads((paths["rm"] / "report.json").read_text())
    lines = [
        "# The leash, measured: GRPO against a learned reward model (CPU lab)",
        "",
        f"Command: `python -m reward_model_lab.overoptimisation` with settings `{json.dumps(asdict(settings))}`",
        "",
        f"Time: {total_s:.0f} s in all ({prepared_s:.0f} s for warm start, pairs and reward model)."
        if prepared_s is not None
        else f"Report written {total_s:.0f} s after the run started (--report-only).",
        "",
        f"Reward model: {rm_report['train_pairs']} train / {rm_report['heldout_pairs']} held-out pairs, held-out "
        f"pairwise accuracy {rm_report['heldout_pairwise_accuracy']:.3f}, first loss {rm_report['first_loss']:.4f} "
        f"(ok: {rm_report['first_loss_ok']}).",
        "",
        "Finished runs per arm: " + ", ".join(f"{a} {len(r)}" for a, r in curves.items()) + f" (of "
        f"{len(settings.seeds)} seeds); evaluations on {settings.eval_n} held-out problems every "
        f"{settings.eval_every} steps. Values are mean ± std over seeds.",
        "",
        "![proxy and truth against sqrt KL](overoptimisation.png)",
        "",
        "| arm | accuracy at 0 | peak mean accuracy (step, sqrt KL) | accuracy at the end | proxy 0 -> end "
        "| sqrt KL at the end |",
        "|---|---|---|---|---|---|",
    ]
    for arm, runs in curves.items():
        acc = mean_curve(runs, "rm/true_accuracy")
        peak = max(range(len(acc)), key=acc.__getitem__)
        sqrt_kl = mean_curve(runs, "rm/sqrt_kl")
        first, end = (
            {k: _ms([r[i][k] for r in runs]) for k in ("rm/true_accuracy", "rm/proxy_reward", "rm/sqrt_kl")}
            for i in (0, -1)
        )
        lines.append(
            f"| {arm} | {first['rm/true_accuracy']} | {acc[peak]:.3f} (step {runs[0][peak]['step']}, "
            f"{sqrt_kl[peak]:.2f}) | {end['rm/true_accuracy']} | {first['rm/proxy_reward']} -> "
            f"{end['rm/proxy_reward']} | {end['rm/sqrt_kl']} |"
        )
    steps = [row["step"] for row in next(iter(curves.values()))[0]] if curves else []
    lines += [
        "",
        "Mean true accuracy at each evaluation (does it rise before it falls?):",
        "",
        "| arm | " + " | ".join(f"step {k}" for k in steps) + " |",
        "|---" * (len(steps) + 1) + "|",
    ]
    for arm, runs in curves.items():
        lines.append(f"| {arm} | " + " | ".join(f"{a:.3f}" for a in mean_curve(runs, "rm/true_accuracy")) + " |")
    lines += [
        "",
        f"The monitors' `{GAP}` (the run's training reward minus the checker's verdict, mean over the training "
        "batches of the logging window that ends at the step; the same value a user's own run of the arm logs), mean "
        "over seeds (step 0: no batch yet):",
        "",
        "| arm | " + " | ".join(f"step {k}" for k in steps) + " |",
        "|---" * (len(steps) + 1) + "|",
    ]
    for arm in curves:
        cells = [mean_gap(gaps[arm], k) for k in steps]
        lines.append(f"| {arm} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    heldout = _read_jsonl(paths["heldout"], settings.probe_n)
    problems = [{"question": p["question"], "answer": p["answer"].split("####")[-1].strip()} for p in heldout]
    probes = reward_model_scores(RewardModelReward(paths["rm"]), "gsm8k", problems, LAB_INSTRUCTION)
    paid = [f"`{name}` {cell['score']:.2f}" for name, cell in probes.items() if cell["violation"]]
    lines += [
        "",
        f"## What the reward model pays (hack probes on {len(problems)} held-out problems, normalised: "
        "genuine correct 1, genuine wrong 0)",
        "",
        f"Raw mean scores: genuine correct {probes['genuine_correct']['raw']:.3f}, genuine wrong "
        f"{probes['genuine_wrong']['raw']:.3f} (the normalised values divide by their difference).",
        "",
        "Probes that break their rule: " + (", ".join(paid) or "none") + ".",
        "",
    ]
    rm_arms = [arm for arm in curves if arm != CHECKER]
    if rm_arms:  # the RM does not change in GRPO; what changes is how its probes compare with the policy's answers
        arm = rm_arms[0]
        before, after = (statistics.fmean(r[i]["rm/proxy_reward"] for r in curves[arm]) for i in (0, -1))
        lines += [
            f"Before and after: does a probe score above the policy's own sampled answers (mean RM score "
            f"{before:.3f} at step 0, {after:.3f} at the end of {arm}, mean over seeds)?",
            "",
            "| probe | kind | raw score | normalised | breaks its rule | above the policy at step 0 "
            f"| above {arm} at the end |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, cell in probes.items():
            lines.append(
                f"| `{name}` | {cell['kind']} | {cell['raw']:.3f} | {cell['score']:.2f} | "
                f"{'yes' if cell['violation'] else ''} | {'yes' if cell['raw'] > before else ''} | "
                f"{'yes' if cell['raw'] > after else ''} |"
            )
        lines.append("")
    lines += ["## Highest-scored WRONG answers, at step 0 and at the last evaluation (first finished seed)", ""]
    if curves:  # step 0: every arm's policy is the warm start, sampled alike
        first_row = next(iter(curves.values()))[0][0]
        lines += [
            f"- step 0 (every arm): {score:.2f} `{text.strip()[:80]!r}`" for score, text in first_row["top_wrong"][:3]
        ]
    for arm, runs in curves.items():
        lines += [
            f"- {arm}, step {runs[0][-1]['step']}: {score:.2f} `{text.strip()[:80]!r}`"
            for score, text in runs[0][-1]["top_wrong"][:3]
        ]
    (out / "probes.json").write_text(json.dumps(probes, indent=1))
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def make_parser() -> argparse.ArgumentParser:
    """The lab's command line: what it does and how to run it first, then its options by group."""
    defaults = Settings()
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
    arms = parser.add_argument_group("the arms")
    arms.add_argument("--seeds", type=int, nargs="+", default=defaults.seeds, help="seeds of every arm")
    arms.add_argument(
        "--betas", type=float, nargs="+", default=defaults.betas, help="KL coefficients: one reward-model arm each"
    )
    arms.add_argument(
        "--no-checker-control", action="store_true", help="leave out the control arm (the checker's reward, beta 0)"
    )
    length = parser.add_argument_group("length of each GRPO run")
    length.add_argument("--steps", type=int, default=defaults.steps, help="GRPO steps per run")
    length.add_argument("--eval-every", type=int, default=defaults.eval_every, help="steps between evaluations")
    length.add_argument(
        "--eval-n", type=int, default=defaults.eval_n, help="held-out problems per evaluation (accuracy, proxy, KL)"
    )
    length.add_argument("--jobs", type=int, default=defaults.jobs, help="runs at once, one torch thread each")
    pairs = parser.add_argument_group("the reward model's preference pairs")
    pairs.add_argument(
        "--pairs",
        choices=["policy", "reference"],
        default=defaults.pairs,
        help="'policy': the warm start's own answers, correct vs wrong; 'reference': each problem's reference "
        "solution vs the same with the answer + 1 (mechanics only)",
    )
    pairs.add_argument("--pair-problems", type=int, default=defaults.pair_problems, help="train problems sampled")
    pairs.add_argument("--pair-k", type=int, default=defaults.pair_k, help="answers sampled per problem")
    own = parser.add_argument_group("another policy and data (default: the CPU lab's warm start and problems)")
    own.add_argument("--policy", help="a causal LM folder")
    own.add_argument("--train-data", help="with --policy: GRPO and pair problems (.jsonl)")
    own.add_argument("--heldout-data", help="with --policy: held-out problems (.jsonl)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", default="runs/lab/overoptimisation", help="folder of every run and the report")
    out.add_argument(
        "--report-to",
        default="none",
        help="'wandb' logs every run's rm/* curves to W&B (needs `wandb login`, WANDB_API_KEY or WANDB_MODE=offline)",
    )
    out.add_argument("--report-only", action="store_true", help="rewrite the report of --out from its finished runs")
    return parser


def main(argv: list[str] | None = None) -> Path:
    from recipes.validate import check_wandb

    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        check_wandb([args.report_to])  # before the warm start, the pairs and the reward model, not at the first run
    except ValueError as error:
        parser.error(str(error).replace("report_to includes wandb", "--report-to wandb"))
    if args.report_only:
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
    settings = Settings(
        seeds=args.seeds,
        betas=args.betas,
        checker_control=not args.no_checker_control,
        steps=args.steps,
        eval_every=args.eval_every,
        eval_n=args.eval_n,
        pairs=args.pairs,
        pair_problems=args.pair_problems,
        pair_k=args.pair_k,
        jobs=args.jobs,
        policy=args.policy,
        train_data=args.train_data,
        heldout_data=args.heldout_data,
        report_to=args.report_to,
    )
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = run(settings, Path(args.out))
    print(f"report: {report}")
    return report


if __name__ == "__main__":
    main()
