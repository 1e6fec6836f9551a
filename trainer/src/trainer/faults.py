"""Fault injection for chaos tests and staging drills (`--inject-fault`).

Each fault fires once per job, not once per launch: a marker file in the checkpoint
directory remembers that it fired, so the relaunch after an injected crash trains on
instead of crashing again at the same step.

    sigkill@S   after step S's update: SIGKILL (no chance to save)
    sigterm@S   after step S's update: SIGTERM (as on eviction)
    nan@S       during step S: the loss becomes NaN
    hang@S      during step S: sleep forever before the collectives
    exception@S during step S: raise an error
    watchdog@S  during step S: the watchdog fires as if the step had timed out, where
                the step blocks: in the hang, with hang@S on the same rank; else in
                the gradient all-reduce, once every hang@S of another rank has begun
                (their markers), so that this rank is the one that notices the hang
    nospace@S   the checkpoint of step S: DCP's writer fails with ENOSPC, as on a full
                volume, inside DCP's own write path (so DCP reports it as it would a
                real one)
    slow@S      from step S on, every step of the rank takes SLOW_SECONDS longer before
                its forward pass: a straggler drill (fires every step, not once)

With `watchdog@S` the order in which ranks notice a hang is chosen, not left to
the scheduler: the hang report must name the stuck rank in either order.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from torch.distributed.checkpoint import FileSystemWriter

from trainer.config import Fault

log = logging.getLogger("trainer.faults")


class InjectedFault(RuntimeError):
    pass


# How often a rank looks for the markers of the hangs it waits for.
_MARKER_POLL_SECONDS = 0.05
# What `slow@S` adds to each step: far above a small model's step, so the node stands out.
SLOW_SECONDS = 0.2


class FaultInjector:
    def __init__(
        self,
        faults: tuple[Fault, ...],
        rank: int,
        marker_dir: Path | None,
        expire_watchdog: Callable[[], None] = lambda: None,
    ):
        self.faults = [f for f in faults if f.rank is None or f.rank == rank]
        self.rank = rank
        self.marker_dir = marker_dir / ".faults" if marker_dir else None
        self.expire_watchdog = expire_watchdog
        # Hangs of other ranks, by step: `watchdog@S` waits for them to begin.
        self._peer_hangs = {
            (f.step, f.rank) for f in faults if f.kind == "hang" and f.rank not in (None, rank)
        }
        self._fired: set[Fault] = set()
        # Set by the trainer once its SIGTERM handling has taken over.
        self.sigterm_handled = threading.Event()
        slow = [f.step for f in self.faults if f.kind == "slow"]
        self._slow_from = min(slow) if slow else None

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
            if self._claim("watchdog", step):
                self.expire_watchdog()
            threading.Event().wait()
        if self._claim("exception", step):
            raise InjectedFault(f"injected exception at step {step}")
        if self._slow_from is not None and step >= self._slow_from:
            time.sleep(SLOW_SECONDS)
        return self._claim("nan", step) is not None

    def in_gradient_all_reduce(self, step: int) -> None:
        """Called as the rank starts waiting for its peers' gradients."""
        if self._claim("watchdog", step):
            self._wait_for_peer_hangs(step)
            self.expire_watchdog()

    def _wait_for_peer_hangs(self, step: int) -> None:
        if self.marker_dir is None:
            return
        markers = [
            self.marker_dir / f"hang@{step}.rank{rank}"
            for hang_step, rank in self._peer_hangs
            if hang_step == step
        ]
        while not all(marker.exists() for marker in markers):
            time.sleep(_MARKER_POLL_SECONDS)

    def checkpoint_writer(self, path: Path, step: int) -> FileSystemWriter:
        """The storage writer for step's checkpoint: a full volume when nospace@step is due."""
        if self._claim("nospace", step):
            return FullVolumeWriter(path)
        return FileSystemWriter(path)

    def after_step(self, step: int) -> None:
        if self._claim("sigkill", step):
            os.kill(os.getpid(), signal.SIGKILL)
        if self._claim("sigterm", step):
            os.kill(os.getpid(), signal.SIGTERM)
            # The signal lands at the end of this step: wait here until the handler has
            # taken over (DDP: it holds the step boundary; FSDP2: the ranks will stop
            # at the end of the next step).
            self.sigterm_handled.wait()


class FullVolumeWriter(FileSystemWriter):
    """Writes no data: fails as a write to a full volume does."""

    def write_data(self, plan, planner):
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected)", str(self.path))
