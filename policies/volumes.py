"""How pods use their claims' volumes, and what happens to checkpoints when a claim goes away.

A claim's volume is deleted with it when the StorageClass that provisioned it reclaims
with Delete (the default, `persistentVolumeReclaimPolicy` in the core API types); a claim
goes away when Argo CD prunes it, when its namespace is deleted, or by hand. A pod's
claimName is looked up in the pod's own namespace, and the kubelet mounts a Filesystem
volume only through volumeMounts and hands a Block volume only through volumeDevices
(its volume manager's desired-state populator refuses the other way round).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, WARNING
from trainops.policy import Context, Violation, pod_rule, sets_any
from trainops.policy.pods import PodTemplate, mapping

from . import common
from .storage import _storage_class


@pod_rule(
    id="checkpoint-claim-reclaim",
    severity=WARNING,
    title="Checkpoint volumes outlive their claims",
    why="A dynamically provisioned volume takes its StorageClass's reclaimPolicy, Delete "
    "unless the class says Retain: deleting the claim deletes the volume and every "
    "checkpoint on it. Claims are deleted more easily than anyone expects: Argo CD prunes "
    "one whose directory was renamed or removed, and a deleted namespace takes its claims "
    "along.",
    fix="Provision checkpoint claims from a StorageClass with reclaimPolicy: Retain (and "
    "annotate the claim argocd.argoproj.io/sync-options: Prune=false,Delete=false).",
    applies=common.gpu_trainer,
)
def checkpoint_claim_reclaim(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    seen: set[str] = set()
    for container in pod.containers:
        for directory, _ in common.checkpoint_dirs(container):
            mount = common.mount_for(container, directory)
            volume = pod.volume(str(mount.get("name"))) if mount else None
            claim = mapping(mapping(volume).get("persistentVolumeClaim")).get("claimName")
            if not claim or claim in seen:
                continue
            seen.add(str(claim))
            pvc = ctx.find("PersistentVolumeClaim", str(claim), pod.doc.namespace or None)
            storage_class = _storage_class(pvc, ctx) if pvc is not None else None
            if storage_class is None:
                continue
            policy = storage_class.obj.get("reclaimPolicy", "Delete")
            if policy == "Delete":
                yield Violation(
                    f"checkpoint claim {claim} comes from StorageClass {storage_class.name}, "
                    "which deletes the volume with the claim (reclaimPolicy Delete)",
                    (*pod.path, "volumes"),
                )


KUBELET_VOLUMES = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/kubelet/volumemanager/"
    "populator/desired_state_of_world_populator.go"
)
PVC_CONTROLLER = (
    "https://v1-35.docs.kubernetes.io/docs/concepts/storage/persistent-volumes/#claims-as-volumes"
)


@pod_rule(
    id="pvc-claim-namespace",
    severity=ERROR,
    title="Pods mount claims of their own namespace",
    why="A persistentVolumeClaim volume names a claim in the pod's namespace; a claim of that "
    "name that exists only in another namespace is not found, and the pod stays Pending "
    '("persistentvolumeclaim not found").',
    fix="Create the claim in the namespace of the job, or run the job in the claim's namespace.",
    applies=common.mounts_claims,
    source=PVC_CONTROLLER,
)
def pvc_claim_namespace(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    namespace = pod.doc.namespace
    if not namespace:
        return
    for index, volume in enumerate(pod.volumes()):
        claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
        if not claim or ctx.find("PersistentVolumeClaim", str(claim), namespace) is not None:
            continue
        elsewhere = ctx.memo("pvc-namespaces", lambda: _claim_namespaces(ctx)).get(str(claim))
        if elsewhere:
            yield Violation(
                f"claim {claim} is in namespace {', '.join(sorted(elsewhere))}, not in the "
                f"pod's namespace {namespace}",
                (*pod.path, "volumes", index, "persistentVolumeClaim", "claimName"),
            )


def _claim_namespaces(ctx: Context) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for pvc in ctx.of_kind("PersistentVolumeClaim"):
        if pvc.namespace:
            found.setdefault(pvc.name, set()).add(pvc.namespace)
    return found


@pod_rule(
    id="pvc-volume-mode-use",
    severity=ERROR,
    title="Block claims are volumeDevices and Filesystem claims volumeMounts",
    why="The kubelet refuses to start a pod that lists a claim of volumeMode Block in a "
    "container's volumeMounts, or one of volumeMode Filesystem (the default) in "
    'volumeDevices ("volume ... has volumeMode Block, but is specified in volumeMounts"): '
    "the pod stays in ContainerCreating.",
    fix="Use volumeDevices (devicePath) for a Block claim, volumeMounts (mountPath) for a "
    "Filesystem one, or change the claim's volumeMode.",
    applies=sets_any("volumeDevices", "volumeMounts"),
    source=KUBELET_VOLUMES,
)
def pvc_volume_mode_use(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for key, index, container in pod.all_containers:
        for field, wanted in (("volumeMounts", "Filesystem"), ("volumeDevices", "Block")):
            entries = container.get(field)
            for position, entry in enumerate(entries if isinstance(entries, list) else []):
                mode = _volume_mode(pod, str(mapping(entry).get("name")), ctx)
                if mode is not None and mode != wanted:
                    yield Violation(
                        f"volume {mapping(entry).get('name')} has volumeMode {mode}, but "
                        f"container {container.get('name')} lists it in {field}",
                        (*pod.path, key, index, field, position),
                    )


def _volume_mode(pod: PodTemplate, name: str, ctx: Context) -> str | None:
    """The volumeMode of the claim behind a pod volume, when the render shows it."""
    volume = pod.volume(name)
    if volume is None:
        return None
    template = mapping(mapping(volume.get("ephemeral")).get("volumeClaimTemplate"))
    if template:
        return str(mapping(template.get("spec")).get("volumeMode") or "Filesystem")
    claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
    if not claim:
        return None
    pvc = ctx.find("PersistentVolumeClaim", str(claim), pod.doc.namespace or None)
    if pvc is None:
        return None
    return str(mapping(pvc.obj.get("spec")).get("volumeMode") or "Filesystem")
