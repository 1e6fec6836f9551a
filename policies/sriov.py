"""SR-IOV networks: every VF a pod requests is attached, and NCCL looks for the VFs'
device names, not the host's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from trainops import multus
from trainops.model import ERROR
from trainops.policy.engine import Context, Violation, pod_rule
from trainops.policy.pods import PodTemplate, env_index, env_of, mapping, resources

from . import common

VF_TYPES = {"sriov", "ib-sriov"}


def _vf_networks(pod: PodTemplate, ctx: Context) -> Counter[str]:
    """Device-plugin resource -> how many of the pod's attachments take a VF of it."""
    found: Counter[str] = Counter()
    for _, nad in common.attached_nads(pod, ctx):
        if nad is None:
            continue
        resource = mapping(nad.metadata.get("annotations")).get(multus.RESOURCE_ANNOTATION)
        cni, _ = multus.config(nad.obj)
        if resource and cni and set(multus.types(cni)) & VF_TYPES:
            found[str(resource)] += 1
    return found


def _count(container: dict, name: str) -> int:
    for kind in ("limits", "requests"):
        value = resources(container, kind).get(name)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


@pod_rule(
    id="sriov-vfs-attached",
    severity=ERROR,
    title="A pod attaches its SR-IOV network once for every VF it requests",
    why="The device plugin hands the pod every VF it requests, but Multus configures one VF "
    "per network attachment (the next device ID of the network's resource): a pod that "
    "requests four VFs and attaches the network once gets one rail, and three VFs sit "
    "unused and unavailable to anyone else.",
    fix="Attach the network once per VF (k8s.v1.cni.cncf.io/networks: net,net,net,net; or a "
    "NetworkAttachmentDefinition per rail), or request as many VFs as attachments "
    "(trainops: rdmaPerPod sets both).",
    applies=common.gpu_pod,
)
def vfs_attached(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    attached = _vf_networks(pod, ctx)
    for index, container in enumerate(pod.containers):
        for resource, count in attached.items():
            wanted = _count(container, resource)
            if wanted > count:
                yield Violation(
                    f"the container requests {wanted} {resource} but the pod attaches the "
                    f"network only {count} time(s): {wanted - count} VF(s) stay unconfigured",
                    (*pod.container_path(index), "resources"),
                )


@pod_rule(
    id="nccl-ib-hca-exact-vf",
    severity=ERROR,
    title="NCCL_IB_HCA does not name host devices exactly in pods with SR-IOV VFs",
    why="A pod on an SR-IOV network sees its VFs, whose RDMA devices are named after the "
    "host's numbering of VFs (mlx5_13, ...), not the PFs (mlx5_0). An exact list "
    "(NCCL_IB_HCA==mlx5_0,...) then matches no device: NCCL falls back to TCP sockets "
    "(sriov-network-device-plugin#338, nccl-tests#327).",
    fix="Leave NCCL_IB_HCA unset: with RDMA namespaces in exclusive mode the pod sees only "
    "its own VFs and NCCL uses all of them (trainops generates no NCCL_IB_HCA for SR-IOV "
    "networks).",
    applies=common.gpu_pod,
)
def hca_exact_vf(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if not _vf_networks(pod, ctx):
        return
    for index, container in enumerate(pod.containers):
        value = env_of(container).get("NCCL_IB_HCA")
        if isinstance(value, str) and value.startswith("="):
            yield Violation(
                f"NCCL_IB_HCA={value} names devices exactly, but the pod's RDMA devices are "
                "SR-IOV VFs with other names",
                (*pod.container_path(index), "env", env_index(container, "NCCL_IB_HCA")),
            )
