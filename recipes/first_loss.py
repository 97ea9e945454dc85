"""The first-loss check of the DPO and reward-model recipes: step 1 must show the known starting point.

At step 1 a DPO policy is its reference (each log-sigmoid loss is ln 2, the implicit rewards 0) and a reward model's
zero score head ties every pair (loss ``log(1 + e^margin)``); anything else means the run did not start where the
recipe thinks. Self-contained on purpose: it is under mutation testing (docs/mutation.md).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

# TRL 1.16 DPOConfig.loss_type values that are a log-sigmoid of the reward margin: ln 2 per weight at the start
LN2_LOSSES = ("sigmoid", "sigmoid_norm", "robust")
FIRST_LOSS_TOLERANCE = 1e-3


@dataclass(frozen=True)
class StartingPoint:
    """What step 1 of a recipe must show, and the words its log uses."""

    name: str  # in "first <name> loss"
    state: str  # the starting state that is checked
    zero_keys: tuple[str, ...]  # logged values that are 0 in that state
    zeros: str  # what those values are, in words
    holds: str  # said when the check passes
    alarm: str  # the headline when it fails
    cause: str  # what a failure means, and where to look


DPO_START = StartingPoint(
    name="DPO",
    state="policy == reference",
    zero_keys=("rewards/chosen", "rewards/rejected"),
    zeros="implicit rewards",
    holds="the reference is the starting policy",
    alarm="DPO REFERENCE IS NOT THE STARTING POLICY",
    cause="The reference model differs from the model being trained (another checkpoint, dtype, adapter, "
    "quantization or dropout); the KL anchor is wrong.",
)
REWARD_MODEL_START = StartingPoint(
    name="reward-model",
    state="zero score head",
    zero_keys=("min_reward", "max_reward"),
    zeros="scores",
    holds="every pair starts tied",
    alarm="REWARD MODEL FIRST LOSS IS NOT A TIE",
    cause="The score head was not zero at the start, or the loss is not the one configured (margin).",
)


def expected_first_loss(
    loss_types: list[str], loss_weights: list[float] | None, use_weighting: bool
) -> tuple[float | None, str]:
    """The loss TRL 1.16 reports when policy == reference (ln 2 per log-sigmoid term, times its weight), and how it
    follows; ``None`` (and why) when it depends on the model and the data.

    >>> loss, how = expected_first_loss(["sigmoid", "robust"], [0.7, 0.2], False)
    >>> round(loss, 4), how
    (0.6238, 'ln 2 x (0.7 + 0.2)')
    >>> expected_first_loss(["sigmoid"], [0.5], True)[0] is None
    True
    """
    weights = loss_weights or [1.0] * len(loss_types)
    if use_weighting:
        return None, (
            "not predicted: use_weighting (WPO) multiplies each pair's loss by weights computed from the policy's own "
            "token probabilities on that pair, so it depends on the model and the batch"
        )
    others = sorted(set(loss_types) - set(LN2_LOSSES))
    if others:
        return None, f"not predicted: loss_type {others} is not a log-sigmoid loss (not ln 2 at the start)"
    return math.log(2) * sum(weights), "ln 2 x (" + " + ".join(f"{w:g}" for w in weights) + ")"


class FirstLossCheck(TrainerCallback):
    """Warns loudly when step 1 does not show the recipe's ``start`` (DPO's by default).

    It makes the trainer log step 1 alone, whatever ``logging_steps`` is. ``ok`` stays None when nothing could be
    checked (a resumed run starts past step 1).
    """

    def __init__(
        self,
        expected_loss: float | None,
        note: str = "",
        tolerance: float = FIRST_LOSS_TOLERANCE,
        start: StartingPoint = DPO_START,
    ):
        self.expected_loss, self.note, self.tolerance, self.start = expected_loss, note, tolerance, start
        self.first_loss: float | None = None
        self.ok: bool | None = None
        self.resumed_at: int | None = None
        self._seen_step = False

    def on_step_end(self, args, state, control, **kwargs):
        if not self._seen_step and state.global_step > 1:
            self.resumed_at = state.global_step
            logger.info(
                "first step seen is %d (resumed): the %s check does not apply", state.global_step, self.start.state
            )
        self._seen_step = True
        if state.global_step == 1:
            control.should_log = True  # step 1's loss, not a mean over the first logging_steps steps
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.ok is not None or self.resumed_at is not None or not logs or "loss" not in logs:
            return
        if state.global_step != 1:
            logger.warning("first loss logged at step %d, not 1: cannot check %s", state.global_step, self.start.state)
            self.ok = False
            return
        self.first_loss = logs["loss"]
        zeros = self.start.zero_keys
        problems = [f"{key} = {logs[key]:.6f}, not 0" for key in zeros if abs(logs.get(key, 0.0)) > self.tolerance]
        if self.expected_loss is not None and abs(self.first_loss - self.expected_loss) > self.tolerance:
            problems.insert(0, f"first loss {self.first_loss:.6f}, expected {self.expected_loss:.6f} ({self.note})")
        self.ok = not problems
        if problems:
            bar = "!" * 100
            logger.warning("\n%s\n%s: %s.\n%s\n%s", bar, self.start.alarm, "; ".join(problems), self.start.cause, bar)
        elif self.expected_loss is None:
            logger.info(
                "first %s loss %.6f (%s); %s 0: %s",
                self.start.name,
                self.first_loss,
                self.note,
                self.start.zeros,
                self.start.holds,
            )
        else:
            logger.info("first %s loss %.6f = %s: %s", self.start.name, self.first_loss, self.note, self.start.holds)

    def report(self) -> dict:
        return {
            "first_loss": self.first_loss,
            "first_loss_ok": self.ok,
            "first_loss_expected": self.expected_loss,
            "first_loss_note": self.note,
        }
