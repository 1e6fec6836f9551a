"""Which job a checkpoint directory belongs to: the job's identity and its lock.

A job is known by its name and uid, which the templates take from the labels the
operators put on every pod (TRAINER_JOB_NAME, TRAINER_JOB_UID, or `--job-name`,
`--job-uid`). Every checkpoint's manifest records the identity of the job that wrote
it, so that a resume can refuse another job's weights.

Rank 0 holds an exclusive lock on `<dir>/.trainer-lock` for as long as it runs. It is
a `flock`, so the kernel (or the NFS/CephFS lock manager) releases it when the
process dies, however it dies: there is no stale lock to clean up. A second job on
the directory is refused at once. An earlier launch of the same job may still hold
it while it writes its emergency checkpoint (an elastic restart or a recreated pod
can start the next launch during the old pod's grace period): the new launch waits
for it, up to `--checkpoint-lock-wait` seconds.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from trainer.config import JobIdentity
from trainer.errors import ConfigError, ExitCode, TrainerError

log = logging.getLogger("trainer.checkpoint")

LOCK_FILE = ".trainer-lock"
_MAX_LOCK_RECORD = 64 << 10
_LOCK_POLL_SECONDS = 0.5


def check_directory(path: Path, name: str) -> None:
    """`path` (called `name` in errors) is a directory, or a path where one can be made."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise ConfigError(f"{name}: {error.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise ConfigError(f"{name}: not a directory")


def identity_record(job: JobIdentity) -> dict:
    return {"name": job.name, "uid": job.uid}


def identity_from_record(record: object) -> JobIdentity:
    """The identity a manifest or lock file records; unknown when it records none."""
    if not isinstance(record, dict):
        return JobIdentity()
    name, uid = record.get("name"), record.get("uid")
    return JobIdentity(
        name if isinstance(name, str) else None, uid if isinstance(uid, str) else None
    )


class DirectoryLock:
    """Rank 0's hold on a checkpoint directory for the life of its process."""

    def __init__(self, directory: Path, job: JobIdentity, launch_tag: str):
        self.path = directory / LOCK_FILE
        self.job = job
        self.launch_tag = launch_tag
        self._fd: int | None = None

    def acquire(self, wait_seconds: float) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            raise ConfigError(f"cannot lock {self.path}: {error.strerror}") from None
        deadline = time.monotonic() + wait_seconds
        announced = False
        while not self._try_lock(fd):
            holder = self._holder()
            if not (self.job.known and holder.job.same_job(self.job)):
                os.close(fd)
                raise ConfigError(
                    f"checkpoint directory {self.path.parent} is in use by {holder.describe()}; "
                    f"this is {self.job}: give each run its own --checkpoint-dir"
                )
            if time.monotonic() > deadline:
                os.close(fd)
                raise TrainerError(
                    f"an earlier launch of {self.job} ({holder.describe()}) still holds "
                    f"{self.path} after {wait_seconds:g}s",
                    ExitCode.LOCKED,
                )
            if not announced:
                log.warning(
                    "waiting for an earlier launch of this job to release %s (%s)",
                    self.path,
                    holder.describe(),
                )
                announced = True
            time.sleep(_LOCK_POLL_SECONDS)
        self._fd = fd
        self._write_record(fd)

    def _try_lock(self, fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as error:
            if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise ConfigError(f"cannot lock {self.path}: {error.strerror}") from None
            log.warning(
                "%s: the file system has no locks (%s): another job on this directory "
                "cannot be detected",
                self.path,
                error.strerror,
            )
        return True

    def _holder(self) -> LockHolder:
        try:
            with open(self.path, "rb") as handle:
                record = json.loads(handle.read(_MAX_LOCK_RECORD))
        except (OSError, ValueError, RecursionError):
            record = None
        return LockHolder.from_record(record)

    def _write_record(self, fd: int) -> None:
        record = {
            "job": identity_record(self.job),
            "launch": self.launch_tag,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": time.time(),
        }
        data = json.dumps(record).encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as error:
            # The lock holds without the record; only the message to a refused job suffers.
            log.warning("cannot record the lock holder in %s: %s", self.path, error.strerror)


@dataclass(frozen=True)
class LockHolder:
    """Who holds a lock file, as the holder recorded it."""

    job: JobIdentity
    host: str | None = None
    pid: int | None = None

    @classmethod
    def from_record(cls, record: object) -> LockHolder:
        if not isinstance(record, dict):
            return cls(JobIdentity())
        host, pid = record.get("host"), record.get("pid")
        return cls(
            identity_from_record(record.get("job")),
            host if isinstance(host, str) else None,
            pid if isinstance(pid, int) else None,
        )

    def describe(self) -> str:
        where = f" on {self.host}" if self.host else ""
        where += f", pid {self.pid}" if self.pid is not None else ""
        return f"{self.job}{where}"
