"""NCCL and PyTorch log lines into per-process evidence.

NCCL prefixes its lines with `host:pid:tid [cudaDev] NCCL INFO|WARN`, so lines are
grouped by (host, pid) whatever the file layout: one file per rank, one per pod with
eight ranks interleaved, launcher output with its own prefixes. A process learns its
rank from its communicator lines (`comm 0x.. rank R nranks N ... - Init START` and
`- Init COMPLETE`); PyTorch's watchdog lines name their rank (`[Rank R]`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_NCCL = re.compile(
    r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$"
)
_COMM = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r".*?- Init (?P<phase>START|COMPLETE)"
)
_TIMINGS = re.compile(r"Init timings.*?rank (\d+) nranks (\d+) total ([\d.]+)")
_NETWORK = re.compile(r"^Using network (.+?)\s*$")
_NET_USING = re.compile(r"^NET/(IB|Socket) ?: Using (.*?)\s*(?:;\s*OOB (\S+))?\s*$")
_NO_IB = re.compile(r"NET/IB ?: No device found")
_BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (\S+)")
_CHANNEL = re.compile(r"^Channel \d+(?:/\d+)? : .*? via (\S+)")
_ENV = re.compile(r"^(NCCL_[A-Z0-9_]+) set (?:by environment )?to (.*?)\.?\s*$")
_VERSION = re.compile(r"NCCL version (\S+)")
_WATCHDOG = re.compile(
    r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+).*?Timeout\(ms\)=(?P<timeout>\d+)\) "
    r"ran for (?P<ran>\d+) milliseconds"
)
_TORCH_ERROR = re.compile(
    r"(NCCL error|ncclInternalError|ncclSystemError|ncclRemoteError|"
    r"unhandled system error|DistBackendError)"
)
_TORCH_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\[rank(\d+)\]")


@dataclass
class Timeout:
    seq: int
    op: str
    timeout_ms: int
    ran_ms: int


@dataclass
class ProcessEvidence:
    """What one process (or, for PyTorch-only lines, one rank) left in the logs."""

    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    sources: set[str] = field(default_factory=set)
    comms: dict[str, tuple[int, int]] = field(default_factory=dict)  # comm -> (rank, nranks)
    started: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    init_seconds: float | None = None
    version: str | None = None
    network: str | None = None
    link_layers: set[str] = field(default_factory=set)  # IB, RoCE from NET/IB device suffixes
    devices: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    ib_missing: bool = False
    net_channels: int = 0
    gdr_channels: int = 0
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    timeouts: list[Timeout] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    torch_rank: int | None = None
    lines: int = 0

    def global_comm(self) -> str | None:
        """The communicator spanning the most ranks: the job's default process group."""
        if not self.comms:
            return None
        return max(self.comms, key=lambda comm: (self.comms[comm][1], comm in self.completed))

    @property
    def rank(self) -> int | None:
        comm = self.global_comm()
        return self.comms[comm][0] if comm else self.torch_rank

    @property
    def nranks(self) -> int | None:
        comm = self.global_comm()
        return self.comms[comm][1] if comm else None


def _add_unique(items: list[str], values: Iterable[str]) -> None:
    for value in values:
        if value and value not in items:
            items.append(value)


def _interface(text: str) -> str:
    """`eth0:10.0.0.1<0>` -> `eth0`."""
    return text.split(":", 1)[0]


def parse(streams: Iterable[tuple[str, Iterable[str]]]) -> list[ProcessEvidence]:
    """Evidence per process from (source name, lines) pairs."""
    processes: dict[tuple[str, int], ProcessEvidence] = {}
    torch_ranks: dict[int, ProcessEvidence] = {}
    for source, lines in streams:
        version = None
        for line in lines:
            line = line.rstrip("\n")
            if match := _NCCL.search(line):
                key = (match["host"], int(match["pid"]))
                process = processes.setdefault(
                    key, ProcessEvidence(host=key[0], pid=key[1], cuda_dev=int(match["dev"]))
                )
                process.sources.add(source)
                process.lines += 1
                process.version = process.version or version
                _nccl_line(process, match["level"], match["msg"])
            elif match := _VERSION.search(line):
                version = match[1]
            elif match := _WATCHDOG.search(line):
                rank = int(match["rank"])
                record = torch_ranks.setdefault(rank, ProcessEvidence(torch_rank=rank))
                record.sources.add(source)
                record.timeouts.append(
                    Timeout(
                        int(match["seq"]), match["op"], int(match["timeout"]), int(match["ran"])
                    )
                )
            elif _TORCH_ERROR.search(line) and (rank_match := _TORCH_RANK.search(line)):
                rank = int(rank_match[1] or rank_match[2])
                record = torch_ranks.setdefault(rank, ProcessEvidence(torch_rank=rank))
                record.sources.add(source)
                _add_unique(record.errors, [line.strip()[:300]])
    result = list(processes.values())
    by_rank = {p.rank: p for p in result if p.rank is not None}
    for rank, record in torch_ranks.items():
        target = by_rank.get(rank)
        if target is None:
            result.append(record)
            continue
        target.timeouts += record.timeouts
        target.sources |= record.sources
        _add_unique(target.errors, record.errors)
    return result


def _nccl_line(p: ProcessEvidence, level: str, msg: str) -> None:
    if level == "WARN":
        _add_unique(p.warnings, [msg.strip()])
        return
    if match := _COMM.search(msg):
        comm = match["comm"]
        p.comms[comm] = (int(match["rank"]), int(match["nranks"]))
        (p.started if match["phase"] == "START" else p.completed).add(comm)
    elif match := _TIMINGS.search(msg):
        p.init_seconds = max(p.init_seconds or 0.0, float(match[3]))
    elif match := _NETWORK.search(msg):
        p.network = match[1]
    elif match := _NET_USING.search(msg):
        devices = [d for d in match[2].split() if re.match(r"^\[\d+\]", d)]
        if match[1] == "IB":
            _add_unique(p.devices, devices)
            p.link_layers |= {
                layer for d in devices for layer in ("RoCE", "IB") if f"/{layer}" in d
            }
        else:
            _add_unique(p.interfaces, [_interface(d.split("]", 1)[1]) for d in devices])
        if match[3]:
            _add_unique(p.interfaces, [_interface(match[3])])
    elif _NO_IB.search(msg):
        p.ib_missing = True
    elif match := _BOOTSTRAP.search(msg):
        _add_unique(p.interfaces, [_interface(match[1])])
    elif match := _CHANNEL.search(msg):
        via = match[1]
        if via.startswith("NET/"):
            p.net_channels += 1
            p.gdr_channels += via.endswith("/GDRDMA")
    elif match := _ENV.search(msg):
        p.env[match[1]] = match[2]
