"""A rank that leaves without saving first lets the periodic save in flight settle.

`Checkpointer.settle` is what makes the exit log name the checkpoint a resume will
really find: without it, a save of step N still being written when a peer died could
publish after the log had named step N-interval (or fail after the log had named N).
The script holds a real asynchronous DCP save inside its storage writer until told to
go on, so each outcome is reached by an event, never by how fast the machine is.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.trainer.conftest import RUN_LIMIT, trainer_env

SCRIPT = r'''
import json, sys, threading
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemWriter

from trainer.checkpoint import Checkpointer, newest_checkpoint
from trainer.config import CheckpointConfig

root = Path(sys.argv[1])
dist.init_process_group("gloo", init_method=f"file://{root / 'store'}", rank=0, world_size=1)
release = threading.Event()
writing = threading.Event()


class HeldWriter(FileSystemWriter):
    """Writes once `release` is set; fails with ENOSPC when step 15 is saved."""

    def __init__(self, path, step):
        super().__init__(path)
        self.step = step

    def write_data(self, plan, planner):
        writing.set()
        release.wait()
        if self.step == 15:
            raise OSError(28, "No space left on device (test)")
        return super().write_data(plan, planner)


ckpt = Checkpointer(CheckpointConfig(directory=root / "ckpt"), 0, 1, "launch-a")
ckpt.writer_for = HeldWriter
events = []
ckpt.on_saved = lambda step, seconds, blocking: events.append(["saved", step])
ckpt.on_failed = lambda step, reason: events.append(["failed", step])
state = {"w": torch.arange(4.0)}


def newest():
    found = newest_checkpoint(root / "ckpt")
    return found and found[0]


out = {}
ckpt.save(10, state)
writing.wait()
out["held"] = [ckpt.settle(0.2), newest()]
release.set()
out["released"] = [ckpt.settle(60), newest()]
out["idle"] = ckpt.settle(0)
release.clear()
writing.clear()
ckpt.save(15, state)
writing.wait()
release.set()
out["failing"] = [ckpt.settle(60), newest()]
out["events"] = events
ckpt.close()
print(json.dumps(out))
'''


def test_settle_waits_for_the_save_in_flight_to_publish_or_fail(tmp_path):
    (tmp_path / "ckpt").mkdir()
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    # Held in its writer: still in flight after the bound, nothing published yet.
    assert out["held"] == [10, None]
    # Released: settle returns once step-10 is published.
    assert out["released"] == [None, 10]
    assert out["idle"] is None
    # A save that fails settles too: reported as failed, step-10 is still the newest.
    assert out["failing"] == [None, 10]
    assert out["events"] == [["saved", 10], ["failed", 15]]
