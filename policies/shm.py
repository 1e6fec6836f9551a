"""/dev/shm: NCCL and DataLoader workers need far more than a container's 64 MiB."""

from __future__ import annotations

import re
from collections.abc import Iterator

from trainops.model import ERROR, WARNING
from trainops.policy import Context, Violation, needs, pod_rule, sets_any
from trainops.policy.pods import GPU_RESOURCES, PodTemplate, env_of, gpu_count, resources
from trainops.policy.posture import POSTURE, THREAT_MODEL
from trainops.profile.model import quantity_bytes

from . import commandline, common


def _shm(pod: PodTemplate) -> tuple[int, dict | None]:
    for index, container in enumerate(pod.containers):
        for mount in container.get("volumeMounts") or []:
            if str(mount.get("mountPath", "")).rstrip("/") == "/dev/shm":
                return index, pod.volume(str(mount.get("name")))
    return -1, None


@needs(*GPU_RESOURCES, "command", "args")
def shares_memory(pod: PodTemplate) -> bool:
    """Processes of one pod exchange data through /dev/shm: NCCL between two or more GPUs
    of a container, or DataLoader worker processes."""
    return pod.memo(
        "shares-memory",
        lambda: (
            (pod.gpus >= 2 and any(gpu_count(c) >= 2 for c in pod.containers))
            or (
                common.has_command(pod)
                and any(commandline.dataloader_workers(c) > 0 for c in pod.containers)
            )
        ),
    )


# Kinds and programs known to move data between a pod's GPUs with NCCL.
NCCL_KINDS = ("PyTorchJob", "TFJob", "PaddleJob", "JAXJob", "TrainJob")
NCCL_PROGRAMS = re.compile(
    r"torchrun|torch\.distributed|deepspeed|accelerate|horovod|vllm|sglang|text-generation"
    r"|trtllm|tensorrt_llm|megatron|nemo|trainer|nccl",
    re.IGNORECASE,
)


def uses_nccl(pod: PodTemplate) -> bool:
    """The pod evidently runs NCCL: a kind or launcher that does, or NCCL_* variables."""
    if pod.doc.kind in NCCL_KINDS or pod.runtime is not None:
        return True
    for container in pod.containers:
        if any(str(name).startswith("NCCL_") for name in env_of(container)):
            return True
        if any(NCCL_PROGRAMS.search(word) for word in commandline.words(container)):
            return True
        if commandline.runs(container, ("tune",)):  # torchtune's launcher runs torchrun
            return True
    return False


def _why_shared(pod: PodTemplate) -> str:
    gpus = max((gpu_count(c) for c in pod.containers), default=0)
    if gpus >= 2 and uses_nccl(pod):
        return f"{gpus} GPUs in one container share NCCL buffers there"
    if gpus >= 2:
        return f"{gpus} GPUs in one container (if their processes talk over NCCL or shared memory)"
    workers = max(commandline.dataloader_workers(c) for c in pod.containers)
    return f"{workers} DataLoader workers pass batches through it"


@pod_rule(
    id="dev-shm-missing",
    severity=ERROR,
    source=(
        # each rank's proxy maps an ops pool of MAX_OPS_PER_PEER x NCCL_MAX_LOCAL_RANKS ops
        # (tens of MiB at 2.27) in /dev/shm for a transport with proxy progress (the network)
        "https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/proxy.cc#L1328-L1336",
        "https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/include/proxy.h#L199-L208",
        "https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/misc/shmutils.cc#L87",
    ),
    title="Pods whose processes share memory mount a memory-backed /dev/shm",
    why="A container's /dev/shm defaults to 64 MiB. NCCL between the GPUs of one container "
    "creates its shared-memory segments there (each rank's proxy maps a pool of tens of MiB "
    "for its network connections, so three ranks of a multi-node job already fail to extend "
    "it) and DataLoader worker processes pass batches "
    "through it: both outgrow 64 MiB and fail (bus errors, 'failed to extend /dev/shm') "
    "while the pod looks healthy. A one-GPU pod without DataLoader workers does not need it; "
    "for a multi-GPU program not known to use NCCL the finding is a warning. "
    "hostIPC: true is not a substitute: it shares the node's IPC namespace with every other "
    "pod there.",
    fix="Mount an emptyDir with medium: Memory and a sizeLimit at /dev/shm (8Gi per GPU is a "
    "good start).",
    applies=shares_memory,
    when={
        "error": "no /dev/shm volume and the pod runs DataLoader workers, or two or more GPUs "
        "of one container under a kind or program known to use NCCL, in a job of several "
        "pods (NCCL's network connections)",
        "warning": "two or more GPUs in one container of a program not known to use NCCL or "
        "of a single-pod job, or hostIPC: true in place of a /dev/shm volume (the node's "
        "shared memory, see host-ipc)",
    },
)
def dev_shm_missing(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    if _shm(pod)[0] >= 0:
        return
    if pod.spec.get("hostIPC") is True:
        yield Violation(
            "hostIPC: true instead of a /dev/shm volume shares the node's IPC namespace",
            (*pod.path, "hostIPC"),
            severity=WARNING,
        )
    else:
        dataloader = any(commandline.dataloader_workers(c) for c in pod.containers)
        # The proxy pools are mapped for network connections: a job on one node whose
        # GPUs reach each other over P2P may fit in 64 MiB.
        certain = dataloader or (uses_nccl(pod) and common.multi_node(pod, ctx))
        yield Violation(
            f"no volume is mounted at /dev/shm (containers get 64 MiB) and {_why_shared(pod)}",
            pod.path,
            severity=None if certain else WARNING,
        )


@pod_rule(
    id="dev-shm-not-memory",
    severity=WARNING,
    title="/dev/shm is a memory-backed emptyDir with a size limit",
    why="A disk-backed emptyDir at /dev/shm puts shared memory on the node's disk (page "
    "cache, written back); a hostPath /dev/shm is the node's own tmpfs, shared with every pod "
    "that mounts it and limited by nobody; a memory-backed emptyDir without sizeLimit can "
    "grow until the node's memory runs out. Memory-backed volumes count against the "
    "container's memory limit.",
    fix="emptyDir: {medium: Memory, sizeLimit: <size>}, and a memory limit above it.",
    applies=common.mounts_volumes,
)
def dev_shm_not_memory(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    index, volume = _shm(pod)
    if index < 0 or volume is None:
        return
    name = volume.get("name")
    at = (*pod.path, "volumes", pod.volumes().index(volume))
    empty_dir = volume.get("emptyDir")
    if isinstance(volume.get("hostPath"), dict):
        yield Violation(
            f"/dev/shm volume {name!r} is the node's /dev/shm (hostPath): shared with other "
            "pods on the node, with no limit of its own",
            at,
        )
        return
    if not isinstance(empty_dir, dict):
        kind = next((k for k in volume if k != "name"), "unknown")
        yield Violation(f"/dev/shm volume {name!r} is a {kind}, not a memory-backed emptyDir", at)
        return
    if empty_dir.get("medium") != "Memory":
        yield Violation(f"/dev/shm volume {name!r} is disk-backed (no medium: Memory)", at)
    size = empty_dir.get("sizeLimit")
    if size is None:
        yield Violation(f"/dev/shm volume {name!r} has no sizeLimit", at)
        return
    container = pod.containers[index]
    limit = resources(container, "limits").get("memory")
    try:
        too_big = limit is not None and quantity_bytes(str(size)) >= quantity_bytes(str(limit))
    except ValueError:
        too_big = False
    if too_big:
        yield Violation(
            f"/dev/shm sizeLimit {size} is not below the container's memory limit {limit}: "
            "filling it gets the pod OOM-killed",
            (*at, "emptyDir", "sizeLimit"),
        )


@pod_rule(
    id="host-ipc",
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    title="Pods do not share the node's IPC namespace",
    why="hostIPC: true exposes the shared memory and semaphores of every process on the node; "
    "a training pod wanting a big /dev/shm needs a memory-backed emptyDir instead.",
    fix="Remove hostIPC and mount a memory-backed emptyDir at /dev/shm; if a node agent truly "
    "needs it, exempt it in policies/config.yaml with a reason.",
    applies=sets_any("hostIPC"),
    security=True,
)
def host_ipc(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.spec.get("hostIPC") is True and common.training_pod(pod) and _shm(pod)[0] >= 0:
        yield Violation("hostIPC: true alongside a /dev/shm volume", (*pod.path, "hostIPC"))
    elif pod.spec.get("hostIPC") is True:
        yield Violation("hostIPC: true", (*pod.path, "hostIPC"))
