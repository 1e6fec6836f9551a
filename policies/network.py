"""Multus secondary networks: attachments that resolve, NAD configs that work."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy.engine import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate

from . import common


@pod_rule(
    id="multus-network-missing",
    severity=ERROR,
    title="Multus attachments name a NetworkAttachmentDefinition that exists",
    why="Multus looks the NAD up in the pod's namespace unless the annotation names another; "
    "a missing one keeps the pod in ContainerCreating (or, with some setups, starts it "
    "without the training interface).",
    fix="Create the NAD in the pod's namespace, or write namespace/name in the annotation.",
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
    if not ctx.platform and not ctx.of_kind("NetworkAttachmentDefinition"):
        return  # a manifest on its own: its networks are defined elsewhere
    for attachment, nad in common.attached_nads(pod, ctx):
        if nad is None:
            yield Violation(
                f"network {attachment.namespace}/{attachment.name} is not defined in this "
                "render (no NetworkAttachmentDefinition with that name and namespace)",
                at,
            )


@resource_rule(
    id="nad-config-invalid",
    severity=ERROR,
    title="NetworkAttachmentDefinition configs are valid CNI JSON",
    why="spec.config is a JSON document in a string: schemas cannot see inside it. A syntax "
    "error, a missing type or cniVersion, or an interface plugin without IPAM is only found "
    "when the first pod fails to start.",
    fix="Give the config cniVersion, name, type (or a plugins list of typed plugins) and, for "
    "macvlan/ipvlan/sriov/ib-sriov/host-device, an ipam section (whereabouts for multi-node).",
    kinds=("NetworkAttachmentDefinition",),
)
def nad_config_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    at = ("spec", "config")
    cni, problem = multus.config(doc.obj)
    if cni is None:
        yield Violation(problem or "invalid config", at)
        return
    if not cni.get("cniVersion"):
        yield Violation("config has no cniVersion", at)
    if "plugins" in cni and not multus.plugins(cni):
        yield Violation("config has an empty plugins list", at)
    for plugin in multus.plugins(cni):
        if not plugin.get("type"):
            yield Violation("a plugin in the config has no type", at)
    interface_plugins = [t for t in multus.types(cni) if t in multus.NEEDS_IPAM]
    if interface_plugins and multus.ipam(cni) is None:
        yield Violation(
            f"{interface_plugins[0]} network has no ipam section: pods get no address", at
        )
    if cni.get("name") and cni["name"] != doc.name:
        yield Violation(
            f"config name {cni['name']!r} differs from the object's name {doc.name!r}",
            at,
            severity=WARNING,
        )


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
    "make NCCL bootstrap pick the wrong route.",
    fix="Give each NetworkAttachmentDefinition its own range.",
    kinds=("NetworkAttachmentDefinition",),
)
def ipam_overlap(doc: Document, ctx: Context) -> Iterator[Violation]:
    mine = _networks(doc)
    for other in ctx.of_kind("NetworkAttachmentDefinition"):
        if other.resource_id == doc.resource_id:
            continue
        for net in mine:
            for theirs in _networks(other):
                if net.version == theirs.version and net.overlaps(theirs):
                    yield Violation(
                        f"range {net} overlaps {theirs} of {other.resource_id}", ("spec", "config")
                    )


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


# Labels the training operator puts on the pods it creates, besides the template's own.
OPERATOR_LABELS = (
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
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
    templates = [
        p for d in ctx.everything if (d.namespace or "default") == namespace for p in ctx.pods(d)
    ]
    if not templates:
        return  # the pods come from elsewhere
    for pod in templates:
        labels = dict(pod.labels)
        if pod.training:
            labels.setdefault("training.kubeflow.org/job-name", pod.doc.name)
            labels.setdefault("training.kubeflow.org/replica-type", pod.role.lower())
        if all(labels.get(k) == v for k, v in selector.items()):
            return
        # Operator labels with other values (replica-index...) exist on some pod of the job.
        if pod.training and all(
            k in OPERATOR_LABELS or labels.get(k) == v for k, v in selector.items()
        ):
            return
    yield Violation(
        f"selector {selector} matches no pod template in namespace {namespace}",
        ("spec", "selector"),
    )
