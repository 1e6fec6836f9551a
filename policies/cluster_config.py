"""Cluster configuration against the workloads it must serve: GPU sharing and driver
versions (GPU Operator, device plugin), the device plugin's configs, MIG strategies and the
node labels GPU feature discovery writes, SR-IOV networks and policies, the RDMA shared
device plugin's resources, and IP ranges against the pods that attach them.

Facts: NVIDIA k8s-device-plugin v0.18 `api/config/v1/replicas.go` (time-slicing and MPS
replicas keep the resource name unless renamed), `api/config/v1` and
`cmd/nvidia-device-plugin` (the config file the plugin refuses to load), `internal/rm/rm.go`
(only the mixed MIG strategy names nvidia.com/mig-<profile> resources), `cmd/config-manager`
(the default config a ClusterPolicy names) and `internal/lm` (the node labels GPU feature
discovery writes); GPU Operator v26.3.3 `controllers` (one ClusterPolicy served, the
config-manager's default and fallback, the MIG strategy passed on); NVIDIA's CUDA
compatibility guide (minimum driver per CUDA major); SR-IOV Network Operator v1.6.0
`api/v1` (SriovNetwork resourceName and networkNamespace, SriovNetworkNodePolicy isRdma and
linkType); k8s-rdma-shared-dev-plugin v1.5.3 README (configList, resourcePrefix rdma);
whereabouts v0.9.4 `pkg/allocate` (the range's network and broadcast addresses are not
handed out); Kueue v0.19.2 `pkg/config` (the manager's Configuration, decoded strictly and
validated at start-up: framework names, external frameworks, requeuing, fair sharing,
resources, the managed-jobs namespace selector).
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
from trainops.policy import Context, Violation, needs, pod_rule, resource_rule, sets_any
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
from .argocd_apps import chart_sources, helm_values

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
        # Nodes without a nvidia.com/device-plugin.config label get the ClusterPolicy's
        # default config, or none: the GPU Operator's config-manager falls back to an empty
        # config (FALLBACK_STRATEGIES=empty), even when the ConfigMap holds a single entry.
        everywhere = default is not None and default == (doc.name, key)
        found.append((doc, key, shared, everywhere))
    found.sort(key=lambda entry: (not (entry[3] and entry[2][2]), not entry[3]))
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
    # The config that harms most is named (shared everywhere and refusing, first); the
    # others are counted, so a pod gets one finding however many configs share.
    doc, key, (strategy, replicas, refuses), everywhere = shared[0]
    others = f"; {len(shared) - 1} more config(s) share it too" if len(shared) > 1 else ""
    for index, container in enumerate(pod.containers):
        count = gpu_count(container)
        if SHARED_GPU not in resources(container, "limits") or count < 2:
            continue
        effect = (
            "the plugin refuses requests above one"
            if refuses
            else f"{count} units may be shares of {-(-count // replicas)} physical GPU(s)"
        )
        yield Violation(
            f"ConfigMap {doc.name} ({key}) shares {SHARED_GPU} by {strategy} x{replicas}"
            f"{'' if everywhere else ' on the nodes labelled for it'}: {effect}{others}",
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
    "not allocate IP in range'). A job with more attachments than the range holds (a pod on "
    "an SR-IOV network attaches it once per VF) never has all its ranks: the gang waits "
    "forever. A run is rendered apart from the network it attaches, so its job is checked "
    "against the platform's range; what every run together may take is bounded by the "
    "cluster (the profile's ipRange must hold an address per attachment of every pod the "
    "quotas admit, and new-cluster and set refuse one that does not).",
    fix="Widen the range (a /24 or larger per training network, more on large multi-rail "
    "clusters), or drop exclusions.",
    kinds=("NetworkAttachmentDefinition", *sorted(POD_KINDS)),
    source="https://github.com/k8snetworkplumbingwg/whereabouts/blob/v0.9.4/pkg/allocate/allocate.go#L21",
    when={
        "error": "one job attaches more pods than the range holds",
        "warning": "only all the render's jobs together attach more",
    },
)
def nad_ipam_capacity(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind != "NetworkAttachmentDefinition":
        yield from _job_against_platform_ranges(doc, ctx)
        return
    capacity = _nad_capacity(doc, ctx)
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


def _nad_capacity(nad: Document, ctx: Context) -> int | None:
    def compute() -> int | None:
        config, _ = multus.config(nad.obj)
        return None if config is None else _capacity(config)

    return ctx.memo(("nad-capacity", id(nad)), compute)


def _job_against_platform_ranges(job: Document, ctx: Context) -> Iterator[Violation]:
    """A job whose network is not in its render (a run's, checked with the platform): its
    own attachments against that network's range."""
    if not ctx.has_platform:
        return
    own = ctx.memo("render-document-ids", lambda: {id(d) for d in ctx.documents})
    per_nad: dict[int, tuple[Document, int]] = {}
    for pod in ctx.pods(job):
        for _, nad in common.attached_nads(pod, ctx):
            if nad is not None and id(nad) not in own:
                count = per_nad.get(id(nad), (nad, 0))[1]
                per_nad[id(nad)] = (nad, count + (pod.replicas or 1))
    for nad, attachments in per_nad.values():
        capacity = _nad_capacity(nad, ctx)
        if capacity is not None and attachments > capacity:
            yield Violation(
                f"the job's pods attach {nad.name} ({nad.namespace or 'default'}) "
                f"{attachments} times; its range holds {capacity} addresses",
                ("metadata", "name"),
            )


def _attachments(ctx: Context) -> dict[int, tuple[int, int]]:
    """id(NAD) -> (attachments of the job attaching it most, attachments of all jobs)."""
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


# -- NVIDIA device plugin v0.18.2 configs and the GPU Operator's ClusterPolicy ---------------

DEVICE_PLUGIN = (
    "https://github.com/NVIDIA/k8s-device-plugin/blob/fb1242add205d8563f9c604b8ba239607b4083e6/"
)
GPU_OPERATOR = (
    "https://github.com/NVIDIA/gpu-operator/blob/b0a49c0e7b2e061dcd83f2bb2fe4fe960c5d0338/"
)
CONFIG_KEYS = frozenset({"version", "flags", "sharing", "resources", "imex"})
MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_ID_STRATEGIES = ("uuid", "index")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def _named_plugin_configs(ctx: Context) -> set[str]:
    """Names of the ConfigMaps the render's ClusterPolicies give the device plugin."""
    names = set()
    for policy in ctx.of_kind("ClusterPolicy"):
        plugin = mapping(mapping(policy.obj.get("spec")).get("devicePlugin"))
        name = mapping(plugin.get("config")).get("name")
        if isinstance(name, str) and name:
            names.add(name)
    return names


def _plugin_config_entries(doc: Document, ctx: Context) -> list[tuple[str, Any]]:
    """(key, parsed value) of each device plugin config in a ConfigMap: every entry of one a
    ClusterPolicy names, else entries that read as a config (version and flags or sharing,
    nothing else)."""
    named = doc.name in ctx.memo("plugin-config-names", lambda: _named_plugin_configs(ctx))
    out = []
    for key, text in mapping(doc.obj.get("data")).items():
        if not isinstance(text, str):
            continue
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            if named:
                out.append((str(key), exc))
            continue
        looks_like = (
            isinstance(config, dict)
            and "version" in config
            and ("flags" in config or "sharing" in config)
            and set(config) <= CONFIG_KEYS
        )
        if named or looks_like:
            out.append((str(key), config))
    return out


def _config_problems(config: Any) -> Iterator[str]:
    """What makes the device plugin (and GFD) refuse a config and exit."""
    if isinstance(config, yaml.YAMLError):
        yield f"is not YAML ({str(config).splitlines()[0]})"
        return
    if not isinstance(config, dict):
        yield "is not a mapping"
        return
    version = config.get("version")
    if version not in (None, "", "v1"):
        yield f"has version {version!r}: only v1 exists ('unknown version')"
    flags = mapping(config.get("flags"))
    strategy = flags.get("migStrategy")
    if strategy is not None and strategy not in MIG_STRATEGIES:
        yield f"sets migStrategy {strategy!r} (none, single or mixed)"
    plugin = mapping(flags.get("plugin"))
    id_strategy = plugin.get("deviceIDStrategy")
    if id_strategy is not None and id_strategy not in DEVICE_ID_STRATEGIES:
        yield f"sets deviceIDStrategy {id_strategy!r} (uuid or index)"
    list_strategy = plugin.get("deviceListStrategy")
    for value in list_strategy if isinstance(list_strategy, list) else [list_strategy]:
        if value is not None and value not in DEVICE_LIST_STRATEGIES:
            yield f"sets deviceListStrategy {value!r} ({', '.join(DEVICE_LIST_STRATEGIES)})"
    sharing = mapping(config.get("sharing"))
    for name in ("timeSlicing", "mps"):
        if name in sharing:
            yield from (f"sharing.{name} {p}" for p in _sharing_problems(sharing.get(name)))
    mps = mapping(sharing.get("mps"))
    if strategy == "mixed" and dicts(mps.get("resources")):
        yield "shares by MPS with migStrategy mixed, which MPS does not support"


def _sharing_problems(shared: Any) -> Iterator[str]:
    resources = mapping(shared).get("resources")
    if not isinstance(resources, list) or not resources:
        yield "has no resources"
        return
    for index, resource in enumerate(resources):
        resource = mapping(resource)
        if "name" not in resource:
            yield f"resource {index} has no name"
        replicas = resource.get("replicas")
        if "replicas" not in resource:
            yield f"resource {index} has no replicas"
        elif not is_int(replicas) or replicas < 2:
            yield f"resource {index} has replicas {replicas!r}: it must be 2 or more"
        devices = resource.get("devices", "all")
        if isinstance(devices, str) and devices != "all":
            yield f"resource {index} has devices {devices!r}: the only string allowed is all"
        elif is_int(devices) and devices <= 0:
            yield f"resource {index} has devices {devices}: a count must be above 0"


@resource_rule(
    id="device-plugin-config-invalid",
    severity=ERROR,
    title="NVIDIA device plugin configs are ones the plugin can load",
    why="The NVIDIA device plugin and GPU feature discovery read their config file (a "
    "ConfigMap entry the ClusterPolicy's devicePlugin.config names) and exit when it does not "
    "load: a version other than v1, a migStrategy other than none/single/mixed, an unknown "
    "deviceIDStrategy or deviceListStrategy, a timeSlicing or mps section without resources, "
    "a resource without a name or replicas, replicas below 2, devices other than all, a "
    "positive count or a list, or MPS with migStrategy mixed. On every node using that "
    "config no GPU is advertised and GPU pods stay Pending.",
    fix="Write version: v1, replicas of 2 or more for each shared resource, and a "
    "migStrategy of none, single or mixed (not mixed with MPS).",
    kinds=("ConfigMap",),
    source=(
        DEVICE_PLUGIN + "api/config/v1/config.go#L115-L138",
        DEVICE_PLUGIN + "api/config/v1/replicas.go#L166-L326",
        DEVICE_PLUGIN + "cmd/nvidia-device-plugin/main.go#L190-L230",
    ),
)
def device_plugin_config_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    for key, config in _plugin_config_entries(doc, ctx):
        for problem in _config_problems(config):
            yield Violation(f"device plugin config {key} {problem}", ("data", key))


@resource_rule(
    id="clusterpolicy-device-plugin-config",
    severity=ERROR,
    title="The ClusterPolicy's default device plugin config is an entry of its ConfigMap",
    why="The GPU Operator runs the device plugin's config-manager with DEFAULT_CONFIG set to "
    "devicePlugin.config.default and the fallback 'empty'. A default that is not a key of "
    "the ConfigMap fails the config-manager ('specified config ... does not exist') on every "
    "node without a nvidia.com/device-plugin.config label: the device plugin never starts "
    "there and no GPU is advertised. Without a default those nodes quietly get an empty "
    "config, even when the ConfigMap holds a single entry: its sharing or MIG settings "
    "apply only to labelled nodes.",
    fix="Set devicePlugin.config.default to one of the ConfigMap's keys.",
    kinds=("ClusterPolicy",),
    source=(
        DEVICE_PLUGIN + "cmd/config-manager/main.go#L336-L392",
        GPU_OPERATOR + "controllers/object_controls.go#L2895-L2931",
    ),
    when={
        "error": "the default names no entry of the ConfigMap",
        "warning": "no default: the GPU Operator's fallback is an empty config",
    },
)
def clusterpolicy_device_plugin_config(doc: Document, ctx: Context) -> Iterator[Violation]:
    config = mapping(mapping(mapping(doc.obj.get("spec")).get("devicePlugin")).get("config"))
    name = config.get("name")
    if not isinstance(name, str) or not name:
        return
    configmap = ctx.find("ConfigMap", name)
    if configmap is None:
        return
    keys = sorted(str(k) for k in mapping(configmap.obj.get("data")))
    default = config.get("default")
    at = ("spec", "devicePlugin", "config")
    if default and str(default) not in keys:
        yield Violation(
            f"default config {default!r} is not an entry of ConfigMap {name} "
            f"({', '.join(keys) or 'none'})",
            (*at, "default"),
        )
    elif not default and keys:
        yield Violation(
            f"no default config: nodes without a nvidia.com/device-plugin.config label get "
            f"an empty config, not {' or '.join(keys)}",
            at,
            severity=WARNING,
        )


def _mig_strategy(ctx: Context) -> tuple[str, bool] | None:
    """(MIG strategy of the render's ClusterPolicy, whether a device plugin config of the
    render may change it per node)."""
    policies = ctx.of_kind("ClusterPolicy")
    if not policies:
        return None
    spec = mapping(policies[0].obj.get("spec"))
    if mapping(spec.get("devicePlugin")).get("enabled") is False:
        return None  # another device plugin serves the GPUs
    strategy = str(mapping(spec.get("mig")).get("strategy") or "none")
    named = mapping(mapping(spec.get("devicePlugin")).get("config")).get("name")
    overridable = bool(named) and ctx.find("ConfigMap", str(named)) is None
    for doc in ctx.of_kind("ConfigMap"):
        for _, config in _plugin_config_entries(doc, ctx):
            if isinstance(config, dict) and "migStrategy" in mapping(config.get("flags")):
                overridable = True
    return strategy, overridable


@needs("resources")
def requests_mig(pod: PodTemplate) -> bool:
    """Pods with a container that asks for a MIG resource of the mixed strategy."""
    return any(str(n).startswith(MIG_RESOURCE_PREFIX) for n in pod.resource_names)


@pod_rule(
    id="mig-strategy-resources",
    severity=ERROR,
    title="Pods ask for MIG resources the ClusterPolicy's MIG strategy advertises",
    why="Only the mixed MIG strategy advertises MIG devices as nvidia.com/mig-<profile> "
    "(e.g. nvidia.com/mig-1g.10gb); under single they are nvidia.com/gpu, and under none "
    "(the device plugin's default when the ClusterPolicy sets no strategy) they are not "
    "advertised at all. A pod asking for nvidia.com/mig-* on a cluster whose ClusterPolicy "
    "says single or none stays Pending ('Insufficient nvidia.com/mig-1g.10gb'), and so does "
    "one asking for a profile that no layout of the ClusterPolicy's own MIG config "
    "(migManager.config) creates.",
    fix="Set mig.strategy: mixed in the ClusterPolicy, or ask for nvidia.com/gpu under the "
    "single strategy.",
    applies=requests_mig,
    source=(
        DEVICE_PLUGIN + "internal/rm/rm.go#L98-L125",
        DEVICE_PLUGIN + "cmd/nvidia-device-plugin/main.go#L60-L66",
        GPU_OPERATOR + "controllers/object_controls.go#L2794-L2806",
        GPU_OPERATOR + "controllers/object_controls.go#L2008-L2030",
    ),
    when={
        "error": "the ClusterPolicy's strategy is single or none and no device plugin config "
        "of the render may set another per node, or it is mixed and the render's MIG config "
        "has no layout with the profile",
        "warning": "the ClusterPolicy names a device plugin config the render does not hold, "
        "or one that sets migStrategy, so some nodes may use mixed",
    },
)
def mig_strategy_resources(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    found = ctx.memo("mig-strategy", lambda: _mig_strategy(ctx))
    if found is None:
        return
    if found[0] == "mixed":
        yield from _unconfigured_profiles(pod, ctx)
        return
    strategy, overridable = found
    for key, index, container in pod.all_containers:
        if key != "containers":
            continue
        for name in resources(container, "limits") | resources(container, "requests"):
            if str(name).startswith(MIG_RESOURCE_PREFIX):
                yield Violation(
                    f"{name} is advertised only under mig.strategy mixed; the ClusterPolicy "
                    f"uses {strategy}"
                    + (" (a device plugin config may change it per node)" if overridable else ""),
                    (*pod.container_path(index), "resources"),
                    severity=WARNING if overridable else None,
                )
                break


_MIG_CORE = re.compile(r"\d+g\.\d+gb")


def _configured_profiles(ctx: Context) -> set[str] | None:
    """The GPU instance profiles (1g.10gb, ...) some layout of the ClusterPolicy's own MIG
    config creates; None without one in the render."""
    name = ctx.memo("custom-mig-config", lambda: _custom_mig_config(ctx))
    doc = ctx.find("ConfigMap", name) if name else None
    text = mapping(doc.obj.get("data")).get(MIG_CONFIG_KEY) if doc is not None else None
    try:
        spec = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("mig-configs"), dict):
        return None
    found = set()
    for entries in spec["mig-configs"].values():
        for entry in dicts(entries):
            for profile in mapping(entry.get("mig-devices")):
                found.update(_MIG_CORE.findall(str(profile)))
    return found


def _unconfigured_profiles(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    profiles = ctx.memo("configured-mig-profiles", lambda: _configured_profiles(ctx))
    if profiles is None:
        return
    for key, index, container in pod.all_containers:
        if key != "containers":
            continue
        for name in resources(container, "limits") | resources(container, "requests"):
            core = _MIG_CORE.findall(str(name)[len(MIG_RESOURCE_PREFIX) :])
            if str(name).startswith(MIG_RESOURCE_PREFIX) and core and core[0] not in profiles:
                yield Violation(
                    f"{name}: no layout of the ClusterPolicy's MIG config creates "
                    f"{core[0]} instances ({', '.join(sorted(profiles)) or 'none'})",
                    (*pod.container_path(index), "resources"),
                )


# -- GPU feature discovery labels in node selectors ------------------------------------------

GFD_FAMILIES = frozenset(
    {
        "tesla",
        "fermi",
        "kepler",
        "maxwell",
        "pascal",
        "volta",
        "turing",
        "ampere",
        "ada-lovelace",
        "hopper",
        "blackwell",
        "undefined",
    }
)
GFD_INTEGER_LABELS = frozenset(
    {
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.replicas",
        "nvidia.com/gpu.memory",
        "nvidia.com/gpu.compute.major",
        "nvidia.com/gpu.compute.minor",
        "nvidia.com/cuda.driver.major",
        "nvidia.com/cuda.driver.minor",
        "nvidia.com/cuda.runtime.major",
        "nvidia.com/cuda.runtime.minor",
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.runtime-version.major",
        "nvidia.com/cuda.runtime-version.minor",
    }
)
GFD_CHOICES = {
    "nvidia.com/gpu.family": GFD_FAMILIES,
    "nvidia.com/gpu.sharing-strategy": frozenset({"none", "time-slicing", "mps"}),
    "nvidia.com/mig.capable": frozenset({"true", "false"}),
    "nvidia.com/mps.capable": frozenset({"true", "false"}),
}
PRODUCT_LABEL = "nvidia.com/gpu.product"
# Every other nvidia.com/gpu.* node label GFD (v0.18.2 internal/lm) or the GPU Operator
# (v26.3.3 controllers) writes; other keys of that prefix are written by neither.
GPU_LABELS = frozenset(
    {
        *GFD_INTEGER_LABELS,
        *GFD_CHOICES,
        PRODUCT_LABEL,
        "nvidia.com/gpu.machine",
        "nvidia.com/gpu.clique",
        "nvidia.com/gpu.mode",
        "nvidia.com/gpu.multiprocessors",
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.workload.config",
    }
)
GPU_LABEL_PREFIXES = ("nvidia.com/gpu.deploy.", "nvidia.com/gpu.engines.", "nvidia.com/gpu.slices.")
LABELER = DEVICE_PLUGIN + "internal/lm/"


def _label_problem(key: str, value: str, shared_everywhere: bool) -> tuple[str, str | None] | None:
    """(why no node has `key=value`, severity override) for a GPU label, or None."""
    if key in GFD_INTEGER_LABELS and not value.isdigit():
        return f"GPU feature discovery writes {key} as a whole number, never {value!r}", None
    choices = GFD_CHOICES.get(key)
    if choices is not None and value not in choices:
        return f"GPU feature discovery writes {key} as one of {', '.join(sorted(choices))}", None
    if key == PRODUCT_LABEL and shared_everywhere and not value.endswith("-SHARED"):
        return (
            f"nvidia.com/gpu is time-sliced or shared on every node, so GFD writes {key} "
            f"as {value}-SHARED",
            None,
        )
    if (
        key.startswith("nvidia.com/gpu.")
        and key not in GPU_LABELS
        and not key.startswith(GPU_LABEL_PREFIXES)
    ):
        return f"neither GFD nor the GPU Operator writes a {key} label", WARNING
    return None


def _shared_everywhere(ctx: Context) -> bool:
    """nvidia.com/gpu is shared, under its own name, by the only config the plugin has."""
    return any(
        everywhere and len(mapping(doc.obj.get("data"))) == 1
        for doc, _, _, everywhere in ctx.memo("gpu-sharing", lambda: _sharing(ctx))
    )


@pod_rule(
    id="gfd-node-labels",
    severity=ERROR,
    title="Node selectors on GPU labels use values GPU feature discovery writes",
    why="GPU feature discovery writes nvidia.com/gpu.family in lowercase (hopper, ampere, "
    "ada-lovelace, blackwell, ...), counts, memory (MiB) and CUDA versions as whole numbers, "
    "sharing-strategy as none/time-slicing/mps, and appends -SHARED to nvidia.com/gpu.product "
    "when nvidia.com/gpu is time-sliced or shared under its own name. A nodeSelector (or "
    "every required node affinity term) asking for another value matches no node, and the "
    "pod stays Pending; a nvidia.com/gpu.* key that no NVIDIA component writes is most "
    "likely misspelt.",
    fix="Copy the label from a GPU node (kubectl get node -L nvidia.com/gpu.product), e.g. "
    "nvidia.com/gpu.family: hopper, nvidia.com/gpu.memory: '81559'.",
    applies=sets_any("nodeSelector", "affinity"),
    source=(
        LABELER + "resource.go#L180-L318",
        LABELER + "nvml.go#L120-L141",
    ),
    when={
        "error": "a value GFD never writes for that label (or the product without -SHARED "
        "when the only device plugin config shares nvidia.com/gpu on every node)",
        "warning": "a nvidia.com/gpu.* key neither GFD nor the GPU Operator writes",
    },
)
def gfd_node_labels(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    shared = ctx.memo("gpu-shared-everywhere", lambda: _shared_everywhere(ctx))
    for key, value in mapping(pod.spec.get("nodeSelector")).items():
        found = _label_problem(str(key), str(value), shared)
        if found is not None:
            yield Violation(
                f"nodeSelector {key}: {value}: {found[0]}",
                (*pod.path, "nodeSelector", key),
                severity=found[1],
            )
    yield from _affinity_problems(pod, shared)


def _affinity_problems(pod: PodTemplate, shared: bool) -> Iterator[Violation]:
    affinity = mapping(mapping(pod.spec.get("affinity")).get("nodeAffinity"))
    required = mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = dicts(required.get("nodeSelectorTerms"))
    found = []
    for term in terms:
        problem = None
        for expression in dicts(term.get("matchExpressions")):
            values = expression.get("values")
            if expression.get("operator") != "In" or not isinstance(values, list) or not values:
                continue
            key = str(expression.get("key"))
            problems = [_label_problem(key, str(v), shared) for v in values]
            if all(p is not None for p in problems):
                problem = (key, problems[0])
                break
        found.append(problem)
    if not terms or any(p is None for p in found):
        return  # some term can still match
    at = (*pod.path, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    for key, (why, severity) in [p for p in found if p is not None]:
        yield Violation(f"required node affinity on {key}: {why}", at, severity=severity)


@resource_rule(
    id="clusterpolicy-singleton",
    severity=WARNING,
    title="A cluster has one ClusterPolicy",
    why="The GPU Operator reconciles the first ClusterPolicy it sees and marks every other "
    "one ignored: the driver, device plugin, MIG and sharing settings of the others never "
    "apply, and which one wins depends on the order the operator meets them.",
    fix="Keep one ClusterPolicy per cluster and put every setting in it.",
    kinds=("ClusterPolicy",),
    source=GPU_OPERATOR + "controllers/clusterpolicy_controller.go#L115-L121",
)
def clusterpolicy_singleton(doc: Document, ctx: Context) -> Iterator[Violation]:
    names = sorted({policy.name for policy in ctx.of_kind("ClusterPolicy")})
    if len(names) > 1:
        others = ", ".join(n for n in names if n != doc.name)
        yield Violation(
            f"ClusterPolicy {doc.name} is one of {len(names)} (also {others}): the operator "
            "serves one and ignores the rest",
            ("metadata", "name"),
        )


# -- MIG manager (mig-parted v0.15.0) configs ------------------------------------------------

MIG_PARTED = "https://github.com/NVIDIA/mig-parted/blob/e2d5ad1fc72b9d298ea6d04b885cf2d7dbe56941/"
MIG_CONFIG_KEY = "config.yaml"
_MIG_PROFILE = re.compile(
    r"^(\d+c\.)?\d+g\.\d+gb([+-][A-Za-z][A-Za-z0-9.]*(,[A-Za-z][A-Za-z0-9.]*)*)?$"
)
MIG_ENTRY_KEYS = frozenset({"device-filter", "devices", "mig-enabled", "mig-devices"})


def _custom_mig_config(ctx: Context) -> str | None:
    """The ConfigMap the render's ClusterPolicy gives the MIG manager instead of its own."""
    for policy in ctx.of_kind("ClusterPolicy"):
        manager = mapping(mapping(policy.obj.get("spec")).get("migManager"))
        name = mapping(manager.get("config")).get("name")
        if manager.get("enabled", True) is not False and isinstance(name, str) and name:
            return name
    return None


def _mig_spec_problems(spec: Any) -> Iterator[str]:
    """What mig-parted's spec parser refuses (api/spec/v1/spec.go)."""
    if not isinstance(spec, dict):
        yield "is not a mapping"
        return
    if spec.get("version") != "v1":
        yield f"has version {spec.get('version')!r}: mig-parted reads only v1"
    for key in set(spec) - {"version", "mig-configs"}:
        yield f"has the unexpected field {key!r}"
    configs = spec.get("mig-configs")
    if "mig-configs" in spec and (not isinstance(configs, dict) or not configs):
        yield "has no entries in mig-configs"
        return
    for name, entries in mapping(configs).items():
        if not isinstance(entries, list) or not entries:
            yield f"config {name} has no entries"
            continue
        for index, entry in enumerate(entries):
            for problem in _mig_entry_problems(mapping(entry)):
                yield f"config {name} entry {index} {problem}"


def _mig_entry_problems(entry: dict[str, Any]) -> Iterator[str]:
    for key in ("devices", "mig-enabled"):
        if key not in entry:
            yield f"has no {key}"
    for key in sorted(set(entry) - MIG_ENTRY_KEYS):
        yield f"has the unexpected field {key!r}"
    devices = entry.get("devices")
    if isinstance(devices, str) and devices != "all":
        yield f"has devices {devices!r}: the only string allowed is all"
    elif "devices" in entry and not isinstance(devices, (str, list)):
        yield "has devices that are neither all nor a list of GPU indices"
    elif isinstance(devices, list) and not all(is_int(d) for d in devices):
        yield "has devices that are not all GPU indices"
    enabled = entry.get("mig-enabled")
    if "mig-enabled" in entry and not isinstance(enabled, bool):
        yield f"has mig-enabled {enabled!r}, not true or false"
    wanted = entry.get("mig-devices")
    if enabled is True and wanted is None:
        yield "enables MIG without mig-devices"
    if enabled is False and wanted:
        yield "lists mig-devices with mig-enabled false"
    if isinstance(wanted, dict) and wanted:
        for profile, count in wanted.items():
            if not _MIG_PROFILE.match(str(profile)):
                yield f"has the MIG profile {profile!r}, not <g>g.<memory>gb (e.g. 1g.10gb)"
            elif not is_int(count) or count < 0:
                yield f"has the count {count!r} for {profile}"
        if all(is_int(c) and c == 0 for c in wanted.values()):
            yield "has a count of 0 for every MIG profile"


@resource_rule(
    id="mig-parted-config-invalid",
    severity=ERROR,
    title="The MIG manager's config parses",
    why="With migManager.config.name the GPU Operator mounts that ConfigMap's config.yaml in "
    "place of its own MIG layouts, and the MIG manager parses it whenever a node's "
    "nvidia.com/mig.config label asks for a layout. mig-parted refuses a file without "
    "config.yaml, without version: v1, with unknown fields, an empty layout, an entry "
    "without devices or mig-enabled, devices other than all or GPU indices, mig-enabled "
    "without mig-devices (or mig-devices with MIG off), a profile not written <g>g.<mem>gb, "
    "or only zero counts. The node's mig.config.state becomes failed and its GPUs are "
    "never partitioned: pods asking for those MIG devices stay Pending.",
    fix="Start from the operator's default-mig-parted-config: version: v1, mig-configs: "
    "{<name>: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 7}}]}.",
    kinds=("ConfigMap",),
    source=(
        MIG_PARTED + "api/spec/v1/spec.go#L46-L183",
        MIG_PARTED + "pkg/types/mig_config.go#L39-L59",
        GPU_OPERATOR + "controllers/object_controls.go#L2008-L2030",
    ),
)
def mig_parted_config_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.name != ctx.memo("custom-mig-config", lambda: _custom_mig_config(ctx)):
        return
    data = mapping(doc.obj.get("data"))
    text = data.get(MIG_CONFIG_KEY)
    if not isinstance(text, str):
        yield Violation(
            f"the MIG manager reads {MIG_CONFIG_KEY} and this ConfigMap has no such entry "
            f"({', '.join(sorted(map(str, data))) or 'none'})",
            ("data",),
        )
        return
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        yield Violation(
            f"{MIG_CONFIG_KEY} is not YAML ({str(exc).splitlines()[0]})", ("data", MIG_CONFIG_KEY)
        )
        return
    for problem in _mig_spec_problems(spec):
        yield Violation(f"{MIG_CONFIG_KEY} {problem}", ("data", MIG_CONFIG_KEY))


# -- Kueue's manager Configuration (v0.19.2 pkg/config/validation.go) -------------------------

KUEUE_CONFIG = "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/config/validation.go"
KUEUE_MAIN = "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/cmd/kueue/main.go#L166-L170"
KUEUE_CONFIG_GROUP = "config.kueue.x-k8s.io/"
# The integrations Kueue v0.19.2 registers (pkg/controller/jobs/*: RegisterIntegration).
KUEUE_INTEGRATIONS = frozenset(
    {
        "batch/job",
        "deployment",
        "statefulset",
        "pod",
        "jobset.x-k8s.io/jobset",
        "kubeflow.org/jaxjob",
        "kubeflow.org/paddlejob",
        "kubeflow.org/pytorchjob",
        "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob",
        "kubeflow.org/mpijob",
        "leaderworkerset.x-k8s.io/leaderworkerset",
        "ray.io/raycluster",
        "ray.io/rayjob",
        "ray.io/rayservice",
        "sparkoperator.k8s.io/sparkapplication",
        "trainer.kubeflow.org/trainjob",
        "workload.codeflare.dev/appwrapper",
    }
)
FAIR_SHARING_STRATEGIES = (
    ["LessThanOrEqualToFinalShare"],
    ["LessThanInitialShare"],
    ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
)
REQUEUING_TIMESTAMPS = ("Creation", "Eviction")
TRANSFORMATION_STRATEGIES = ("Retain", "Replace")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_GO_DURATION = re.compile(r"^([-+]?)((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "$(" in value)


def kueue_configurations(doc: Document) -> list[tuple[str, dict[str, Any]]]:
    """(data key, parsed Configuration) of every Kueue manager Configuration in a ConfigMap."""
    out = []
    for key, text in mapping(doc.obj.get("data")).items():
        config = _parse_configuration(text)
        if config is not None:
            out.append((str(key), config))
    return out


def _parse_configuration(text: Any) -> dict[str, Any] | None:
    if not isinstance(text, str) or KUEUE_CONFIG_GROUP not in text or "{{" in text:
        return None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if (
        isinstance(config, dict)
        and config.get("kind") == "Configuration"
        and str(config.get("apiVersion", "")).startswith(KUEUE_CONFIG_GROUP)
    ):
        return config
    return None


def kueue_chart_configurations(doc: Document) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(path, parsed Configuration) of the kueue chart's managerConfig in an Argo CD
    Application's (or ApplicationSet template's) Helm values."""
    out = []
    for at, helm in chart_sources(doc, "kueue"):
        key, values = helm_values(helm)
        text = mapping(mapping(values).get("managerConfig")).get("controllerManagerConfigYaml")
        config = _parse_configuration(text)
        if config is not None:
            out.append(((*at, key), config))
    return out


def _negative(value: Any) -> bool:
    return is_int(value) and value < 0


def _duration_sign(value: Any) -> int | None:
    """-1, 0 or 1 for a Go duration string, None when it is not one."""
    if not isinstance(value, str) or not _GO_DURATION.match(value.strip()):
        return None if value not in ("0", 0) else 0
    text = value.strip()
    if not any(c in "123456789" for c in text):
        return 0
    return -1 if text.startswith("-") else 1


def _kind_arg(name: str) -> bool:
    """schema.ParseKindArg finds a Kind.version.group (at least two dots)."""
    return name.count(".") >= 2


def _integration_problems(config: dict[str, Any]) -> Iterator[str]:
    integrations = mapping(config.get("integrations"))
    frameworks = integrations.get("frameworks")
    seen: set[str] = set()
    for index, name in enumerate(frameworks if isinstance(frameworks, list) else []):
        if _templated(name):
            continue
        if name not in KUEUE_INTEGRATIONS:
            yield (
                f"integrations.frameworks[{index}] {name!r} is not an integration Kueue "
                "registers (batch/job, kubeflow.org/pytorchjob, jobset.x-k8s.io/jobset, ...)"
            )
        elif name in seen:
            yield f"integrations.frameworks[{index}] lists {name} twice"
        seen.add(str(name))
    external = integrations.get("externalFrameworks")
    seen = set()
    for index, name in enumerate(external if isinstance(external, list) else []):
        if not isinstance(name, str) or _templated(name):
            continue
        if not _kind_arg(name):
            yield (
                f"integrations.externalFrameworks[{index}] {name!r} is not Kind.version.group "
                "(e.g. MyJob.v1.example.com)"
            )
        elif name in seen:
            yield f"integrations.externalFrameworks[{index}] lists {name} twice"
        seen.add(name)
    multikueue = mapping(config.get("multiKueue"))
    seen = set()
    for index, entry in enumerate(dicts(multikueue.get("externalFrameworks"))):
        name = entry.get("name")
        if not isinstance(name, str) or _templated(name):
            continue
        if not _kind_arg(name):
            yield (
                f"multiKueue.externalFrameworks[{index}].name {name!r} is not Kind.version.group"
            )
        elif name in seen:
            yield f"multiKueue.externalFrameworks[{index}].name lists {name} twice"
        seen.add(name)


def _wait_for_pods_ready_problems(config: dict[str, Any], v1beta1: bool) -> Iterator[str]:
    wait = config.get("waitForPodsReady")
    if not isinstance(wait, dict) or (v1beta1 and wait.get("enable") is not True):
        return  # off: v1beta1 converts a disabled one to none
    # An absent or zero timeout is defaulted (10m) before validation; a negative one is not.
    if _duration_sign(wait.get("timeout")) == -1:
        yield f"waitForPodsReady.timeout {wait['timeout']!r} is negative"
    if _duration_sign(wait.get("recoveryTimeout")) == -1:
        yield f"waitForPodsReady.recoveryTimeout {wait['recoveryTimeout']!r} is negative"
    strategy = mapping(wait.get("requeuingStrategy"))
    timestamp = strategy.get("timestamp")
    if (
        timestamp is not None
        and not _templated(timestamp)
        and timestamp not in REQUEUING_TIMESTAMPS
    ):
        yield (
            f"waitForPodsReady.requeuingStrategy.timestamp {timestamp!r} is neither Creation "
            "nor Eviction"
        )
    for key in ("backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"):
        if _negative(strategy.get(key)):
            yield f"waitForPodsReady.requeuingStrategy.{key} {strategy[key]} is negative"


def _fair_sharing_problems(config: dict[str, Any], v1beta1: bool) -> Iterator[str]:
    fair = config.get("fairSharing")
    if not isinstance(fair, dict) or (v1beta1 and fair.get("enable") is not True):
        return
    strategies = fair.get("preemptionStrategies")
    if strategies is None or strategies == []:
        if not v1beta1:  # v1beta1 defaults an empty list, v1beta2 does not
            yield "fairSharing.preemptionStrategies must be specified"
        return
    if isinstance(strategies, list) and any(_templated(s) for s in strategies):
        return
    if strategies not in FAIR_SHARING_STRATEGIES:
        yield (
            f"fairSharing.preemptionStrategies {strategies} is not one of "
            "[LessThanOrEqualToFinalShare], [LessThanInitialShare], "
            "[LessThanOrEqualToFinalShare, LessThanInitialShare] (in that order)"
        )


def _admission_fair_sharing_problems(config: dict[str, Any]) -> Iterator[str]:
    afs = mapping(config.get("admissionFairSharing"))
    if _duration_sign(afs.get("usageHalfLifeTime")) == -1:
        yield f"admissionFairSharing.usageHalfLifeTime {afs['usageHalfLifeTime']!r} is negative"
    if "usageSamplingInterval" in afs and _duration_sign(afs["usageSamplingInterval"]) in (-1, 0):
        yield (
            f"admissionFairSharing.usageSamplingInterval {afs['usageSamplingInterval']!r} "
            "is not greater than 0"
        )
    for name, weight in mapping(afs.get("resourceWeights")).items():
        if isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight < 0:
            yield f"admissionFairSharing.resourceWeights[{name}] {weight} is negative"


def _resources_problems(config: dict[str, Any]) -> Iterator[str]:
    res = mapping(config.get("resources"))
    inputs: set[str] = set()
    for index, transform in enumerate(dicts(res.get("transformations"))):
        strategy = transform.get("strategy")
        if (
            strategy is not None
            and not _templated(strategy)
            and strategy not in TRANSFORMATION_STRATEGIES
        ):
            yield (
                f"resources.transformations[{index}].strategy {strategy!r} is neither Retain "
                "nor Replace"
            )
        source = transform.get("input")
        if isinstance(source, str):
            if source in inputs:
                yield f"resources.transformations[{index}].input {source} is transformed twice"
            inputs.add(source)
    yield from _device_class_problems(res.get("deviceClassMappings"))


def _device_class_problems(mappings: Any) -> Iterator[str]:
    if not isinstance(mappings, list) or not mappings:
        return
    at = "resources.deviceClassMappings"
    if len(mappings) > 16:
        yield f"{at} has {len(mappings)} entries, more than 16"
    names: set[str] = set()
    owner: dict[str, tuple[str, bool]] = {}  # device class -> (resource, mapping has sources)
    for index, entry in enumerate(dicts(mappings)):
        name = entry.get("name")
        if isinstance(name, str) and not _templated(name):
            if not _label_key(name):
                yield f"{at}[{index}].name {name!r} is not a qualified resource name"
            if name in names:
                yield f"{at}[{index}].name {name} is mapped twice"
            names.add(name)
        classes = entry.get("deviceClassNames")
        if not isinstance(classes, list) or not classes:
            yield f"{at}[{index}] has no deviceClassNames"
            continue
        if len(classes) > 8:
            yield f"{at}[{index}].deviceClassNames has {len(classes)} entries, more than 8"
        has_sources = bool(entry.get("sources"))
        own: set[str] = set()
        for dc in classes:
            if not isinstance(dc, str) or _templated(dc):
                continue
            if not _label_key(dc):
                yield f"{at}[{index}].deviceClassNames {dc!r} is not a qualified name"
            if dc in own:
                yield f"{at}[{index}].deviceClassNames lists {dc} twice"
            own.add(dc)
            previous = owner.get(dc)
            if previous is None:
                owner[dc] = (str(name), has_sources)
            elif previous[0] != str(name) and not (has_sources and previous[1]):
                yield f"{at}[{index}]: device class {dc} is already mapped to {previous[0]}"


def _label_key(key: str) -> bool:
    """content.IsLabelKey: [prefix/]name, prefix a DNS subdomain, name of 63 or fewer."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool | None:
    """Whether a LabelSelector matches a label set; None when it cannot tell."""
    for key, value in mapping(selector.get("matchLabels")).items():
        if _templated(key) or _templated(value):
            return None
        if labels.get(str(key)) != str(value):
            return False
    for expression in dicts(selector.get("matchExpressions")):
        key, operator = str(expression.get("key")), expression.get("operator")
        values = expression.get("values") if isinstance(expression.get("values"), list) else []
        if _templated(key) or any(_templated(v) for v in values):
            return None
        if operator == "In" and labels.get(key) not in [str(v) for v in values]:
            return False
        if operator == "NotIn" and key in labels and labels[key] in [str(v) for v in values]:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return None
    return True


def _namespace_selector_problems(config: dict[str, Any]) -> Iterator[str]:
    selector = config.get("managedJobsNamespaceSelector")
    if not isinstance(selector, dict):
        return  # absent: the default selector exempts kube-system and Kueue's namespace
    prohibited = ["kube-system"]
    namespace = config.get("namespace")
    if isinstance(namespace, str) and namespace and not _templated(namespace):
        prohibited.append(namespace)
    for name in prohibited:
        if _selector_matches(selector, {"kubernetes.io/metadata.name": name}):
            yield f"managedJobsNamespaceSelector matches the {name} namespace"


def _cert_problems(config: dict[str, Any]) -> Iterator[str]:
    certs = mapping(config.get("internalCertManagement"))
    if certs.get("enable") is not True:
        return
    service, secret = certs.get("webhookServiceName"), certs.get("webhookSecretName")
    if (
        isinstance(service, str)
        and not _templated(service)
        and not (len(service) <= 63 and _DNS1035.match(service))
    ):
        yield f"internalCertManagement.webhookServiceName {service!r} is not a DNS-1035 label"
    if (
        isinstance(secret, str)
        and not _templated(secret)
        and not (len(secret) <= 253 and _DNS1123_SUBDOMAIN.match(secret))
    ):
        yield f"internalCertManagement.webhookSecretName {secret!r} is not a DNS-1123 subdomain"


_CONFIG_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "namespace",
        "manageJobsWithoutQueueName",
        "managedJobsNamespaceSelector",
        "internalCertManagement",
        "waitForPodsReady",
        "clientConnection",
        "integrations",
        "multiKueue",
        "fairSharing",
        "admissionFairSharing",
        "resources",
        "featureGates",
        "objectRetentionPolicies",
        # the inline ControllerManager
        "webhook",
        "leaderElection",
        "metrics",
        "health",
        "pprofBindAddress",
        "controller",
        "tls",
    }
)
# The fields each version's types declare (apis/config/<version>/configuration_types.go):
# the manager decodes its file strictly, so any other key is refused.
KUEUE_CONFIG_FIELDS = {
    "v1beta1": {
        "": _CONFIG_FIELDS | {"queueVisibility"},
        "integrations": frozenset(
            {"frameworks", "externalFrameworks", "podOptions", "labelKeysToCopy"}
        ),
        "waitForPodsReady": frozenset(
            {"enable", "timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
        ),
        "fairSharing": frozenset({"enable", "preemptionStrategies"}),
        "resources": frozenset(
            {"excludeResourcePrefixes", "transformations", "deviceClassMappings"}
        ),
    },
    "v1beta2": {
        "": _CONFIG_FIELDS | {"visibilityServer"},
        "integrations": frozenset({"frameworks", "externalFrameworks", "labelKeysToCopy"}),
        "waitForPodsReady": frozenset(
            {"timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
        ),
        "fairSharing": frozenset({"preemptionStrategies"}),
        "resources": frozenset(
            {
                "quotaCheckStrategy",
                "excludeResourcePrefixes",
                "transformations",
                "deviceClassMappings",
            }
        ),
    },
}
REQUEUING_FIELDS = frozenset(
    {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}
)


def _unknown_field_problems(config: dict[str, Any], version: str) -> Iterator[str]:
    fields = KUEUE_CONFIG_FIELDS[version]
    for section, known in fields.items():
        block = config if not section else config.get(section)
        if not isinstance(block, dict):
            continue
        for key in block:
            if isinstance(key, str) and key not in known and not _templated(key):
                where = f"{section}.{key}" if section else key
                hint = ""
                if version == "v1beta2" and key == "enable":
                    hint = f" (v1beta2 has no {section}.enable: the section's presence enables it)"
                elif version == "v1beta2" and key == "queueVisibility":
                    hint = " (removed in v1beta2)"
                yield f"{version} Configuration has no field {where}{hint}"
    strategy = mapping(config.get("waitForPodsReady")).get("requeuingStrategy")
    for key in mapping(strategy):
        if isinstance(key, str) and key not in REQUEUING_FIELDS:
            yield f"{version} Configuration has no field waitForPodsReady.requeuingStrategy.{key}"


def kueue_config_problems(config: dict[str, Any]) -> Iterator[str]:
    """What Kueue v0.19.2's config loader (strict decoding) and config.Validate refuse, as
    far as the file alone tells."""
    version = str(config.get("apiVersion")).rpartition("/")[2]
    if _templated(version):
        return
    if version not in KUEUE_CONFIG_FIELDS:
        yield f"apiVersion {config.get('apiVersion')} is not served (v1beta1 or v1beta2)"
        return
    yield from _unknown_field_problems(config, version)
    v1beta1 = version == "v1beta1"
    yield from _integration_problems(config)
    yield from _wait_for_pods_ready_problems(config, v1beta1)
    yield from _fair_sharing_problems(config, v1beta1)
    yield from _admission_fair_sharing_problems(config)
    yield from _resources_problems(config)
    yield from _namespace_selector_problems(config)
    yield from _cert_problems(config)


@resource_rule(
    id="kueue-config-invalid",
    severity=ERROR,
    title="Kueue's manager Configuration passes Kueue's own validation",
    why="Kueue's manager validates the Configuration of its ConfigMap at start-up "
    "(pkg/config/validation.go) and exits on any error: the manager never becomes ready, its "
    "webhooks refuse every queued job and nothing is admitted. It refuses an integrations."
    "frameworks name it does not register (or one listed twice), an externalFrameworks entry "
    "not written Kind.version.group, a waitForPodsReady requeuingStrategy timestamp other "
    "than Creation or Eviction or a negative backoff, fairSharing.preemptionStrategies "
    "other than the three allowed lists, a transformation strategy other than Retain or "
    "Replace or an input transformed twice, deviceClassMappings with a resource or device "
    "class mapped twice, and a managedJobsNamespaceSelector that matches kube-system. It "
    "decodes the file strictly: a misspelt or removed field (queueVisibility or "
    "waitForPodsReady.enable in v1beta2) is refused too.",
    fix="Use the names Kueue registers (batch/job, kubeflow.org/pytorchjob, jobset.x-k8s.io/"
    "jobset, trainer.kubeflow.org/trainjob, pod, ...), Kind.version.group for external "
    "frameworks, and the values the fields' documentation lists.",
    kinds=("ConfigMap", "Application", "ApplicationSet"),
    source=(
        KUEUE_MAIN,
        "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/config/config.go#L55-L66",
        KUEUE_CONFIG + "#L311-L343",
        KUEUE_CONFIG + "#L273-L309",
        KUEUE_CONFIG + "#L407-L428",
        KUEUE_CONFIG + "#L454-L562",
        KUEUE_CONFIG + "#L616-L638",
    ),
)
def kueue_config_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind == "ConfigMap":
        found = [(("data", key), key, c) for key, c in kueue_configurations(doc)]
    else:
        found = [
            (at, "managerConfig.controllerManagerConfigYaml", c)
            for at, c in kueue_chart_configurations(doc)
        ]
    for at, where, config in found:
        for problem in kueue_config_problems(config):
            yield Violation(
                f"{where}: {problem}; Kueue's manager refuses the configuration and does not start",
                at,
            )
