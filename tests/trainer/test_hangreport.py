"""The hang report: its verdict, its files, and the watchdog that starts it.

The two-rank runs that produce a report end to end are in test_failures.py; these
pieces run in-process, or in one small subprocess where the watchdog must exit.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.trainer.conftest import RUN_LIMIT, running, trainer_env, wait_for
from trainer.hangreport import FIRED, HangReport, RankState, collect, render, verdict
from trainer.watchdog import Watchdog


def state(rank: int, collective: str | None = None, ended_by: str = "SIGTERM") -> RankState:
    return RankState(rank, 4, collective, ended_by)


def test_the_rank_outside_a_collective_is_the_culprit_when_peers_wait_in_one():
    states = [
        state(0, "gradient all-reduce", "its watchdog"),
        state(1),
        state(2, "checkpoint save"),
    ]
    assert verdict(states).startswith(
        "culprit: rank 1, outside any collective, while ranks 0, 2 wait for it in one"
    )


def test_a_watchdog_that_fired_outside_any_collective_names_its_own_rank():
    # Its peer was torn down before it reached the collective: no one waits yet.
    states = [state(0), state(1, ended_by="its watchdog")]
    assert verdict(states).startswith("culprit: rank 1, whose watchdog fired outside")


def test_a_rank_that_wrote_no_report_is_the_culprit_when_peers_wait():
    states = [state(0, "gradient all-reduce", "its watchdog")]
    assert verdict(states, silent=[1]).startswith("culprit: rank 1, which wrote no report")


def test_when_every_rank_waits_the_culprit_is_on_another_node():
    states = [state(0, "gradient all-reduce", "its watchdog"), state(1, "gradient all-reduce")]
    assert verdict(states).startswith("culprit: not on this node")
    assert verdict([]).startswith("culprit: unknown")


def test_reports_are_collected_per_attempt_with_every_ranks_stacks(tmp_path):
    env = {"TRAINER_HANG_REPORT_DIR": str(tmp_path), "TORCHELASTIC_RESTART_COUNT": "2"}
    first, second = HangReport.from_env(1, env), HangReport.from_env(0, env)
    assert not second.declared()
    first.declare(step=9)
    second.declare(step=9)  # too late: rank 1 noticed first
    assert second.declared()
    first.add(RankState(1, 9, None, "its watchdog"))
    second.add(RankState(0, 9, "gradient all-reduce", "SIGTERM"))
    (attempt,) = collect(tmp_path)
    assert attempt.attempt == "2" and attempt.first == {"rank": 1, "step": 9}
    assert [s.rank for s in attempt.states] == [0, 1]
    lines = render(attempt)
    assert lines[0] == "hang report (attempt 2): the watchdog of rank 1 fired first, at step 9"
    assert lines[1].startswith("culprit: rank 1,")
    sections = "\n".join(lines).split("stacks of ")[1:]
    assert [section.split(":")[0] for section in sections] == ["rank 0", "rank 1"]
    for section in sections:
        # The main thread first, with this very test on its stack.
        assert section.splitlines()[1] == "Thread MainThread (most recent call last):"
        assert "in test_reports_are_collected_per_attempt_with_every_ranks_stacks" in section


def test_attempts_without_a_declaration_and_half_written_records_are_left_out(tmp_path):
    quiet = HangReport(tmp_path / "attempt-0", rank=0)
    quiet.add(state(0))  # an attempt in which no watchdog fired
    hung = HangReport(tmp_path / "attempt-1", rank=0)
    hung.declare(step=4)
    hung.add(state(0, ended_by="its watchdog"))
    (tmp_path / "attempt-1" / "rank1.json").write_text('{"rank": 1, "st')  # died writing
    (attempt,) = collect(tmp_path)
    assert attempt.attempt == "1" and [s.rank for s in attempt.states] == [0]


def test_a_declaration_its_rank_died_writing_still_counts(tmp_path):
    (tmp_path / "attempt-0").mkdir()
    (tmp_path / "attempt-0" / "hang.json").write_text("")
    (attempt,) = collect(tmp_path)
    assert render(attempt)[0] == "hang report (attempt 0): a watchdog fired first"


def test_a_rank_joins_the_report_only_once_a_watchdog_fired(tmp_path):
    watchdog = Watchdog(timeout=600)
    watchdog.report = HangReport(tmp_path, rank=1)  # not started: no thread, no handler
    watchdog.beat(5)
    with watchdog.collective("metrics all-reduce"):
        watchdog.join_report("SIGTERM")
        assert not list(tmp_path.iterdir())  # no hang: a plain SIGTERM writes nothing
        HangReport(tmp_path, rank=0).declare(step=5)
        watchdog.join_report("SIGTERM")
        watchdog.join_report("peer lost")  # once per process
    record = (tmp_path / "rank1.json").read_text()
    assert '"collective": "metrics all-reduce"' in record and '"ended_by": "SIGTERM"' in record


# A process whose step never ends: the watchdog's own timer must end it.
STUCK = """
import sys, threading
from pathlib import Path
from trainer.hangreport import HangReport
from trainer.watchdog import Watchdog

directory = Path(sys.argv[1]) if len(sys.argv) > 1 else None
watchdog = Watchdog(timeout=0.2)
watchdog.start(HangReport(directory, rank=3))
watchdog.beat(7)
with watchdog.collective("metrics all-reduce"):
    threading.Event().wait()
"""


def run_stuck(*args: str) -> subprocess.CompletedProcess:
    # The timeout only turns a watchdog that never fires into a failure.
    return subprocess.run(
        [sys.executable, "-c", STUCK, *args],
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=RUN_LIMIT,
        check=False,
    )


def test_the_watchdog_ends_a_step_that_outlives_its_timeout(tmp_path: Path):
    done = run_stuck(str(tmp_path / "attempt-0"))
    assert done.returncode == 200, done.stderr
    assert "step 7 exceeded the watchdog timeout of 0.2s" in done.stderr
    (attempt,) = collect(tmp_path)
    assert attempt.states == [RankState(3, 7, "metrics all-reduce", "its watchdog")]
    assert 'File "<string>", line 12, in <module>' in attempt.stacks[3]  # the stuck main thread


def test_without_trainer_launch_the_watchdog_dumps_the_stacks_to_stderr():
    done = run_stuck()
    assert done.returncode == 200, done.stderr
    assert 'File "<string>", line 12 in <module>' in done.stderr  # the stuck main thread


# A rank stuck in native code that keeps the GIL: no Python thread of it runs again.
HOLDS_THE_GIL = """
import ctypes, sys
from pathlib import Path
from trainer.hangreport import HangReport
from trainer.termination import TerminationHandler
from trainer.watchdog import Watchdog

directory = Path(sys.argv[1])
watchdog = Watchdog(timeout=600)
TerminationHandler(lambda: watchdog.join_report("SIGTERM")).install()
watchdog.start(HangReport(directory, rank=1))
watchdog.beat(4)

def stuck_in_native_code():
    libc = ctypes.PyDLL(None)  # unlike CDLL, a call keeps holding the GIL
    mutex = ctypes.create_string_buffer(64)  # zeroed: an unlocked default mutex (glibc)
    libc.pthread_mutex_lock(mutex)
    (directory / "stuck").touch()
    libc.pthread_mutex_lock(mutex)  # held by this very thread: never returns

stuck_in_native_code()
"""


def test_a_rank_stuck_holding_the_gil_leaves_its_stacks_from_the_signal_handler(tmp_path):
    directory = tmp_path / "attempt-0"
    waiting = HangReport(directory, rank=0)
    waiting.declare(step=4)
    waiting.add(RankState(0, 4, "gradient all-reduce", FIRED))
    command = [sys.executable, "-c", HOLDS_THE_GIL, str(directory)]
    with running(command, tmp_path / "stderr") as process:
        wait_for((directory / "stuck").exists, "the rank to get stuck")
        process.send_signal(signal.SIGTERM)
        dump = directory / "rank1.sigterm-stacks"
        wait_for(lambda: "stuck_in_native_code" in dump.read_text(), "the SIGTERM dump")
    (attempt,) = collect(tmp_path)
    # Had the signal come before the second lock, the rank would have written a report
    # itself: either way it is named, with its stack.
    assert verdict(attempt.states, attempt.silent).startswith("culprit: rank 1,")
    assert "in stuck_in_native_code" in attempt.stacks[1]
