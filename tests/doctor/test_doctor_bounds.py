"""Hostile input for the doctor: bounded work per line (counted, not timed), bounded memory
on endless input, and a one-line error (exit 2) instead of a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys

import pytest

from tests.doctor.corpus_cases import cases
from tests.support import REPO
from trainops.doctor import catalog, limits, parse, sources
from trainops.doctor.analysis import diagnose
from trainops.doctor.expectation import Expectation
from trainops.doctor.sources import memory_stream, open_sources
from trainops.errors import InputError

MEGABYTE = 1 << 20


@pytest.mark.parametrize(
    "line",
    [
        "a" * MEGABYTE,
        "NCCL INFO " + "w" * MEGABYTE,
        "host:1:2 [0] file.cc:1 NCCL WARN " + "Got completion " * (MEGABYTE // 15),
        "[rank0]:" * (MEGABYTE // 8),
        "Watchdog caught collective operation timeout: WorkNCCL(" + "9" * MEGABYTE,
        "RuntimeError" * (MEGABYTE // 12),
        ":" * MEGABYTE,
        "NVRM: Xid (" + "(" * MEGABYTE,
    ],
    ids=["word", "nccl-info", "completion", "rank-tags", "watchdog", "errors", "colons", "xid"],
)
def test_a_megabyte_line_costs_a_bounded_number_of_pattern_steps(line):
    catalog.index()  # built once per process, from the catalog's formats, not per line
    limits.USAGE.reset()
    events = parse.parse([memory_stream("huge", [line])])
    assert len(events) <= 4
    # Every pattern call sees at most MAX_WINDOW characters and a line makes a bounded
    # number of calls, so the work on a line does not grow with its length.
    assert limits.USAGE.calls <= 40
    assert limits.USAGE.characters <= 40 * limits.MAX_WINDOW


def test_a_repeated_line_is_read_once_and_still_counted_where_it_appears():
    """A log that says one thing a million times (a gzip of it is small) costs a lookup a
    line after the first: the pattern work is that of the distinct lines."""
    catalog.index()
    progress = "2026-12-01 10:00:{:02d},123 - INFO - step 7 | loss 2.31"
    warning = (
        "node-1:41:60 [0] net_ib.cc:92 NCCL WARN NET/IB : mlx5_0:1 Got async event : port active"
    )
    limits.USAGE.reset()
    once = parse.parse([memory_stream("job.log", [progress.format(0), warning])])
    work_once = limits.USAGE.calls
    lines = [progress.format(i % 60) if i % 2 else warning for i in range(20_000)]
    limits.USAGE.reset()
    repeated = parse.parse([memory_stream("job.log", lines)])
    # Cleaning the timestamp off each line is per line; reading what is left is not.
    assert limits.USAGE.calls <= work_once + 10 * len(lines)
    cleaning = limits.USAGE.calls
    limits.USAGE.reset()
    for line in lines:
        parse.clean(line)
    assert cleaning - limits.USAGE.calls <= work_once
    assert {e.kind for e in repeated} == {e.kind for e in once}
    assert {1, 2, 3, 4} <= {e.line for e in repeated}


def test_the_doctor_runs_regular_expressions_only_through_bounded_patterns():
    package = REPO / "tools" / "trainops" / "doctor"
    users = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if "import re\n" in p.read_text() or "from re " in p.read_text()
    )
    assert users == ["limits.py"]


def test_endless_stdin_stops_at_the_line_limit():
    with open("/dev/zero", "rb") as zero:
        run = subprocess.run(
            [sys.executable, "-m", "trainops", "doctor", "nccl", "-"],
            stdin=zero,
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )
    assert run.returncode == 2
    assert run.stderr.strip() == "trainops: error: -:1: line longer than 4 MiB"
    assert run.stdout == ""


def test_total_input_is_bounded(monkeypatch, tmp_path):
    monkeypatch.setattr(sources, "MAX_INPUT_BYTES", 1000)
    log = tmp_path / "big.log"
    log.write_text("x\n" * 2000)
    with pytest.raises(InputError) as error:
        parse.parse(open_sources((str(log),)))
    assert str(error.value).startswith(f"{log}:501: input larger than")


def test_distinct_processes_are_bounded(monkeypatch):
    monkeypatch.setattr(parse, "MAX_PROCESSES", 10)
    lines = [f"h{i}:1:1 [0] NCCL INFO Using network IB" for i in range(20)]
    with pytest.raises(InputError, match="more than 10 processes"):
        parse.parse([memory_stream("many", lines)])


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 64,
        b"\x00" * 5000 + b"\n",
        b"[" * 200_000,
        b"{" + b'"a":{' * 100_000,
        json.dumps({"entries": "not a list"}).encode(),
        json.dumps({"entries": [1, "x", {"collective_seq_id": "a", "state": 3}, {}]}).encode(),
        b"\xef\xbb\xbf\xff\xfe" + "NCCL WARN \u202e\U0001f600 reversed\n".encode(),
        b"\x1f\x8b\x08\x00garbage that is not gzip",
    ],
    ids=[
        "binary",
        "nuls",
        "deep-list",
        "deep-json",
        "entries-str",
        "bad-entries",
        "encodings",
        "bad-gzip",
    ],
)
def test_hostile_files_never_crash(trainops, tmp_path, content):
    path = tmp_path / "hostile"
    path.write_bytes(content)
    run = trainops("doctor", "nccl", str(path))
    assert run.code in (0, 1, 2), run.err
    assert "Traceback" not in run.err
    if run.code == 2:
        assert len(run.err.strip().splitlines()) == 1 and run.out == ""


def test_symlink_loops(trainops, tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    direct = trainops("doctor", "nccl", str(tmp_path / "a"))
    assert direct.code == 2 and "Traceback" not in direct.err
    looped = tmp_path / "dir"
    looped.mkdir()
    (looped / "self").symlink_to(looped)
    (looped / "x.log").write_text("h:1:1 [0] NCCL INFO Using network IB\n")
    walked = trainops("doctor", "nccl", str(looped))
    # Read once despite the loop: one network line, which does not show a working job.
    assert walked.code == 1 and "Traceback" not in walked.err
    assert walked.out.count("x.log:1:") == 1 and "[outcome-unproven]" in walked.out


def test_a_walked_directory_reads_its_own_files_only(trainops, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("h:1:1 [0] NCCL INFO Using network IB\n")
    (logs / "latest.log").symlink_to(logs / "rank0.log")  # inside: not refused
    os.mkfifo(logs / "pipe")  # no writer: opening it would wait forever; skipped
    walked = trainops("doctor", "nccl", str(logs))
    assert walked.code == 1, walked.err
    assert "rank0.log:1:" in walked.out
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("h:1:1 [0] NCCL WARN something private\n")
    (logs / "outside.log").symlink_to(secret)
    refused = trainops("doctor", "nccl", str(logs))
    assert refused.code == 2 and refused.out == ""
    assert "outside.log" in refused.err and "leads out of" in refused.err
    assert "private" not in refused.err


def test_mutated_corpus_lines_never_crash():
    """Deterministic fuzzing: cut, splice and corrupt real pasted lines."""
    rng = random.Random(2025)
    pool = [line for case in cases() for line in case.lines if line.strip()]
    for _ in range(300):
        lines = []
        for _ in range(rng.randint(1, 8)):
            line = rng.choice(pool)
            cut = rng.randint(0, len(line))
            mutation = rng.randrange(4)
            if mutation == 0:
                line = line[:cut]
            elif mutation == 1:
                line = line[:cut] + rng.choice(pool) + line[cut:]
            elif mutation == 2:
                line = line[:cut] + chr(rng.randrange(0x20, 0x2FFF)) + line[cut + 1 :]
            else:
                line = line.replace(" ", rng.choice(["", "  ", ":", "[", "]"]), 3)
            lines.append(line)
        with contextlib.suppress(InputError):
            diagnose([memory_stream("fuzz", lines)], Expectation())


def test_repeated_facts_are_kept_a_bounded_number_of_times():
    line = (
        "[rank0]:[E ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 "
        "milliseconds"
    )
    channel = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA"
    events = parse.parse([memory_stream("repeat", [line, channel] * 20_000)])
    assert len(events) == limits.MAX_ITEMS + 1
