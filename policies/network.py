"""Multus secondary networks: attachments that resolve, NAD configs that work."""

from __future__ import annotations

import bisect
import ipaddress
import json
import re
from collections.abc import Iterator

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate

from . import common


@pod_rule(
    id="multus-network-missing",
    severity=ERROR,
    source="https://github.com/k8snetworkplumbingwg/multus-cni/blob/v4.3.0/pkg/k8sclient/k8sclient.go#L297",
    title="Multus attachments name a NetworkAttachmentDefinition that exists",
    why="Multus looks the NAD up in the pod's namespace unless the annotation names another; "
    "a missing one keeps the pod in ContainerCreating (or, with some setups, starts it "
    "without the training interface).",
    fix="Create the NAD in the pod's namespace, or write namespace/name in the annotation.",
    applies=common.attaches_networks,
)
def network_missing(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    value = pod.annotations.get(multus.ANNOTATION)
    if not isinstance(value, str) or not value.strip():
        return
    at = (*pod.path[:-1], "metadata", "annotations", multus.ANNOTATION)
    try:
        multus.attachments(value, pod.doc.namespace or "default")
    except multus.AnnotationError as exc:
        yield Violation(f"{multus.ANNOTATION} is invalid: {exc}", at)
        return
    if not ctx.has_platform and not ctx.of_kind("NetworkAttachmentDefinition"):
        return  # a manifest on its own: its networks are defined elsewhere
    for attachment, nad in common.attached_nads(pod, ctx):
        if nad is not None:
            continue
        named = "/".join(part for part in (attachment.namespace, attachment.name) if part)
        generators = ctx.memo("nad-generators", lambda: _by_name(ctx.of_kind(*NAD_GENERATORS)))
        generators = generators.get(attachment.name, [])
        places = {_generated_namespace(g) for g in generators}
        if attachment.namespace in places or (generators and not attachment.namespace):
            continue  # the operator writes that NetworkAttachmentDefinition
        if generators:
            yield Violation(
                f"network {named}: {generators[0].kind} {attachment.name} writes its "
                f"NetworkAttachmentDefinition in namespace {sorted(places)[0]} "
                "(spec.networkNamespace), not the pod's",
                at,
            )
            continue
        yield Violation(
            f"network {named} is not defined in this render (no "
            "NetworkAttachmentDefinition with that name and namespace)",
            at,
        )


# Custom resources whose operator writes a NetworkAttachmentDefinition of the same name:
# SR-IOV Network Operator v1.6 (in spec.networkNamespace, else the object's namespace) and
# NVIDIA Network Operator (cluster-scoped, in spec.networkNamespace, else default).
NAD_GENERATORS = (
    "SriovNetwork",
    "SriovIBNetwork",
    "MacvlanNetwork",
    "HostDeviceNetwork",
    "IPoIBNetwork",
)


def _generated_namespace(doc: Document) -> str:
    spec = doc.obj.get("spec")
    namespace = spec.get("networkNamespace") if isinstance(spec, dict) else None
    return str(namespace or doc.namespace or "default")


@resource_rule(
    id="nad-config-invalid",
    severity=ERROR,
    source=(
        "https://github.com/k8snetworkplumbingwg/multus-cni/blob/v4.3.0/pkg/types/conf.go#L58",
        "https://github.com/containernetworking/plugins/blob/v1.9.1/plugins/main/vlan/vlan.go#L187",
        "https://github.com/containernetworking/plugins/blob/v1.9.1/plugins/main/ipvlan/ipvlan.go#L267",
    ),
    title="NetworkAttachmentDefinition configs are valid CNI JSON",
    why="spec.config is a JSON document in a string: schemas cannot see inside it. A syntax "
    "error, a missing type, or a vlan (or unchained ipvlan) plugin without IPAM, which both "
    "call their IPAM plugin unconditionally, is only found when the first pod fails to "
    "start. IPAM is optional for macvlan, bridge, host-device, sriov and ib-sriov: without "
    "it the interface comes up with no address (fine for pure RDMA/IB, not for anything "
    "that needs IP on it); a missing cniVersion is read as 0.1.0.",
    fix="Give the config cniVersion, name, type (or a plugins list of typed plugins) and, for "
    "macvlan/ipvlan/sriov/ib-sriov/host-device, an ipam section (whereabouts for multi-node).",
    kinds=("NetworkAttachmentDefinition",),
    when={
        "error": "spec.config is not a JSON object, has no type (or an empty or untyped "
        "plugins list), or a vlan plugin, or an ipvlan plugin not chained after one that "
        "assigns addresses, has no ipam section",
        "warning": "no cniVersion, an interface plugin whose IPAM is optional (macvlan, "
        "bridge, host-device, sriov, ib-sriov) without an ipam section, or a config name "
        "other than the object's",
    },
)
def nad_config_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    at = ("spec", "config")
    cni, problem = multus.config(doc.obj)
    if cni is None:
        yield Violation(problem or "invalid config", at)
        return
    if not cni.get("cniVersion"):
        yield Violation("config has no cniVersion", at, severity=WARNING)
    if "plugins" in cni and not multus.plugins(cni):
        yield Violation("config has an empty plugins list", at)
    for plugin in multus.plugins(cni):
        if not plugin.get("type"):
            yield Violation("a plugin in the config has no type", at)
    interface_plugins = [t for t in multus.types(cni) if t in multus.NEEDS_IPAM]
    if interface_plugins and multus.ipam(cni) is None:
        yield Violation(
            f"{interface_plugins[0]} network has no ipam section: pods get no address",
            at,
            severity=None if _ipam_required(cni) else WARNING,
        )
    if cni.get("name") and cni["name"] != doc.name:
        yield Violation(
            f"config name {cni['name']!r} differs from the object's name {doc.name!r}",
            at,
            severity=WARNING,
        )


def _ipam_required(cni: dict) -> bool:
    """A plugin that runs its IPAM plugin whatever the config says: vlan always, ipvlan
    unless a plugin before it in the chain assigned addresses (containernetworking/plugins
    v1.9.1 vlan.go, ipvlan.go). macvlan, bridge, host-device, sriov and ib-sriov skip IPAM
    when the config has none."""
    kinds = multus.types(cni)
    return "vlan" in kinds or (bool(kinds) and kinds[0] == "ipvlan")


@resource_rule(
    id="nad-host-local-ipam",
    severity=WARNING,
    title="Training networks use cluster-wide IPAM",
    why="host-local IPAM allocates from the same range independently on every node, so pods on "
    "two nodes get the same address: exactly the multi-node case a training network serves.",
    fix="Use whereabouts (cluster-wide allocation) or give each node its own range.",
    kinds=("NetworkAttachmentDefinition",),
)
def host_local_ipam(doc: Document, ctx: Context) -> Iterator[Violation]:
    cni, _ = multus.config(doc.obj)
    section = multus.ipam(cni) if cni else None
    if section and section.get("type") == "host-local":
        yield Violation(
            "host-local IPAM hands out the same addresses on every node", ("spec", "config")
        )


@resource_rule(
    id="nad-ipam-overlap",
    severity=WARNING,
    title="Training networks do not share address ranges",
    why="Two networks with overlapping ranges give pods duplicate or unroutable addresses and "
    "make NCCL bootstrap pick the wrong route. (The same range under whereabouts in several "
    "namespaces is one network: whereabouts keeps one pool per range and network_name.)",
    fix="Give each NetworkAttachmentDefinition its own range.",
    kinds=("NetworkAttachmentDefinition",),
)
def ipam_overlap(doc: Document, ctx: Context) -> Iterator[Violation]:
    ranges = ctx.memo("nad-ranges", lambda: _Ranges(ctx.of_kind("NetworkAttachmentDefinition")))
    for net in _networks(doc):
        for theirs, other in ranges.overlapping(net, _whereabouts_pool(doc)):
            if other.resource_id != doc.resource_id:
                yield Violation(
                    f"range {net} overlaps {theirs} of {other.resource_id}", ("spec", "config")
                )


def _by_name(docs: list[Document]) -> dict[str, list[Document]]:
    out: dict[str, list[Document]] = {}
    for doc in docs:
        out.setdefault(doc.name, []).append(doc)
    return out


def _whereabouts_pool(doc: Document) -> str | None:
    """Whereabouts names its IP pool after the range and network_name: NADs that share both
    hand out addresses from one pool, never the same one twice."""
    cni, _ = multus.config(doc.obj)
    section = multus.ipam(cni) if cni else None
    if not section or section.get("type") != "whereabouts":
        return None
    return str(section.get("network_name") or "")


class _Ranges:
    """Every NAD's ranges, found by the range itself: CIDR blocks are nested or disjoint, so
    the blocks overlapping one are its supernets (one lookup per shorter prefix), itself,
    and its subnets (a run of the blocks sorted by first address)."""

    def __init__(self, nads: list[Document]):
        self._by_block: dict[tuple, dict[str | None, list]] = {}
        for nad in nads:
            pool = _whereabouts_pool(nad)
            for net in _networks(nad):
                key = (net.version, int(net.network_address), net.prefixlen)
                self._by_block.setdefault(key, {}).setdefault(pool, []).append((net, nad))
        self._starts = {
            version: sorted((start, prefix) for v, start, prefix in self._by_block if v == version)
            for version in (4, 6)
        }

    def overlapping(self, net, pool: str | None) -> Iterator[tuple]:
        """(range, NAD) pairs overlapping `net`, but for NADs of the same whereabouts
        pool as `pool` on the very same range."""
        first, last, bits = int(net.network_address), int(net.broadcast_address), net.max_prefixlen
        for prefix in range(net.prefixlen):
            start = first & ~((1 << (bits - prefix)) - 1)
            yield from self._members((net.version, start, prefix), skip=None)
        yield from self._members((net.version, first, net.prefixlen), skip=pool)
        starts = self._starts[net.version]
        at = bisect.bisect_right(starts, (first, net.prefixlen))
        for start, prefix in starts[at:]:
            if start > last:
                break
            yield from self._members((net.version, start, prefix), skip=None)

    def _members(self, key: tuple, skip: str | None) -> Iterator[tuple]:
        for pool, entries in self._by_block.get(key, {}).items():
            if skip is None or pool != skip:
                yield from entries


def _networks(doc: Document) -> list:
    cni, _ = multus.config(doc.obj)
    section = multus.ipam(cni) if cni else None
    out = []
    for cidr in multus.ipam_ranges(section or {}):
        try:
            out.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            continue
    return out


# Labels the training operator sets on each pod with a value of that pod's own.
PER_POD_OPERATOR_LABELS = (
    "training.kubeflow.org/replica-index",
    "training.kubeflow.org/job-role",
    "training.kubeflow.org/operator-name",
)


@resource_rule(
    id="service-selects-pods",
    severity=WARNING,
    title="Services select pods the render creates",
    why="A Service whose selector matches no pod has no endpoints: metrics are never scraped "
    "and clients hang. Training operator pods carry training.kubeflow.org/* labels, not "
    "job-name.",
    fix="Select labels the pod templates set, or training.kubeflow.org/job-name: <job>.",
    kinds=("Service",),
)
def service_selects_pods(doc: Document, ctx: Context) -> Iterator[Violation]:
    selector = (doc.obj.get("spec") or {}).get("selector")
    if not isinstance(selector, dict) or not selector:
        return
    namespace = doc.namespace or "default"
    if not ctx.pods_in_namespace(namespace):
        return  # the pods come from elsewhere
    exact = {k: v for k, v in selector.items() if k not in PER_POD_OPERATOR_LABELS}
    per_pod = len(exact) < len(selector)
    if exact:
        selected = ctx.pods_selected(namespace, exact)
        matched = any(pod.training or not per_pod for pod in selected)
    else:  # only per-pod operator labels: any training pod of the namespace has them
        matched = ctx.memo(
            ("training-pods", namespace),
            lambda: any(pod.training for pod in ctx.pods_in_namespace(namespace)),
        )
    if matched:
        return
    yield Violation(
        f"selector {selector} matches no pod template in namespace {namespace}",
        ("spec", "selector"),
    )


# -- CNI v1.3.0: the names libcni checks before it runs a plugin -----------------------------

CNI_UTILS = "https://github.com/containernetworking/cni/blob/v1.3.0/pkg/utils/utils.go"
CNI_ADD = "https://github.com/containernetworking/cni/blob/v1.3.0/libcni/api.go#L490-L504"
MAX_INTERFACE_NAME = 15
_CNI_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
_TEMPLATE = re.compile(r"\{\{|\$\(|\$\{")


def interface_name_problem(name: str) -> str | None:
    """utils.ValidateInterfaceName: why the name is refused, None when it is accepted."""
    if not name:
        return "is empty"
    if len(name.encode()) > MAX_INTERFACE_NAME:
        return f"is {len(name.encode())} characters long (at most {MAX_INTERFACE_NAME})"
    if name in (".", ".."):
        return "is . or .."
    if any(c in "/:" or c.isspace() for c in name):
        return "contains '/', ':' or whitespace"
    return None


def _json_interfaces(value: str) -> list[tuple[str, object]]:
    """(network, interface) of the JSON form's entries that set an interface."""
    try:
        items = json.loads(value)
    except json.JSONDecodeError:
        return []
    return [
        (str(item.get("name")), item["interface"])
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict) and item.get("interface") not in (None, "")
    ]


@pod_rule(
    id="cni-interface-name",
    severity=ERROR,
    title="Multus attachments name interfaces the CNI library accepts",
    why="Multus passes each attachment's interface name (the JSON form's interface, or "
    "name@interface) to libcni, which refuses a name longer than 15 bytes, '.' or '..', or "
    "one with '/', ':' or whitespace before it runs the plugin: the attachment fails and the "
    "pod never gets past sandbox creation.",
    fix="Use short interface names of letters, digits, '-', '_' or '.' (net1, rail0, "
    "ib-rail-0), at most 15 characters.",
    applies=common.attaches_networks,
    source=(CNI_UTILS + "#L59-L82", CNI_ADD),
)
def cni_interface_name(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    value = pod.annotations.get(multus.ANNOTATION)
    if not isinstance(value, str) or not value.strip() or _TEMPLATE.search(value):
        return
    at = (*pod.path[:-1], "metadata", "annotations", multus.ANNOTATION)
    if value.strip().startswith("["):
        named = _json_interfaces(value)
    else:
        parts = [part.strip().partition("@") for part in value.split(",")]
        named = [(network, interface) for network, _, interface in parts if interface]
    for network, interface in named:
        if not isinstance(interface, str):
            continue  # multus-network-missing: the annotation does not decode
        problem = interface_name_problem(interface)
        if problem:
            yield Violation(
                f"network {network}: interface name {interface!r} {problem}: libcni refuses "
                "it and the attachment fails",
                at,
            )


@resource_rule(
    id="cni-network-name",
    severity=ERROR,
    title="NetworkAttachmentDefinition configs have a network name the CNI library accepts",
    why="libcni checks the config's name before it runs a plugin: it must start with a "
    "letter or digit and hold only letters, digits, '_', '.' and '-' (a '/', ':' or a space "
    "is refused), so every pod attaching the network fails at sandbox creation.",
    fix="Name the config like the object (lowercase letters, digits, '-' and '.').",
    kinds=("NetworkAttachmentDefinition",),
    source=(CNI_UTILS + "#L26-L57", CNI_ADD),
)
def cni_network_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    cni, _ = multus.config(doc.obj)
    name = cni.get("name") if cni else None
    if isinstance(name, str) and name and not _TEMPLATE.search(name) and not _CNI_NAME.match(name):
        yield Violation(
            f"config name {name!r} has characters libcni refuses (it allows letters, "
            "digits, '_', '.' and '-', starting with a letter or digit): every attachment fails",
            ("spec", "config"),
        )
