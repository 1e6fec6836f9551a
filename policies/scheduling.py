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

PriorityClasses as Kubernetes v1.35 validates them (one global default, values up to one
billion, the system- prefix reserved), the KAI scheduler v0.13.0 (the kai.scheduler/queue
label names a leaf Queue that exists; a Queue declares its resources and a parent that
exists) and scheduler-plugins v0.34.7 coscheduling (a PodGroup's minMember against the pods
labelled scheduling.x-k8s.io/pod-group).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import yaml

from trainops import quantity
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule, sets_any
from trainops.policy.pods import POD_KINDS, PodTemplate, dicts, mapping

from . import common
from .argocd_apps import chart_sources, helm_values
from .placement import (
    KUEUE_LABEL,
    QUEUED_KINDS,
    VOLCANO_QUEUE_ANNOTATION,
    kueue_requests,
    names_queue,
    queue_label,
    trainjob_volcano_queue,
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


def kueue_frameworks(ctx: Context) -> frozenset[str] | None:
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
        for _, helm in chart_sources(doc, "kueue"):
            seen = True
            found |= _chart_frameworks(helm)
    return frozenset(found) if seen else None


def _chart_frameworks(helm: dict[str, Any]) -> frozenset[str]:
    _, values = helm_values(helm)
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
    enabled = ctx.memo("kueue-frameworks", lambda: kueue_frameworks(ctx))
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
    # Known: the render defines WorkloadPriorityClasses, or the label names a PriorityClass
    # (the pod kind Kueue does not read for this label).
    known = bool(workload_class) and (
        bool(ctx.of_kind("WorkloadPriorityClass"))
        or ctx.find("PriorityClass", str(workload_class)) is not None
    )
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


def _volcano_queue(doc: Document, ctx: Context) -> tuple[str | None, tuple[Any, ...]]:
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "TrainJob":
        return trainjob_volcano_queue(doc, ctx)
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
    applies=lambda doc: doc.kind == "TrainJob" or names_queue(doc),
)
def volcano_queue_capability(doc: Document, ctx: Context) -> Iterator[Violation]:
    name, at = _volcano_queue(doc, ctx)
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


K8S = "https://github.com/kubernetes/kubernetes/blob/000f26050b9be6fb3d79fae95e06b47fc96128cd/"
PRIORITY_ADMISSION = K8S + "plugin/pkg/admission/priority/admission.go"
PRIORITY_VALIDATION = K8S + "pkg/apis/scheduling/validation/validation.go"
HIGHEST_USER_PRIORITY = 1_000_000_000
KAI = "https://github.com/NVIDIA/KAI-Scheduler/blob/v0.13.0/"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_GROUP = "scheduling.run.ai/"
KAI_GPU_REQUESTS = (
    "https://github.com/kai-scheduler/KAI-Scheduler/blob/v0.17.0/pkg/binder/plugins/gpusharing/"
    "gpu-request/gpu_request_validator.go"
)
# The pod annotations KAI's binder reads a shared-GPU request from (pkg/common/constants).
GPU_FRACTION, GPU_MEMORY, FRACTION_DEVICES, MPS = (
    "gpu-fraction",
    "gpu-memory",
    "gpu-fraction-num-devices",
    "mps",
)
COSCHEDULING = "https://github.com/kubernetes-sigs/scheduler-plugins/blob/v0.34.7/"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_GROUP = "scheduling.x-k8s.io/"


def _global_defaults(ctx: Context) -> list[Document]:
    return [
        d
        for d in ctx.of_kind("PriorityClass")
        if d.api_version.startswith("scheduling.k8s.io/") and d.obj.get("globalDefault") is True
    ]


@resource_rule(
    id="priority-class-global-default",
    severity=ERROR,
    source=PRIORITY_ADMISSION,
    title="At most one PriorityClass is the global default",
    why="The Priority admission plugin refuses a PriorityClass with globalDefault: true while "
    "another one is the default ('PriorityClass ... is already marked as default. Only one "
    "default can exist'): the second class is never created, and pods naming it are refused.",
    fix="Keep globalDefault: true on one class (on a shared GPU cluster, preferably none).",
    kinds=("PriorityClass",),
)
def priority_class_global_default(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.obj.get("globalDefault") is not True:
        return
    defaults = ctx.memo("priority-global-defaults", lambda: _global_defaults(ctx))
    first = defaults[0] if defaults else None
    if first is not None and first.name != doc.name:
        yield Violation(
            f"PriorityClass {first.name} is already the global default: the API server "
            f"refuses {doc.name}",
            ("globalDefault",),
        )


@resource_rule(
    id="priority-class-value",
    severity=ERROR,
    source=PRIORITY_VALIDATION,
    title="User PriorityClasses stay at or below one billion and off the system- prefix",
    why="The API server refuses a PriorityClass whose value is above 1000000000 ('maximum "
    "allowed value of a user defined priority') and one whose name starts with system- but "
    "is not one of the two built-in classes (the prefix is reserved): the class is not "
    "created, and every pod naming it is refused.",
    fix="Use a value of at most 1000000000 (system-cluster-critical and system-node-critical "
    "already rank above every user class) and a name without the system- prefix.",
    kinds=("PriorityClass",),
)
def priority_class_value(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not doc.api_version.startswith("scheduling.k8s.io/"):
        return
    value = doc.obj.get("value")
    if doc.name.startswith("system-"):
        if doc.name not in SYSTEM_PRIORITY:
            yield Violation(
                f"{doc.name}: names with the system- prefix are reserved for system use",
                ("metadata", "name"),
            )
    elif isinstance(value, int) and not isinstance(value, bool) and value > HIGHEST_USER_PRIORITY:
        yield Violation(
            f"value {value} is above {HIGHEST_USER_PRIORITY}, the most a user-defined "
            "priority may be",
            ("value",),
        )


def _kai_queues(ctx: Context) -> dict[str, Document]:
    return {d.name: d for d in ctx.of_kind("Queue") if d.api_version.startswith(KAI_GROUP)}


def _kai_children(ctx: Context) -> dict[str, list[str]]:
    children: dict[str, list[str]] = {}
    for name, queue in _kai_queues(ctx).items():
        parent = mapping(queue.obj.get("spec")).get("parentQueue")
        if parent:
            children.setdefault(str(parent), []).append(name)
    return children


def _kai_queue_label(doc: Document, ctx: Context) -> tuple[str, tuple[Any, ...]] | None:
    """The queue KAI's pod grouper gives the document's pods: the top owner's label first,
    then a pod's (defaultgrouper CalcPodGroupQueue)."""
    label = mapping(doc.metadata.get("labels")).get(KAI_QUEUE_LABEL)
    if label:
        return str(label), ("metadata", "labels", KAI_QUEUE_LABEL)
    for pod in ctx.pods(doc):
        if pod.labels.get(KAI_QUEUE_LABEL):
            at = (*pod.path[:-1], "metadata", "labels", KAI_QUEUE_LABEL)
            return str(pod.labels[KAI_QUEUE_LABEL]), at
    return None


@resource_rule(
    id="kai-queue-exists",
    severity=ERROR,
    source=(
        KAI + "pkg/scheduler/actions/utils/input_jobs.go#L47-L63",
        KAI + "pkg/podgrouper/podgrouper/plugins/defaultgrouper/default_grouper.go#L134-L147",
    ),
    title="Jobs name a KAI leaf queue that exists",
    why="The KAI scheduler skips, at every session, a pod group whose queue (the "
    "kai.scheduler/queue label of the job, else of its pods) does not exist, whose parent "
    "queue does not exist, or that has child queues (only leaf queues run jobs): the pods "
    "stay Pending and nothing fails.",
    fix="Label the job with a leaf Queue (scheduling.run.ai/v2) of the render, or create it.",
    kinds=tuple(sorted(POD_KINDS)),
)
def kai_queue_exists(doc: Document, ctx: Context) -> Iterator[Violation]:
    queues = ctx.memo("kai-queues", lambda: _kai_queues(ctx))
    found = _kai_queue_label(doc, ctx) if queues else None
    if found is None:
        return  # no KAI queues in the render (nothing to check against), or no label
    name, at = found
    queue = queues.get(name)
    if queue is None:
        yield Violation(f"no KAI Queue {name!r}: the scheduler skips the job's pods", at)
        return
    children = ctx.memo("kai-children", lambda: _kai_children(ctx)).get(name)
    if children:
        yield Violation(
            f"KAI Queue {name} has child queues ({', '.join(sorted(children))}): only leaf "
            "queues run jobs",
            at,
        )
    parent = mapping(queue.obj.get("spec")).get("parentQueue")
    if parent and str(parent) not in queues:
        yield Violation(
            f"KAI Queue {name}'s parent {parent!r} does not exist: its jobs are skipped", at
        )


def _kai_labelled(doc: Document) -> bool:
    """Documents whose own labels name a KAI queue (the `applies` predicate)."""
    return bool(mapping(doc.metadata.get("labels")).get(KAI_QUEUE_LABEL))


@resource_rule(
    id="kai-scheduler-name",
    severity=WARNING,
    source=KAI + "pkg/podgrouper/pod_controller.go#L85-L92",
    title="Pods queued for KAI are scheduled by KAI",
    why="KAI's pod grouper and scheduler handle only pods whose schedulerName is the KAI "
    "scheduler's (kai-scheduler by default); a job labelled kai.scheduler/queue whose pods "
    "keep the default scheduler gets no pod group: it runs outside its queue's quota, "
    "without gang scheduling, and a partial start holds GPUs.",
    fix="Set schedulerName: kai-scheduler in every pod template of the job.",
    kinds=tuple(sorted(POD_KINDS)),
    applies=_kai_labelled,
)
def kai_scheduler_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    for pod in ctx.pods(doc):
        name = pod.spec.get("schedulerName")
        if name in (None, "", "default-scheduler"):
            yield Violation(
                f"the {pod.role} pods use {name or 'the default scheduler'}, which ignores "
                f"{KAI_QUEUE_LABEL}: they are not queued",
                (*pod.path, "schedulerName"),
            )
            return


def _positive_integer(value: Any) -> bool:
    text = str(value)
    return text.isascii() and text.isdigit() and int(text) > 0


def _kai_gpu_request_problem(pod: PodTemplate) -> tuple[str, str] | None:
    """The first refusal of KAI's binder (ValidateGpuRequests, in its order): the
    annotation it is about and why."""
    notes = pod.annotations
    whole = any(
        "nvidia.com/gpu" in mapping(mapping(c.get("resources")).get("limits"))
        for key in ("containers", "initContainers")
        for c in dicts(pod.spec.get(key))
    )
    fraction, memory = GPU_FRACTION in notes, GPU_MEMORY in notes
    if not (fraction or memory) and str(notes.get(MPS)) == "true":
        return MPS, "MPS is only supported with a GPU fraction request"
    if fraction and whole:
        return GPU_FRACTION, "a GPU fraction and a whole nvidia.com/gpu limit together"
    if memory and (fraction or whole):
        return GPU_MEMORY, "gpu-memory together with a GPU fraction or whole GPUs"
    if FRACTION_DEVICES in notes and not (fraction or memory):
        return FRACTION_DEVICES, "a fractional device count without gpu-fraction or gpu-memory"
    if memory and not _positive_integer(notes[GPU_MEMORY]):
        return GPU_MEMORY, f"gpu-memory {notes[GPU_MEMORY]!r} is not a positive integer (MiB)"
    if fraction:
        try:
            value = float(str(notes[GPU_FRACTION]))
        except ValueError:
            value = math.nan
        if not 0 < value < 1:
            return GPU_FRACTION, (
                f"gpu-fraction {notes[GPU_FRACTION]!r} is not a number between 0 and 1 "
                "(a whole GPU is asked for with nvidia.com/gpu)"
            )
    if FRACTION_DEVICES in notes and not _positive_integer(notes[FRACTION_DEVICES]):
        return FRACTION_DEVICES, (
            f"gpu-fraction-num-devices {notes[FRACTION_DEVICES]!r} is not a positive integer"
        )
    return None


@pod_rule(
    id="kai-gpu-request",
    severity=ERROR,
    source=KAI_GPU_REQUESTS,
    title="A KAI shared-GPU request is one KAI's binder accepts",
    why="KAI's binder validates a pod's GPU-sharing annotations before it binds it "
    "(ValidateGpuRequests): gpu-fraction must parse as a number strictly between 0 and 1 "
    "and cannot come with an nvidia.com/gpu limit, gpu-memory is a positive integer and "
    "excludes both, gpu-fraction-num-devices and mps=true need a fraction or memory "
    "request. A pod that fails is never bound: it stays Pending, and its job's gang waits "
    "for it.",
    fix="Ask for part of a GPU with gpu-fraction (0 < value < 1) or gpu-memory alone, and "
    "for whole GPUs with nvidia.com/gpu limits only.",
    applies=sets_any(GPU_FRACTION, GPU_MEMORY, FRACTION_DEVICES, MPS),
)
def kai_gpu_request(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.spec.get("schedulerName") != "kai-scheduler":
        return
    problem = _kai_gpu_request_problem(pod)
    if problem is not None:
        key, reason = problem
        yield Violation(
            f"{reason}: KAI's binder refuses the {pod.role} pods, which stay Pending",
            (*pod.path[:-1], "metadata", "annotations", key),
        )


def _kai(doc: Document) -> bool:
    return doc.api_version.startswith(KAI_GROUP)


@resource_rule(
    id="kai-queue-spec",
    severity=ERROR,
    source=(
        KAI + "pkg/apis/scheduling/v2/queue_webhook.go#L28-L40",
        KAI + "pkg/scheduler/cache/cluster_info/queue.go#L105-L116",
    ),
    title="KAI queues declare their resources and a parent that exists",
    why="KAI's Queue webhook refuses a Queue without spec.resources ('resources must be "
    "specified'); a Queue whose parentQueue does not exist is dropped with its children by "
    "the scheduler (an orphan), so the jobs sent to it never run.",
    fix="Give the Queue spec.resources (gpu, cpu, memory: quota, limit, overQuotaWeight) and "
    "a parentQueue that the render defines (or none, for a top-level queue).",
    kinds=("Queue",),
    applies=_kai,
)
def kai_queue_spec(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if spec.get("resources") is None:
        yield Violation(
            f"KAI Queue {doc.name} has no spec.resources: the webhook refuses it",
            ("spec",),
        )
    parent = spec.get("parentQueue")
    queues = ctx.memo("kai-queues", lambda: _kai_queues(ctx))
    if parent and len(queues) > 1 and str(parent) not in queues:
        yield Violation(
            f"parentQueue {parent!r} is not a KAI Queue of the render: the scheduler drops "
            f"{doc.name} as an orphan",
            ("spec", "parentQueue"),
        )


def _coscheduling(doc: Document) -> bool:
    return doc.api_version.startswith(COSCHEDULING_GROUP)


@resource_rule(
    id="coscheduling-min-member",
    severity=ERROR,
    source=COSCHEDULING + "pkg/coscheduling/core/core.go#L255-L266",
    title="A coscheduling PodGroup's minMember is not above its pods",
    why="The coscheduling plugin lets no pod of a PodGroup past PreFilter until minMember pods "
    "carry its scheduling.x-k8s.io/pod-group label ('cannot find enough sibling pods'); with "
    "fewer pods than minMember every pod stays Pending for good.",
    fix="Set minMember to the number of pods the job runs (or label every pod of the job).",
    kinds=("PodGroup",),
    applies=_coscheduling,
)
def coscheduling_min_member(doc: Document, ctx: Context) -> Iterator[Violation]:
    wanted = mapping(doc.obj.get("spec")).get("minMember")
    if not isinstance(wanted, int) or isinstance(wanted, bool):
        return
    pods = ctx.pods_selected(doc.namespace or "default", {POD_GROUP_LABEL: doc.name})
    if not pods or any(pod.replicas is None for pod in pods):
        return
    total = sum(pod.replicas or 0 for pod in pods)
    if wanted > total:
        yield Violation(
            f"minMember is {wanted} but only {total} pods carry {POD_GROUP_LABEL}: "
            f"{doc.name}: they are never scheduled",
            ("spec", "minMember"),
        )


def _in_pod_group(pod: PodTemplate) -> bool:
    """Pods labelled with a coscheduling PodGroup."""
    return bool(pod.labels.get(POD_GROUP_LABEL))


@pod_rule(
    id="coscheduling-pod-group-exists",
    severity=WARNING,
    title="Pods name a coscheduling PodGroup that exists",
    why="The coscheduling plugin treats a pod whose scheduling.x-k8s.io/pod-group names no "
    "PodGroup as a pod without a group (GetPodGroup returns none): it is scheduled alone, "
    "so a multi-node job starts partly and its placed ranks wait, holding GPUs.",
    fix="Create the PodGroup (scheduling.x-k8s.io/v1alpha1) in the pods' namespace, or "
    "correct the label.",
    applies=_in_pod_group,
)
def coscheduling_pod_group_exists(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    groups = ctx.memo(
        "coscheduling-groups", lambda: [d for d in ctx.of_kind("PodGroup") if _coscheduling(d)]
    )
    name = str(pod.labels[POD_GROUP_LABEL])
    namespace = pod.doc.namespace or "default"
    if not groups or ctx.find("PodGroup", name, namespace) is not None:
        return
    yield Violation(
        f"no PodGroup {name!r} in namespace {namespace}: the pods are scheduled without a gang",
        (*pod.path[:-1], "metadata", "labels", POD_GROUP_LABEL),
    )
