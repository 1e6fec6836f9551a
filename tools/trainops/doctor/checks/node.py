"""GPUs and the node they sit in: Xid events, ECC and other fatal CUDA errors, the NVSwitch
fabric manager, the driver against the CUDA in the image, two ranks on one GPU, P2P
between GPUs, /dev/shm, and NCCL's topology detection."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.doctor import catalog
from trainops.doctor import events as ev
from trainops.doctor.findings import Context, Found, check, who
from trainops.model import ERROR, WARNING
from trainops.rules import catalog as rule_catalog

DRAIN = (
    "Cordon and drain the node (kubectl cordon NODE; kubectl drain NODE "
    "--ignore-daemonsets), let the job restart from its last checkpoint on healthy nodes, "
    "and have the node reset or serviced before uncordoning it."
)

# Xid -> (meaning, the node must be drained), where the doctor decides otherwise than a plain
# reading of NVIDIA's Xid catalog (`catalog/xid.yaml`, used for every other code); application-level
# Xids (13, 31, 43, 45) usually end one process and call for draining only when they
# repeat on the same GPU.
XID = {
    13: ("graphics engine exception (usually the program)", False),
    31: ("GPU memory page fault (usually the program)", False),
    43: ("GPU stopped processing (usually the program)", False),
    45: ("preemptive cleanup after an earlier error", False),
    48: ("double-bit ECC error", True),
    61: ("internal micro-controller breakpoint", True),
    62: ("internal micro-controller halt", True),
    63: ("ECC page retirement or row remapping recorded (reset the GPU to apply)", True),
    64: ("ECC page retirement or row remapping failure", True),
    74: ("NVLink error", True),
    79: ("GPU has fallen off the bus", True),
    92: ("high single-bit ECC error rate", True),
    94: ("contained ECC error", False),
    95: ("uncontained ECC error", True),
    109: ("context switch timeout", False),
    119: ("GSP RPC timeout", True),
    120: ("GSP error", True),
    140: ("unrecovered ECC error", True),
    154: ("GPU recovery action required", True),
}


def _xid(code: int, detail: str) -> tuple[str, bool, str | None]:
    """(meaning, the node must be drained, the finding when not gpu-fault): the table above,
    else NVIDIA's Xid catalog (`catalog/xid.yaml`), else the driver's own text."""
    if code in XID:
        return (*XID[code], None)
    entry = catalog.xid(code)
    if entry is None:
        return detail or "see NVIDIA's Xid catalog", True, None
    drain = entry.severity == ERROR and entry.finding != "cuda-fatal"
    family = entry.finding if entry.finding in ("gpu-ecc", "nvswitch-fabric") else None
    return entry.meaning.rstrip("."), drain, family


@check(
    "gpu-fault",
    ERROR,
    "No GPU on the job's nodes reports a fault",
    "Xid events in the node's kernel log report GPU faults; fatal ones (a GPU fallen off the "
    "bus, double-bit ECC, NVLink errors) take the GPU away until it is reset or serviced, and "
    "every rank of the job stalls or fails with it.",
    DRAIN,
)
def gpu_fault(ctx: Context) -> Iterator[Found]:
    xids = ctx.of(ev.XID)
    fatal = [e for e in xids if _xid(e.fields["code"], e.fields["detail"])[1]]
    other = [e for e in xids if e not in fatal]
    for event in fatal:
        code = event.fields["code"]
        meaning, _, family = _xid(code, event.fields["detail"])
        yield Found(
            f"GPU {event.fields['pci']} reported Xid {code} ({meaning})", [event], rule=family
        )
    if other and not fatal:
        codes = sorted({e.fields["code"] for e in other})
        meanings = "; ".join(f"Xid {c}: {_xid(c, '')[0]}" for c in codes)
        yield Found(
            f"GPU {other[0].fields['pci']} reported {meanings or 'Xid ' + str(codes)}",
            other,
            fix="Restart the job from its last checkpoint; if the same GPU reports it again, "
            + DRAIN[0].lower()
            + DRAIN[1:],
        )
    off_bus = ctx.of(ev.OFF_BUS)
    if off_bus and not any(e.fields["code"] == 79 for e in xids):
        pci = off_bus[0].fields["pci"]
        yield Found(
            f"a GPU{' ' + pci if pci else ''} has fallen off the bus (the condition Xid 79 "
            "reports): it no longer answers the driver",
            off_bus,
        )
    failed = ctx.of(ev.GPU_INIT)
    if failed:
        yield Found(
            "the NVIDIA driver could not initialise a GPU (RmInitAdapter failed): the GPU is "
            "unusable and jobs given it fail",
            failed,
        )


@check(
    "gpu-ecc",
    ERROR,
    "GPU memory reports no uncorrectable ECC error",
    "An uncorrectable ECC error ends the CUDA context of every process on that GPU; the GPU "
    "needs a reset and, when it repeats, service.",
    DRAIN,
)
def gpu_ecc(ctx: Context) -> Iterator[Found]:
    ecc = [e for e in ctx.of(ev.CUDA_ERROR) if "ECC" in e.fields["error"].upper()]
    if ecc:
        yield Found(f"uncorrectable ECC error on {who(ecc)}: the GPU's memory failed", ecc)


# CUDA errors the catalog gives a cause (the CUDA table by the error, torch's messages by
# the line): the build, the node's software, the launch. Errors it leaves generic stay
# here; the driver, ECC and the fabric manager have checks of their own.
_GENERIC = ("cuda-fatal", "nccl-out-of-memory", "nccl-invalid-usage", "nccl-internal-error")
_OWN_CHECKS = ("cuda-driver-too-old", "gpu-ecc", "nvswitch-fabric")


# "Operation not supported" (CUDA error 801) is MIG's answer to IPC and peer access, and
# every other component's to anything it cannot do (libfabric's cuPointerSetAttribute):
# the MIG reading needs the log to show MIG.
_NEEDS_MIG = "mig-device-unsupported"


def _catalogued_cause(event, mig: bool) -> catalog.Entry | None:
    """The specific cause the catalog gives the error: by the CUDA error, by the line, or by
    the error as torch's C10_CUDA_CHECK prints it (`CUDA error: <string>`), which classifies
    the same string wherever another frame printed it (THC's `cuda runtime error (10) : ...`,
    NCCL's `Cuda failure '...'`)."""
    error = event.fields.get("error") or ""
    for entry in (
        catalog.cuda_error(error),
        catalog.lookup(event.text),
        catalog.lookup(f"CUDA error: {error}") if error else None,
    ):
        if entry is None or not entry.reported or entry.finding in _GENERIC:
            continue
        if entry.finding == _NEEDS_MIG and not mig:
            continue
        return None if entry.finding in _OWN_CHECKS else entry
    return None


@check(
    "cuda-fatal",
    ERROR,
    "No rank hits a fatal CUDA error",
    "After an illegal memory access, a launch failure or a similar error the CUDA context is "
    "unusable; NCCL and the watchdog then fail on that rank.",
    "Restart from the last checkpoint. If it repeats on the same node, read its kernel log "
    "for Xid events (`trainops doctor nccl` reads dmesg output too) and drain it; if it "
    "follows the program to any node, it is a bug in the program or a library.",
)
def cuda_fatal(ctx: Context) -> Iterator[Found]:
    errors = [
        e
        for e in ctx.of(ev.CUDA_ERROR)
        if "ECC" not in e.fields["error"].upper() and "insufficient" not in e.fields["error"]
    ]
    errors += [
        e
        for e in ctx.of(ev.CUDA_FAILURE)
        if e.fields["error"]
        in (
            "an illegal memory access was encountered",
            "unspecified launch failure",
            "out of memory",
            "initialization error",
        )
    ]
    causes: dict[catalog.Entry, list] = {}
    named = []
    mig = any("MIG" in e.text for e in ctx.events)
    for e in ctx.of(ev.CUDA_ERROR, ev.CUDA_FAILURE):
        if "ECC" in e.fields["error"].upper() or "insufficient" in e.fields["error"]:
            continue
        if _shm_peer_access(e):
            continue  # p2p-unsupported says what it means in the SHM transport
        cause = _catalogued_cause(e, mig)  # once per event: two catalog lookups
        if cause is not None:
            causes.setdefault(cause, []).append(e)
            named.append(e)
    errors = [e for e in errors if e not in named]
    rules = rule_catalog()
    for entry, events in causes.items():
        yield Found(
            f"CUDA error on {who(events)}: {events[0].fields['error']} ({entry.key}): "
            f"{entry.meaning}",
            events,
            fix=entry.fix or rules[entry.finding].fix,
            rule=entry.finding,
            severity=entry.severity,
        )
    if errors:
        kinds = sorted({e.fields["error"] for e in errors})
        fix = None
        if any("out of memory" in k for k in kinds):
            fix = (
                "GPU memory ran out: lower the batch or sequence length, or make sure no "
                "other process holds the GPU (a leftover from an earlier attempt)."
            )
        yield Found(f"CUDA error on {who(errors)}: {'; '.join(kinds)}", errors, fix=fix)


@check(
    "nvswitch-fabric",
    ERROR,
    "The NVSwitch fabric (fabric manager) is ready",
    "On NVSwitch systems (HGX/DGX) CUDA is not ready until nvidia-fabricmanager has set up "
    "the fabric, and NVLink SHARP (NVLS) buffers fail when the fabric manager restarted while "
    "GPUs were in use.",
    "Run nvidia-fabricmanager with the node (the GPU Operator's driver container starts it); "
    "after it restarts, reset the GPUs or reboot the node. NCCL_NVLS_ENABLE=0 avoids NVLS "
    "until then.",
)
def fabric(ctx: Context) -> Iterator[Found]:
    failures = ctx.of(ev.CUDA_FAILURE)
    not_ready = [
        e
        for e in failures + ctx.of(ev.CUDA_ERROR)
        if "system not yet initialized" in e.fields["error"] or e.fields.get("code") == 802
    ]
    nvls = [e for e in failures if "nvls" in (e.fields.get("location") or "")]
    if not_ready:
        yield Found(
            f"CUDA on {who(not_ready)} reports 'system not yet initialized': on an NVSwitch "
            "system this means nvidia-fabricmanager is not running",
            not_ready,
        )
    if nvls:
        errors = sorted({e.fields["error"] for e in nvls})
        yield Found(
            f"NVLink SHARP (NVLS) setup failed in CUDA on {who(nvls)} ({', '.join(errors)}): "
            "on NVSwitch systems this follows a fabric manager restart while GPUs were in use",
            nvls,
        )


@check(
    "cuda-driver-too-old",
    ERROR,
    "The node's driver supports the CUDA in the image",
    "A CUDA runtime newer than the node's driver refuses to start.",
    "Use an image built for the CUDA version the nodes' driver supports, upgrade the driver "
    "(GPU Operator driver version), or add the CUDA forward-compatibility package on "
    "data-centre GPUs.",
)
def driver_too_old(ctx: Context) -> Iterator[Found]:
    old = [
        e
        for e in ctx.of(ev.CUDA_FAILURE, ev.CUDA_ERROR)
        if "driver version is insufficient" in e.fields["error"]
    ]
    if old:
        yield Found(
            f"the NVIDIA driver on {who(old)} is older than the CUDA runtime in the image "
            "(CUDA driver version is insufficient for CUDA runtime version)",
            old,
        )


@check(
    "duplicate-gpu",
    ERROR,
    "Each rank has its own GPU",
    "NCCL refuses two ranks of one communicator on the same GPU.",
    "Select the GPU from LOCAL_RANK (torch.cuda.set_device(int(os.environ['LOCAL_RANK']))), "
    "drop hard-coded device ids, and start no more ranks per node than GPUs "
    "(--nproc-per-node, CUDA_VISIBLE_DEVICES).",
)
def duplicate_gpu(ctx: Context) -> Iterator[Found]:
    events = ctx.of(ev.DUPLICATE_GPU)
    if events:
        pairs = sorted(
            {
                f"ranks {' and '.join(map(str, e.fields['ranks']))} on device {e.fields['device']}"
                for e in events
            }
        )
        yield Found(
            f"two ranks share one GPU: {'; '.join(pairs[:3])}",
            events,
            ranks=[r for e in events for r in e.fields["ranks"]],
        )


def _shm_peer_access(event) -> bool:
    """CUDA error 217 raised inside NCCL's SHM transport (transport/shm.cc)."""
    return (
        event.kind == ev.CUDA_FAILURE
        and event.fields.get("code") == 217
        and "shm.cc" in (event.fields.get("location") or "")
    )


@check(
    "p2p-unsupported",
    ERROR,
    "GPUs that NCCL connects peer-to-peer support it",
    "Consumer GPUs, many VMs and PCIe switches with ACS/IOMMU enabled do not allow CUDA "
    "peer access; NCCL's P2P transport then fails (CUDA error 217) or hangs.",
    "Set NCCL_P2P_DISABLE=1 in every rank's environment (launchers such as Ray, mpirun and "
    "torchrun pass only what they are told to), or enable P2P: disable ACS, iommu=pt.",
)
def p2p(ctx: Context) -> Iterator[Found]:
    failed = [
        e
        for e in ctx.of(ev.CUDA_FAILURE)
        if e.fields.get("code") == 217 or "peer access is not supported" in e.fields["error"]
    ]
    # vLLM's (and SGLang's) custom all-reduce kernel, not NCCL, needs peer access: its
    # CUDACHECK in csrc/custom_all_reduce.cuh prints "Failed: Cuda error %s:%d '%s'".
    custom = [
        e
        for e in ctx.of(ev.CATALOGUED, ev.CUDA_FAILURE, ev.CUDA_ERROR)
        if "custom_all_reduce" in e.text
        and (
            "peer access" in e.text
            or (e.kind == ev.CATALOGUED and e.fields["entry"].finding == "p2p-unsupported")
        )
    ]
    if custom:
        yield Found(
            f"the custom all-reduce kernel of vLLM/SGLang (csrc/custom_all_reduce.cuh) on "
            f"{who(custom)} needs CUDA peer access between the GPUs, which they do not support",
            custom,
            fix="Turn the custom all-reduce off (vLLM: disable_custom_all_reduce=True or "
            "--disable-custom-all-reduce; SGLang: --disable-custom-all-reduce) so that "
            "all-reduce goes through NCCL, which works without peer access.",
        )
    failed = [e for e in failed if e not in custom]
    # From NCCL 2.24 the SHM transport maps its host buffers with cuMem and grants each GPU
    # access (transport/shm.cc, NCCL_CUMEM_HOST_ENABLE: default -1, on where supported);
    # between GPUs without peer access that grant fails with the same CUDA error, although
    # SHM is the transport NCCL picks for exactly those GPUs.
    shm = [e for e in failed if _shm_peer_access(e)]
    if shm:
        yield Found(
            f"NCCL's shared-memory (SHM) transport on {who(shm)} failed with CUDA error 217 "
            "(peer access is not supported): from NCCL 2.24 it allocates its host buffers "
            "with cuMem (NCCL_CUMEM_HOST_ENABLE), a path that fails between GPUs without "
            "peer access",
            shm,
            fix="Set NCCL_CUMEM_HOST_ENABLE=0 in every rank's environment (SHM then uses "
            "/dev/shm segments, so give the pod a memory-backed /dev/shm), or use an NCCL "
            "release that fixes the cuMem host path for these GPUs.",
        )
    failed = [e for e in failed if e not in shm]
    if failed:
        yield Found(
            f"CUDA peer-to-peer access is not supported between the GPUs of {who(failed)}: "
            "NCCL's P2P transport cannot be used there",
            failed,
        )
    yield from _cma_denied(ctx)


# Open MPI's shared-memory transport (vader) copies large messages between the processes of
# a node with process_vm_readv (cross-memory attach), which the kernel allows only where one
# process may ptrace the other (process_vm_readv(2): a PTRACE_MODE_ATTACH_REALCREDS check);
# in a container without CAP_SYS_PTRACE, or under Yama's ptrace_scope, it fails with EPERM
# and Open MPI prints "Read -1, expected ..., errno = 1" for every such message. The finding
# is the family of failed system calls (nccl-system-error: limits, capabilities, devices).
CMA_FIX = (
    "Run the container with --cap-add=SYS_PTRACE (a pod: securityContext.capabilities.add: "
    "[SYS_PTRACE]), or turn single-copy off (OMPI_MCA_btl_vader_single_copy_mechanism=none)."
)


def _cma_denied(ctx: Context) -> Iterator[Found]:
    denied = ctx.of(ev.CMA_DENIED)
    if not denied:
        return
    codes = sorted({e.fields["errno"] for e in denied})
    why = (
        "EPERM: the kernel lets a process read another's memory only where it may ptrace it, "
        "and the container lacks CAP_SYS_PTRACE (or Yama's ptrace_scope forbids it)"
        if codes == [1]
        else f"errno {', '.join(map(str, codes))}"
    )
    yield Found(
        f"Open MPI's shared-memory transport could not read its peers' memory on {who(denied)} "
        f"(process_vm_readv, cross-memory attach: {why})",
        denied,
        severity=ERROR if ctx.failed else WARNING,
        fix=CMA_FIX,
        rule="nccl-system-error",
    )


@check(
    "shm-exhausted",
    ERROR,
    "/dev/shm is large enough for NCCL",
    "NCCL puts intra-node buffers in /dev/shm; a container's default is 64 MiB, too small "
    "for several GPUs per pod.",
    "Mount a memory-backed emptyDir at /dev/shm with a size limit (docker run --shm-size); "
    "NCCL_SHM_DISABLE=1 is only a slower workaround.",
)
def shm(ctx: Context) -> Iterator[Found]:
    failures = ctx.of(ev.SHM_FAILURE)
    failures += [
        e for e in ctx.of(ev.CUDA_FAILURE) if "shmutils" in (e.fields.get("location") or "")
    ]
    # A worker ended by SIGBUS (exit code -7): a training process touches a page of
    # /dev/shm's tmpfs that the full tmpfs cannot back (Linux mm/shmem.c answers such a fault
    # with VM_FAULT_SIGBUS), through NCCL's segments or DataLoader batches.
    failures += [
        e
        for e in ctx.of(ev.CHILD_FAILED)
        if e.fields.get("exitcode") == -7 or e.fields.get("signal") == "SIGBUS"
    ]
    if not failures:
        return
    fix = None
    if ctx.expectation.overlay:
        fix = (
            f"Raise {ctx.key('shmSize')} (a memory-backed emptyDir at /dev/shm; keep it below "
            f"{ctx.key('memoryPerPod')}); NCCL_SHM_DISABLE=1 is only a slower workaround."
        )
    space = " (no space left on device)" if any(e.fields.get("no_space") for e in failures) else ""
    bus = [e for e in failures if e.kind == ev.CHILD_FAILED or e.fields.get("sigbus")]
    nccl = [e for e in failures if not e.fields.get("dataloader") and e not in bus]
    loader = [e for e in failures if e.fields.get("dataloader")]
    if bus and not nccl and not loader:
        yield Found(
            f"a process on {who(bus)} died of SIGBUS (bus error): in a training job this is "
            "most often a page of /dev/shm the full tmpfs could not back (NCCL's shared-memory "
            "segments, DataLoader batches): the container's /dev/shm is too small",
            bus,
            fix=fix,
        )
    if nccl:
        yield Found(
            f"NCCL could not create its shared-memory segment in /dev/shm on {who(nccl)}"
            f"{space}: the container's /dev/shm is too small",
            nccl,
            fix=fix,
        )
    if loader:
        yield Found(
            f"DataLoader workers on {who(loader)} died of a bus error: the batches they pass "
            "through /dev/shm do not fit, the container's /dev/shm is too small",
            loader,
            fix=fix,
        )


@check(
    "nccl-topology-error",
    ERROR,
    "NCCL can build the node's topology",
    "NCCL reads the PCI/NVLink topology (or an XML file given by NCCL_TOPO_FILE or a network "
    "plugin); a file that does not describe the node, or an NCCL release older than the "
    "hardware, fails init.",
    "Remove a stale NCCL_TOPO_FILE (or upgrade the network plugin that installs one), and use "
    "an NCCL release that supports the GPUs and NICs.",
)
def topology(ctx: Context) -> Iterator[Found]:
    errors = ctx.of(ev.TOPOLOGY)
    if not errors:
        return
    versions = sorted(
        {
            e.fields["version"]
            for e in ctx.of(ev.VERSION, ev.TORCH_NCCL_ERROR)
            if e.fields.get("version")
        }
    )
    version = f" (NCCL {', '.join(versions)} here)" if versions else ""
    xml = [e for e in errors if e.fields["kind"] == "xml"]
    search = [e for e in errors if e.fields["kind"] == "search"]
    if xml:
        yield Found(
            f"NCCL on {who(xml)} could not read the topology XML it was given: a file set by "
            "NCCL_TOPO_FILE, or installed by a network plugin such as aws-ofi-nccl, does not "
            "describe this node",
            xml,
            fix="Unset NCCL_TOPO_FILE (or upgrade the network plugin that provides the file) "
            "so NCCL detects the topology itself.",
        )
    if search:
        yield Found(
            f"NCCL's topology detection failed on {who(search)}{version}: the NCCL in the image "
            "is probably older than this hardware",
            search,
            fix="Use an image with a newer NCCL (one released after the GPUs and NICs of this "
            "node); if NCCL_TOPO_FILE is set, check it describes this node.",
        )
