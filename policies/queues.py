"""Kueue: jobs that name a queue are jobs Kueue manages, and its ClusterQueue can admit
everything their pods request."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy import EVERY_KIND, Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import POD_KINDS, PodTemplate, dicts, mapping, resources

from . import common

QUEUE_LABEL = common.KUEUE_LABEL
# The kinds Kueue 0.19.2 manages (pkg/controller/jobs), by apiVersion. Kueue never
# suspends an object of any other kind or version: a queue label on it does nothing.
KUEUE_MANAGED = {
    ("batch/v1", "Job"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "TFJob"),
    ("kubeflow.org/v1", "XGBoostJob"),
    ("kubeflow.org/v1", "PaddleJob"),
    ("kubeflow.org/v1", "JAXJob"),
    ("kubeflow.org/v2beta1", "MPIJob"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("ray.io/v1", "RayJob"),
    ("ray.io/v1", "RayCluster"),
    ("ray.io/v1", "RayService"),
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("workload.codeflare.dev/v1beta2", "AppWrapper"),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
}


def _queue_label(doc: Document) -> str | None:
    value = mapping(doc.metadata.get("labels")).get(QUEUE_LABEL)
    return str(value) if value else None


@resource_rule(
    id="queue-label-unmanaged-kind",
    severity=WARNING,
    title="Queue labels are on kinds Kueue manages",
    why="Kueue admits (and holds back) only the kinds it has an integration for; it manages "
    "the MPI Operator's MPIJob kubeflow.org/v2beta1, not the Training Operator's v1 one. A "
    "queue label on any other kind is ignored: the job starts at once, outside the quota.",
    fix="Use a kind Kueue manages (MPIJob v2beta1: mpiOperator: mpi-operator in cluster.yaml), "
    "or drop the label and the pretence of queueing.",
    kinds=EVERY_KIND,
    applies=common.queued,
)
def unmanaged_kind(doc: Document, ctx: Context) -> Iterator[Violation]:
    queue = _queue_label(doc)
    if queue is None or (doc.api_version, doc.kind) in KUEUE_MANAGED:
        return
    if doc.kind not in POD_KINDS:
        return  # a Service or ConfigMap labelled along with its job starts nothing
    yield Violation(
        f"{doc.kind} {doc.api_version} carries {QUEUE_LABEL}: {queue}, but Kueue does not "
        "manage this kind: it starts without quota",
        ("metadata", "labels", QUEUE_LABEL),
    )


def _covered(cluster_queue: Document) -> set[str]:
    groups = dicts(mapping(cluster_queue.obj.get("spec")).get("resourceGroups"))
    return {str(name) for group in groups for name in group.get("coveredResources") or []}


def _requested(pod: PodTemplate) -> dict[str, int]:
    """Resource name -> index of the first container asking for it (requests or limits,
    which Kueue counts as requests when no request is given)."""
    found: dict[str, int] = {}
    for index, container in enumerate(pod.containers):
        for kind in ("requests", "limits"):
            for name in resources(container, kind):
                found.setdefault(str(name), index)
    return found


@pod_rule(
    id="kueue-covers-requests",
    severity=ERROR,
    source="https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/scheduler/flavorassigner/flavorassigner.go#L1071",
    title="The ClusterQueue covers every resource a queued job's pods request",
    why="Kueue assigns a flavor to each resource a pod requests; one that no resource group "
    "of the ClusterQueue covers ('resource ... unavailable in ClusterQueue') keeps the job "
    "pending for good. RDMA devices (an SR-IOV VF, rdma/...) are the usual one: a queue "
    "sized for cpu, memory and GPUs admits nothing that also asks for a NIC.",
    fix="Add the resource to the ClusterQueue's coveredResources with a quota (trainops "
    "sizes it from rdmaResource and rdmaPerPod), or exclude it from Kueue's accounting "
    "(resources.excludeResourcePrefixes in Kueue's configuration).",
    applies=common.queued_pod,
)
def covers_requests(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    queue = _queue_label(pod.doc)
    namespace = common.pod_namespace(pod)
    if queue is None or namespace is None:
        return
    local = ctx.find("LocalQueue", queue, namespace)
    name = mapping(local.obj.get("spec")).get("clusterQueue") if local is not None else None
    cluster_queue = ctx.find("ClusterQueue", str(name)) if name else None
    if cluster_queue is None:
        return
    covered = _covered(cluster_queue)
    for resource, index in _requested(pod).items():
        if resource not in covered:
            yield Violation(
                f"the pods request {resource}, which ClusterQueue {cluster_queue.name} does "
                "not cover: Kueue never admits the job",
                (*pod.container_path(index), "resources"),
            )
