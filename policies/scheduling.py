"""Scheduler queues beyond "the queue exists": which kinds Kueue is configured to queue,
where it reads the queue name, which namespaces a ClusterQueue serves, priority classes,
and a Volcano queue's capability against the gang it must hold.

Facts from Kueue v0.19.2 (`apis/config/v1beta1`: integrations.frameworks, `batch/job`
alone when empty; the chart's and the manifests' default lists without
`kubeflow.org/pytorchjob`; `jobframework/utils.go`: the queue name is the object's
label; `apis/kueue/v1beta2/clusterqueue_types.go`: a null namespaceSelector admits no
namespace; `pkg/workload/resources.go`; `pkg/util/priority`), Kubernetes' Priority
admission plugin, and Volcano v1.13.3 (`plugins/proportion`: a job is enqueued only if
its minimum resources fit the queue's capability).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import yaml

from trainops.admission import quantity
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, mapping

from . import common
from .placement import (
    KUEUE_LABEL,
    QUEUED_KINDS,
    VOLCANO_QUEUE_ANNOTATION,
    kueue_requests,
    names_queue,
    queue_label,
)

# Kueue's framework name for each kind it can queue.
FRAMEWORKS = {
    ("batch", "Job"): "batch/job",
    ("kubeflow.org", "PyTorchJob"): "kubeflow.org/pytorchjob",
    ("kubeflow.org", "TFJob"): "kubeflow.org/tfjob",
    ("kubeflow.org", "XGBoostJob"): "kubeflow.org/xgboostjob",
    ("kubeflow.org", "PaddleJob"): "kubeflow.org/paddlejob",
    ("kubeflow.org", "JAXJob"): "kubeflow.org/jaxjob",
    ("kubeflow.org", "MPIJob"): "kubeflow.org/mpijob",
    ("jobset.x-k8s.io", "JobSet"): "jobset.x-k8s.io/jobset",
    ("trainer.kubeflow.org", "TrainJob"): "trainer.kubeflow.org/trainjob",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io/leaderworkerset",
    ("apps", "Deployment"): "deployment",
    ("apps", "StatefulSet"): "statefulset",
    ("", "Pod"): "pod",
}
# What Kueue v0.19.2 enables when a configuration lists no frameworks, and what its
# Helm chart (values.yaml) and kustomize manifests (controller_manager_config.yaml) list.
EMPTY_FRAMEWORKS = frozenset({"batch/job"})
DEFAULT_FRAMEWORKS = frozenset(
    {
        "batch/job",
        "kubeflow.org/mpijob",
        "ray.io/rayjob",
        "ray.io/rayservice",
        "ray.io/raycluster",
        "jobset.x-k8s.io/jobset",
        "workload.codeflare.dev/appwrapper",
        "trainer.kubeflow.org/trainjob",
        "pod",
        "deployment",
        "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    }
)
CONFIG_KEY = "controller_manager_config.yaml"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
SYSTEM_PRIORITY = ("system-cluster-critical", "system-node-critical")
VOLCANO_GROUP = "scheduling.volcano.sh"


def _kueue_frameworks(ctx: Context) -> frozenset[str] | None:
    """The frameworks the Kueue installations this render configures enable (their union),
    or None when the render configures no Kueue."""
    found: set[str] = set()
    seen = False
    for doc in ctx.of_kind("ConfigMap"):
        text = mapping(doc.obj.get("data")).get(CONFIG_KEY)
        if isinstance(text, str) and "kueue" in text:
            frameworks = _frameworks_of(text)
            if frameworks is not None:
                found |= frameworks
                seen = True
    for doc in ctx.of_kind("Application", "ApplicationSet"):
        spec = mapping(doc.obj.get("spec"))
        if doc.kind == "ApplicationSet":
            spec = mapping(mapping(spec.get("template")).get("spec"))
        for source in [mapping(spec.get("source")), *dicts(spec.get("sources"))]:
            if source.get("chart") != "kueue":
                continue
            seen = True
            found |= _chart_frameworks(mapping(source.get("helm")))
    return frozenset(found) if seen else None


def _chart_frameworks(helm: dict[str, Any]) -> frozenset[str]:
    values = helm.get("valuesObject")
    if not isinstance(values, dict) and isinstance(helm.get("values"), str):
        try:
            values = yaml.safe_load(helm["values"])
        except yaml.YAMLError:
            values = None
    text = mapping(mapping(values).get("managerConfig")).get("controllerManagerConfigYaml")
    frameworks = _frameworks_of(text) if isinstance(text, str) else None
    return DEFAULT_FRAMEWORKS if frameworks is None else frameworks


def _frameworks_of(text: str) -> frozenset[str] | None:
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(config, dict):
        return None
    listed = mapping(config.get("integrations")).get("frameworks")
    if not isinstance(listed, list) or not listed:
        return EMPTY_FRAMEWORKS
    return frozenset(str(item) for item in listed)


def framework(doc: Document) -> str | None:
    group = doc.api_version.rpartition("/")[0]
    return FRAMEWORKS.get((group, doc.kind))


@resource_rule(
    id="kueue-framework-disabled",
    severity=WARNING,
    title="Kueue is configured to queue the kinds that carry its queue label",
    why="Kueue reconciles only the integrations its configuration lists "
    "(integrations.frameworks; batch/job alone when the list is empty). Its Helm chart and "
    "manifests enable MPIJob, JobSet and TrainJob but leave kubeflow.org/pytorchjob and the "
    "other Training Operator kinds commented out: a queue label on a kind that is not "
    "enabled is ignored, and the job starts at once outside every quota.",
    fix="Add the kind's framework (kubeflow.org/pytorchjob...) to integrations.frameworks in "
    "Kueue's configuration (managerConfig.controllerManagerConfigYaml in the chart's values), "
    "or submit the run as a kind Kueue queues.",
    kinds=QUEUED_KINDS,
    applies=common.queued,
)
def kueue_framework_disabled(doc: Document, ctx: Context) -> Iterator[Violation]:
    if queue_label(doc) is None:
        return
    wanted = framework(doc)
    enabled = ctx.memo("kueue-frameworks", lambda: _kueue_frameworks(ctx))
    if wanted is None or enabled is None or wanted in enabled:
        return
    yield Violation(
        f"Kueue's configuration does not enable {wanted}: the queue label is ignored and the "
        f"{doc.kind} runs unqueued",
        ("metadata", "labels", KUEUE_LABEL),
    )


def _may_misplace_queue_label(doc: Document) -> bool:
    """The queue label may be misplaced: written as an annotation, or on pod templates of
    a kind whose own labels Kueue reads."""
    return KUEUE_LABEL in mapping(doc.metadata.get("annotations")) or doc.kind not in (
        "Deployment",
        "StatefulSet",
        "LeaderWorkerSet",
    )


@resource_rule(
    id="queue-label-placement",
    severity=WARNING,
    title="The Kueue queue name is a label of the job itself",
    why="Kueue reads the queue name from the labels of the object it integrates "
    "(jobframework QueueNameForObject): a kueue.x-k8s.io/queue-name on the pod template, or "
    "written as an annotation (the pre-0.5 form), is not read. The job is not queued and "
    "starts at once, ignoring quota and fair sharing.",
    fix="Move kueue.x-k8s.io/queue-name to metadata.labels of the job (PyTorchJob, JobSet, "
    "Job, TrainJob...).",
    kinds=QUEUED_KINDS,
    applies=_may_misplace_queue_label,
)
def queue_label_placement(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind in ("Pod", "ClusterTrainingRuntime", "TrainingRuntime") or queue_label(doc):
        return
    if KUEUE_LABEL in mapping(doc.metadata.get("annotations")):
        yield Violation(
            f"{KUEUE_LABEL} is an annotation; Kueue reads only the label",
            ("metadata", "annotations", KUEUE_LABEL),
        )
        return
    if doc.kind in ("Deployment", "StatefulSet", "LeaderWorkerSet"):
        return  # Kueue's pod-group integrations read their pods' labels
    for pod in ctx.pods(doc):
        if KUEUE_LABEL in pod.labels:
            yield Violation(
                f"{KUEUE_LABEL} is on the {pod.role} pod template, not on the {doc.kind}: "
                "Kueue does not queue the job",
                (*pod.path[:-1], "metadata", "labels", KUEUE_LABEL),
            )
            return


def _selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for key, value in mapping(selector.get("matchLabels")).items():
        if str(labels.get(key)) != str(value) or key not in labels:
            return False
    for expression in dicts(selector.get("matchExpressions")):
        key, operator = expression.get("key"), expression.get("operator")
        values = [str(v) for v in expression.get("values") or []]
        present = key in labels
        if operator == "In" and (not present or str(labels[key]) not in values):
            return False
        if operator == "NotIn" and present and str(labels[key]) in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@resource_rule(
    id="kueue-namespace-selector",
    severity=ERROR,
    source="https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/workload/resources.go#L245",
    title="The ClusterQueue behind a job's LocalQueue admits the job's namespace",
    why="A ClusterQueue admits workloads only from namespaces its namespaceSelector matches; "
    "a null selector matches no namespace at all (only {} matches every one). Workloads "
    "from any other namespace are inadmissible ('workload namespace doesn't match "
    "ClusterQueue selector') and wait forever.",
    fix="Set namespaceSelector on the ClusterQueue ({} for every namespace, or labels the "
    "team's namespaces carry), or label the namespace.",
    kinds=QUEUED_KINDS,
    applies=common.queued,
)
def kueue_namespace_selector(doc: Document, ctx: Context) -> Iterator[Violation]:
    queue = queue_label(doc)
    namespace = doc.namespace or "default"
    local = ctx.find("LocalQueue", queue, namespace) if queue else None
    name = mapping(local.obj.get("spec")).get("clusterQueue") if local is not None else None
    cluster = ctx.find("ClusterQueue", str(name)) if name else None
    if cluster is None:
        return
    selector = mapping(cluster.obj.get("spec")).get("namespaceSelector")
    at = ("metadata", "labels", KUEUE_LABEL)
    if selector is None:
        yield Violation(
            f"ClusterQueue {cluster.name} has no namespaceSelector, which admits no namespace",
            at,
        )
        return
    space = ctx.find("Namespace", namespace)
    if space is None or not isinstance(selector, dict):
        return
    labels = {**mapping(space.metadata.get("labels")), "kubernetes.io/metadata.name": namespace}
    if not _selector_matches(selector, labels):
        yield Violation(
            f"ClusterQueue {cluster.name}'s namespaceSelector does not match namespace "
            f"{namespace}: the workload is inadmissible",
            at,
        )


@resource_rule(
    id="priority-class-exists",
    severity=ERROR,
    source=(
        "https://v1-35.docs.kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/",
        "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/util/priority/priority.go#L110",
    ),
    title="Priority classes a job names exist",
    why="The API server's Priority admission refuses a pod whose priorityClassName names no "
    "PriorityClass, and Kueue cannot build the Workload of a job whose "
    "kueue.x-k8s.io/priority-class names no WorkloadPriorityClass: for a custom resource "
    "the job is accepted and its pods or Workload never come, so it waits without failing.",
    fix="Create the class in the platform (or correct the name); system-cluster-critical and "
    "system-node-critical always exist.",
    kinds=QUEUED_KINDS,
    render_needs=("PriorityClass", "WorkloadPriorityClass"),
)
def priority_class_exists(doc: Document, ctx: Context) -> Iterator[Violation]:
    workload_class = mapping(doc.metadata.get("labels")).get(PRIORITY_LABEL)
    known = bool(workload_class) and bool(ctx.of_kind("WorkloadPriorityClass"))
    if known and ctx.find("WorkloadPriorityClass", str(workload_class)) is None:
        yield Violation(
            f"no WorkloadPriorityClass {workload_class!r}: Kueue creates no Workload",
            ("metadata", "labels", PRIORITY_LABEL),
        )
    if not ctx.of_kind("PriorityClass"):
        return
    policy = mapping(mapping(mapping(doc.obj.get("spec")).get("runPolicy")).get("schedulingPolicy"))
    named = [
        (policy.get("priorityClass"), ("spec", "runPolicy", "schedulingPolicy", "priorityClass"))
    ]
    named += [
        (pod.spec.get("priorityClassName"), (*pod.path, "priorityClassName"))
        for pod in ctx.pods(doc)
    ]
    for name, at in named:
        if not isinstance(name, str) or not name or name in SYSTEM_PRIORITY:
            continue
        if ctx.find("PriorityClass", name) is None:
            yield Violation(f"no PriorityClass {name!r}: the pods are refused", at)


def _volcano_queue(doc: Document) -> tuple[str | None, tuple[Any, ...]]:
    spec = mapping(doc.obj.get("spec"))
    if doc.api_version.startswith("batch.volcano.sh/"):
        return spec.get("queue"), ("spec", "queue")
    policy = mapping(mapping(spec.get("runPolicy")).get("schedulingPolicy"))
    if policy.get("queue"):
        return policy.get("queue"), ("spec", "runPolicy", "schedulingPolicy", "queue")
    annotated = mapping(doc.metadata.get("annotations")).get(VOLCANO_QUEUE_ANNOTATION)
    return annotated, ("metadata", "annotations", VOLCANO_QUEUE_ANNOTATION)


@resource_rule(
    id="volcano-queue-capability",
    severity=ERROR,
    source="https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/scheduler/plugins/proportion/proportion.go#L438",
    title="A gang fits the capability of its Volcano queue",
    why="Volcano's proportion plugin lets a job into its queue only when the job's minimum "
    "resources (the PodGroup's minResources, the whole gang for a training job) fit the "
    "queue's capability; a job that can never fit is rejected at every scheduling session "
    "('queue resource quota insufficient') and never starts, without failing.",
    fix="Raise the queue's spec.capability, use a bigger queue, or shrink the job.",
    kinds=QUEUED_KINDS,
    applies=names_queue,
)
def volcano_queue_capability(doc: Document, ctx: Context) -> Iterator[Violation]:
    name, at = _volcano_queue(doc)
    if not isinstance(name, str) or not name:
        return
    queue = ctx.find("Queue", name)
    if queue is None or not queue.api_version.startswith(VOLCANO_GROUP):
        return
    capability = mapping(mapping(queue.obj.get("spec")).get("capability"))
    need: dict[str, Fraction] = {}
    for pod in ctx.pods(doc):
        if pod.replicas is None:
            return
        for resource, amount in kueue_requests(pod).items():
            need[resource] = need.get(resource, Fraction(0)) + amount * pod.replicas
    for resource, limit in sorted(capability.items()):
        most = quantity.parse(limit)
        wanted = need.get(str(resource))
        if most is not None and wanted is not None and wanted > most:
            yield Violation(
                f"the job needs {_show(wanted)} {resource} at once; Volcano queue {name} has a "
                f"capability of {_show(most)}: it is never enqueued",
                at,
            )


def _show(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else f"{float(value):g}"
