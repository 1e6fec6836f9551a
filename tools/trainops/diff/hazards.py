"""Changes that a sync will not apply as an ordinary update, and edits to existing runs.

Kubernetes rejects updates to immutable fields (the sync fails until the object is
deleted and recreated); the training operator does not roll a running job onto a new
template; Argo CD prunes what disappears from Git. Each hazard becomes a warning on
the resource it concerns.
"""

from __future__ import annotations

from trainops.diff.compare import FieldChange, ResourceDiff
from trainops.profile.model import quantity_bytes

TRAINING_JOBS = frozenset(
    {"PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob"}
)
WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"})
QUEUE_LABEL = "metadata.labels.kueue.x-k8s.io/queue-name"

# (kinds, field path, why the API server refuses the update)
IMMUTABLE = (
    (TRAINING_JOBS, "spec.runPolicy.schedulingPolicy.queue", "the job's queue is immutable"),
    (TRAINING_JOBS, "spec.runPolicy.managedBy", "managedBy is immutable"),
    (frozenset({"Job"}), "spec.template", "a Job's pod template is immutable"),
    (frozenset({"Job"}), "spec.selector", "a Job's selector is immutable"),
    (WORKLOADS, "spec.selector", "the label selector is immutable"),
    (frozenset({"StatefulSet"}), "spec.volumeClaimTemplates", "volumeClaimTemplates are immutable"),
    (frozenset({"StatefulSet"}), "spec.serviceName", "serviceName is immutable"),
    (
        frozenset({"PersistentVolumeClaim"}),
        "spec.accessModes",
        "a claim's access modes are immutable",
    ),
    (frozenset({"PersistentVolumeClaim"}), "spec.storageClassName", "a claim's class is immutable"),
    (frozenset({"PersistentVolumeClaim"}), "spec.volumeMode", "a claim's volume mode is immutable"),
    (frozenset({"PersistentVolumeClaim"}), "spec.volumeName", "a bound claim keeps its volume"),
    (frozenset({"Service"}), "spec.clusterIP", "a Service's cluster IP is immutable"),
)
RECREATE = "Argo CD's sync will fail until the object is deleted and recreated"


def _under(change: FieldChange, prefix: str) -> bool:
    return change.path == prefix or change.path.startswith((prefix + ".", prefix + "["))


def is_run(app: str) -> bool:
    parts = app.split("/")
    return len(parts) == 4 and parts[0] == "overlays" and parts[2] == "runs"


def hazards(diff: ResourceDiff) -> list[str]:
    kind, name = diff.key.kind, diff.key.name
    found = []
    if diff.change == "modified":
        for kinds, prefix, why in IMMUTABLE:
            if kind in kinds and any(_under(c, prefix) for c in diff.fields):
                found.append(f"{prefix}: {why}; {RECREATE}")
        if kind == "TrainJob":
            edited = [c for c in diff.fields if _under(c, "spec") and not _under(c, "spec.suspend")]
            if edited:
                found.append(
                    f"{edited[0].path}: a TrainJob's spec only changes while it is "
                    f"suspended; {RECREATE}"
                )
        if kind == "PersistentVolumeClaim":
            found.extend(_storage_shrinks(diff.fields))
        if any(_under(c, QUEUE_LABEL) for c in diff.fields) and kind in TRAINING_JOBS | {"Job"}:
            found.append(
                "kueue.x-k8s.io/queue-name: Kueue does not move an admitted workload "
                "to another queue"
            )
        if kind == "NetworkAttachmentDefinition" and any(_under(c, "spec") for c in diff.fields):
            found.append(
                "pods already attached keep the old network configuration; only new "
                "pods get the new one"
            )
        if is_run(diff.key.app) and kind in TRAINING_JOBS:
            found.append(
                f"run {name} already exists: the operator does not update a job that "
                "was created; submit the change as a new run (a new name)"
            )
    elif diff.change == "removed":
        if is_run(diff.key.app) and kind in TRAINING_JOBS:
            found.append(f"Argo CD prunes run {name}: the job and its pods are deleted")
        elif kind == "NetworkAttachmentDefinition":
            found.append(
                f"removing network {name}: new pods that name it in "
                "k8s.v1.cni.cncf.io/networks fail to start"
            )
        elif kind in ("Queue", "LocalQueue", "ClusterQueue"):
            found.append(f"removing {kind} {name}: jobs that still name it stay pending")
        elif kind == "PersistentVolumeClaim":
            found.append(
                f"removing claim {name} deletes the checkpoints on it when its "
                "reclaim policy is Delete"
            )
    return found


def _storage_shrinks(changes: list[FieldChange]) -> list[str]:
    for change in changes:
        if change.path == "spec.resources.requests.storage" and change.kind == "changed":
            try:
                smaller = quantity_bytes(str(change.new)) < quantity_bytes(str(change.old))
            except ValueError:
                continue
            if smaller:
                return [f"storage {change.old} -> {change.new}: a claim can grow, never shrink"]
    return []
