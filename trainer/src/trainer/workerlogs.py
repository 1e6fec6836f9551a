"""The workers' stderr, passed through to the launcher's and remembered line by line.

`trainer-launch` decides how a worker ended partly from the last lines it wrote (a
traceback's exception, a CUDA or NCCL error). torchrun can copy a worker's stderr to
a file (`--tee`), but that file grows for as long as the job runs. Instead, torchrun's
log extension point (`torchrun.logs_specs`, registered as `trainer-launch`) gives each
worker a named pipe as its stderr; a thread per worker writes each complete line on
to the launcher's stderr, unchanged and never interleaved with another worker's, and
keeps only the last lines. Lines longer than a pipe's worth are passed on in pieces.
A configuration error is the same on every rank, and every rank reports it (whichever
rank exits first makes torchrun stop the others, so no one rank is sure to get to
say it): the first copy of each `trainer: error:` line is passed on, the rest are not.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import BinaryIO

from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs, Std

from trainer.failures import MAX_LINE

KEEP_LINES = 200
_CHUNK = 1 << 16
_OUTPUT_LOCK = threading.Lock()
_SAID_ONCE = b"trainer: error: "
_said: set[bytes] = set()  # under _OUTPUT_LOCK


class LineTail:
    """One stream, followed by a thread: lines passed on to `sink`, the last ones kept."""

    def __init__(self, sink: BinaryIO | None, keep: int = KEEP_LINES):
        self.sink = sink  # None: remember only (a rank the user filtered out)
        self._lines: deque[str] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def follow_path(self, path: Path) -> None:
        """Read the named pipe at `path` in a thread of its own until every writer is gone."""
        self._thread = threading.Thread(
            target=self._read_path, args=(path,), name=f"tail {path.name}", daemon=True
        )
        self._thread.start()

    def follow_stream(self, stream: BinaryIO) -> None:
        self._thread = threading.Thread(target=self._read, args=(stream,), name="tail", daemon=True)
        self._thread.start()

    def _read_path(self, path: Path) -> None:
        # Opening blocks until torchrun opens the write end for the worker.
        with path.open("rb", buffering=0) as stream:
            self._read(stream)

    def _read(self, stream: BinaryIO) -> None:
        pending = b""
        while chunk := stream.read(_CHUNK):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            if len(pending) >= _CHUNK:
                complete.append(pending)
                pending = b""
            self._emit(complete)
        if pending:
            self._emit([pending])

    def _emit(self, lines: list[bytes]) -> None:
        if not lines:
            return
        if self.sink is not None:
            with _OUTPUT_LOCK:
                shown = [line for line in lines if _first_time(line)]
                self.sink.write(b"".join(line + b"\n" for line in shown))
                self.sink.flush()
        with self._lock:
            for line in lines:
                self._lines.append(line[: MAX_LINE * 4].decode("utf-8", "replace"))

    def wait(self, deadline: float) -> None:
        """Until the stream ends (its last lines are in), or `deadline` (monotonic) passes.

        A worker's own children (DataLoader workers) inherit its stderr and can keep
        the stream open after the worker itself is gone.
        """
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def ended(self) -> bool:
        """Whether the stream reached its end (every writer closed it)."""
        return self._thread is not None and not self._thread.is_alive()

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)


def _first_time(line: bytes) -> bool:
    if not line.startswith(_SAID_ONCE):
        return True
    if line in _said:
        return False
    _said.add(line)
    return True


class WorkerStderr(LogsSpecs):
    """torchrun's log destinations: a named pipe per worker for stderr, stdout untouched.

    torchrun creates this from its `--logs-specs trainer-launch` option; `trainer-launch`
    sets that option and reads the tails through `WorkerStderr.active`.
    """

    active: WorkerStderr | None = None

    def __init__(
        self,
        log_dir: str | None = None,
        redirects: Std | dict[int, Std] = Std.NONE,
        tee: Std | dict[int, Std] = Std.NONE,
        local_ranks_filter: set[int] | None = None,
    ) -> None:
        if not log_dir:
            raise ValueError("WorkerStderr needs a log directory")
        super().__init__(log_dir, redirects, tee, local_ranks_filter)
        self.tails: dict[int, LineTail] = {}
        WorkerStderr.active = self

    @property
    def root_log_dir(self) -> str:
        return str(self._root_log_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        first = envs.get(0, {})
        attempt = Path(self.root_log_dir) / f"attempt-{first.get('TORCHELASTIC_RESTART_COUNT', 0)}"
        attempt.mkdir(parents=True, exist_ok=True)
        stderrs, error_files, tails = {}, {}, {}
        for local_rank in range(len(envs)):
            pipe = attempt / f"rank{local_rank}.stderr"
            os.mkfifo(pipe)
            shown = self._local_ranks_filter is None or local_rank in self._local_ranks_filter
            tail = tails[local_rank] = LineTail(sys.stderr.buffer if shown else None)
            tail.follow_path(pipe)
            stderrs[local_rank] = str(pipe)
            # Where a worker decorated with torchrun's @record writes its exception.
            error_files[local_rank] = str(attempt / f"rank{local_rank}.error.json")
            envs[local_rank]["TORCHELASTIC_ERROR_FILE"] = error_files[local_rank]
        self.tails = tails
        return LogsDest(
            stdouts=dict.fromkeys(range(len(envs)), ""),
            stderrs=stderrs,
            tee_stdouts={},
            tee_stderrs={},
            error_files=error_files,
        )
