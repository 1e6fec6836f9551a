"""Checkpoints: on storage that survives the node, shared by every replica, in time."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, mapping

from . import common

CHECKPOINT_PATHS = ("/checkpoints", "/checkpoint", "/ckpt", "/ckpts")


def _checkpoint_mounts(pod: PodTemplate) -> Iterator[tuple[int, dict, dict | None]]:
    """(container index, mount, volume) for mounts that hold checkpoints."""
    for index, container in enumerate(pod.containers):
        dirs = [d for d, _ in common.checkpoint_dirs(container)]
        for mount in container.get("volumeMounts") or []:
            path = str(mount.get("mountPath", "")).rstrip("/")
            holds = path in CHECKPOINT_PATHS or any(
                d == path or d.startswith(path + "/") for d in dirs
            )
            if holds and path not in ("", "/dev/shm"):
                yield index, mount, pod.volume(str(mount.get("name")))


@pod_rule(
    id="checkpoint-missing",
    severity=WARNING,
    title="Multi-node GPU jobs write checkpoints to a volume",
    why="Failures are a matter of when at multi-node scale (GPU Xid errors, NIC and node "
    "failures, OOM kills); a job without checkpoints restarts from step 0 and loses every "
    "GPU-hour so far.",
    fix="Mount a ReadWriteMany PVC (e.g. at /checkpoints) and point the trainer at it "
    "(TRAINER_CHECKPOINT_DIR or --checkpoint-dir).",
    applies=common.gpu_trainer,
)
def checkpoint_missing(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial or not common.multi_node(pod, ctx):
        return
    if not any(True for _ in _checkpoint_mounts(pod)):
        yield Violation("no checkpoint volume and no checkpoint directory", pod.path)


@pod_rule(
    id="checkpoint-volume-ephemeral",
    severity=ERROR,
    source="https://v1-35.docs.kubernetes.io/docs/concepts/storage/volumes/#emptydir",
    title="Checkpoints live on persistent storage",
    why="An emptyDir disappears with the pod and a hostPath stays on one node: after the "
    "failure a checkpoint exists to survive, the restarted job finds nothing to resume from.",
    fix="Back the checkpoint mount with a PersistentVolumeClaim (ReadWriteMany).",
    applies=common.mounts_volumes,
)
def ephemeral(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for _, mount, volume in _checkpoint_mounts(pod):
        if volume is None:
            continue
        for kind in ("emptyDir", "hostPath"):
            if kind in volume:
                at = (*pod.path, "volumes", pod.volumes().index(volume))
                yield Violation(
                    f"checkpoints at {mount.get('mountPath')} are on a {kind} volume "
                    f"({volume.get('name')})",
                    at,
                )


SHARED_MODES = frozenset({"ReadWriteMany", "ReadOnlyMany"})


@pod_rule(
    id="pvc-shared-rwo",
    severity=ERROR,
    source="https://v1-35.docs.kubernetes.io/docs/concepts/storage/persistent-volumes/#access-modes",
    title="A volume shared by several pods can attach to several nodes",
    why="A ReadWriteOnce volume attaches to one node (ReadWriteOncePod to one pod), even when "
    "the pods mount it readOnly: pods on other nodes wait in ContainerCreating with a "
    "Multi-Attach error, or (same node) write the same files without coordination.",
    fix="Use a ReadWriteMany (or, for data only read, ReadOnlyMany) claim for volumes several "
    "pods mount.",
    applies=common.mounts_claims,
)
def shared_rwo(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if not common.multi_node(pod, ctx):
        return
    for volume in pod.volumes():
        claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
        if not claim:
            continue
        pvc = ctx.find("PersistentVolumeClaim", str(claim), pod.doc.namespace or None)
        if pvc is None:
            continue
        modes = mapping(pvc.obj.get("spec")).get("accessModes") or []
        if not SHARED_MODES & set(modes):
            yield Violation(
                f"claim {claim} is {'/'.join(map(str, modes)) or 'without access modes'} but "
                "several pods mount it",
                (*pod.path, "volumes", pod.volumes().index(volume)),
            )


@pod_rule(
    id="checkpoint-dir-not-mounted",
    severity=ERROR,
    source="https://v1-35.docs.kubernetes.io/docs/concepts/storage/volumes/",
    title="The trainer's checkpoint directory is on a mounted volume",
    why="A checkpoint directory outside every volume mount is the container's own filesystem, "
    "gone at the first restart.",
    fix="Put the checkpoint directory under a mounted PersistentVolumeClaim.",
    applies=common.has_command_or_env,
)
def dir_not_mounted(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    ranks = common.rank_pod(pod, ctx)
    for index, container in enumerate(pod.containers):
        # An MPI launcher only forwards the directory: it must exist where the ranks run.
        where = ranks.containers[0] if ranks is not pod and ranks.containers else container
        for directory, relative in common.checkpoint_dirs(container):
            if directory.startswith("$("):
                continue  # set from another variable: cannot resolve it here
            if common.mount_for(where, directory) is None:
                yield Violation(
                    f"checkpoint directory {directory} is not under any volume mount",
                    (*pod.container_path(index), *relative),
                )


@pod_rule(
    id="grace-period-short",
    severity=WARNING,
    title="Training pods have time to checkpoint on SIGTERM",
    why="On eviction the kubelet sends SIGTERM and kills the pod at the end of "
    "terminationGracePeriodSeconds (30 s by default); torchrun passes the signal on and "
    "SIGKILLs its workers after its own shutdown timeout (30 s unless set). An emergency "
    "checkpoint has to fit in both: with the default grace period it cannot, whatever "
    "torchrun allows.",
    fix="Set terminationGracePeriodSeconds above the checkpoint write time (120-300 s is "
    "typical), and torchrun's shutdown timeout to most of it (see shutdown-timeout-grace).",
    applies=common.gpu_trainer,
)
def grace_period(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    grace = pod.spec.get("terminationGracePeriodSeconds")
    if grace is None:
        yield Violation(
            "terminationGracePeriodSeconds is unset (30 s): no time to checkpoint", pod.path
        )
    elif isinstance(grace, int) and grace <= 60:
        yield Violation(
            f"terminationGracePeriodSeconds is {grace} s: torchrun alone waits 30 s",
            (*pod.path, "terminationGracePeriodSeconds"),
        )


@resource_rule(
    id="pvc-empty-storage-class",
    severity=WARNING,
    title='storageClassName: "" is meant literally',
    why="An empty storageClassName does not mean the default class: it disables dynamic "
    "provisioning, and the claim waits for a pre-created PersistentVolume without a class.",
    fix="Omit storageClassName to get the cluster's default class, or name the ReadWriteMany "
    "class.",
    kinds=("PersistentVolumeClaim",),
)
def empty_storage_class(doc: Document, ctx: Context) -> Iterator[Violation]:
    if (doc.obj.get("spec") or {}).get("storageClassName") == "":
        yield Violation(
            'storageClassName is "": only a pre-created PV without a class binds',
            ("spec", "storageClassName"),
        )


def _claim_of(pod: PodTemplate, mount: dict) -> str | None:
    volume = mapping(pod.volume(str(mount.get("name"))))
    claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
    return str(claim) if claim else None


@pod_rule(
    id="checkpoint-mount-per-job",
    severity=ERROR,
    source="docs/security.md#the-checkpoint-volume",
    title="A run mounts only its own directory of the shared checkpoint claim",
    why="Every run of a cluster shares one ReadWriteMany checkpoint claim. The trainer keeps "
    "each job in <claim>/<job name>/ only because the template mounts that sub-path; a pod "
    "that mounts the whole claim can read, replace or delete every other run's checkpoints, "
    "and a planted step-N is resumed as if it were the run's own weights.",
    fix="Mount the checkpoint claim with subPathExpr: $(TRAINER_JOB_NAME) (the templates "
    "do), in every container that mounts it, and do not mount it a second time.",
    applies=common.gpu_trainer,
    security=True,
)
def checkpoint_mount_per_job(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    claims: set[str] = set()
    for container in pod.containers:
        for entry in container.get("env") or []:
            if isinstance(entry, dict) and entry.get("name") == "TRAINER_CHECKPOINT_DIR":
                mount = common.mount_for(container, str(entry.get("value", "")))
                claim = _claim_of(pod, mount) if mount else None
                if claim:
                    claims.add(claim)
    if not claims:
        return  # not the trainer's contract: where it writes is the program's business
    for index, container in enumerate(pod.containers):
        for position, mount in enumerate(container.get("volumeMounts") or []):
            claim = _claim_of(pod, mount)
            if claim in claims and not (mount.get("subPathExpr") or mount.get("subPath")):
                yield Violation(
                    f"mounts the whole checkpoint claim {claim} at {mount.get('mountPath')}: "
                    "every run's checkpoints are reachable from this pod",
                    (*pod.container_path(index), "volumeMounts", position),
                )
