"""Placement and scheduling: GPU nodes, locality of this job's pods, gangs and queues."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from trainops import quantity
from trainops.model import ERROR, INFO, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import (
    REPLICA_FIELDS,
    PodTemplate,
    dicts,
    effective_labels,
    is_int,
    mapping,
    resources,
)

from . import commandline, common

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUEUE_LABEL = common.KUEUE_LABEL
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
# Workload kinds Kueue (or Volcano) queues by a label or field on the workload itself.
QUEUED_KINDS = (
    *REPLICA_FIELDS,
    "Job",
    "JobSet",
    "LeaderWorkerSet",
    "Deployment",
    "StatefulSet",
    "Pod",
    "TrainJob",
    "ClusterTrainingRuntime",
    "TrainingRuntime",
)


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
    when={
        "warning": "no node selector or node affinity for GPU nodes",
        "info": "no toleration for the nvidia.com/gpu taint (only some clusters taint GPU nodes)",
    },
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


def _selects_own_labels(term: dict, labels: dict) -> bool:
    """The selector matches the pod's own labels (so its own pods, maybe others' too)."""
    selector = term.get("labelSelector") or {}
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(str(labels.get(k)) != str(v) for k, v in match_labels.items()):
        return False
    for expression in expressions:
        key, operator = expression.get("key"), expression.get("operator")
        values = [str(v) for v in expression.get("values") or []]
        if operator == "In" and str(labels.get(key)) not in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "NotIn" and str(labels.get(key)) in values:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


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
    severity=WARNING,
    source="https://v1-35.docs.kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#inter-pod-affinity-and-anti-affinity",
    title="Topology spread and pod affinity count this job's pods",
    why="A constraint whose selector names another job (a template's name after a run renamed "
    "the job), or matches none of the pod's own labels, balances against unrelated pods: the "
    "job's own ranks are not kept together or apart. A required pod affinity to another "
    "job's pods blocks scheduling outright: the scheduler lets a pod with required affinity "
    "through when no pod matches only if the pod matches its own terms, so the job's pods "
    "stay Pending while that job's pods are not running.",
    fix=f"Select {JOB_NAME_LABEL} of this job, or use matchLabelKeys: [{JOB_NAME_LABEL}] so "
    "the selector follows the job name.",
    kinds=tuple(REPLICA_FIELDS),
    when={
        "error": "a requiredDuringSchedulingIgnoredDuringExecution podAffinity term selects "
        f"another job by {JOB_NAME_LABEL}",
        "warning": "any other topology spread or pod (anti-)affinity term that does not select "
        "the job's own pods",
    },
)
def selects_own_pods(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    labels = effective_labels(pod)
    for at, term in _terms(pod):
        if not _selects_this_job(term, pod.doc.name) and not _selects_own_labels(term, labels):
            selector = (term.get("labelSelector") or {}).get("matchLabels") or {}
            other = selector.get(JOB_NAME_LABEL)
            detail = f"job {other}" if other else "pods of any job"
            blocks = other is not None and at[-3:-1] == (
                "podAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
            )
            yield Violation(
                f"the constraint selects {detail}, not {pod.doc.name}",
                at,
                severity=ERROR if blocks else None,
            )


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


def _total_pods(doc: Document, ctx: Context) -> int | None:
    """Pods the job runs (None when a replica count is not a number: the schema reports it)."""
    total = 0
    for pod in ctx.pods(doc):
        if pod.replicas is None:
            return None
        total += pod.replicas
    return total


@resource_rule(
    id="gang-min-available",
    severity=ERROR,
    source=(
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/webhooks/admission/jobs/validate/admit_job.go#L180",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/scheduler/plugins/gang/gang.go#L84",
    ),
    title="Gang scheduling waits for every pod of the job",
    why="minAvailable below the number of pods lets the scheduler start part of a job whose "
    "ranks all have to be there: the placed pods hold GPUs and wait for the rest. Above it, "
    "the job never starts (Volcano's webhook refuses it).",
    fix="Set runPolicy.schedulingPolicy.minAvailable (a Volcano Job's spec.minAvailable) to "
    "the number of pods the job runs.",
    kinds=(*REPLICA_FIELDS, "Job"),
    when={
        "error": "minAvailable above the number of pods: Volcano's webhook refuses a Volcano "
        "Job, and a PodGroup with more members than pods never passes gang scheduling",
        "warning": "minAvailable below the number of pods of a job whose ranks all have to run "
        "(a partial start holds GPUs while it waits for the rest)",
    },
)
def gang_min_available(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "Job":
        if not doc.api_version.startswith("batch.volcano.sh/"):
            return
        wanted, at = spec.get("minAvailable"), ("spec", "minAvailable")
    else:
        policy = mapping(mapping(spec.get("runPolicy")).get("schedulingPolicy"))
        wanted, at = policy.get("minAvailable"), ("spec", "runPolicy", "schedulingPolicy")
        at = (*at, "minAvailable")
    total = _total_pods(doc, ctx)
    if not is_int(wanted) or total is None or wanted == total:
        return
    if wanted > total:
        yield Violation(f"minAvailable is {wanted} but the job has only {total} pods", at)
    elif doc.kind != "Job" or _all_ranks(doc, ctx):
        yield Violation(
            f"minAvailable is {wanted} but the job has {total} pods that all have to run",
            at,
            severity=WARNING,
        )


def _all_ranks(doc: Document, ctx: Context) -> bool:
    """Every pod of the job is a rank of one distributed launch (torchrun, mpirun...)."""
    return any(
        commandline.runs(c, commandline.LAUNCHERS) for p in ctx.pods(doc) for c in p.containers
    )


def queue_label(doc: Document) -> str | None:
    value = mapping(doc.metadata.get("labels")).get(KUEUE_LABEL)
    return str(value) if value else None


def _volcano_pod_group(doc: Document) -> bool:
    return doc.kind == "PodGroup" and doc.api_version.startswith("scheduling.volcano.sh/")


def trainjob_volcano_queue(doc: Document, ctx: Context) -> tuple[str | None, tuple[Any, ...]]:
    """The Volcano queue of a TrainJob's PodGroup, and where it says so: the Trainer takes
    the runtime's template annotation, then the TrainJob's runtime patches' (Trainer v2.3.0
    TrainingRuntime.newRuntimeInfo; the volcano plugin puts it on the PodGroup)."""
    found: tuple[str | None, tuple[Any, ...]] = (None, ("spec", "runtimePatches"))
    runtime = ctx.runtime_for(doc)
    if runtime is not None:
        template = mapping(mapping(runtime.obj.get("spec")).get("template"))
        annotations = mapping(mapping(template.get("metadata")).get("annotations"))
        value = annotations.get(VOLCANO_QUEUE_ANNOTATION)
        if value:
            found = (str(value), ("spec", "runtimeRef"))
    patches = mapping(doc.obj.get("spec")).get("runtimePatches")
    for index, patch in enumerate(patches if isinstance(patches, list) else []):
        template = mapping(mapping(mapping(patch).get("trainingRuntimeSpec")).get("template"))
        annotations = mapping(mapping(template.get("metadata")).get("annotations"))
        value = annotations.get(VOLCANO_QUEUE_ANNOTATION)
        if value:
            where = ("spec", "runtimePatches", index, "trainingRuntimeSpec", "template")
            found = (str(value), (*where, "metadata", "annotations", VOLCANO_QUEUE_ANNOTATION))
    return found


def names_queue(doc: Document) -> bool:
    """Documents that may name a Kueue or Volcano queue: a Kueue label, a Volcano queue
    annotation, a scheduling policy (runPolicy), a Volcano Job or PodGroup, or a Trainer v2
    runtime
    (the `applies` predicate of the queue rules)."""
    return (
        common.queued(doc)
        or "runPolicy" in mapping(doc.obj.get("spec"))
        or doc.api_version.startswith("batch.volcano.sh/")
        or _volcano_pod_group(doc)
        or doc.kind in common.RUNTIME_KINDS
        or VOLCANO_QUEUE_ANNOTATION in mapping(doc.metadata.get("annotations"))
    )


@resource_rule(
    id="queue-exists",
    severity=ERROR,
    source=(
        "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/controller/core/workload_controller.go#L2084",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/webhooks/admission/jobs/validate/admit_job.go#L203",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/webhooks/admission/podgroups/validate/validate_podgroup.go#L101-L117",
    ),
    title="Queues a job names exist",
    why="Kueue leaves a job whose LocalQueue does not exist suspended forever; Volcano's "
    "webhooks refuse a Job or a PodGroup (scheduling.volcano.sh) for a missing queue. Either "
    "way nothing starts.",
    fix="Create the LocalQueue (Kueue) or Queue (Volcano), or correct the name.",
    kinds=(*QUEUED_KINDS, "PodGroup"),
    applies=names_queue,
)
def queue_exists(doc: Document, ctx: Context) -> Iterator[Violation]:
    # Only where the queues would be visible: a cluster render, or one that defines queues.
    queue = queue_label(doc)
    kueue_visible = ctx.has_platform or bool(ctx.of_kind("LocalQueue"))
    if queue and kueue_visible and ctx.find("LocalQueue", queue, doc.namespace or None) is None:
        yield Violation(
            f"no LocalQueue {queue!r} in namespace {doc.namespace or 'default'}",
            ("metadata", "labels", KUEUE_LABEL),
        )
    spec = mapping(doc.obj.get("spec"))
    policy = mapping(mapping(spec.get("runPolicy")).get("schedulingPolicy"))
    volcano, at = policy.get("queue"), ("spec", "runPolicy", "schedulingPolicy", "queue")
    if doc.api_version.startswith("batch.volcano.sh/") or _volcano_pod_group(doc):
        volcano, at = spec.get("queue"), ("spec", "queue")
    elif doc.kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        # Trainer v2 gives its Volcano PodGroup the queue the runtime's template names.
        at = ("spec", "template", "metadata", "annotations", VOLCANO_QUEUE_ANNOTATION)
        annotations = mapping(mapping(spec.get("template")).get("metadata")).get("annotations")
        volcano = mapping(annotations).get(VOLCANO_QUEUE_ANNOTATION)
    volcano_visible = ctx.has_platform or bool(ctx.of_kind("Queue"))
    if (
        volcano
        and volcano != "default"
        and volcano_visible
        and ctx.find("Queue", str(volcano)) is None
    ):
        yield Violation(f"no Volcano Queue {volcano!r}", at)


# Kueue's partial admission of batch Jobs (site/static/examples/jobs/
# sample-job-partial-admission.yaml, v0.19.2).
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"


@resource_rule(
    id="kueue-quota-fits",
    severity=ERROR,
    source="https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/scheduler/flavorassigner/flavorassigner.go#L1368",
    title="A queued job fits the quota of the ClusterQueue behind its LocalQueue",
    why="Kueue admits a pod set only when one flavor's quota (plus what the queue may borrow "
    "from its cohort) holds all of it at once, and a workload only when all its pod sets fit "
    "together: a job that needs more GPUs than its queue can ever have (its nominal quota "
    "plus what its cohort's other queues could lend it) stays suspended with 'couldn't "
    "assign flavors' and never fails (kueue#4848 covers the other half: resources no group "
    "covers, see kueue-covers-requests).",
    fix="Send the job to a queue with enough quota, put the queue in a cohort it can borrow "
    "from, or shrink the job.",
    kinds=QUEUED_KINDS,
    applies=common.queued,
)
def kueue_quota_fits(doc: Document, ctx: Context) -> Iterator[Violation]:
    queue = queue_label(doc)
    local = ctx.find("LocalQueue", queue, doc.namespace or None) if queue else None
    name = mapping(local.obj.get("spec")).get("clusterQueue") if local is not None else None
    cluster = ctx.find("ClusterQueue", str(name)) if name else None
    if cluster is None:
        return
    spec = mapping(cluster.obj.get("spec"))
    cohort = spec.get("cohort") or spec.get("cohortName")
    groups = dicts(spec.get("resourceGroups"))
    at = ("metadata", "labels", KUEUE_LABEL)
    totals: dict[str, Fraction] = {}
    pods = ctx.pods(doc)
    sized = all(pod.replicas is not None for pod in pods)
    for pod in pods:
        if pod.replicas is None:
            continue
        for resource, per_pod in sorted(kueue_requests(pod).items()):
            need = per_pod * _fewest_admitted(doc, pod.replicas)
            totals[resource] = totals.get(resource, Fraction(0)) + need
            most = _largest_quota(groups, resource)
            if not cohort and most is not None and need > most:
                yield Violation(
                    f"{pod.role} needs {_show(need, resource)} {resource} at once; "
                    f"ClusterQueue {cluster.name} has at most {_show(most, resource)} in one "
                    "flavor and no cohort to borrow from: the workload is never admitted",
                    at,
                )
    # Kueue admits the workload's pod sets together: their sum must fit what the queue
    # can ever hold, its own quota plus what its cohort could lend it. One pod set without
    # a cohort was judged above.
    if not sized or (not cohort and len(pods) == 1):
        return
    where = f"with what cohort {cohort} could lend" if cohort else "and no cohort to borrow from"
    for resource, need in sorted(totals.items()):
        most = _queue_capacity(cluster, resource, str(cohort or ""), ctx)
        if most is not None and need > most:
            yield Violation(
                f"the workload needs {_show(need, resource)} {resource} at once; ClusterQueue "
                f"{cluster.name} can hold at most {_show(most, resource)} {where}: the workload is "
                "never admitted",
                at,
            )


def _fewest_admitted(doc: Document, replicas: int) -> int:
    """The fewest pods Kueue may admit the pod set with: a batch Job's (or a CronJob's job
    template's) kueue.x-k8s.io/job-min-parallelism allows partial admission down to it."""
    metadata = doc.metadata
    if doc.kind == "CronJob":
        metadata = mapping(mapping(mapping(doc.obj.get("spec")).get("jobTemplate")).get("metadata"))
    if doc.kind not in ("Job", "CronJob"):
        return replicas
    value = str(mapping(metadata.get("annotations")).get(MIN_PARALLELISM, ""))
    return min(replicas, int(value)) if value.isdigit() and int(value) > 0 else replicas


def _queue_capacity(cluster: Document, resource: str, cohort: str, ctx: Context) -> Fraction | None:
    """The most of `resource` the ClusterQueue could ever be admitted: its nominal quota in
    every flavor, plus, in a cohort, what its borrowing limits and the other members'
    lending limits allow. None where that is unknown (a resource it lists in no flavor,
    hierarchical Cohort objects whose own quotas the render may not show)."""
    own = _quotas(cluster, resource)
    if own is None:
        return None
    nominal = sum((q for q, _, _ in own), Fraction(0))
    if not cohort:
        return nominal
    if ctx.of_kind("Cohort"):
        return None
    limits = [b for _, b, _ in own]
    borrowable = None if any(b is None for b in limits) else sum(limits, Fraction(0))
    lent = Fraction(0)
    for other in ctx.of_kind("ClusterQueue"):
        other_spec = mapping(other.obj.get("spec"))
        if other is cluster or (other_spec.get("cohort") or other_spec.get("cohortName")) != cohort:
            continue
        for quota, _, lending in _quotas(other, resource) or ():
            lent += quota if lending is None else min(quota, lending)
    return nominal + (lent if borrowable is None else min(lent, borrowable))


def _quotas(
    cluster: Document, resource: str
) -> list[tuple[Fraction, Fraction | None, Fraction | None]] | None:
    """(nominal quota, borrowing limit, lending limit) of `resource` in each flavor."""
    found = []
    for group in dicts(mapping(cluster.obj.get("spec")).get("resourceGroups")):
        for flavor in dicts(group.get("flavors")):
            for entry in dicts(flavor.get("resources")):
                if entry.get("name") != resource:
                    continue
                quota = quantity.parse(entry.get("nominalQuota"))
                if quota is None:
                    return None
                borrow = entry.get("borrowingLimit")
                lend = entry.get("lendingLimit")
                found.append(
                    (
                        quota,
                        quantity.parse(borrow) if borrow is not None else None,
                        quantity.parse(lend) if lend is not None else None,
                    )
                )
    return found or None


def kueue_requests(pod: PodTemplate) -> dict[str, Fraction]:
    """What Kueue counts for one pod: requests of its containers, a limit where the request
    is unset (the API server copies it)."""
    total: dict[str, Fraction] = {}
    for container in pod.containers:
        limits, requests = resources(container, "limits"), resources(container, "requests")
        for name in {*limits, *requests}:
            value = quantity.parse(requests.get(name, limits.get(name)))
            if value:
                total[str(name)] = total.get(str(name), Fraction(0)) + value
    return total


def _largest_quota(groups: list[dict[str, Any]], resource: str) -> Fraction | None:
    best: Fraction | None = None
    for group in groups:
        for flavor in dicts(group.get("flavors")):
            for entry in dicts(flavor.get("resources")):
                if entry.get("name") == resource:
                    quota = quantity.parse(entry.get("nominalQuota"))
                    if quota is not None and (best is None or quota > best):
                        best = quota
    return best


def _show(value: Fraction, resource: str = "") -> str:
    """An amount as people write it: memory and storage in Gi (Mi below one Gi)."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for unit, size in (("Gi", 2**30), ("Mi", 2**20)):
            if value >= size or unit == "Mi":
                amount = value / size
                shown = str(int(amount)) if amount.denominator == 1 else f"{float(amount):.1f}"
                return f"{shown}{unit}"
    return str(int(value)) if value.denominator == 1 else f"{float(value):g}"
