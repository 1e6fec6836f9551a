"""The launcher's pass-through of worker stderr (trainer.workerlogs), on real pipes."""

from __future__ import annotations

import io
import os
import time

from trainer.workerlogs import LineTail


def follow(data: bytes, sink: io.BytesIO) -> LineTail:
    read_end, write_end = os.pipe()
    tail = LineTail(sink)
    tail.follow_stream(os.fdopen(read_end, "rb", buffering=0))
    os.write(write_end, data)
    os.close(write_end)
    tail.wait(time.monotonic() + 60)
    return tail


def test_a_configuration_error_every_rank_reports_is_passed_on_once():
    sink = io.BytesIO()
    error = b"trainer: error: --data-path /x.bin: no such file (only here)\n"
    rank0 = follow(b"step 1\n" + error, sink)
    rank1 = follow(b"step 1\n" + error + b"trainer: error: another one (only here)\n", sink)
    shown = sink.getvalue().decode()
    assert shown.count("/x.bin: no such file (only here)") == 1
    assert shown.count("another one (only here)") == 1
    assert shown.count("step 1") == 2  # other lines pass through from every rank
    # Each rank's own tail still holds the line for the exit-code decision.
    assert rank0.lines()[-1] == rank1.lines()[-2] == error.decode().rstrip("\n")
