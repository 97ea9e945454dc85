"""What a run shows and writes while it trains: instead of TRL's dict of 60 to 100 metrics per log, one console line
per logged step of what a person watches (seconds per step are wall time, monitor checks included):

    step 12/72  reward 0.41  correct 0.38  degenerate 0.50  len right/wrong 14/22  kl 0.003  31.2 s/step

and every logged value in ``<output_dir>/log.jsonl``; the ``report_to`` backends get everything, unchanged.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm
from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from eval.jsonl import append_jsonl

METHODS = {"GRPOTrainer": "grpo", "SFTTrainer": "sft", "DPOTrainer": "dpo", "RewardTrainer": "reward_model"}
PROBE_COLUMNS = 3


def _finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def shown(label: str, value, spec: str) -> str | None:
    """``label value`` with the value formatted by ``spec``; None when the value is missing or not a number.

    >>> shown("loss", 0.693147, ".4g"), shown("kl", None, ".3g")
    ('loss 0.6931', None)
    """
    number = _finite(value)
    return None if number is None else f"{label} {number:{spec}}"


def _lengths(logs: dict) -> str | None:
    right, wrong = (_finite(logs.get(f"monitor/length_{kind}")) for kind in ("correct", "wrong"))
    if right is None and wrong is None:
        return None
    return "len right/wrong " + "/".join("-" if n is None else f"{n:.0f}" for n in (right, wrong))


def _held_out(logs: dict) -> str | None:
    accuracy, n = _finite(logs.get("eval/accuracy")), _finite(logs.get("eval/n"))
    if accuracy is None:
        return None
    return f"held-out {accuracy:.2f}" + ("" if n is None else f" (n={n:.0f})")


def _grpo(logs: dict, prefix: str = "") -> list[str | None]:
    return [
        shown("reward", logs.get("reward"), ".2f"),
        shown("correct", logs.get("monitor/correct_rate"), ".2f"),
        shown("degenerate", logs.get("monitor/degenerate_share"), ".2f"),
        _lengths(logs),
        shown("kl", logs.get("kl"), ".3g"),
        _held_out(logs),
    ]


def _sft(logs: dict, prefix: str = "") -> list[str | None]:
    learning_rate = None if prefix else shown("lr", logs.get("learning_rate"), ".2g")
    return [shown("loss", logs.get(f"{prefix}loss"), ".4g"), learning_rate]


def _dpo(logs: dict, prefix: str = "") -> list[str | None]:
    return [
        shown("loss", logs.get(f"{prefix}loss"), ".4g"),
        shown("accuracy", logs.get(f"{prefix}rewards/accuracies"), ".2f"),
        shown("margin", logs.get(f"{prefix}rewards/margins"), ".3g"),
    ]


def _reward_model(logs: dict, prefix: str = "") -> list[str | None]:
    return [
        shown("loss", logs.get(f"{prefix}loss"), ".4g"),
        shown("accuracy", logs.get(f"{prefix}accuracy"), ".2f"),
        shown("margin", logs.get(f"{prefix}margin"), ".3g"),
    ]


FIELDS = {"grpo": _grpo, "sft": _sft, "dpo": _dpo, "reward_model": _reward_model}  # each: (logs, key prefix)
EVAL_FIELDS = {"dpo": _dpo, "reward_model": _reward_model}  # the others: the loss


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f}" if seconds >= 10 else f"{seconds:.2f}"


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def step_line(method: str, logs: dict, step: int, max_steps: int, seconds_per_step: float | None) -> str:
    """The console line of one logged training step of ``method`` (an unknown one shows loss and learning rate).

    >>> step_line("sft", {"loss": 2.31312, "learning_rate": 1e-05, "grad_norm": 3.0}, 3, 40, 0.512)
    'step 3/40  loss 2.313  lr 1e-05  0.51 s/step'
    """
    parts = [f"step {step}/{max_steps}", *FIELDS.get(method, _sft)(logs)]
    if seconds_per_step is not None:
        parts.append(f"{_seconds(seconds_per_step)} s/step")
    return "  ".join(part for part in parts if part)


def eval_line(method: str, logs: dict, step: int) -> str:
    """The console line of an evaluation during training (the trainer's ``eval_...`` keys).

    >>> eval_line("sft", {"eval_loss": 1.25, "eval_runtime": 0.3}, 50)
    'held-out at step 50  loss 1.25'
    """
    fields = EVAL_FIELDS.get(method, _sft)(logs, prefix="eval_")
    return "  ".join(part for part in [f"held-out at step {step}", *fields] if part)


def probe_table(logs: dict, columns: int = PROBE_COLUMNS) -> str | None:
    """The hack probes of a log line (``probe/<name>``) as a small table; None when the line has none.

    >>> print(probe_table({"probe/genuine_correct": 1.1, "probe/hedge": 0.0, "probe/empty": None, "probe/violations": 0}))
    hack probes: what this reward set pays each made-up answer (violations 0; probes.json has the rules)
      genuine_correct  1.10   hedge            0.00   empty               -
    """  # noqa: E501
    names = [k for k in logs if k.startswith("probe/") and k != "probe/violations"]
    if not names:
        return None
    violations = _finite(logs.get("probe/violations"))
    width = max(len(name) for name in names) - len("probe/")
    cells = []
    for name in names:
        score = _finite(logs[name])
        cells.append(f"{name.removeprefix('probe/'):<{width}} {'-' if score is None else f'{score:.2f}':>5}")
    rows = ["   ".join(cells[i : i + columns]).rstrip() for i in range(0, len(cells), columns)]
    count = "?" if violations is None else f"{violations:.0f}"
    header = (
        f"hack probes: what this reward set pays each made-up answer (violations {count}; probes.json has the rules)"
    )
    return "\n".join([header, *(f"  {row}" for row in rows)])


class ConsoleCallback(TrainerCallback):
    """One line per logged step and per evaluation, the hack probes once and the training time at the end; on a
    terminal, a progress bar under them. Only the main process prints."""

    def __init__(self, method: str, stream=None):
        self.method, self.stream = method, stream
        self.bar = None
        self.probes_shown = False
        self.clock: tuple[float, int] | None = None  # (time, step) of the previous line

    def _out(self):
        return self.stream if self.stream is not None else sys.stdout

    def _print(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self._out())  # above the bar, which is drawn again under it
        else:
            print(text, file=self._out(), flush=True)

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.clock = (time.monotonic(), state.global_step)
        if self._out().isatty():
            self.bar = tqdm(
                total=state.max_steps, initial=state.global_step, file=self._out(), leave=False, dynamic_ncols=True
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:  # the trainer's last log: how long training took
            self._print(f"trained {state.global_step} steps in {_duration(logs['train_runtime'])}")
            return
        if any(key.startswith("eval_") for key in logs):
            self._print(eval_line(self.method, logs, state.global_step))
            return
        if not self.probes_shown and (table := probe_table(logs)):
            self._print(table)
            self.probes_shown = True
        if not any(FIELDS.get(self.method, _sft)(logs)):  # a line of other numbers (a recipe's own after training)
            return
        now = time.monotonic()
        since, at = self.clock or (now, state.global_step)
        per_step = (now - since) / (state.global_step - at) if state.global_step > at else None
        self.clock = (now, state.global_step)
        self._print(step_line(self.method, logs, state.global_step, state.max_steps, per_step))

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def method_of(trainer) -> str:
    """``grpo``, ``sft``, ``dpo`` or ``reward_model`` from the trainer's TRL class (or its subclass); else ``train``."""
    return next((METHODS[k.__name__] for k in type(trainer).__mro__ if k.__name__ in METHODS), "train")


def take_over(trainer) -> None:
    """Replace the trainer's printing of every log (``ProgressCallback`` or ``PrinterCallback``) with
    ``ConsoleCallback``."""
    handler = trainer.callback_handler
    for printer in (ProgressCallback, PrinterCallback):
        while any(type(c) is printer for c in handler.callbacks):
            trainer.remove_callback(printer)
    if not any(isinstance(c, ConsoleCallback) for c in handler.callbacks):
        trainer.add_callback(ConsoleCallback(method_of(trainer)))


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
    """Writes every ``on_log`` dict, plus ``step`` and ``epoch``, as one JSON line to ``path``; NaN becomes ``null``.

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
        append_jsonl(record, self.path)
