"""What the overlay assumes of the nodes and the fabric, checked on the live cluster.

- topology: every GPU node is Ready and carries the label of every topology level (or the
  pack key), and no domain holds more nodes than the profile says (the capacity
  `trainops validate` checks required topology requests against);
- the RDMA resource: the GPU nodes advertise the profile's `rdmaResource`, as the device
  plugin the `rdmaProvider` runs is configured to;
- addresses: pods attached to the training network got their `net1` address from the
  profile's `ipRange` (Multus's network-status annotation says which);
- checkpoint writes: the checkpoint probe (`trainops preflight --emit-checkpoint-probe`, a
  DaemonSet on the GPU nodes) wrote a file into the checkpoint claim from every node;
- the UFM secret ib-kubernetes reads, where the Network Operator applies a partition key;
- GPUDirect on hosts that carry the GPU driver (`installed: [gpu-driver]`): the GPU
  Operator then runs no driver container, so nothing of it loads nvidia_peermem or the
  open kernel modules, and its ClusterPolicy gets ready all the same
  (`trainops.profile.host_driver`); the GPUDirect probe (`--emit-gpudirect-probe`, a
  DaemonSet on the GPU nodes) is Ready on each node that provides them.
"""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from typing import Any

from trainops.kube import Cluster, items
from trainops.model import Document
from trainops.preflight.platform import (
    FAIL,
    GPU_PRODUCT_LABEL,
    PASS,
    WARN,
    Check,
    get_or_none,
    gpu_nodes,
)
from trainops.profile.fabric import NETWORK_OPERATOR_NAMESPACE, UFM_SECRET
from trainops.profile.host_driver import host_duty
from trainops.profile.model import ClusterProfile
from trainops.profile.tenancy import TENANT_LABEL
from trainops.profile.topology import HOSTNAME

NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
PROBE = "checkpoint-probe"
PROBE_NAMESPACE = "training"
PROBE_DIR = "/checkpoints/.preflight"
GPUDIRECT_PROBE = "gpudirect-probe"


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _levels(profile: ClusterProfile) -> list[tuple[str, int | None]]:
    if profile.topology:
        return [(lvl.label, lvl.nodes) for lvl in profile.topology if lvl.label != HOSTNAME]
    if profile.topologyKey != HOSTNAME:
        return [(profile.topologyKey, None)]
    return []


def check_topology(cluster: Cluster, profile: ClusterProfile) -> list[Check]:
    nodes = gpu_nodes(cluster, profile)
    if not nodes:
        return []  # check_nodes already fails
    levels = _levels(profile)
    not_ready = [_name(n) for n in nodes if not _ready(n)]
    unlabelled = [
        f"{_name(n)} (no {', '.join(label for label, _ in levels if label not in _labels(n))})"
        for n in nodes
        if any(label not in _labels(n) for label, _ in levels)
    ]
    oversized = []
    for label, size in levels:
        if size is None:
            continue
        # Domains are named by the values of the labels down to this one (a rack name
        # may repeat in two blocks).
        outer = [lbl for lbl, _ in levels[: levels.index((label, size)) + 1]]
        counts = Counter(tuple(_labels(n).get(lbl) for lbl in outer) for n in nodes)
        oversized += [
            f"{label}={'/'.join(str(v) for v in key)} has {count} nodes, the profile says {size}"
            for key, count in counts.items()
            if count > size and None not in key
        ]
    names = ", ".join(label for label, _ in levels) or "none (placement needs none)"
    problems = []
    if not_ready:
        problems.append(f"not Ready: {', '.join(not_ready[:5])}")
    if unlabelled:
        problems.append(f"unlabelled: {'; '.join(unlabelled[:5])}")
    if problems:
        return [
            Check(
                "topology",
                FAIL,
                f"{len(nodes)} GPU nodes, levels {names}; " + "; ".join(problems),
                "Pods need Ready nodes, and Kueue's topology-aware scheduling (or pack's "
                "affinity) places them only on nodes with every level's label: label the "
                "nodes, or correct topology/topologyKey in cluster.yaml.",
            )
        ]
    if oversized:
        return [
            Check(
                "topology",
                WARN,
                "; ".join(oversized[:5]),
                "Correct topology[].nodes in cluster.yaml: `trainops validate` checks "
                "required topology requests against it.",
            )
        ]
    return [Check("topology", PASS, f"{len(nodes)} GPU nodes Ready, labelled with {names}")]


def check_rdma_resource(cluster: Cluster, profile: ClusterProfile) -> list[Check]:
    if not profile.rdma:
        return []
    nodes = gpu_nodes(cluster, profile)
    resource = profile.rdmaResource

    def advertised(node: dict[str, Any]) -> int:
        value = ((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)
        try:
            return int(str(value))
        except ValueError:
            return 0

    enough = [n for n in nodes if advertised(n) >= profile.rdmaPerPod]
    detail = (
        f"{len(enough)} of {len(nodes)} GPU nodes advertise {resource} "
        f"(>= {profile.rdmaPerPod} per pod)"
    )
    if len(enough) == len(nodes) and nodes:
        return [Check("rdma resource", PASS, detail)]
    short = [f"{_name(n)} ({advertised(n)})" for n in nodes if n not in enough]
    if short:
        detail += "; short: " + ", ".join(short[:5])
    by_provider = {
        "network-operator": "the NicClusterPolicy's device plugin (platform/fabric.yaml): "
        "kubectl get nicclusterpolicy nic-cluster-policy -o yaml (status per component)",
        "sriov-network-operator": "the SriovNetworkNodePolicy (platform/fabric.yaml): kubectl -n "
        "sriov-network-operator get sriovnetworknodestates (VFs and sync status per node)",
        "preinstalled": "the hosts' device plugin: it must advertise exactly rdmaResource",
    }
    return [
        Check(
            "rdma resource",
            FAIL if not enough else WARN,
            detail,
            f"Training pods request {profile.rdmaPerPod} {resource} each; check "
            + by_provider[profile.rdmaProvider],
        )
    ]


def _tenant_namespaces(docs: list[Document]) -> list[str]:
    return sorted(
        d.name
        for d in docs
        if d.kind == "Namespace" and TENANT_LABEL in (d.metadata.get("labels") or {})
    ) or ["training"]


def _net1_addresses(pod: dict[str, Any]) -> list[str]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(NETWORK_STATUS)
    try:
        entries = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("interface") == "net1":
            out += [str(ip) for ip in entry.get("ips") or []]
    return out


def check_addresses(cluster: Cluster, profile: ClusterProfile, docs: list[Document]) -> list[Check]:
    network = ipaddress.ip_network(profile.ipRange, strict=False)
    attached, outside = 0, []
    for namespace in _tenant_namespaces(docs):
        for pod in items(cluster, f"/api/v1/namespaces/{namespace}/pods"):
            addresses = _net1_addresses(pod)
            if addresses:
                attached += 1
            for address in addresses:
                try:
                    inside = ipaddress.ip_address(address.split("/")[0]) in network
                except ValueError:
                    inside = False
                if not inside:
                    outside.append(f"{namespace}/{_name(pod)} {address}")
    if outside:
        return [
            Check(
                "net1 addresses",
                FAIL,
                f"outside {profile.ipRange}: " + "; ".join(outside[:5]),
                "The pod's net1 did not come from the training network's whereabouts range: "
                "another NetworkAttachmentDefinition, or one edited by hand (compare with "
                "Git: `trainops preflight` checks the networks above).",
            )
        ]
    if not attached:
        return [
            Check(
                "net1 addresses",
                WARN,
                "no pod attached to the training network yet",
                "Run the preflight job (trainops preflight OVERLAY --emit-job | kubectl "
                "create -f -) and check again.",
            )
        ]
    return [Check("net1 addresses", PASS, f"{attached} pods, net1 inside {profile.ipRange}")]


def check_checkpoint_writes(cluster: Cluster, profile: ClusterProfile) -> list[Check]:
    nodes = [_name(n) for n in gpu_nodes(cluster, profile)]
    probe = get_or_none(cluster, f"/apis/apps/v1/namespaces/{PROBE_NAMESPACE}/daemonsets/{PROBE}")
    if probe is None:
        return [
            Check(
                "checkpoint writes",
                WARN,
                "not probed",
                "Start the probe (trainops preflight OVERLAY --emit-checkpoint-probe | kubectl "
                "apply -f -), check again, then delete it.",
            )
        ]
    wrote = _probe_ready_nodes(cluster, PROBE)
    missing = [n for n in nodes if n not in wrote]
    if missing:
        return [
            Check(
                "checkpoint writes",
                FAIL,
                f"{len(nodes) - len(missing)} of {len(nodes)} GPU nodes wrote to the checkpoint "
                f"claim; not: {', '.join(missing[:5])}",
                f"kubectl -n {PROBE_NAMESPACE} describe pod -l app={PROBE}: a node that cannot "
                "mount or write the claim cannot resume a run (storageClass in cluster.yaml).",
            )
        ]
    return [
        Check(
            "checkpoint writes",
            PASS,
            f"every one of {len(nodes)} GPU nodes wrote {PROBE_DIR}/<node> to the claim",
        )
    ]


def _probe_ready_nodes(cluster: Cluster, app: str) -> set[str]:
    """The nodes where a probe DaemonSet's pod is Ready."""
    pods = items(cluster, f"/api/v1/namespaces/{PROBE_NAMESPACE}/pods", labelSelector=f"app={app}")
    return {
        str((p.get("spec") or {}).get("nodeName"))
        for p in pods
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    }


def check_host_gpudirect(cluster: Cluster, profile: ClusterProfile) -> list[Check]:
    """Where the hosts carry the GPU driver, every GPU node provides what the profile's
    gpudirect needs (nvidia_peermem loaded, or the open kernel modules)."""
    duty = host_duty(profile)
    if duty is None:
        return []
    nodes = [_name(n) for n in gpu_nodes(cluster, profile)]
    path = f"/apis/apps/v1/namespaces/{PROBE_NAMESPACE}/daemonsets/{GPUDIRECT_PROBE}"
    if get_or_none(cluster, path) is None:
        return [
            Check(
                duty.check,
                WARN,
                f"not probed (the hosts must have {duty.provides})",
                "Start the probe (trainops preflight OVERLAY --emit-gpudirect-probe | kubectl "
                "apply -f -), check again, then delete it. " + duty.fix,
            )
        ]
    ready = _probe_ready_nodes(cluster, GPUDIRECT_PROBE)
    missing = [n for n in nodes if n not in ready]
    if missing or not nodes:
        return [
            Check(
                duty.check,
                FAIL,
                f"{len(nodes) - len(missing)} of {len(nodes)} GPU nodes have {duty.provides}; "
                f"not: {', '.join(missing[:5]) or 'no GPU node'}",
                f"Pods expecting GPUDirect (TRAINER_EXPECT_GDR) fail there, and NCCL without it "
                f"stages every transfer through host memory. {duty.fix} (kubectl -n "
                f"{PROBE_NAMESPACE} describe pod -l app={GPUDIRECT_PROBE} if the probe did "
                "not start.)",
            )
        ]
    return [Check(duty.check, PASS, f"every one of {len(nodes)} GPU nodes has {duty.provides}")]


def check_ufm_secret(cluster: Cluster, profile: ClusterProfile) -> list[Check]:
    if not (profile.pkey and profile.rdmaProvider == "network-operator"):
        return []
    found = get_or_none(
        cluster, f"/api/v1/namespaces/{NETWORK_OPERATOR_NAMESPACE}/secrets/{UFM_SECRET}"
    )
    if found is None:
        return [
            Check(
                "ufm secret",
                FAIL,
                f"{NETWORK_OPERATOR_NAMESPACE}/{UFM_SECRET} missing",
                "ib-kubernetes applies the partition key through UFM with these credentials; "
                "create the Secret (outside Git) as the Network Operator's docs describe.",
            )
        ]
    return [Check("ufm secret", PASS, f"{NETWORK_OPERATOR_NAMESPACE}/{UFM_SECRET} exists")]


def checkpoint_probe(profile: ClusterProfile) -> dict[str, Any]:
    """A DaemonSet on the GPU nodes: each pod writes its node's name into the checkpoint
    claim and is Ready once the file reads back."""
    write = (
        f'mkdir -p {PROBE_DIR} && echo "$NODE_NAME" > {PROBE_DIR}/$NODE_NAME && sync '
        "&& exec sleep infinity"
    )
    container = {
        "name": "probe",
        "image": profile.image,
        "command": ["/bin/sh", "-c", write],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "readinessProbe": {
            "exec": {"command": ["/bin/sh", "-c", f"test -s {PROBE_DIR}/$NODE_NAME"]},
            "periodSeconds": 5,
        },
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
    }
    volumes = [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}}]
    return _probe_daemonset(profile, PROBE, container, volumes)


def gpudirect_probe(profile: ClusterProfile) -> dict[str, Any] | None:
    """A DaemonSet on the GPU nodes whose pod is Ready where the node provides what
    GPUDirect needs of hosts that carry the driver; None where the hosts need not."""
    duty = host_duty(profile)
    if duty is None:
        return None
    container = {
        "name": "probe",
        "image": profile.image,
        "command": ["/bin/sh", "-c", "exec sleep infinity"],
        "readinessProbe": {
            "exec": {"command": ["/bin/sh", "-c", duty.readiness]},
            "periodSeconds": 10,
        },
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return _probe_daemonset(profile, GPUDIRECT_PROBE, container, [])


def _probe_daemonset(
    profile: ClusterProfile, app: str, container: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    """An unprivileged, non-root DaemonSet with one pod per GPU node (no GPU requested)."""
    selector = {GPU_PRODUCT_LABEL: profile.gpuProduct} if profile.gpuProduct else {}
    spec: dict[str, Any] = {
        "securityContext": {
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "runAsNonRoot": True,
            "fsGroup": 1000,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
    }
    if volumes:
        spec["volumes"] = volumes
    if selector:
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": app, "namespace": PROBE_NAMESPACE, "labels": {"app": app}},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": spec},
        },
    }
