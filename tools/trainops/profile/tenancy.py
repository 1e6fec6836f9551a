"""Quotas, priorities and tenants of a cluster: the queues and namespaces its teams use.

Every queued cluster (scheduler kueue or volcano) gets:

- priorities: a Kueue WorkloadPriorityClass or, on Volcano, a PriorityClass per
  `priorities` entry; jobs carry the cluster's default one (the templates' label);
- the platform's `training` queue, sized to the nodes outside the spares and the
  teams' quotas; with teams it joins the cluster's cohort and only borrows what the
  teams leave idle.

Each team gets a namespace (Pod Security labels; its default service account
without a token; the checkpoint claim, the training network and the NetworkPolicy
that keeps its jobs apart, like the `training` namespace), a queue named after it
and the parameters the cluster's admission policy checks runs against
(`trainops-runs`). On Kueue the team's
ClusterQueue holds its quota in the cluster's cohort, with borrowing and lending
limits, fair sharing by weight, preemption of lower priorities inside the queue
and reclaim of lent quota from the cohort; on Volcano the team's Queue has the same
quota as `deserved`, a `capability` and a `guarantee`, for Volcano's capacity
plugin.
"""

from __future__ import annotations

from typing import Any

from trainops.profile.model import ClusterProfile, quantity_bytes
from trainops.profile.teams import Team

GPU = "nvidia.com/gpu"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
TEAM_LABEL = "trainops.dev/team"
# On every namespace runs may be created in: the admission policy binds to it.
TENANT_LABEL = "trainops.dev/tenant"
PARAMS = "trainops-runs"
NODE_CPU, NODE_MEMORY = "nodeCpu", "nodeMemory"  # keys of PARAMS: a node's allocatable
# Images the platform runs in its own namespace, whatever registries runs may use:
# the GPU health check's (base/monitoring/gpu-health).
PLATFORM_IMAGES = ("nvcr.io/nvidia/cloud-native/dcgm:4.4.2-1-ubuntu22.04",)
PLATFORM_QUEUE = "training"
# What may follow a registries entry that does not end in "/": the repository's own path,
# tag or digest. "ghcr.io/acme" is not a prefix of "ghcr.io/acme-evil/x", nor
# "registry.example.com" of "registry.example.com.attacker.net/x".
REGISTRY_BOUNDARIES = ("/", ":", "@")


def pins_an_image(entry: str) -> bool:
    """Whether the registries entry `entry` names one image, by tag (a ":" after its last
    "/") or by digest: then only that reference matches. `reg/img:v1@sha256:...` pulls by
    its digest and ignores the tag (a reference with both resolves to the digest), so a
    tag prefix would admit any image of the repository."""
    return "@" in entry or ("/" in entry and ":" in entry.rsplit("/", 1)[1])


def from_registry(image: str, entry: str) -> bool:
    """Whether `image` comes from the registries entry `entry`: a prefix ending in "/"
    (anything below it), a registry or repository whose name ends where the entry does,
    or one pinned image (pins_an_image), which matches only itself."""
    if entry.endswith("/"):
        return image.startswith(entry)
    if pins_an_image(entry):
        return image == entry
    return image == entry or any(image.startswith(entry + b) for b in REGISTRY_BOUNDARIES)


NETWORK = "training-net"
WAVE = {"argocd.argoproj.io/sync-wave": "-1"}
# Custom resources whose CRD an add-on installs, maybe in the same sync.
CUSTOM = {**WAVE, "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}
POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


def default_priority(p: ClusterProfile, team: Team | None = None) -> str:
    """`standard` where the cluster has it and the team may use it, else the lowest."""
    allowed = team.priorities if team else tuple(sorted(p.priorities, key=p.priorities.get))
    return "standard" if "standard" in allowed else allowed[0]


def format_quantity(total_bytes: int) -> str:
    if total_bytes == 0:
        return "0"
    for unit, size in (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)):
        if total_bytes % size == 0:
            return f"{total_bytes // size}{unit}"
    return str(total_bytes)


# What the MPI templates' launcher pod requests (base/training/mpijob*, runtimes/mpi),
# on top of its workers: Kueue admits the launcher with them.
MPI_LAUNCHER_MILLICPU = 500
MPI_LAUNCHER_MEMORY = 2**30


def _resources(p: ClusterProfile, nodes: int) -> list[tuple[str, str]]:
    """What `nodes` training pods request, resource by resource (Kueue's covered list),
    with room for an MPI launcher per node where the cluster runs MPIJobs (as many
    one-node jobs as there are nodes)."""
    launchers = nodes if p.uses_mpi else 0
    millicpu = p.cpuPerPod * 1000 * nodes + MPI_LAUNCHER_MILLICPU * launchers
    out = [
        ("cpu", str(millicpu // 1000) if millicpu % 1000 == 0 else f"{millicpu}m"),
        (
            "memory",
            format_quantity(
                quantity_bytes(p.memoryPerPod) * nodes + MPI_LAUNCHER_MEMORY * launchers
            ),
        ),
        (GPU, str(p.gpusPerNode * nodes)),
    ]
    if p.rdma:
        # Kueue admits a job only when the ClusterQueue covers every resource its pods
        # request ("resource ... unavailable in ClusterQueue"): the RDMA devices too.
        out.append((p.rdmaResource, str(p.rdmaPerPod * nodes)))
    return out


def team_nodes(p: ClusterProfile) -> int:
    return sum(t.gpus for t in p.teams) // p.gpusPerNode


def team_ceiling_nodes(p: ClusterProfile, team: Team) -> int:
    """The most nodes one workload of `team` can ever hold at once, as its generated queue
    admits it: Kueue, its nominal quota plus what it may borrow (its borrowingLimit) of
    what the cohort's other ClusterQueues lend (their lendingLimit, else their quota);
    Volcano, its Queue's capability (_volcano_queue)."""
    per = p.gpusPerNode
    if p.scheduler == "volcano":
        usable = per * p.usable_nodes
        ceiling = usable if team.borrowingLimit is None else team.gpus + team.borrowingLimit
        return min(ceiling, usable) // per
    others = [t for t in p.teams if t is not team]
    lent = sum(t.gpus if t.lendingLimit is None else t.lendingLimit for t in others)
    lent += per * platform_nodes(p)
    borrow = lent if team.borrowingLimit is None else min(team.borrowingLimit, lent)
    return (team.gpus + borrow) // per


def platform_nodes(p: ClusterProfile) -> int:
    """The `training` queue's own quota: what the spares and the teams leave."""
    return p.usable_nodes - team_nodes(p)


def _kueue_flavor(
    p: ClusterProfile, nodes: int, borrow: int | None = None, lend: int | None = None
) -> dict[str, Any]:
    borrowing = dict(_resources(p, borrow)) if borrow is not None else {}
    lending = dict(_resources(p, lend)) if lend is not None else {}
    quotas = []
    for name, amount in _resources(p, nodes):
        quota = {"name": name, "nominalQuota": amount}
        if name in borrowing:
            quota["borrowingLimit"] = borrowing[name]
        if name in lending:
            quota["lendingLimit"] = lending[name]
        quotas.append(quota)
    return {
        "coveredResources": [name for name, _ in _resources(p, nodes)],
        "flavors": [{"name": "gpu", "resources": quotas}],
    }


def _preemption(p: ClusterProfile) -> dict[str, Any]:
    """Higher priorities preempt lower ones in the queue; with teams, quota lent to the
    cohort is taken back (fair sharing decides between teams that borrow)."""
    preemption = {"withinClusterQueue": "LowerPriority"}
    if p.teams:
        preemption["reclaimWithinCohort"] = "Any"
    return preemption


def platform_queue(p: ClusterProfile) -> dict[str, Any]:
    """The patch of the `training` queue of base/training/queues/<scheduler>."""
    nodes = platform_nodes(p)
    if p.scheduler == "volcano":
        spec: dict[str, Any] = {"capability": {GPU: str(p.gpusPerNode * p.usable_nodes)}}
        if p.teams:
            spec.update(
                deserved={GPU: str(p.gpusPerNode * nodes)},
                reclaimable=True,
                priority=0,
            )
        return {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": PLATFORM_QUEUE},
            "spec": spec,
        }
    spec = {}
    if p.teams:
        spec["cohortName"] = p.name
    spec["preemption"] = _preemption(p)
    spec["resourceGroups"] = [_kueue_flavor(p, nodes)]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": PLATFORM_QUEUE},
        "spec": spec,
    }


def platform_queue_comment(p: ClusterProfile) -> str:
    plural = "s" if p.spareNodes > 1 else ""
    spares = f", {p.spareNodes} spare node{plural} kept out" if p.spareNodes else ""
    if not p.teams:
        return f"# Quota: {p.usable_nodes} nodes x {p.gpusPerNode} GPUs{spares}.\n"
    shared = (
        f"in cohort {p.name}" if p.scheduler == "kueue" else "up to its capability (reclaimable)"
    )
    return (
        f"# Quota: the {platform_nodes(p)} nodes no team holds{spares}; {shared}\n"
        "# the platform's jobs (the NCCL preflight) also borrow what teams leave idle.\n"
    )


def priority_documents(p: ClusterProfile) -> list[dict[str, Any]]:
    docs = []
    for name, value in sorted(p.priorities.items(), key=lambda item: -item[1]):
        description = f"trainops priority {name} of cluster {p.name}"
        if p.scheduler == "kueue":
            docs.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name, "annotations": CUSTOM},
                    "value": value,
                    "description": description,
                }
            )
        else:
            docs.append(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name, "annotations": WAVE},
                    "value": value,
                    "globalDefault": False,
                    "description": description,
                }
            )
    return docs


def params(p: ClusterProfile, namespace: str, team: Team | None) -> dict[str, Any]:
    """What the admission policy checks a run in `namespace` against, and the node size
    validate fits the run's pods to."""
    priorities = team.priorities if team else tuple(sorted(p.priorities, key=p.priorities.get))
    data = {
        "team": team.name if team else "",
        "queue": team.queue if team else p.queue,
        "priorities": ",".join(priorities) if p.scheduler != "default" else "",
        "networks": f"{NETWORK},{namespace}/{NETWORK}",
        "registries": ",".join([*p.registries, *([] if team else PLATFORM_IMAGES)]),
    }
    node = p.node
    if node.declared:
        # What validate's pod-fits-node compares a run's pods with (nodeAllocatable).
        data[NODE_CPU] = str(node.cpu.numerator if node.cpu.denominator == 1 else float(node.cpu))
        data[NODE_MEMORY] = format_quantity(node.memory)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": PARAMS,
            "namespace": namespace,
            "annotations": WAVE,
            "labels": {"app.kubernetes.io/part-of": "trainops"},
        },
        "data": data,
    }


# A job's pods carry the label their controller sets to the job's name: the Training
# Operator's and the MPI Operator's, or JobSet's (a TrainJob's JobSet is named after it).
JOB_LABELS = {
    "PyTorchJob": "training.kubeflow.org/job-name",
    "MPIJob": "training.kubeflow.org/job-name",
    "TrainJob": "jobset.sigs.k8s.io/jobset-name",
    "JobSet": "jobset.sigs.k8s.io/jobset-name",
}
JOBS_APART = "trainops-jobs-apart"
METRICS_PORT = "metrics"  # the trainer's, which the platform's PodMonitor scrapes
# The number behind it in every training template (TRAINER_METRICS_PORT): the one port
# JOBS_APART opens to all, so it is the only number a pod may give that name.
METRICS_PORT_NUMBER = 9400
# The Training Operator names a PyTorchJob's Services <job>-master-<n> and <job>-worker-<n>
# (training-operator v1.9.0 pkg/controller.v1/common/service.go, GenGeneralName) and its
# workers' MASTER_ADDR after the first; a job whose own Service takes its name (MPIJob:
# mpi-operator v0.8.0 mpi_job_controller.go:1384 newJobService; JobSet and a TrainJob's
# JobSet: jobset v0.12.0 jobset_controller.go, the headless Service of its subdomain)
# would hold another job's master address.
REPLICA_SERVICE_NAME = r"-(master|worker)-[0-9]+$"
SERVICE_NAMED_KINDS = ("MPIJob", "JobSet", "TrainJob")


def jobs_apart(namespace: str) -> dict[str, Any]:
    """The NetworkPolicy that isolates every pod of a tenant namespace for ingress: only
    the metrics port is open to all; each job's own policy (`job_network_policy`) opens
    its pods to each other, so no run reaches another job's rendezvous or TCPStore."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": JOBS_APART, "namespace": namespace, "annotations": WAVE},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": METRICS_PORT}]}],
        },
    }


def job_network_policy(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    """The policy that opens the pods of job `name` (a JOB_LABELS kind) to each other on
    every port: the rendezvous, and the ports NCCL and Gloo bind to port 0."""
    selector = {"matchLabels": {JOB_LABELS[kind]: name}}
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": selector}]}],
        },
    }


def job_network_policy_renames(kind: str, name: str) -> list[dict[str, Any]]:
    """JSON patch operations that rename a template's job policy after its job `name`."""
    key = JOB_LABELS[kind].replace("/", "~1")
    return [
        {"op": "replace", "path": path, "value": name}
        for path in (
            "/metadata/name",
            f"/spec/podSelector/matchLabels/{key}",
            f"/spec/ingress/0/from/0/podSelector/matchLabels/{key}",
        )
    ]


def team_documents(
    p: ClusterProfile, team: Team, network: dict[str, Any], claim: dict[str, Any]
) -> list[dict[str, Any]]:
    """Everything in a team's namespace; `network` and `claim` are the cluster's training
    network and checkpoint claim, copied into it."""
    ns = team.namespace
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "annotations": WAVE,
                "labels": {**POD_SECURITY, TENANT_LABEL: team.name},
            },
        },
        # Runs keep the namespace's default account: no token in the pods, no grants.
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns, "annotations": WAVE},
            "automountServiceAccountToken": False,
        },
        _in_namespace(claim, ns),
        _in_namespace(network, ns, CUSTOM),
        params(p, ns, team),
        jobs_apart(ns),
    ]
    if p.scheduler == "kueue":
        docs += [_kueue_cluster_queue(p, team), _local_queue(team)]
    else:
        docs.append(_volcano_queue(p, team))
    return docs


def _in_namespace(
    doc: dict[str, Any], namespace: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata = {**doc["metadata"], "namespace": namespace}
    if annotations:
        metadata["annotations"] = {**annotations, **metadata.get("annotations", {})}
    return {**doc, "metadata": metadata}


def _kueue_cluster_queue(p: ClusterProfile, team: Team) -> dict[str, Any]:
    per = p.gpusPerNode
    borrow = team.borrowingLimit // per if team.borrowingLimit is not None else None
    lend = team.lendingLimit // per if team.lendingLimit is not None else None
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": team.queue, "annotations": CUSTOM},
        "spec": {
            "cohortName": p.name,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
            "preemption": _preemption(p),
            "fairSharing": {"weight": team.weight},
            "resourceGroups": [_kueue_flavor(p, team.gpus // per, borrow, lend)],
        },
    }


def _local_queue(team: Team) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": team.queue, "namespace": team.namespace, "annotations": CUSTOM},
        "spec": {"clusterQueue": team.queue},
    }


def _volcano_queue(p: ClusterProfile, team: Team) -> dict[str, Any]:
    usable = p.gpusPerNode * p.usable_nodes
    ceiling = usable if team.borrowingLimit is None else team.gpus + team.borrowingLimit
    spec: dict[str, Any] = {
        "weight": team.weight,
        "reclaimable": True,
        "deserved": {GPU: str(team.gpus)},
        "capability": {GPU: str(min(ceiling, usable))},
    }
    if team.lendingLimit is not None and team.lendingLimit < team.gpus:
        # Volcano's guarantee is the part of the quota never lent out.
        spec["guarantee"] = {"resource": {GPU: str(team.gpus - team.lendingLimit)}}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": team.queue, "annotations": CUSTOM},
        "spec": spec,
    }
