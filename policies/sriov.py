"""SR-IOV networks: NADs name their VF resource, every VF a pod requests is attached and
every attachment has its VF, and NCCL looks for the VFs' device names, not the host's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
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
    severity=WARNING,
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
    source="https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/transport/net_ib.cc#L749",
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


@resource_rule(
    id="nad-sriov-resource-name",
    severity=ERROR,
    source="https://github.com/k8snetworkplumbingwg/sriov-cni/blob/v2.10.0/pkg/config/config.go#L49",
    title="SR-IOV networks name the device-plugin resource their VFs come from",
    why="The SR-IOV CNI configures the VF the device plugin allocated to the pod; Multus "
    "finds it through the NAD's k8s.v1.cni.cncf.io/resourceName annotation. Without it no "
    "device reaches the CNI and every pod fails to start with 'VF pci addr is required' "
    "(sriov-network-device-plugin#258).",
    fix="Annotate the NAD with k8s.v1.cni.cncf.io/resourceName: <the resource in the device "
    "plugin's config, e.g. nvidia.com/sriov_rdma_vf>.",
    kinds=("NetworkAttachmentDefinition",),
)
def nad_resource_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    cni, _ = multus.config(doc.obj)
    kinds = set(multus.types(cni)) & VF_TYPES if cni else set()
    if kinds and not mapping(doc.metadata.get("annotations")).get(multus.RESOURCE_ANNOTATION):
        yield Violation(
            f"{'/'.join(sorted(kinds))} network without {multus.RESOURCE_ANNOTATION}",
            ("metadata", "annotations"),
        )


@pod_rule(
    id="network-device-count",
    severity=ERROR,
    source="https://github.com/k8snetworkplumbingwg/sriov-cni/blob/v2.10.0/pkg/config/config.go#L49",
    title="Pods request a VF for every SR-IOV attachment",
    why="Each attachment to an SR-IOV network takes one VF of the network's resource from the "
    "pod's requests: two attachments with one VF requested leave the second without a "
    "device, and the pod never gets past sandbox creation (the reverse of "
    "sriov-vfs-attached).",
    fix="Request as many VFs (in limits) as the pod has attachments to networks of that resource.",
    applies=common.attaches_networks,
)
def network_device_count(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    attached = _vf_networks(pod, ctx)
    at = (*pod.path[:-1], "metadata", "annotations", multus.ANNOTATION)
    for resource, count in sorted(attached.items()):
        requested = sum(_count(c, resource) for c in pod.containers)
        if 0 < requested < count:
            yield Violation(
                f"{count} attachments need {resource} but the pod requests {requested}", at
            )
        elif requested == 0 and not pod.uses_gpus:  # GPU pods: rdma-resource-missing says it
            yield Violation(f"{count} attachment(s) need {resource} but the pod requests none", at)
