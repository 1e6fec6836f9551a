"""Changes that a sync will not apply as an ordinary update, and edits to existing runs.

Kubernetes rejects updates to immutable fields (the sync fails until the object is
deleted and recreated); the training operator does not roll a running job onto a new
template; Argo CD prunes what disappears from Git. Each hazard becomes a warning on
the resource it concerns.

Immutable fields of custom resources come from their CRDs' transition rules (CEL rules
reading `oldSelf`, such as `self == oldSelf`), evaluated with the old object as the API
server does. `IMMUTABLE` lists only what no rule expresses: the built-in kinds, whose
immutability is Go code in kubernetes `pkg/apis/{apps,batch,core}/validation`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trainops.diff.compare import FieldChange, ResourceDiff
from trainops.model import json_path
from trainops.profile.model import quantity_bytes

TRAINING_JOBS = frozenset(
    {"PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob"}
)
WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"})
RUNTIMES = frozenset({"ClusterTrainingRuntime", "TrainingRuntime"})
QUEUE_LABEL = "metadata.labels.kueue.x-k8s.io/queue-name"

# (kinds, field path, why the API server refuses the update)
IMMUTABLE = (
    (frozenset({"Job"}), "spec.template", "a Job's pod template is immutable"),
    (frozenset({"Job"}), "spec.selector", "a Job's selector is immutable"),
    (frozenset({"Job"}), "spec.completionMode", "a Job's completion mode is immutable"),
    (frozenset({"Job"}), "spec.podFailurePolicy", "a Job's pod failure policy is immutable"),
    (WORKLOADS, "spec.selector", "the label selector is immutable"),
    (frozenset({"Service"}), "spec.clusterIP", "a Service's cluster IP is immutable"),
    (frozenset({"Service"}), "spec.clusterIPs", "a Service's cluster IPs are immutable"),
)
# Fields of a StatefulSet spec an update may change (ValidateStatefulSetUpdate).
STATEFULSET_MUTABLE = (
    "spec.replicas",
    "spec.template",
    "spec.updateStrategy",
    "spec.persistentVolumeClaimRetentionPolicy",
    "spec.minReadySeconds",
    "spec.ordinals",
    "spec.revisionHistoryLimit",
)
# Fields of a PersistentVolumeClaim spec an update may change (ValidatePersistentVolumeClaimUpdate).
CLAIM_MUTABLE = ("spec.resources.requests", "spec.volumeAttributesClassName")
RECREATE = "Argo CD's sync will fail until the object is deleted and recreated"


@cache
def _project_registry() -> Any:
    from trainops.config import load_project_config
    from trainops.schema.registry import SchemaRegistry, crd_location

    config = load_project_config()
    if config.schema_dir is None:
        return None
    return SchemaRegistry([crd_location(config.schema_dir)], config.kubernetes_version, False)


def _under(change: FieldChange, prefix: str) -> bool:
    return change.path == prefix or change.path.startswith((prefix + ".", prefix + "["))


def is_run(app: str) -> bool:
    """overlays/<cluster>/runs/<run>, or a team's: overlays/<cluster>/teams/<team>/runs/<run>."""
    parts = app.split("/")
    if len(parts) == 6 and parts[2] == "teams":
        parts = [*parts[:2], *parts[4:]]
    return len(parts) == 4 and parts[0] == "overlays" and parts[2] == "runs"


def hazards(diff: ResourceDiff, registry: Any = None) -> list[str]:
    """Warnings for one resource's change; `registry` holds the CRDs' transition rules
    (default: the project's schemas/)."""
    kind, name = diff.key.kind, diff.key.name
    found = []
    if diff.change == "modified":
        for kinds, prefix, why in IMMUTABLE:
            if kind in kinds and any(_under(c, prefix) for c in diff.fields):
                found.append(f"{prefix}: {why}; {RECREATE}")
        found.extend(_transition_rules(diff, registry or _project_registry()))
        if kind == "StatefulSet":
            found.extend(_outside(diff.fields, STATEFULSET_MUTABLE, "a StatefulSet"))
        if kind == "PersistentVolumeClaim":
            found.extend(_outside(diff.fields, CLAIM_MUTABLE, "a claim"))
            found.extend(_storage_shrinks(diff.fields))
        if kind in ("ConfigMap", "Secret") and (diff.old or {}).get("immutable") is True:
            found.append(f"{kind} {name} is immutable (immutable: true); {RECREATE}")
        if kind == "TrainJob" and not _suspended(diff.old):
            # The Trainer's webhook (plugins/jobset): runtimePatches change only while suspended.
            edited = [c for c in diff.fields if _under(c, "spec.runtimePatches")]
            if edited:
                found.append(
                    f"{edited[0].path}: a TrainJob's runtimePatches only change while it is "
                    f"suspended; {RECREATE}"
                )
        if kind in RUNTIMES and any(_under(c, "spec") for c in diff.fields):
            found.append(
                f"{kind} {name}: TrainJobs created before the change keep the JobSet they "
                "got; only TrainJobs created afterwards run on the new runtime"
            )
        if kind == "CustomResourceDefinition":
            found.extend(_versions_dropped(diff))
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


def _transition_rules(diff: ResourceDiff, registry: Any) -> list[str]:
    old, new = diff.old or {}, diff.new or {}
    api_version = new.get("apiVersion")
    if registry is None or not isinstance(api_version, str) or old.get("apiVersion") != api_version:
        return []
    rules = registry.rules(api_version, diff.key.kind)
    if rules is None:
        return []
    return [
        f"{json_path(list(failure.path)) or '<root>'}: {failure.message}; {RECREATE}"
        for failure in rules.transition_violations(old, new)
    ]


def _outside(changes: list[FieldChange], mutable: tuple[str, ...], what: str) -> list[str]:
    for change in changes:
        if _under(change, "spec") and not any(_under(change, m) for m in mutable):
            return [f"{change.path}: {what}'s spec is immutable there; {RECREATE}"]
    return []


def _suspended(obj: dict | None) -> bool:
    spec = (obj or {}).get("spec")
    return isinstance(spec, dict) and spec.get("suspend") is True


def _versions_dropped(diff: ResourceDiff) -> list[str]:
    """A served version that disappears from a CRD (mpijobs.kubeflow.org from the Training
    Operator's v1 to the MPI Operator's v2beta1, for example)."""
    served = [
        {v.get("name") for v in (doc or {}).get("spec", {}).get("versions") or []}
        for doc in (diff.old, diff.new)
    ]
    dropped = sorted(v for v in served[0] - served[1] if v)
    if not dropped:
        return []
    return [
        f"{diff.key.name} no longer serves {', '.join(dropped)}: the API server refuses to "
        "drop a stored version, so the sync fails until the CRD is deleted, and deleting it "
        "deletes every object stored under it"
    ]


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
