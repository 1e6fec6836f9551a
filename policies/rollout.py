"""Rollouts of long-lived workloads that hold scarce resources (GPUs, single-node volumes)."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import WARNING
from trainops.policy import Context, Violation, pod_rule, sets_any
from trainops.policy.pods import GPU_RESOURCES, PodTemplate, mapping

ONE_NODE_MODES = frozenset({"ReadWriteOnce", "ReadWriteOncePod"})


def _surges(spec: dict) -> bool:
    strategy = mapping(spec.get("strategy"))
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return False
    surge = mapping(strategy.get("rollingUpdate")).get("maxSurge", "25%")
    return str(surge).strip() not in ("0", "0%")


@pod_rule(
    id="rollout-needs-spare-capacity",
    severity=WARNING,
    title="Deployments holding GPUs or a one-node volume roll out without a surge",
    why="A RollingUpdate starts the new pod before it stops the old one (maxSurge, 25% by "
    "default, at least one pod). When the old pod holds the GPUs the new one needs, or a "
    "ReadWriteOnce volume attached on its node, the new pod waits Pending (or on the volume) "
    "while the old one waits to be replaced: the rollout hangs until someone deletes a pod.",
    fix="Use strategy: {type: Recreate}, or rollingUpdate: {maxSurge: 0, maxUnavailable: 1}.",
    kinds=("Deployment",),
    applies=sets_any(*GPU_RESOURCES, "volumes"),
)
def needs_spare_capacity(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if not _surges(mapping(pod.doc.obj.get("spec"))):
        return
    if pod.uses_gpus:
        yield Violation(
            f"each pod holds {pod.gpus} GPU(s) and a rollout first starts an extra one",
            ("spec", "strategy"),
        )
        return
    for volume in pod.volumes():
        claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
        pvc = ctx.find("PersistentVolumeClaim", str(claim), pod.doc.namespace or None)
        modes = set(mapping(pvc.obj.get("spec")).get("accessModes") or []) if pvc else set()
        if modes and modes <= ONE_NODE_MODES:
            yield Violation(
                f"claim {claim} attaches to one node and a rollout first starts an extra "
                "pod that may land elsewhere",
                ("spec", "strategy"),
            )
            return
