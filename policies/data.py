"""Training data: prepared once per job, read-only where the ranks read it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import WARNING
from trainops.policy import Context, Violation, pod_rule
from trainops.policy.pods import PodTemplate, mapping

from . import common
from .checkpoints import CHECKPOINT_PATHS

_DATA_WORDS = ("data", "corpus")


def _writable_claims(
    pod: PodTemplate, container: dict[str, Any], ctx: Context
) -> Iterator[tuple[dict, dict]]:
    """(mount, volume) for each claim the container can write, checkpoints and /dev/shm aside."""
    checkpoint_dirs = [d for d, _ in common.checkpoint_dirs(container)]
    for mount in container.get("volumeMounts") or []:
        if not isinstance(mount, dict) or mount.get("readOnly") is True:
            continue
        volume = pod.volume(str(mount.get("name")))
        claim = (volume or {}).get("persistentVolumeClaim")
        if not isinstance(claim, dict) or claim.get("readOnly") is True:
            continue
        pvc = ctx.find("PersistentVolumeClaim", str(claim.get("claimName")), pod.doc.namespace)
        modes = mapping(pvc.obj.get("spec")).get("accessModes") if pvc is not None else None
        if modes == ["ReadOnlyMany"]:
            continue  # nobody can write it
        path = str(mount.get("mountPath", "")).rstrip("/")
        holds_checkpoints = path in CHECKPOINT_PATHS or any(
            d == path or d.startswith(path + "/") for d in checkpoint_dirs
        )
        if path and not holds_checkpoints and path != "/dev/shm":
            yield mount, volume


def _pods_of_job(pod: PodTemplate, ctx: Context) -> int:
    return sum(p.replicas or 1 for p in ctx.pods(pod.doc))


@pod_rule(
    id="data-prep-every-replica",
    severity=WARNING,
    title="Data is prepared once per job, not by every replica into one shared claim",
    why="An init container that downloads or syncs data into a shared ReadWriteMany claim "
    "runs in every pod of the job: N copies write the same files at once (which can leave "
    "corrupt or half-written data for the ranks that start first), N times the transfer, and every "
    "restart of any pod does it again.",
    fix="Prepare the data once per run: `trainops new-run --dataset-claim NAME --prepare "
    "COMMAND` runs COMMAND in one Job with the claim writable while the ranks wait for it; "
    "mount the claim readOnly in the pods that only read it.",
    applies=common.training_pod,
)
def data_prep_every_replica(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial or _pods_of_job(pod, ctx) < 2:
        return
    for index, init in enumerate(pod.spec.get("initContainers") or []):
        if not isinstance(init, dict):
            continue
        for mount, volume in _writable_claims(pod, init, ctx):
            claim = volume["persistentVolumeClaim"].get("claimName")
            yield Violation(
                f"init container {init.get('name')} writes claim {claim} at "
                f"{mount.get('mountPath')} in each of the job's {_pods_of_job(pod, ctx)} pods",
                (*pod.path, "initContainers", index),
            )


@pod_rule(
    id="dataset-claim-writable",
    severity=WARNING,
    title="Every replica mounts its dataset read-only",
    why="A dataset claim every rank can write is one bug (a cache written next to the data, "
    "a path mix-up with the output directory) away from corrupting the data of every "
    "rank and every later run; read-only also lets the storage cache and share it.",
    fix="Mount the dataset readOnly (volumeMounts[].readOnly and the volume's "
    "persistentVolumeClaim.readOnly; `trainops new-run --dataset-claim` does); write "
    "outputs to the checkpoint directory.",
    applies=common.training_pod,
)
def dataset_claim_writable(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial or _pods_of_job(pod, ctx) < 2:
        return
    for index, container in enumerate(pod.containers):
        for position, mount in enumerate(container.get("volumeMounts") or []):
            found = [m for m, _ in _writable_claims(pod, container, ctx) if m is mount]
            words = f"{mount.get('name')} {mount.get('mountPath')}".lower() if found else ""
            if found and any(word in words for word in _DATA_WORDS):
                claim = pod.volume(str(mount.get("name")))["persistentVolumeClaim"]
                yield Violation(
                    f"dataset claim {claim.get('claimName')} at {mount.get('mountPath')} is "
                    "writable by every replica",
                    (*pod.container_path(index), "volumeMounts", position),
                )
