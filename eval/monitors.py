"""Train-time monitors for GRPO: wasted groups, length bias, reward hacking and collapse, visible while training.

Three pieces, used together by ``recipes/grpo.py`` (and the JSON-lines logger by every recipe):

- ``RewardMonitor`` wraps the run's reward functions (same ``__name__``, so TRL's ``rewards/<name>/mean`` keys do not
  change) and records, for every completion, its weighted total reward, whether its final answer is correct, its
  length in tokens and whether it was cut off. After the last reward function of a generation batch it computes the
  ``monitor/...`` metrics of that batch and hands them to TRL's ``log_metric`` (TRL averages them over the logging
  window, across processes, and sends them to ``report_to``).
- ``MonitorCallback`` (a ``TrainerCallback``) scores the hack probes under the run's reward set when training starts
  (``probe/...``), runs a held-out evaluation every N steps through ``eval.run.evaluate`` (``eval/...``), and writes
  the table of the highest-reward completions of each logging window. ``MonitoredGRPOTrainer.log`` adds the
  callback's pending ``probe/...`` and ``eval/...`` values to the next log, so they reach every ``report_to``
  backend and the JSON-lines file like TRL's own metrics.
- ``JsonlLogCallback(path)`` writes each logged dict as one JSON line, whatever ``report_to`` says.

The arithmetic lives in small pure functions tested on hand-made groups:

>>> expected_degenerate_share([0.5], group_size=4)  # 0.5**4 + 0.5**4
0.125
>>> groups = [[Sample(True, 1.1, 10), Sample(True, 1.1, 12)], [Sample(False, 0.1, 30), Sample(True, 1.0, 9)]]
>>> m = group_metrics(groups)
>>> m["monitor/degenerate_share"], m["monitor/degenerate_all_correct_share"], m["monitor/correct_rate"]
(0.5, 0.5, 0.75)
>>> m["monitor/length_wrong"], round(m["monitor/reward_correctness_gap"], 4)
(30.0, 0.075)
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

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

TOP_K = 20  # completions kept per logging window in the top-reward table


# --------------------------------------------------------------------------------------------------- pure metrics
@dataclass(frozen=True)
class Sample:
    """One scored completion: correctness of its final answer, weighted total reward, length in tokens."""

    correct: bool
    reward: float
    n_tokens: int
    truncated: bool = False
    text: str = ""


def expected_degenerate_share(pass_rates: Sequence[float], group_size: int) -> float:
    """Mean over groups of ``p**G + (1-p)**G``: the chance that a fresh group of G answers to a prompt with pass
    rate p is all correct or all wrong (and so has zero advantage and teaches nothing).

    >>> round(expected_degenerate_share([0.9], 4), 4), round(expected_degenerate_share([0.97], 4), 4)
    (0.6562, 0.8853)
    >>> round(expected_degenerate_share([0.9], 16), 4), expected_degenerate_share([0.0, 1.0], 8)
    (0.1853, 1.0)
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if not pass_rates:
        return math.nan
    return sum(p**group_size + (1 - p) ** group_size for p in pass_rates) / len(pass_rates)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def group_metrics(groups: Sequence[Sequence[Sample]]) -> dict[str, float]:
    """The ``monitor/...`` metrics of one batch of groups (each group: the G completions for one prompt).

    A group is degenerate when all its answers are correct or all are wrong: GRPO's advantage is then zero for the
    whole group whatever the other reward terms say about format (TRL's ``frac_reward_zero_std`` looks at the
    weighted total, so a format bonus hides such groups). Lengths are means in tokens; NaN when a class is empty
    (TRL's logger skips NaN when averaging a window).

    >>> m = group_metrics([[Sample(False, 0.0, 8, True, "a"), Sample(False, 0.0, 8, True, "a")]])
    >>> m["monitor/degenerate_all_wrong_share"], m["monitor/duplicate_share"], m["monitor/truncated_rate"]
    (1.0, 1.0, 1.0)
    >>> math.isnan(m["monitor/length_correct"])
    True
    """
    groups = [list(g) for g in groups if len(g) > 0]
    if not groups:
        raise ValueError("group_metrics needs at least one non-empty group")
    samples = [s for g in groups for s in g]
    group_size = max(len(g) for g in groups)
    pass_rates = [sum(s.correct for s in g) / len(g) for g in groups]
    all_correct = sum(p == 1.0 for p in pass_rates) / len(groups)
    all_wrong = sum(p == 0.0 for p in pass_rates) / len(groups)
    # duplicates: 0 when every answer in the group differs, 1 when the group is one answer repeated
    duplicate = [(len(g) - len({s.text for s in g})) / (len(g) - 1) if len(g) > 1 else 0.0 for g in groups]
    reward_mean = _mean([s.reward for s in samples])
    correct_rate = _mean([float(s.correct) for s in samples])
    return {
        "monitor/correct_rate": correct_rate,
        "monitor/reward_mean": reward_mean,
        "monitor/reward_correctness_gap": reward_mean - correct_rate,
        "monitor/degenerate_share": all_correct + all_wrong,
        "monitor/degenerate_all_correct_share": all_correct,
        "monitor/degenerate_all_wrong_share": all_wrong,
        "monitor/degenerate_expected_share": expected_degenerate_share(pass_rates, group_size),
        "monitor/length_correct": _mean([s.n_tokens for s in samples if s.correct]),
        "monitor/length_wrong": _mean([s.n_tokens for s in samples if not s.correct]),
        "monitor/length_truncated": _mean([s.n_tokens for s in samples if s.truncated]),
        "monitor/truncated_rate": _mean([float(s.truncated) for s in samples]),
        "monitor/duplicate_share": _mean(duplicate),
        "monitor/collapsed_group_share": _mean([float(d == 1.0) for d in duplicate]),
    }


def split_groups(keys: Sequence, items: Sequence) -> list[list]:
    """Split ``items`` into runs of consecutive equal ``keys`` (TRL puts a prompt's G completions side by side).

    >>> split_groups(["a", "a", "b", "b", "a"], [1, 2, 3, 4, 5])
    [[1, 2], [3, 4], [5]]
    """
    groups: list[list] = []
    previous = object()
    for key, item in zip(keys, items, strict=True):
        if not groups or key != previous:
            groups.append([])
        groups[-1].append(item)
        previous = key
    return groups


# --------------------------------------------------------------------------------------------------- reward side
def _text(completion) -> str:
    from rewards._common import completion_text

    return completion_text(completion)


@dataclass
class RewardMonitor:
    """Wraps reward functions to record every completion's score, correctness and length, and logs ``monitor/...``.

    Args:
        reward_funcs: the run's reward callables, in config order.
        weights: parallel weights (None: 1.0 each, as TRL).
        task_name: the eval task name whose scoring decides correctness (``gsm8k``, ``math500``...).
        max_completion_length: completions this long (tokens) count as truncated.
        correctness_index: index of a correctness reward in ``reward_funcs`` whose 1.0 means "correct" (reused to
            avoid scoring twice); None scores with ``eval.scoring.score_completion`` (e.g. a format-only run).
    """

    reward_funcs: list[Callable]
    weights: list[float] | None
    task_name: str
    max_completion_length: int
    correctness_index: int | None = None
    top_k: int = TOP_K
    _outputs: dict[int, list] = field(default_factory=dict, init=False)
    _top: list = field(default_factory=list, init=False)  # min-heap of (reward, counter, row) over the window
    _counter: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)  # time spent in monitor code (for the overhead benchmark)

    def wrapped(self) -> list[Callable]:
        """The reward functions to give TRL: each records its output; the last one also computes the metrics."""
        return [self._wrap(i, f) for i, f in enumerate(self.reward_funcs)]

    def _wrap(self, index: int, func: Callable) -> Callable:
        def recording_reward(completions, **kwargs):
            scores = func(completions=completions, **kwargs)
            self._outputs[index] = list(scores)
            if len(self._outputs) == len(self.reward_funcs):
                start = time.perf_counter()
                self._record_batch(completions, kwargs)
                self._outputs = {}
                self.seconds += time.perf_counter() - start
            return scores

        recording_reward.__name__ = getattr(func, "__name__", f"reward_{index}")
        recording_reward.__qualname__ = recording_reward.__name__
        return recording_reward

    def _record_batch(self, completions, kwargs) -> None:
        weights = self.weights or [1.0] * len(self.reward_funcs)
        texts = [_text(c) for c in completions]
        answers = kwargs.get("answer") or [None] * len(texts)
        ids = kwargs.get("completion_ids") or [[] for _ in texts]
        totals = [
            sum(w * s for w, s in zip(weights, row, strict=True) if s is not None and not math.isnan(s))
            for row in zip(*(self._outputs[i] for i in range(len(self.reward_funcs))), strict=True)
        ]
        correct = self._correctness(texts, answers)
        samples = [
            Sample(c, r, len(t), len(t) >= self.max_completion_length, x)
            for c, r, t, x in zip(correct, totals, ids, texts, strict=True)
        ]
        keys = [str(p) for p in kwargs.get("prompts") or kwargs.get("question") or range(len(texts))]
        metrics = group_metrics(split_groups(keys, samples))
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
            row = {"step": step, "reward": sample.reward, "correct": sample.correct, "n_tokens": sample.n_tokens}
            row |= {"truncated": sample.truncated, "gold": gold, "completion": sample.text}
            self._counter += 1
            heapq.heappush(self._top, (sample.reward, -self._counter, row))
            if len(self._top) > self.top_k:
                heapq.heappop(self._top)

    def _correctness(self, texts: list[str], answers: list) -> list[bool]:
        if self.correctness_index is not None:
            return [s is not None and s >= 1.0 for s in self._outputs[self.correctness_index]]
        from eval.scoring import score_completion

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
def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class JsonlLogCallback(TrainerCallback):
    """Writes every ``on_log`` dict, plus ``step`` and ``epoch``, as one JSON line to ``path`` (main process only).

    Non-finite numbers become ``null``. Used by every recipe, whatever ``report_to`` says.

    >>> import tempfile, types
    >>> path = Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> state = types.SimpleNamespace(global_step=3, epoch=0.5, is_world_process_zero=True)
    >>> JsonlLogCallback(path).on_log(None, state, None, logs={"loss": 0.25, "kl": float("nan")})
    >>> path.read_text()
    '{"loss": 0.25, "kl": null, "step": 3, "epoch": 0.5}\\n'
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        record = {k: _jsonable(v) for k, v in logs.items()} | {"step": state.global_step, "epoch": state.epoch}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


@dataclass
class MonitorCallback(TrainerCallback):
    """Probe scores at the start, held-out evaluation every ``eval_every`` steps, top-reward table every log.

    Args:
        monitor: the run's ``RewardMonitor`` (for the reward set and the top-reward completions).
        output_dir: where ``top_completions.jsonl`` and ``probes.json`` are written.
        probe_problems: problems (dicts with ``question`` and final ``answer``) the hack probes are built from.
        answer_style: ``gsm8k`` or ``math`` (the probes' marker style).
        eval_every: run the held-out evaluation every this many optimizer steps (0: never).
        eval_kwargs: keyword arguments for ``eval.run.evaluate`` (task_name, data, limit, max_new_tokens...).
    """

    monitor: RewardMonitor
    output_dir: str | Path
    probe_problems: list[dict] = field(default_factory=list)
    answer_style: str = "gsm8k"
    eval_every: int = 0
    eval_kwargs: dict = field(default_factory=dict)
    report_to: Sequence[str] = ()
    resolved_config: dict = field(default_factory=dict)
    pending: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)

    def on_train_begin(self, args, state, control, **kwargs):
        if "wandb" in self.report_to and self.resolved_config:
            import wandb

            if wandb.run is not None:  # the whole resolved config (secrets redacted), not only TrainingArguments
                wandb.config.update({"leash": self.resolved_config}, allow_val_change=True)
        if not self.probe_problems or state.global_step > 0:  # a resumed run already logged them
            return
        from rewards.probes import probe_scores

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
        self.pending |= held_out_metrics(model, processing_class, **self.eval_kwargs)

    def pop_pending(self, step: int, main_process: bool = True) -> dict:
        """Metrics waiting for the next log; the main process also writes the top-reward table of the window."""
        rows = self.monitor.pop_top()
        if rows and main_process:
            path = Path(self.output_dir) / "top_completions.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(json.dumps({"step": step, "rows": rows}) + "\n")
            if "wandb" in self.report_to:
                _wandb_table(rows, step)
        pending, self.pending = self.pending, {}
        return pending


def held_out_metrics(model, tokenizer, **eval_kwargs) -> dict[str, float]:
    """``eval/...`` metrics from ``eval.run.evaluate`` on a held-out set (greedy), restoring train mode after."""
    from eval.run import evaluate

    was_training = model.training
    model.eval()
    try:
        result = evaluate(model, tokenizer, **eval_kwargs)
    finally:
        model.train(was_training)
    out = {"eval/accuracy": result["accuracy"], "eval/n": result["n"]}
    for key, value in flatten(result).items():
        if key.startswith(("length", "format", "trunc", "empty")) and isinstance(value, int | float):
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


def _wandb_table(rows: list[dict], step: int) -> None:
    import wandb

    if wandb.run is None:
        return
    columns = ["step", "reward", "correct", "n_tokens", "truncated", "gold", "completion"]
    table = wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])
    wandb.log({"monitor/top_completions": table}, commit=False)


def make_monitored_trainer_class(base):
    """A subclass of ``base`` (TRL's ``GRPOTrainer``) whose ``log`` adds the monitor callback's pending metrics."""

    class MonitoredTrainer(base):
        monitor_callback: MonitorCallback | None = None

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if self.monitor_callback is not None and self.model.training:
                logs.update(self.monitor_callback.pop_pending(self.state.global_step, self.is_world_process_zero()))
            super().log(logs, start_time)

    MonitoredTrainer.__name__ = f"Monitored{base.__name__}"
    return MonitoredTrainer


__all__ = [
    "JsonlLogCallback",
    "MonitorCallback",
    "RewardMonitor",
    "Sample",
    "expected_degenerate_share",
    "group_metrics",
    "held_out_metrics",
    "make_monitored_trainer_class",
    "split_groups",
]
