"""Sources into events: each line cleaned, read by the NCCL, PyTorch and node parsers, and
tagged with its source, line number, process, rank and attempt.

A process is NCCL's `host:pid`, or the rank PyTorch or the launcher named. In pods pid 1
is the rule, so a restarted container's earlier run cannot be told apart by pid: an
attempt ends where a new one visibly starts (torchrun restarting its workers, or a
process printing its once-per-process NCCL lines again), and a source named
`... (previous)` (`doctor job` fetches the previous container's log) is an earlier attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from trainops.doctor import (
    catalog,
    flight_recorder,
    launcher_messages,
    nccl_messages,
    node_messages,
    outcome_messages,
    torch_messages,
)
from trainops.doctor import events as ev
from trainops.doctor.events import Event, ProcessKey
from trainops.doctor.limits import MAX_ITEMS, MAX_PROCESSES, Pattern, words
from trainops.doctor.lines import NcclHeader, clean, nccl_header
from trainops.doctor.sources import FlightRecorderDump, LogStream, Source
from trainops.errors import InputError

PREVIOUS = "(previous)"
TEXT_LIMIT = 300
_ONCE_PER_PROCESS = (ev.DRIVER, ev.BOOTSTRAP_IFS)
_RESTART_MARKERS = ("will restart worker group", "Restarting worker group")
_WRAPPED_TORCH = ("Watchdog caught collective operation timeout:",)
_WRAP_LINES = 3  # continuation lines a wrapped message may take
_INTERFACE_LISTS = (ev.SOCKET_IFS, ev.BOOTSTRAP_IFS)
_WRAPPED_INTERFACES = 64  # lines a wrapped interface list may continue over
# Distinct cleaned lines whose reading is remembered: logs repeat themselves (and a gzip of
# one line repeated is small), so a repeated line costs a lookup, not every parser again.
_KNOWN_LINES = 4096
# Facts that say only that a line reports something, or that no check reads: the catalog
# may know what the line means.
# What a line's parser read without saying why it failed; the catalog still reads the line
# (NCCL's result string inside torch's "NCCL error in: ..." or nccl-tests' failure line).
_UNEXPLAINED = frozenset(
    {ev.NCCL_WARN, ev.EXCEPTION, ev.IB_ASYNC, ev.TESTS_FAILURE, ev.OFI, ev.TORCH_NCCL_ERROR}
)

# The words that mark a line, each with what it marks (one declaration, three scans):
# - CATALOG: a line without NCCL's header is looked up in the catalog only when it carries
#   one of these; every catalogued message that can appear without the header does, and the
#   rest of a training log (progress, data loading) is not probed;
# - ERROR: the line reports an error in words every stack uses;
# - STACK: the line is output of the stacks the doctor reads.
# A line of the last two kinds is not understood, but says the log is the right one.
CATALOG, ERROR, STACK = "catalog", "error", "stack"
_CUES: dict[str, tuple[str, ...]] = {
    "NCCL": (CATALOG, STACK),
    "nccl": (STACK,),
    "NET/": (CATALOG, STACK),
    "CUDA": (CATALOG, STACK),
    "cuda": (CATALOG, STACK),
    "Cuda": (CATALOG,),
    "torch": (STACK,),
    "c10d": (STACK,),
    "ProcessGroup": (STACK,),
    "gloo": (STACK,),
    "Gloo": (STACK,),
    "mpirun": (STACK,),
    "ORTE": (CATALOG, STACK),
    "orted": (STACK,),
    "Open MPI": (STACK,),
    "not enough slots": (CATALOG, STACK),
    "fewer slots": (CATALOG, STACK),
    "unexpectedly disconnected": (CATALOG,),  # Open MPI's TCP BTL: a peer hung up
    "out-of-band": (CATALOG,),  # Open MPI's OOB interface selection
    "unexpected process identifier": (CATALOG,),  # Open MPI's TCP BTL: a repeated address
    "Horovod": (CATALOG,),
    "horovod": (CATALOG,),  # Horovod's log lines name their file (horovod/common/...)
    "not successful": (CATALOG,),  # horovodrun: ssh not successful for host
    "DistributedDataParallel": (STACK,),
    "deepspeed": (STACK,),
    "accelerate": (STACK,),
    "You can't train a model": (CATALOG, STACK),  # Accelerate's refusals in prepare()
    "Xid": (CATALOG,),
    "Error": (CATALOG,),
    "error": (CATALOG,),
    "ERROR": (CATALOG, ERROR),
    "Error:": (ERROR,),
    "error:": (ERROR,),
    "Exception:": (ERROR,),
    "Traceback (most recent call last)": (ERROR,),
    "Segmentation fault": (ERROR,),
    "core dumped": (ERROR,),
    "Aborted": (ERROR,),
    "Killed": (ERROR,),
    "FATAL": (ERROR,),
    "Fatal error": (ERROR,),
    "fatal error": (ERROR,),
    "fail": (CATALOG,),
    "Fail": (CATALOG,),
    "FAIL": (CATALOG,),
    " failed": (ERROR,),
    "Failed to": (ERROR,),
    "failed to": (ERROR,),
    "WARN": (CATALOG,),
    "Warn": (CATALOG,),
    "timed out": (CATALOG,),
    "Timed out": (CATALOG,),
    "Timeout": (CATALOG,),
    "timeout": (CATALOG,),
    "refused": (CATALOG,),
    "denied": (CATALOG,),
    "unable": (CATALOG,),
    "Unable": (CATALOG,),
    "cannot": (CATALOG,),
    "Cannot": (CATALOG,),
    "not found": (CATALOG,),
    "invalid": (CATALOG,),
    "Invalid": (CATALOG,),
    "mismatch": (CATALOG,),
}


def _cues(role: str):
    return words(*(word for word, roles in _CUES.items() if role in roles))


_CATALOG_CUES = _cues(CATALOG)
_ERROR_WORDS = _cues(ERROR)
_STACK_WORDS = _cues(STACK)


def _unknown(message: str) -> list[tuple[str, dict]]:
    if _ERROR_WORDS.search(message):
        return [(ev.ERROR_LINE, {"message": message[:TEXT_LIMIT]})]
    if _STACK_WORDS.search(message):
        return [(ev.MENTION, {})]
    return []


def _key(event: Event) -> tuple:
    """Facts kept per process: MAX_ITEMS of each kind, one per distinct channel path."""
    detail = event.fields.get("via") if event.kind == ev.CHANNEL else None
    return (event.attempt, event.process, event.kind, detail)


def parse(sources: Iterable[Source]) -> list[Event]:
    """Every fact, at most MAX_ITEMS of a kind per process, so memory stays bounded by the
    number of processes (itself bounded) rather than by the length of the logs."""
    found: list[Event] = []
    processes: set[ProcessKey] = set()
    kept: dict[tuple, int] = {}
    for source in sources:
        if isinstance(source, FlightRecorderDump):
            found += flight_recorder.read(source)
            continue
        for event in _stream(source):
            if event.process is not None and event.process not in processes:
                processes.add(event.process)
                if len(processes) > MAX_PROCESSES:
                    raise InputError(
                        f"more than {MAX_PROCESSES} processes in the logs", event.source
                    )
            key = _key(event)
            count = kept.get(key, 0)
            limit = 1 if event.kind == ev.CHANNEL else MAX_ITEMS
            if count < limit:
                kept[key] = count + 1
                found.append(event)
    return found


# A traceback's last frame shows the source line that raised, and a paste may keep only it:
# `raise RuntimeError("Distributed package doesn't have NCCL " "built in")`. Its message is
# the string literals, joined as Python joins adjacent literals.
_RAISE = Pattern(r"\s*raise ((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))\((.{1,1000})\)\s*$")
_LITERALS = Pattern(r"""(?:\s*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'))+\s*$""")
_LITERAL = Pattern(r""""((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'""")


def raised(text: str) -> str | None:
    """`Error: message` for a `raise Error("message" ...)` source line of string literals."""
    if "raise " not in text or not (m := _RAISE.match(text)):
        return None
    if not _LITERALS.match(m.group(2)):
        return None
    message = "".join(a or b for a, b in _LITERAL.findall(m.group(2)))
    return f"{m.group(1)}: {message}" if message.strip() else None


def _facts(text: str, header) -> list[tuple[str, dict]]:
    """What one cleaned line says, from the parsers, the outcome markers and the catalog."""
    if header is None and (message := raised(text)) is not None:
        text = message
    launcher = launcher_messages.read(text.strip())
    if launcher is not None:
        facts = launcher
    else:
        facts = nccl_messages.read(header.message if header else text.strip(), header)
        if header is None and not facts:
            facts = _bare_level(text.strip())
    if header is None and launcher is None:
        facts += torch_messages.read(text.strip()) + node_messages.read(text)
    facts += outcome_messages.read(text)
    message = header.message if header else text.strip()
    understood = any(kind not in _UNEXPLAINED for kind, _ in facts)
    if not understood and (header is not None or _CATALOG_CUES.search(message)):
        entry = catalog.lookup(message)
        if entry is not None:
            where = header.location if header else None
            facts.append((ev.CATALOGUED, {"entry": entry, "location": where}))
    facts = facts or _unknown(message)
    if not facts and header is not None:
        facts = [(ev.MENTION, {})]  # NCCL's own line, even one no parser reads
    if facts and (errno := catalog.errno_in(message)) is not None:
        # The errno says why; the message that carries it says how bad. A component that
        # reports a failed attempt as a warning and goes on (c10d trying the next address
        # after an IPv6 socket refused with EAFNOSUPPORT) has not failed on it.
        carrying = next((f["entry"] for kind, f in facts if kind == ev.CATALOGUED), None)
        cap = carrying.severity if carrying is not None else None
        facts.append((ev.ERRNO, {"entry": errno, "cap": cap if cap in _CAPS else None}))
    return facts


_CAPS = ("warning", "info")  # severities of a carrying message that bound its errno's


def _bare_level(text: str) -> list[tuple[str, dict]]:
    """`INFO NET/Socket : Using ...`: a paste that cut NCCL's prefix up to its level word;
    read as NCCL's only where the rest is a message NCCL's parser knows."""
    level, _, rest = text.partition(" ")
    if level not in ("INFO", "WARN") or not rest.strip():
        return []
    message = rest.strip()
    found = nccl_messages.read(message, NcclHeader(level=level, message=message))
    return found if any(kind != ev.NCCL_WARN for kind, _ in found) else []


def _unread(facts: list[tuple[str, dict]]) -> bool:
    """Only an NCCL warning nobody knows: perhaps the paste wrapped it onto the next line."""
    return bool(facts) and all(kind == ev.NCCL_WARN for kind, _ in facts)


def _rejoined(header, text: str, following: str):
    """The warning with its wrapped continuation, when that makes a message someone knows."""
    for glue in (" ", ""):
        joined = text.rstrip() + glue + following.strip()
        facts = _facts(joined, nccl_header(joined))
        if not _unread(facts):
            return joined, facts
    return None


# A paste that lost its newlines runs NCCL's lines together (`... set by environment to 0.
# [0] NCCL INFO NCCL_IB_HCA set to ...`): each NCCL header after a line's first starts a line
# of its own, so that no message reads the next one as its value.
_HEADER_ANYWHERE = Pattern(r"(?:[\w.-]+:\d+:\d+ )?\[\d+\] NCCL (?:INFO|WARN) ")


def _numbered_lines(source: LogStream) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(source.open_lines(), 1):
        starts = [m.start() for m in _HEADER_ANYWHERE.finditer(raw)] if "] NCCL " in raw else []
        if len(starts) < 2:
            yield number, raw
            continue
        for start, end in zip([0, *starts[1:]], [*starts[1:], len(raw)], strict=True):
            yield number, raw[start:end].rstrip()


def _wrapped_watchdog(text: str) -> bool:
    return text.endswith(_WRAPPED_TORCH) or (
        "WorkNCCL(" in text and text.endswith(")") and " ran for " not in text
    )


def _stream(source: LogStream) -> Iterator[Event]:
    attempt = 0 if source.name.endswith(PREVIOUS) else 1
    once: set[tuple[ProcessKey, str]] = set()
    file_rank = _rank_in_name(source.name)
    lines = _numbered_lines(source)
    ahead: list = []  # lines read ahead for a wrapped message and not part of it
    known: dict[str, tuple] = {}  # what a cleaned line says, for lines that repeat
    while True:
        if ahead:
            number, line = ahead.pop(0)
        else:
            step = next(lines, None)
            if step is None:
                return
            number, line = step[0], clean(step[1])
        text = line.text
        if not text.strip():
            continue
        read = known.get(text)
        if read is None:
            if len(known) >= _KNOWN_LINES:
                known.clear()
            header = nccl_header(text)
            read = known[text] = (header, _facts(text, header))
        header, facts = read
        unread = all(kind in (ev.MENTION, ev.ERROR_LINE) for kind, _ in facts)
        if header is None and unread and _wrapped_watchdog(text.rstrip()):
            # ProcessGroupNCCL's watchdog message, wrapped by a paste or a terminal after its
            # first clause or after the work: the WorkNCCL(...) and "ran for ... milliseconds"
            # lines follow.
            following = []
            for _ in range(_WRAP_LINES):
                step = next(lines, None)
                if step is None:
                    break
                following.append((step[0], clean(step[1])))
                joined = " ".join([text.rstrip()] + [f.text.strip() for _, f in following])
                found = _facts(joined, None)
                if any(kind == ev.WATCHDOG for kind, _ in found):
                    text, facts, following = joined, found, []
                    break
            ahead += following
        if header is not None and _unread(facts):
            step = next(lines, None)
            if step is not None:
                following = clean(step[1])
                joined = None
                if following.text.strip() and nccl_header(following.text) is None:
                    joined = _rejoined(header, text, following.text)
                if joined is not None:
                    text, facts = joined
                    header = nccl_header(text)
                else:
                    ahead.append((step[0], following))
        if not ahead and any(kind in _INTERFACE_LISTS for kind, _ in facts):
            facts = _with_wrapped_interfaces(facts, lines, ahead)
        if any(marker in text for marker in _RESTART_MARKERS):
            attempt += 1
            once.clear()
        if not facts:
            continue
        process = None
        if header is not None and header.host is not None:
            process = ProcessKey(header.host, header.pid)
        # The rank a message states (`[Rank 6] Watchdog caught ...`) is the process's own;
        # a collection prefix (`srun -l`'s task, a launcher's node index) only stands in
        # for it. A communicator's rank (COMM) is not the process's when it has several.
        rank = None
        for kind, fields in facts:
            if rank is None and isinstance(fields.get("rank"), int) and kind != ev.COMM:
                rank = fields["rank"]
        if rank is None:
            rank = line.rank
            if process is not None and kind in _ONCE_PER_PROCESS:
                if (process, kind) in once:
                    attempt += 1
                    once.clear()
                once.add((process, kind))
        if rank is None and process is None:
            rank = file_rank
        if process is None and rank is not None:
            process = ProcessKey(None, None, rank)
        shown = text.strip()
        shown = shown if len(shown) <= TEXT_LIMIT else shown[:TEXT_LIMIT] + "..."
        for kind, fields in facts:
            yield Event(kind, source.name, number, shown, attempt, process, rank, fields)


def _with_wrapped_interfaces(facts, lines, ahead: list):
    """An interface list with the lines that continue it (the first other line goes back
    to `ahead`); the facts of the list's own line are shared by its repeats, so copied."""
    extra: list[tuple[str, str]] = []
    for _ in range(_WRAPPED_INTERFACES):
        step = next(lines, None)
        if step is None:
            break
        following = clean(step[1])
        found = nccl_messages.continued_interfaces(following.text)
        if not found:
            ahead.append((step[0], following))
            break
        extra += found
    if not extra:
        return facts
    return [
        (kind, {**fields, "interfaces": fields["interfaces"] + extra})
        if kind in _INTERFACE_LISTS
        else (kind, fields)
        for kind, fields in facts
    ]


def _rank_in_name(name: str) -> int | None:
    """`rank3.log`, `rank-3.txt`, `logs/rank_12`: one file per rank names its rank."""
    base = name.rsplit("/", 1)[-1].lower()
    at = base.find("rank")
    if at < 0:
        return None
    digits = base[at + 4 :].lstrip("-_.")
    number = digits[: len(digits) - len(digits.lstrip("0123456789"))]
    return int(number) if number and len(number) <= 6 else None
