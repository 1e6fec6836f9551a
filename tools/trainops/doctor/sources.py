"""Where logs come from: files, directories (every file below, in name order), stdin."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from trainops.errors import InputError


def _lines(path: Path) -> Iterator[str]:
    with path.open(errors="replace") as handle:
        yield from handle


def log_streams(arguments: tuple[str, ...]) -> list[tuple[str, Iterator[str]]]:
    streams = []
    for argument in arguments:
        if argument == "-":
            streams.append(("-", iter(sys.stdin)))
            continue
        path = Path(argument)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
            if not files:
                raise InputError("directory holds no log files", argument)
            streams += [(str(p), _lines(p)) for p in files]
        elif path.is_file():
            streams.append((argument, _lines(path)))
        else:
            raise InputError("no such file or directory", argument)
    return streams
