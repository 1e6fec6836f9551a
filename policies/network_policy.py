"""NetworkPolicies around a training job: its pods must reach each other on every port and
reach the cluster DNS.

A pod selected by a NetworkPolicy of a policy type (Ingress, Egress) is isolated for that
direction: only what some rule of the policies selecting it allows gets through, and a
port a rule lists without a protocol is TCP (Kubernetes v1.35 NetworkPolicy). NCCL's
bootstrap and socket transports listen on ports the kernel picks (src/bootstrap.cc binds
its listening sockets to port 0), so a rule that lets the job's pods talk only on the
rendezvous port lets torch's store connect and leaves NCCL's first collective hanging.
Pods on the node's network (hostNetwork) are not subject to NetworkPolicies. A policy the
API server refuses (ValidateNetworkPolicy) isolates nothing and opens nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, effective_labels, mapping

from . import common
from .services import selects

NETWORK_POLICY = (
    "https://v1-35.docs.kubernetes.io/docs/concepts/services-networking/network-policies/"
    "#the-two-sorts-of-pod-isolation"
)
NCCL_BOOTSTRAP = "https://github.com/NVIDIA/nccl/blob/v2.30.7-1/src/bootstrap.cc"
# Linux's default ip_local_port_range: the ports a socket bound to port 0 gets.
EPHEMERAL = (32768, 60999)


# Kinds whose pods form one distributed job (ranks that connect to each other).
JOB_KINDS = frozenset({"Job", "JobSet", "LeaderWorkerSet"})


def _distributed(pod: PodTemplate, ctx: Context) -> bool:
    """A pod of a job of several pods whose ranks connect to each other."""
    if not (pod.training or (pod.doc.kind in JOB_KINDS and pod.uses_gpus)):
        return False
    return pod.spec.get("hostNetwork") is not True and common.multi_node(pod, ctx)


def _policies(ctx: Context, namespace: str) -> list[Document]:
    return ctx.memo(
        ("network-policies", namespace),
        lambda: [
            d for d in ctx.of_kind("NetworkPolicy") if (d.namespace or "default") == namespace
        ],
    )


def _types(policy: Document) -> set[str]:
    spec = mapping(policy.obj.get("spec"))
    stated = spec.get("policyTypes")
    if isinstance(stated, list) and stated:
        return {str(t) for t in stated}
    return {"Ingress", "Egress"} if "egress" in spec else {"Ingress"}


def _isolating(pod: PodTemplate, ctx: Context, direction: str) -> list[Document]:
    """The policies selecting the pod for `direction` (certainly, not maybe)."""
    namespace = common.pod_namespace(pod)
    if namespace is None:
        return []
    labels = effective_labels(pod)
    return [
        policy
        for policy in _policies(ctx, namespace)
        if direction in _types(policy)
        and selects(mapping(policy.obj.get("spec")).get("podSelector"), labels) is True
    ]


def _rules(policies: list[Document], direction: str) -> Iterator[dict[str, Any]]:
    key = "ingress" if direction == "Ingress" else "egress"
    for policy in policies:
        for rule in mapping(policy.obj.get("spec")).get(key) or []:
            if isinstance(rule, dict):
                yield rule


def _peer_allows(peer: dict[str, Any], labels: dict[str, Any]) -> bool:
    """Whether a from/to entry may admit a pod of the job's own namespace with `labels`."""
    if "ipBlock" in peer:
        return True  # may cover the pod network; not decided here
    if "namespaceSelector" in peer and "podSelector" not in peer:
        return True
    return selects(peer.get("podSelector"), labels) is not False


def _all_ports(ports: Any) -> bool:
    """Whether a rule's ports let NCCL's kernel-chosen TCP ports through."""
    if not isinstance(ports, list) or not ports:
        return True
    for port in ports:
        port = mapping(port)
        if port.get("protocol", "TCP") != "TCP":
            continue
        number, end = port.get("port"), port.get("endPort")
        if number is None:
            return True
        if (
            isinstance(number, int)
            and isinstance(end, int)
            and number <= EPHEMERAL[0]
            and end >= EPHEMERAL[1]
        ):
            return True
    return False


def _listed(ports: Any) -> str:
    out = []
    for port in ports if isinstance(ports, list) else []:
        port = mapping(port)
        number = port.get("port", "all")
        out.append(
            f"{port.get('protocol', 'TCP')}/{number}"
            + (f"-{port['endPort']}" if port.get("endPort") else "")
        )
    return ", ".join(out) or "none"


@pod_rule(
    id="network-policy-job-peers",
    severity=ERROR,
    title="NetworkPolicies let a job's pods reach each other on every port",
    why="A NetworkPolicy that selects a job's pods isolates them: only what its rules allow "
    "gets in (Ingress) or out (Egress). Ranks of a multi-pod job connect to each other on "
    "the rendezvous port and on ports the kernel picks for NCCL's bootstrap and socket "
    "transport (and Gloo's), so a policy admitting the job's pods on the rendezvous port "
    "only, or not at all, lets the job start and hangs it at its first collective.",
    fix="Add a rule that allows the job's own pods (podSelector on the job-name label) on "
    "all ports, in each direction the policy isolates. In a trainops run, that is the "
    "template's NetworkPolicy renamed with the job, as new-run writes it.",
    applies=common.training_pod,
    source=(NETWORK_POLICY, NCCL_BOOTSTRAP),
)
def job_peers(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if "NetworkPolicy" not in ctx.kinds or not _distributed(pod, ctx):
        return
    for direction, side in (("Ingress", "from"), ("Egress", "to")):
        policies = _isolating(pod, ctx, direction)
        if not policies:
            continue
        rules = list(_rules(policies, direction))
        for peer in ctx.pods(pod.doc):
            if peer.path == pod.path and (pod.replicas or 1) <= 1:
                continue  # a pod reaches itself without the pod network
            labels = effective_labels(peer)
            allowed = [
                rule
                for rule in rules
                if not rule.get(side)
                or any(_peer_allows(mapping(p), labels) for p in rule.get(side) or [])
            ]
            if any(_all_ports(rule.get("ports")) for rule in allowed):
                continue
            names = ", ".join(p.name for p in policies)
            how = (
                f"only on {'; '.join(_listed(r.get('ports')) for r in allowed)}"
                if allowed
                else "not at all"
            )
            yield Violation(
                f"{direction} of this {pod.role} pod is isolated by NetworkPolicy {names}, "
                f"which lets the job's {peer.role} pods {'in' if side == 'from' else 'be reached'} "
                f"{how}: NCCL's ports are chosen by the kernel",
                pod.path,
            )
            break


def _dns_rule(rule: dict[str, Any]) -> bool:
    """Whether an egress rule lets UDP port 53 out to a place the cluster DNS can be."""
    peers = rule.get("to")
    if (
        isinstance(peers, list)
        and peers
        and not any("namespaceSelector" in mapping(p) or "ipBlock" in mapping(p) for p in peers)
    ):
        return False  # pods of the policy's own namespace only
    ports = rule.get("ports")
    if not isinstance(ports, list) or not ports:
        return True
    for port in ports:
        port = mapping(port)
        if port.get("protocol", "TCP") != "UDP":
            continue
        number, end = port.get("port"), port.get("endPort")
        if number is None or isinstance(number, str):
            return True
        if isinstance(number, int) and (
            number == 53 or (isinstance(end, int) and number <= 53 <= end)
        ):
            return True
    return False


@pod_rule(
    id="network-policy-dns-egress",
    severity=ERROR,
    title="NetworkPolicies that isolate a job's egress let it reach the cluster DNS",
    why="A pod selected by a NetworkPolicy with policy type Egress may send only what a rule "
    "allows. Without a rule letting UDP port 53 out to the DNS pods' namespace (a port "
    "listed without a protocol is TCP only), every name lookup times out: the rendezvous "
    "host (MASTER_ADDR, the headless Service's pod names) never resolves and no rank joins.",
    fix="Add an egress rule to the kube-system namespace (or the DNS pods) on UDP and TCP port 53.",
    applies=common.training_pod,
    source=NETWORK_POLICY,
)
def dns_egress(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if "NetworkPolicy" not in ctx.kinds or not _distributed(pod, ctx):
        return
    policies = _isolating(pod, ctx, "Egress")
    if policies and not any(_dns_rule(rule) for rule in _rules(policies, "Egress")):
        yield Violation(
            f"egress of this {pod.role} pod is isolated by NetworkPolicy "
            f"{', '.join(p.name for p in policies)}, and no rule lets UDP port 53 out",
            pod.path,
        )


NETWORKING_VALIDATION = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/apis/networking/validation/"
    "validation.go"
)


@resource_rule(
    id="network-policy-invalid",
    severity=ERROR,
    title="NetworkPolicies are what the API server accepts",
    why="ValidateNetworkPolicy refuses a policy whose policyTypes are not Ingress or Egress, "
    "whose port is out of range or names a protocol other than TCP, UDP or SCTP, whose "
    "endPort comes without a numeric port or below it, whose peer sets ipBlock together "
    "with a selector (or nothing), or whose ipBlock has an invalid cidr or an except range "
    "outside it. The policy is never created, and the isolation (or the opening) it was "
    "written for does not exist.",
    fix="Correct the field as the finding says: policyTypes [Ingress, Egress], ports as "
    "{protocol: TCP, port: 29500, endPort: 29510}, ipBlock alone in its peer entry.",
    kinds=("NetworkPolicy",),
    source=NETWORKING_VALIDATION,
)
def network_policy_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    for index, kind in enumerate(spec.get("policyTypes") or []):
        if kind not in ("Ingress", "Egress"):
            yield Violation(
                f"policyType {kind} is not Ingress or Egress", ("spec", "policyTypes", index)
            )
    for section, side in (("ingress", "from"), ("egress", "to")):
        for index, rule in enumerate(spec.get(section) or []):
            rule = mapping(rule)
            at = ("spec", section, index)
            for position, port in enumerate(rule.get("ports") or []):
                yield from _port_problems(mapping(port), (*at, "ports", position))
            for position, peer in enumerate(rule.get(side) or []):
                yield from _peer_problems(mapping(peer), (*at, side, position))


def _port_problems(port: dict[str, Any], at: tuple) -> Iterator[Violation]:
    protocol = port.get("protocol", "TCP")
    if protocol not in ("TCP", "UDP", "SCTP"):
        yield Violation(f"protocol {protocol} is not TCP, UDP or SCTP", (*at, "protocol"))
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int) and not 1 <= number <= 65535:
        yield Violation(f"port {number} is not between 1 and 65535", (*at, "port"))
    if end is None:
        return
    if number is None:
        yield Violation("endPort without port", (*at, "endPort"))
    elif not isinstance(number, int):
        yield Violation(f"endPort with the named port {number}", (*at, "endPort"))
    elif isinstance(end, int) and end < number:
        yield Violation(f"endPort {end} is below port {number}", (*at, "endPort"))


def _peer_problems(peer: dict[str, Any], at: tuple) -> Iterator[Violation]:
    selectors = [k for k in ("podSelector", "namespaceSelector") if k in peer]
    block = peer.get("ipBlock")
    if block is None:
        if not selectors:
            yield Violation("peer without podSelector, namespaceSelector or ipBlock", at)
        return
    if selectors:
        yield Violation(f"ipBlock together with {' and '.join(selectors)}", (*at, "ipBlock"))
    block = mapping(block)
    try:
        network = ipaddress.ip_network(str(block.get("cidr")), strict=False)
    except ValueError:
        yield Violation(
            f"ipBlock cidr {block.get('cidr')!r} is not a CIDR", (*at, "ipBlock", "cidr")
        )
        return
    for position, excluded in enumerate(block.get("except") or []):
        try:
            inner = ipaddress.ip_network(str(excluded), strict=False)
        except ValueError:
            inner = None
        if (
            inner is None
            or inner.version != network.version
            or not inner.subnet_of(network)  # type: ignore[arg-type]
            or inner == network
        ):
            yield Violation(
                f"except {excluded} is not a range strictly inside {block.get('cidr')}",
                (*at, "ipBlock", "except", position),
            )
