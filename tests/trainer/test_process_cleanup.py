"""The trainer tests' own process handling: nothing a test starts outlives it.

torch's elastic agent starts every rank in a session of its own, so killing a launcher's
process group leaves its ranks running; they went on training in the background and
slowed every test after them.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO
from tests.trainer.conftest import RUN_LIMIT, child_pids, kill_tree, process_state

# A parent that starts a child in a session of its own (as torch's agent starts a rank),
# prints the child's pid, then waits.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    return process_state(pid) not in ("Z", "X")


def test_kill_tree_ends_children_in_sessions_of_their_own():
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    child = int(parent.stdout.readline())
    assert os.getsid(child) != os.getsid(parent.pid)  # a group kill would miss it
    assert child in child_pids(parent.pid)
    kill_tree(parent)
    parent.stdout.close()
    assert parent.returncode == -9
    assert not _alive(child)
    assert child not in child_pids(os.getpid())  # killed and collected, no zombie left


def test_kill_tree_of_a_process_that_already_ended_does_nothing():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    kill_tree(done)
    assert done.returncode == 0


LEAKY_TEST = f"""
import os, signal, subprocess, sys
PARENT = {PARENT!r}

def test_kills_only_the_group():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    print("CHILD", parent.stdout.readline().strip())
    os.killpg(parent.pid, signal.SIGKILL)  # what the tests did before: the child lives on
    parent.wait()
"""


def test_a_test_that_leaves_a_process_running_fails_and_the_process_is_killed(tmp_path):
    (tmp_path / "test_leaky.py").write_text(LEAKY_TEST)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.trainer.conftest",
            "-s",
            "-q",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_leaky.py"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    report = run.stdout + run.stderr  # whole, where an assertion's repr would cut it
    assert "processes outlived the test" in run.stdout, report
    [child] = [int(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("CHILD")]
    # Named by pid (its command line, when the kernel can read it, is the sleeping child's).
    assert f"{child}: " in run.stdout.split("processes outlived the test", 1)[1], report
    assert not _alive(child)
