"""Placement and scheduling: GPU nodes, locality of this job's pods, gangs and queues."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, INFO, WARNING, Document
from trainops.policy.engine import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import REPLICA_FIELDS, PodTemplate

from . import common

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def _selects_gpu_nodes(pod: PodTemplate) -> bool:
    selector = pod.spec.get("nodeSelector") or {}
    if any("gpu" in str(k).lower() or "accelerator" in str(k).lower() for k in selector):
        return True
    affinity = ((pod.spec.get("affinity") or {}).get("nodeAffinity")) or {}
    return "gpu" in str(affinity).lower() or "accelerator" in str(affinity).lower()


@pod_rule(
    id="gpu-node-placement",
    severity=WARNING,
    title="GPU pods select GPU nodes and tolerate their taint",
    why="Without a node selector a pod can land on a GPU model the job was not sized for (or "
    "wait forever); GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule, which a pod "
    "without the toleration never passes.",
    fix="Select the GPU product (nodeSelector nvidia.com/gpu.product: ...) and tolerate "
    "nvidia.com/gpu.",
    applies=common.gpu_pod,
)
def gpu_node_placement(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    if not _selects_gpu_nodes(pod):
        yield Violation("no node selector or affinity for GPU nodes", pod.path)
    tolerations = pod.spec.get("tolerations") or []
    if not any(
        str(t.get("key", "")).startswith("nvidia.com/gpu")
        or (t.get("operator") == "Exists" and not t.get("key"))
        for t in tolerations
        if isinstance(t, dict)
    ):
        yield Violation("no toleration for the nvidia.com/gpu taint", pod.path, severity=INFO)


def _selects_this_job(term: dict, job: str) -> bool:
    if JOB_NAME_LABEL in (term.get("matchLabelKeys") or []):
        return True
    selector = term.get("labelSelector") or {}
    if (selector.get("matchLabels") or {}).get(JOB_NAME_LABEL) == job:
        return True
    for expression in selector.get("matchExpressions") or []:
        if expression.get("key") == JOB_NAME_LABEL and expression.get("operator") == "In":
            return job in (expression.get("values") or [])
    return False


def _terms(pod: PodTemplate) -> Iterator[tuple[tuple, dict]]:
    for index, constraint in enumerate(pod.spec.get("topologySpreadConstraints") or []):
        yield (*pod.path, "topologySpreadConstraints", index), constraint
    affinity = pod.spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        for mode, terms in section.items():
            for index, term in enumerate(terms or []):
                inner = term.get("podAffinityTerm", term)
                yield (*pod.path, "affinity", kind, mode, index), inner


@pod_rule(
    id="placement-selects-own-pods",
    severity=ERROR,
    title="Topology spread and pod affinity count this job's pods",
    why="A constraint whose selector names another job (a template's name after a run renamed "
    "the job) or no job at all balances against unrelated pods: the job's own ranks are not "
    "kept together or apart.",
    fix=f"Select {JOB_NAME_LABEL} of this job, or use matchLabelKeys: [{JOB_NAME_LABEL}] so "
    "the selector follows the job name.",
    kinds=tuple(REPLICA_FIELDS),
)
def selects_own_pods(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for at, term in _terms(pod):
        if not _selects_this_job(term, pod.doc.name):
            selector = (term.get("labelSelector") or {}).get("matchLabels") or {}
            other = selector.get(JOB_NAME_LABEL)
            detail = f"job {other}" if other else "pods of any job"
            yield Violation(f"the constraint selects {detail}, not {pod.doc.name}", at)


@pod_rule(
    id="placement-missing",
    severity=INFO,
    title="Multi-node GPU jobs say where their pods should sit",
    why="Kubernetes sees all GPU nodes as equal; without topology spread or pod affinity on a "
    "locality label (rack, switch, zone) a job can span distant parts of the fabric and run "
    "at the speed of its slowest link.",
    fix="Add pod affinity (pack) or topology spread (spread) on the topology key of the "
    "network, selecting the job's own pods.",
    kinds=tuple(REPLICA_FIELDS),
    applies=common.gpu_pod,
)
def placement_missing(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if common.multi_node(pod, ctx) and not any(True for _ in _terms(pod)):
        yield Violation("no topology spread or pod affinity for the job's pods", pod.path)


def _total_pods(doc: Document) -> int:
    specs = (doc.obj.get("spec") or {}).get(REPLICA_FIELDS.get(doc.kind, "")) or {}
    return sum(int(r.get("replicas", 1)) for r in specs.values() if isinstance(r, dict))


@resource_rule(
    id="gang-min-available",
    severity=ERROR,
    title="Gang scheduling waits for every pod of the job",
    why="minAvailable below the number of pods lets the scheduler start part of a job whose "
    "ranks all have to be there: the placed pods hold GPUs and wait for the rest. Above it, "
    "the job never starts.",
    fix="Set runPolicy.schedulingPolicy.minAvailable to the sum of all replicas.",
    kinds=tuple(REPLICA_FIELDS),
)
def gang_min_available(doc: Document, ctx: Context) -> Iterator[Violation]:
    policy = (((doc.obj.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy")) or {}
    wanted = policy.get("minAvailable")
    if wanted is None:
        return
    total = _total_pods(doc)
    if wanted != total:
        yield Violation(
            f"minAvailable is {wanted} but the job has {total} pods",
            ("spec", "runPolicy", "schedulingPolicy", "minAvailable"),
        )


@resource_rule(
    id="queue-exists",
    severity=ERROR,
    title="Queues a job names exist",
    why="Kueue leaves a job whose LocalQueue does not exist suspended forever; Volcano rejects "
    "a PodGroup for a missing queue. Either way nothing starts and nothing fails.",
    fix="Create the LocalQueue (Kueue) or Queue (Volcano), or correct the name.",
    kinds=(*REPLICA_FIELDS, "TrainJob", "ClusterTrainingRuntime", "TrainingRuntime"),
)
def queue_exists(doc: Document, ctx: Context) -> Iterator[Violation]:
    # Only where the queues would be visible: a cluster render, or one that defines queues.
    queue = (doc.metadata.get("labels") or {}).get(KUEUE_LABEL)
    kueue_visible = ctx.has_platform or bool(ctx.of_kind("LocalQueue"))
    if (
        queue
        and kueue_visible
        and ctx.find("LocalQueue", str(queue), doc.namespace or None) is None
    ):
        yield Violation(
            f"no LocalQueue {queue!r} in namespace {doc.namespace or 'default'}",
            ("metadata", "labels", KUEUE_LABEL),
        )
    spec = doc.obj.get("spec") or {}
    path = ("spec", "runPolicy", "schedulingPolicy", "queue")
    volcano = ((spec.get("runPolicy") or {}).get("schedulingPolicy") or {}).get("queue")
    if doc.kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        # Trainer v2 gives its Volcano PodGroup the queue the runtime's template names.
        path = ("spec", "template", "metadata", "annotations", VOLCANO_QUEUE_ANNOTATION)
        annotations = ((spec.get("template") or {}).get("metadata") or {}).get("annotations")
        volcano = (annotations or {}).get(VOLCANO_QUEUE_ANNOTATION)
    volcano_visible = ctx.has_platform or bool(ctx.of_kind("Queue"))
    if volcano and volcano_visible and ctx.find("Queue", str(volcano)) is None:
        yield Violation(f"no Volcano Queue {volcano!r}", path)
