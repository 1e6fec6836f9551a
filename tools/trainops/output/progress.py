"""A progress line for long runs on a terminal: targets rendered and checked.

It appears only when stderr is a terminal, the run is not in CI, and the run has
taken more than about two seconds; it disappears when the run ends, so that what
stays on the screen is the report. CI logs and pipes never see it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

DELAY_S = 2.0


class ProgressLine:
    """`start(total)` once, then `advance(count)` as targets finish; `close()` at the end."""

    def __init__(self, label: str = "validating"):
        self.label = label
        self.total = 0
        self.done = 0
        self._since = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    @staticmethod
    def wanted() -> bool:
        return sys.stderr.isatty() and not os.environ.get("CI")

    def start(self, total: int) -> None:
        self.total = total

    def advance(self, count: int) -> None:
        self.done += count
        if self._bar is None and time.monotonic() - self._since >= DELAY_S:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("targets"),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
