"""What the platform render says must exist: namespaces, Multus, CRDs, networks,
claims, schedulable GPU nodes, queues and the GPU Operator."""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainops import quantity
from trainops.admission.vap import guess_resource
from trainops.kube import Cluster, NotFound, items
from trainops.model import Document
from trainops.profile.model import ClusterProfile, quantity_bytes

PASS, WARN, FAIL = "pass", "warn", "fail"

# Plural resource names of the custom kinds trainops renders or runs.
PLURALS = {
    "NetworkAttachmentDefinition": "network-attachment-definitions",
    "ClusterPolicy": "clusterpolicies",
    "LocalQueue": "localqueues",
    "ClusterQueue": "clusterqueues",
    "ResourceFlavor": "resourceflavors",
    "Queue": "queues",
    "PodGroup": "podgroups",
    "PyTorchJob": "pytorchjobs",
    "MPIJob": "mpijobs",
    "ServiceMonitor": "servicemonitors",
    "PodMonitor": "podmonitors",
    "PrometheusRule": "prometheusrules",
}
# Training jobs need these even though the platform overlay renders none.
JOB_CRDS = ("pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org")
CLUSTER_SCOPED = {
    "ClusterPolicy",
    "ClusterQueue",
    "ResourceFlavor",
    "Queue",
    "Topology",
    "WorkloadPriorityClass",
    "NicClusterPolicy",
}
GPU = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass
class Check:
    check: str
    status: str
    detail: str
    fix: str = ""


def _group_version(doc: Document) -> tuple[str, str]:
    group, _, version = doc.api_version.rpartition("/")
    return group, version


def _builtin(group: str) -> bool:
    return group in ("", "apps", "batch", "policy", "autoscaling") or (
        group.endswith(".k8s.io") and not group.endswith("x-k8s.io")
    )


def _plural(kind: str) -> str:
    return PLURALS.get(kind) or guess_resource(kind)


def _path(doc: Document) -> str:
    group, version = _group_version(doc)
    plural = _plural(doc.kind)
    if doc.kind in CLUSTER_SCOPED or not doc.namespace:
        return f"/apis/{group}/{version}/{plural}/{doc.name}"
    return f"/apis/{group}/{version}/namespaces/{doc.namespace}/{plural}/{doc.name}"


def get_or_none(cluster: Cluster, path: str) -> dict[str, Any] | None:
    try:
        return cluster.get(path)
    except NotFound:
        return None


def check_namespaces(cluster: Cluster, docs: list[Document]) -> list[Check]:
    names = sorted(
        {d.name for d in docs if d.kind == "Namespace"} | {d.namespace for d in docs if d.namespace}
    )
    checks = []
    for name in names:
        found = get_or_none(cluster, f"/api/v1/namespaces/{name}")
        checks.append(
            Check(
                f"namespace {name}",
                PASS if found else FAIL,
                "exists" if found else "missing",
                "" if found else "Sync the overlay's platform Application first.",
            )
        )
    return checks


def check_multus(cluster: Cluster) -> list[Check]:
    sets = [
        d
        for d in items(cluster, "/apis/apps/v1/daemonsets")
        if "multus" in (d.get("metadata") or {}).get("name", "")
    ]
    if not sets:
        return [
            Check(
                "multus",
                FAIL,
                "no Multus daemonset in the cluster",
                "Install Multus (base/operators/multus, synced with the platform).",
            )
        ]
    status = sets[0].get("status") or {}
    ready, desired = (
        int(status.get("numberReady") or 0),
        int(status.get("desiredNumberScheduled") or 0),
    )
    name = sets[0]["metadata"]["name"]
    if desired and ready == desired:
        return [Check("multus", PASS, f"{name}: {ready}/{desired} ready")]
    return [
        Check(
            "multus",
            WARN if ready else FAIL,
            f"{name}: {ready}/{desired} ready",
            "Pods on nodes without a ready Multus get no secondary network: "
            "kubectl -n kube-system describe daemonset " + name,
        )
    ]


def crd_names(docs: list[Document]) -> list[str]:
    names = {
        (d.obj.get("metadata") or {}).get("name")
        for d in docs
        if d.kind == "CustomResourceDefinition"
    }
    for doc in docs:
        group, _ = _group_version(doc)
        if not _builtin(group) and doc.kind != "CustomResourceDefinition":
            names.add(f"{_plural(doc.kind)}.{group}")
    return sorted(n for n in names | set(JOB_CRDS) if n)


def check_crds(cluster: Cluster, docs: list[Document]) -> list[Check]:
    checks = []
    for name in crd_names(docs):
        crd = get_or_none(
            cluster, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        )
        if crd is None:
            checks.append(
                Check(
                    f"crd {name}",
                    FAIL,
                    "not installed",
                    "Sync the platform Application (operators install their CRDs).",
                )
            )
            continue
        conditions = (crd.get("status") or {}).get("conditions") or []
        established = any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )
        checks.append(
            Check(
                f"crd {name}",
                PASS if established else FAIL,
                "Established" if established else "not Established",
                "" if established else f"kubectl describe crd {name}",
            )
        )
    return checks


def check_networks(cluster: Cluster, docs: list[Document]) -> list[Check]:
    checks = []
    for doc in (d for d in docs if d.kind == "NetworkAttachmentDefinition"):
        live = get_or_none(cluster, _path(doc))
        label = f"network {doc.namespace}/{doc.name}"
        if live is None:
            checks.append(
                Check(
                    label,
                    FAIL,
                    "NetworkAttachmentDefinition missing",
                    "Pods naming it in k8s.v1.cni.cncf.io/networks will not start: "
                    "sync the platform Application.",
                )
            )
            continue
        wanted = _config(doc.obj)
        actual = _config(live)
        if wanted is not None and actual != wanted:
            checks.append(
                Check(
                    label,
                    WARN,
                    "exists, but its CNI config differs from Git",
                    "Argo CD has not synced the latest change, or someone edited "
                    "it by hand: check the platform Application's diff.",
                )
            )
        else:
            checks.append(Check(label, PASS, "exists and matches Git"))
    return checks


def _config(obj: dict[str, Any]) -> Any:
    text = (obj.get("spec") or {}).get("config")
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return text


def check_claims(cluster: Cluster, docs: list[Document]) -> list[Check]:
    checks = []
    for doc in (d for d in docs if d.kind == "PersistentVolumeClaim"):
        label = f"pvc {doc.namespace}/{doc.name}"
        live = get_or_none(
            cluster, f"/api/v1/namespaces/{doc.namespace}/persistentvolumeclaims/{doc.name}"
        )
        if live is None:
            checks.append(Check(label, FAIL, "missing", "Sync the platform Application."))
            continue
        status = live.get("status") or {}
        phase, modes = status.get("phase", "Unknown"), status.get("accessModes") or []
        if phase != "Bound":
            checks.append(
                Check(
                    label,
                    FAIL,
                    f"{phase}, not Bound",
                    "The storage class cannot provision it: kubectl describe pvc "
                    f"-n {doc.namespace} {doc.name} (storageClass in cluster.yaml).",
                )
            )
        elif "ReadWriteMany" not in modes:
            checks.append(
                Check(
                    label,
                    FAIL,
                    f"Bound but {', '.join(modes) or 'no access mode'}",
                    "Every replica mounts the checkpoint volume: it must be "
                    "ReadWriteMany (storageClass in cluster.yaml).",
                )
            )
        else:
            checks.append(Check(label, PASS, "Bound, ReadWriteMany"))
    return checks


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _size(name: str, amount: Fraction) -> str:
    if name == "memory":
        return f"{float(amount) / 2**30:.0f}Gi"
    return f"{float(amount):g}"


def gpu_nodes(cluster: Cluster, profile: ClusterProfile) -> list[dict[str, Any]]:
    """The nodes training pods may land on: those with the profile's GPU product label."""
    query = (
        {"labelSelector": f"{GPU_PRODUCT_LABEL}={profile.gpuProduct}"} if profile.gpuProduct else {}
    )
    return items(cluster, "/api/v1/nodes", **query)


def check_nodes(cluster: Cluster, profile: ClusterProfile) -> list[Check]:
    nodes = gpu_nodes(cluster, profile)
    wanted = [(GPU, profile.gpusPerNode)]
    if profile.rdma:
        wanted.append((profile.rdmaResource, profile.rdmaPerPod))
    # A training pod's CPU and memory requests must fit too (kube-scheduler NodeResourcesFit).
    sized = [
        ("cpu", Fraction(profile.cpuPerPod)),
        ("memory", Fraction(quantity_bytes(profile.memoryPerPod))),
    ]
    usable, short = 0, []
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        missing = [
            f"{name} {_quantity(allocatable.get(name))}/{count}"
            for name, count in wanted
            if _quantity(allocatable.get(name)) < count
        ]
        for name, request in sized:
            offered = quantity.parse(allocatable.get(name))
            if offered is not None and offered < request:
                missing.append(f"{name} {_size(name, offered)}/{_size(name, request)}")
        if (node.get("spec") or {}).get("unschedulable"):
            missing.append("cordoned")
        if missing:
            short.append(f"{node['metadata']['name']} ({', '.join(missing)})")
        else:
            usable += 1
    need = ", ".join(
        [f"{count} {name}" for name, count in wanted]
        + [f"{_size(name, request)} {name}" for name, request in sized]
    )
    selector = f" labelled {GPU_PRODUCT_LABEL}={profile.gpuProduct}" if profile.gpuProduct else ""
    detail = f"{usable} of {len(nodes)} nodes{selector} offer {need}"
    detail += f"; the profile expects {profile.nodes}"
    if short:
        detail += "; short: " + "; ".join(short[:5])
    if usable == 0:
        return [
            Check(
                "nodes",
                FAIL,
                detail,
                "No node can run a training pod: check gpuProduct, gpusPerNode, "
                "rdmaResource, cpuPerPod and memoryPerPod (nodeAllocatable) in cluster.yaml "
                "against the nodes and their device plugins.",
            )
        ]
    if usable < profile.nodes:
        return [
            Check(
                "nodes",
                WARN,
                detail,
                "Fewer usable nodes than the profile says: jobs sized for `nodes` will "
                "wait; fix the nodes or lower nodes in cluster.yaml.",
            )
        ]
    return [Check("nodes", PASS, detail)]


def check_queues(cluster: Cluster, docs: list[Document]) -> list[Check]:
    checks = []
    for doc in docs:
        group, _ = _group_version(doc)
        queue = (group == "kueue.x-k8s.io" and doc.kind in ("LocalQueue", "ClusterQueue")) or (
            group == "scheduling.volcano.sh" and doc.kind == "Queue"
        )
        if not queue:
            continue
        found = get_or_none(cluster, _path(doc))
        label = f"queue {doc.kind}/{doc.name}"
        checks.append(
            Check(
                label,
                PASS if found else FAIL,
                "exists" if found else "missing",
                ""
                if found
                else "Jobs naming it stay pending: sync the platform "
                "Application and the scheduler add-on.",
            )
        )
    return checks


# The GPU Operator chart's own ClusterPolicy (its add-on owns it; the overlay has none).
CHART_CLUSTER_POLICY = Document(
    obj={
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
    },
    source="gpu-operator chart",
)


def check_gpu_operator(cluster: Cluster, docs: list[Document]) -> list[Check]:
    checks = []
    policies = [d for d in docs if d.kind == "ClusterPolicy"] or [CHART_CLUSTER_POLICY]
    for doc in policies:
        live = get_or_none(cluster, _path(doc))
        if live is None:
            checks.append(
                Check(
                    "gpu-operator",
                    FAIL,
                    f"ClusterPolicy {doc.name} missing",
                    "Install the GPU Operator (its add-on Application) and sync.",
                )
            )
            continue
        state = (live.get("status") or {}).get("state", "unknown")
        checks.append(
            Check(
                "gpu-operator",
                PASS if state == "ready" else FAIL,
                f"ClusterPolicy {doc.name}: {state}",
                ""
                if state == "ready"
                else "kubectl get pods -n gpu-operator: a driver, toolkit or device "
                "plugin pod is not ready on some node.",
            )
        )
    return checks
