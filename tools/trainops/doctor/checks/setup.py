"""What NCCL set up on each rank, compared across ranks and with what the cluster promises:
world size, init, transport, GPUDirect RDMA, HCAs and the bootstrap interface."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterator

from trainops import nccl
from trainops.doctor import events as ev
from trainops.doctor.evidence import RankRecord
from trainops.doctor.findings import Context, Found, check, ranks_text
from trainops.model import ERROR, INFO, WARNING


def _lines(records: list[RankRecord], *kinds: str) -> list:
    """The events of those kinds on those records: a finding's evidence."""
    return [e for r in records for e in r.events if e.kind in kinds]


def _who(records: list[RankRecord]) -> str:
    ranks = [r.rank for r in records if r.rank is not None]
    words = [("rank " if len(ranks) == 1 else "ranks ") + ranks_text(ranks)] if ranks else []
    return ", ".join(words + [r.label for r in records if r.rank is None])


@check(
    "nranks-mismatch",
    ERROR,
    "All ranks agree on the world size",
    "Ranks that disagree on the number of ranks come from different launches (pods left from "
    "an earlier attempt) or from hard-coded sizes; NCCL init never completes.",
    "Delete pods left from an earlier attempt and let torchrun read the operator's sizes.",
)
def world_size(ctx: Context) -> Iterator[Found]:
    sizes = defaultdict(list)
    for r in ctx.records:
        if r.nranks is not None:
            sizes[r.nranks].append(r)
    if len(sizes) > 1:
        detail = "; ".join(f"{n} ({_who(rs)})" for n, rs in sorted(sizes.items()))
        fix = (
            "The ranks come from different launches or disagree on the job size: delete "
            "pods left from an earlier attempt, drop hard-coded --nnodes/--nproc-per-node "
            "so torchrun reads the operator's values"
        )
        if ctx.expectation.overlay:
            fix += f", and check {ctx.key('nodes')} against the run's replicas"
        yield Found(
            f"ranks disagree on the world size: {detail}",
            [next(e for e in _lines(rs, ev.COMM)) for rs in sizes.values()],
            ranks=[r.rank for r in ctx.records if r.rank is not None],
            fix=fix + ".",
        )


@check(
    "missing-ranks",
    INFO,
    "Every rank's NCCL output is in the logs",
    "A rank with no NCCL communicator either never reached init or its log was not collected.",
    "Collect those pods' logs (all replicas, and --previous after a restart); if they are "
    "there, those ranks never reached NCCL init: check that their pods were scheduled and "
    "started.",
    explains=False,
)
def missing_ranks(ctx: Context) -> Iterator[Found]:
    sizes = [r.nranks for r in ctx.records if r.nranks is not None]
    if not sizes:
        return
    expected = max(sizes)
    seen = {r.rank for r in ctx.records if r.rank is not None and r.nranks == expected}
    missing = sorted(set(range(expected)) - seen)
    if missing:
        yield Found(
            f"no NCCL communicator for rank{'s' if len(missing) > 1 else ''} "
            f"{ranks_text(missing)} of {expected}",
            ranks=missing,
        )


@check(
    "init-incomplete",
    ERROR,
    "Every rank completes NCCL init",
    "NCCL init waits for every rank; a rank that started it and never completed it is stuck "
    "connecting to its peers.",
    "Check that all pods started, that the bootstrap interface routes between them and that "
    "no firewall blocks the ports.",
    explains=False,
)
def init_incomplete(ctx: Context) -> Iterator[Found]:
    stuck = [r for r in ctx.records if r.init_start and not r.init_complete]
    if not stuck:
        return
    done = [r for r in ctx.records if r.init_complete]
    echoed = [r.env["NCCL_SOCKET_IFNAME"] for r in ctx.records if "NCCL_SOCKET_IFNAME" in r.env]
    ifname = ctx.expectation.env.get("NCCL_SOCKET_IFNAME") or (echoed[0] if echoed else None)
    fix = (
        "NCCL init waits for every rank: check that all pods started, that the bootstrap "
        "interface routes between them"
        + (f" (NCCL_SOCKET_IFNAME={ifname})" if ifname else "")
        + ", and that no firewall blocks the ports"
    )
    if ctx.expectation.overlay:
        fix += f"; the training network comes from {ctx.key('network')} and {ctx.key('ipRange')}"
    if done:
        message = f"{_who(stuck)} started NCCL init but never completed it while {_who(done)} did"
        severity = ERROR
    else:
        message = (
            f"{_who(stuck)} started NCCL init and no rank logged its completion (init hangs, "
            "or the logs end before it completes)"
        )
        severity = INFO
    yield Found(
        message,
        ranks=[r.rank for r in stuck if r.rank is not None],
        fix=fix + ".",
        severity=severity,
    )


@check(
    "init-straggler",
    WARNING,
    "No rank takes much longer than the others to initialise NCCL",
    "One slow rank delays every rank's init and often points at a sick node.",
    "Look at those ranks' nodes: CPU pressure, a slow or flapping NIC, or topology detection "
    "trouble.",
    explains=False,
)
def init_straggler(ctx: Context) -> Iterator[Found]:
    timed = [r for r in ctx.records if r.init_seconds is not None]
    if len(timed) < 3:
        return
    median = statistics.median(r.init_seconds for r in timed)
    slow = [r for r in timed if r.init_seconds > max(2 * median, median + 5.0)]
    if slow:
        detail = ", ".join(f"{r.label} {r.init_seconds:.1f}s" for r in slow)
        yield Found(
            f"NCCL init took much longer on {detail} (median {median:.1f}s)",
            ranks=[r.rank for r in slow if r.rank is not None],
        )


@check(
    "socket-fallback",
    ERROR,
    "Ranks use RDMA when the cluster has it",
    "A rank that falls back to TCP sockets slows every collective to its speed.",
    "Those pods need the RDMA device resource and the IPC_LOCK capability, NCCL_IB_HCA must "
    "name devices they see, and the image needs libibverbs.",
)
def socket_fallback(ctx: Context) -> Iterator[Found]:
    e = ctx.expectation
    socket = [r for r in ctx.records if r.transport == "Socket"]
    rdma = [r for r in ctx.records if r.transport in ("IB", "RoCE")]
    # NCCL_IB_HCA chooses among RDMA devices: a job that sets it means to use them, whatever
    # the cluster's profile says (a slower job, not a failed one: a warning).
    hca = [v for v in ctx.of(ev.ENV) if v.fields["name"] == "NCCL_IB_HCA" and v.fields["value"]]
    if socket and not rdma and e.transport != "ib" and hca:
        missing = any(r.ib_missing for r in socket)
        named = any(r.rank is not None or r.host for r in socket)
        yield Found(
            f"{_who(socket) if named else 'NCCL'} fell back to TCP sockets"
            + (" (NET/IB: no device found)" if missing else "")
            + f" although NCCL_IB_HCA={hca[0].fields['value']} asks for RDMA devices: NCCL "
            "saw none in the container, and every collective runs at TCP speed",
            _lines(socket, ev.IB_MISSING, ev.IB_OPEN, ev.NETWORK) + hca[:1],
            ranks=[r.rank for r in socket if r.rank is not None],
            severity=WARNING,
            fix="Make the RDMA devices visible in the pod: request the RDMA device resource "
            "(the RDMA shared or SR-IOV device plugin's) and the IPC_LOCK capability, check "
            "that the node's IB/RoCE driver stack is loaded and that ibv_devices lists the "
            "devices inside the container, and that the image has libibverbs.",
        )
        return
    if socket and (rdma or e.transport == "ib"):
        why = " (NET/IB: no device found)" if any(r.ib_missing for r in socket) else ""
        context = f" while {_who(rdma)} use {rdma[0].transport}" if rdma else ""
        fix = None
        if e.overlay:
            fix = (
                f"Check {ctx.device_keys()}: the resource must be allocatable on those "
                f"nodes and name devices the pods see; `trainops preflight {e.overlay}` "
                "checks both."
            )
        yield Found(
            f"{_who(socket)} fell back to TCP sockets{why}{context}",
            _lines(socket, ev.IB_MISSING, ev.IB_OPEN, ev.NETWORK),
            ranks=[r.rank for r in socket if r.rank is not None],
            fix=fix,
        )


@check(
    "transport-unexpected",
    WARNING,
    "The transport matches the cluster's fabric",
    "RDMA on a cluster declared TCP-only means the profile does not describe the cluster.",
    "If RDMA is intended, move the overlay to an RDMA fabric (`fabric` in cluster.yaml); "
    "otherwise set NCCL_IB_DISABLE=1.",
    explains=False,
)
def transport_unexpected(ctx: Context) -> Iterator[Found]:
    rdma = [r for r in ctx.records if r.transport in ("IB", "RoCE")]
    if ctx.expectation.transport == "socket" and rdma:
        yield Found(
            f"{_who(rdma)} use {rdma[0].transport}, but the cluster expects TCP sockets",
            ranks=[r.rank for r in rdma if r.rank is not None],
        )


@check(
    "transport-unknown",
    INFO,
    "Each rank logs the network it uses",
    "Without NCCL's 'Using network' line the transport cannot be checked.",
    "Run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET.",
    explains=False,
)
def transport_unknown(ctx: Context) -> Iterator[Found]:
    unknown = [r for r in ctx.records if r.transport is None and r.init_complete]
    if unknown and ctx.expectation.transport:
        yield Found(
            f"{_who(unknown)} logged no 'Using network' line",
            ranks=[r.rank for r in unknown if r.rank is not None],
        )


@check(
    "no-gdr",
    WARNING,
    "RDMA traffic uses GPUDirect RDMA",
    "Without GPUDirect RDMA every transfer is staged through host memory: several times "
    "slower on large messages.",
    "GPUDirect RDMA needs DMA-BUF (open GPU kernel modules, Linux 5.12 or later, CUDA 11.7 or "
    "later) or nvidia-peermem from the GPU Operator, and NCCL_NET_GDR_LEVEL no lower than the "
    "GPU-NIC distance (PHB).",
)
def no_gdr(ctx: Context) -> Iterator[Found]:
    e = ctx.expectation
    without = [r for r in ctx.records if r.transport in ("IB", "RoCE") and r.gdr is False]
    disabled = ctx.of(ev.GDR_DISABLED)
    if not without and not disabled:
        return
    fix = None
    if e.overlay:
        fix = (
            f"{ctx.key('gpudirect')} decides the path: check the ClusterPolicy it generates is "
            "ready on those nodes (DMA-BUF needs open kernel modules, peermem needs "
            "driver.rdma.enabled) and NCCL_NET_GDR_LEVEL."
        )
    severity = ERROR if e.gdr else WARNING
    if disabled:
        hcas = sorted({ev.fields["hca"] for ev in disabled})
        holders = _who([r for r in ctx.records if any(x.kind == ev.GDR_DISABLED for x in r.events)])
        yield Found(
            f"NCCL disabled GPUDirect RDMA on HCA {', '.join(hcas)} ({holders}): it found neither "
            "the nvidia-peermem (nv_peer_mem) module nor DMA-BUF support, so RDMA traffic is "
            "staged through host memory (NCCL 2.22.3 and older recognise only the old "
            "nv_peer_mem name)",
            disabled,
            fix=fix
            or (
                "Load nvidia-peermem (GPU Operator driver.rdma.enabled) or use DMA-BUF (open "
                "kernel modules); with nvidia-peermem loaded and NCCL <= 2.22.3, upgrade NCCL."
            ),
            severity=severity,
        )
        return
    yield Found(
        f"{_who(without)} use {without[0].transport} without GPUDirect RDMA "
        "(network channels lack /GDRDMA): data is staged through host memory",
        _lines(without, ev.CHANNEL),
        ranks=[r.rank for r in without if r.rank is not None],
        fix=fix,
        severity=severity,
    )


@check(
    "hca-outside-profile",
    WARNING,
    "Ranks use only the HCAs the cluster lists",
    "NCCL_IB_HCA entries are prefixes unless written with '=': mlx5_1 also selects mlx5_10.",
    "List exact devices with '=' in NCCL_IB_HCA.",
    explains=False,
)
def hca_outside(ctx: Context) -> Iterator[Found]:
    e = ctx.expectation
    for r in ctx.records:
        names = [d.split(":", 1)[0] for d in r.devices]
        hca = r.env.get("NCCL_IB_HCA") or e.env.get("NCCL_IB_HCA") or ""
        _, exclude, entries = nccl.parse_selector(hca)
        allowed = [h.split(":", 1)[0] for h in (e.hca or entries)]
        if not allowed or exclude:
            continue
        stray = [n for n in names if n not in allowed]
        if stray:
            where = ctx.key("hca") if e.overlay else f"NCCL_IB_HCA={hca}"
            yield Found(
                f"{r.label} uses {', '.join(stray)}, which is not among {', '.join(allowed)}",
                ranks=[r.rank] if r.rank is not None else [],
                fix=f"NCCL_IB_HCA entries match prefixes (mlx5_1 also matches mlx5_10..19) "
                f"unless written with '=': list exact devices in {where}.",
            )


@check(
    "interface-mismatch",
    ERROR,
    "Ranks bootstrap over the interface NCCL_SOCKET_IFNAME names",
    "A pod without the Multus interface bootstraps over another one, which usually cannot "
    "reach the other pods' training network.",
    "Check the pod's k8s.v1.cni.cncf.io/networks annotation and that the "
    "NetworkAttachmentDefinition exists in its namespace.",
)
def interface_mismatch(ctx: Context) -> Iterator[Found]:
    e = ctx.expectation
    for r in ctx.records:
        wanted = r.env.get("NCCL_SOCKET_IFNAME") or e.env.get("NCCL_SOCKET_IFNAME")
        if not wanted or not r.interfaces:
            continue
        used = r.interfaces[0]
        if nccl.selected_interfaces(wanted, [used]):
            continue
        _, exclude, _ = nccl.parse_selector(wanted)
        if exclude:
            continue
        fix = (
            f"NCCL_SOCKET_IFNAME={wanted} but the pod used {used}: the interface the Multus "
            "network should create is missing. Check the pod's k8s.v1.cni.cncf.io/networks "
            "annotation and that the NetworkAttachmentDefinition exists in its namespace"
        )
        if e.overlay:
            fix += f" ({ctx.interface_keys()})"
        yield Found(
            f"{r.label} bootstraps over {used}, not {wanted}",
            _lines([r], ev.BOOTSTRAP_IFS, ev.SOCKET_IFS)[:1],
            ranks=[r.rank] if r.rank is not None else [],
            fix=fix + ".",
        )
