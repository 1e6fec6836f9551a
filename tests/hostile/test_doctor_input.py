"""`trainops doctor nccl` on hostile logs: compressed bombs, mixed encodings, floods,
directories of junk. Class: bounded work on any input (the doctor's own limits, see
tests/doctor/test_doctor_bounds.py), never a traceback."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from tests.hostile.harness import assert_handled, assert_refused, run_cli, write

INIT = "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"


def _gzip_bomb(path: Path) -> None:
    with gzip.open(path, "wb", compresslevel=9) as handle:
        chunk = b"\0" * (1 << 20)
        for _ in range(64):
            handle.write(chunk)


def _junk_dir(path: Path) -> None:
    for i in range(30):
        write(path / f"rank{i}.log", os.urandom(2048))
    write(path / "ok.log", INIT)


CASES = {
    "gzip-of-nuls": lambda p: _gzip_bomb(p / "bomb.log.gz"),
    "gzip-truncated": lambda p: write(p / "cut.log.gz", gzip.compress(INIT.encode() * 100)[:40]),
    "not-gzip-named-gz": lambda p: write(p / "fake.log.gz", INIT),
    "latin1-and-utf8": lambda p: write(p / "mix.log", INIT.encode() + "café\n".encode("latin-1")),
    "ansi-flood": lambda p: write(p / "ansi.log", "\x1b[31m" * 200_000 + INIT),
    "nul-in-line": lambda p: write(p / "nul.log", INIT.replace("Init", "In\0it") * 10),
    "directory-of-random-bytes": lambda p: _junk_dir(p / "logs"),
    "one-word-line": lambda p: write(p / "word.log", "NCCL" * 250_000 + "\n"),
    "many-ranks": lambda p: write(
        p / "ranks.log", "".join(INIT.replace("rank 0", f"rank {i}") for i in range(20_000))
    ),
    "unbalanced-json": lambda p: write(p / "fr.json", "{" * 100_000),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_doctor_on_hostile_logs(tmp_path: Path, case: str):
    CASES[case](tmp_path)
    inputs = sorted(p.name for p in tmp_path.iterdir())
    outcome = run_cli("doctor", "nccl", *inputs, cwd=tmp_path)
    assert_handled(outcome)


ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e\u2067\u200b"


@pytest.mark.parametrize("command", ["nccl", "nccl-tests"])
def test_log_lines_never_reach_the_terminal_raw(tmp_path: Path, command: str):
    """A log quoting terminal escape sequences (a title change, a screen clear, a C1
    control) and characters that reorder or hide text (a right-to-left override and
    isolate, a zero-width space): the report shows them spelled out, never raw."""
    log = write(
        tmp_path / f"host{ESCAPES}.log",
        INIT.replace("host:1:1", f"host{ESCAPES}:1:1")
        + f"host:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        f"10.0.0.2<45678> failed : Software caused connection abort{ESCAPES}\n",
    )
    outcome = run_cli("doctor", command, str(log), cwd=tmp_path)
    assert_handled(outcome)
    assert outcome.out
    assert not any(c in outcome.out for c in "\x1b\x07\x9b\u202e\u2067\u200b")
    assert "\\x1b" in outcome.out and "\\u202e" in outcome.out


@pytest.mark.parametrize("shape", ["gzip", "json-looking"])
def test_work_is_bounded_by_lines_not_only_bytes(tmp_path: Path, monkeypatch, shape: str):
    """Short lines fit a billion into the byte limit (a 2 MB gzip of newlines or of one
    letter per line), and each line costs tens of microseconds: the line count is the
    bound. With the limit lowered, input past it is refused, naming where."""
    monkeypatch.setattr("trainops.doctor.sources.MAX_LINES", 1_000)

    def doctor_on(letters: int):
        body = INIT.encode() + b"a\n" * letters
        if shape == "gzip":
            write(tmp_path / "short.log.gz", gzip.compress(body))
        else:  # read whole as a possible Flight Recorder dump, split into lines after
            write(tmp_path / "short.log", b"{\n" + body)
        return run_cli("doctor", "nccl", ".", cwd=tmp_path)

    assert_refused(doctor_on(1_100), "more than 1,000 lines in all")
    within = doctor_on(500)
    assert_handled(within)
    assert within.code != 2, within.err
