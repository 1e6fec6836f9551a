"""Errors that mean "the input could not be read" (exit code 2).

They carry the file and line so the CLI can print one clear line instead of a
traceback. Anything else escaping to the CLI is a bug in trainops.
"""

from __future__ import annotations

EXIT_CLEAN, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2


class InputError(Exception):
    """The input is unreadable: bad YAML, a missing path, a kustomize failure..."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def __reduce__(self):  # keep file and line when sent between processes
        return type(self), (self.message, self.file, self.line)

    def __str__(self) -> str:
        where = self.file or ""
        if where and self.line:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}" if where else self.message


class ToolMissing(InputError):
    """A required external program (kustomize, kubectl, git) is not installed."""
