"""Hang watchdog: a step that runs past its timeout ends the process.

A rank stuck in a collective (a dead peer, a wedged NIC) would otherwise hold its
GPUs until the collective timeout, often 30 minutes or more. The watchdog exits with a
retryable code so the pod is restarted, and leaves the stacks of every thread for the
log: in the hang report of `trainer-launch` (`trainer.hangreport`), which every rank
of the node joins, or, without that launcher, on stderr.

The training loop tells the watchdog where its main thread is: the step (`beat`) and
whether it waits on its peers (`collective`). The report uses that to tell the rank
that is stuck from the ranks that wait for it.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from trainer.errors import ExitCode
from trainer.hangreport import FIRED, HangReport, RankState

log = logging.getLogger("trainer.watchdog")


class Watchdog:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self.report = HangReport(None, rank=0)  # until start() knows the rank
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._step = 0
        self._collective: str | None = None
        self._stopped = threading.Event()
        self._reported = False
        self._report_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, report: HangReport) -> None:
        """Call after the SIGTERM handler is installed (see `dump_stacks_on_sigterm`)."""
        self.report = report
        if report.enabled:
            report.dump_stacks_on_sigterm()
        if self.timeout <= 0:
            return
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    def beat(self, step: int) -> None:
        """A new step starts now and must end within the timeout."""
        with self._lock:
            self._step = step
            self._deadline = time.monotonic() + self.timeout

    @contextmanager
    def collective(self, name: str) -> Iterator[None]:
        """The main thread waits on its peers in here."""
        self._collective = name
        yield
        # Not in a `finally`: a rank whose collective failed (a peer died) reports
        # the collective it was in.
        self._collective = None

    def expire(self) -> None:
        """The current step is overdue as of now (fault injection)."""
        with self._lock:
            self._deadline = time.monotonic()

    def stop(self) -> None:
        self._stopped.set()

    def join_report(self, ended_by: str) -> None:
        """If a watchdog of this node fired, add this rank's state and stacks to the report."""
        if self.report.declared():
            self._add_to_report(ended_by)

    def _add_to_report(self, ended_by: str) -> bool:
        """True when this rank's part of the report is written (now or before)."""
        # Once per process: the watchdog and the SIGTERM thread may both get here.
        with self._report_lock:
            if self._reported:
                return True
            state = RankState(self.report.rank, self._step, self._collective, ended_by)
            try:
                self.report.add(state)
            except OSError as error:
                log.error("could not write this rank's part of the hang report: %s", error)
                return False
            self._reported = True
            return True

    def _watch(self) -> None:
        interval = min(1.0, self.timeout / 4)
        while not self._stopped.wait(interval):
            with self._lock:
                deadline, step = self._deadline, self._step
            if deadline is not None and time.monotonic() > deadline:
                self._fire(step)

    def _fire(self, step: int) -> None:
        where = "the hang report of trainer-launch" if self.report.enabled else "stderr"
        log.critical(
            "step %d exceeded the watchdog timeout of %gs; the stacks of all threads "
            "are in %s; exiting with %d so the pod is restarted",
            step,
            self.timeout,
            where,
            ExitCode.HANG,
        )
        sys.stderr.flush()
        reported = False
        if self.report.enabled:
            try:
                self.report.declare(step)
            except OSError as error:
                log.error("could not declare the hang to the other ranks: %s", error)
            reported = self._add_to_report(FIRED)
        if not reported:
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            sys.stderr.flush()
        os._exit(ExitCode.HANG)
