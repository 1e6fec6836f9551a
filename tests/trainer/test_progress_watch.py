"""A hang in a user's own command (issue 43 item 8): with TRAINER_HANG_TIMEOUT the launcher
watches the workers' progress beats (trainer.progress), and when a rank stops beating it
reports which rank the others wait for, from the stacks each rank's faulthandler dumps,
stops the stuck rank and exits HANG, long before the process group's timeout.

Real torchrun, gloo and two CPU ranks. Rank 1 gets stuck in its own code at step 3 while
rank 0 goes on to the step's all-reduce and waits there: the report must name rank 1,
not rank 0, whichever rank stops beating first. The process group's timeout is 10
minutes, so only the watch can end the run within the test's limit. Without the watch,
a short process-group timeout ends the run, and the verdict must not blame rank 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import trainer_env
from tests.trainer.test_user_code import run_pod_command
from trainer.errors import ExitCode
from trainer.progress import collective_of

SCRIPT = """\
import datetime
import os
import time

import torch
import torch.distributed as dist

from trainer import progress

STUCK_RANK = int(os.environ.get("STUCK_RANK", "-1"))

PG_TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "600")))
dist.init_process_group("gloo", timeout=PG_TIMEOUT)
rank = dist.get_rank()
for step in range(1, 6):
    if rank == STUCK_RANK and step == 3:
        while True:  # a data loader that never returns
            time.sleep(0.1)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    progress.beat(step)
    time.sleep(1.2)  # beats are written at most once a second
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
"""


def run(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = trainer_env(PATH=path, PET_NPROC_PER_NODE="2", PET_STANDALONE="1", **extra)
    return run_pod_command(["trainer-launch", "--", sys.executable, str(script)], tmp_path, env)


def launcher_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("trainer-launch: ")]


def test_a_rank_stuck_in_its_own_code_is_named_and_the_run_exits_hang(tmp_path, trainops):
    done = run(tmp_path, STUCK_RANK="1", TRAINER_HANG_TIMEOUT="4")
    assert done.returncode == ExitCode.HANG, done.stderr
    lines = launcher_lines(done.stderr)
    assert any("hang report (attempt 0): no progress beat for 4s" in line for line in lines)
    culprit = "culprit: rank 1, outside any collective, while rank 0 waits for it in one"
    assert f"trainer-launch: {culprit}" in lines, done.stderr
    waiting = "rank 0: step 2, in the all_reduce (ended by: no progress)"
    assert any(line.endswith(waiting) for line in lines), done.stderr
    # Rank 1's own frame is in its stacks: where to look.
    stuck_line = SCRIPT.splitlines().index("            time.sleep(0.1)") + 1
    assert f'train.py", line {stuck_line} in <module>' in done.stderr, done.stderr
    (verdict,) = [line for line in lines if "; exiting " in line]
    assert verdict.startswith("trainer-launch: rank 1: hang (no progress beat for 4s"), verdict
    assert "exiting 200" in verdict

    # The doctor reads the launcher's report as it means it.
    log = tmp_path / "pod.log"
    log.write_text(done.stderr)
    doctor = trainops("doctor", "nccl", "--format", "json", str(log))
    findings = {f["rule"]: f for f in json.loads(doctor.out)["findings"]}
    assert findings["hang-culprit"]["ranks"] == [1], findings
    assert "rank 1, outside any collective" in findings["hang-culprit"]["message"]


def test_without_the_watch_a_process_group_timeout_blames_no_waiting_rank(tmp_path):
    """Rank 0's gloo group times out in the all-reduce rank 1 never joins: rank 0 waited."""
    done = run(tmp_path, STUCK_RANK="1", PG_TIMEOUT="4")
    assert done.returncode == ExitCode.HANG, done.stderr
    (verdict,) = [line for line in launcher_lines(done.stderr) if "; exiting " in line]
    assert verdict.startswith(
        "trainer-launch: hang (rank 0 timed out waiting in a collective; rank 1 did not: "
        "the rank waited for is stuck (its own code, or on another node); RuntimeError: "
    ), verdict
    assert "for recv operation to complete" in verdict


def test_a_run_that_keeps_beating_ends_as_usual(tmp_path):
    done = run(tmp_path, TRAINER_HANG_TIMEOUT="4")
    assert done.returncode == 0, done.stderr
    assert "rank 0 done" in done.stdout and "rank 1 done" in done.stdout
    assert "hang report" not in done.stderr


@pytest.mark.parametrize("value", ["soon", "0", "nan", "-5"])
def test_a_timeout_that_is_not_seconds_is_refused_before_anything_runs(tmp_path, value):
    done = run(tmp_path, TRAINER_HANG_TIMEOUT=value)
    assert done.returncode == ExitCode.CONFIG, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"trainer-launch: error: TRAINER_HANG_TIMEOUT={value!r}")
    assert "Traceback" not in done.stderr


FAULTHANDLER_DUMP = """\
Thread 0x00007f1c2d7fe640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f1c3a1b3740 (most recent call first):
  File "/venv/lib/torch/distributed/distributed_c10d.py", line 2800 in all_reduce
  File "/venv/lib/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/work/train.py", line 20 in <module>
"""


def test_the_main_thread_is_found_whichever_thread_caught_the_signal():
    assert collective_of(FAULTHANDLER_DUMP) == "all_reduce"
    # The same stacks with the main thread listed first and marked as a plain thread.
    other, main = FAULTHANDLER_DUMP.strip().split("\n\n")
    marked = other.replace("Thread", "Current thread", 1)
    swapped = f"{main.replace('Current thread', 'Thread')}\n\n{marked}\n"
    assert collective_of(swapped) == "all_reduce"
    in_own_code = FAULTHANDLER_DUMP.replace(
        '  File "/venv/lib/torch/distributed/distributed_c10d.py", line 2800 in all_reduce\n',
        '  File "/work/data.py", line 7 in next_batch\n',
    )
    assert collective_of(in_own_code) is None


def test_a_beat_that_cannot_be_written_never_reaches_the_training_loop(tmp_path, monkeypatch):
    """The watch's directory gone (or unwritable): beat() skips, it does not raise."""
    from trainer import progress

    monkeypatch.setenv(progress.DIR_ENV, str(tmp_path / "gone"))
    monkeypatch.setattr(progress, "_beats", progress._Beats())
    progress.beat(1)
    assert not (tmp_path / "gone").exists()
