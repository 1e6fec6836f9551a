"""Per-rank records and the findings across ranks.

Each finding has a rule id, a severity, a message naming the ranks and a fix. When
the cluster's overlay is known, expectations come from what the overlay renders (the
NCCL environment of its job template) and from its profile, and fixes name the
profile key to change.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from trainops.doctor.nccl_log import ProcessEvidence, Timeout
from trainops.model import ERROR, INFO, WARNING


@dataclass
class RankRecord:
    rank: int | None
    nranks: int | None
    host: str | None
    pid: int | None
    sources: list[str]
    version: str | None
    init_start: bool
    init_complete: bool
    init_seconds: float | None
    transport: str | None  # IB, RoCE, Socket, or a plugin's network name
    gdr: bool | None  # None: no network channel seen
    devices: list[str]
    interfaces: list[str]
    ib_missing: bool  # NCCL said NET/IB: No device found
    env: dict[str, str]
    warnings: list[str]
    timeouts: list[Timeout]
    errors: list[str]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["timeouts"] = [asdict(t) for t in self.timeouts]
        return data

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"{self.host}:{self.pid}"


@dataclass
class Expectation:
    """What the cluster promises; all optional."""

    transport: str | None = None  # ib | socket
    gdr: bool = False
    hca: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* the job template sets
    overlay: str | None = None
    profile: dict[str, object] = field(default_factory=dict)


@dataclass
class DoctorFinding:
    rule: str
    severity: str
    message: str
    fix: str
    ranks: list[int] = field(default_factory=list)


def _transport(p: ProcessEvidence) -> str | None:
    if p.network is None:
        return None
    if p.network.lower().startswith("ib"):
        return "RoCE" if p.link_layers == {"RoCE"} else "IB"
    return p.network


def records(processes: list[ProcessEvidence]) -> list[RankRecord]:
    result = []
    for p in processes:
        comm = p.global_comm()
        gdr = None if p.net_channels == 0 else p.gdr_channels == p.net_channels
        result.append(
            RankRecord(
                rank=p.rank,
                nranks=p.nranks,
                host=p.host,
                pid=p.pid,
                sources=sorted(p.sources),
                version=p.version,
                init_start=bool(comm in p.started if comm else p.lines),
                init_complete=bool(comm and comm in p.completed),
                init_seconds=p.init_seconds,
                transport=_transport(p),
                gdr=gdr,
                devices=p.devices,
                interfaces=p.interfaces,
                ib_missing=p.ib_missing,
                env=p.env,
                warnings=p.warnings,
                timeouts=p.timeouts,
                errors=p.errors,
            )
        )
    return sorted(result, key=lambda r: (r.rank is None, r.rank or 0, r.host or "", r.pid or 0))


def ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7, 8': runs of three or more become ranges."""
    ranks = sorted(set(ranks))
    parts, start = [], 0
    for index in range(len(ranks) + 1):
        if index < len(ranks) and (index == start or ranks[index] == ranks[index - 1] + 1):
            continue
        run = ranks[start:index]
        parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
        start = index
    return ", ".join(parts)


def _who(records_: list[RankRecord]) -> str:
    ranks = [r.rank for r in records_ if r.rank is not None]
    unknown = [r.label for r in records_ if r.rank is None]
    words = []
    if ranks:
        words.append(("rank " if len(ranks) == 1 else "ranks ") + ranks_text(ranks))
    words += unknown
    return ", ".join(words)


def _key(e: Expectation, key: str) -> str:
    value = e.profile.get(key)
    shown = f" (now {value})" if value not in (None, "", []) else ""
    return f"`{key}`{shown} in {e.overlay}/cluster.yaml"


def analyse(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    found: list[DoctorFinding] = []
    checks = (_world, _init, _transport_findings, _gdr, _devices, _interfaces, _timeouts, _warnings)
    for check in checks:
        found.extend(check(recs, e))
    return found


def _finding(
    rule: str, severity: str, message: str, fix: str, recs: list[RankRecord]
) -> DoctorFinding:
    ranks = sorted({r.rank for r in recs if r.rank is not None})
    return DoctorFinding(rule, severity, message, fix, ranks)


def _world(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    found = []
    sizes = defaultdict(list)
    for r in recs:
        if r.nranks is not None:
            sizes[r.nranks].append(r)
    if len(sizes) > 1:
        detail = "; ".join(f"{n} ({_who(rs)})" for n, rs in sorted(sizes.items()))
        fix = (
            "The ranks come from different launches or disagree on the job size: delete "
            "pods left from an earlier attempt, drop hard-coded --nnodes/--nproc-per-node "
            "so torchrun reads the operator's values"
        )
        if e.overlay:
            fix += f", and check {_key(e, 'nodes')} against the run's replicas"
        found.append(
            _finding(
                "nranks-mismatch",
                ERROR,
                f"ranks disagree on the world size: {detail}",
                fix + ".",
                recs,
            )
        )
    if sizes:
        expected = max(sizes)
        seen = {r.rank for r in recs if r.rank is not None and r.nranks == expected}
        missing = sorted(set(range(expected)) - seen)
        if missing:
            found.append(
                DoctorFinding(
                    "missing-ranks",
                    WARNING,
                    f"no NCCL communicator for ranks {ranks_text(missing)} of {expected}",
                    "Collect those pods' logs (all replicas, and --previous after a restart); if "
                    "they are there, those ranks never reached NCCL init: check that their pods "
                    "were scheduled and started.",
                    missing,
                )
            )
    return found


def _init(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    found = []
    stuck = [
        r
        for r in recs
        if r.init_start and not r.init_complete and (r.rank is not None or r.interfaces)
    ]
    if stuck:
        echoed = [r.env["NCCL_SOCKET_IFNAME"] for r in recs if "NCCL_SOCKET_IFNAME" in r.env]
        ifname = e.env.get("NCCL_SOCKET_IFNAME") or (echoed[0] if echoed else None)
        fix = (
            "NCCL init waits for every rank: check that all pods started, that the "
            "bootstrap interface routes between them"
            + (f" (NCCL_SOCKET_IFNAME={ifname})" if ifname else "")
            + ", and that no firewall blocks the ports"
        )
        if e.overlay:
            fix += (
                f"; the training network comes from {_key(e, 'network')} and {_key(e, 'ipRange')}"
            )
        done = [r for r in recs if r.init_complete]
        state = f"while {_who(done)} completed" if done else "and no rank completed"
        found.append(
            _finding(
                "init-incomplete",
                ERROR,
                f"{_who(stuck)} started NCCL init but never completed it {state}",
                fix + ".",
                stuck,
            )
        )
    timed = [r for r in recs if r.init_seconds is not None]
    if len(timed) >= 3:
        median = statistics.median(r.init_seconds for r in timed)
        slow = [r for r in timed if r.init_seconds > max(2 * median, median + 5.0)]
        if slow:
            detail = ", ".join(f"{r.label} {r.init_seconds:.1f}s" for r in slow)
            found.append(
                _finding(
                    "init-straggler",
                    WARNING,
                    f"NCCL init took much longer on {detail} (median {median:.1f}s)",
                    "Look at those ranks' nodes: CPU pressure, a slow or "
                    "flapping NIC, or topology detection trouble.",
                    slow,
                )
            )
    return found


def _transport_findings(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    found = []
    socket = [r for r in recs if r.transport == "Socket"]
    rdma = [r for r in recs if r.transport in ("IB", "RoCE")]
    if socket and (rdma or e.transport == "ib"):
        why = " (NET/IB: no device found)" if any(r.ib_missing for r in socket) else ""
        context = f" while {_who(rdma)} use {rdma[0].transport}" if rdma else ""
        fix = (
            "Those pods need the RDMA device resource and the IPC_LOCK capability, "
            "NCCL_IB_HCA must name devices they see, and the image needs libibverbs"
        )
        if e.overlay:
            fix = (
                f"Check {_key(e, 'rdmaResource')} is allocatable on those nodes and "
                f"{_key(e, 'hca')} names devices the pods see; "
                f"`trainops preflight {e.overlay}` checks both"
            )
        found.append(
            _finding(
                "socket-fallback",
                ERROR,
                f"{_who(socket)} fell back to TCP sockets{why}{context}",
                fix + ".",
                socket,
            )
        )
    if e.transport == "socket" and rdma:
        found.append(
            _finding(
                "transport-unexpected",
                WARNING,
                f"{_who(rdma)} use {rdma[0].transport}, but the cluster expects TCP sockets",
                "If RDMA is intended, move the overlay to an RDMA fabric "
                "(`fabric` in cluster.yaml); otherwise set NCCL_IB_DISABLE=1.",
                rdma,
            )
        )
    unknown = [r for r in recs if r.transport is None and r.init_complete]
    if unknown and e.transport:
        found.append(
            _finding(
                "transport-unknown",
                INFO,
                f"{_who(unknown)} logged no 'Using network' line",
                "Run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET.",
                unknown,
            )
        )
    return found


def _gdr(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    without = [r for r in recs if r.transport in ("IB", "RoCE") and r.gdr is False]
    if not without:
        return []
    fix = (
        "GPUDirect RDMA needs DMA-BUF (open GPU kernel modules) or nvidia-peermem from the "
        "GPU Operator, and NCCL_NET_GDR_LEVEL no lower than the GPU-NIC distance (PHB)"
    )
    if e.overlay:
        fix = (
            f"{_key(e, 'gpudirect')} decides the path: check the ClusterPolicy it "
            "generates is ready on those nodes (DMA-BUF needs open kernel modules, peermem "
            "needs driver.rdma.enabled) and NCCL_NET_GDR_LEVEL"
        )
    severity = ERROR if e.gdr else WARNING
    return [
        _finding(
            "no-gdr",
            severity,
            f"{_who(without)} use {without[0].transport} without GPUDirect RDMA "
            "(network channels lack /GDRDMA): data is staged through host memory",
            fix + ".",
            without,
        )
    ]


def _devices(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    found = []
    for r in recs:
        names = [d.split("]", 1)[-1].split(":", 1)[0] for d in r.devices]
        hca = r.env.get("NCCL_IB_HCA") or e.env.get("NCCL_IB_HCA") or ""
        allowed = (
            [h.split(":", 1)[0] for h in (e.hca or hca.lstrip("=^").split(","))]
            if (e.hca or hca)
            else []
        )
        if not allowed or hca.startswith("^"):
            continue
        stray = [n for n in names if n not in allowed]
        if stray:
            where = _key(e, "hca") if e.overlay else f"NCCL_IB_HCA={hca}"
            found.append(
                _finding(
                    "hca-outside-profile",
                    WARNING,
                    f"{r.label} uses {', '.join(stray)}, which is not among {', '.join(allowed)}",
                    f"NCCL_IB_HCA entries match prefixes (mlx5_1 also matches mlx5_10..19) unless "
                    f"written with '=': list exact devices in {where}.",
                    [r],
                )
            )
    return found


def _interfaces(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    found = []
    for r in recs:
        wanted = r.env.get("NCCL_SOCKET_IFNAME") or e.env.get("NCCL_SOCKET_IFNAME")
        if not wanted or not r.interfaces or wanted.startswith("^"):
            continue
        exact = wanted.startswith("=")
        names = [n.strip() for n in wanted.lstrip("=").split(",") if n.strip()]
        used = r.interfaces[0]
        ok = used in names if exact else any(used.startswith(n) for n in names)
        if not ok:
            fix = (
                f"NCCL_SOCKET_IFNAME={wanted} but the pod used {used}: the interface the "
                "Multus network should create is missing. Check the pod's "
                "k8s.v1.cni.cncf.io/networks annotation and that the "
                "NetworkAttachmentDefinition exists in its namespace"
            )
            if e.overlay:
                fix += f" ({_key(e, 'network')}, {_key(e, 'nic')})"
            found.append(
                _finding(
                    "interface-mismatch",
                    ERROR,
                    f"{r.label} bootstraps over {used}, not {wanted}",
                    fix + ".",
                    [r],
                )
            )
    return found


def _timeouts(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    found = []
    timed = [r for r in recs if r.timeouts]
    if not timed:
        return found
    first = {r.rank: min(r.timeouts, key=lambda t: t.seq) for r in timed}
    ops = Counter((t.seq, t.op) for t in first.values())
    seconds = max(t.timeout_ms for t in first.values()) / 1000
    (seq, op), _ = ops.most_common(1)[0]
    expected = max((r.nranks for r in recs if r.nranks), default=None)
    silent = []
    if expected:
        silent = sorted(set(range(expected)) - {r for r in first if r is not None})
    suspect = ""
    if len(silent) == 1:
        suspect = (
            f"; rank {silent[0]} reported no timeout: the likely culprit (hung, crashed or behind)"
        )
    elif silent:
        suspect = (
            f"; ranks {ranks_text(silent)} reported no timeout: the likely culprits "
            "(hung, crashed or behind)"
        )
    found.append(
        _finding(
            "collective-timeout",
            ERROR,
            f"{_who(timed)} timed out after {seconds:g}s in {op} (SeqNum {seq}){suspect}",
            "Look first at the ranks that did not time out: their pods' events (OOMKilled, "
            "Evicted, Xid errors on the node), their last log lines, and their network "
            "interface. Raise the timeout only after the path is verified.",
            timed,
        )
    )
    if len({op for (_, op) in ops}) > 1 or len({s for (s, _) in ops}) > 1:
        groups = defaultdict(list)
        for r in timed:
            groups[(first[r.rank].seq, first[r.rank].op)].append(r)
        detail = "; ".join(
            f"{op} #{seq_} on {_who(rs)}" for (seq_, op), rs in sorted(groups.items())
        )
        found.append(
            _finding(
                "collective-mismatch",
                ERROR,
                f"ranks were in different collectives when they timed out: {detail}",
                "The program issued different collectives on different ranks (a code path that "
                "depends on the rank or on the data, e.g. an early exit or an uneven last "
                "batch): this is not a network problem.",
                timed,
            )
        )
    return found


def _warnings(recs: list[RankRecord], e: Expectation) -> list[DoctorFinding]:
    by_text: dict[str, list[RankRecord]] = defaultdict(list)
    for r in recs:
        for warning in r.warnings:
            by_text[warning].append(r)
    return [
        _finding(
            "nccl-warning",
            WARNING,
            f"NCCL WARN on {_who(rs)}: {text}",
            "Read the warning in context (doctor --format json lists each rank's).",
            rs,
        )
        for text, rs in by_text.items()
    ]
