"""Hang watchdog: a step that runs past its timeout ends the process.

A rank stuck in a collective (a dead peer, a wedged NIC) would otherwise hold its
GPUs until the collective timeout, often 30 minutes or more. The watchdog dumps every
thread's stack, so the log shows where it hung, and exits with a retryable code so
the pod is restarted.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time

from trainer.errors import ExitCode

log = logging.getLogger("trainer.watchdog")


class Watchdog:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._step = 0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.timeout <= 0:
            return
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    def beat(self, step: int) -> None:
        """A new step starts now and must end within the timeout."""
        with self._lock:
            self._step = step
            self._deadline = time.monotonic() + self.timeout

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        interval = min(1.0, self.timeout / 4)
        while not self._stopped.wait(interval):
            with self._lock:
                deadline, step = self._deadline, self._step
            if deadline is not None and time.monotonic() > deadline:
                self._fire(step)

    def _fire(self, step: int) -> None:
        log.critical(
            "step %d exceeded the watchdog timeout of %gs; stacks of all threads "
            "follow, exiting with %d so the pod is restarted",
            step,
            self.timeout,
            ExitCode.HANG,
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(ExitCode.HANG)
