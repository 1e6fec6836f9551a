"""The hang report: what every rank of a node was doing when one rank's watchdog fired.

The rank whose watchdog fires first is often not the one that is stuck: a rank that
waits in an all-reduce for a hung peer times out just as well, and once it exits the
launcher tears the stuck peer down before that peer could say where it was. So
`trainer-launch` gives its workers a directory (`TRAINER_HANG_REPORT_DIR`). The rank
whose watchdog fires declares the hang there, writes its state and stacks, and exits;
every other rank, on its way out (the launcher's SIGTERM or the failed collective),
sees the declaration and writes its own. The launcher waits for its workers to exit
(torchrun's SIGTERM-to-SIGKILL grace period bounds that) and prints one report that
names the rank the others wait for: the rank outside any collective while peers
wait inside one.

A rank stuck in native code that holds the GIL runs no Python thread, so it writes
no report. For that case each rank also has the signal handler itself dump its
threads' stacks on SIGTERM (`faulthandler`), which needs no GIL: such a rank shows
up as one that wrote no report, with those stacks.

Each torchrun restart gets a directory of its own (`attempt-N`). Ranks on other nodes
report to their own node's launcher.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ENV = "TRAINER_HANG_REPORT_DIR"
FIRED = "its watchdog"  # `RankState.ended_by` of a rank whose own watchdog fired
STALLED = "no progress"  # of a rank trainer-launch saw stop beating (trainer.progress)
_DECLARATION = "hang.json"
_SIGTERM_STACKS = ".sigterm-stacks"


@dataclass(frozen=True)
class RankState:
    """Where one rank's main thread was when the rank left."""

    rank: int
    step: int
    collective: str | None  # the collective it waited in; None: outside any
    ended_by: str  # "its watchdog", "SIGTERM", "peer lost", "an error"

    def describe(self) -> str:
        where = f"in the {self.collective}" if self.collective else "outside any collective"
        return f"rank {self.rank}: step {self.step}, {where} (ended by: {self.ended_by})"


class HangReport:
    """One rank's part of the report of one launch attempt (workers' side)."""

    def __init__(self, directory: Path | None, rank: int):
        self.directory = directory
        self.rank = rank
        self._sigterm_file = None

    @classmethod
    def from_env(cls, rank: int, env: Mapping[str, str] | None = None) -> HangReport:
        env = os.environ if env is None else env
        base = env.get(ENV)
        if not base:
            return cls(None, rank)
        attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
        return cls(Path(base) / f"attempt-{attempt}", rank)

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def dump_stacks_on_sigterm(self) -> None:
        """From now on SIGTERM's handler writes every thread's stack to this rank's file.

        Call after the SIGTERM handler is installed: this one runs first, then that one.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        # Left open: the handler writes to it whenever the signal comes.
        path = self.directory / f"rank{self.rank}{_SIGTERM_STACKS}"
        self._sigterm_file = path.open("w")
        faulthandler.register(signal.SIGTERM, file=self._sigterm_file, all_threads=True, chain=True)

    def declare(self, step: int) -> None:
        """This rank's watchdog fired: peers leaving from now on add their state."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.directory / _DECLARATION, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # another rank noticed first
        with os.fdopen(fd, "w") as handle:
            json.dump({"rank": self.rank, "step": step}, handle)

    def declared(self) -> bool:
        return self.enabled and (self.directory / _DECLARATION).exists()

    def add(self, state: RankState) -> None:
        """Write this rank's state and the stacks of all its threads."""
        self.directory.mkdir(parents=True, exist_ok=True)
        # The record last: a rank killed halfway leaves no record and counts as silent.
        _write_whole(self.directory / f"rank{self.rank}.stacks", thread_stacks())
        _write_whole(self.directory / f"rank{self.rank}.json", json.dumps(asdict(state)))


def _write_whole(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def thread_stacks() -> str:
    """Every thread's stack, the main thread's first, each headed by the thread's name."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    frames = sorted(sys._current_frames().items(), key=lambda item: item[0] != main)
    sections = []
    for ident, frame in frames:
        header = f"Thread {names.get(ident, ident)} (most recent call last):\n"
        sections.append(header + "".join(traceback.format_stack(frame)))
    return "\n".join(sections)


# -- the launcher's side ------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """The report of one launch attempt in which a watchdog fired."""

    attempt: str
    first: dict  # {"rank", "step"} of the rank whose watchdog fired first
    states: list[RankState]
    silent: list[int]  # ranks that started but wrote no report
    stacks: dict[int, str]  # from the report, or for a silent rank from its SIGTERM handler


def collect(base: Path) -> list[Attempt]:
    """Every attempt under `base` in which a hang was declared."""
    attempts = []
    for directory in sorted(base.glob("attempt-*")):
        if not (directory / _DECLARATION).exists():
            continue
        # Empty when the declaring rank died before writing it: the hang still counts.
        declaration = _read_json(directory / _DECLARATION) or {}
        states, stacks = [], {}
        for path in directory.glob("rank*.json"):
            try:
                state = RankState(**_read_json(path))
            except TypeError:  # missing (the worker died while writing it) or foreign
                continue
            states.append(state)
            stacks[state.rank] = _read_text(directory / f"rank{state.rank}.stacks")
        started = {
            int(path.name.removeprefix("rank").removesuffix(_SIGTERM_STACKS))
            for path in directory.glob(f"rank*{_SIGTERM_STACKS}")
        }
        silent = sorted(started - {state.rank for state in states})
        for rank in silent:
            stacks[rank] = _read_text(directory / f"rank{rank}{_SIGTERM_STACKS}")
        states.sort(key=lambda state: state.rank)
        name = directory.name.removeprefix("attempt-")
        attempts.append(
            Attempt(name, declaration, states, silent, {r: t for r, t in stacks.items() if t})
        )
    return attempts


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _read_json(path: Path) -> dict | None:
    """A file a worker wrote, or None when the worker died before finishing it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _ranks(ranks: list[int]) -> str:
    numbers = ", ".join(str(rank) for rank in ranks)
    return f"rank {numbers}" if len(ranks) == 1 else f"ranks {numbers}"


def verdict(states: list[RankState], silent: Sequence[int] = ()) -> str:
    """Name the rank(s) the others wait for, or say why that cannot be known here."""
    waiting = [state.rank for state in states if state.collective]
    outside = [state.rank for state in states if not state.collective]
    if waiting and (outside or silent):
        if outside:
            culprits, why = outside, "outside any collective"
        else:
            culprits = list(silent)
            why = (
                "which wrote no report (stuck where no Python thread runs: "
                "native code holding the GIL?)"
            )
        verb = "waits" if len(waiting) == 1 else "wait"
        whom = "it" if len(culprits) == 1 else "them"
        return (
            f"culprit: {_ranks(culprits)}, {why}, while {_ranks(waiting)} {verb} for {whom} in one"
        )
    for ended_by, how in ((FIRED, "whose watchdog fired"), (STALLED, "which stopped beating")):
        fired = [s.rank for s in states if not s.collective and s.ended_by == ended_by]
        if fired:
            return (
                f"culprit: {_ranks(fired)}, {how} outside any collective: "
                "stuck in its own work (data loading, compute, I/O)"
            )
    if waiting:
        return (
            "culprit: not on this node: every rank that reported waits in a collective, "
            "so the rank they wait for runs on another node (see its log) or the network "
            "itself is stuck"
        )
    return "culprit: unknown: no rank reported being inside a collective or firing its watchdog"


def render(attempt: Attempt) -> list[str]:
    """The report as log lines, the verdict first and every rank's stacks last."""
    first = attempt.first
    noticed = f"the watchdog of rank {first['rank']}" if "rank" in first else "a watchdog"
    at = f", at step {first['step']}" if "step" in first else ""
    described = {state.rank: state.describe() for state in attempt.states}
    for rank in attempt.silent:
        dumped = "its SIGTERM handler dumped the stacks" if rank in attempt.stacks else "no stacks"
        described[rank] = f"rank {rank}: wrote no report ({dumped})"
    lines = [
        f"hang report (attempt {attempt.attempt}): {noticed} fired first{at}",
        verdict(attempt.states, attempt.silent),
        *(f"  {described[rank]}" for rank in sorted(described)),
    ]
    for rank in sorted(described):
        if rank in attempt.stacks:
            lines.append(f"stacks of {described[rank]}:")
            lines.extend(attempt.stacks[rank].rstrip("\n").splitlines())
    return lines
