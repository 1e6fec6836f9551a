"""Run a command that starts its own workers (torchrun, accelerate launch, deepspeed,
mpirun, or a script that calls one) once, and report how it ended.

Such a launcher exits 1 for any failure of its workers, so its exit status alone says
little. Its stderr, which its workers inherit, carries their tracebacks and torchrun's
summary (`Signal 9 (SIGKILL) received by PID ...`): the supervisor passes it through
unchanged and classifies its last lines with the launcher's exit status. Signals for
the pod (SIGTERM on eviction, SIGINT, SIGHUP, SIGQUIT) are passed on to the command,
which stops its workers within its own shutdown timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.failures import Ending, Pattern, classify_output, killed_by, oom_kills

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_LAUNCHERS = {"torchrun", "accelerate", "deepspeed", "mpirun", "mpiexec", "srun"}
_LAUNCHER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "deepspeed.launcher.runner",
}
_TAIL_WAIT = 10.0  # seconds for the command's children to close the stream it left them


def starts_its_own_workers(command: Sequence[str]) -> bool:
    """Is `command` a launcher (torchrun, `python -m torch.distributed.run`, ...)?"""
    if not command:
        return False
    program = os.path.basename(command[0])
    if program in _LAUNCHERS:
        return True
    if program.startswith("python") and "-m" in command[1:3]:
        index = command.index("-m")
        return index + 1 < len(command) and command[index + 1] in _LAUNCHER_MODULES
    return False


@dataclass
class Outcome:
    status: int  # as Popen reports it: negative for a signal
    stopped_by: int | None  # the signal the supervisor received and passed on
    ending: Ending | None  # None: the command succeeded


def supervise(command: Sequence[str], patterns: Sequence[Pattern]) -> Outcome:
    """Run `command`, pass its stderr and the pod's signals through, classify its end."""
    oom_before = oom_kills()
    received: list[int] = []
    process = subprocess.Popen(list(command), stderr=subprocess.PIPE)

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        if process.poll() is None:
            process.send_signal(signum)

    from trainer.workerlogs import LineTail  # imports torch: only when it runs

    # Left installed once the command has ended: a signal of a storm that arrives while
    # its last lines are read is noted and never ends the launcher before its code.
    for sig in FORWARDED:
        signal.signal(sig, forward)
    tail = LineTail(sys.stderr.buffer)
    tail.follow_stream(process.stderr)
    status = process.wait()
    stopped_by = received[0] if received else None
    tail.wait(time.monotonic() + _TAIL_WAIT)
    if status == 0 and stopped_by is None:
        return Outcome(0, None, None)
    if stopped_by is not None:
        # The pod is being stopped: whatever the workers did on the way out follows.
        ending = Ending(None, killed_by(stopped_by), f"the launcher received signal {stopped_by}")
        return Outcome(status, stopped_by, ending)
    oom_after = oom_kills()
    oom = oom_before is not None and oom_after is not None and oom_after > oom_before
    return Outcome(status, None, classify_output(status, tail.lines(), oom, patterns))
