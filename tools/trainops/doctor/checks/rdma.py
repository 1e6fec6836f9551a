"""RDMA: what verbs errors mean, queue-pair setup (RoCE addressing, rails, HCAs that must be
excluded), memory registration limits, devices missing in the container, and network
plugins that fail or differ between nodes."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

from trainops.doctor import events as ev
from trainops.doctor.findings import Context, Found, check, who
from trainops.model import ERROR, WARNING

# ibv_wc_status (rdma-core verbs.h): value -> (name, what it means for NCCL)
COMPLETION_STATUS = {
    4: (
        "local protection error",
        "the local NIC could not access the registered buffer: GPUDirect RDMA (peermem or "
        "DMA-BUF) or memory registration is broken on this node",
    ),
    5: ("work request flushed", "the queue pair was already in error after an earlier failure"),
    9: (
        "remote invalid request",
        "the peer rejected the request: ranks disagree on protocol or NCCL version",
    ),
    10: (
        "remote access error",
        "the peer could not access its buffer: its memory registration or GPUDirect RDMA failed",
    ),
    11: ("remote operation error", "the peer's NIC failed the operation"),
    12: (
        "transport retry counter exceeded",
        "packets got no answer: the NICs cannot reach each other over RDMA (RoCE GID index or "
        "addressing, traffic class or PFC, NICs on different rails, an MTU that some port on "
        "the path does not carry, a link or switch port down), or, mid-run, the peer's link "
        "or node failed",
    ),
    13: (
        "receiver-not-ready retry exceeded",
        "the peer stopped posting receives: it stalled or died",
    ),
}


# Statuses whose own cause has a fix of its own, beside the check's general one.
COMPLETION_FIX = {
    # NCCL's troubleshooting guide ("PCI Access Control Services (ACS)"): ACS on the PCIe
    # bridges redirects the NIC's peer-to-peer reads of GPU memory, which then fail.
    4: "Rerun with NCCL_NET_GDR_LEVEL=0 (GPUDirect RDMA off): if the error goes away, PCIe "
    "ACS on the bridges between the NICs and GPUs breaks GPUDirect RDMA (lspci -vvv | grep "
    "ACSCtl); disable ACS (BIOS, or setpci at boot) and set the IOMMU to passthrough; "
    "otherwise check nvidia-peermem or DMA-BUF and the locked-memory limit.",
    # A packet larger than some port on the path carries is dropped without an answer, and
    # the sender retries until its retry counter runs out.
    12: "Compare the MTU along the path (ibv_devinfo's active_mtu on both NICs, the switch "
    "ports, the RoCE interface's MTU) and make it the same end to end; check the RoCE GID "
    "index (NCCL_IB_GID_INDEX), traffic class and PFC (NCCL_IB_TC), and rails "
    "(NCCL_CROSS_NIC); verify with ib_write_bw between the nodes; mid-run: cordon the "
    "peer's node and restart from the last checkpoint.",
}


@check(
    "ib-completion-error",
    ERROR,
    "RDMA work completes without error",
    "NCCL aborts when a verbs work request completes with an error status; the status says "
    "whether the fabric, the local node or the peer failed.",
    "Right after start: fix RoCE/IB addressing (NCCL_IB_GID_INDEX for RoCE v2, NCCL_IB_TC, "
    "NCCL_CROSS_NIC on rail-optimised fabrics) and verify with ib_write_bw between the "
    "nodes; mid-run: cordon the peer's node and restart from the last checkpoint.",
)
def completion(ctx: Context) -> Iterator[Found]:
    errors = ctx.of(ev.IB_COMPLETION)
    if not errors:
        return
    statuses = Counter(e.fields["status"] for e in errors)
    primary = [s for s in statuses if s != 5] or [5]
    peers = Counter(e.fields["peer"] for e in errors if e.fields["peer"])
    for status in sorted(primary):
        name, meaning = COMPLETION_STATUS.get(status, (f"status {status}", "see ibv_wc_status"))
        chosen = [e for e in errors if e.fields["status"] == status]
        peer = ""
        if peers:
            top, count = peers.most_common(1)[0]
            peer = f"; peers: {', '.join(p for p, _ in peers.most_common(3))}"
            if len(peers) > 1 and count > len(errors) / 2:
                peer += f" ({top} in {count} of {len(errors)}: suspect its node or link)"
        yield Found(
            f"RDMA completion error {status} ({name}) on {who(chosen)}: {meaning}{peer}",
            chosen,
            fix=COMPLETION_FIX.get(status),
        )


def _single_device(ctx: Context) -> str | None:
    names = {name for e in ctx.of(ev.IB_DEVICES) for name, _, _ in e.fields["devices"]}
    return next(iter(names)) if len(names) == 1 else None


@check(
    "ib-qp-connect-failed",
    ERROR,
    "RDMA queue pairs connect",
    "NCCL moves each queue pair to ready-to-receive with the peer's address; failing there "
    "means the two NICs cannot address each other.",
    "Check RoCE addressing (NCCL_IB_GID_INDEX), rails (NCCL_CROSS_NIC=0 on rail-optimised "
    "fabrics) and exclude HCAs that cannot be used (NCCL_IB_HCA=^name).",
)
def queue_pair(ctx: Context) -> Iterator[Found]:
    failed = [e for e in ctx.of(ev.IBV_CALL) if e.fields["call"] == "ibv_modify_qp"]
    by_reason = defaultdict(list)
    for event in failed:
        by_reason[event.fields["reason"] or "unknown error"].append(event)
    for reason, events in sorted(by_reason.items()):
        devices = sorted({e.fields["device"] for e in events if e.fields["device"]})
        device = ", ".join(devices) or _single_device(ctx)
        on = f" on {device}" if device else ""
        lower = reason.lower()
        if "timed out" in lower:
            meaning = (
                "the NICs cannot reach each other: a wrong RoCE GID (NCCL_IB_GID_INDEX should "
                "select the RoCE v2 address), NICs on different rails of a rail-optimised "
                "fabric (set NCCL_CROSS_NIC=0), or no route or subnet manager between them"
            )
        elif "unreachable" in lower:
            meaning = (
                "no route to the peer's GID: the RoCE addresses of the two NICs are on subnets "
                "that do not route to each other, or the GID index selects the wrong address"
            )
        elif "no such device" in lower:
            name = device or "this HCA"
            meaning = (
                f"the GID NCCL selected on {name} has no usable address in this process: "
                "NCCL_IB_GID_INDEX names a GID index that is missing or empty on this node "
                "(GID tables differ between nodes and pods; read the index from show_gids on "
                "each), or the interface behind the GID is not in the container's network "
                "namespace; an HCA that cannot be used at all is excluded with "
                f"NCCL_IB_HCA=^{device or 'name'} (NCCL_IB_DISABLE=1 on a single node)"
            )
        elif "invalid argument" in lower:
            meaning = (
                "the port or GID setup is invalid for this HCA (often an Ethernet/RoCE port "
                f"among InfiniBand ones): exclude it with NCCL_IB_HCA=^{device or 'name'}"
            )
        else:
            meaning = "the two NICs could not set up the connection"
        yield Found(f"RDMA queue-pair setup failed{on} ({reason}): {meaning}", events)


@check(
    "ib-memory-registration",
    ERROR,
    "RDMA memory can be registered",
    "RDMA needs pinned memory; a low locked-memory limit (ulimit -l) in the container makes "
    "registration and queue creation fail with 'Cannot allocate memory'.",
    "Run the container with an unlimited memlock limit (docker --ulimit memlock=-1; in "
    "Kubernetes the container runtime's default limit) and the IPC_LOCK capability.",
)
def registration(ctx: Context) -> Iterator[Found]:
    failed = [
        e
        for e in ctx.of(ev.IBV_CALL)
        if e.fields["call"].startswith(("ibv_reg_mr", "ibv_create_cq", "ibv_create_qp"))
        and "allocate memory" in e.fields["reason"]
    ] + [e for e in ctx.of(ev.OFI) if e.fields["memory"]]
    if failed:
        calls = sorted({e.fields.get("call") or "NET/OFI register" for e in failed})
        yield Found(
            f"RDMA memory registration failed on {who(failed)} ({', '.join(calls)}: cannot "
            "allocate memory): the locked-memory limit (ulimit -l) is too low",
            failed,
        )
    # NCCL registers GPU memory through DMA-BUF where it thinks the stack supports it
    # (src/misc/ibvwrap.cc: wrap_ibv_reg_dmabuf_mr; without the verbs symbol it sets errno
    # EOPNOTSUPP itself): a failure there is the kernel, rdma-core/OFED or the GPU driver
    # lacking DMA-BUF registration, and nvidia-peermem is the other path.
    dmabuf = [
        e
        for e in ctx.of(ev.IBV_CALL)
        if e.fields["call"] == "ibv_reg_dmabuf_mr" and "allocate memory" not in e.fields["reason"]
    ]
    if dmabuf:
        reasons = sorted({e.fields["reason"] for e in dmabuf if e.fields["reason"]})
        yield Found(
            f"registering GPU memory through DMA-BUF failed on {who(dmabuf)} "
            f"(ibv_reg_dmabuf_mr: {', '.join(reasons) or 'failed'}): the kernel, the RDMA "
            "driver stack (rdma-core, MLNX_OFED) or the GPU driver does not support DMA-BUF "
            "registration",
            dmabuf,
            fix="Set NCCL_DMABUF_ENABLE=0 so that NCCL registers GPU memory through "
            "nvidia-peermem instead, or upgrade to a kernel (5.12+), rdma-core/OFED and GPU "
            "driver that support DMA-BUF.",
        )


@check(
    "ib-device-unavailable",
    ERROR,
    "The RDMA devices NCCL finds can be opened",
    "An HCA listed but not openable is not passed into the container (device plugin "
    "resource, /dev/infiniband) or belongs to another pod.",
    "Request the RDMA device resource for the pod (rdmaResource in cluster.yaml) or exclude "
    "the device with NCCL_IB_HCA.",
)
def device_unavailable(ctx: Context) -> Iterator[Found]:
    failed = ctx.of(ev.IB_OPEN) + [
        e for e in ctx.of(ev.IBV_CALL) if e.fields["call"] == "ibv_open_device"
    ]
    if failed:
        devices = sorted({e.fields["device"] for e in failed if e.fields.get("device")})
        named = f" {', '.join(devices)}" if devices else ""
        fallback = " and fell back to TCP sockets" if ctx.of(ev.IB_MISSING) else ""
        fix = None
        if ctx.expectation.overlay:
            fix = (
                f"Check {ctx.device_keys()}: the resource must be requested and "
                "allocatable, and only devices the pods get may be named."
            )
        yield Found(
            f"{who(failed)} could not open RDMA device{named}{fallback}: it is not available "
            "inside the container",
            failed,
            fix=fix,
        )


@check(
    "net-plugin-failed",
    ERROR,
    "The NCCL network plugin initialises",
    "A network plugin (aws-ofi-nccl for EFA, the HPC-X RDMA plugin) that finds no usable "
    "provider leaves NCCL on TCP sockets or without a network.",
    "Give the container the plugin's devices (EFA: /dev/infiniband/uverbs* through the EFA "
    "device plugin resource) and a libfabric that matches the plugin.",
)
def plugin_failed(ctx: Context) -> Iterator[Found]:
    # A plugin message the catalog gives another cause (a memory registration, an exhausted
    # resource, a failed post) is not a missing provider: the catalog names it.
    elsewhere = {
        (e.source, e.line)
        for e in ctx.of(ev.CATALOGUED)
        if e.fields["entry"].finding not in ("net-plugin-failed", "ofi-provider-unavailable")
    }
    failed = [
        e for e in ctx.of(ev.OFI) if not e.fields["memory"] and (e.source, e.line) not in elsewhere
    ]
    broken = ctx.of(ev.PLUGIN_BROKEN)
    if broken:
        yield Found(
            f"the NCCL network plugin exists but could not be loaded on {who(broken)} "
            f"({broken[0].fields['error']}): NCCL went on with its internal transports, TCP "
            "sockets where there is no InfiniBand",
            broken,
            severity=ERROR if ctx.failed else WARNING,
            fix="Install what the plugin links against in the image (the libfabric or "
            "HPC-X release it was built for; `ldd libnccl-net.so` lists what is missing), or "
            "rebuild the plugin against the image's libraries.",
        )
    # aws-ofi-nccl asks libfabric for providers that can do what it needs and takes the
    # first; on an EFA instance that is efa, and tcp (or sockets) only when no EFA device
    # is visible to the process.
    fallback = [
        e for e in ctx.of(ev.OFI_PROVIDER) if e.fields["provider"] in ("tcp", "sockets", "udp")
    ]
    if fallback and not failed:
        provider = fallback[0].fields["provider"]
        yield Found(
            f"aws-ofi-nccl selected libfabric's {provider} provider on {who(fallback)}, not efa: "
            "no EFA device is visible to the process (the container was started without the "
            "EFA devices), so NCCL's network runs over TCP or fails",
            fallback,
            severity=ERROR if ctx.failed or not ctx.of(ev.FINISHED) else WARNING,
            fix="Pass the EFA devices into the container (docker run --device "
            "/dev/infiniband/uverbs0 ... for each, or the vpc.amazonaws.com/efa resource in the "
            "pod) and check `fi_info -p efa` inside it; FI_PROVIDER=efa makes a missing EFA "
            "fail at once instead of falling back.",
        )
    if failed:
        yield Found(
            f"the NET/OFI network plugin (aws-ofi-nccl) found no usable provider on "
            f"{who(failed)}: the EFA devices are not visible in the container (or libfabric "
            "does not match the plugin)",
            failed,
        )


@check(
    "net-plugin-mismatch",
    ERROR,
    "Every node uses the same NCCL network plugin",
    "Ranks with different network plugins (one node with the HPC-X or OFI plugin, another "
    "with NCCL's internal one) cannot talk to each other and hang.",
    "Run the same image and plugin installation (libnccl-net.so, NCCL_NET_PLUGIN, "
    "LD_LIBRARY_PATH) on every node.",
)
def plugin_mismatch(ctx: Context) -> Iterator[Found]:
    by_plugin = defaultdict(list)
    for event in ctx.of(ev.PLUGIN):
        by_plugin[event.fields["plugin"]].append(event)
    if len(by_plugin) > 1:
        parts = "; ".join(
            f"{'NCCL internal' if plugin == 'internal' else plugin} on {who(events)}"
            for plugin, events in sorted(by_plugin.items())
        )
        yield Found(
            f"nodes use different NCCL network plugins: {parts}",
            [events[0] for events in by_plugin.values()],
        )
