"""Restart budgets fit for jobs that run for days."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import REPLICA_FIELDS


@resource_rule(
    id="restart-budget",
    severity=WARNING,
    title="Long training jobs can restart after routine failures",
    why="At multi-node scale a GPU Xid error, NIC flap or OOM kill happens every few hundred "
    "GPU-hours. A job with backoffLimit 0, restartPolicy Never or a tiny maxRestarts fails "
    "for good on the first one, although it could resume from its last checkpoint.",
    fix="Use restartPolicy ExitCode (or OnFailure) on every replica; size "
    "elasticPolicy.maxRestarts (and, with OnFailure, runPolicy.backoffLimit; a JobSet's "
    "failurePolicy.maxRestarts) with `trainops plan`. Under ExitCode backoffLimit counts "
    "nothing (see backoff-limit-exitcode).",
    kinds=(*REPLICA_FIELDS, "JobSet"),
)
def restart_budget(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = doc.obj.get("spec") or {}
    pods = ctx.pods(doc)
    if not any(p.uses_gpus for p in pods) or sum(p.replicas or 1 for p in pods) < 2:
        return
    if doc.kind == "JobSet":
        restarts = (spec.get("failurePolicy") or {}).get("maxRestarts", 0)
        if restarts == 0:
            yield Violation(
                "no failurePolicy.maxRestarts: the first failed Job fails the whole JobSet",
                ("spec", "failurePolicy") if "failurePolicy" in spec else ("spec",),
            )
        return
    for pod in pods:
        replica = ((spec.get(REPLICA_FIELDS[doc.kind]) or {}).get(pod.role)) or {}
        if replica.get("restartPolicy") == "Never" and pod.uses_gpus:
            yield Violation(
                f"{pod.role} has restartPolicy Never",
                ("spec", REPLICA_FIELDS[doc.kind], pod.role, "restartPolicy"),
            )
    run_policy = spec.get("runPolicy") or {}
    # backoffLimit counts container restarts: only OnFailure and Always replicas have any.
    counted = any(
        (replica or {}).get("restartPolicy", "OnFailure") in ("OnFailure", "Always")
        for replica in (spec.get(REPLICA_FIELDS[doc.kind]) or {}).values()
    )
    if run_policy.get("backoffLimit") == 0 and counted:
        yield Violation(
            "runPolicy.backoffLimit is 0: the first failure ends the job",
            ("spec", "runPolicy", "backoffLimit"),
        )
    elastic = spec.get("elasticPolicy") or {}
    restarts = elastic.get("maxRestarts")
    if isinstance(restarts, int) and restarts < 3:
        yield Violation(
            f"elasticPolicy.maxRestarts is {restarts}", ("spec", "elasticPolicy", "maxRestarts")
        )
