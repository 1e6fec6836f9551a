"""What happens to checkpoints when their claim goes away.

A claim's volume is deleted with it when the StorageClass that provisioned it reclaims
with Delete (the default, `persistentVolumeReclaimPolicy` in the core API types); a claim
goes away when Argo CD prunes it, when its namespace is deleted, or by hand.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import WARNING
from trainops.policy import Context, Violation, pod_rule
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
