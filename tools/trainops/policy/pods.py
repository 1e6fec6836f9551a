"""One accessor for every pod template of every workload kind, with its role.

Rules never walk `spec.pytorchReplicaSpecs.Worker.template.spec` themselves:
they ask for a document's pod templates and get the pod spec, its metadata,
the role (Master, Worker, Launcher, a Deployment...), the replica count and
the JSON path to report findings at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from trainops.model import Document, computed_once, json_path

GPU_RESOURCES = frozenset(
    ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "habana.ai/gaudi")
)
REPLICA_FIELDS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}
TRAINING_KINDS = {*REPLICA_FIELDS, "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"}
TEMPLATE_KINDS = {
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "ReplicationController",
    "Job",
}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
# A path step in PodTemplate.sources: the list item before it was merged into by a patch.
MERGED_ITEM = "<merged item>"
# Kinds whose documents hold pod templates (Job covers Volcano's batch.volcano.sh Job too).
POD_KINDS = {"Pod", "CronJob", "JobSet", "LeaderWorkerSet", *TEMPLATE_KINDS, *TRAINING_KINDS}
# The container each training operator looks for in a replica's pod template.
DEFAULT_CONTAINERS = {
    "PyTorchJob": "pytorch",
    "TFJob": "tensorflow",
    "XGBoostJob": "xgboost",
    "PaddleJob": "paddle",
    "JAXJob": "jax",
}


@dataclass
class PodTemplate:
    doc: Document
    role: str
    path: tuple[Any, ...]  # to the pod spec
    metadata: dict[str, Any]
    spec: dict[str, Any]
    replicas: int | None = None
    partial: bool = False  # a pod-like view (TrainJob's trainer), not a full pod spec
    # A TrainJob resolved against its runtime: the runtime, and for each field the
    # TrainJob set, the path where the TrainJob wrote it (see policy/trainjob.py).
    runtime: Document | None = None
    sources: dict[tuple[Any, ...], tuple[Any, ...]] | None = None
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """A fact about this pod that several rules need, computed once."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @property
    def training(self) -> bool:
        return self.doc.kind in TRAINING_KINDS

    @computed_once
    def containers(self) -> list[dict[str, Any]]:
        items = self.spec.get("containers")
        return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []

    @property
    def annotations(self) -> dict[str, Any]:
        value = self.metadata.get("annotations")
        return value if isinstance(value, dict) else {}

    @property
    def labels(self) -> dict[str, Any]:
        value = self.metadata.get("labels")
        return value if isinstance(value, dict) else {}

    def origin(self, path: tuple[Any, ...]) -> tuple[tuple[Any, ...], str]:
        """Where a finding at `path` belongs in the document: (path, note on its origin).

        Paths of an ordinary template are the document's own. A TrainJob resolved
        against its runtime maps what the TrainJob set back to the TrainJob and
        reports what the runtime alone provides at spec.runtimeRef.
        """
        if self.runtime is None:
            return path, ""
        sources = self.sources or {}
        for end in range(len(path), 0, -1):
            written = sources.get(path[:end])
            if written is not None:
                return (*written, *path[end:]), ""
        merged = sources.get((*path, MERGED_ITEM))
        if merged is not None:
            return merged, ""
        return ("spec", "runtimeRef"), (
            f"{self.runtime.kind} {self.runtime.name} at {json_path(list(path))}"
        )

    def container_path(self, index: int) -> tuple[Any, ...]:
        return (*self.path, "containers", index)

    @computed_once
    def gpus(self) -> int:
        if self.resource_names.isdisjoint(GPU_RESOURCES):
            return 0
        return sum(gpu_count(c) for c in self.containers)

    @computed_once
    def all_containers(self) -> tuple[tuple[str, int, dict[str, Any]], ...]:
        """(list key, index, container) of every container, init and ephemeral ones
        included."""
        return self._scan()["all_containers"]

    @computed_once
    def container_fields(self) -> frozenset[Any]:
        """Every field any container sets, init and ephemeral ones included: rules ask it
        before they look inside each container for a field that is rarely there."""
        return self._scan()["container_fields"]

    @computed_once
    def features(self) -> frozenset[Any]:
        """The names the pod sets: fields of its spec and of any container, resources its
        containers ask for, annotations of its template and labels of its document. The
        policy engine skips a rule that needs one of some names (`engine.needs`) on a pod
        that sets none of them."""
        return self._scan()["features"]

    @computed_once
    def resource_names(self) -> frozenset[str]:
        """Every resource any (regular) container requests or limits."""
        return self._scan()["resource_names"]

    def _scan(self) -> dict[str, Any]:
        """One pass over the containers sets the four facts above at once: the engine
        needs `features` of every pod, and most rules one of the others."""
        found = []
        fields: set[Any] = set()
        names: set[str] = set()
        for key in CONTAINER_LISTS:
            items = self.spec.get(key)
            if not isinstance(items, list):
                continue
            for index, container in enumerate(items):
                if not isinstance(container, dict):
                    continue
                found.append((key, index, container))
                fields.update(container)
                stated = container.get("resources") if key == "containers" else None
                if isinstance(stated, dict):
                    for section in (stated.get("limits"), stated.get("requests")):
                        if isinstance(section, dict):
                            names.update(section)
        container_fields = frozenset(fields)
        labels = self.doc.metadata.get("labels")
        facts = {
            "all_containers": tuple(found),
            "container_fields": container_fields,
            "features": container_fields.union(
                self.spec, names, self.annotations, labels if isinstance(labels, dict) else ()
            ),
            "resource_names": frozenset(names),
        }
        self.__dict__.update(facts)
        return facts

    @property
    def uses_gpus(self) -> bool:
        return self.gpus > 0

    def volume(self, name: str) -> dict[str, Any] | None:
        """The pod's volume of that name (the first, as the API server reads a duplicate):
        a lookup in an index built once, since rules ask once per volume mount."""
        return self.memo("volume-index", self._volume_index).get(name)

    def _volume_index(self) -> dict[str, dict[str, Any]]:
        index: dict[str, dict[str, Any]] = {}
        for volume in self.volumes():
            name = volume.get("name")
            if isinstance(name, str):
                index.setdefault(name, volume)
        return index

    def volumes(self) -> list[dict[str, Any]]:
        items = self.spec.get("volumes")
        return [v for v in items if isinstance(v, dict)] if isinstance(items, list) else []


def effective_labels(pod: PodTemplate) -> dict[str, Any]:
    """The labels the pod will carry: its template's, plus those its job's controller adds
    with one value for every pod of the replica: the Training and MPI Operators' job name
    and replica type, JobSet's job set name (a TrainJob's JobSet is named after it)."""
    labels = dict(pod.labels)
    if pod.doc.kind in ("TrainJob", "JobSet"):
        labels.setdefault("jobset.sigs.k8s.io/jobset-name", pod.doc.name)
    elif pod.training:
        labels.setdefault("training.kubeflow.org/job-name", pod.doc.name)
        labels.setdefault("training.kubeflow.org/replica-type", pod.role.lower())
    return labels


def resources(container: dict[str, Any], section: str) -> dict[str, Any]:
    res = container.get("resources")
    value = res.get(section) if isinstance(res, dict) else None
    return value if isinstance(value, dict) else {}


def gpu_count(container: dict[str, Any]) -> int:
    total = 0
    for section in ("limits", "requests"):
        for name, value in resources(container, section).items():
            if name in GPU_RESOURCES and value is not None:
                total = max(total, _int(value))
    return total


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """Literal env values by name (None for valueFrom entries)."""
    out: dict[str, Any] = {}
    for entry in container.get("env") or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            value = entry.get("value")
            out[entry["name"]] = None if value is None else str(value)
    return out


def env_index(container: dict[str, Any], name: str) -> int | None:
    for index, entry in enumerate(container.get("env") or []):
        if isinstance(entry, dict) and entry.get("name") == name:
            return index
    return None


def argv(container: dict[str, Any]) -> list[str]:
    """command + args as the container runtime joins them."""
    out: list[str] = []
    for key in ("command", "args"):
        value = container.get(key)
        if isinstance(value, list):
            out.extend(str(item) for item in value)
    return out


def pod_templates(doc: Document) -> list[PodTemplate]:
    """Every pod template of `doc` as written (a TrainJob without its runtime is partial);
    in a custom resource of a kind not known here, every pod template found by shape."""
    if doc.kind not in POD_KINDS:
        return list(embedded_templates(doc)) if custom_resource(doc) else []
    return list(_templates(doc))


# Built-in API groups (besides the core group "") whose kinds hold no pod templates the
# kinds above do not cover; a group ending in .k8s.io is Kubernetes' own unless it is a
# SIG project's x-k8s.io.
_BUILT_IN_GROUPS = {"apps", "batch", "policy", "autoscaling"}
# Bounds on the walk through a custom resource (hostile input may nest deeply).
_EMBEDDED_DEPTH = 16
_EMBEDDED_NODES = 20_000


def custom_resource(doc: Document) -> bool:
    """A document of a custom resource kind (not Kubernetes' own API groups)."""
    group = doc.api_version.rpartition("/")[0]
    if not group or group in _BUILT_IN_GROUPS:
        return False
    return not (group.endswith(".k8s.io") and not group.endswith(".x-k8s.io"))


def _pod_spec_shape(value: Any) -> bool:
    """A mapping shaped like a PodSpec: a list of containers that name an image."""
    if not isinstance(value, dict):
        return False
    containers = value.get("containers")
    return (
        isinstance(containers, list)
        and bool(containers)
        and all(isinstance(c, dict) and isinstance(c.get("image"), str) for c in containers)
    )


def embedded_templates(doc: Document) -> Iterator[PodTemplate]:
    """Pod templates anywhere in a custom resource (a Ray cluster's head and worker
    groups, an AppWrapper's wrapped jobs, a KAITO workspace, a team's own CRD), found
    by their shape: a PodTemplateSpec (`spec` a PodSpec, `metadata` beside it) or a bare
    PodSpec. Each is reported at its own path in the custom resource; its role is the
    `name` or `groupName` beside it, else the field that holds it."""
    budget = [_EMBEDDED_NODES]
    stack: list[tuple[Any, tuple[Any, ...], dict[str, Any] | None]] = [
        (value, (key,), None)
        for key, value in doc.obj.items()
        if key not in ("apiVersion", "kind", "metadata", "status")
    ]
    found = []
    while stack:
        node, path, holder = stack.pop()
        budget[0] -= 1
        if budget[0] < 0 or len(path) > _EMBEDDED_DEPTH:
            break
        if isinstance(node, dict):
            if _pod_spec_shape(node.get("spec")):
                found.append(_embedded(doc, path, node, holder, (*path, "spec"), node["spec"]))
                continue
            if _pod_spec_shape(node) and path[-1] != "spec":
                found.append(_embedded(doc, path, {}, holder, path, node))
                continue
            for key, value in node.items():
                if isinstance(value, (dict, list)):
                    stack.append((value, (*path, key), node))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if isinstance(value, (dict, list)):
                    stack.append((value, (*path, index), holder))
    found.sort(key=lambda pod: [str(step) for step in pod.path])
    yield from found


def _embedded(
    doc: Document,
    path: tuple[Any, ...],
    template: dict[str, Any],
    holder: dict[str, Any] | None,
    spec_path: tuple[Any, ...],
    spec: dict[str, Any],
) -> PodTemplate:
    holder = holder or {}
    named = holder.get("groupName") or holder.get("name")
    steps = [step for step in path if isinstance(step, str) and step not in ("template", "spec")]
    role = str(named) if isinstance(named, str) and named else (steps[-1] if steps else doc.kind)
    replicas = holder.get("replicas")
    count = replicas if is_int(replicas) else None
    return PodTemplate(doc, role, spec_path, mapping(template.get("metadata")), spec, count)


def _templates(doc: Document) -> Iterator[PodTemplate]:
    obj = doc.obj
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    kind = doc.kind
    if kind == "Pod":
        yield PodTemplate(doc, "Pod", ("spec",), doc.metadata, spec, 1)
    elif kind == "Job" and doc.api_version.rpartition("/")[0] == "batch.volcano.sh":
        for index, task in enumerate(dicts(spec.get("tasks"))):
            role = str(task.get("name", index))
            path = ("spec", "tasks", index, "template")
            yield from _template(doc, role, path, task.get("template"), task.get("replicas", 1))
    elif kind == "Job":
        yield from _template(doc, kind, ("spec", "template"), spec.get("template"), _job_pods(spec))
    elif kind in TEMPLATE_KINDS:
        yield from _template(
            doc, kind, ("spec", "template"), spec.get("template"), spec.get("replicas", 1)
        )
    elif kind == "CronJob":
        job = mapping(mapping(spec.get("jobTemplate")).get("spec"))
        yield from _template(
            doc,
            kind,
            ("spec", "jobTemplate", "spec", "template"),
            job.get("template"),
            _job_pods(job),
        )
    elif kind in REPLICA_FIELDS:
        replicas = spec.get(REPLICA_FIELDS[kind])
        if isinstance(replicas, dict):
            for role, replica in replicas.items():
                if isinstance(replica, dict):
                    count = replica.get("replicas", 1)
                    path = ("spec", REPLICA_FIELDS[kind], role, "template")
                    yield from _template(doc, str(role), path, replica.get("template"), count)
    elif kind == "JobSet":
        yield from replicated_job_templates(doc, spec, ("spec",))
    elif kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        jobset = mapping(mapping(spec.get("template")).get("spec"))
        yield from replicated_job_templates(doc, jobset, ("spec", "template", "spec"))
    elif kind == "LeaderWorkerSet":
        lws = mapping(spec.get("leaderWorkerTemplate"))
        groups = spec.get("replicas", 1)
        size = lws.get("size", 1)
        groups = groups if is_int(groups) else None
        size = size if is_int(size) else None
        worker_path = ("spec", "leaderWorkerTemplate", "workerTemplate")
        if isinstance(lws.get("leaderTemplate"), dict):
            leader_path = ("spec", "leaderWorkerTemplate", "leaderTemplate")
            yield from _template(doc, "leader", leader_path, lws["leaderTemplate"], groups)
            workers = groups * (size - 1) if groups is not None and size is not None else None
        else:
            workers = groups * size if groups is not None and size is not None else None
        yield from _template(doc, "worker", worker_path, lws.get("workerTemplate"), workers)
    elif kind == "TrainJob":
        trainer = spec.get("trainer")
        if isinstance(trainer, dict):
            container = {
                "name": "node",
                **{k: trainer[k] for k in ("image", "command", "args", "env") if k in trainer},
                "resources": trainer.get("resourcesPerNode") or {},
            }
            yield PodTemplate(
                doc,
                "trainer",
                ("spec", "trainer"),
                {},
                {"containers": [container]},
                trainer.get("numNodes"),
                partial=True,
            )


def replicated_job_templates(
    doc: Document, jobset: dict[str, Any], prefix: tuple[Any, ...]
) -> Iterator[PodTemplate]:
    """Pod templates of a JobSet spec: one per replicated job."""
    for index, job in enumerate(dicts(jobset.get("replicatedJobs"))):
        job_spec = mapping(mapping(job.get("template")).get("spec"))
        path = (*prefix, "replicatedJobs", index, "template", "spec", "template")
        copies = job.get("replicas", 1)
        per_job = _job_pods(job_spec)
        count = copies * per_job if is_int(copies) and per_job is not None else None
        yield from _template(
            doc, str(job.get("name", index)), path, job_spec.get("template"), count
        )


def _job_pods(job_spec: dict[str, Any]) -> int | None:
    """Pods a batch/v1 Job runs at once: its parallelism (default 1)."""
    value = job_spec.get("parallelism", 1)
    return value if is_int(value) else None


def mapping(value: Any) -> dict[str, Any]:
    """`value` if it is a mapping, else an empty one: rules read fields of any type safely."""
    return value if isinstance(value, dict) else {}


def dicts(value: Any) -> list[dict[str, Any]]:
    """The mappings in `value` if it is a list (anything else: none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def is_int(value: Any) -> bool:
    """An integer as YAML gives it (not a bool, not a string such as "$NUM_NODES")."""
    return isinstance(value, int) and not isinstance(value, bool)


def _template(
    doc: Document, role: str, path: tuple[Any, ...], template: Any, replicas: Any = None
) -> tuple[PodTemplate, ...]:
    """The pod template at `path` (none if it is not one); a tuple, for `yield from`."""
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return ()
    metadata = mapping(template.get("metadata"))
    count = replicas if is_int(replicas) else None
    return (PodTemplate(doc, role, (*path, "spec"), metadata, template["spec"], count),)
