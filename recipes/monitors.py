"""What the recipes log while they train: GRPO's monitors (wasted groups, length bias, reward hacking and collapse)
and the held-out checks.

``RewardMonitor`` wraps the reward functions (same ``__name__``, so TRL's keys do not change) and computes each
generation batch's ``monitor/...`` metrics, which TRL averages over the logging window. The arithmetic is in pure
functions (``eval.group_metrics``, ``eval.degenerate``, ``rewards.totals``), tested without a trainer.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import TrainerCallback

from eval import run as eval_run
from eval.degenerate import SOURCES, DegeneratePredictor
from eval.group_metrics import Sample, group_metrics, mean_or_nan, split_groups
from eval.jsonl import append_jsonl
from eval.metrics import plateau_stop
from eval.scoring import score_completion
from rewards import verify
from rewards.completions import completion_text
from rewards.probes import probe_scores
from rewards.totals import is_missing, weighted_totals

logger = logging.getLogger(__name__)
CHECKS_LOGGER = logging.getLogger(f"{__name__}.validation")  # ValidationStop's checks, one record each

TOP_K = 20  # completions kept per logging window in the top-reward table


# --------------------------------------------------------------------------------------------------- reward side
def _no_verdict_counts() -> dict[str, int]:
    return verify.no_verdict_counts()


def _text(completion) -> str:
    return completion_text(completion)


def _prior(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        return None
    return float(value)


@dataclass
class RewardMonitor:
    """Wraps reward functions to record every completion's score, correctness and length, and logs ``monitor/...``.

    ``correctness_index`` names the reward whose 1.0 means correct (weight 0 allowed: watched, not trained on); None
    scores with ``eval.scoring.score_completion``. With ``stop_token_ids`` a completion counts as truncated exactly as
    TRL's ``completions/clipped_ratio`` counts it, else when it has ``max_completion_length`` tokens.
    """

    reward_funcs: list[Callable]
    weights: list[float] | None
    task_name: str
    max_completion_length: int
    correctness_index: int | None = None
    top_k: int = TOP_K
    group_size: int = field(kw_only=True)
    stop_token_ids: Sequence[int] | None = field(default=None, kw_only=True)
    predictor: DegeneratePredictor = field(init=False)
    _outputs: dict[int, list] = field(default_factory=dict, init=False)
    _no_verdicts_before: dict[str, int] = field(default_factory=dict, init=False)
    _top: list = field(default_factory=list, init=False)  # min-heap of (reward, counter, row) over the window
    _counter: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)  # time spent in monitor code (for the overhead benchmark)

    def __post_init__(self):
        if self.weights is not None and len(self.weights) != len(self.reward_funcs):
            raise ValueError(f"{len(self.reward_funcs)} reward functions but {len(self.weights)} weights")
        trained = [i for i in range(len(self.reward_funcs)) if i not in self.watched]
        if self.watched and (not trained or min(self.watched) < max(trained)):
            raise ValueError("weight-0 (watched) rewards must come after at least one trained reward, and last")
        self.predictor = DegeneratePredictor(self.group_size)

    @property
    def watched(self) -> list[int]:
        """Indices of the rewards with weight 0: logged and watched, never trained on. TRL gets ``None`` from them
        where every trained reward returned ``None``, so a watched score cannot make a completion scorable."""
        return [i for i, w in enumerate(self.weights or []) if w == 0]

    def wrapped(self) -> list[Callable]:
        """The reward functions to give TRL: each records its output; the last one also computes the metrics."""
        return [self._wrap(i, f) for i, f in enumerate(self.reward_funcs)]

    def _wrap(self, index: int, func: Callable) -> Callable:
        def recording_reward(completions, **kwargs):
            if not self._outputs:  # the batch's first reward function
                self._no_verdicts_before = _no_verdict_counts()
            scores = func(completions=completions, **kwargs)
            self._outputs[index] = list(scores)
            if index in self.watched:  # the trained rewards came first (checked in __post_init__)
                trained = [self._outputs[i] for i in range(index) if i not in self.watched]
                scores = [None if all(is_missing(t[k]) for t in trained) else s for k, s in enumerate(scores)]
            if len(self._outputs) == len(self.reward_funcs):
                # before the monitor scores anything itself
                counts = _no_verdict_counts()
                no_verdicts = {k: n - self._no_verdicts_before.get(k, 0) for k, n in counts.items()}
                start = time.perf_counter()
                self._record_batch(completions, kwargs, no_verdicts)
                self._outputs = {}
                self.seconds += time.perf_counter() - start
            return scores

        recording_reward.__name__ = getattr(func, "__name__", f"reward_{index}")
        recording_reward.__qualname__ = recording_reward.__name__
        return recording_reward

    def _truncated(self, ids: list[int]) -> bool:
        if self.stop_token_ids is not None and ids:
            return ids[-1] not in self.stop_token_ids
        return len(ids) >= self.max_completion_length

    def _record_batch(self, completions, kwargs, no_verdicts: dict[str, int] | None = None) -> None:
        texts = [_text(c) for c in completions]
        answers = kwargs.get("answer") or [None] * len(texts)
        ids = kwargs.get("completion_ids") or [[] for _ in texts]
        totals = weighted_totals([self._outputs[i] for i in range(len(self.reward_funcs))], self.weights)
        correct = self._correctness(texts, answers)
        samples = [
            Sample(c, r, len(t), self._truncated(list(t)), x)
            for c, r, t, x in zip(correct, totals, ids, texts, strict=True)
        ]
        keys = [str(p) for p in kwargs.get("prompts") or kwargs.get("question") or range(len(texts))]
        priors = kwargs.get("pass_rate") or [None] * len(texts)
        rows = list(zip(keys, priors, samples, strict=True))
        groups = split_groups(keys, rows, self.group_size)
        metrics = group_metrics([[s for _, _, s in g] for g in groups], self.group_size)
        metrics |= self._expected_degenerate([g for g in groups if len(g) == self.group_size])
        # Comparisons without verdict are paid 0 but are not wrong answers: timeouts, refusals and failed workers each
        # have their rate, and their sum is the no-verdict rate.
        no_verdicts = no_verdicts or {}
        metrics["monitor/timeout_rate"] = no_verdicts.get("timeout", 0) / len(texts)
        metrics["monitor/refused_rate"] = no_verdicts.get("refused", 0) / len(texts)
        metrics["monitor/no_verdict_rate"] = sum(no_verdicts.values()) / len(texts)
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(name, value)
        log_extra = kwargs.get("log_extra")
        if log_extra is not None:  # adds columns to TRL's completions table (log_completions=True)
            log_extra("correct", correct)
            log_extra("n_tokens", [s.n_tokens for s in samples])
        state = kwargs.get("trainer_state")
        step = state.global_step + 1 if state is not None else None  # the optimizer step these completions feed
        for sample, gold in zip(samples, answers, strict=True):
            if math.isnan(sample.reward):  # unscorable: no reward to rank
                continue
            row = {"step": step, "reward": sample.reward, "correct": sample.correct, "n_tokens": sample.n_tokens}
            row |= {"truncated": sample.truncated, "gold": gold, "completion": sample.text}
            self._counter += 1
            heapq.heappush(self._top, (sample.reward, -self._counter, row))
            if len(self._top) > self.top_k:
                heapq.heappop(self._top)

    def _expected_degenerate(self, groups: list[list]) -> dict[str, float]:
        """Predict this batch's whole groups from earlier batches, THEN learn from them (``eval.degenerate``)."""
        keys = [g[0][0] for g in groups]
        predictions, sources = self.predictor.predict(keys, [_prior(g[0][1]) for g in groups])
        self.predictor.update(keys, [(sum(s.correct for _, _, s in g), len(g)) for g in groups])
        known = [p for p in predictions if not math.isnan(p)]
        out = {"monitor/degenerate_expected_share": mean_or_nan(known)}
        for source in SOURCES:
            out[f"monitor/degenerate_expected_source/{source}"] = mean_or_nan([float(s == source) for s in sources])
        return out

    def _correctness(self, texts: list[str], answers: list) -> list[bool]:
        if self.correctness_index is not None:
            return [s is not None and s >= 1.0 for s in self._outputs[self.correctness_index]]
        return [
            gold is not None and score_completion(t, str(gold), self.task_name)["correct"]
            for t, gold in zip(texts, answers, strict=True)
        ]

    def pop_top(self) -> list[dict]:
        """The highest-reward completions seen since the last call, best first (and forget them)."""
        rows = [row for _, _, row in sorted(self._top, reverse=True)]
        self._top = []
        return rows


# --------------------------------------------------------------------------------------------------- callbacks
@dataclass
class MonitorCallback(TrainerCallback):
    """Probe scores at the start, held-out evaluation every ``eval_every`` steps (0: never), top-reward table every
    log; its values reach the next log line through ``MonitoredGRPOTrainer.log``."""

    monitor: RewardMonitor
    output_dir: str | Path
    probe_problems: list[dict] = field(default_factory=list)
    answer_style: str = "gsm8k"
    eval_every: int = 0
    eval_kwargs: dict = field(default_factory=dict)
    report_to: Sequence[str] = ()
    pending: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    last_eval: tuple[int, dict] | None = None  # (step, eval/... metrics) of the latest held-out evaluation

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.probe_problems or state.global_step > 0:  # a resumed run already logged them
            return
        self.probes = probe_scores(
            self.monitor.reward_funcs, self.monitor.weights, self.answer_style, self.probe_problems
        )
        for name, info in self.probes.items():
            self.pending[f"probe/{name}"] = info["score"]
        hacks = [n for n, info in self.probes.items() if info.get("violation")]
        self.pending["probe/violations"] = len(hacks)
        if hacks:
            logger.warning("REWARD HACK PROBES pass under this reward set: %s (see probes.json)", hacks)
        if state.is_world_process_zero:
            Path(self.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(self.output_dir) / "probes.json").write_text(json.dumps(self.probes, indent=1, default=str))

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.eval_every <= 0 or state.global_step % self.eval_every != 0 or model is None:
            return
        self.last_eval = (state.global_step, held_out_metrics(model, processing_class, **self.eval_kwargs))
        self.pending |= self.last_eval[1]

    def log(self, metrics: dict) -> None:
        """Add ``metrics`` to the next log line (``log.jsonl`` and every ``report_to`` backend)."""
        self.pending.update(metrics)

    def held_out(self, model, tokenizer, step: int) -> dict[str, float]:
        """The ``eval/...`` metrics at ``step``: this step's held-out evaluation when one ran, else a new one."""
        if self.last_eval is not None and self.last_eval[0] == step:
            return self.last_eval[1]
        return held_out_metrics(model, tokenizer, **self.eval_kwargs)

    def pop_pending(self, step: int, main_process: bool = True) -> dict:
        """Metrics waiting for the next log; the main process also writes the top-reward table of the window."""
        rows = self.monitor.pop_top()
        if rows and main_process:
            append_jsonl({"step": step, "rows": rows}, Path(self.output_dir) / "top_completions.jsonl")
            if wandb := wandb_run(self.report_to):
                columns = ["step", "reward", "correct", "n_tokens", "truncated", "gold", "completion"]
                table = wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])
                wandb.log({"monitor/top_completions": table}, commit=False)
        pending, self.pending = self.pending, {}
        return pending


@dataclass
class WandbConfigCallback(TrainerCallback):
    """Adds the run's whole resolved config (secrets redacted), not only its ``TrainingArguments``, to the W&B run."""

    resolved_config: dict
    report_to: Sequence[str] = ()

    def on_train_begin(self, args, state, control, **kwargs):
        if self.resolved_config and (wandb := wandb_run(self.report_to)):
            wandb.config.update({"leash": self.resolved_config}, allow_val_change=True)


def wandb_run(report_to: Sequence[str]):
    """The ``wandb`` module when the run reports to W&B and W&B has started a run, else None."""
    if "wandb" not in report_to:
        return None
    import wandb  # only under report_to: wandb (importing it costs seconds)

    return wandb if wandb.run is not None else None


def held_out_metrics(model, tokenizer, **eval_kwargs) -> dict[str, float]:
    """``eval/...`` metrics from ``eval.run.evaluate`` on a held-out set (greedy), restoring train mode after."""
    was_training = model.training
    model.eval()
    try:
        result = eval_run.evaluate(model, tokenizer, **eval_kwargs)
    finally:
        model.train(was_training)
    out = {"eval/accuracy": result["accuracy"], "eval/n": result["n"]}
    for key, value in flatten(result).items():
        if key.startswith(("length", "format", "trunc", "empty", "timeout")) and isinstance(value, int | float):
            out[f"eval/{key}"] = value
    return out


def flatten(d: dict, prefix: str = "") -> dict:
    """Nested dict -> flat dict with ``/``-joined keys.

    >>> flatten({"length": {"correct": 3, "wrong": 5}, "n": 2})
    {'length/correct': 3, 'length/wrong': 5, 'n': 2}
    """
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= flatten(value, f"{name}/")
        else:
            out[name] = value
    return out


def make_monitored_trainer_class(base):
    """A subclass of ``base`` whose ``log`` adds the pending metrics of its ``monitor_callback``."""

    class MonitoredTrainer(base):
        def __init__(self, *args, monitor_callback: MonitorCallback | None = None, **kwargs):
            self.monitor_callback = monitor_callback  # None: the log passes through
            super().__init__(*args, **kwargs)

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if self.monitor_callback is not None and self.model.training:
                logs.update(self.monitor_callback.pop_pending(self.state.global_step, self.is_world_process_zero()))
            super().log(logs, start_time)

    MonitoredTrainer.__name__ = f"Monitored{base.__name__}"
    return MonitoredTrainer


class TrainSeconds(TrainerCallback):
    """Logs ``train_seconds``: the time in optimizer steps (generation and scoring included), without evaluations,
    checks, logging and saving. With ``budget`` training stops past it, so two methods can get the same compute. Put
    it first among the callbacks, so that the others' checks fall outside it.
    """

    clock = staticmethod(time.perf_counter)

    def __init__(self, budget: float | None = None):
        self.budget, self.total, self.began = budget, 0.0, None

    def on_train_begin(self, args, state, control, **kwargs):
        logged = [row["train_seconds"] for row in state.log_history if "train_seconds" in row]
        self.total = logged[-1] if logged else 0.0  # a resumed run goes on from its checkpoint's count
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        self.began = self.clock()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.began is not None:
            self.total += self.clock() - self.began
            self.began = None
        if self.budget is not None and self.total >= self.budget:
            control.should_training_stop = True
        if control.should_save and not control.should_log:  # a checkpoint without a log line: keep the count in it
            state.log_history.append({"train_seconds": round(self.total, 2), "step": state.global_step})
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None:
            logs["train_seconds"] = round(self.total, 2)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                # the trainer recorded this line before the callbacks saw it: the checkpoint's copy gets the count
                # too, so a resumed run goes on from it (on_train_begin)
                state.log_history[-1]["train_seconds"] = logs["train_seconds"]
        return control


class ValidationStop(TrainerCallback):
    """Every ``every`` steps, greedy accuracy on a validation set; training stops at ``stop_at`` or at the plateau
    (``eval.metrics.plateau_stop``: ``patience`` checks without a new best), and with ``patience`` the best check's
    weights are put back at the end. Stopping on data other than the held-out set keeps the held-out set from choosing
    the model."""

    def __init__(
        self, every: int, stop_at: float | None, eval_kwargs: dict, path: str | Path, patience: int | None = None
    ):
        self.every, self.stop_at, self.eval_kwargs, self.path = every, stop_at, eval_kwargs, Path(path)
        self.patience = patience
        self.history: list[dict] = []
        self.best: dict | None = None  # the best check so far (with patience); its weights are in best_path
        self.best_path = self.path.with_name("best_check.pt")
        self.first = 0  # the checks before it have no weights on disk (a resume without best_check.pt): no best
        self.stopped_on_plateau = False
        self.started = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()
        if state.global_step and self.path.exists():  # a resumed run: the checks made before its checkpoint count
            rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
            self.history = [r for r in rows if r["step"] <= state.global_step]
            self.first = 0 if self.best_path.exists() else len(self.history)
        return control

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.every:
            return control
        metrics = held_out_metrics(model, processing_class, **self.eval_kwargs)
        row = {"step": state.global_step, "accuracy": metrics["eval/accuracy"], "n": metrics["eval/n"]}
        row["seconds"] = round(time.monotonic() - self.started, 1)  # since training began, checks included
        self.history.append(row)
        plateau, self.best = plateau_stop(self.history[self.first :], self.patience) if self.patience else (None, None)
        if self.best is row and state.is_world_process_zero:  # on disk: a resumed run still ends on its best check
            torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, self.best_path)
        if state.is_world_process_zero:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            best = "" if self.best is None else f"; best {self.best['accuracy']:.3f} at step {self.best['step']}"
            print(f"step {row['step']}: validation accuracy {row['accuracy']:.3f} (n={row['n']}){best}", flush=True)
            # the same check as a log record, for a caller's progress display (cpu_lab.warmstart relays it)
            extra = {"step": row["step"], "validation_accuracy": row["accuracy"]}
            CHECKS_LOGGER.info("step %d: validation accuracy %.3f", row["step"], row["accuracy"], extra=extra)
        if self.stop_at is not None and row["accuracy"] >= self.stop_at:
            control.should_training_stop = True
        elif plateau is not None:
            self.stopped_on_plateau = control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.best is not None and model is not None and self.best_path.exists():
            if self.history[-1]["step"] != self.best["step"]:  # the plateau's best check, not the checks after it
                model.load_state_dict(torch.load(self.best_path, weights_only=True))
            self.best_path.unlink()
        return control

    def report(self) -> dict:
        """The checks, the last accuracy, the best check kept (with ``patience``) and why training ended."""
        last = self.history[-1] if self.history else {"step": None, "accuracy": None}
        reached = self.stop_at is not None and last["accuracy"] is not None and last["accuracy"] >= self.stop_at
        if reached:
            why = f"reached {self.stop_at}"
        elif self.stopped_on_plateau:
            why = f"plateau: {self.patience} checks without a new best"
        else:
            why = "max_steps" + (f" before {self.stop_at}" if self.stop_at else "")
        out = {"checks": self.history, "last": last["accuracy"], "last_step": last["step"], "why": why}
        if self.patience is not None and self.best is not None:
            out |= {"best": self.best["accuracy"], "best_step": self.best["step"], "kept": "best check's weights"}
        return out


__all__ = [
    "CHECKS_LOGGER",
    "MonitorCallback",
    "RewardMonitor",
    "TrainSeconds",
    "ValidationStop",
    "WandbConfigCallback",
    "flatten",
    "held_out_metrics",
    "make_monitored_trainer_class",
]
