"""Checkpoints with torch.distributed.checkpoint (DCP) on the shared volume.

Layout of the checkpoint directory:

    step-N/                DCP shards, .metadata and .trainer-manifest.json: complete
    step-N.<tag>.tmp/      being written, or abandoned by a crash: never loaded
    step-N.corrupt[-K]/    failed verification on resume: kept for a human, never loaded

Every save writes into a temporary directory. When DCP has finished (its `.metadata`
exists), rank 0 lists each file with size and CRC32 in the manifest and renames the
directory to `step-N`, so a `step-N` directory was complete when it appeared. Resume
still verifies it (truncation, bit rot, a half-copied directory) and falls back to
the previous one, renaming the bad one to `step-N.corrupt`.

Async saves (the default) stage the state in memory, return, and write in the
background over their own gloo process group so they never interleave with the
training collectives; only one save is in flight at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.config import CheckpointConfig

log = logging.getLogger("trainer.checkpoint")

MANIFEST = ".trainer-manifest.json"
DCP_METADATA = ".metadata"
_STEP = re.compile(r"^step-(\d+)$")
_TMP = re.compile(r"^step-(\d+)\..+\.tmp$")
_CORRUPT = re.compile(r"^step-(\d+)\.corrupt(?:-\d+)?$")
_CHUNK = 8 << 20


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    status: str  # complete | partial | corrupt
    problem: str | None = None


def file_crc32(path: Path) -> str:
    crc = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def write_manifest(directory: Path, step: int, world_size: int) -> None:
    files = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name != MANIFEST:
            files[path.name] = {"size": path.stat().st_size, "crc32": file_crc32(path)}
    if DCP_METADATA not in files:
        raise RuntimeError(f"{directory}: DCP wrote no {DCP_METADATA}; the save is incomplete")
    manifest = {"step": step, "world_size": world_size, "created": time.time(), "files": files}
    tmp = directory / (MANIFEST + ".tmp")
    with tmp.open("w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, directory / MANIFEST)


def read_manifest(directory: Path) -> dict:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        raise ValueError(f"no {MANIFEST}") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"unreadable {MANIFEST}: {error}") from None
    if not isinstance(files, dict) or DCP_METADATA not in files:
        raise ValueError(f"{MANIFEST} does not list {DCP_METADATA}")
    return manifest


def verify_files(directory: Path, names: list[str], files: Mapping, mode: str) -> str | None:
    """The first problem with the listed files, or None when all match the manifest."""
    for name in names:
        path, expected = directory / name, files[name]
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return f"{name} is missing"
        if size != expected["size"]:
            return f"{name} has {size} bytes, the manifest says {expected['size']}"
        if mode == "crc32" and file_crc32(path) != expected["crc32"]:
            return f"{name} fails its CRC32 check"
    return None


def verify(directory: Path, mode: str = "crc32") -> str | None:
    try:
        files = read_manifest(directory)["files"]
    except ValueError as error:
        return str(error)
    return verify_files(directory, sorted(files), files, mode)


def scan(directory: Path, mode: str = "size") -> list[CheckpointInfo]:
    """Every checkpoint directory, oldest first, with its status."""
    found = []
    if not directory.is_dir():
        return found
    for path in directory.iterdir():
        if not path.is_dir():
            continue
        if match := _STEP.match(path.name):
            problem = verify(path, mode)
            status = "corrupt" if problem else "complete"
            found.append(CheckpointInfo(int(match[1]), path, status, problem))
        elif match := _TMP.match(path.name):
            found.append(CheckpointInfo(int(match[1]), path, "partial", "never finished"))
        elif match := _CORRUPT.match(path.name):
            found.append(CheckpointInfo(int(match[1]), path, "corrupt", "set aside on resume"))
    return sorted(found, key=lambda info: (info.step, info.path.name))


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
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory(prefix="trainer-inspect-") as tmp:
        out = Path(tmp) / "state.pt"
        dcp_to_torch_save(directory, out)
        return torch.load(out, weights_only=True)


def set_aside(path: Path) -> Path:
    """Rename a bad step-N directory so it is never chosen again."""
    target = path.with_name(path.name + ".corrupt")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{counter}")
        counter += 1
    os.rename(path, target)
    return target


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
        self.last_save_seconds: float | None = None
        self.last_blocking_seconds: float | None = None
        self.failed_saves = 0
        # Called on the training thread as on_saved(step, save_seconds, blocking_seconds).
        self.on_saved: Callable[[int, float, float], None] | None = None
        if self.rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)

    # -- saving -------------------------------------------------------------------

    def _tmp_dir(self, step: int, kind: str) -> Path:
        return self.directory / f"step-{step}.{self.launch_tag}-{kind}.tmp"

    def save(self, step: int, state: dict) -> None:
        """Start (async) or perform (sync) a save of `state` as step-N."""
        import torch.distributed.checkpoint as dcp

        started = time.perf_counter()
        self.wait()
        tmp = self._tmp_dir(step, "save")
        if self.config.mode == "sync":
            try:
                dcp.save(state, checkpoint_id=tmp, process_group=self.group)
                if self.rank == 0:
                    self._finalize(tmp, step)
            except Exception as error:  # a failed save must not end the run
                self._record_failure(step, error)
                return
            self.last_blocking_seconds = self.last_save_seconds = time.perf_counter() - started
            self._report(step, self.last_blocking_seconds)
            return
        future = dcp.async_save(state, checkpoint_id=tmp, process_group=self.group)
        if self.rank == 0:
            future = self._finisher.submit(self._finish_async, future, tmp, step)
        blocking = time.perf_counter() - started
        self.last_blocking_seconds = blocking
        self._inflight = SaveRecord(step, started, blocking, future)

    def _finish_async(self, future: Future, tmp: Path, step: int) -> None:
        future.result()
        self._finalize(tmp, step)

    def _finalize(self, tmp: Path, step: int) -> None:
        write_manifest(tmp, step, self.world_size)
        target = self.directory / f"step-{step}"
        try:
            os.rename(tmp, target)
        except OSError:
            if verify(target, "size") is not None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # an emergency save got there first
        _fsync_dir(self.directory)
        self._prune()

    def _record_failure(self, step: int, error: BaseException) -> None:
        self.failed_saves += 1
        log.error("checkpoint of step %d failed: %s", step, error)

    def poll(self) -> None:
        """Finish bookkeeping of a background save that has completed."""
        if self._inflight and self._inflight.future.done():
            self._collect()

    def wait(self) -> None:
        """Block until the save in flight (if any) is complete."""
        if self._inflight:
            self._collect()

    def _collect(self) -> None:
        record, self._inflight = self._inflight, None
        try:
            record.future.result()
        except Exception as error:
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
                or (
                    info.path.name.startswith(f"step-{info.step}.corrupt")
                    and info.step < oldest_kept
                )
            )
            if stale:
                shutil.rmtree(info.path, ignore_errors=True)

    def emergency_save(self, step: int, state: dict) -> Path | None:
        """Rank 0 writes `state` as step-N without any collective (peers may be gone)."""
        import torch.distributed.checkpoint as dcp

        target = self.directory / f"step-{step}"
        if target.exists() and verify(target, "size") is None:
            return target
        tmp = self._tmp_dir(step, "emergency")
        with warnings.catch_warnings():
            # DCP warns that it saves "in a single process": that is the point here.
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.save(state, checkpoint_id=tmp, no_dist=True)
        self._finalize(tmp, step)
        return target

    def close(self) -> None:
        self.wait()
        self._finisher.shutdown(wait=True)

    # -- restoring ----------------------------------------------------------------

    def discard_unfinished(self) -> None:
        """Rank 0, at start-up: temporary directories of earlier launches are dead."""
        if self.rank != 0:
            return
        for info in scan(self.directory):
            if info.status == "partial":
                log.info("removing unfinished checkpoint %s", info.path.name)
                shutil.rmtree(info.path, ignore_errors=True)

    def restore(self, template: Callable[[set[str]], dict]) -> tuple[int, dict] | None:
        """Load the newest checkpoint that verifies and loads on every rank.

        `template(keys)` returns the state to load into, given the flattened keys the
        checkpoint holds. Returns (step, loaded state), or None when there is none.
        """
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemReader

        candidates = [None]
        if self.rank == 0:
            candidates = [
                [info.step for info in reversed(scan(self.directory)) if info.status == "complete"]
            ]
        dist.broadcast_object_list(candidates, src=0, group=self.group)
        for step in candidates[0]:
            path = self.directory / f"step-{step}"
            # Agree on the verdict before loading: dcp.load is a collective.
            bad = self._agree(self._verify_share(path))
            state = None
            if not bad:
                problem = None
                try:
                    keys = set(FileSystemReader(path).read_metadata().state_dict_metadata)
                    state = template(keys)
                    dcp.load(state, checkpoint_id=path, process_group=self.group)
                except Exception as error:
                    problem = f"load failed: {error}".splitlines()[0]
                bad = self._agree(problem)
            if not bad:
                return step, state
            if self.rank == 0:
                moved = set_aside(path)
                log.error(
                    "checkpoint step-%d is unusable (%s); set aside as %s, trying the previous one",
                    step,
                    "; ".join(bad),
                    moved.name,
                )
            dist.barrier(group=self.group)
        return None

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
