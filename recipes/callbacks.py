"""What the GRPO recipe does with the monitors' held-out checks while it trains: keep the best checkpoint, raise the
hack alarm (``recipes.grpo_setup.held_out_watch`` builds them as the run's options ask).

Both callbacks read the log stream and nothing else (the checks and the rule are ``recipes.hack_alarm``):

- ``BestCheckpoint`` (``keep_best_checkpoint``) saves the model (the adapter with LoRA) and its tokenizer to
  ``<output_dir>/best/`` at each check whose held-out accuracy beats every earlier check, with ``best.json`` (step,
  accuracy, n). TRL's ``load_best_model_at_end`` cannot do this: it needs the Trainer's eval loop, which GRPO does not
  run.
- ``HackAlarm`` (``hack_alarm_checks``, ``stop_on_hack``) warns once, loudly, when the checks show the reward-hacking
  signature (``recipes.hack_alarm.hack_signature``: held-out accuracy falling beyond the checks' noise while the
  training reward rises), and can stop the run.
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

    It reads each log line: the training reward of every line, the held-out accuracy of the check lines. When training
    begins it counts the comparisons the run will make (``comparisons``: from the trainer's ``max_steps`` and
    ``eval_every``), over which the false-alarm rate ``ALPHA`` is split. At every check line it adds
    ``monitor/hack_alarm`` (0 before the alarm, 1 from the check that raised it on); the line that raises it also gets
    ``monitor/hack_alarm_accuracy_drop``, ``monitor/hack_alarm_p_fall`` and ``monitor/hack_alarm_reward_tau``. Put it
    before the JSON-lines logger in the callback list, so these reach ``log.jsonl``; under ``report_to: wandb`` the
    values are also logged to W&B at the check's step (the Trainer's W&B callback has already sent the line by the time
    this one sees it). A resumed run replays ``log_path`` up to its checkpoint first, so the checks before the kill
    count and the alarm is not raised twice.

    Args:
        checks: N, the latest checks averaged and compared with each earlier check (``hack_signature``).
        eval_every: steps between the monitors' checks (``monitor_eval_steps``).
        stop: set ``control.should_training_stop`` when the alarm fires.
        log_path: the run's ``log.jsonl`` (replayed when the run resumes).
        n_problems: problems in each held-out check (``monitor_eval_limit``), for check lines without ``eval/n``.
        report_to: the run's ``report_to`` list.
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
        if checks < 1:
            raise ValueError(f"HackAlarm needs checks >= 1, got {checks}")
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
        line = {**logs, "step": state.global_step}
        fired = self._observe(line)
        if finite(logs.get(ACCURACY_KEY)) is not None:  # a check line (held-out accuracy 0.0 included)
            values = {ALARM_KEY: float(self.fired is not None)}
            if fired is not None:
                values |= {f"{ALARM_KEY}_{key}": fired[key] for key in ("accuracy_drop", "p_fall", "reward_tau")}
            logs.update(values)
            if state.is_world_process_zero:
                self._wandb(values, state.global_step)
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

    def _wandb(self, values: dict, step: int) -> None:
        if wandb := wandb_run(self.report_to):
            wandb.log({f"train/{k}": v for k, v in values.items()} | {"train/global_step": step})

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
    """Saves the model (the adapter with LoRA) and its tokenizer to ``path`` at each held-out check whose accuracy
    beats every earlier one (a tie keeps the earlier), with ``best.json``: step, accuracy, n.

    The save goes to ``<path>.tmp`` first and then replaces ``path``, so a kill while saving leaves the previous best
    whole. A fresh run deletes a ``path`` left by an earlier run in the same folder; a resumed run reads its
    ``best.json`` and keeps it until a check beats it. Only the main process writes; the weights are the unwrapped
    model's, so DeepSpeed ZeRO-3 (weights sharded across processes) is refused before training
    (``check_watch_args``).
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
