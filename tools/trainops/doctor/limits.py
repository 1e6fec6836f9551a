"""Bounds on the doctor's work, and the one way it runs regular expressions on log text.

Logs are untrusted and can be huge or endless (`doctor nccl - < /dev/zero`), so every
input is read in bounded pieces and every regular expression sees a bounded window of a
line: `Pattern` refuses unanchored searches over whole lines and counts the characters it
is given, so a test can prove the work per line is linear with an operation budget
rather than a clock. Lines are located with `str.find` (linear) before any pattern runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_INPUT_BYTES = 1 << 30  # every input together, after decompression
MAX_LINE_BYTES = 4 << 20  # one line; /dev/zero is one endless line
# Lines of every input together: what bounds the work (tens of microseconds a line),
# since short lines (a gzip of newlines) fit a billion into MAX_INPUT_BYTES.
MAX_LINES = 10_000_000
MAX_JSON_BYTES = 256 << 20  # one Flight Recorder dump
MAX_WINDOW = 4096  # the most characters any one pattern call examines
MAX_PROCESSES = 50_000  # distinct processes or ranks one diagnosis tracks
MAX_ITEMS = 64  # warnings, errors and devices kept per process


@dataclass
class Budget:
    """Characters handed to patterns and the number of calls, for tests and bounds."""

    calls: int = 0
    characters: int = 0

    def reset(self) -> None:
        self.calls = 0
        self.characters = 0


USAGE = Budget()


def literal(text: str) -> str:
    """`text` as a pattern that matches it exactly (for patterns built from formats)."""
    return re.escape(text)


def words(*choices: str) -> Pattern:
    """A pattern that finds any of `choices` (one scan of the window, not one per word)."""
    return Pattern("|".join(re.escape(c) for c in choices))


class Pattern:
    """A compiled pattern that only ever looks at `MAX_WINDOW` characters of a line."""

    def __init__(self, source: str):
        self._compiled = re.compile(source)

    def _window(self, text: str, start: int) -> str:
        window = text[start : start + MAX_WINDOW]
        USAGE.calls += 1
        USAGE.characters += len(window)
        return window

    def match(self, text: str, start: int = 0) -> re.Match[str] | None:
        """Anchored at `start`."""
        return self._compiled.match(self._window(text, start))

    def search(self, text: str, start: int = 0) -> re.Match[str] | None:
        """Anywhere in the window that begins at `start`."""
        return self._compiled.search(self._window(text, start))

    def finditer(self, text: str, start: int = 0):
        return self._compiled.finditer(self._window(text, start))

    def findall(self, text: str, start: int = 0) -> list:
        return self._compiled.findall(self._window(text, start))

    def sub(self, replacement: str, text: str) -> str:
        """Replace in a whole line; only for patterns that begin with a literal character,
        which the engine rejects at once at every other position (linear)."""
        USAGE.calls += 1
        USAGE.characters += len(text)
        return self._compiled.sub(replacement, text)
