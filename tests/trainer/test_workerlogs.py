"""The launcher's pass-through of worker stderr (trainer.workerlogs), on real pipes."""

from __future__ import annotations

import io
import os
import signal
import sys
import time

from tests.trainer.conftest import running
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


# A worker that, when torchrun stops it, leaves a child holding its stderr; the child
# writes its line only once the worker is gone.
STOPPED_WORKER = """
import os, signal, subprocess, sys, time

LATE = '''
import os, sys, time
while os.getppid() == PARENT:
    time.sleep(0.05)
time.sleep(0.5)
sys.stderr.write("last words of the stopped worker\\\\n")
'''.replace("PARENT", str(os.getpid()))


def stop(signum, frame):
    subprocess.Popen([sys.executable, "-c", LATE], start_new_session=True)
    os._exit(143)


signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
signal.pause()
"""


def test_a_stopped_launcher_passes_on_its_workers_last_lines_before_it_exits(tmp_path):
    """Stopped by a signal, the launcher still waits for each worker's stderr to end."""
    script = tmp_path / "worker.py"
    script.write_text(STOPPED_WORKER)
    command = [
        sys.executable,
        "-m",
        "trainer.launch",
        "--standalone",
        "--nproc_per_node=1",
        str(script),
    ]
    stderr = tmp_path / "stderr"
    with running(command, stderr) as process:
        assert process.stdout.readline() == "ready\n", stderr.read_text()
        process.send_signal(signal.SIGTERM)
        process.communicate()
    log = stderr.read_text()
    assert process.returncode == 143, log
    assert "last words of the stopped worker" in log
    assert "still open" not in log
