"""Events into one record per process and attempt: what each rank set up and what it hit.

A process learns its rank from the communicator spanning the most ranks (the job's
default process group); PyTorch's lines that name a rank join the NCCL process with that
rank in the same attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainops.doctor import events as ev
from trainops.doctor.events import Event, ProcessKey
from trainops.doctor.limits import MAX_ITEMS


@dataclass
class RankRecord:
    attempt: int
    rank: int | None
    nranks: int | None
    host: str | None
    pid: str | None
    sources: list[str] = field(default_factory=list)
    version: str | None = None
    init_start: bool = False
    init_complete: bool = False
    init_seconds: float | None = None
    network: str | None = None
    transport: str | None = None  # IB, RoCE, Socket, or a plugin's network name
    gdr: bool | None = None  # None: no network channel seen
    devices: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    plugin: str | None = None
    ib_missing: bool = False
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    timeouts: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list, repr=False)

    @property
    def label(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"{self.host}:{self.pid}" if self.host else "?"

    def to_dict(self) -> dict:
        return {
            "attempt": self.attempt,
            "rank": self.rank,
            "nranks": self.nranks,
            "host": self.host,
            "pid": self.pid,
            "sources": self.sources,
            "version": self.version,
            "init_start": self.init_start,
            "init_complete": self.init_complete,
            "init_seconds": self.init_seconds,
            "transport": self.transport,
            "gdr": self.gdr,
            "devices": self.devices,
            "interfaces": self.interfaces,
            "plugin": self.plugin,
            "ib_missing": self.ib_missing,
            "env": self.env,
            "warnings": self.warnings,
            "timeouts": self.timeouts,
            "errors": self.errors,
        }


def _add(items: list[str], value: str) -> None:
    if value and value not in items and len(items) < MAX_ITEMS:
        items.append(value)


class _Builder:
    def __init__(self, attempt: int, key: ProcessKey | None):
        self.record = RankRecord(attempt, None, None, key.host if key else None, None)
        self.record.pid = key.pid if key else None
        self.comms: dict[str, tuple[int, int]] = {}
        self.started: set[str] = set()
        self.completed: set[str] = set()
        self.net_channels = 0
        self.gdr_channels = 0
        self.layers: set[str] = set()
        self.gdr_disabled = False
        self.torch_rank = key.rank if key else None

    def add(self, event: Event) -> None:
        r, f = self.record, event.fields
        r.events.append(event)
        _add(r.sources, event.source)
        kind = event.kind
        if kind == ev.COMM:
            self.comms[f["comm"]] = (f["rank"], f["nranks"])
            (self.completed if f["phase"] == "COMPLETE" else self.started).add(f["comm"])
        elif kind == ev.INIT_TIME:
            r.init_seconds = max(r.init_seconds or 0.0, f["seconds"])
        elif kind == ev.NETWORK:
            r.network = f["name"]
        elif kind == ev.IB_DEVICES:
            for name, port, layer in f["devices"]:
                _add(r.devices, f"{name}:{port}" if port else name)
                self.layers.add(layer.upper())
            if f["oob"]:
                _add(r.interfaces, f["oob"])
        elif kind in (ev.SOCKET_IFS, ev.BOOTSTRAP_IFS):
            for name, _ in f["interfaces"]:
                _add(r.interfaces, name)
        elif kind == ev.IB_MISSING:
            r.ib_missing = True
        elif kind == ev.CHANNEL and f["via"].startswith("NET/"):
            self.net_channels += 1  # one per distinct path (parse keeps one of each)
            self.gdr_channels += "/GDRDMA" in f["via"]
        elif kind == ev.ENV:
            r.env[f["name"]] = f["value"]
        elif kind == ev.VERSION:
            r.version = f["version"]
        elif kind == ev.PLUGIN:
            r.plugin = f["plugin"]
        elif kind == ev.GDR_DISABLED:
            self.gdr_disabled = True
        elif kind == ev.WATCHDOG:
            r.timeouts.append({k: f[k] for k in ("seq", "op", "timeout_ms", "ran_ms")})
        elif kind == ev.NCCL_WARN:
            _add(r.warnings, f["message"])
        if kind in ev.FAILURE_KINDS and kind != ev.ERROR_TRAIL:
            _add(r.errors, event.text)

    def finish(self) -> RankRecord:
        r = self.record
        comm = (
            max(self.comms, key=lambda c: (self.comms[c][1], c in self.completed))
            if self.comms
            else None
        )
        if comm is not None:
            r.rank, r.nranks = self.comms[comm]
            r.init_start = True
            r.init_complete = comm in self.completed
        else:
            r.rank = self.torch_rank
        if r.network is not None:
            if r.network.lower().startswith("ib"):
                r.transport = "RoCE" if self.layers == {"ROCE"} else "IB"
            else:
                r.transport = r.network
        if r.transport == "Socket":
            r.gdr = None  # GPUDirect RDMA does not apply to TCP sockets
        elif self.net_channels:
            r.gdr = self.gdr_channels == self.net_channels
        elif self.gdr_disabled:
            r.gdr = False
        return r


def records(events: list[Event]) -> list[RankRecord]:
    """One record per (attempt, process); PyTorch-only ranks merge into NCCL's."""
    builders: dict[tuple[int, ProcessKey | None], _Builder] = {}
    for event in events:
        if event.kind == ev.FR_STATE:
            continue
        key = (event.attempt, event.process)
        builder = builders.get(key)
        if builder is None:
            builder = builders[key] = _Builder(event.attempt, event.process)
        builder.add(event)
    built = {key: b.finish() for key, b in builders.items()}
    by_rank = {
        (r.attempt, r.rank): r for (_, p), r in built.items() if p and p.host and r.rank is not None
    }
    result = []
    for (attempt, process), record in built.items():
        target = by_rank.get((attempt, record.rank))
        if process is not None and process.host is None and target is not None:
            target.timeouts += record.timeouts
            for item in record.errors:
                _add(target.errors, item)
            for source in record.sources:
                _add(target.sources, source)
            target.events += record.events
            continue
        result.append(record)
    # NCCL 2.2x prints its version once, without a prefix: it holds for the whole log.
    shared = {
        e.source: e.fields["version"] for e in events if e.kind == ev.VERSION and e.process is None
    }
    for record in result:
        record.version = record.version or next(
            (shared[s] for s in record.sources if s in shared), None
        )
    # A paste of NCCL lines without host:pid is still one process's view of its transport.
    result = [
        r for r in result if r.rank is not None or r.host or r.errors or r.timeouts or r.transport
    ]
    return sorted(
        result, key=lambda r: (r.attempt, r.rank is None, r.rank or 0, r.host or "", r.pid or "")
    )
