"""SIGTERM handling that works while the main thread is stuck.

torchrun sends SIGTERM to every worker when one fails and when the pod is evicted,
then SIGKILL 30 s later. A Python signal handler only runs when the main thread
executes Python code, which it does not while blocked in a collective with a dead
peer. So the handler here does nothing itself: Python's C-level handler writes the
signal number to a wakeup pipe, and a helper thread blocked on that pipe runs the
callback at once, whatever the main thread is doing.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable


class TerminationHandler:
    def __init__(self, on_terminate: Callable[[], None]):
        self.on_terminate = on_terminate
        self._read_fd = self._write_fd = -1

    def install(self) -> None:
        """Call from the main thread before training starts."""
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._wait, name="sigterm", daemon=True).start()

    def _wait(self) -> None:
        while True:
            data = os.read(self._read_fd, 64)
            if not data:
                return
            if signal.SIGTERM in data:
                self.on_terminate()
                return
