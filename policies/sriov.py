"""SR-IOV networks: NADs name their VF resource, every VF a pod requests is attached and
every attachment has its VF, NCCL looks for the VFs' device names, not the host's; and the
SR-IOV Network Operator's and the NVIDIA Network Operator's own admission checks and
controllers, read from their code.

Facts: SR-IOV Network Operator v1.6.0 `pkg/webhook/validate.go` and `mutate.go` (what its
webhook refuses in a SriovNetworkNodePolicy and SriovOperatorConfig, and what it defaults),
`controllers/generic_network_controller.go` (networks are read only in the operator's
namespace) and `api/v1/helper.go` with `bindata/manifests/cni-config/sriov` (the NAD a
SriovNetwork or SriovIBNetwork becomes, its ipam, capabilities and metaPlugins pasted into
the CNI JSON as they are); network-resources-injector v1.7.0 (what it adds to a pod's first
container); NVIDIA Network Operator v26.4.1 `api/v1alpha1/validator` (NicClusterPolicy and
HostDeviceNetwork webhooks) and its NicClusterPolicy controller (one instance name).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import (
    PodTemplate,
    dicts,
    env_index,
    env_of,
    is_int,
    mapping,
    resources,
)

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
        elif requested == 0 and not pod.uses_gpus and not _injects_resources(ctx):
            # GPU pods: rdma-resource-missing says it. With the network-resources-injector
            # on, a resource no container names is added to the first container, one per
            # attachment (v1.7.0 pkg/webhook/webhook.go createResourcePatch).
            yield Violation(f"{count} attachment(s) need {resource} but the pod requests none", at)


def _injects_resources(ctx: Context) -> bool:
    """The render's SriovOperatorConfig deploys the network-resources-injector."""
    return any(
        mapping(config.obj.get("spec")).get("enableInjector") is True
        for config in ctx.of_kind("SriovOperatorConfig")
    )


# -- SR-IOV Network Operator v1.6.0: SriovNetworkNodePolicy admission -----------------------

SRIOV_OPERATOR = (
    "https://github.com/k8snetworkplumbingwg/sriov-network-operator/blob/"
    "1f5be4c57b77ca53af1dca655226556d31bf07b4/"
)
POLICY_WEBHOOK = SRIOV_OPERATOR + "pkg/webhook/validate.go"
POLICY_KIND = "SriovNetworkNodePolicy"
_POLICY_RESOURCE = re.compile(r"^[a-zA-Z0-9_]+$")
# The resource names later builds (and the NVIDIA Network Operator's) accept as well.
_POLICY_RESOURCE_NEXT = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9_-]*[a-zA-Z0-9])?$")
MELLANOX, MLX_MAX_VFS = "15b3", 128
# The chart's supported-nic-ids ConfigMap at v1.6.0 (vendor, PF device, VF device); the
# chart's supportedExtraNICs adds to it, so a vendor outside it is refused only for sure
# when the render holds the ConfigMap itself.
SUPPORTED_NICS_CONFIGMAP = "supported-nic-ids"
DEFAULT_SUPPORTED_VENDORS = frozenset({"8086", "15b3", "14e4", "1077", "1af4", "177d"})
DEFAULT_SUPPORTED_DEVICES = frozenset(
    "158a 158b 1572 1563 10c9 1589 1581 15ff 0d58 1583 1592 1593 159b 1599 1591 188a 124d "
    "124c 579c 579d 579e 12d2 12d3 1013 1015 1017 1019 101b 101d 101f 1021 1023 a2d6 a2dc "
    "16d7 1750 1654 1000 1041 b200 b100 b600 b900 ba00".split()
)


def _policy_spec(doc: Document) -> dict[str, Any]:
    return mapping(doc.obj.get("spec"))


def _is_rdma(spec: dict[str, Any]) -> bool:
    """isRdma after the operator's mutating webhook: forced true for linkType ib."""
    return spec.get("isRdma") is True or str(spec.get("linkType", "")).lower() == "ib"


def _supported_nics(ctx: Context) -> tuple[set[str], set[str]] | None:
    """(vendors, PF device IDs) of the render's supported-nic-ids ConfigMap, if it has one."""
    for doc in ctx.of_kind("ConfigMap"):
        if doc.name != SUPPORTED_NICS_CONFIGMAP:
            continue
        vendors, devices = set(), set()
        for value in mapping(doc.obj.get("data")).values():
            ids = str(value).split(" ")
            if len(ids) >= 2:
                vendors.add(ids[0])
                devices.add(ids[1])
        return vendors, devices
    return None


OPERATOR_CONFIG_CONTROLLER = (
    SRIOV_OPERATOR + "controllers/sriovoperatorconfig_controller.go#L342-L353"
)


def _policy_webhook(ctx: Context) -> bool | None:
    """Whether the SR-IOV operator runs its admission webhook: only when the render's
    SriovOperatorConfig default says enableOperatorWebhook (the chart's default is off);
    None when the render holds no such config."""
    for config in ctx.of_kind("SriovOperatorConfig"):
        if config.name == "default":
            return mapping(config.obj.get("spec")).get("enableOperatorWebhook") is True
    return None


def _graded(found: Iterator[Violation], webhook: bool | None) -> Iterator[Violation]:
    """Refusals of the operator's webhook: errors where the render turns it on, warnings
    where the render does not say, nothing where it turns it off."""
    if webhook is False:
        return
    for violation in found:
        if webhook is None and violation.severity is None:
            violation = Violation(
                violation.message + " (when the operator's webhook is on)",
                violation.path,
                violation.fix,
                WARNING,
            )
        yield violation


@resource_rule(
    id="sriov-policy-webhook",
    severity=ERROR,
    title="SR-IOV node policies pass the SR-IOV operator's webhook",
    why="The SR-IOV Network Operator's validating webhook (deployed when the "
    "SriovOperatorConfig default sets enableOperatorWebhook) refuses a SriovNetworkNodePolicy "
    "whose resourceName has characters other than letters, digits and '_', whose nicSelector "
    "selects by nothing, whose vendor or device is not in the supported-nic-ids list, whose "
    "pfNames range (ens1f0#first-last) does not parse, is reversed or reaches numVfs, whose "
    "numVfs is 0 or above 128 on an NVIDIA (Mellanox) NIC, that asks for vfio-pci with RDMA "
    "(linkType ib sets isRdma: true), switchdev on an InfiniBand link, vdpa outside "
    "switchdev netdevices, or bridge management outside switchdev or on an externally "
    "managed device. The policy never exists and no node gets its VFs: pods requesting the "
    "resource stay Pending.",
    fix="Use a resourceName of letters, digits and '_', select the NIC by pfNames, vendor, "
    "deviceID or rootDevices, keep pfNames ranges inside 0..numVfs-1, and use "
    "deviceType: netdevice for RDMA (vfio-pci only for VMs, without isRdma).",
    kinds=(POLICY_KIND,),
    source=(
        POLICY_WEBHOOK + "#L146-L237",
        POLICY_WEBHOOK + "#L320-L328",
        SRIOV_OPERATOR + "pkg/webhook/mutate.go#L42-L46",
        OPERATOR_CONFIG_CONTROLLER,
    ),
    when={
        "error": "v1.6.0's webhook refuses the policy whatever the nodes have, and the "
        "render's SriovOperatorConfig default turns the webhook on (enableOperatorWebhook)",
        "warning": "the render does not say whether the webhook is on (it is off unless "
        "enableOperatorWebhook: true; when the render turns it off the rule is quiet), a "
        "resourceName with '-' (refused by v1.6.0, accepted by later builds), or a vendor "
        "or device outside the chart's default supported-nic-ids list when the render "
        "does not hold that list",
    },
)
def sriov_policy_webhook(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.name == "default":  # the deprecated default policy: not validated
        return
    webhook = ctx.memo("sriov-policy-webhook-on", lambda: _policy_webhook(ctx))
    yield from _graded(_policy_refusals(doc, ctx, webhook), webhook)


def _policy_refusals(doc: Document, ctx: Context, webhook: bool | None) -> Iterator[Violation]:
    spec = _policy_spec(doc)
    name = spec.get("resourceName")
    if isinstance(name, str) and not _POLICY_RESOURCE.match(name):
        later = bool(_POLICY_RESOURCE_NEXT.match(name))
        yield Violation(
            f"resourceName {name!r} has characters other than letters, digits and '_'"
            + (": v1.6.0's webhook refuses it (later builds accept '-')" if later else ""),
            ("spec", "resourceName"),
            severity=WARNING if later else None,
        )
    selector = mapping(spec.get("nicSelector"))
    if isinstance(spec.get("nicSelector"), dict) and not any(
        selector.get(k) for k in ("vendor", "deviceID", "pfNames", "rootDevices", "netFilter")
    ):
        yield Violation(
            "nicSelector sets none of vendor, deviceID, pfNames, rootDevices or netFilter",
            ("spec", "nicSelector"),
        )
    yield from _nic_model(selector, ctx)
    num_vfs = spec.get("numVfs")
    if is_int(num_vfs):
        yield from _vf_ranges(selector, num_vfs)
        if num_vfs == 0:
            yield Violation(
                "numVfs 0: the webhook refuses a policy that creates no VFs", ("spec", "numVfs")
            )
        elif num_vfs > MLX_MAX_VFS and str(selector.get("vendor", "")) == MELLANOX:
            yield Violation(
                f"numVfs {num_vfs} is above {MLX_MAX_VFS}, the most the webhook allows on "
                "NVIDIA (Mellanox) NICs",
                ("spec", "numVfs"),
            )
    yield from _mode_conflicts(spec, mutated=webhook is not False)


def _nic_model(selector: dict[str, Any], ctx: Context) -> Iterator[Violation]:
    vendor, device = selector.get("vendor"), selector.get("deviceID")
    if not vendor and not device:
        return
    listed = ctx.memo("sriov-supported-nics", lambda: _supported_nics(ctx))
    vendors, devices = listed or (DEFAULT_SUPPORTED_VENDORS, DEFAULT_SUPPORTED_DEVICES)
    severity = None if listed else WARNING
    where = "the render's supported-nic-ids" if listed else "the chart's default supported-nic-ids"
    if vendor and str(vendor) not in vendors:
        yield Violation(
            f"vendor {vendor!r} is not in {where} (IDs are lowercase hex, e.g. 15b3)",
            ("spec", "nicSelector", "vendor"),
            severity=severity,
        )
    elif device and str(device) not in devices:
        yield Violation(
            f"deviceID {device!r} is not a PF device ID in {where}",
            ("spec", "nicSelector", "deviceID"),
            severity=severity,
        )


def _vf_ranges(selector: dict[str, Any], num_vfs: int) -> Iterator[Violation]:
    pf_names = selector.get("pfNames")
    for index, pf in enumerate(pf_names if isinstance(pf_names, list) else []):
        if not isinstance(pf, str) or "#" not in pf:
            continue
        at = ("spec", "nicSelector", "pfNames", index)
        fields = pf.split("#")
        bounds = fields[1].split("-") if len(fields) == 2 else []
        if len(fields) != 2 or len(bounds) != 2:
            yield Violation(f"pfNames entry {pf!r} is not <pf>#<first>-<last>", at)
            continue
        try:
            first, last = int(bounds[0]), int(bounds[1])
        except ValueError:
            yield Violation(f"pfNames entry {pf!r}: the VF range is not two integers", at)
            continue
        if last < first:
            yield Violation(f"pfNames entry {pf!r}: the range ends before it starts", at)
        elif last >= num_vfs:
            yield Violation(
                f"pfNames entry {pf!r}: VF {last} does not exist with numVfs {num_vfs} "
                f"(indices 0..{num_vfs - 1})",
                at,
            )


def _mode_conflicts(spec: dict[str, Any], mutated: bool) -> Iterator[Violation]:
    device_type = spec.get("deviceType", "netdevice")
    switchdev = spec.get("eSwitchMode") == "switchdev"
    link = str(spec.get("linkType", ""))
    rdma = _is_rdma(spec) if mutated else spec.get("isRdma") is True
    if device_type == "vfio-pci" and rdma:
        why = "isRdma: true"
        if spec.get("isRdma") is not True:
            why = "linkType ib makes the operator set isRdma: true"
        yield Violation(
            f"deviceType vfio-pci conflicts with RDMA ({why}): use netdevice on bare metal",
            ("spec", "deviceType"),
        )
    if link and link.lower() != "eth" and switchdev:
        yield Violation(
            f"eSwitchMode switchdev works only on Ethernet links, not linkType {link}",
            ("spec", "eSwitchMode"),
        )
    if spec.get("vdpaType") in ("virtio", "vhost"):
        if device_type != "netdevice":
            yield Violation(
                f"vdpaType needs deviceType netdevice, not {device_type}", ("spec", "vdpaType")
            )
        if not switchdev:
            yield Violation("vdpaType needs eSwitchMode switchdev", ("spec", "vdpaType"))
    if mapping(spec.get("bridge")):
        if not switchdev:
            yield Violation("bridge management needs eSwitchMode switchdev", ("spec", "bridge"))
        if spec.get("externallyManaged") is True:
            yield Violation(
                "bridge management cannot be used on an externally managed device",
                ("spec", "bridge"),
            )


# -- SR-IOV Network Operator v1.6.0: policies against each other -----------------------------


def _selects_every_node_of(looser: dict[str, Any], stricter: dict[str, Any]) -> bool:
    """Every node `stricter` selects is selected by `looser` (label selectors as maps)."""
    return all(stricter.get(k) == v for k, v in looser.items())


def _vf_range(pf: str) -> tuple[str, int, int]:
    """ParseVfRange: (PF name, first, last), -1 for both without a range."""
    if "#" in pf:
        name, _, bounds = pf.partition("#")
        first, _, last = bounds.partition("-")
        try:
            return name, int(first), int(last)
        except ValueError:
            return name, -1, -1
    return pf, -1, -1


def _policy_keys(policy: Document) -> set[tuple[str, str]]:
    """What two policies must share for the webhook to compare them: a PF, a root device or
    a resource name."""
    spec = _policy_spec(policy)
    nics = mapping(spec.get("nicSelector"))
    keys = {("pf", _vf_range(p)[0]) for p in nics.get("pfNames") or [] if isinstance(p, str)}
    keys |= {("root", str(r)) for r in nics.get("rootDevices") or []}
    keys.add(("resource", str(spec.get("resourceName"))))
    return keys


def _policies_sharing(ctx: Context) -> dict[tuple[str, str, str], list[Document]]:
    """(namespace, what, name) -> the policies of that namespace sharing that PF, root
    device or resource name."""
    out: dict[tuple[str, str, str], list[Document]] = {}
    for policy in ctx.of_kind(POLICY_KIND):
        if policy.name != "default":
            for what, name in _policy_keys(policy):
                out.setdefault((policy.namespace, what, name), []).append(policy)
    return out


def _policy_conflict(current: Document, previous: Document) -> tuple[str, tuple] | None:
    """validatePolicyForNodePolicy: why the webhook refuses `current` next to `previous`."""
    mine, theirs = _policy_spec(current), _policy_spec(previous)
    mine_nics, their_nics = mapping(mine.get("nicSelector")), mapping(theirs.get("nicSelector"))
    their_pfs = [p for p in their_nics.get("pfNames") or [] if isinstance(p, str)]
    for index, pf in enumerate(mine_nics.get("pfNames") or []):
        if not isinstance(pf, str):
            continue
        name, first, last = _vf_range(pf)
        for other in their_pfs:
            other_name, other_first, other_last = _vf_range(other)
            if other_name != name:
                continue
            at = ("spec", "nicSelector", "pfNames", index)
            if bool(mine.get("externallyManaged")) != bool(theirs.get("externallyManaged")):
                return f"externallyManaged differs from policy {previous.name} on PF {name}", at
            if last < other_first or first > other_last:
                break  # the webhook stops at the first PF the two share
            if first < 0 and other_first < 0:
                return f"PF {name} is taken whole here and by policy {previous.name}", at
            return f"VFs {pf} overlap {other} of policy {previous.name}", at
        else:
            continue
        break
    their_roots = set(map(str, their_nics.get("rootDevices") or []))
    for index, root in enumerate(mine_nics.get("rootDevices") or []):
        if str(root) in their_roots:
            return (
                f"root device {root} is also selected by policy {previous.name}",
                ("spec", "nicSelector", "rootDevices", index),
            )
    if mine.get("resourceName") == theirs.get("resourceName") and bool(
        mine.get("excludeTopology")
    ) != bool(theirs.get("excludeTopology")):
        return (
            f"excludeTopology differs from policy {previous.name}, which advertises the same "
            f"resource {mine.get('resourceName')}",
            ("spec", "excludeTopology"),
        )
    return None


@resource_rule(
    id="sriov-policy-conflict",
    severity=ERROR,
    title="SR-IOV node policies on the same nodes do not claim the same VFs",
    why="For every node a new SriovNetworkNodePolicy selects, the SR-IOV operator's webhook "
    "(deployed when the SriovOperatorConfig default sets enableOperatorWebhook) compares "
    "it with the other policies selecting that node: it refuses one that shares a "
    "PF whose VF ranges overlap (a PF named without a range overlaps another named without "
    "one), that is externallyManaged where the other is not, that names the same root "
    "device, or that advertises the same resourceName with another excludeTopology. Of two "
    "such policies in Git, whichever is applied second is refused, and its VFs never appear.",
    fix="Split the PF's VFs between the policies (ens1f0#0-3 and ens1f0#4-7), or merge the "
    "policies; give policies of one resource the same excludeTopology.",
    kinds=(POLICY_KIND,),
    source=(POLICY_WEBHOOK + "#L285-L446", OPERATOR_CONFIG_CONTROLLER),
    when={
        "error": "the render's SriovOperatorConfig default turns the webhook on",
        "warning": "the render does not say whether the webhook is on (quiet when it is off)",
    },
)
def sriov_policy_conflict(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.name == "default":
        return
    webhook = ctx.memo("sriov-policy-webhook-on", lambda: _policy_webhook(ctx))
    yield from _graded(_conflicts(doc, ctx), webhook)


def _conflicts(doc: Document, ctx: Context) -> Iterator[Violation]:
    sharing = ctx.memo("sriov-policies-sharing", lambda: _policies_sharing(ctx))
    mine = mapping(_policy_spec(doc).get("nodeSelector"))
    candidates = {
        id(other): other
        for what, name in sorted(_policy_keys(doc))
        for other in sharing.get((doc.namespace, what, name), [])
    }
    for other in candidates.values():
        if other is doc or other.name == doc.name:
            continue
        theirs = mapping(_policy_spec(other).get("nodeSelector"))
        if not (_selects_every_node_of(mine, theirs) or _selects_every_node_of(theirs, mine)):
            continue  # they may select disjoint nodes
        conflict = _policy_conflict(doc, other)
        if conflict is None:
            reverse = _policy_conflict(other, doc)
            if reverse is not None:
                conflict = (f"seen from policy {other.name}: {reverse[0]}", ("spec", "nicSelector"))
        if conflict is not None:
            yield Violation(conflict[0] + " (on the nodes both select)", conflict[1])


# -- SR-IOV Network Operator v1.6.0: the operator's namespace --------------------------------

NETWORK_CONTROLLER = SRIOV_OPERATOR + "controllers/generic_network_controller.go#L74-L84"
SRIOV_NETWORK_KINDS = ("SriovNetwork", "SriovIBNetwork", "OVSNetwork")


def _operator_namespace(ctx: Context) -> str | None:
    """The SR-IOV operator's namespace: where the render's SriovOperatorConfig 'default' is."""
    for config in ctx.of_kind("SriovOperatorConfig"):
        if config.name == "default" and config.namespace:
            return config.namespace
    return None


@resource_rule(
    id="sriov-operator-namespace",
    severity=ERROR,
    title="SR-IOV operator objects live in the operator's namespace",
    why="The SR-IOV operator reads only the SriovOperatorConfig named default in its own "
    "namespace (its webhook refuses any other), uses only node policies in that namespace "
    "(others are admitted with a warning and ignored), and v1.6.0 reconciles SriovNetworks, "
    "SriovIBNetworks and OVSNetworks only there: one written elsewhere never becomes a "
    "NetworkAttachmentDefinition (later builds accept one elsewhere without "
    "spec.networkNamespace, and refuse it with). Nothing fails loudly; pods wait for VFs or "
    "a network that never comes.",
    fix="Create SR-IOV policies and networks in the operator's namespace (the one of its "
    "SriovOperatorConfig default) and name the pods' namespace in spec.networkNamespace.",
    kinds=("SriovOperatorConfig", POLICY_KIND, *SRIOV_NETWORK_KINDS),
    source=(
        POLICY_WEBHOOK + "#L35-L57",
        POLICY_WEBHOOK + "#L115-L127",
        NETWORK_CONTROLLER,
    ),
    when={
        "error": "a policy or network outside the namespace of the render's "
        "SriovOperatorConfig default (a network only when it sets spec.networkNamespace)",
        "warning": "a network outside the operator's namespace without spec.networkNamespace "
        "(ignored by v1.6.0, served in its own namespace by later builds), or a "
        "SriovOperatorConfig not named default (ignored)",
    },
)
def sriov_operator_namespace(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind == "SriovOperatorConfig":
        if doc.name != "default":
            yield Violation(
                f"SriovOperatorConfig {doc.name}: the operator uses only the one named default "
                "(its webhook, when on, refuses others), so these settings never apply",
                ("metadata", "name"),
                severity=WARNING,
            )
        return
    operator = ctx.memo("sriov-operator-namespace", lambda: _operator_namespace(ctx))
    if operator is None or (doc.namespace or "default") == operator:
        return
    if doc.kind == POLICY_KIND:
        yield Violation(
            f"policy in namespace {doc.namespace or 'default'}: the operator uses only "
            f"policies in {operator}, so no node gets these VFs",
            ("metadata", "namespace"),
        )
        return
    target = mapping(doc.obj.get("spec")).get("networkNamespace")
    yield Violation(
        f"{doc.kind} in namespace {doc.namespace or 'default'}, not the operator's "
        f"({operator}): v1.6.0 never writes its NetworkAttachmentDefinition"
        + ("; later builds refuse spec.networkNamespace outside it" if target else ""),
        ("metadata", "namespace"),
        severity=None if target else WARNING,
    )


# -- SR-IOV Network Operator v1.6.0: the NAD a network becomes -------------------------------

CNI_TEMPLATE = SRIOV_OPERATOR + "bindata/manifests/cni-config/sriov/sriov-cni-config.yaml"


def _json_piece(text: str, wrap: str) -> bool:
    """Whether `text`, pasted where the operator's template puts it, gives valid JSON."""
    try:
        value = json.loads(wrap % text)
    except json.JSONDecodeError:
        return False
    if wrap.startswith("["):
        return all(isinstance(item, dict) for item in value)
    return isinstance(value, dict)


NETWORK_OPERATOR_STATES = (
    "https://github.com/Mellanox/network-operator/blob/85afd6d9c6978eb871a3292b9897f49746cc43cd/"
    "pkg/state/"
)
# The fields each kind's operator pastes into the CNI JSON of the NAD it writes.
PASTED_FIELDS = {
    "SriovNetwork": ("ipam", "capabilities", "metaPlugins"),
    "SriovIBNetwork": ("ipam", "capabilities", "metaPlugins"),
    "MacvlanNetwork": ("ipam",),
    "IPoIBNetwork": ("ipam",),
    "HostDeviceNetwork": ("ipam",),
}
_PASTED = {
    "ipam": ("%s", lambda t: "".join(t.split())),
    "capabilities": ("%s", lambda t: t),
    "metaPlugins": ("[{}, %s]", lambda t: t),
}


@resource_rule(
    id="operator-network-cni-fields",
    severity=ERROR,
    title="Networks an operator turns into NADs carry ipam, capabilities and metaPlugins as JSON",
    why="The SR-IOV operator (SriovNetwork, SriovIBNetwork) and the NVIDIA Network Operator "
    "(MacvlanNetwork, IPoIBNetwork, HostDeviceNetwork) paste spec.ipam (with its whitespace "
    "removed), and the SR-IOV operator also spec.capabilities and spec.metaPlugins, into "
    "the CNI JSON of the NetworkAttachmentDefinition they write, unchecked. YAML instead "
    "of JSON, a trailing comma or a missing brace, or metaPlugins written as a list make "
    "the generated config invalid, and every pod attaching the network fails at sandbox "
    "creation.",
    fix='Write ipam and capabilities as one JSON object (\'{"type": "whereabouts", '
    '"range": "10.10.0.0/16"}\'), and metaPlugins as JSON objects separated by commas, '
    'without brackets (\'{"type": "tuning"}, {"type": "rdma"}\').',
    kinds=tuple(PASTED_FIELDS),
    source=(
        SRIOV_OPERATOR + "api/v1/helper.go#L641-L820",
        CNI_TEMPLATE,
        NETWORK_OPERATOR_STATES + "state_macvlan_network.go#L144-L147",
        NETWORK_OPERATOR_STATES + "state_ipoib_network.go#L142-L145",
    ),
)
def operator_network_cni_fields(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    for field in PASTED_FIELDS[doc.kind]:
        wrap, prepare = _PASTED[field]
        text = spec.get(field)
        if isinstance(text, str) and text.strip() and not _json_piece(prepare(text), wrap):
            what = "JSON objects separated by commas" if field == "metaPlugins" else "a JSON object"
            yield Violation(
                f"spec.{field} is not {what}: the NetworkAttachmentDefinition the operator "
                "writes has an invalid CNI config",
                ("spec", field),
            )


@resource_rule(
    id="operator-network-nad-clash",
    severity=WARNING,
    title="No NetworkAttachmentDefinition in Git has the name an operator writes one under",
    why="A SriovNetwork or SriovIBNetwork makes the SR-IOV operator write a "
    "NetworkAttachmentDefinition of the same name in spec.networkNamespace (else its own "
    "namespace), and the operator updates one that exists to its own rendering. A NAD of "
    "that name and namespace in Git is overwritten, Argo CD puts it back, and attachments "
    "get one config or the other depending on who wrote last.",
    fix="Drop the hand-written NetworkAttachmentDefinition (the operator writes it), or give "
    "the network another name.",
    kinds=("SriovNetwork", "SriovIBNetwork"),
    source=SRIOV_OPERATOR + "controllers/generic_network_controller.go#L155-L192",
)
def operator_network_nad_clash(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    namespace = str(spec.get("networkNamespace") or doc.namespace or "default")
    nad = ctx.find("NetworkAttachmentDefinition", doc.name, namespace)
    if nad is not None and (nad.namespace or "default") == namespace:
        yield Violation(
            f"NetworkAttachmentDefinition {namespace}/{doc.name} is also in the render: the "
            "operator overwrites it with the one it generates",
            ("metadata", "name"),
        )


# -- NVIDIA Network Operator v26.4.1 ---------------------------------------------------------

NETWORK_OPERATOR = (
    "https://github.com/Mellanox/network-operator/blob/85afd6d9c6978eb871a3292b9897f49746cc43cd/"
)
NIC_WEBHOOK = NETWORK_OPERATOR + "api/v1alpha1/validator/nicpolicy_webhook.go"
NIC_CLUSTER_POLICY_NAME = "nic-cluster-policy"
_FQDN = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z]{2,})+$")
_SRIOV_DP_RESOURCE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_RDMA_DP_RESOURCE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_OFED_VERSION = re.compile(
    r"^(sha256:[a-fA-F0-9]{64}|doca\d+\.\d+(\.\d+)?-\d+\.\d+-\d+\.\d+\.\d+\.\d+-\d+(-[\w\.\-]+)*"
    r"|\d+\.\d+-\d+(\.\d+)*(-\d+)?(-[\w\.\-]+)*)$"
)
_GUID = re.compile(r"^([0-9A-Fa-f]{2}:){7}([0-9A-Fa-f]{2})$")


def _network_operator_webhook(ctx: Context, resource: str) -> bool:
    """The render deploys the Network Operator's admission webhook for `resource` (its
    chart renders the ValidatingWebhookConfiguration only with admissionController
    enabled, which is off by default)."""
    for config in ctx.of_kind("ValidatingWebhookConfiguration"):
        for webhook in dicts(config.obj.get("webhooks")):
            for rule in dicts(webhook.get("rules")):
                if resource in (rule.get("resources") or []):
                    return True
    return False


def _network_operator_graded(found: Iterator[Violation], on: bool) -> Iterator[Violation]:
    for violation in found:
        if not on and violation.severity is None:
            violation = Violation(
                violation.message + " (when the Network Operator's webhook is on)",
                violation.path,
                violation.fix,
                WARNING,
            )
        yield violation


@resource_rule(
    id="nicclusterpolicy-webhook",
    severity=ERROR,
    title="NicClusterPolicies pass the NVIDIA Network Operator's webhook and are the one it serves",
    why="The Network Operator's webhook (deployed with the chart's "
    "operator.admissionController.enabled) refuses a NicClusterPolicy whose ofedDriver.version is "
    "not a DOCA/MOFED version (or digest), whose ofedDriver upgradePolicy has safeLoad "
    "without autoUpgrade, whose ibKubernetes GUID pool bounds are not xx:xx:xx:xx:xx:xx:xx:xx "
    "hex or end before they start, or whose sriovDevicePlugin or rdmaSharedDevicePlugin "
    "config is not JSON, names a resource outside the plugin's pattern (no '-' for the SR-IOV "
    "device plugin) or a resourcePrefix that is not a domain name. Its controller serves "
    "only the NicClusterPolicy named nic-cluster-policy and marks any other ignored. Either "
    "way no driver, device plugin or IB pool is deployed.",
    fix="Name the object nic-cluster-policy, use the version format of the DOCA driver "
    "release (e.g. doca3.1.0-25.07-0.6.6.0-0), write the GUIDs as eight hex pairs, and give "
    "the device plugins JSON configs with resource names of letters, digits, '_' and '.'.",
    kinds=("NicClusterPolicy",),
    source=(
        NIC_WEBHOOK + "#L379-L418",
        NIC_WEBHOOK + "#L420-L613",
        NIC_WEBHOOK + "#L628-L697",
        NIC_WEBHOOK + "#L934-L960",
        NETWORK_OPERATOR + "controllers/nicclusterpolicy_controller.go#L161",
        NETWORK_OPERATOR + "deployment/network-operator/values.yaml#L293-L295",
    ),
    when={
        "error": "a name other than nic-cluster-policy (the controller ignores it), or a "
        "refusal when the render deploys the webhook (a ValidatingWebhookConfiguration for "
        "nicclusterpolicies)",
        "warning": "a refusal of the webhook the render does not show deployed (the chart "
        "leaves it off by default)",
    },
)
def nicclusterpolicy_webhook(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.name != NIC_CLUSTER_POLICY_NAME:
        yield Violation(
            f"NicClusterPolicy {doc.name}: the operator serves only {NIC_CLUSTER_POLICY_NAME} "
            "and ignores this one",
            ("metadata", "name"),
        )
    on = ctx.memo(
        ("network-operator-webhook", "nicclusterpolicies"),
        lambda: _network_operator_webhook(ctx, "nicclusterpolicies"),
    )
    yield from _network_operator_graded(_nic_refusals(doc), on)


def _nic_refusals(doc: Document) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    ofed = mapping(spec.get("ofedDriver"))
    if isinstance(spec.get("ofedDriver"), dict):
        version = ofed.get("version")
        if not _OFED_VERSION.match(str(version or "")):
            yield Violation(
                f"ofedDriver.version {version!r} is not a DOCA/MOFED driver version",
                ("spec", "ofedDriver", "version"),
            )
        upgrade = mapping(ofed.get("upgradePolicy"))
        if upgrade.get("safeLoad") is True and upgrade.get("autoUpgrade") is not True:
            yield Violation(
                "ofedDriver.upgradePolicy.safeLoad needs autoUpgrade: true",
                ("spec", "ofedDriver", "upgradePolicy", "safeLoad"),
            )
    if isinstance(spec.get("ibKubernetes"), dict):
        yield from _guid_pool(mapping(spec.get("ibKubernetes")))
    for key, pattern, entries in (
        ("sriovDevicePlugin", _SRIOV_DP_RESOURCE, "resourceList"),
        ("rdmaSharedDevicePlugin", _RDMA_DP_RESOURCE, "configList"),
    ):
        config = mapping(spec.get(key)).get("config")
        if isinstance(config, str):
            yield from _plugin_config(config, pattern, entries, ("spec", key, "config"))


def _guid_pool(ib: dict[str, Any]) -> Iterator[Violation]:
    start, end = ib.get("pKeyGUIDPoolRangeStart"), ib.get("pKeyGUIDPoolRangeEnd")
    bad = [
        (name, value)
        for name, value in (("pKeyGUIDPoolRangeStart", start), ("pKeyGUIDPoolRangeEnd", end))
        if not _GUID.match(str(value or ""))
    ]
    for name, value in bad:
        yield Violation(
            f"ibKubernetes.{name} {value!r} is not a GUID (xx:xx:xx:xx:xx:xx:xx:xx, hex)",
            ("spec", "ibKubernetes", name),
        )
    if not bad and int(str(end).replace(":", ""), 16) <= int(str(start).replace(":", ""), 16):
        yield Violation(
            "ibKubernetes GUID pool ends at or before its start",
            ("spec", "ibKubernetes", "pKeyGUIDPoolRangeEnd"),
        )


def _plugin_config(text: str, pattern: re.Pattern, entries: str, at: tuple) -> Iterator[Violation]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        yield Violation(f"the device plugin config is not JSON ({exc.msg})", at)
        return
    if not isinstance(config, dict):
        yield Violation("the device plugin config is not a JSON object", at)
        return
    for entry in dicts(config.get(entries)):
        name = entry.get("resourceName")
        if isinstance(name, str) and not pattern.match(name):
            yield Violation(f"{entries} resourceName {name!r} does not match {pattern.pattern}", at)
        prefix = entry.get("resourcePrefix")
        if isinstance(prefix, str) and not _FQDN.match(prefix):
            yield Violation(f"{entries} resourcePrefix {prefix!r} is not a domain name", at)


@resource_rule(
    id="hostdevicenetwork-resource-name",
    severity=ERROR,
    title="HostDeviceNetworks name a resource the Network Operator's webhook accepts",
    why="The Network Operator's webhook (deployed with the chart's "
    "operator.admissionController.enabled) refuses a HostDeviceNetwork whose resourceName is not "
    "letters, digits, '-', '_' and '.', starting and ending with a letter or digit (a "
    "prefixed name such as nvidia.com/hostdev is refused: the prefix comes from the device "
    "plugin's config).",
    fix="Write the resource name without its prefix (hostdev, not nvidia.com/hostdev).",
    kinds=("HostDeviceNetwork",),
    source=(
        NETWORK_OPERATOR + "api/v1alpha1/validator/hostdevicenetwork_webhook.go#L110-L127",
        NETWORK_OPERATOR + "deployment/network-operator/values.yaml#L293-L295",
    ),
    when={
        "error": "the render deploys the webhook (a ValidatingWebhookConfiguration for "
        "hostdevicenetworks)",
        "warning": "the render does not show the webhook deployed (off by default)",
    },
)
def hostdevicenetwork_resource_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    name = mapping(doc.obj.get("spec")).get("resourceName")
    if isinstance(name, str) and not _RDMA_DP_RESOURCE.match(name):
        on = ctx.memo(
            ("network-operator-webhook", "hostdevicenetworks"),
            lambda: _network_operator_webhook(ctx, "hostdevicenetworks"),
        )
        found = Violation(
            f"resourceName {name!r} does not match {_RDMA_DP_RESOURCE.pattern}",
            ("spec", "resourceName"),
        )
        yield from _network_operator_graded(iter([found]), on)


# -- SR-IOV network device plugin v3.11.0: its config.json -----------------------------------

DEVICE_PLUGIN = "https://github.com/k8snetworkplumbingwg/sriov-network-device-plugin/blob/v3.11.0/"
DP_MANAGER = DEVICE_PLUGIN + "cmd/sriovdp/manager.go"
DP_DEVICE_TYPES = ("netDevice", "accelerator", "auxNetDevice")
_DP_RESOURCE = re.compile(r"^[a-zA-Z0-9_-]+$")
# Selector fields each deviceType's selectors decode as lists of strings, and as booleans
# (pkg/types/types.go): another JSON type there fails the decoding and the plugin drops
# the entry. Fields of other device types are ignored.
_DP_COMMON = ("vendors", "devices", "drivers")
_DP_NET = ("pfNames", "rootDevices", "linkTypes", "acpiIndexes")
_DP_LIST_SELECTORS = {
    "netDevice": (*_DP_COMMON, "pciAddresses", *_DP_NET, "ddpProfiles", "pKeys"),
    "accelerator": (*_DP_COMMON, "pciAddresses"),
    "auxNetDevice": (*_DP_COMMON, *_DP_NET, "auxTypes"),
}
_DP_BOOL_SELECTORS = {
    "netDevice": ("isRdma", "needVhostNet"),
    "auxNetDevice": ("isRdma", "needVhostNet"),
}
_DP_TEMPLATE = re.compile(r"\{\{|\$\(|\$\{")


def _dp_selectors_problem(selectors: Any, device_type: str) -> str | None:
    """Why parseObjectOrSlice cannot decode the selectors (an object or a non-empty list
    of objects whose list fields are lists of strings)."""
    items = selectors if isinstance(selectors, list) else [selectors]
    if isinstance(selectors, list) and not selectors:
        return "selectors is an empty list"
    for item in items:
        if item is None:
            continue
        if not isinstance(item, dict):
            return "selectors is neither an object nor a list of objects"
        for key in _DP_LIST_SELECTORS[device_type]:
            value = item.get(key)
            if value is not None and not (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                return f"selectors.{key} is not a list of strings ({value!r})"
        for key in _DP_BOOL_SELECTORS.get(device_type, ()):
            value = item.get(key)
            if value is not None and not isinstance(value, bool):
                return f"selectors.{key} is not true or false ({value!r})"
    return None


def _dp_refusals(text: str, at: tuple, checked_names: bool) -> Iterator[Violation]:
    """What v3.11.0's readConfig and validConfigs refuse in a config.json; `checked_names`:
    the NicClusterPolicy webhook reports unparsable JSON and names outside its pattern."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        if not checked_names:
            yield Violation(
                f"config.json is not JSON ({exc.msg}): the device plugin exits without "
                "advertising any resource",
                at,
            )
        return
    entries = mapping(config).get("resourceList")
    if not isinstance(entries, list):
        return
    seen: dict[tuple[str, str], int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        name = entry.get("resourceName")
        label = f"resourceList[{index}]"
        device_type = entry.get("deviceType")
        if isinstance(device_type, str) and device_type and device_type not in DP_DEVICE_TYPES:
            hint = next((t for t in DP_DEVICE_TYPES if t.lower() == device_type.lower()), None)
            yield Violation(
                f"{label} deviceType {device_type!r} is not one of "
                f"{', '.join(DP_DEVICE_TYPES)}"
                + (f" (the case matters: {hint})" if hint else "")
                + ": the device plugin exits and advertises nothing",
                at,
            )
            continue
        if device_type is not None and not isinstance(device_type, str):
            continue
        if "selectors" not in entry or entry.get("selectors") is None:
            yield Violation(
                f"{label} has no selectors: the device plugin crashes decoding them", at
            )
            continue
        problem = _dp_selectors_problem(entry.get("selectors"), device_type or "netDevice")
        if problem:
            yield Violation(
                f"{label} {problem}: the device plugin drops the entry and never advertises "
                f"{name or 'its resource'}",
                at,
            )
            continue
        if isinstance(name, str) and not _DP_TEMPLATE.search(name):
            webhook_ok = bool(_SRIOV_DP_RESOURCE.match(name))
            if not _DP_RESOURCE.match(name) and (not checked_names or webhook_ok):
                why = " (the prefix goes in resourcePrefix)" if "/" in name else ""
                yield Violation(
                    f"{label} resourceName {name!r} has characters other than letters, "
                    f"digits, '_' and '-'{why}: the device plugin exits and advertises nothing",
                    at,
                )
        prefix = entry.get("resourcePrefix")
        if isinstance(name, str) and (prefix is None or isinstance(prefix, str)):
            key = (prefix or "", name)
            if key in seen:
                yield Violation(
                    f"{label} resourceName {(prefix + '/' if prefix else '') + name!r} repeats "
                    f"resourceList[{seen[key]}]: the device plugin exits and advertises nothing",
                    at,
                )
            else:
                seen[key] = index
        selectors = entry.get("selectors")
        for item in selectors if isinstance(selectors, list) else [selectors]:
            if (
                (device_type or "netDevice") == "netDevice"
                and isinstance(item, dict)
                and item.get("isRdma") is True
                and item.get("vdpaType")
            ):
                yield Violation(
                    f"{label} selectors set both isRdma and vdpaType: the device plugin "
                    "refuses the config and exits",
                    at,
                )
                break


def _dp_config_text(doc: Document) -> tuple[str, tuple, bool] | None:
    if doc.kind == "NicClusterPolicy":
        config = mapping(mapping(doc.obj.get("spec")).get("sriovDevicePlugin")).get("config")
        if isinstance(config, str) and not _DP_TEMPLATE.search(config):
            return config, ("spec", "sriovDevicePlugin", "config"), True
        return None
    text = mapping(doc.obj.get("data")).get("config.json")
    if isinstance(text, str) and '"resourceList"' in text and not _DP_TEMPLATE.search(text):
        return text, ("data", "config.json"), False
    return None


@resource_rule(
    id="sriov-device-plugin-config",
    severity=ERROR,
    title="The SR-IOV device plugin's config.json is one it loads",
    why="The SR-IOV network device plugin reads its resourceList at start: a config that is "
    "not JSON, a deviceType other than netDevice, accelerator or auxNetDevice (the case "
    "matters: netdevice is refused), a resourceName with characters other than letters, "
    "digits, '_' and '-' (nvidia.com/rdma_vf: the prefix belongs in resourcePrefix), two "
    "entries with the same prefixed name, or isRdma with vdpaType make it exit, so no "
    "node advertises any of its resources; an entry without selectors crashes it, and one "
    'whose selectors do not decode (vendors: "15b3" instead of a list) is dropped. Pods '
    "requesting the VFs stay Pending.",
    fix="Write deviceType netDevice (or leave it out), resourceName without prefix (set "
    "resourcePrefix: nvidia.com), one entry per name, and selectors as an object of lists "
    '({"vendors": ["15b3"], "pfNames": ["ens1f0"]}).',
    kinds=("ConfigMap", "NicClusterPolicy"),
    source=(
        DP_MANAGER + "#L87-L104",
        DP_MANAGER + "#L199-L241",
        DEVICE_PLUGIN + "cmd/sriovdp/main.go#L47-L61",
        DEVICE_PLUGIN + "pkg/utils/utils.go#L300-L304",
        DEVICE_PLUGIN + "pkg/factory/factory.go#L190-L225",
        DEVICE_PLUGIN + "pkg/netdevice/netDeviceProvider.go#L161-L174",
    ),
)
def sriov_device_plugin_config(doc: Document, ctx: Context) -> Iterator[Violation]:
    found = _dp_config_text(doc)
    if found is not None:
        yield from _dp_refusals(*found)


# -- SR-IOV Network Operator v1.6.0: pool configs --------------------------------------------

POOL_KIND = "SriovNetworkPoolConfig"


def _pool_labels(pool: Document) -> dict[str, str] | None:
    """The pool's node selector as exact labels; None when it has expressions, templated
    values or is a hardware-offload pool (the drain controller skips those)."""
    spec = _policy_spec(pool)
    if mapping(spec.get("ovsHardwareOffloadConfig")).get("name"):
        return None
    selector = spec.get("nodeSelector")
    if selector is None:
        return {}
    if not isinstance(selector, dict) or selector.get("matchExpressions"):
        return None
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, dict) or any(
        not isinstance(v, str) or _DP_TEMPLATE.search(v) for v in labels.values()
    ):
        return None
    return {str(k): v for k, v in labels.items()}


# Labels of one selector whose subsets are enumerated; a longer selector is compared only
# as a whole and with the empty selector (real node selectors carry a few labels).
_SUBSET_LABELS = 8


def _pool_overlaps(ctx: Context) -> dict[int, tuple[Document, bool]]:
    """id(pool) -> the first earlier pool whose nodes it shares (one selects every node of
    the other). Once per render: each pool looks up the subsets of its own selector among
    the pools' selectors, so the pass is linear in the number of pools."""
    pools = [(p, _pool_labels(p)) for p in ctx.of_kind(POOL_KIND)]
    pools = [(p, labels) for p, labels in pools if labels is not None]
    by_selector: dict[frozenset, list[int]] = {}
    for index, (_, labels) in enumerate(pools):
        by_selector.setdefault(frozenset(labels.items()), []).append(index)
    first_partner: dict[int, int] = {}
    for index, (_, labels) in enumerate(pools):
        for subset in _subsets(labels):
            for other in by_selector.get(subset, ()):
                if other == index:
                    continue
                earlier, later = min(index, other), max(index, other)
                if first_partner.get(later, len(pools)) > earlier:
                    first_partner[later] = earlier
    return {
        id(pools[later][0]): (pools[earlier][0], True) for later, earlier in first_partner.items()
    }


def _subsets(labels: dict[str, str]) -> Iterator[frozenset]:
    items = sorted(labels.items())
    if len(items) > _SUBSET_LABELS:
        yield frozenset()
        yield frozenset(items)
        return
    for mask in range(1 << len(items)):
        yield frozenset(item for bit, item in enumerate(items) if mask >> bit & 1)


@resource_rule(
    id="sriov-pool-config-overlap",
    severity=ERROR,
    title="No node is in two SriovNetworkPoolConfigs",
    why="The SR-IOV operator's drain controller finds the pool of a node before draining it "
    "for a policy change: a node whose labels match the nodeSelector of two pool configs "
    "(an empty nodeSelector matches every node) is refused ('node is part of more then one "
    "pool'), never drained, and its VFs are never configured: the policy change never "
    "reaches it.",
    fix="Give the pools disjoint node selectors (a label only one pool matches), and no "
    "pool an empty nodeSelector while others exist.",
    kinds=(POOL_KIND,),
    source=SRIOV_OPERATOR + "controllers/drain_controller_helper.go#L210-L262",
)
def sriov_pool_config_overlap(doc: Document, ctx: Context) -> Iterator[Violation]:
    overlaps = ctx.memo("sriov-pool-overlaps", lambda: _pool_overlaps(ctx))
    found = overlaps.get(id(doc))
    if found is not None:
        other = found[0]
        yield Violation(
            f"every node this pool selects is also selected by SriovNetworkPoolConfig "
            f"{other.name}, or the reverse: the drain controller refuses nodes in two pools "
            "and never configures them",
            ("spec", "nodeSelector"),
        )
