"""Progress beats: how a user's own training command tells `trainer-launch` it is alive.

The reference trainer has a watchdog of its own (`trainer.watchdog`). A user's script
has none, and a rank stuck in its own code (a data loader that never returns, a
collective only some ranks reach) holds its GPUs until its peers' process-group
timeout fires, and then the peers are the ones that report a timeout. With
`TRAINER_HANG_TIMEOUT=SECONDS` the launcher gives its workers a directory
(`TRAINER_PROGRESS_DIR`) and watches it:

    from trainer import progress
    for step, batch in enumerate(loader):
        ...
        progress.beat(step)

A worker that is not Python beats by writing `RANK STEP` to `$TRAINER_PROGRESS_DIR/$$`.
Watching starts at a rank's first beat (start-up, compiling and the first batch are not
watched). When a live rank has not beaten for the timeout, the launcher has every
beating Python rank dump its threads' stacks (`faulthandler` on a real-time
signal: no GIL needed), prints a
hang report in `trainer.hangreport`'s form that names the rank outside any collective
while its peers wait inside one, stops the stalled ranks and exits `HANG` (retried).
Set the timeout below the process group's (`init_process_group(timeout=...)`): past
that, the waiting ranks' own timeout ends them first.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from trainer.hangreport import STALLED, RankState, verdict

DIR_ENV = "TRAINER_PROGRESS_DIR"
TIMEOUT_ENV = "TRAINER_HANG_TIMEOUT"
# A real-time signal: SIGUSR1 and SIGUSR2 already mean something to some frameworks.
# None where there are none (macOS): beats still count, stacks are not dumped.
STACKS_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else None
_STACKS = ".stacks"
_MIN_INTERVAL = 1.0  # seconds between two writes of one worker's beat
_MAX_BEATERS = 4096  # files of the directory the watch reads
_MAX_STACKS = 256 * 1024  # bytes of one rank's stacks the report prints


class ProgressError(ValueError):
    """A `TRAINER_HANG_TIMEOUT` that cannot be used."""


# -- the worker's side -------------------------------------------------------------------


class _Beats:
    def __init__(self) -> None:
        self.last = 0.0
        self.stacks = None  # the open file faulthandler writes to on STACKS_SIGNAL


_beats = _Beats()


def beat(step: int | None = None) -> None:
    """This rank made progress (at `step`); a no-op unless trainer-launch watches. Never
    raises: a beat that cannot be written is skipped, and training goes on."""
    directory = os.environ.get(DIR_ENV)
    now = time.monotonic()
    if not directory or now - _beats.last < _MIN_INTERVAL:
        return
    _beats.last = now
    pid = os.getpid()
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        if _beats.stacks is None and STACKS_SIGNAL is not None:
            # Left open: the handler writes to it whenever the launcher asks.
            _beats.stacks = open(Path(directory, f"{pid}{_STACKS}"), "w")  # noqa: SIM115
            faulthandler.register(STACKS_SIGNAL, file=_beats.stacks, all_threads=True)
        rank = os.environ.get("RANK", "0")
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        partial = Path(directory, f".{pid}.partial")
        partial.write_text(f"{rank} {'-' if step is None else int(step)} {attempt}\n")
        os.replace(partial, Path(directory, str(pid)))


# -- the launcher's side -----------------------------------------------------------------


def hang_timeout(env: Mapping[str, str]) -> float | None:
    """`TRAINER_HANG_TIMEOUT` in seconds; None when unset (nothing is watched)."""
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 1 <= seconds <= 7 * 24 * 3600:  # also false for nan
        raise ProgressError(
            f"{TIMEOUT_ENV}={text!r}: give the seconds without progress that make a hang "
            "(a number from 1 to 604800)"
        )
    return seconds


@dataclass(frozen=True)
class Beater:
    pid: int
    rank: int
    step: int | None
    attempt: int  # torchrun's restart count when it beat
    age: float  # seconds since its last beat


@dataclass
class Stall:
    """One hang the watch saw: the ranks its report names and the workers it stopped."""

    culprits: list[int]
    stopped: set[int]
    attempt: int

    def evidence(self, timeout: float) -> str:
        named = ", ".join(str(rank) for rank in self.culprits)
        who = f"the hang report names rank(s) {named}" if named else "see the hang report"
        return f"no progress beat for {timeout:g}s, {TIMEOUT_ENV}; {who}"


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) <= 9 else None


def _alive(pid: int) -> bool:
    try:
        stat = Path("/proc", str(pid), "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def beaters(directory: Path, now: float) -> list[Beater]:
    """The live workers that have beaten in `directory`, each with its last beat's age."""
    found = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for count, entry in enumerate(entries):
            if count >= _MAX_BEATERS:
                break
            if not entry.name.isdigit() or len(entry.name) > 9:
                continue
            beat = _head(entry.path)
            if beat is None:
                continue
            text, modified = beat
            fields = text.split()
            rank = _number(fields[0]) if fields else None
            if rank is None:
                continue
            step, attempt = (_number(f) for f in [*fields[1:3], "", ""][:2])
            pid = int(entry.name)
            if _alive(pid):
                found.append(Beater(pid, rank, step, attempt or 0, now - modified))
    return sorted(found, key=lambda b: b.rank)


def _head(path: str) -> tuple[str, float] | None:
    """The first bytes of a regular file and its mtime; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        stat = os.fstat(fd)
        if not S_ISREG(stat.st_mode):
            return None
        return os.read(fd, 64).decode(errors="replace"), stat.st_mtime
    except OSError:
        return None
    finally:
        os.close(fd)


# faulthandler's sections: "Thread 0x... (most recent call first):", or "Current thread".
_SECTION = "thread 0x"
_FRAME = '  File "'


def _main_thread(stacks: str) -> list[tuple[str, str]]:
    """(file, function) of the main thread's frames, innermost first, from a dump.

    faulthandler marks the thread that caught the signal, which need not be the main
    one: the main thread is the one whose outermost frame is a program's top level.
    """
    sections: list[list[tuple[str, str]]] = []
    for line in stacks.splitlines()[:4000]:
        if line.lower().lstrip().startswith(("current " + _SECTION, _SECTION)):
            sections.append([])
        elif line.startswith(_FRAME) and sections:
            file, _, rest = line[len(_FRAME) :].partition('"')
            sections[-1].append((file, rest.rpartition(" in ")[2].strip()))
    for frames in sections:
        if frames and frames[-1][1] in ("<module>", "_run_module_as_main"):
            return frames
    return sections[0] if sections else []


def collective_of(stacks: str) -> str | None:
    """The torch.distributed call (or backward: DDP's gradient all-reduce) the main
    thread waits in; None when it is in the program's own code."""
    frames = _main_thread(stacks)
    for file, function in frames:
        path = file.replace("\\", "/")
        if "/torch/" not in path:
            return None
        if "/torch/distributed/" in path and function not in ("wrapper", "_fn", "inner"):
            return function
        if "/torch/autograd/" in path:
            return "backward (DDP's gradient all-reduce)"
    return None


def _read_stacks(path: Path, offset: int) -> str:
    """What a worker's faulthandler wrote to `path` past `offset`, bounded."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, offset))
            return handle.read(_MAX_STACKS).decode(errors="replace")
    except OSError:
        return ""


class ProgressWatch:
    """A thread of the launcher that watches the workers' beats while they run."""

    def __init__(self, directory: Path, timeout: float, grace: float, say) -> None:
        self.directory = directory
        self.timeout = timeout
        self.grace = grace
        self.say = say
        self.stalls: list[Stall] = []
        self.latest_attempt = 0  # torchrun's restart count of the newest beat seen
        self._reported: set[int] = set()  # pids of workers a report covered
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="progress-watch", daemon=True)

    def __enter__(self) -> ProgressWatch:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def last_stall(self) -> Stall | None:
        """The hang of the newest attempt that beat, if the watch saw one there."""
        if self.stalls and self.stalls[-1].attempt >= self.latest_attempt:
            return self.stalls[-1]
        return None

    def _watch(self) -> None:
        interval = min(5.0, max(0.2, self.timeout / 4))
        while not self._done.wait(interval):
            found = [b for b in beaters(self.directory, time.time()) if b.pid not in self._reported]
            self.latest_attempt = max([self.latest_attempt, *(b.attempt for b in found)])
            if any(b.age > self.timeout for b in found):
                stall = self._report(found)
                self.stalls.append(stall)
                self._reported.update(b.pid for b in found)
                self._stop(stall.stopped)

    def _report(self, found: list[Beater]) -> Stall:
        stacks = self._dump_stacks(found)
        # Peers that wait for a stalled rank stop beating a moment after it does.
        stalled = [b for b in found if b.age > self.timeout / 2]
        states = [
            RankState(
                b.rank,
                b.step if b.step is not None else -1,
                collective_of(stacks.get(b.pid, "")),
                STALLED if b in stalled else "still beating",
            )
            for b in found
        ]
        line = verdict([state for state in states if state.ended_by == STALLED])
        step = min((b.step for b in stalled if b.step is not None), default=None)
        attempt = max(b.attempt for b in found)
        at = f", at step {step}" if step is not None else ""
        self.say(
            f"hang report (attempt {attempt}): no progress beat for {self.timeout:g}s "
            f"({TIMEOUT_ENV}){at}"
        )
        self.say(line)
        for state in states:
            self.say(f"  {state.describe()}")
        for b, state in zip(found, states, strict=True):
            if stacks.get(b.pid):
                self.say(f"stacks of {state.describe()}:")
                for text in stacks[b.pid].rstrip("\n").splitlines():
                    self.say(text)
        return Stall(_named(line), {b.pid for b in stalled}, attempt)

    def _dump_stacks(self, found: list[Beater]) -> dict[int, str]:
        """Each Python worker's threads' stacks, by pid, as its faulthandler writes them.

        Only a worker that registered the handler (its stacks file exists) is signalled:
        to any other process the real-time signal's default action is to end it.
        """
        if STACKS_SIGNAL is None:
            return {}
        files = {b.pid: Path(self.directory, f"{b.pid}{_STACKS}") for b in found}
        files = {pid: path for pid, path in files.items() if path.exists()}
        before = {pid: _size(path) for pid, path in files.items()}
        for pid in files:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, STACKS_SIGNAL)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(
            _size(path) <= before[pid] for pid, path in files.items()
        ):
            time.sleep(0.05)
        time.sleep(0.2)  # a dump that has begun ends within moments: let it
        return {pid: _read_stacks(path, before[pid]) for pid, path in files.items()}

    def _stop(self, pids: set[int]) -> None:
        """SIGTERM the stalled workers, SIGKILL what is left after the grace period."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            if self._done.wait(0.1):
                return
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _named(line: str) -> list[int]:
    """The ranks a verdict line names: `culprit: rank 1, ...` or `culprit: ranks 1, 2, ...`."""
    rest = line.removeprefix("culprit: ")
    for word in ("ranks ", "rank "):
        if rest.startswith(word):
            numbers = rest[len(word) :].split(", ")
            return [int(n) for n in numbers if n.isdigit()]
    return []
