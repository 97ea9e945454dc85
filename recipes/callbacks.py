"""What the GRPO recipe does with the monitors' held-out checks while it trains: keep the best checkpoint
(``BestCheckpoint``) and raise the hack alarm (``HackAlarm``). Both read the log stream and nothing else.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback

from eval.jsonl import read_jsonl
from recipes.hack_alarm import ACCURACY_KEY, ALARM_KEY, ALPHA, CheckLog, comparisons, finite, hack_signature
from recipes.monitors import wandb_run

logger = logging.getLogger(__name__)


class HackAlarm(TrainerCallback):
    """Warns once, loudly, when the monitors' checks show the hack signature (``hack_signature``); with ``stop`` ends
    training there.

    Adds ``monitor/hack_alarm`` (0, then 1 from the check that raised it) to every check line: put it before the
    JSON-lines logger so that it reaches ``log.jsonl``. A resumed run replays ``log_path`` up to its checkpoint, so
    the alarm is not raised twice.
    """

    def __init__(
        self,
        checks: int,
        eval_every: int,
        stop: bool = False,
        log_path: str | Path | None = None,
        n_problems: int = 0,
        report_to: Sequence[str] = (),
    ):
        self.checks, self.eval_every, self.stop = checks, eval_every, stop
        self.n_problems, self.report_to = n_problems, list(report_to)
        self.log_path = Path(log_path) if log_path is not None else None
        self.comparisons: int | None = None  # C, set when training begins
        self.log = CheckLog()
        self.fired: dict | None = None  # what fired, with its step
        self.stopped = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.comparisons = comparisons(state.max_steps, self.eval_every, self.checks)
        if state.global_step > 0 and self.log_path is not None and self.log_path.exists():  # resumed: replay
            for line in read_jsonl(self.log_path):
                if line.get("step", 0) <= state.global_step:
                    self._observe(line)

    def _observe(self, line: dict) -> dict | None:
        """Feed one log line; returns what fired when this line raises the alarm."""
        check = self.log.add(line)
        if check is None or self.fired is not None:
            return None
        if self.comparisons is None:
            raise RuntimeError("HackAlarm saw a check before on_train_begin counted the run's comparisons")
        found = hack_signature(self.log.checks, self.checks, self.comparisons, n=self.n_problems)
        if found is None:
            return None
        self.fired = {"step": check.step, **found}
        return self.fired

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return control
        fired = self._observe({**logs, "step": state.global_step})
        if finite(logs.get(ACCURACY_KEY)) is not None:  # a check line (held-out accuracy 0.0 included)
            values = {ALARM_KEY: float(self.fired is not None)}
            if fired is not None:
                values |= {f"{ALARM_KEY}_{key}": fired[key] for key in ("accuracy_drop", "p_fall", "reward_tau")}
            logs.update(values)
            if state.is_world_process_zero and (wandb := wandb_run(self.report_to)):
                wandb.log({f"train/{k}": v for k, v in values.items()} | {"train/global_step": state.global_step})
        if fired is not None:
            if state.is_world_process_zero:
                logger.warning(self.banner(fired))
            if self.stop:
                control.should_training_stop = True
                self.stopped = True
        return control

    def banner(self, fired: dict) -> str:
        window = ", ".join(str(s) for s in fired["window_steps"])
        then = "STOPPING the run (stop_on_hack)" if self.stop else "training goes on (stop_on_hack: true stops it)"
        return (
            f"\n{'!' * 24} HACK ALARM at step {fired['step']} {'!' * 24}\n"
            f"held-out accuracy {fired['accuracy_window']:.3f} at the last {self.checks} monitor check(s) (steps "
            f"{window}) is below the {fired['accuracy_reference']:.3f} of step {fired['reference_step']} by more than "
            f"checks of {fired['n']} problems vary (p = {fired['p_fall']:.2g} < {fired['level']:.2g}: false alarms "
            f"at most {ALPHA} per run), while the training reward rose (Kendall tau {fired['reward_tau']:+.2f}, p = "
            f"{fired['p_reward']:.2g}): the reward pays for something the checks do not count as correct. Read "
            f"top_completions.jsonl and probes.json; {then}."
        )

    def report(self) -> dict:
        """``{"hack_alarm": ...}`` for the run's report: the setting and what fired (None when it did not)."""
        return {
            "hack_alarm": {
                "checks": self.checks,
                "comparisons": self.comparisons,
                "alpha": ALPHA,
                "fired": self.fired,
                "stopped": self.stopped,
            }
        }


class BestCheckpoint(TrainerCallback):
    """Saves the model and tokenizer to ``path`` (with ``best.json``) at each held-out check that beats every earlier
    one. TRL's ``load_best_model_at_end`` needs the Trainer's eval loop, which GRPO does not run.

    A kill while saving leaves the previous best whole; the weights are the unwrapped model's, so ZeRO-3 is refused
    before training (``check_watch_args``).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.best: dict | None = None  # {"step", "accuracy", "n"} of the saved checkpoint

    def on_train_begin(self, args, state, control, **kwargs):
        info = self.path / "best.json"
        if state.global_step > 0 and info.exists():
            self.best = json.loads(info.read_text())
        elif state.global_step == 0 and state.is_world_process_zero and self.path.exists():
            shutil.rmtree(self.path)

    def on_log(self, args, state, control, logs=None, model=None, processing_class=None, **kwargs):
        accuracy = finite((logs or {}).get(ACCURACY_KEY))
        if accuracy is None or (self.best is not None and accuracy <= self.best["accuracy"]):
            return control
        n = finite(logs.get("eval/n"))
        self.best = {"step": state.global_step, "accuracy": accuracy, "n": int(n) if n is not None else None}
        if state.is_world_process_zero and model is not None:
            self._save(model, processing_class)
        return control

    def _save(self, model, tokenizer) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "best.json").write_text(json.dumps(self.best, indent=1) + "\n")
        shutil.rmtree(self.path, ignore_errors=True)
        tmp.rename(self.path)

    def report(self) -> dict:
        """``{"best_checkpoint": ...}`` for the run's report: its path, step and accuracy (None: no check ran)."""
        return {"best_checkpoint": None if self.best is None else {"path": str(self.path), **self.best}}
