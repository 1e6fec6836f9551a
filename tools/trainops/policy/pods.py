"""One accessor for every pod template of every workload kind, with its role.

Rules never walk `spec.pytorchReplicaSpecs.Worker.template.spec` themselves:
they ask for a document's pod templates and get the pod spec, its metadata,
the role (Master, Worker, Launcher, a Deployment...), the replica count and
the JSON path to report findings at.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.model import Document

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "habana.ai/gaudi")
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
WORKLOAD_KINDS = {"Pod", "CronJob", *TEMPLATE_KINDS, *TRAINING_KINDS}
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

    @property
    def training(self) -> bool:
        return self.doc.kind in TRAINING_KINDS

    @property
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

    def container_path(self, index: int) -> tuple[Any, ...]:
        return (*self.path, "containers", index)

    @property
    def gpus(self) -> int:
        return sum(gpu_count(c) for c in self.containers)

    @property
    def uses_gpus(self) -> bool:
        return self.gpus > 0

    def volume(self, name: str) -> dict[str, Any] | None:
        for volume in self.spec.get("volumes") or []:
            if isinstance(volume, dict) and volume.get("name") == name:
                return volume
        return None

    def volumes(self) -> list[dict[str, Any]]:
        items = self.spec.get("volumes")
        return [v for v in items if isinstance(v, dict)] if isinstance(items, list) else []


def resources(container: dict[str, Any], section: str) -> dict[str, Any]:
    res = container.get("resources")
    value = res.get(section) if isinstance(res, dict) else None
    return value if isinstance(value, dict) else {}


def gpu_count(container: dict[str, Any]) -> int:
    total = 0
    for section in ("limits", "requests"):
        for name in GPU_RESOURCES:
            value = resources(container, section).get(name)
            if value is not None:
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
    return list(_templates(doc))


def _templates(doc: Document) -> Iterator[PodTemplate]:
    obj = doc.obj
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    kind = doc.kind
    if kind == "Pod":
        yield PodTemplate(doc, "Pod", ("spec",), doc.metadata, spec, 1)
    elif kind in TEMPLATE_KINDS:
        yield from _template(
            doc, kind, ("spec", "template"), spec.get("template"), spec.get("replicas")
        )
    elif kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        yield from _template(
            doc, kind, ("spec", "jobTemplate", "spec", "template"), job.get("template")
        )
    elif kind in REPLICA_FIELDS:
        replicas = spec.get(REPLICA_FIELDS[kind])
        if isinstance(replicas, dict):
            for role, replica in replicas.items():
                if isinstance(replica, dict):
                    count = replica.get("replicas", 1)
                    path = ("spec", REPLICA_FIELDS[kind], role, "template")
                    yield from _template(doc, str(role), path, replica.get("template"), count)
    elif kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        jobs = (((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs")) or []
        for index, job in enumerate(jobs if isinstance(jobs, list) else []):
            if isinstance(job, dict):
                path = (
                    "spec",
                    "template",
                    "spec",
                    "replicatedJobs",
                    index,
                    "template",
                    "spec",
                    "template",
                )
                template = ((job.get("template") or {}).get("spec") or {}).get("template")
                yield from _template(
                    doc, str(job.get("name", index)), path, template, job.get("replicas")
                )
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


def _template(
    doc: Document, role: str, path: tuple[Any, ...], template: Any, replicas: Any = None
) -> Iterator[PodTemplate]:
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return
    metadata = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None
    yield PodTemplate(doc, role, (*path, "spec"), metadata, template["spec"], count)
