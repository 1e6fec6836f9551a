"""Where the doctor's evidence comes from: files, directories, stdin, FIFOs, process
substitution, gzip files, and PyTorch Flight Recorder dumps in their JSON form.

Everything is read in bounded pieces (see `limits`): a line longer than
`MAX_LINE_BYTES` or more than `MAX_INPUT_BYTES` in all is an input error naming the
file and line, so endless input stops with exit 2 instead of growing without bound.
A pickled Flight Recorder dump is refused, never unpickled.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from trainops.doctor.limits import MAX_INPUT_BYTES, MAX_JSON_BYTES, MAX_LINE_BYTES, MAX_LINES
from trainops.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
PICKLE_PROTOCOL = b"\x80"


@dataclass
class LogStream:
    """Lines of one log (a file, a pod's container, stdin), opened when iterated."""

    name: str
    open_lines: Callable[[], Iterator[str]]


@dataclass
class FlightRecorderDump:
    """One rank's Flight Recorder dump, parsed from JSON."""

    name: str
    data: dict


Source = LogStream | FlightRecorderDump


class _Meter:
    """Bytes and lines read from every input of one run."""

    def __init__(self) -> None:
        self.total = 0
        self.lines = 0

    def add(self, count: int, name: str, line: int) -> None:
        self.total += count
        self.lines += 1
        if self.total > MAX_INPUT_BYTES:
            raise InputError(f"input larger than {MAX_INPUT_BYTES >> 20} MiB in all", name, line)
        self._check_lines(name, line)

    def add_lines(self, count: int, name: str) -> None:
        self.lines += count
        self._check_lines(name, None)

    def _check_lines(self, name: str, line: int | None) -> None:
        if self.lines > MAX_LINES:
            raise InputError(
                f"more than {MAX_LINES:,} lines in all: pass the part of the logs around "
                "the failure",
                name,
                line,
            )


def _lines(handle: BinaryIO, name: str, meter: _Meter) -> Iterator[str]:
    number = 0
    try:
        while True:
            chunk = handle.readline(MAX_LINE_BYTES + 1)
            if not chunk:
                return
            number += 1
            meter.add(len(chunk), name, number)
            if len(chunk) > MAX_LINE_BYTES:
                raise InputError(f"line longer than {MAX_LINE_BYTES >> 20} MiB", name, number)
            yield chunk.decode("utf-8", errors="replace").rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise InputError(f"cannot read: {exc}", name, number + 1) from None


def memory_stream(name: str, lines: list[str]) -> LogStream:
    """Lines already in memory (a pod log fetched from the API server)."""
    return LogStream(name, lambda: iter(lines))


def _refuse_pickle(head: bytes, name: str) -> None:
    if head[:1] == PICKLE_PROTOCOL:
        raise InputError(
            "looks like a pickled Flight Recorder dump; the doctor never unpickles files: "
            "dump it as JSON (torch._C._distributed_c10d._dump_nccl_trace_json)",
            name,
        )


def _classify(handle, name: str, meter: _Meter) -> Source:
    """An input that can be read once (stdin, a FIFO): look at its first bytes, then read it
    as gzip, as JSON (maybe a dump) or as text; a pickle is refused."""
    head = handle.peek(2)[:2]
    _refuse_pickle(head, name)
    if head == GZIP_MAGIC:
        unzipped = gzip.GzipFile(fileobj=handle, mode="rb")
        return LogStream(name, lambda: _lines(unzipped, name, meter))
    if head.lstrip()[:1] == b"{":
        return _maybe_dump(handle, name, meter)
    return LogStream(name, lambda: _lines(handle, name, meter))


def _maybe_dump(handle, name: str, meter: _Meter) -> Source:
    body = handle.read(MAX_JSON_BYTES + 1)
    meter.add(len(body), name, 1)
    if len(body) > MAX_JSON_BYTES:
        raise InputError(f"JSON document larger than {MAX_JSON_BYTES >> 20} MiB", name, 1)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("entries"), list):
        return FlightRecorderDump(name, data)
    meter.add_lines(body.count(b"\n"), name)  # before splitting: a list per line
    text = body.decode("utf-8", errors="replace").splitlines()
    for number, line in enumerate(text, 1):
        if len(line) > MAX_LINE_BYTES:
            raise InputError(f"line longer than {MAX_LINE_BYTES >> 20} MiB", name, number)
    return memory_stream(name, text)


def _open_regular(path: str) -> BinaryIO:
    """A regular file opened for reading. O_NONBLOCK: a file swapped for a FIFO after it
    was listed would otherwise wait for a writer forever; it is refused instead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError("no longer a regular file (a FIFO, socket or device)", path)
    return os.fdopen(fd, "rb")


def _file_lines(path: str, unzip: bool, meter: _Meter) -> Iterator[str]:
    handle = _open_regular(path)
    with handle:
        yield from _lines(gzip.GzipFile(fileobj=handle) if unzip else handle, path, meter)


def _open(path: str, meter: _Meter) -> Source:
    """A path: regular files are reopened when read (a directory may hold thousands);
    FIFOs, /dev/fd/N and devices are read once as they are."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
        if not regular:
            handle = open(path, "rb")  # noqa: SIM115 - kept open only for one-shot inputs
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path) from None
    try:
        if not regular:
            return _classify(handle, path, meter)
        with _open_regular(path) as handle:
            head = handle.peek(2)[:2]
            _refuse_pickle(head, path)
            if head.lstrip()[:1] == b"{":
                return _maybe_dump(handle, path, meter)
        unzip = head == GZIP_MAGIC
        return LogStream(path, lambda: _file_lines(path, unzip, meter))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None


def _walk(directory: str) -> list[str]:
    """Every non-hidden regular file below `directory`, in name order. Links to
    directories are not followed; a link to a file is read when the file is inside
    `directory` and refused when it leads out of it (a collected bundle must not make
    the doctor read, and quote, files elsewhere on the machine). FIFOs, sockets and
    devices found there are skipped: only one named on the command line is read."""
    found = []
    top = os.path.realpath(directory)

    def fail(exc: OSError) -> None:
        raise InputError(f"cannot list: {exc.strerror or exc}", exc.filename or directory)

    for root, dirs, files in os.walk(directory, onerror=fail, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = os.path.join(root, name)
            if name.startswith("."):
                continue
            if os.path.islink(path):
                real = os.path.realpath(path)
                if os.path.commonpath([top, real]) != top:
                    raise InputError(f"a symbolic link leads out of {directory}, to {real}", path)
            try:
                regular = stat.S_ISREG(os.stat(path).st_mode)
            except OSError:
                regular = False  # a dangling link: nothing to read
            if regular:
                found.append(path)
    return found


def open_sources(arguments: tuple[str, ...]) -> list[Source]:
    """Files, directories (every file below), `-` for stdin, FIFOs, `/dev/fd/N`."""
    meter = _Meter()
    sources: list[Source] = []
    for argument in arguments:
        if argument == "-":
            sources.append(_classify(sys.stdin.buffer, "-", meter))
            continue
        try:
            mode = os.stat(argument).st_mode
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", argument) from None
        if stat.S_ISDIR(mode):
            files = _walk(argument)
            if not files:
                raise InputError("directory holds no log files", argument)
            sources += [_open(path, meter) for path in files]
        else:
            sources.append(_open(argument, meter))
    return sources
