"""/dev/shm: NCCL and DataLoader workers need far more than a container's 64 MiB."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, WARNING
from trainops.policy.engine import Context, Violation, pod_rule
from trainops.policy.pods import PodTemplate, resources
from trainops.profile.model import quantity_bytes

from . import common


def _shm(pod: PodTemplate) -> tuple[int, dict | None]:
    for index, container in enumerate(pod.containers):
        for mount in container.get("volumeMounts") or []:
            if str(mount.get("mountPath", "")).rstrip("/") == "/dev/shm":
                return index, pod.volume(str(mount.get("name")))
    return -1, None


@pod_rule(
    id="dev-shm-missing",
    severity=ERROR,
    title="GPU training pods mount a memory-backed /dev/shm",
    why="A container's /dev/shm defaults to 64 MiB. NCCL's shared-memory transport and "
    "DataLoader workers outgrow it and fail with bus errors or fall back to slower paths, "
    "while the pod looks healthy. hostIPC: true is not a substitute: it shares the node's "
    "IPC namespace with every other pod there.",
    fix="Mount an emptyDir with medium: Memory and a sizeLimit at /dev/shm (8Gi per GPU is a "
    "good start).",
    applies=common.gpu_pod,
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
        )
    else:
        yield Violation("no volume is mounted at /dev/shm (containers get 64 MiB)", pod.path)


@pod_rule(
    id="dev-shm-not-memory",
    severity=ERROR,
    title="/dev/shm is a memory-backed emptyDir with a size limit",
    why="A /dev/shm on a disk-backed emptyDir or a hostPath is not shared memory; without "
    "sizeLimit a memory-backed one can grow until the node's memory runs out. Memory-backed "
    "volumes count against the container's memory limit.",
    fix="emptyDir: {medium: Memory, sizeLimit: <size>}, and a memory limit above it.",
)
def dev_shm_not_memory(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    index, volume = _shm(pod)
    if index < 0 or volume is None:
        return
    name = volume.get("name")
    at = (*pod.path, "volumes", pod.volumes().index(volume))
    empty_dir = volume.get("emptyDir")
    if not isinstance(empty_dir, dict):
        kind = next((k for k in volume if k != "name"), "unknown")
        yield Violation(f"/dev/shm volume {name!r} is a {kind}, not a memory-backed emptyDir", at)
        return
    if empty_dir.get("medium") != "Memory":
        yield Violation(f"/dev/shm volume {name!r} is disk-backed (no medium: Memory)", at)
    size = empty_dir.get("sizeLimit")
    if size is None:
        yield Violation(f"/dev/shm volume {name!r} has no sizeLimit", at, severity=WARNING)
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
            severity=WARNING,
        )


@pod_rule(
    id="host-ipc",
    severity=ERROR,
    title="Pods do not share the node's IPC namespace",
    why="hostIPC: true exposes the shared memory and semaphores of every process on the node; "
    "a training pod wanting a big /dev/shm needs a memory-backed emptyDir instead.",
    fix="Remove hostIPC and mount a memory-backed emptyDir at /dev/shm; if a node agent truly "
    "needs it, exempt it in policies/config.yaml with a reason.",
    security=True,
)
def host_ipc(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.spec.get("hostIPC") is True and common.training_pod(pod) and _shm(pod)[0] >= 0:
        yield Violation("hostIPC: true alongside a /dev/shm volume", (*pod.path, "hostIPC"))
    elif pod.spec.get("hostIPC") is True:
        yield Violation("hostIPC: true", (*pod.path, "hostIPC"))
