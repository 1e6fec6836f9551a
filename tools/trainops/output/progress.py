"""A progress line for long runs on a terminal: targets rendered and checked.

It appears only when stderr is a terminal, the run is not in CI, and the run has
taken more than about two seconds; it disappears when the run ends, so that what
stays on the screen is the report. CI logs and pipes never see it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

DELAY_S = 2.0
_ERASE = "\033[K"


class ProgressLine:
    """`start(total)` once, then `advance(count)` as targets finish; `close()` at the end.

    One line rewritten in place (carriage return, then erase to the end of the line),
    which every terminal understands; no dependency for a bar.
    """

    def __init__(self, label: str = "validating", stream: TextIO | None = None):
        self.label = label
        self.total = 0
        self.done = 0
        self._since = time.monotonic()
        self._stream = stream or sys.stderr
        self._shown = False

    @staticmethod
    def wanted() -> bool:
        return sys.stderr.isatty() and not os.environ.get("CI")

    def start(self, total: int) -> None:
        self.total = total

    def advance(self, count: int) -> None:
        self.done += count
        if self._shown or time.monotonic() - self._since >= DELAY_S:
            self._shown = True
            self._stream.write(f"\r{_ERASE}{self.label} {self.done}/{self.total} targets")
            self._stream.flush()

    def close(self) -> None:
        if self._shown:
            self._stream.write(f"\r{_ERASE}")
            self._stream.flush()
