"""Tenancy: a run stays in its team's namespace, queue and priorities, attaches only the
approved network and pulls only from the approved registries.

The facts come from the render, as the cluster's admission policy sees them: the
`trainops-runs` ConfigMap of the job's namespace (generated from the profile,
`trainops.profile.tenancy.params`) says which team owns the namespace, its queue,
priorities, networks and registries. A run's directory adds what admission cannot
see: `overlays/<cluster>/teams/<team>/runs/<run>/` belongs to that team.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, needs, pod_rule, resource_rule
from trainops.policy.pods import REPLICA_FIELDS, TRAINING_KINDS, PodTemplate, dicts, mapping
from trainops.profile.tenancy import (
    JOB_LABELS,
    JOBS_APART,
    METRICS_PORT,
    PARAMS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    TEAM_LABEL,
    from_registry,
)

from .placement import trainjob_volcano_queue

JOB_KINDS = (*REPLICA_FIELDS, "TrainJob")
# The cluster's generated admission policy refuses what these rules report (a
# ValidatingAdmissionPolicy per team, trainops.profile.admission), as the threat model says.
TENANCY = "docs/security.md#what-a-run-can-and-cannot-do"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"  # Multus: replaces the cluster network
SCHEDULING = ("spec", "runPolicy", "schedulingPolicy")
SCHEDULER_LABEL = "trainops.dev/scheduler"  # set by base/components/scheduler/*
JOB_NAME_LABELS = tuple(dict.fromkeys(JOB_LABELS.values()))


def params(ctx: Context, namespace: str) -> dict[str, str] | None:
    """The tenancy parameters of `namespace`, when the render (or the platform) has them."""
    found = ctx.find("ConfigMap", PARAMS, namespace or "default")
    if found is None:
        return None
    data = mapping(found.obj.get("data"))
    return {str(k): str(v) for k, v in data.items()}


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


@needs(kinds=TRAINING_KINDS)
def job_pod(pod: PodTemplate) -> bool:
    """Pods of the training job kinds, which the cluster's admission policy matches (a
    platform CronJob holding a GPU is not a run)."""
    return pod.training


def directory_team(ctx: Context) -> str | None:
    """The team whose directory a run lives in: overlays/<cluster>/teams/<team>/runs/<run>."""
    parts = ctx.target.path.replace("\\", "/").split("/")
    for index in range(len(parts) - 2):
        if parts[index] == "teams" and parts[index + 2] == "runs":
            return parts[index + 1]
    return None


@resource_rule(
    id="run-team-namespace",
    security=True,
    severity=ERROR,
    source=TENANCY,
    title="A team's run stays in the team's namespace and says whose it is",
    why="Each team's runs sync into its own namespace under its own Argo CD project, and its "
    "queue holds its quota. A run in one team's directory that names another namespace either "
    "fails its sync (the project refuses the namespace) or, applied by hand, spends the other "
    "team's quota; the admission policy refuses a job whose team label is not its namespace's.",
    fix="Leave metadata.namespace to the run's kustomization (namespace: <team>) and keep the "
    "label trainops.dev/team: <team>; `trainops new-run CLUSTER RUN --team TEAM` writes both.",
    kinds=JOB_KINDS,
)
def run_team_namespace(doc: Document, ctx: Context) -> Iterator[Violation]:
    team = directory_team(ctx)
    namespace = doc.namespace or "default"
    if team is not None and namespace != team:
        yield Violation(
            f"the run is in team {team}'s directory but its job is in namespace {namespace}",
            ("metadata", "namespace"),
        )
    elif team is None and ctx.is_run:
        owner = (params(ctx, namespace) or {}).get("team")
        if owner:
            yield Violation(
                f"the run is not in a team's directory (overlays/<cluster>/teams/<team>/runs/) "
                f"but its job is in team {owner}'s namespace {namespace}: it would spend that "
                "team's quota outside the team's project",
                ("metadata", "namespace"),
            )
    owner = (params(ctx, namespace) or {}).get("team")
    label = mapping(doc.metadata.get("labels")).get(TEAM_LABEL)
    if owner and label != owner:
        shown = f"label {TEAM_LABEL}: {label}" if label else f"no {TEAM_LABEL} label"
        yield Violation(
            f"namespace {namespace} belongs to team {owner}, but the job has {shown}",
            ("metadata", "labels"),
        )


def _scheduler(doc: Document) -> str:
    """The scheduler the job's cluster runs, as the scheduler component labels it."""
    return str(mapping(doc.metadata.get("labels")).get(SCHEDULER_LABEL, ""))


def _job_queue(doc: Document, ctx: Context) -> tuple[str | None, tuple[Any, ...]]:
    """The queue a job waits in, and where it says so."""
    labels = mapping(doc.metadata.get("labels"))
    spec = mapping(doc.obj.get("spec"))
    if _scheduler(doc) != "volcano":
        value = labels.get(QUEUE_LABEL)
        return (str(value) if value else None), ("metadata", "labels", QUEUE_LABEL)
    if doc.kind != "TrainJob":
        value = mapping(mapping(spec.get("runPolicy")).get("schedulingPolicy")).get("queue")
        return (str(value) if value else None), (*SCHEDULING, "queue")
    return trainjob_volcano_queue(doc, ctx)


@resource_rule(
    id="run-team-queue",
    security=True,
    severity=ERROR,
    source=TENANCY,
    title="Jobs queue in their namespace's queue",
    why="A team's quota is its queue. A job that names another team's queue (a Kueue "
    "LocalQueue of another namespace does not exist here; a Volcano queue is cluster-wide) "
    "either waits forever or runs on the other team's quota, and the admission policy refuses "
    "it.",
    fix="Drop the queue override: the run's team (new-run --team) sets the queue.",
    kinds=JOB_KINDS,
)
def run_team_queue(doc: Document, ctx: Context) -> Iterator[Violation]:
    wanted = (params(ctx, doc.namespace or "default") or {}).get("queue")
    if not wanted or _scheduler(doc) not in ("kueue", "volcano"):
        return
    queue, path = _job_queue(doc, ctx)
    if queue != wanted:
        shown = f"queue {queue}" if queue else "no queue"
        yield Violation(
            f"jobs in namespace {doc.namespace or 'default'} queue in {wanted}; this one names "
            f"{shown}",
            path,
        )


@resource_rule(
    id="run-priority-allowed",
    security=True,
    severity=ERROR,
    source=TENANCY,
    title="Jobs use a priority their team may use",
    why="Priorities decide who preempts whom: a team that may only run best-effort jobs and "
    "labels one urgent evicts other teams' work. The admission policy refuses it.",
    fix="Pick one of the team's priorities (teams[].priorities in cluster.yaml): "
    "`trainops new-run ... --priority NAME`.",
    kinds=JOB_KINDS,
)
def run_priority_allowed(doc: Document, ctx: Context) -> Iterator[Violation]:
    allowed = _list((params(ctx, doc.namespace or "default") or {}).get("priorities", ""))
    scheduler = _scheduler(doc)
    if not allowed or scheduler not in ("kueue", "volcano"):
        return
    if scheduler == "kueue":
        path: tuple[Any, ...] = ("metadata", "labels", PRIORITY_LABEL)
        name = mapping(doc.metadata.get("labels")).get(PRIORITY_LABEL)
    elif doc.kind == "TrainJob":
        return  # Volcano: a TrainJob's PodGroup takes its runtime's priority
    else:
        path = (*SCHEDULING, "priorityClass")
        policy = mapping(
            mapping(mapping(doc.obj.get("spec")).get("runPolicy")).get("schedulingPolicy")
        )
        name = policy.get("priorityClass")
    if name not in allowed:
        yield Violation(
            f"priority {name or '(none)'} is not one of {', '.join(allowed)} allowed in "
            f"namespace {doc.namespace or 'default'}",
            path,
        )


@pod_rule(
    id="network-attachment-approved",
    security=True,
    severity=ERROR,
    source=TENANCY,
    title="Pods attach only the cluster's training network, from their own namespace",
    why="An attachment names a NetworkAttachmentDefinition, and through it a CNI plugin, host "
    "interfaces and an address range. One from another namespace, or one the platform did not "
    "define, can put a pod on another team's or the hosts' network; the admission policy "
    "refuses it.",
    fix="Attach training-net (the cluster's network, copied into every team's namespace) and "
    "nothing else, and leave v1.multus-cni.io/default-network unset; the template's "
    "annotation already does.",
    applies=job_pod,
)
def network_attachment_approved(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    approved = _list((params(ctx, pod.doc.namespace or "default") or {}).get("networks", ""))
    if approved and DEFAULT_NETWORK in pod.annotations:
        yield Violation(
            f"{DEFAULT_NETWORK}: {str(pod.annotations[DEFAULT_NETWORK])[:100]!r} replaces the "
            "pod's cluster network with an attachment: a team's pod keeps the platform's",
            (*pod.path[:-1], "metadata", "annotations", DEFAULT_NETWORK),
        )
    value = pod.annotations.get(NETWORKS)
    if not approved or value is None:
        return
    for entry in str(value).split(","):
        if entry.strip() not in approved:
            yield Violation(
                f"attachment {entry.strip()!r} is not one of the approved {', '.join(approved)}",
                (*pod.path[:-1], "metadata", "annotations", NETWORKS),
            )


@pod_rule(
    id="image-registry-approved",
    security=True,
    severity=ERROR,
    source=TENANCY,
    title="Training images come from the cluster's registries",
    why="A training pod holds the team's data and the cluster's GPUs and network; an image "
    "from anywhere runs whatever its publisher put in it. The cluster names its registries "
    "(registries in cluster.yaml) and the admission policy refuses the others.",
    fix="Push the image to one of the approved registries, or add the registry to the "
    "profile's registries (a platform change, reviewed as such).",
    applies=job_pod,
)
def image_registry_approved(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    approved = _list((params(ctx, pod.doc.namespace or "default") or {}).get("registries", ""))
    if not approved:
        return
    for section in ("containers", "initContainers"):
        for index, container in enumerate(pod.spec.get(section) or []):
            image = str(mapping(container).get("image", ""))
            if not any(from_registry(image, prefix) for prefix in approved):
                yield Violation(
                    f"image {image} is not from {', '.join(approved)}",
                    (*pod.path, section, index, "image"),
                )
    for index, volume in enumerate(dicts(pod.spec.get("volumes"))):
        if "image" not in volume:
            continue
        image = str(mapping(volume.get("image")).get("reference", ""))
        if not any(from_registry(image, prefix) for prefix in approved):
            yield Violation(
                f"image volume {volume.get('name')} mounts {image or '(no reference)'}, "
                f"not from {', '.join(approved)}",
                (*pod.path, "volumes", index, "image", "reference"),
            )


def _job_of_selector(selector: Any) -> tuple[str, str] | None:
    """The job a pod selector names by its controller's job label, if it names one."""
    labels = mapping(mapping(selector).get("matchLabels"))
    for key in JOB_NAME_LABELS:
        if isinstance(labels.get(key), str):
            return key, labels[key]
    return None


def _opens_metrics_only(ports: Any) -> bool:
    """Whether a rule's ports are the named metrics port alone (numbers name no one port)."""
    return (
        isinstance(ports, list)
        and bool(ports)
        and all(
            isinstance(port, dict) and port.get("port") == METRICS_PORT and "endPort" not in port
            for port in ports
        )
    )


@resource_rule(
    id="network-policy-own-job",
    security=True,
    severity=ERROR,
    source=TENANCY,
    title="In a team namespace, a NetworkPolicy opens a job's pods to that job's pods only",
    why="The tenant namespaces admit no connection between pods (the platform's "
    f"{JOBS_APART} policy opens only the metrics port), so no run reaches another job's "
    "rendezvous, TCPStore or NCCL sockets; each job's own policy opens its pods to each "
    "other. NetworkPolicies add up: one that selects another job's pods and admits any "
    "other pod, namespace or address reopens that job, and one that isolates egress can "
    "cut every pod it selects off the network. The admission policy refuses both.",
    fix="Keep the policy new-run writes: named after the job, selecting the job's pods by "
    "their controller's job label and admitting the pods of the same label value.",
    kinds=("NetworkPolicy",),
)
def network_policy_own_job(doc: Document, ctx: Context) -> Iterator[Violation]:
    if params(ctx, doc.namespace or "default") is None:
        return
    spec = mapping(doc.obj.get("spec"))
    types = spec.get("policyTypes") if isinstance(spec.get("policyTypes"), list) else []
    if "egress" in spec or "Egress" in types:
        yield Violation(
            "the policy isolates egress: in a team namespace a NetworkPolicy isolates "
            "ingress only, or it can cut other jobs' pods off the network",
            ("spec", "policyTypes") if "Egress" in types else ("spec", "egress"),
        )
    job = _job_of_selector(spec.get("podSelector"))
    for index, rule in enumerate(spec.get("ingress") or []):
        rule = mapping(rule)
        peers = rule.get("from")
        if not peers:
            if not _opens_metrics_only(rule.get("ports")):
                yield Violation(
                    f"ingress rule {index} admits every pod and address on ports other than "
                    f"{METRICS_PORT}: a job's pods admit their own job's pods only",
                    ("spec", "ingress", index),
                )
            continue
        for position, peer in enumerate(peers if isinstance(peers, list) else [None]):
            peer = mapping(peer)
            own = (
                job is not None
                and set(peer) == {"podSelector"}
                and mapping(mapping(peer["podSelector"]).get("matchLabels")).get(job[0]) == job[1]
            )
            if not own:
                whose = f"job {job[1]}'s pods" if job else "pods of no one job"
                yield Violation(
                    f"ingress rule {index} admits peer {position} into {whose}: only the pods "
                    f"of the same job ({' or '.join(JOB_NAME_LABELS)} of the selected pods) "
                    "may come in",
                    ("spec", "ingress", index, "from", position),
                )
