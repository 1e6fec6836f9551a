"""Checkpoints with torch.distributed.checkpoint (DCP) on the shared volume.

Layout of the checkpoint directory:

    step-N/                  DCP shards, .metadata and .trainer-manifest.json: complete
    step-N.<tag>.tmp/        being written, or abandoned by a crash: never loaded
    step-N.corrupt[-K]/      failed verification or loading: kept for a human, never loaded
    step-N.discarded[-K]/    complete, but set aside by --no-resume or a newer save
    .trainer-lock            held by rank 0 of the job using the directory (`ownership`)

Every save writes into a temporary directory. When DCP has finished (its `.metadata`
exists), rank 0 lists each file with size and CRC32 in the manifest, with the
identity of the job and the launch that wrote it, and renames the directory to
`step-N`, so a `step-N` directory was complete when it appeared. Resume still
verifies it (truncation, bit rot, a half-copied directory, a planted file) and
reads it without running code from it (`safe_dcp`); a bad one is set aside at once
and the previous one tried. A job whose checkpoints are all bad stops: starting
over silently would throw away its training. An intact checkpoint of another model
(other tensor names or shapes: --model or --width changed) is the run's mistake, not
the checkpoint's: the run stops and the checkpoint stays as it is.

Async saves (the default) stage the state in memory, return, and write in the
background over their own gloo process group so they never interleave with the
training collectives; only one save is in flight at a time. A save that fails (a
full or read-only volume) is logged and counted, and training goes on: the next
interval tries again.

The save on SIGTERM: with DDP rank 0 holds the whole state and writes it without
any collective (`emergency_save`). With FSDP2 every rank holds only its shards, so
the ranks stop after the same step and every rank writes its shards of it
(`save_and_publish`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.checkpoint import CheckpointException, FileSystemWriter

from trainer import safe_dcp
from trainer.config import CheckpointConfig, JobIdentity
from trainer.errors import ConfigError, ExitCode, TrainerError
from trainer.ownership import DirectoryLock, identity_from_record, identity_record

log = logging.getLogger("trainer.checkpoint")

MANIFEST = ".trainer-manifest.json"
DCP_METADATA = safe_dcp.DCP_METADATA
MAX_MANIFEST_BYTES = 16 << 20
_STEP = re.compile(r"^step-(\d+)$")
_TMP = re.compile(r"^step-(\d+)\..+\.tmp$")
_SET_ASIDE = re.compile(r"^step-(\d+)\.(corrupt|discarded)(?:-\d+)?$")
_CRC32 = re.compile(r"^[0-9a-f]{8}$")
_CHUNK = 8 << 20
# DCP's CheckpointException derives from BaseException: name it next to Exception.
CHECKPOINT_ERRORS = (Exception, CheckpointException)


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    status: str  # complete | partial | corrupt | discarded
    problem: str | None = None

    @property
    def published(self) -> bool:
        """Still under its `step-N` name: a resume would consider it."""
        return _STEP.match(self.path.name) is not None


class UnusableCheckpoints(ConfigError):
    """Every checkpoint of the job failed verification or loading."""


class CheckpointOfAnotherModel(ConfigError):
    """The newest intact checkpoint holds another model's tensors (other names or shapes):
    this run's configuration is wrong, not the checkpoint, which is left as it is."""


def model_mismatch(state: dict, saved: dict) -> str | None:
    """How the model tensors of `state` (the run's) differ from those a checkpoint's
    metadata lists (`saved`: flattened key -> storage metadata), or None when they agree."""
    wanted = {
        f"model.{key}": tuple(value.size())
        for key, value in (state.get("model") or {}).items()
        if hasattr(value, "size")
    }
    held = {
        key: tuple(meta.size)
        for key, meta in saved.items()
        if key.startswith("model.") and hasattr(meta, "size")
    }
    missing = sorted(set(wanted) - set(held))
    extra = sorted(set(held) - set(wanted))
    shapes = sorted(k for k in set(wanted) & set(held) if wanted[k] != held[k])
    problems = []
    if shapes:
        key = shapes[0]
        problems.append(
            f"{len(shapes)} tensor(s) of another shape ({key.removeprefix('model.')}: "
            f"saved {list(held[key])}, this model {list(wanted[key])})"
        )
    if missing:
        problems.append(f"{len(missing)} of this model's tensors absent (first: {missing[0]})")
    if extra:
        problems.append(f"{len(extra)} tensors this model lacks (first: {extra[0]})")
    return "; ".join(problems) or None


def _open_regular(path: Path):
    """A regular file opened for reading, never through a link, never blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        handle.close()
        raise ValueError(f"{path.name} is not a regular file")
    return handle


def file_crc32(path: Path) -> str:
    crc = 0
    with _open_regular(path) as handle:
        while chunk := handle.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def write_manifest(
    directory: Path,
    step: int,
    world_size: int,
    job: JobIdentity,
    launch_tag: str,
    run_config: Mapping | None = None,
) -> None:
    files = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name != MANIFEST:
            files[path.name] = {"size": path.stat().st_size, "crc32": file_crc32(path)}
    if DCP_METADATA not in files:
        raise RuntimeError(f"{directory}: DCP wrote no {DCP_METADATA}; the save is incomplete")
    manifest = {
        "step": step,
        "world_size": world_size,
        "created": time.time(),
        "job": identity_record(job),
        "launch": launch_tag,
        "files": files,
        # The resolved config of the run that saved (JSON, like the rest: never pickled).
        "config": dict(run_config or {}),
    }
    tmp = directory / (MANIFEST + ".tmp")
    with tmp.open("w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, directory / MANIFEST)


def read_manifest(directory: Path) -> dict:
    """The manifest, checked: at most MAX_MANIFEST_BYTES, files named inside the directory."""
    try:
        with _open_regular(directory / MANIFEST) as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"no {MANIFEST}") from None
    except OSError as error:
        raise ValueError(f"unreadable {MANIFEST}: {error.strerror}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"unreadable {MANIFEST}: {str(error).splitlines()[0]}") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or DCP_METADATA not in files:
        raise ValueError(f"{MANIFEST} does not list {DCP_METADATA}")
    for name, entry in files.items():
        if "/" in name or "\0" in name or name in ("", ".", "..", MANIFEST):
            raise ValueError(f"{MANIFEST} lists {name[:80]!r}, not a file of this checkpoint")
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("size"), int)
            and not isinstance(entry["size"], bool)
            and entry["size"] >= 0
            and isinstance(entry.get("crc32"), str)
            and _CRC32.match(entry["crc32"])
        ):
            raise ValueError(f"{MANIFEST}: malformed entry for {name[:80]!r}")
    return manifest


def file_sizes(manifest: Mapping) -> dict[str, int]:
    return {name: entry["size"] for name, entry in manifest["files"].items()}


def verify_files(directory: Path, names: list[str], files: Mapping, mode: str) -> str | None:
    """The first problem with the listed files, or None when all match the manifest."""
    for name in names:
        path, expected = directory / name, files[name]
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as error:
            return f"{name}: {error.strerror}"
        if not stat.S_ISREG(info.st_mode):
            return f"{name} is not a regular file"
        if info.st_size != expected["size"]:
            return f"{name} has {info.st_size} bytes, the manifest says {expected['size']}"
        if mode == "crc32":
            try:
                crc = file_crc32(path)
            except (OSError, ValueError) as error:
                return f"{name}: {getattr(error, 'strerror', None) or error}"
            if crc != expected["crc32"]:
                return f"{name} fails its CRC32 check"
    return None


def verify(directory: Path, mode: str = "crc32") -> str | None:
    try:
        files = read_manifest(directory)["files"]
    except ValueError as error:
        return str(error)
    return verify_files(directory, sorted(files), files, mode)


def _entries(directory: Path) -> Iterator[os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            yield from entries
    except FileNotFoundError:
        return


def scan(directory: Path, mode: str = "size") -> list[CheckpointInfo]:
    """Every checkpoint directory, oldest first, with its status. Links are never followed."""
    found = []
    for entry in _entries(directory):
        path = directory / entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if match := _STEP.match(entry.name):
            if not is_dir:
                kind = "a symbolic link" if entry.is_symlink() else "not a directory"
                found.append(CheckpointInfo(int(match[1]), path, "corrupt", kind))
                continue
            problem = verify(path, mode)
            status = "corrupt" if problem else "complete"
            found.append(CheckpointInfo(int(match[1]), path, status, problem))
        elif (match := _TMP.match(entry.name)) and is_dir:
            found.append(CheckpointInfo(int(match[1]), path, "partial", "never finished"))
        elif match := _SET_ASIDE.match(entry.name):
            found.append(CheckpointInfo(int(match[1]), path, match[2], "set aside"))
    return sorted(found, key=lambda info: (info.step, info.path.name))


def newest_checkpoint(directory: Path) -> tuple[int, float] | None:
    """(step, creation time) of the newest complete checkpoint, by sizes alone."""
    for info in reversed(scan(directory, mode="size")):
        if info.status == "complete" and info.published:
            try:
                created = read_manifest(info.path).get("created")
            except ValueError:
                continue
            if isinstance(created, int | float):
                return info.step, float(created)
    return None


def params_sha256(model_state: Mapping[str, torch.Tensor]) -> str:
    """Digest of the model parameters: names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(model_state):
        tensor = model_state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def load_offline(directory: Path) -> dict:
    """The whole checkpoint as plain nested dicts, without a process group."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        return safe_dcp.load_offline(directory, file_sizes(read_manifest(directory)))


def set_aside(path: Path, reason: str = "corrupt") -> Path:
    """Rename a step-N entry so that it is never chosen again (`reason`: corrupt, discarded)."""
    target = path.with_name(f"{path.name}.{reason}")
    counter = 1
    while os.path.lexists(target):
        target = path.with_name(f"{path.name}.{reason}-{counter}")
        counter += 1
    os.rename(path, target)
    return target


def _is_checkpoint_dir(path: Path) -> bool:
    """A directory, not a link to one."""
    return path.is_dir() and not path.is_symlink()


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def describe_failure(error: BaseException) -> str:
    """One line for a failed save: each failing rank's exception, without tracebacks."""
    if isinstance(error, CheckpointException):
        return "; ".join(
            f"rank {rank}: {type(exc).__name__}: {exc}".splitlines()[0]
            for rank, (exc, _trace) in sorted(error.failures.items())
        )
    return f"{type(error).__name__}: {error}".splitlines()[0]


@dataclass
class SaveRecord:
    step: int
    started: float
    blocking_seconds: float
    future: Future | None = None


class Checkpointer:
    """Saves, finalises, prunes and restores `step-N` checkpoints for one launch."""

    def __init__(self, config: CheckpointConfig, rank: int, world_size: int, launch_tag: str):
        import torch.distributed as dist

        self.config = config
        self.directory = config.directory
        self.rank, self.world_size, self.launch_tag = rank, world_size, launch_tag
        self.group = dist.new_group(backend="gloo")
        self._finisher = ThreadPoolExecutor(1, thread_name_prefix="ckpt-finish")
        self._inflight: SaveRecord | None = None
        self._lock: DirectoryLock | None = None
        self.last_save_seconds: float | None = None
        self.last_blocking_seconds: float | None = None
        self.failed_saves = 0
        self.run_config: Mapping = {}  # recorded in every manifest
        # Called on the training thread as on_saved(step, save_seconds, blocking_seconds)
        # and on_failed(step, reason).
        self.on_saved: Callable[[int, float, float], None] | None = None
        self.on_failed: Callable[[int, str], None] | None = None
        # Fault injection: the storage writer to use for a step's save.
        self.writer_for: Callable[[Path, int], FileSystemWriter] = lambda path, step: (
            FileSystemWriter(path)
        )

    # -- taking the directory -----------------------------------------------------

    def claim(self) -> None:
        """Take the directory for this job, on every rank.

        Rank 0 creates and locks it, refuses it if another job's checkpoints are in
        it, removes abandoned temporary directories and, with --no-resume, sets the
        earlier checkpoints aside. Every rank raises the same error if that fails.
        """
        import torch.distributed as dist

        verdict: list = [None]
        if self.rank == 0:
            try:
                self._claim()
            except TrainerError as error:
                verdict = [(str(error), int(error.code))]
        dist.broadcast_object_list(verdict, src=0, group=self.group)
        if verdict[0] is not None:
            message, code = verdict[0]
            raise TrainerError(message, ExitCode(code))

    def _claim(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"--checkpoint-dir {self.directory}: {error.strerror}") from None
        self._lock = DirectoryLock(self.directory, self.config.job, self.launch_tag)
        self._lock.acquire(self.config.lock_wait)
        self._refuse_other_jobs()
        try:
            for info in scan(self.directory):
                if info.status == "partial":
                    log.info("removing unfinished checkpoint %s", info.path.name)
                    _remove(info.path)
                elif info.published and not self.config.resume:
                    moved = set_aside(info.path, "discarded")
                    log.warning("--no-resume: %s set aside as %s", info.path.name, moved.name)
        except OSError as error:
            raise ConfigError(f"--checkpoint-dir {self.directory}: {error.strerror}") from None

    def _refuse_other_jobs(self) -> None:
        job = self.config.job
        published = sorted(
            (int(match[1]), entry.name)
            for entry in _entries(self.directory)
            if (match := _STEP.match(entry.name)) and entry.is_dir(follow_symlinks=False)
        )
        for _step, name in reversed(published):
            try:
                manifest = read_manifest(self.directory / name)
            except ValueError:
                continue  # unreadable: resume sets it aside
            writer = identity_from_record(manifest.get("job"))
            if not writer.known or writer.same_job(job):
                continue
            if not self.config.adopt:
                raise ConfigError(
                    f"checkpoint directory {self.directory} holds {name}, written by "
                    f"{writer}; this is {job}: give each run its own --checkpoint-dir, or "
                    "pass --adopt-checkpoints to continue that job's training"
                )
            log.warning("--adopt-checkpoints: %s was written by %s", name, writer)

    # -- saving -------------------------------------------------------------------

    def _tmp_dir(self, step: int, kind: str) -> Path:
        return self.directory / f"step-{step}.{self.launch_tag}-{kind}.tmp"

    def save(self, step: int, state: dict) -> None:
        """Start (async) or perform (sync) a save of `state` as step-N."""
        import torch.distributed.checkpoint as dcp

        started = time.perf_counter()
        self.wait()
        tmp = self._tmp_dir(step, "save")
        writer = self.writer_for(tmp, step)
        if self.config.mode == "sync":
            try:
                dcp.save(state, storage_writer=writer, process_group=self.group)
                if self.rank == 0:
                    self._finalize(tmp, step)
            except CHECKPOINT_ERRORS as error:  # a failed save must not end the run
                self._record_failure(step, error)
                return
            self.last_blocking_seconds = self.last_save_seconds = time.perf_counter() - started
            self._report(step, self.last_blocking_seconds)
            return
        try:
            future = dcp.async_save(state, storage_writer=writer, process_group=self.group)
        except CHECKPOINT_ERRORS as error:
            self._record_failure(step, error)
            return
        if self.rank == 0:
            future = self._finisher.submit(self._finish_async, future, tmp, step)
        blocking = time.perf_counter() - started
        self.last_blocking_seconds = blocking
        self._inflight = SaveRecord(step, started, blocking, future)

    def _finish_async(self, future: Future, tmp: Path, step: int) -> None:
        future.result()
        self._finalize(tmp, step)

    def _finalize(self, tmp: Path, step: int) -> None:
        write_manifest(
            tmp, step, self.world_size, self.config.job, self.launch_tag, self.run_config
        )
        target = self.directory / f"step-{step}"
        if os.path.lexists(target):
            if self._saved_by_this_launch(target):
                _remove(tmp)  # an emergency save got there first
                return
            # Not this launch's: claim and resume set earlier ones aside, so something
            # else put it here. It must not make this save fail.
            intact = _is_checkpoint_dir(target) and verify(target, "size") is None
            reason = "discarded" if intact else "corrupt"
            moved = set_aside(target, reason)
            log.warning("%s was in the way of this save: set aside as %s", target.name, moved.name)
        os.rename(tmp, target)
        _fsync_dir(self.directory)
        self._prune()

    def _saved_by_this_launch(self, target: Path) -> bool:
        if not _is_checkpoint_dir(target):
            return False
        try:
            manifest = read_manifest(target)
        except ValueError:
            return False
        return manifest.get("launch") == self.launch_tag and verify(target, "size") is None

    def _record_failure(self, step: int, error: BaseException) -> None:
        self.failed_saves += 1
        reason = describe_failure(error)
        log.error(
            "checkpoint of step %d failed (%d so far), training goes on: %s",
            step,
            self.failed_saves,
            reason,
        )
        if self.on_failed is not None:
            self.on_failed(step, reason)

    def poll(self) -> None:
        """Finish bookkeeping of a background save that has completed."""
        if self._inflight and self._inflight.future.done():
            self._collect()

    def wait(self) -> None:
        """Block until the save in flight (if any) is complete."""
        if self._inflight:
            self._collect()

    def settle(self, timeout: float) -> int | None:
        """Let the save in flight finish or fail, for at most `timeout` seconds.

        For a rank that leaves without saving: what it then finds published is what a
        resume gets. Returns the step of a save still in flight after `timeout`.
        """
        if self._inflight is None:
            return None
        done, _ = futures_wait([self._inflight.future], timeout=timeout)
        if not done:
            return self._inflight.step
        self._collect()
        return None

    def _collect(self) -> None:
        record, self._inflight = self._inflight, None
        try:
            record.future.result()
        except CHECKPOINT_ERRORS as error:
            self._record_failure(record.step, error)
            return
        self.last_save_seconds = time.perf_counter() - record.started
        self._report(record.step, record.blocking_seconds)

    def _report(self, step: int, blocking: float) -> None:
        if self.on_saved is not None:
            self.on_saved(step, self.last_save_seconds, blocking)

    def _prune(self) -> None:
        infos = scan(self.directory, mode="size")
        complete = [info for info in infos if info.status == "complete"]
        keep = complete[-self.config.keep :]
        if not keep:
            return
        oldest_kept, newest = keep[0].step, keep[-1].step
        for info in infos:
            stale = (
                (info.status == "complete" and info.step < oldest_kept)
                or (info.status == "partial" and info.step <= newest)
                or (not info.published and info.status != "partial" and info.step < oldest_kept)
            )
            if stale:
                _remove(info.path)

    def emergency_save(self, step: int, state: dict) -> Path | None:
        """Rank 0 writes `state` as step-N without any collective (peers may be gone)."""
        import torch.distributed.checkpoint as dcp

        target = self.directory / f"step-{step}"
        if _is_checkpoint_dir(target) and verify(target, "size") is None:
            return target  # this step is saved already (by this launch, or the one resumed)
        tmp = self._tmp_dir(step, "emergency")
        with warnings.catch_warnings():
            # DCP warns that it saves "in a single process": that is the point here.
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.save(state, storage_writer=FileSystemWriter(tmp), no_dist=True)
        self._finalize(tmp, step)
        return target

    def save_and_publish(self, step: int, state: dict) -> Path:
        """Every rank writes its part of `state` as step-N, now; published on return."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        self.wait()
        tmp = self._tmp_dir(step, "final")
        dcp.save(state, storage_writer=FileSystemWriter(tmp), process_group=self.group)
        if self.rank == 0:
            self._finalize(tmp, step)
        # Nobody exits before step-N is published: an early exit would have torchrun
        # stop rank 0 mid-rename.
        dist.barrier(group=self.group)
        return self.directory / f"step-{step}"

    def close(self) -> None:
        self.wait()
        self._finisher.shutdown(wait=True)

    # -- restoring ----------------------------------------------------------------

    def restore(self, template: Callable[[set[str]], dict]) -> tuple[int, dict] | None:
        """Load the newest checkpoint that verifies and loads on every rank.

        `template(keys)` returns the state to load into, given the flattened keys the
        checkpoint holds. Returns (step, loaded state), or None when the directory has
        never held a checkpoint. Bad checkpoints are set aside as they are found; when
        there were checkpoints but none is usable, raises UnusableCheckpoints.
        """
        import torch.distributed as dist

        plan: list = [None]
        set_aside_names: list[str] = []
        if self.rank == 0:
            plan = [self._candidates(set_aside_names)]
        dist.broadcast_object_list(plan, src=0, group=self.group)
        candidates, had_checkpoints = plan[0]
        for step in candidates:
            path = self.directory / f"step-{step}"
            # Agree on each verdict before the next step: dcp.load is a collective.
            bad = self._agree(self._verify_share(path))
            if not bad:
                files = metadata = None
                try:
                    files = file_sizes(read_manifest(path))
                    metadata = safe_dcp.read_metadata(path, files)
                    problem = None
                except (OSError, ValueError) as error:
                    problem = f"metadata: {error}".splitlines()[0]
                bad = self._agree(problem)
            state = None
            if not bad:
                state = template(set(metadata.state_dict_metadata))
                other = self._agree(model_mismatch(state, metadata.state_dict_metadata))
                if other:
                    # Intact files of another model: the run's --model, --width or layers
                    # changed. Setting it aside would lose good work; stop instead.
                    raise CheckpointOfAnotherModel(
                        f"checkpoint step-{step} in {self.directory} was saved by another "
                        f"model: {other[0].split(': ', 1)[1]}; resume with the model options "
                        "it was saved with, or pass --no-resume (or another --checkpoint-dir) "
                        "to start this model over; the checkpoint is left as it is"
                    )
                problem = None
                try:
                    safe_dcp.load(state, path, files, self.group)
                except CHECKPOINT_ERRORS as error:
                    problem = f"load failed: {describe_failure(error)}"
                bad = self._agree(problem)
            if not bad:
                return step, state
            if self.rank == 0:
                moved = set_aside(path)
                set_aside_names.append(moved.name)
                log.error(
                    "checkpoint step-%d is unusable (%s); set aside as %s",
                    step,
                    "; ".join(bad),
                    moved.name,
                )
            dist.barrier(group=self.group)
        if had_checkpoints:
            # Rank 0 set them aside; every rank reports the same error (trainer-launch
            # shows it once, whichever rank gets to it first).
            names = [set_aside_names]
            dist.broadcast_object_list(names, src=0, group=self.group)
            named = f" ({', '.join(names[0])})" if names[0] else ""
            raise UnusableCheckpoints(
                f"no usable checkpoint in {self.directory}: every one failed verification "
                f"or loading and is set aside{named}; repair them, or pass --no-resume to "
                "start over from step 0"
            )
        return None

    def _candidates(self, set_aside_names: list[str]) -> tuple[list[int], bool]:
        """Rank 0: complete checkpoints newest first, after setting the bad ones aside;
        and whether the directory has ever held a checkpoint."""
        infos = scan(self.directory)
        for info in infos:
            if info.status == "corrupt" and info.published:
                moved = set_aside(info.path)
                set_aside_names.append(moved.name)
                log.error(
                    "checkpoint %s is unusable (%s); set aside as %s",
                    info.path.name,
                    info.problem,
                    moved.name,
                )
        complete = [info.step for info in reversed(infos) if info.status == "complete"]
        had_checkpoints = any(info.status in ("complete", "corrupt") for info in infos)
        return complete, had_checkpoints

    def _agree(self, problem: str | None) -> list[str]:
        """Every rank's problem, on every rank."""
        import torch.distributed as dist

        problems = [None] * self.world_size
        dist.all_gather_object(problems, problem, group=self.group)
        return [f"rank {rank}: {text}" for rank, text in enumerate(problems) if text]

    def _verify_share(self, path: Path) -> str | None:
        """Each rank checks every world_size-th file of the manifest."""
        try:
            files = read_manifest(path)["files"]
        except ValueError as error:
            return str(error)
        names = sorted(files)[self.rank :: self.world_size]
        return verify_files(path, names, files, self.config.verify)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
