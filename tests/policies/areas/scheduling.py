"""Fixtures of the scheduling area's rules (policies/queues.py, scheduling.py, topology.py,
volcano.py): Kueue's queue objects and pod-set annotations, PriorityClasses, the KAI
scheduler, scheduler-plugins coscheduling, and Volcano's job and queue webhooks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import (
    ALL_COVERED,
    NAMESPACE,
    Docs,
    baseline,
    cluster_queue,
    edit,
    job,
    jobset,
    kueue_topology,
    platform,
    pod,
    volcano_job,
)

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
RACK = "topology.kubernetes.io/rack"
BLOCK = "cloud.provider.com/topology-block"


# -- Kueue pod-set annotations ------------------------------------------------------------


def _worker_annotations(**notes: str) -> Callable[[], Docs]:
    """The baseline with annotations (keys with '__' for '/', '_' for '-') on the PyTorchJob's
    Worker template."""

    def change(docs: Docs) -> None:
        template = job(docs)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
        for key, value in notes.items():
            template["metadata"]["annotations"][_key(key)] = value

    return edit(change)


def _key(name: str) -> str:
    return "kueue.x-k8s.io/" + name.replace("_", "-")


def _job_annotation(on_templates: bool) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        doc = job(docs)
        if on_templates:
            for replica in doc["spec"]["pytorchReplicaSpecs"].values():
                replica["template"]["metadata"]["annotations"][PREFERRED] = RACK
        else:
            doc["metadata"]["annotations"] = {PREFERRED: RACK}

    return edit(change)


def _grouped_jobset(worker_topology: str | None) -> Callable[[], Docs]:
    """A queued JobSet of a one-pod leader and four workers grouped by podset-group-name."""

    def build() -> Docs:
        doc = jobset()
        doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "training"}
        workers = doc["spec"]["replicatedJobs"][0]
        leader = copy.deepcopy(workers)
        leader["name"] = "leader"
        leader["template"]["spec"].update(parallelism=1, completions=1)
        doc["spec"]["replicatedJobs"].insert(0, leader)
        for replicated, topology in ((leader, RACK), (workers, worker_topology)):
            notes = replicated["template"]["spec"]["template"]["metadata"]["annotations"]
            notes["kueue.x-k8s.io/podset-group-name"] = "llm"
            if topology:
                notes[REQUIRED] = topology
        return [*platform(), doc]

    return build


# -- Kueue queue objects ------------------------------------------------------------------


def _cluster_queue(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "1k"}]}
                    ],
                }
            ],
            **spec,
        },
    }


def _flavor(name: str, topology: str | None = None, **spec: Any) -> dict[str, Any]:
    if topology:
        spec["topologyName"] = topology
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def _topology(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}]},
    }


def _admission_check(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"},
    }


def _with(*documents: dict[str, Any]) -> Callable[[], Docs]:
    return lambda: [*baseline(), *copy.deepcopy(list(documents))]


def _checks(on_flavor: str) -> dict[str, Any]:
    return {"admissionChecks": [{"name": "provision", "onFlavors": [on_flavor]}]}


def _elastic(value: str) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        job(docs)["metadata"]["annotations"] = {"kueue.x-k8s.io/elastic-job": value}

    return edit(change)


# -- PriorityClasses ----------------------------------------------------------------------


def _priority(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


# -- KAI scheduler and coscheduling -------------------------------------------------------


def _kai_queue(name: str, resources: bool = True, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if resources:
        quota = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
        spec["resources"] = {"gpu": quota, "cpu": quota, "memory": quota}
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _kai_job(queue: str) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        docs.extend([_kai_queue("research"), _kai_queue("team-a", parent="research")])
        job(docs)["metadata"]["labels"]["kai.scheduler/queue"] = queue

    return edit(change)


def _kai_scheduled(scheduler: str | None) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        doc = job(docs)
        doc["metadata"]["labels"]["kai.scheduler/queue"] = "team-a"
        for replica in doc["spec"]["pytorchReplicaSpecs"].values():
            if scheduler:
                replica["template"]["spec"]["schedulerName"] = scheduler

    return edit(change)


def _kai_shared(fraction: str, whole_gpus: bool = False) -> Callable[[], Docs]:
    """The job on KAI with gpu-fraction `fraction` on its pods, and nvidia.com/gpu limits
    only if `whole_gpus`."""

    def change(docs: Docs) -> None:
        doc = job(docs)
        doc["metadata"]["labels"]["kai.scheduler/queue"] = "team-a"
        for replica in doc["spec"]["pytorchReplicaSpecs"].values():
            template = replica["template"]
            template["spec"]["schedulerName"] = "kai-scheduler"
            template.setdefault("metadata", {}).setdefault("annotations", {})["gpu-fraction"] = (
                fraction
            )
            for container in template["spec"]["containers"]:
                for section in container.get("resources", {}).values():
                    if not whole_gpus:
                        section.pop("nvidia.com/gpu", None)

    return edit(change)


def _volcano_budget(**budgets: str) -> Callable[[], Docs]:
    """A batch/v1 Job scheduled by volcano whose pods carry the disruption budgets
    (keyword min/max for volcano.sh/jdb-min-available / jdb-max-unavailable)."""
    keys = {"min": "volcano.sh/jdb-min-available", "max": "volcano.sh/jdb-max-unavailable"}

    def docs() -> Docs:
        template = pod()
        template["spec"]["schedulerName"] = "volcano"
        template["spec"]["restartPolicy"] = "Never"
        template["metadata"]["annotations"].update({keys[k]: v for k, v in budgets.items()})
        batch = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "eval", "namespace": NAMESPACE},
            "spec": {"template": template},
        }
        return [*platform(), batch]

    return docs


def _workload_priority(name: str) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        docs.append(_priority("training-high", 1000))
        job(docs)["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = name

    return edit(change)


def _pod_group(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"minMember": min_member},
    }


def _coscheduled(group: str, label: str, min_member: int = 4) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        docs.append(_pod_group(group, min_member))
        for replica in job(docs)["spec"]["pytorchReplicaSpecs"].values():
            replica["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = label

    return edit(change)


# -- Volcano ------------------------------------------------------------------------------


def _volcano(change: Callable[[dict[str, Any]], None]) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = volcano_job({"svc": []})
        change(doc)
        return [*platform(), doc]

    return build


def _task_name(index: int, name: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["tasks"][index]["name"] = name

    return change


def _task_field(index: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["tasks"][index].update(fields)

    return change


def _numa(cpus: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        task = doc["spec"]["tasks"][1]
        task["topologyPolicy"] = "single-numa-node"
        for container in task["template"]["spec"]["containers"]:
            container["resources"]["requests"]["cpu"] = cpus

    return change


def _spec(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["spec"].update(copy.deepcopy(fields))


def _volcano_queue(**spec: Any) -> Callable[[], Docs]:
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {"weight": 1, **spec},
    }
    return lambda: [*platform(), copy.deepcopy(queue)]


def _volcano_tree(queue: str) -> Callable[[], Docs]:
    def build() -> Docs:
        parent = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 1},
        }
        child = copy.deepcopy(parent)
        child["metadata"]["name"] = "vision"
        child["spec"]["parent"] = "research"
        doc = volcano_job({"svc": []})
        doc["spec"]["queue"] = queue
        return [*platform(), parent, child, doc]

    return build


def _volcano_children(parent_deserved: dict[str, Any]) -> Callable[[], Docs]:
    """Queue research (deserved `parent_deserved`) with two child queues of 8 GPUs each."""

    def build() -> Docs:
        parent = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 1, **({"deserved": parent_deserved} if parent_deserved else {})},
        }
        children = []
        for name in ("vision", "nlp"):
            child = copy.deepcopy(parent)
            child["metadata"]["name"] = name
            child["spec"] = {"weight": 1, "parent": "research", "deserved": {"nvidia.com/gpu": 8}}
            children.append(child)
        return [*platform(), parent, *children]

    return build


def _queued_pod_group(queue: str) -> Callable[[], Docs]:
    """A Volcano PodGroup sent to `queue`, beside the render's one Volcano Queue, research."""

    def build() -> Docs:
        queue_doc = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 1},
        }
        group = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "vit", "namespace": NAMESPACE},
            "spec": {"queue": queue, "minMember": 2},
        }
        return [*platform(), queue_doc, group]

    return build


def _v1beta1_checks(both: bool) -> Callable[[], Docs]:
    queue = _cluster_queue(admissionChecksStrategy=_checks("default"))
    queue["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    if both:
        queue["spec"]["admissionChecks"] = ["provision"]
    return _with(queue, _flavor("default"), _admission_check("provision"))


def _volcano_pod_group(**topology: Any) -> Callable[[], Docs]:
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "llama", "namespace": NAMESPACE},
        "spec": {"minMember": 4, "networkTopology": {"mode": "hard", **topology}},
    }
    return lambda: [*platform(), copy.deepcopy(group)]


def _flavor_for(**spec: Any) -> Callable[[], Docs]:
    return _with(_cluster_queue(), _flavor("default", **spec))


def _stopped(policy: str) -> Callable[[], Docs]:
    return _with(_cluster_queue(stopPolicy=policy), _flavor("default"))


H100 = "NVIDIA-H100-80GB-HBM3"
PRODUCT = "nvidia.com/gpu.product"


def _grouped_pod(**notes: str) -> Callable[[], Docs]:
    def build() -> Docs:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "trainer-0",
                "namespace": NAMESPACE,
                "labels": {
                    "kueue.x-k8s.io/queue-name": "training",
                    "kueue.x-k8s.io/pod-group-name": "trainer",
                },
                "annotations": dict(notes),
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "trainer", "image": "ghcr.io/acme/trainer:1.0"}],
            },
        }
        return [*platform(), pod]

    return build


def _slice_level(label: str) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        docs.append(kueue_topology({BLOCK: 8, RACK: 4, "kubernetes.io/hostname": 1}))
        notes = job(docs)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
        notes["annotations"].update(
            {
                PREFERRED: BLOCK,
                "kueue.x-k8s.io/podset-slice-required-topology": label,
                "kueue.x-k8s.io/podset-slice-size": "1",
            }
        )

    return edit(change)


def _kai_podgroup(**change: Any) -> dict[str, Any]:
    """A KAI PodGroup of two replicas, each a prefill and a decode gang; `change` edits the
    SubGroup named by its key ('' for the PodGroup itself), None removing a field."""
    groups = [
        {"name": "replica-0", "minSubGroup": 2},
        {"name": "replica-1", "minSubGroup": 2},
        {"name": "prefill-0", "parent": "replica-0", "minMember": 2},
        {"name": "decode-0", "parent": "replica-0", "minMember": 4},
        {"name": "prefill-1", "parent": "replica-1", "minMember": 2},
        {"name": "decode-1", "parent": "replica-1", "minMember": 4},
    ]
    spec: dict[str, Any] = {"queue": "team-a", "minSubGroup": 2, "subGroups": groups}
    for name, fields in change.items():
        target = spec if name == "" else next(g for g in groups if g["name"] == name)
        for key, value in fields.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "disagg", "namespace": NAMESPACE},
        "spec": spec,
    }


def _queued_batch_job(annotations: dict[str, str], **spec: Any) -> Callable[[], Docs]:
    """A queued batch Job of 8 pods with Kueue's partial-admission annotations."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sweep",
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": "training"},
            "annotations": annotations,
        },
        "spec": {
            "parallelism": 8,
            "completions": 8,
            "completionMode": "Indexed",
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "registry.example.com/sweep:1.0"}],
                }
            },
        },
    }
    return lambda: [copy.deepcopy(job)]


def _queued_raycluster(autoscaling: bool = False, group: str = "gpu-workers") -> Callable[[], Docs]:
    container = {"name": "ray", "image": "rayproject/ray:2.49.0"}
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "ray",
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": "training"},
        },
        "spec": {
            "enableInTreeAutoscaling": autoscaling,
            "headGroupSpec": {"template": {"spec": {"containers": [container]}}},
            "workerGroupSpecs": [
                {
                    "groupName": group,
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
    }
    return lambda: [copy.deepcopy(cluster)]


MIN = "kueue.x-k8s.io/job-min-parallelism"
SYNC = "kueue.x-k8s.io/job-completions-equal-parallelism"


def _jobset_failure_pattern(pattern: str) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = baseline()
        found = jobset()
        rule = {
            "name": "ignorePreemption",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureMessagePatterns": [pattern],
        }
        found["spec"]["failurePolicy"]["rules"] = [rule]
        return [*docs, found]

    return build


def _hypernode(pattern: str) -> Callable[[], Docs]:
    node = {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": "rack-a1"},
        "spec": {
            "tier": 1,
            "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": pattern}}}],
        },
    }
    return lambda: [copy.deepcopy(node)]


def _elastic_quota(gpus: str) -> Callable[[], Docs]:
    """The baseline's PyTorchJob (8 GPUs a pod) under the capacity scheduler and a quota."""

    def build() -> Docs:
        docs = baseline()
        for spec in job(docs)["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
        quota = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "team-a", "namespace": NAMESPACE},
            "spec": {"min": {"nvidia.com/gpu": "4"}, "max": {"nvidia.com/gpu": gpus}},
        }
        return [*docs, quota]

    return build


FIXTURES: dict[str, Pair] = {
    "kueue-topology-annotations": (
        _worker_annotations(podset_required_topology=RACK, podset_preferred_topology=BLOCK),
        _worker_annotations(podset_required_topology=RACK),
    ),
    "kueue-podset-group": (_grouped_jobset(None), _grouped_jobset(RACK)),
    "kueue-topology-annotation-on-job": (_job_annotation(False), _job_annotation(True)),
    "kueue-queue-references": (
        _with(_cluster_queue(), _flavor("gpu")),
        _with(_cluster_queue(), _flavor("default")),
    ),
    "kueue-admission-check-flavors": (
        _with(_cluster_queue(admissionChecksStrategy=_checks("gpu")), _flavor("default")),
        _with(_cluster_queue(admissionChecksStrategy=_checks("default")), _flavor("default")),
    ),
    "kueue-fair-sharing-weight": (
        _with(_cluster_queue(fairSharing={"weight": "-1"})),
        _with(_cluster_queue(fairSharing={"weight": "0"})),
    ),
    "kueue-elastic-job-kind": (_elastic("true"), _elastic("false")),
    "kueue-admission-checks-both": (_v1beta1_checks(True), _v1beta1_checks(False)),
    "kueue-flavor-matches-pods": (
        _flavor_for(nodeLabels={PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
        _flavor_for(nodeLabels={PRODUCT: H100}),
    ),
    "kueue-queue-stopped": (_stopped("Hold"), _stopped("None")),
    "kueue-pod-group-metadata": (
        _grouped_pod(),
        _grouped_pod(**{"kueue.x-k8s.io/pod-group-total-count": "4"}),
    ),
    "priority-class-global-default": (
        _with(_priority("batch", 100, default=True), _priority("training", 1000, default=True)),
        _with(_priority("batch", 100, default=True), _priority("training", 1000)),
    ),
    "priority-class-value": (
        _with(_priority("training", 2_000_000_000)),
        _with(_priority("training", 1_000_000_000)),
    ),
    "kai-queue-exists": (_kai_job("team-b"), _kai_job("team-a")),
    "kai-scheduler-name": (_kai_scheduled(None), _kai_scheduled("kai-scheduler")),
    "kai-gpu-request": (_kai_shared("1.0"), _kai_shared("0.75")),
    "volcano-pod-budget": (_volcano_budget(min="4", max="25%"), _volcano_budget(max="25%")),
    "kai-queue-spec": (
        _with(_kai_queue("team-a", resources=False)),
        _with(_kai_queue("team-a")),
    ),
    "kueue-job-annotations": (
        _queued_batch_job({MIN: "8"}),
        _queued_batch_job({MIN: "4"}),
    ),
    "kueue-raycluster-webhook": (
        _queued_raycluster(group="head"),
        _queued_raycluster(),
    ),
    "jobset-failure-pattern": (
        _jobset_failure_pattern("(?i)preempt(ed|ion"),
        _jobset_failure_pattern("(?i)preempt(ed|ion)"),
    ),
    "volcano-hypernode-pattern": (_hypernode("*gpu-a1-*"), _hypernode("^gpu-a1-.*$")),
    "elastic-quota-max": (_elastic_quota("4"), _elastic_quota("32")),
    "kai-podgroup-subgroups": (
        _with(_kai_podgroup(**{"decode-1": {"parent": "disagg"}})),
        _with(_kai_podgroup()),
    ),
    "coscheduling-min-member": (_coscheduled("llama", "llama", 5), _coscheduled("llama", "llama")),
    "coscheduling-pod-group-exists": (
        _coscheduled("llama", "lama"),
        _coscheduled("llama", "llama"),
    ),
    "volcano-job-tasks": (
        _volcano(_task_name(1, "launcher")),
        _volcano(_task_name(1, "workers")),
    ),
    "volcano-network-topology": (
        _volcano(
            _spec(
                networkTopology={"mode": "hard", "highestTierAllowed": 1, "highestTierName": "rack"}
            )
        ),
        _volcano(_spec(networkTopology={"mode": "hard", "highestTierAllowed": 1})),
    ),
    "volcano-plugin-known": (
        _volcano(_spec(plugins={"svc": [], "sshd": []})),
        _volcano(_spec(plugins={"svc": [], "ssh": []})),
    ),
    "volcano-queue-admission": (
        _volcano_queue(capability={"nvidia.com/gpu": 16}, deserved={"nvidia.com/gpu": 32}),
        _volcano_queue(capability={"nvidia.com/gpu": 32}, deserved={"nvidia.com/gpu": 32}),
    ),
    "volcano-queue-leaf": (_volcano_tree("research"), _volcano_tree("vision")),
    "volcano-queue-children-share": (
        _volcano_children({"nvidia.com/gpu": 12}),
        _volcano_children({"nvidia.com/gpu": 16}),
    ),
}


def _in_cohort(lent: str) -> Callable[[], Docs]:
    """The job's ClusterQueue (16 GPUs) in a cohort whose other queue holds `lent` GPUs:
    Kueue admits the workload's pod sets together, borrowing at most what the cohort lends."""

    def build() -> Docs:
        docs = copy.deepcopy(baseline())
        ours = cluster_queue(ALL_COVERED, gpus="16")
        ours["spec"]["cohort"] = "org"
        theirs = cluster_queue(ALL_COVERED, gpus=lent)
        theirs["metadata"]["name"] = "research"
        theirs["spec"]["cohort"] = "org"
        return [*docs, ours, theirs]

    return build


MORE: dict[str, list[Pair]] = {
    "kueue-quota-fits": [(_in_cohort("8"), _in_cohort("64"))],
    "kueue-topology-annotations": [
        (_worker_annotations(podset_slice_size="4"), _worker_annotations()),
        (
            _worker_annotations(podset_slice_required_topology=RACK),
            _worker_annotations(podset_slice_required_topology=RACK, podset_slice_size="3"),
        ),
        (
            _worker_annotations(podset_slice_required_topology=RACK, podset_slice_size="4"),
            _worker_annotations(podset_slice_required_topology=RACK, podset_slice_size="1"),
        ),
        (
            _worker_annotations(podset_unconstrained_topology="yes"),
            _worker_annotations(podset_unconstrained_topology="true"),
        ),
        (
            _worker_annotations(podset_required_topology=RACK, podset_group_name="1"),
            _worker_annotations(podset_required_topology=RACK, podset_group_name="one"),
        ),
        (_worker_annotations(podset_group_name="workers"), _worker_annotations()),
        (
            _worker_annotations(podset_required_topology="rack zone"),
            _worker_annotations(podset_required_topology=RACK),
        ),
        (
            _worker_annotations(
                podset_slice_required_topology_constraints=f'[{{"topology":"{BLOCK}","size":3}},'
                f'{{"topology":"{RACK}","size":2}}]'
            ),
            _worker_annotations(
                podset_slice_required_topology_constraints=f'[{{"topology":"{BLOCK}","size":2}},'
                f'{{"topology":"{RACK}","size":1}}]'
            ),
        ),
    ],
    "kueue-queue-references": [
        (
            _with(_cluster_queue(), _flavor("default", "default"), _topology("gpus")),
            _with(_cluster_queue(), _flavor("default", "gpus"), _topology("gpus")),
        ),
        (
            _with(
                _cluster_queue(admissionChecksStrategy=_checks("default")),
                _flavor("default"),
                _admission_check("provisioning"),
            ),
            _with(
                _cluster_queue(admissionChecksStrategy=_checks("default")),
                _flavor("default"),
                _admission_check("provision"),
            ),
        ),
    ],
    "kueue-flavor-matches-pods": [
        (
            _flavor_for(nodeTaints=[{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}]),
            _flavor_for(
                nodeTaints=[{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}],
                tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            ),
        ),
    ],
    "kueue-pod-group-metadata": [
        (
            _grouped_pod(**{"kueue.x-k8s.io/pod-group-total-count": "0"}),
            _grouped_pod(**{"kueue.x-k8s.io/pod-group-total-count": "1"}),
        ),
    ],
    "kueue-fair-sharing-weight": [
        (
            _with(_cluster_queue(fairSharing={"weight": "0.1n"})),
            _with(_cluster_queue(fairSharing={"weight": "0.5"})),
        ),
    ],
    "priority-class-value": [
        (_with(_priority("system-training", 1000)), _with(_priority("training-system", 1000))),
    ],
    "topology-level-known": [(_slice_level("example.com/rack"), _slice_level(RACK))],
    "priority-class-exists": [
        (_workload_priority("training-high"), _workload_priority("")),
    ],
    "kai-scheduler-name": [(_kai_scheduled("default-scheduler"), _kai_scheduled("kai-scheduler"))],
    "kai-gpu-request": [(_kai_shared("0.5", whole_gpus=True), _kai_shared("0.5"))],
    "volcano-pod-budget": [(_volcano_budget(max="100%"), _volcano_budget(min="1"))],
    "queue-exists": [(_queued_pod_group("reserach"), _queued_pod_group("research"))],
    "kai-queue-exists": [(_kai_job("research"), _kai_job("team-a"))],
    "kueue-job-annotations": [
        (
            _queued_batch_job({SYNC: "true"}, completionMode="NonIndexed"),
            _queued_batch_job({SYNC: "true"}),
        ),
        (_queued_batch_job({SYNC: "yes"}), _queued_batch_job({SYNC: "false"})),
        (_queued_batch_job({SYNC: "true"}, completions=16), _queued_batch_job({SYNC: "true"})),
        (_queued_batch_job({MIN: "0"}), _queued_batch_job({MIN: "1"})),
    ],
    "kueue-raycluster-webhook": [(_queued_raycluster(autoscaling=True), _queued_raycluster())],
    "kai-podgroup-subgroups": [
        (_with(_kai_podgroup(**{"": {"minMember": 12}})), _with(_kai_podgroup())),
        (_with(_kai_podgroup(**{"decode-0": {"minMember": None}})), _with(_kai_podgroup())),
        (_with(_kai_podgroup(**{"": {"minSubGroup": 3}})), _with(_kai_podgroup())),
        (_with(_kai_podgroup(**{"replica-0": {"minMember": 6}})), _with(_kai_podgroup())),
        (_with(_kai_podgroup(**{"replica-0": {"parent": "decode-0"}})), _with(_kai_podgroup())),
        (_with(_kai_podgroup(**{"prefill-1": {"name": "prefill-0"}})), _with(_kai_podgroup())),
    ],
    "kai-queue-spec": [
        (
            _with(_kai_queue("research"), _kai_queue("team-a", parent="reserch")),
            _with(_kai_queue("research"), _kai_queue("team-a", parent="research")),
        ),
    ],
    "volcano-job-tasks": [
        (
            _volcano(_numa("500m")),
            _volcano(_numa("4")),
        ),
        (
            _volcano(_task_field(1, minAvailable=3)),
            _volcano(_task_field(1, minAvailable=2)),
        ),
        (
            _volcano(_task_field(0, dependsOn={"name": ["workers"]})),
            _volcano(_task_field(0, dependsOn={"name": ["worker"]})),
        ),
        (
            _volcano(_task_name(1, "w" * 59)),
            _volcano(_task_name(1, "w" * 58)),
        ),
    ],
    "volcano-network-topology": [
        (
            _volcano(
                _task_field(
                    1,
                    partitionPolicy={"totalPartitions": 2, "partitionSize": 2, "minPartitions": 1},
                )
            ),
            _volcano(
                _task_field(
                    1,
                    partitionPolicy={"totalPartitions": 2, "partitionSize": 1, "minPartitions": 1},
                )
            ),
        ),
        (
            _volcano_pod_group(highestTierAllowed=2, highestTierName="spine"),
            _volcano_pod_group(highestTierName="spine"),
        ),
    ],
    "volcano-queue-children-share": [
        (_volcano_children({}), _volcano_children({"nvidia.com/gpu": 16}))
    ],
    "volcano-queue-admission": [
        (
            _volcano_queue(guarantee={"resource": {"nvidia.com/gpu": 8}}),
            _volcano_queue(
                guarantee={"resource": {"nvidia.com/gpu": 8}}, deserved={"nvidia.com/gpu": 8}
            ),
        ),
    ],
}
