"""NaN/Inf guard: skip bad steps, roll back after too many, give up after that.

The decision is made from the gradient norm after DistributedDataParallel has
all-reduced the gradients. Those gradients are identical on every rank (a NaN on one
rank spreads to all in the sum), so every rank reaches the same decision without an
extra collective.
"""

from __future__ import annotations

import logging
import math
from enum import Enum

from trainer.config import GuardConfig
from trainer.errors import DivergedError

log = logging.getLogger("trainer.guard")


class Verdict(Enum):
    STEP = "step"  # apply the update
    SKIP = "skip"  # drop this update, keep going
    ROLLBACK = "rollback"  # drop it and return to the last checkpoint


class NonFiniteGuard:
    def __init__(self, config: GuardConfig):
        self.config = config
        self.consecutive = 0
        self.skipped_total = 0
        self.rollbacks = 0

    def judge(self, step: int, grad_norm: float, loss: float) -> Verdict:
        if math.isfinite(grad_norm):
            self.consecutive = 0
            return Verdict.STEP
        self.consecutive += 1
        self.skipped_total += 1
        log.warning(
            "step %d: non-finite gradient norm (%s, local loss %s); update skipped "
            "(%d in a row, rollback after %d)",
            step,
            grad_norm,
            loss,
            self.consecutive,
            self.config.max_bad_steps,
        )
        if self.consecutive < self.config.max_bad_steps:
            return Verdict.SKIP
        if self.rollbacks >= self.config.max_rollbacks:
            raise DivergedError(
                f"step {step}: {self.consecutive} consecutive non-finite steps after "
                f"{self.rollbacks} rollback(s); lower the learning rate or check the data"
            )
        self.rollbacks += 1
        self.consecutive = 0
        return Verdict.ROLLBACK
