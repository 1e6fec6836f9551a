"""Cluster configuration against the workloads it must serve: GPU sharing and driver
versions (GPU Operator, device plugin), SR-IOV networks and policies, the RDMA shared
device plugin's resources, and IP ranges against the pods that attach them.

Facts: NVIDIA k8s-device-plugin v0.18 `api/config/v1/replicas.go` (time-slicing and MPS
replicas keep the resource name unless renamed); NVIDIA's CUDA compatibility guide
(minimum driver per CUDA major); SR-IOV Network Operator v1.6.0 `api/v1` (SriovNetwork
resourceName and networkNamespace, SriovNetworkNodePolicy isRdma and linkType);
k8s-rdma-shared-dev-plugin v1.5.3 README (configList, resourcePrefix rdma); whereabouts
v0.9.4 `pkg/allocate` (the range's network and broadcast addresses are not handed out).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import (
    POD_KINDS,
    PodTemplate,
    dicts,
    gpu_count,
    is_int,
    mapping,
    resources,
)

from . import common

SHARED_GPU = "nvidia.com/gpu"
# Minimum driver branch for each CUDA major release (minor version compatibility).
CUDA_MINIMUM_DRIVER = {11: 450, 12: 525, 13: 580}
_CUDA_TAG = re.compile(r"cuda[-_]?(\d{2})\.(\d)", re.IGNORECASE)
_CU_TAG = re.compile(r"(?<![a-z])cu(1[1-3])(\d)(?!\d)")
SRIOV_NETWORKS = {"SriovNetwork": "eth", "SriovIBNetwork": "ib"}
RDMA_PREFIX = "rdma"


def _device_plugin_configs(ctx: Context) -> list[tuple[Document, str, dict[str, Any]]]:
    """(ConfigMap, key, parsed config) of every device-plugin config in the render."""
    out = []
    for doc in ctx.of_kind("ConfigMap"):
        for key, text in mapping(doc.obj.get("data")).items():
            if not isinstance(text, str) or "sharing" not in text:
                continue
            try:
                config = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if isinstance(config, dict) and isinstance(config.get("sharing"), dict):
                out.append((doc, str(key), config))
    return out


def _shares_gpus(config: dict[str, Any]) -> tuple[str, int, bool] | None:
    """(strategy, replicas, refuses requests above one) when nvidia.com/gpu is shared
    under its own name."""
    sharing = mapping(config.get("sharing"))
    for strategy in ("timeSlicing", "mps"):
        shared = mapping(sharing.get(strategy))
        if shared.get("renameByDefault") is True:
            continue
        for resource in dicts(shared.get("resources")):
            replicas = resource.get("replicas")
            renamed = resource.get("rename")
            if (
                resource.get("name") == SHARED_GPU
                and is_int(replicas)
                and replicas > 1
                and not renamed
            ):
                # MPS refuses requests above one whatever the setting (internal/rm/rm.go).
                refuses = strategy == "mps" or shared.get("failRequestsGreaterThanOne") is True
                return strategy, replicas, refuses
    return None


def _default_config(ctx: Context) -> tuple[str, str] | None:
    """(ConfigMap name, key) the GPU Operator's device plugin uses on nodes without a
    config label."""
    for policy in ctx.of_kind("ClusterPolicy"):
        config = mapping(mapping(mapping(policy.obj.get("spec")).get("devicePlugin")).get("config"))
        if config.get("name"):
            return str(config["name"]), str(config.get("default", ""))
    return None


def _sharing(ctx: Context) -> list[tuple[Document, str, tuple[str, int, bool], bool]]:
    default = _default_config(ctx)
    found = []
    for doc, key, config in _device_plugin_configs(ctx):
        shared = _shares_gpus(config)
        if shared is None:
            continue
        keys = [k for k in mapping(doc.obj.get("data"))]
        everywhere = (
            default is not None and default[0] == doc.name and (default[1] == key or len(keys) == 1)
        )
        found.append((doc, key, shared, everywhere))
    return found


@pod_rule(
    id="gpu-sharing-training",
    severity=WARNING,
    title="Multi-GPU training pods get whole GPUs, not time-sliced shares",
    why="A device plugin config that time-slices or shares (MPS) nvidia.com/gpu under its own "
    "name advertises each physical GPU as several nvidia.com/gpu units (k8s-device-plugin "
    "api/config/v1/replicas.go): a pod asking for 8 may get shares of fewer GPUs, its ranks "
    "share devices and NCCL fails ('Duplicate GPU detected') or crawls; under MPS, or "
    "time-slicing with failRequestsGreaterThanOne, the plugin refuses the pod outright.",
    fix="Keep sharing off on training nodes (a config only for inference nodes, selected by "
    "the nvidia.com/device-plugin.config label), or rename the shared resource "
    "(renameByDefault: true gives nvidia.com/gpu.shared).",
    applies=common.gpu_trainer,
    source=(
        "https://github.com/NVIDIA/k8s-device-plugin/blob/v0.18.2/internal/rm/rm.go#L80",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/v0.18.2/internal/rm/rm.go#L91",
    ),
    when={
        "error": "the config shares nvidia.com/gpu on every node (the ClusterPolicy's default) "
        "and the plugin refuses requests above one (MPS, or failRequestsGreaterThanOne)",
        "warning": "the shares may land on distinct GPUs, or only labelled nodes share",
    },
)
def gpu_sharing_training(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    shared = ctx.memo("gpu-sharing", lambda: _sharing(ctx))
    if not shared:
        return
    for index, container in enumerate(pod.containers):
        count = gpu_count(container)
        if SHARED_GPU not in resources(container, "limits") or count < 2:
            continue
        for doc, key, (strategy, replicas, refuses), everywhere in shared:
            effect = (
                "the plugin refuses requests above one"
                if refuses
                else f"{count} units may be shares of {-(-count // replicas)} physical GPU(s)"
            )
            yield Violation(
                f"ConfigMap {doc.name} ({key}) shares {SHARED_GPU} by {strategy} x{replicas}"
                f"{'' if everywhere else ' on the nodes labelled for it'}: {effect}",
                (*pod.container_path(index), "resources", "limits", SHARED_GPU),
                severity=ERROR if everywhere and refuses else None,
            )


def _cuda_major(image: str) -> int | None:
    tag = image.split("@")[0].rsplit("/", 1)[-1]
    found = _CUDA_TAG.search(tag)
    if found:
        return int(found.group(1))
    found = _CU_TAG.search(tag)
    return int(found.group(1)) if found else None


def _driver_branch(ctx: Context) -> tuple[int, str] | None:
    for policy in ctx.of_kind("ClusterPolicy"):
        driver = mapping(mapping(policy.obj.get("spec")).get("driver"))
        version = driver.get("version")
        if driver.get("enabled", True) is False or not isinstance(version, str):
            continue
        branch = version.split(".")[0]
        if branch.isdigit():
            return int(branch), version
    return None


@pod_rule(
    id="cuda-driver-compatible",
    severity=WARNING,
    title="Images are built for a CUDA the cluster's driver supports",
    why="A CUDA runtime needs a driver of at least its major release's branch (11.x: 450, "
    "12.x: 525, 13.x: 580; NVIDIA's CUDA compatibility guide). An image built for a newer "
    "CUDA than the ClusterPolicy's driver refuses to start ('CUDA driver version is "
    "insufficient for CUDA runtime version') on every node, unless the image ships NVIDIA's "
    "forward-compatibility libraries (cuda-compat, as NGC images do) and the GPUs are data "
    "center GPUs: the tag does not say which.",
    fix="Use an image built for the CUDA the driver supports, or raise the ClusterPolicy's "
    "driver.version.",
    applies=common.gpu_pod,
)
def cuda_driver_compatible(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    driver = ctx.memo("driver-branch", lambda: _driver_branch(ctx))
    if driver is None:
        return
    branch, version = driver
    for index, container in enumerate(pod.containers):
        major = _cuda_major(str(container.get("image", "")))
        needed = CUDA_MINIMUM_DRIVER.get(major) if major is not None else None
        if needed is not None and branch < needed:
            yield Violation(
                f"{container.get('image')} is built for CUDA {major}, which needs driver "
                f"{needed} or later; the ClusterPolicy installs {version}",
                (*pod.container_path(index), "image"),
            )


def _policies(ctx: Context) -> dict[str, list[Document]]:
    out: dict[str, list[Document]] = {}
    for policy in ctx.of_kind("SriovNetworkNodePolicy"):
        name = mapping(policy.obj.get("spec")).get("resourceName")
        if isinstance(name, str):
            out.setdefault(name, []).append(policy)
    return out


def _requested_with_gpus(ctx: Context, resource: str) -> bool:
    """A GPU pod of the render requests `<prefix>/<resource>`."""

    def requested() -> set[str]:
        names = set()
        for doc in ctx.of_kind(*POD_KINDS):
            for pod in ctx.pods(doc):
                if not pod.uses_gpus:
                    continue
                for container in pod.containers:
                    names |= {n.rsplit("/", 1)[-1] for n in resources(container, "limits")}
        return names

    return resource in ctx.memo("gpu-pod-resources", requested)


@resource_rule(
    id="sriov-network-policy",
    severity=ERROR,
    title="SR-IOV networks match a node policy of the right link type, with RDMA for training",
    why="A SriovNetwork or SriovIBNetwork makes the operator write a NAD whose "
    "resourceName is the device-plugin resource of the VFs; a name no "
    "SriovNetworkNodePolicy advertises leaves every pod Pending. InfiniBand VFs "
    "(linkType ib) need the ib-sriov CNI of a SriovIBNetwork and Ethernet VFs the sriov CNI "
    "of a SriovNetwork: the other one fails at sandbox creation. VFs of a policy without "
    "isRdma are plain netdevices: GPU pods on them find no RDMA device and NCCL uses TCP "
    "(SR-IOV Network Operator v1.6.0 api/v1).",
    fix="Use the resourceName of a node policy, the network kind that matches its linkType, "
    "and isRdma: true on policies whose VFs carry NCCL traffic.",
    kinds=("SriovNetwork", "SriovIBNetwork"),
    source="https://github.com/k8snetworkplumbingwg/sriov-network-operator/blob/v1.6.0/bindata/manifests/cni-config/sriov/sriov-cni-config.yaml#L7",
    when={
        "error": "no SriovNetworkNodePolicy of the render advertises the network's resourceName",
        "warning": "the policy's linkType needs the other network kind, or has no isRdma",
    },
)
def sriov_network_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    policies = ctx.memo("sriov-policies", lambda: _policies(ctx))
    if not policies:
        return
    name = mapping(doc.obj.get("spec")).get("resourceName")
    at = ("spec", "resourceName")
    matching = policies.get(str(name), [])
    if not matching:
        yield Violation(
            f"no SriovNetworkNodePolicy advertises resource {name!r} "
            f"({', '.join(sorted(policies))})",
            at,
        )
        return
    for policy in matching:
        spec = mapping(policy.obj.get("spec"))
        link = str(spec.get("linkType", "eth")).lower()
        if link != SRIOV_NETWORKS[doc.kind]:
            wanted = "SriovIBNetwork" if link == "ib" else "SriovNetwork"
            yield Violation(
                f"policy {policy.name} has linkType {link}: its VFs need a {wanted}",
                at,
                severity=WARNING,
            )
        elif (
            link == "eth"
            and spec.get("isRdma") is not True
            and spec.get("deviceType", "netdevice") == "netdevice"
        ) and _requested_with_gpus(ctx, str(name)):
            yield Violation(
                f"policy {policy.name} has no isRdma: GPU pods get VFs without RDMA devices "
                "and NCCL falls back to TCP",
                at,
                severity=WARNING,
            )


def _shared_rdma_resources(ctx: Context) -> set[str] | None:
    found: set[str] = set()
    seen = False
    texts: list[Any] = []
    for policy in ctx.of_kind("NicClusterPolicy"):
        plugin = mapping(mapping(policy.obj.get("spec")).get("rdmaSharedDevicePlugin"))
        texts.append(plugin.get("config"))
    for doc in ctx.of_kind("ConfigMap"):
        text = mapping(doc.obj.get("data")).get("config.json")
        if isinstance(text, str) and "configList" in text:
            texts.append(text)
    for text in texts:
        if not isinstance(text, str):
            continue
        try:
            config = json.loads(text)
        except json.JSONDecodeError:
            continue
        for entry in dicts(mapping(config).get("configList")):
            name = entry.get("resourceName")
            if isinstance(name, str):
                seen = True
                found.add(f"{entry.get('resourcePrefix') or RDMA_PREFIX}/{name}")
    return found if seen else None


@pod_rule(
    id="rdma-shared-resource-defined",
    severity=ERROR,
    title="Pods request RDMA shared devices the device plugin defines",
    why="The RDMA shared device plugin advertises one resource per configList entry, "
    "<resourcePrefix>/<resourceName> with the prefix rdma unless set (k8s-rdma-shared-dev-"
    "plugin README; the NicClusterPolicy's rdmaSharedDevicePlugin.config). A pod asking for "
    "a name the plugin does not define stays Pending forever.",
    fix="Request a resource the plugin's configList defines, or add it there.",
    applies=common.requests_rdma,
    source="https://github.com/Mellanox/k8s-rdma-shared-dev-plugin/blob/v1.5.3/pkg/resources/resources_manager.go#L43",
)
def rdma_shared_resource_defined(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    defined = ctx.memo("rdma-shared", lambda: _shared_rdma_resources(ctx))
    if defined is None:
        return
    for index, container in enumerate(pod.containers):
        for name in resources(container, "limits"):
            if str(name).startswith(f"{RDMA_PREFIX}/") and name not in defined:
                yield Violation(
                    f"{name} is not defined by the RDMA shared device plugin "
                    f"({', '.join(sorted(defined))})",
                    (*pod.container_path(index), "resources", "limits", name),
                )


def _capacity(config: dict[str, Any]) -> int | None:
    """Addresses whereabouts can hand out for an IPv4 range (None: unknown or IPv6)."""
    ipam = mapping(config.get("ipam"))
    for plugin in dicts(config.get("plugins")):
        ipam = ipam or mapping(plugin.get("ipam"))
    if ipam.get("type") != "whereabouts":
        return None
    ranges = [ipam, *dicts(ipam.get("ipRanges"))]
    total = 0
    for item in ranges:
        text = item.get("range")
        if not isinstance(text, str):
            continue
        try:
            network = ipaddress.ip_network(
                text.split("-")[-1] if "-" in text else text, strict=False
            )
        except ValueError:
            return None
        if network.version != 4:
            return None
        first, last = int(network.network_address) + 1, int(network.broadcast_address) - 1
        start, end = item.get("range_start"), item.get("range_end")
        try:
            if isinstance(start, str):
                first = max(first, int(ipaddress.ip_address(start)))
            if isinstance(end, str):
                last = min(last, int(ipaddress.ip_address(end)))
        except ValueError:
            return None
        excluded = 0
        for exclude in item.get("exclude") or []:
            try:
                excluded += ipaddress.ip_network(str(exclude), strict=False).num_addresses
            except ValueError:
                return None
        total += max(0, last - first + 1 - excluded)
    return total or None


@resource_rule(
    id="nad-ipam-capacity",
    severity=ERROR,
    title="A training network's address range holds the pods that attach it",
    why="whereabouts hands out the addresses of the range (without its network and broadcast "
    "addresses and the excluded ones); once they are gone it fails the pod's sandbox ('Could "
    "not allocate IP in range'). A job with more attaching pods than the range holds never "
    "has all its ranks: the gang waits forever.",
    fix="Widen the range (a /24 or larger per training network), or drop exclusions.",
    kinds=("NetworkAttachmentDefinition",),
    source="https://github.com/k8snetworkplumbingwg/whereabouts/blob/v0.9.4/pkg/allocate/allocate.go#L21",
    when={
        "error": "one job attaches more pods than the range holds",
        "warning": "only all the render's jobs together attach more",
    },
)
def nad_ipam_capacity(doc: Document, ctx: Context) -> Iterator[Violation]:
    config, _ = multus.config(doc.obj)
    if config is None:
        return
    capacity = _capacity(config)
    if capacity is None:
        return
    counts = ctx.memo("nad-attachments", lambda: _attachments(ctx))
    largest, total = counts.get(id(doc), (0, 0))
    if largest > capacity:
        yield Violation(
            f"the range holds {capacity} addresses; one job attaches {largest} pods",
            ("spec", "config"),
        )
    elif total > capacity:
        yield Violation(
            f"the range holds {capacity} addresses; the jobs of this render attach {total} pods",
            ("spec", "config"),
            severity=WARNING,
        )


def _attachments(ctx: Context) -> dict[int, tuple[int, int]]:
    """id(NAD) -> (pods of the job attaching it most, pods of all jobs attaching it)."""
    out: dict[int, tuple[int, int]] = {}
    for job in ctx.of_kind(*POD_KINDS):
        per_nad: dict[int, int] = {}
        for pod in ctx.pods(job):
            for _, nad in common.attached_nads(pod, ctx):
                if nad is not None:
                    per_nad[id(nad)] = per_nad.get(id(nad), 0) + (pod.replicas or 1)
        for key, pods in per_nad.items():
            largest, total = out.get(key, (0, 0))
            out[key] = (max(largest, pods), total + pods)
    return out
