"""How a worker ended, as the training operator's `ExitCode` restart policy must see it.

One classifier serves the reference trainer, which has the exception in hand, and
`trainer-launch`, which has a worker's exit status and the last lines it wrote. Each
ending gets a cause: a lost peer, SIGTERM, a hang, a GPU/driver/NCCL fault, running out
of memory, a bug... Each cause has an exit code on the right side of the policy's line
(1-127 permanent, 128-255 retried) and a specificity. When several ranks fail, the
most specific cause decides the code, whatever order the ranks exited in: a rank that
lost its peer or was stopped by torchrun's SIGTERM is a consequence, the rank whose
GPU faulted or whose code raised is the cause. Ties go to the lowest rank.

Text is read with substring patterns (no regular expression can backtrack on a long
line), first match per line wins, and a run can put its own patterns first
(`TRAINER_FAILURE_PATTERNS`, one `CAUSE=TEXT` per line). An uncaught exception that
no pattern explains is a bug (permanent); an exception handled and logged earlier is
evidence only when a pattern recognises it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import EXIT_CODE_DOCS, ExitCode

PATTERNS_ENV = "TRAINER_FAILURE_PATTERNS"
MAX_LINE = 2000  # characters of a line that patterns look at
MAX_RUN_PATTERNS = 64
MAX_PATTERN = 200
_TRACEBACK = "Traceback (most recent call last):"


@dataclass(frozen=True)
class Cause:
    id: str  # the name run patterns use
    title: str
    code: int
    specificity: int  # higher wins when ranks disagree

    @property
    def retryable(self) -> bool:
        return self.code >= 128

    def describe(self) -> str:
        try:
            return EXIT_CODE_DOCS[ExitCode(self.code)]
        except ValueError:
            return f"{self.title}: {'retried' if self.retryable else 'not retried'}"


# From least to most specific. A consequence of another rank's failure ranks low,
# a verdict with evidence about this rank's own program or device ranks high.
PEER_LOST = Cause("peer-lost", "another rank went away", ExitCode.PEER_LOST, 1)
TERMINATED = Cause("terminated", "stopped by SIGTERM", ExitCode.TERMINATED, 2)
RENDEZVOUS = Cause("rendezvous", "rendezvous or store failed", ExitCode.RENDEZVOUS, 3)
HANG = Cause("hang", "hung", ExitCode.HANG, 4)
_SIGNAL_SPECIFICITY = 5
TRANSIENT = Cause("transient", "transient by the run's patterns", ExitCode.TRANSIENT, 6)
NCCL_FAULT = Cause("nccl-fault", "NCCL system or internal error", ExitCode.FAULT, 7)
BUG = Cause("bug", "an exception no pattern explains", ExitCode.FAILED, 8)
DEVICE_FAULT = Cause("device-fault", "GPU or driver fault", ExitCode.FAULT, 9)
OUT_OF_MEMORY = Cause("out-of-memory", "out of memory", ExitCode.OUT_OF_MEMORY, 10)
_PROGRAM_SPECIFICITY = 11

# Causes a run's patterns may name.
NAMED = {
    cause.id: cause
    for cause in (
        PEER_LOST,
        TERMINATED,
        RENDEZVOUS,
        HANG,
        TRANSIENT,
        NCCL_FAULT,
        BUG,
        DEVICE_FAULT,
        OUT_OF_MEMORY,
    )
}
# Exit codes a program following the contract uses for a cause.
_BY_CODE = {
    int(ExitCode.TERMINATED): TERMINATED,
    int(ExitCode.HANG): HANG,
    int(ExitCode.PEER_LOST): PEER_LOST,
    int(ExitCode.FAULT): DEVICE_FAULT,
    int(ExitCode.RENDEZVOUS): RENDEZVOUS,
    int(ExitCode.TRANSIENT): TRANSIENT,
}


def killed_by(signum: int) -> Cause:
    if signum == signal.SIGTERM:
        return TERMINATED
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return Cause("signal", f"killed by {name}", min(255, 128 + signum), _SIGNAL_SPECIFICITY)


def program_verdict(code: int) -> Cause:
    """An exit code the program chose (2-127, or a retryable one no signal explains):
    its own verdict."""
    return Cause("program", f"the program exited {code}", code, _PROGRAM_SPECIFICITY)


@dataclass(frozen=True)
class Pattern:
    text: str
    cause: Cause | None  # None: the line says nothing about the cause (a launcher's wrapper)


def _patterns(cause: Cause | None, *texts: str) -> list[Pattern]:
    return [Pattern(text, cause) for text in texts]


# A rank's process group timed out while it waited in a collective (NCCL's watchdog,
# gloo's pair): the rank it waited for is the one that is stuck.
WAITED_IN_A_COLLECTIVE = (
    "Watchdog caught collective operation timeout",
    "for recv operation to complete",
    "for send operation to complete",
)

# First match per line wins: out of memory before the CUDA error it is reported as,
# a device-side assert (an index out of range in the program) before other CUDA errors.
BUILTIN_PATTERNS: tuple[Pattern, ...] = (
    *_patterns(
        OUT_OF_MEMORY,
        "CUDA out of memory",
        "CUDA error: out of memory",
        "HIP out of memory",
        "OutOfMemoryError",
        "MemoryError",
    ),
    *_patterns(BUG, "device-side assert triggered"),
    *_patterns(
        DEVICE_FAULT,
        "CUDA error",
        "CUDA_ERROR_",
        "cudaError",
        "CUDA driver error",
        "AcceleratorError",
        "uncorrectable ECC error",
        "NVRM: Xid",
        "GPU has fallen off the bus",
        "unhandled cuda error",
        "ncclUnhandledCudaError",
        "CUBLAS_STATUS_EXECUTION_FAILED",
        "CUDNN_STATUS_EXECUTION_FAILED",
    ),
    *_patterns(
        NCCL_FAULT,
        "unhandled system error",
        "ncclSystemError",
        "internal error - please report this issue to the NCCL developers",
        "ncclInternalError",
        "NET/IB : Got completion",
    ),
    *_patterns(HANG, *WAITED_IN_A_COLLECTIVE, "ProcessGroupNCCL's watchdog got stuck"),
    *_patterns(
        RENDEZVOUS,
        "RendezvousTimeoutError",
        "RendezvousConnectionError",
        "RendezvousClosedError",
        "RendezvousStateError",
        "DistNetworkError",
        "DistStoreError",
        "The client socket has timed out",
    ),
    *_patterns(
        PEER_LOST,
        "Connection closed by peer",
        "Connection reset by peer",
        "Broken pipe",
        "NCCL communicator was aborted",
        "ncclRemoteError",
        "remote process exited or there was a network error",
        # A backend error no pattern above explains: most often the peer's end closing.
        "DistBackendError",
        "torch.distributed.DistError",
    ),
    *_patterns(TERMINATED, "KeyboardInterrupt"),
    # A launcher's own report of its workers' failure: the workers' lines explain it.
    *_patterns(None, "ChildFailedError", "SignalException"),
)
_TORCHRUN_SIGNAL = "received by PID"  # torchrun's "Signal 9 (SIGKILL) received by PID 7"
_MAX_SIGNAL = 64  # SIGRTMAX on Linux: 128 + N above it is a code, not a signal


class PatternError(ValueError):
    """A run pattern that cannot be used; the message names its line."""


def run_patterns(env: Mapping[str, str]) -> list[Pattern]:
    """The run's own patterns, `CAUSE=TEXT` per line of `TRAINER_FAILURE_PATTERNS`."""
    text = env.get(PATTERNS_ENV, "")
    patterns = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, needle = line.partition("=")
        name = name.strip()
        where = f"{PATTERNS_ENV} line {number}"
        if not sep or not needle:
            raise PatternError(f"{where}: {line!r} is not CAUSE=TEXT")
        if name not in NAMED:
            raise PatternError(f"{where}: unknown cause {name!r}: use {', '.join(NAMED)}")
        if len(needle) > MAX_PATTERN:
            raise PatternError(f"{where}: the text is longer than {MAX_PATTERN} characters")
        patterns.append(Pattern(needle, NAMED[name]))
        if len(patterns) > MAX_RUN_PATTERNS:
            raise PatternError(f"{PATTERNS_ENV}: more than {MAX_RUN_PATTERNS} patterns")
    return patterns


@dataclass(frozen=True)
class Ending:
    """How one rank (None: a launcher's whole output) ended, and what showed it."""

    rank: int | None
    cause: Cause
    evidence: str

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "the command"
        return f"{who}: {self.cause.id} ({self.evidence})"


def decide(endings: Iterable[Ending]) -> Ending:
    """The ending that decides the exit code: the most specific cause, then the lowest rank."""
    return max(
        endings,
        key=lambda e: (e.cause.specificity, -(e.rank if e.rank is not None else 1 << 30)),
    )


def clean(line: str) -> str:
    """A line without the `[default0]:` and `[rank0]:` prefixes torchrun and PyTorch add."""
    text = line[:MAX_LINE].rstrip()
    for _ in range(3):
        if not text.startswith("["):
            break
        end = text.find("]:", 1, 40)
        if end < 0:
            break
        # One space follows PyTorch's prefix; what comes after it is the line's own.
        text = text[end + 2 :].removeprefix(" ")
    return text


def _match(line: str, patterns: Sequence[Pattern]) -> Pattern | None:
    for pattern in patterns:
        if pattern.text in line:
            return pattern
    return None


def _torchrun_signal(line: str, oom_killed: bool) -> Cause | None:
    """torchrun's summary: `traceback : Signal 9 (SIGKILL) received by PID 7`."""
    end = line.find(_TORCHRUN_SIGNAL)
    start = line.rfind("Signal ", 0, end) if end > 0 else -1
    if start < 0:
        return None
    number = line[start + len("Signal ") : end].split(" ", 1)[0]
    if not number.isdigit() or int(number) >= 128:
        return None
    if int(number) == signal.SIGKILL and oom_killed:
        return OUT_OF_MEMORY
    return killed_by(int(number))


def classify_text(
    lines: Iterable[str],
    patterns: Sequence[Pattern] = BUILTIN_PATTERNS,
    oom_killed: bool = False,
) -> tuple[Cause, str] | None:
    """The cause the last lines of a worker show, with the line that shows it.

    Every line a pattern recognises is evidence; the last uncaught exception (the line
    after a traceback's frames) is a bug when no pattern recognises it.
    """
    found: tuple[Cause, str] | None = None
    last_exception: str | None = None
    in_traceback = False
    for raw in lines:
        line = clean(raw)
        if not line:
            continue
        if line == _TRACEBACK:
            in_traceback = True
            continue
        if in_traceback:
            if line[:1].isspace():  # the traceback's frames
                continue
            in_traceback = False
            last_exception = line
        pattern = _match(line, patterns)
        cause = pattern.cause if pattern is not None else _torchrun_signal(line, oom_killed)
        if cause is not None and (found is None or cause.specificity > found[0].specificity):
            found = (cause, line)
    unexplained = last_exception is not None and _match(last_exception, patterns) is None
    if unexplained and (found is None or BUG.specificity > found[0].specificity):
        found = (BUG, last_exception)
    return found


def _explained_by_lines(status: int) -> bool:
    """Exit 1 (any uncaught Python exception) and deaths by a signal other than SIGTERM
    say little by themselves: the last lines tell more. SIGTERM is how torchrun stops
    the survivors of another rank's failure, so only what a pattern recognises in their
    lines counts (classify_exit); any other code is the program's own verdict."""
    if status == 1:
        return True
    signum = -status if status < 0 else status - 128
    return _signalled(status) and signum != signal.SIGTERM


def _signalled(status: int) -> bool:
    """Killed by a signal (negative), or a shell's 128 + N for a child killed by one."""
    return status < 0 or (128 < status <= 128 + _MAX_SIGNAL and status not in _BY_CODE)


def _by_status(rank: int | None, status: int, oom_killed: bool) -> Ending:
    if _signalled(status):
        signum = -status if status < 0 else status - 128
        if signum == signal.SIGKILL and oom_killed:
            return Ending(rank, OUT_OF_MEMORY, "killed by SIGKILL after an out-of-memory kill")
        cause = killed_by(signum)
        return Ending(rank, cause, cause.title)
    if status in _BY_CODE:
        return Ending(rank, _BY_CODE[status], f"exit code {status}")
    if status == 1:
        return Ending(rank, BUG, "exit code 1")
    return Ending(rank, program_verdict(status), f"exit code {status}")


def classify_exit(
    rank: int | None,
    status: int,
    lines: Sequence[str] = (),
    oom_killed: bool = False,
    patterns: Sequence[Pattern] = BUILTIN_PATTERNS,
) -> Ending:
    """How a worker that exited with `status` (negative: killed by that signal) ended.

    A SIGKILL while the container's memory limit killed a process is running out of
    memory. A worker SIGTERMed after its lines show what a pattern recognises (it lost
    a peer, its GPU faulted) ended that way: torchrun stops every worker left when the
    first one exits, and a rank whose own exception was still unwinding (its process
    group's teardown can take a while) is among them when a peer it took down exits
    first. An exception no pattern explains stays a consequence of the SIGTERM.
    """
    ending = _by_status(rank, status, oom_killed)
    if ending.cause is TERMINATED and status < 0:
        found = classify_text(lines, patterns, oom_killed)
        recognised = found is not None and _match(found[1], patterns) is not None
        return Ending(rank, *found) if recognised else ending
    if ending.cause is OUT_OF_MEMORY or not _explained_by_lines(status):
        return ending
    found = classify_text(lines, patterns, oom_killed)
    return Ending(rank, *found) if found is not None else ending


def by_rank(lines: Iterable[str]) -> dict[int | None, list[str]]:
    """A launcher's combined output split by the `[rankN]:` prefix PyTorch gives a
    worker's uncaught exception; lines without one (the launcher's own) under None."""
    groups: dict[int | None, list[str]] = {}
    for line in lines:
        rank = None
        start = line.find("[rank")
        if 0 <= start < 20:
            end = line.find("]:", start)
            number = line[start + 5 : end] if end > 0 else ""
            rank = int(number) if number.isdigit() and len(number) < 8 else None
        groups.setdefault(rank, []).append(line)
    return groups


def classify_output(
    status: int,
    lines: Sequence[str],
    oom_killed: bool = False,
    patterns: Sequence[Pattern] = BUILTIN_PATTERNS,
) -> Ending:
    """How a launcher that started its own workers ended, from its exit status and the
    output it and its workers shared. Each rank's lines are read apart, so the last
    exception of one rank is not taken for another's."""
    ending = _by_status(None, status, oom_killed)
    if ending.cause is OUT_OF_MEMORY or not _explained_by_lines(status):
        return ending
    endings = [
        Ending(rank, *found)
        for rank, group in by_rank(lines).items()
        if (found := classify_text(group, patterns, oom_killed)) is not None
    ]
    return decide(endings) if endings else ending


def classify_exception(
    error: BaseException, patterns: Sequence[Pattern] = BUILTIN_PATTERNS
) -> tuple[Cause, str]:
    """The cause of an exception raised in the trainer itself, its chain included."""
    chain = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(chain) < 16:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    lines: list[str] = []
    for item in reversed(chain):  # as Python prints a chain: the last one raised last
        lines.append(_TRACEBACK)
        lines.append(f"{type(item).__module__}.{type(item).__qualname__}: {item}".splitlines()[0])
        lines.extend(str(item).splitlines()[1:20])
    return classify_text(lines, patterns) or (BUG, lines[1])


# -- out-of-memory kills ----------------------------------------------------------------

_CGROUP = Path("/sys/fs/cgroup")


def oom_kills(cgroup: Path = _CGROUP) -> int | None:
    """How many processes the kernel's OOM killer ended in this container's cgroup.

    cgroup v2 (`memory.events`) or v1 (`memory/memory.oom_control`); None where neither
    is readable. A rise between a worker's start and its SIGKILL means it ran out of
    memory: the container's limit, not someone's decision to kill it.
    """
    for path in (cgroup / "memory.events", cgroup / "memory" / "memory.oom_control"):
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None
