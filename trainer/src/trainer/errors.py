"""Exit codes and the errors that carry them.

The training operator's `ExitCode` restart policy treats 1-127 as permanent and
128-255 as retryable, so every way the trainer ends maps to a code on the right side
of that line: a bad configuration will fail again, a preempted or hung job will not.
"""

import sys
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # unexpected error: most likely a bug, retrying repeats it
    CONFIG = 2  # bad arguments, data or environment
    DIVERGED = 3  # NaN/Inf persisted through every allowed rollback
    TRANSPORT = 4  # NCCL chose another transport than the cluster promises
    OUT_OF_MEMORY = 5  # host or GPU memory ran out: the same job runs out again
    RETRIES_EXHAUSTED = 6  # retryable failures kept coming without a new checkpoint
    HANG = 200  # the watchdog ended a step that took too long
    PEER_LOST = 201  # a collective failed because another rank went away
    LOCKED = 202  # an earlier launch of this job still holds the checkpoint directory
    FAULT = 203  # GPU, driver or NCCL fault (CUDA error, ECC, Xid, NCCL system error)
    RENDEZVOUS = 204  # rendezvous or the c10d store failed (a lost master, the network)
    TRANSIENT = 205  # a failure the run's own patterns call transient
    UNSAVED = 206  # training ended, but no checkpoint of its last step could be written
    TERMINATED = 143  # SIGTERM (eviction, torchrun restart): state saved, 128 + 15

    @property
    def retryable(self) -> bool:
        return self >= 128


EXIT_CODE_DOCS = {
    ExitCode.OK: "training finished",
    ExitCode.FAILED: "unexpected error (a bug): not retried",
    ExitCode.CONFIG: "bad arguments, data or environment: not retried",
    ExitCode.DIVERGED: "loss stayed NaN/Inf through every rollback: not retried",
    ExitCode.TRANSPORT: "NCCL transport differs from the expected one: not retried",
    ExitCode.OUT_OF_MEMORY: "host or GPU memory ran out: not retried",
    ExitCode.RETRIES_EXHAUSTED: "retried failures kept coming without a new checkpoint: "
    "not retried",
    ExitCode.HANG: "a step or a collective ran past its timeout (a hang): retried",
    ExitCode.PEER_LOST: "another rank disappeared during a collective: retried",
    ExitCode.LOCKED: "an earlier launch of this job still holds the checkpoint directory: retried",
    ExitCode.FAULT: "GPU, driver or NCCL fault: retried",
    ExitCode.RENDEZVOUS: "rendezvous or the c10d store failed: retried",
    ExitCode.TRANSIENT: "a failure the run's patterns call transient: retried",
    ExitCode.UNSAVED: "training ended but its last step could not be saved (a full or failing "
    "volume): retried from the newest checkpoint",
    ExitCode.TERMINATED: "stopped by SIGTERM (the trainer saves a checkpoint first): retried",
}


class TrainerError(Exception):
    """An expected failure: its message is one line for the log, its code the exit."""

    code = ExitCode.FAILED

    def __init__(self, message: str, code: ExitCode | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class ConfigError(TrainerError):
    code = ExitCode.CONFIG


class TransportError(TrainerError):
    code = ExitCode.TRANSPORT


class DivergedError(TrainerError):
    code = ExitCode.DIVERGED


def report_error(error: TrainerError) -> None:
    """The one line a rank prints for an error that ends it."""
    # Every rank says it: trainer-launch passes the first copy of a line on (workerlogs).
    print(f"trainer: error: {error}", file=sys.stderr, flush=True)
