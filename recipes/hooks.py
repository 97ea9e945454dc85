"""Extra callbacks for a GRPO run, named in its config as ``'module:function'`` (``callbacks:``).

    # in a GRPO config
    callbacks: [judge_lab.tracker:lab_step_log]

Each function is imported before any model loads (a bad spec is one line: ``recipes.validate.import_hook``) and
called, still before any model loads, with a ``HookContext``: the parsed arguments, the output folder, the training
rows, the run's reward functions (in ``reward_funcs`` order, as built by ``recipes.reward_setup``) and the tracked
answers' tracker. It returns a ``TrainerCallback`` or a list of them; a ``ValueError`` it raises is reported as one
line, like the recipe's own checks. The recipe then adds them after its own callbacks (the JSON-lines log, the
monitors, the tracker), calls ``attach(trainer)`` on those that have it once the trainer is built, and appends to each
one's ``run_files`` (names under ``output_dir``) when the run resumes, or deletes them when it starts afresh.

What a callback has to add to a log line goes through ``context.log(metrics)``: the values reach the next log line, in
``log.jsonl`` and every ``report_to`` backend alike. ``context.held_out(model, tokenizer, step)`` gives the recipe's
held-out ``eval/...`` metrics at ``step`` (the monitors' own evaluation when one ran at that step, else one with the
same settings). Callbacks that the judge lab and the over-optimisation lab use: ``judge_lab.tracker:lab_step_log``
(every answer of every step, ``steps.jsonl``) and ``reward_model_lab.overoptimisation:leash_curve`` (held-out
accuracy, proxy reward and sqrt KL every ``monitor_eval_steps``, ``curve.jsonl``).

>>> load_hooks(["json:dumps"])[0].__name__
'dumps'
>>> load_hooks(["json.dumps"])
Traceback (most recent call last):
...
ValueError: hook 'json.dumps' must read 'module:function', e.g. cpu_lab.curriculum:lab_curriculum
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback

from recipes.validate import import_hook


@dataclass
class HookContext:
    """What a callback hook is called with (see the module docstring)."""

    script_args: object
    training_args: object
    model_args: object
    output_dir: Path
    rows: object  # the training rows (a datasets.Dataset with prompt, question, answer)
    reward_funcs: list[Callable]
    reward_names: list[str]
    tracker: object | None = None  # recipes.tracked.ProbabilityTracker when tracked_answers are set
    monitor_callback: object | None = field(default=None, repr=False)  # set by the recipe before training

    def log(self, metrics: dict) -> None:
        """Add ``metrics`` to the next log line (log.jsonl and every report_to backend)."""
        self.monitor_callback.pending.update(metrics)

    def held_out(self, model, tokenizer, step: int) -> dict:
        """The recipe's held-out ``eval/...`` metrics at ``step``."""
        return self.monitor_callback.held_out(model, tokenizer, step)


def load_hooks(specs: Sequence[str]) -> list[Callable]:
    """Import every ``'module:function'`` in ``specs`` (before any model loads)."""
    return [import_hook(spec) for spec in specs]


def call_hooks(hooks: Sequence[Callable], context: HookContext) -> list:
    """The callbacks the hooks return, in order; each must be a ``TrainerCallback``."""
    callbacks = []
    for hook in hooks:
        made = hook(context)
        made = list(made) if isinstance(made, list | tuple) else [made]
        wrong = [type(c).__name__ for c in made if not isinstance(c, TrainerCallback)]
        if wrong:
            raise ValueError(
                f"callback hook {hook.__module__}:{hook.__name__} returned {wrong}, not TrainerCallback(s): return "
                "a transformers.TrainerCallback or a list of them"
            )
        callbacks += made
    return callbacks


def run_files(callbacks: Sequence) -> list[str]:
    """The files under ``output_dir`` that the callbacks write and a resumed run appends to."""
    return [name for c in callbacks for name in getattr(c, "run_files", ())]


def attach(callbacks: Sequence, trainer) -> None:
    """Hand the trainer to every callback that asks for it (``attach(trainer)``)."""
    for callback in callbacks:
        if hasattr(callback, "attach"):
            callback.attach(trainer)
