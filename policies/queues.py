"""Kueue: jobs that name a queue are jobs Kueue manages, its ClusterQueue can admit
everything their pods request, and its queue objects name objects that exist.

Facts from Kueue v0.19.2: a ClusterQueue naming a ResourceFlavor or AdmissionCheck that does
not exist, or a TAS flavor whose Topology does not exist, stays inactive and admits nothing
(`pkg/cache/scheduler/clusterqueue.go` inactiveReason); the ClusterQueue and Cohort webhooks
refuse admissionChecksStrategy onFlavors outside the queue's flavors and fair-sharing weights
below zero or at most 1n (`pkg/webhooks`); the job webhooks refuse the elastic-job
annotation on kinds without workload slicing (`jobframework/validation.go`) and the pod
webhook pod-group labels without their total count; the flavor assigner admits a pod set
only through a flavor whose node labels and taints its pods accept
(`scheduler/flavorassigner`); a v1beta1 ClusterQueue's admissionChecks replace its
admissionChecksStrategy in the conversion to v1beta2.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops import quantity
from trainops.model import ERROR, WARNING, Document
from trainops.policy import EVERY_KIND, Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import POD_KINDS, PodTemplate, dicts, mapping, resources

from . import common, scheduling

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


KUEUE = "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/"
CQ_CACHE = KUEUE + "pkg/cache/scheduler/clusterqueue.go"
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
# Kinds whose Kueue integration supports workload slicing (jobframework/validation.go).
ELASTIC_KINDS = {
    ("batch/v1", "Job"),
    ("ray.io/v1", "RayCluster"),
    ("ray.io/v1", "RayJob"),
    ("ray.io/v1", "RayService"),
}


def _kueue(doc: Document) -> bool:
    return doc.api_version.startswith("kueue.x-k8s.io/")


def _strategy_checks(spec: dict) -> list[tuple[str, tuple]]:
    """(AdmissionCheck name, path) for every check a ClusterQueue names (v1beta1 and v1beta2)."""
    found = [
        (str(name), ("spec", "admissionChecks", index))
        for index, name in enumerate(spec.get("admissionChecks") or [])
        if isinstance(name, str)
    ]
    rules = mapping(spec.get("admissionChecksStrategy")).get("admissionChecks")
    for index, rule in enumerate(dicts(rules)):
        if rule.get("name"):
            found.append(
                (str(rule["name"]), ("spec", "admissionChecksStrategy", "admissionChecks", index))
            )
    return found


def _queue_flavors(spec: dict) -> list[tuple[str, tuple]]:
    return [
        (str(flavor["name"]), ("spec", "resourceGroups", i, "flavors", j, "name"))
        for i, group in enumerate(dicts(spec.get("resourceGroups")))
        for j, flavor in enumerate(dicts(group.get("flavors")))
        if flavor.get("name")
    ]


@resource_rule(
    id="kueue-queue-references",
    severity=ERROR,
    source=(CQ_CACHE + "#L310-L365", CQ_CACHE + "#L389-L415"),
    title="Kueue's queues name flavors, checks, topologies and ClusterQueues that exist",
    why="A ClusterQueue that names a ResourceFlavor or AdmissionCheck that does not exist, or "
    "a flavor whose topologyName names no Topology, is inactive ('references missing "
    "ResourceFlavor(s)', 'there is no Topology ... for TAS flavor') and admits no workload; "
    "a LocalQueue whose clusterQueue does not exist queues workloads nobody admits. The "
    "objects are all accepted, and every job sent there waits forever.",
    fix="Create the missing ResourceFlavor, AdmissionCheck, Topology or ClusterQueue in the "
    "same platform render, or correct the name.",
    kinds=("ClusterQueue", "LocalQueue", "ResourceFlavor"),
    applies=_kueue,
)
def queue_references(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "LocalQueue":
        wanted = [("ClusterQueue", spec.get("clusterQueue"), ("spec", "clusterQueue"))]
    elif doc.kind == "ResourceFlavor":
        wanted = [("Topology", spec.get("topologyName"), ("spec", "topologyName"))]
    else:
        wanted = [("ResourceFlavor", name, at) for name, at in _queue_flavors(spec)]
        wanted += [("AdmissionCheck", name, at) for name, at in _strategy_checks(spec)]
    for kind, name, at in wanted:
        if not isinstance(name, str) or not name:
            continue
        # Only where that kind is defined at all: the render (or its platform) has some.
        known = ctx.known_names(kind, where=_kueue)
        if known.count and ctx.find(kind, name) is None:
            yield Violation(
                f"{doc.kind} {doc.name} names {kind} {name!r}, which the render does not "
                f"define ({known}): nothing is admitted",
                at,
            )


@resource_rule(
    id="kueue-admission-check-flavors",
    severity=ERROR,
    source=KUEUE + "pkg/webhooks/clusterqueue_webhook.go#L159-L185",
    title="Admission checks apply on flavors of their ClusterQueue",
    why="Kueue's ClusterQueue webhook refuses an admissionChecksStrategy rule whose onFlavors "
    "names a ResourceFlavor that none of the queue's resource groups uses (Unsupported "
    "value): the ClusterQueue is not created or updated.",
    fix="List in onFlavors only flavors of spec.resourceGroups[].flavors (or leave onFlavors "
    "out to apply the check to every flavor).",
    kinds=("ClusterQueue",),
    applies=_kueue,
)
def admission_check_flavors(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    flavors = {name for name, _ in _queue_flavors(spec)}
    rules = mapping(spec.get("admissionChecksStrategy")).get("admissionChecks")
    for i, rule in enumerate(dicts(rules)):
        for j, flavor in enumerate(rule.get("onFlavors") or []):
            if str(flavor) not in flavors:
                yield Violation(
                    f"admission check {rule.get('name')} applies on flavor {flavor!r}, which "
                    f"is not one of the queue's flavors ({', '.join(sorted(flavors)) or 'none'})",
                    ("spec", "admissionChecksStrategy", "admissionChecks", i, "onFlavors", j),
                )


@resource_rule(
    id="kueue-fair-sharing-weight",
    severity=ERROR,
    source=KUEUE + "pkg/webhooks/common.go#L42-L60",
    title="Fair-sharing weights are zero or a usable positive number",
    why="The ClusterQueue and Cohort webhooks refuse a fairSharing.weight below zero and one "
    "above zero but at most 1n (it would collapse to zero in the share computation).",
    fix="Give weight 0 (share nothing) or a positive weight such as 1 or 0.5.",
    kinds=("ClusterQueue", "Cohort"),
    applies=_kueue,
)
def fair_sharing_weight(doc: Document, ctx: Context) -> Iterator[Violation]:
    weight = mapping(mapping(doc.obj.get("spec")).get("fairSharing")).get("weight")
    value = quantity.parse(weight) if weight is not None else None
    if value is None:
        return
    if value < 0 or 0 < value <= quantity.parse("1n"):
        yield Violation(
            f"fairSharing.weight {weight}: must be 0 or greater than 1n; the webhook refuses "
            f"the {doc.kind}",
            ("spec", "fairSharing", "weight"),
        )


def _elastic(doc: Document) -> bool:
    """Queued documents marked elastic (the `applies` predicate of kueue-elastic-job-kind)."""
    notes = mapping(doc.metadata.get("annotations"))
    return common.queued(doc) and notes.get(ELASTIC_ANNOTATION) == "true"


@resource_rule(
    id="kueue-elastic-job-kind",
    severity=ERROR,
    source=(
        KUEUE + "pkg/controller/jobframework/validation.go#L136-L144",
        KUEUE + "pkg/features/kube_features.go#L712-L715",
    ),
    title="Only kinds with workload slicing are marked elastic for Kueue",
    why='kueue.x-k8s.io/elastic-job: "true" asks Kueue to resize the workload in slices, '
    "which only batch Jobs and Ray's RayCluster, RayJob and RayService support; with the "
    "ElasticJobsViaWorkloadSlices feature (on by default since v0.18) Kueue's job webhook "
    "refuses the annotation on any other kind (Forbidden: elastic job is not supported).",
    fix="Drop the annotation (PyTorchJob, JobSet and MPIJob are admitted whole), or run the "
    "workload as a kind Kueue can slice.",
    kinds=EVERY_KIND,
    applies=_elastic,
)
def elastic_job_kind(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind not in POD_KINDS or (doc.api_version, doc.kind) in ELASTIC_KINDS:
        return
    enabled = ctx.memo("kueue-frameworks", lambda: scheduling.kueue_frameworks(ctx))
    wanted = scheduling.framework(doc)
    if enabled is not None and wanted is not None and wanted not in enabled:
        return  # no webhook for this kind: kueue-framework-disabled says so
    yield Violation(
        f'{ELASTIC_ANNOTATION}: "true" on a {doc.kind} {doc.api_version}: Kueue\'s webhook '
        "refuses it (elastic jobs are batch Jobs and Ray clusters only)",
        ("metadata", "annotations", ELASTIC_ANNOTATION),
    )


@resource_rule(
    id="kueue-admission-checks-both",
    severity=WARNING,
    source=KUEUE + "apis/kueue/v1beta1/clusterqueue_conversion.go#L48-L59",
    title="A v1beta1 ClusterQueue names its admission checks one way",
    why="A kueue.x-k8s.io/v1beta1 ClusterQueue may list admissionChecks or an "
    "admissionChecksStrategy, not both; Kueue v0.19 stores v1beta2, and its conversion "
    "replaces the strategy with the plain list: the onFlavors rules are dropped without a "
    "word and every check runs for every flavor (provisioning requests for flavors that need "
    "none, admission held back on them).",
    fix="Keep only admissionChecksStrategy (with onFlavors where a check applies to some "
    "flavors), or move the ClusterQueue to kueue.x-k8s.io/v1beta2.",
    kinds=("ClusterQueue",),
    applies=_kueue,
)
def admission_checks_both(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    strategy = mapping(spec.get("admissionChecksStrategy")).get("admissionChecks")
    if doc.api_version.endswith("/v1beta1") and spec.get("admissionChecks") and strategy:
        yield Violation(
            "admissionChecks and admissionChecksStrategy together: the conversion to v1beta2 "
            "keeps only admissionChecks, for every flavor",
            ("spec", "admissionChecksStrategy"),
        )


def _tolerated(taint: dict, tolerations: list[dict]) -> bool:
    """A NoSchedule/NoExecute taint some toleration matches (Kubernetes' ToleratesTaint)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key")
        if operator == "Exists" and (not key or key == taint.get("key")):
            return True
        value = str(toleration.get("value") or "")
        if (
            operator == "Equal"
            and key == taint.get("key")
            and value == str(taint.get("value") or "")
        ):
            return True
    return False


def _flavor_refuses(flavor: Document, pod: PodTemplate) -> str | None:
    """Why Kueue cannot assign this flavor to the pod set, from its nodeSelector and
    tolerations (required node affinity is left out: it can only refuse more)."""
    spec = mapping(flavor.obj.get("spec"))
    labels = mapping(spec.get("nodeLabels"))
    for key, value in mapping(pod.spec.get("nodeSelector")).items():
        if key in labels and str(labels[key]) != str(value):
            return f"nodeSelector {key}={value} against the flavor's {key}={labels[key]}"
    tolerations = dicts(pod.spec.get("tolerations")) + dicts(spec.get("tolerations"))
    for taint in dicts(spec.get("nodeTaints")):
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(
            taint, tolerations
        ):
            return f"its taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    return None


@pod_rule(
    id="kueue-flavor-matches-pods",
    severity=ERROR,
    source=KUEUE + "pkg/scheduler/flavorassigner/flavorassigner.go#L1208-L1256",
    title="Some flavor of the ClusterQueue suits the queued pods' node selector and tolerations",
    why="Kueue assigns a ResourceFlavor to a pod set only when the pods' nodeSelector (for the "
    "label keys the flavor sets) matches the flavor's nodeLabels and the pods tolerate the "
    "flavor's nodeTaints; when no flavor of the resource group covering the GPUs passes "
    "('flavor ... doesn't match node affinity', 'untolerated taint') the workload is never "
    "admitted and waits without failing.",
    fix="Make the pods' nodeSelector agree with a flavor's nodeLabels (or drop it: Kueue adds "
    "the flavor's labels itself) and tolerate the flavor's taints, or add a matching flavor.",
    applies=common.queued_pod,
)
def flavor_matches_pods(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    queue = _queue_label(pod.doc)
    namespace = common.pod_namespace(pod)
    local = ctx.find("LocalQueue", queue, namespace) if queue and namespace else None
    name = mapping(local.obj.get("spec")).get("clusterQueue") if local is not None else None
    cluster_queue = ctx.find("ClusterQueue", str(name)) if name else None
    if cluster_queue is None:
        return
    requested = _requested(pod)
    for group in dicts(mapping(cluster_queue.obj.get("spec")).get("resourceGroups")):
        covered = [str(r) for r in group.get("coveredResources") or [] if str(r) in requested]
        names = [str(f.get("name")) for f in dicts(group.get("flavors")) if f.get("name")]
        if not covered or not names:
            continue
        flavors = [ctx.find("ResourceFlavor", flavor) for flavor in names]
        if any(flavor is None for flavor in flavors):
            continue  # a flavor the render does not hold may suit them
        reasons = [_flavor_refuses(flavor, pod) for flavor in flavors if flavor is not None]
        if all(reasons):
            detail = "; ".join(f"{n}: {r}" for n, r in zip(names, reasons, strict=True))
            yield Violation(
                f"no flavor of ClusterQueue {cluster_queue.name} for {', '.join(covered)} suits "
                f"the {pod.role} pods ({detail}): Kueue never admits the job",
                (*pod.path, "nodeSelector")
                if pod.spec.get("nodeSelector")
                else (*pod.path, "tolerations"),
            )


def _stopped(doc: Document) -> bool:
    return _kueue(doc) and mapping(doc.obj.get("spec")).get("stopPolicy") in (
        "Hold",
        "HoldAndDrain",
    )


@resource_rule(
    id="kueue-queue-stopped",
    severity=WARNING,
    source=KUEUE + "apis/kueue/v1beta2/clusterqueue_types.go#L132-L144",
    title="Queues in Git are not left stopped",
    why="stopPolicy Hold (or HoldAndDrain) stops a ClusterQueue or LocalQueue from admitting "
    "anything (HoldAndDrain also evicts what runs); written in Git it outlives the "
    "maintenance it was meant for, and every job sent there waits with no error.",
    fix="Set stopPolicy: None (or drop it) once the maintenance is over; stop a queue with "
    "kubectl during maintenance instead of in Git.",
    kinds=("ClusterQueue", "LocalQueue"),
    applies=_stopped,
)
def queue_stopped(doc: Document, ctx: Context) -> Iterator[Violation]:
    policy = mapping(doc.obj.get("spec")).get("stopPolicy")
    yield Violation(
        f"{doc.kind} {doc.name} has stopPolicy {policy}: it admits no workload",
        ("spec", "stopPolicy"),
    )


POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"


def _pod_group_member(doc: Document) -> bool:
    """Queued Pods that say something about a Kueue pod group (the `applies` predicate)."""
    notes = mapping(doc.metadata.get("annotations"))
    labels = mapping(doc.metadata.get("labels"))
    return (
        doc.kind == "Pod"
        and common.queued(doc)
        and (POD_GROUP_NAME in labels or POD_GROUP_COUNT in notes)
    )


@resource_rule(
    id="kueue-pod-group-metadata",
    severity=ERROR,
    source=(
        KUEUE + "pkg/controller/jobs/pod/pod_webhook.go#L277-L303",
        KUEUE + "pkg/controller/jobs/pod/pod_controller.go#L644-L667",
    ),
    title="Pods of a Kueue pod group carry both its name and its size",
    why="Kueue's pod webhook refuses a queued Pod with the kueue.x-k8s.io/pod-group-name "
    "label but no kueue.x-k8s.io/pod-group-total-count annotation (or the other way round), "
    "and one whose total count is not a whole number above zero: the pods are never created.",
    fix="Give every pod of the group the same pod-group-name label and a "
    'pod-group-total-count annotation with the number of pods (a string, e.g. "4").',
    kinds=("Pod",),
    applies=_pod_group_member,
)
def pod_group_metadata(doc: Document, ctx: Context) -> Iterator[Violation]:
    notes = mapping(doc.metadata.get("annotations"))
    labels = mapping(doc.metadata.get("labels"))
    if POD_GROUP_NAME not in labels:
        yield Violation(
            f"{POD_GROUP_COUNT} without the {POD_GROUP_NAME} label: both must be set",
            ("metadata", "annotations", POD_GROUP_COUNT),
        )
        return
    if POD_GROUP_COUNT not in notes:
        yield Violation(
            f"{POD_GROUP_NAME} without the {POD_GROUP_COUNT} annotation: both must be set",
            ("metadata", "labels", POD_GROUP_NAME),
        )
        return
    count = str(notes[POD_GROUP_COUNT]).strip()
    try:
        size = int(count)
    except ValueError:
        size = 0
    if size < 1 or count != str(notes[POD_GROUP_COUNT]):
        yield Violation(
            f"{POD_GROUP_COUNT}: {notes[POD_GROUP_COUNT]!r} is not a whole number above zero",
            ("metadata", "annotations", POD_GROUP_COUNT),
        )
