"""Fault injection for chaos tests and staging drills (`--inject-fault`).

Each fault fires once per job, not once per launch: a marker file in the checkpoint
directory remembers that it fired, so the relaunch after an injected crash trains on
instead of crashing again at the same step.

    sigkill@S   after step S's update: SIGKILL (no chance to save)
    sigterm@S   after step S's update: SIGTERM (as on eviction)
    nan@S       during step S: the loss becomes NaN
    hang@S      during step S: sleep forever before the collectives
    exception@S during step S: raise an error
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

from trainer.config import Fault

log = logging.getLogger("trainer.faults")


class InjectedFault(RuntimeError):
    pass


class FaultInjector:
    def __init__(self, faults: tuple[Fault, ...], rank: int, marker_dir: Path | None):
        self.faults = [f for f in faults if f.rank is None or f.rank == rank]
        self.rank = rank
        self.marker_dir = marker_dir / ".faults" if marker_dir else None
        self._fired: set[Fault] = set()

    def _claim(self, kind: str, step: int) -> Fault | None:
        for fault in self.faults:
            if fault.kind != kind or fault.step != step or fault in self._fired:
                continue
            self._fired.add(fault)
            if self.marker_dir is not None:
                self.marker_dir.mkdir(parents=True, exist_ok=True)
                marker = self.marker_dir / f"{fault.kind}@{fault.step}.rank{self.rank}"
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    continue  # fired in an earlier launch
            log.warning("injecting fault %s on rank %d", fault, self.rank)
            return fault
        return None

    def during_step(self, step: int) -> bool:
        """Hang or raise if due; True when this step's loss must become NaN."""
        if self._claim("hang", step):
            threading.Event().wait()
        if self._claim("exception", step):
            raise InjectedFault(f"injected exception at step {step}")
        return self._claim("nan", step) is not None

    def after_step(self, step: int) -> None:
        if self._claim("sigkill", step):
            os.kill(os.getpid(), signal.SIGKILL)
        if self._claim("sigterm", step):
            os.kill(os.getpid(), signal.SIGTERM)
            # The signal lands at the end of this step: wait here for the handler.
            threading.Event().wait()
