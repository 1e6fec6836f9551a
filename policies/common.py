"""Facts about pods that several rules share (no rules here)."""

from __future__ import annotations

import re
from typing import Any

from trainops import multus
from trainops.model import Document
from trainops.policy.engine import Context
from trainops.policy.pods import PodTemplate, argv, env_of, resources

RDMA_RESOURCE = re.compile(r"(^rdma/)|(rdma|roce|infiniband|_vf$|/ib[_-]|sriov)", re.IGNORECASE)
CHECKPOINT_FLAGS = (
    "--checkpoint-dir",
    "--checkpoint_dir",
    "--output_dir",
    "--output-dir",
    "--save_dir",
    "--save-dir",
    "--ckpt-dir",
    "--ckpt_dir",
)


def gpu_pod(pod: PodTemplate) -> bool:
    """Pods that request GPUs (the `applies` predicate of GPU-only pod rules)."""
    return pod.uses_gpus


def training_pod(pod: PodTemplate) -> bool:
    """Pods of a training job kind, or any pod holding GPUs."""
    return pod.training or pod.uses_gpus


# (launcher role, role whose pods run the ranks) of each kind with an MPI launcher.
MPI_ROLES = {
    "MPIJob": ("Launcher", "Worker"),
    "ClusterTrainingRuntime": ("launcher", "node"),
    "TrainingRuntime": ("launcher", "node"),
}
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


def mpi_runtime(doc: Document) -> bool:
    """A Trainer v2 runtime whose ML policy is MPI (mpirun on a launcher job)."""
    policy = (doc.obj.get("spec") or {}).get("mlPolicy")
    return isinstance(policy, dict) and isinstance(policy.get("mpi"), dict)


def mpi_roles(pod: PodTemplate) -> tuple[str, str] | None:
    """(launcher role, rank role) when the pod belongs to an MPI job: an MPIJob, a Trainer
    v2 MPI runtime, or a TrainJob resolved against one."""
    source = pod.runtime or pod.doc
    roles = MPI_ROLES.get(source.kind)
    if roles is None or (source.kind != "MPIJob" and not mpi_runtime(source)):
        return None
    return roles


def is_mpi_launcher(pod: PodTemplate) -> bool:
    roles = mpi_roles(pod)
    return roles is not None and pod.role == roles[0]


def rank_pod(pod: PodTemplate, ctx: Context) -> PodTemplate:
    """Where this pod's settings take effect: an MPI launcher's ranks run in the Workers
    (MPIJob) or the nodes (a Trainer v2 MPI runtime)."""
    roles = mpi_roles(pod)
    if roles is not None and pod.role == roles[0]:
        ranks = roles[1]
        for other in ctx.pods(pod.doc):
            if other.role == ranks:
                return other
    return pod


def pod_namespace(pod: PodTemplate) -> str | None:
    """The namespace the pod runs in; None for a ClusterTrainingRuntime, whose pods run in
    the namespace of each TrainJob that names it."""
    if pod.doc.kind == "ClusterTrainingRuntime":
        return None
    return pod.doc.namespace or "default"


def multi_node(pod: PodTemplate, ctx: Context) -> bool:
    total = sum(p.replicas or 1 for p in ctx.pods(pod.doc))
    return total > 1


def attached_nads(pod: PodTemplate, ctx: Context) -> list[tuple[multus.Attachment, Any]]:
    value = pod.annotations.get(multus.ANNOTATION)
    if not isinstance(value, str) or not value.strip():
        return []
    try:
        found = multus.attachments(value, pod_namespace(pod) or "")
    except multus.AnnotationError:
        return []
    out = []
    for attachment in found:
        # An unqualified name in a cluster-wide runtime: a NAD of that name in any namespace.
        namespace = attachment.namespace or None
        nad = ctx.find("NetworkAttachmentDefinition", attachment.name, namespace)
        out.append((attachment, nad))
    return out


def rdma_resources(container: dict[str, Any]) -> list[str]:
    names = set(resources(container, "limits")) | set(resources(container, "requests"))
    return sorted(
        n for n in names if RDMA_RESOURCE.search(n) and not n.startswith("nvidia.com/gpu")
    )


def nad_is_rdma(nad: Any) -> bool:
    if nad is None:
        return False
    annotations = nad.metadata.get("annotations") or {}
    if multus.RESOURCE_ANNOTATION in annotations:
        return True
    cni, _ = multus.config(nad.obj)
    return bool(cni) and bool(set(multus.types(cni)) & multus.RDMA_TYPES)


def on_rdma_fabric(pod: PodTemplate, ctx: Context) -> bool:
    """The pod is meant to use RDMA: an RDMA network, an RDMA profile or NCCL_IB_HCA."""
    if any(nad_is_rdma(nad) for _, nad in attached_nads(pod, ctx)):
        return True
    if ctx.profile is not None and ctx.profile.rdma and pod.uses_gpus:
        return True
    # Asking NCCL for its IB transport (an HCA list, or IB explicitly enabled) means RDMA.
    return any(
        "NCCL_IB_HCA" in env or env.get("NCCL_IB_DISABLE") == "0"
        for env in (env_of(c) for c in pod.containers)
    )


def checkpoint_dirs(container: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """(directory, path relative to the container) the trainer writes checkpoints to."""
    out = []
    for index, entry in enumerate(container.get("env") or []):
        named = isinstance(entry, dict) and entry.get("name") == "TRAINER_CHECKPOINT_DIR"
        if named and isinstance(entry.get("value"), str):
            out.append((entry["value"], ("env", index, "value")))
    words = argv(container)
    for index, word in enumerate(words):
        flag, sep, value = word.partition("=")
        if flag in CHECKPOINT_FLAGS:
            target = value if sep else (words[index + 1] if index + 1 < len(words) else "")
            if target:
                out.append((target, ("args",)))
    return out


def mount_for(container: dict[str, Any], directory: str) -> dict[str, Any] | None:
    """The volume mount holding `directory` (the longest matching mountPath)."""
    best = None
    for mount in container.get("volumeMounts") or []:
        path = str(mount.get("mountPath", "")).rstrip("/")
        holds = bool(path) and (directory == path or directory.startswith(path + "/"))
        if holds and (best is None or len(path) > len(str(best["mountPath"]).rstrip("/"))):
            best = mount
    return best
