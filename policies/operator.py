"""The training operator's admission webhook, checked before Argo CD meets it."""

from __future__ import annotations

import re
from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy.engine import Context, Violation, resource_rule
from trainops.policy.pods import DEFAULT_CONTAINERS, REPLICA_FIELDS, is_int

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
KUBEFLOW_KINDS = tuple(REPLICA_FIELDS)


def _specs(doc: Document) -> dict:
    value = (doc.obj.get("spec") or {}).get(REPLICA_FIELDS.get(doc.kind, ""))
    return value if isinstance(value, dict) else {}


@resource_rule(
    id="job-name-dns1035",
    severity=ERROR,
    title="Training job names are DNS-1035 labels",
    why="The operator names pods and Services after the job (<job>-worker-0): it rejects names "
    "that are not lowercase DNS labels starting with a letter, or that leave no room for the "
    "suffix.",
    fix="Use lowercase letters, digits and '-', start with a letter, at most 50 characters.",
    kinds=KUBEFLOW_KINDS,
)
def dns1035(doc: Document, ctx: Context) -> Iterator[Violation]:
    name = doc.name
    if not _DNS1035.match(name) or len(name) > 50:
        yield Violation(
            f"{name!r} is not a DNS-1035 label of at most 50 characters", ("metadata", "name")
        )


@resource_rule(
    id="replica-container-name",
    severity=ERROR,
    title="Each replica has the container the operator looks for",
    why="The operator finds the training container by name (pytorch for PyTorchJob, tensorflow "
    "for TFJob...) to set the port and environment; without it the webhook rejects the job.",
    fix="Name the training container as the operator expects (pytorch for PyTorchJob).",
    kinds=tuple(DEFAULT_CONTAINERS),
)
def container_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    wanted = DEFAULT_CONTAINERS[doc.kind]
    for pod in ctx.pods(doc):
        names = [c.get("name") for c in pod.containers]
        if wanted not in names:
            yield Violation(
                f"{pod.role} has no container named {wanted!r} (found "
                f"{', '.join(map(str, names)) or 'none'})",
                (*pod.path, "containers"),
            )


@resource_rule(
    id="pytorchjob-replicas",
    severity=ERROR,
    title="One Master and at least one Worker",
    why="The webhook rejects a PyTorchJob whose Master has more than one replica; Worker "
    "replicas 0 still creates a worker (a known operator bug), so it never means 'no workers'.",
    fix="Master.replicas: 1; Worker.replicas >= 1 (drop the Worker spec for a single pod).",
    kinds=("PyTorchJob",),
)
def replicas(doc: Document, ctx: Context) -> Iterator[Violation]:
    specs = _specs(doc)
    for role in specs:
        if role not in ("Master", "Worker"):
            yield Violation(
                f"replica type {role!r} is not Master or Worker",
                ("spec", "pytorchReplicaSpecs", role),
            )
    master = specs.get("Master")
    if (
        isinstance(master, dict)
        and is_int(master.get("replicas", 1))
        and master.get("replicas", 1) != 1
    ):
        yield Violation(
            f"Master.replicas is {master.get('replicas')}, must be 1",
            ("spec", "pytorchReplicaSpecs", "Master", "replicas"),
        )
    worker = specs.get("Worker")
    if (
        isinstance(worker, dict)
        and is_int(worker.get("replicas", 1))
        and worker.get("replicas", 1) < 1
    ):
        yield Violation(
            "Worker.replicas is 0: the operator still creates a worker",
            ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
        )


@resource_rule(
    id="elastic-policy",
    severity=ERROR,
    title="elasticPolicy is consistent",
    why="The webhook rejects elasticPolicy without a Worker replica spec, and "
    "elasticPolicy.nProcPerNode (deprecated) together with spec.nprocPerNode; min above max "
    "or replicas outside [min, max] never converge.",
    fix="Give elastic jobs a Worker spec with minReplicas <= replicas <= maxReplicas, and only "
    "spec.nprocPerNode.",
    kinds=("PyTorchJob",),
)
def elastic_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = doc.obj.get("spec") or {}
    elastic = spec.get("elasticPolicy")
    if not isinstance(elastic, dict):
        return
    at = ("spec", "elasticPolicy")
    worker = _specs(doc).get("Worker")
    if not isinstance(worker, dict):
        yield Violation("elasticPolicy requires a Worker replica spec", at)
        return
    if "nProcPerNode" in elastic and "nprocPerNode" in spec:
        yield Violation(
            "elasticPolicy.nProcPerNode and spec.nprocPerNode are both set", (*at, "nProcPerNode")
        )
    elif "nProcPerNode" in elastic:
        yield Violation(
            "elasticPolicy.nProcPerNode is deprecated; use spec.nprocPerNode",
            (*at, "nProcPerNode"),
            severity=WARNING,
        )
    low = elastic.get("minReplicas", elastic.get("maxReplicas"))
    high = elastic.get("maxReplicas", low)
    count = worker.get("replicas", 1)
    if isinstance(low, int) and isinstance(high, int):
        if low > high:
            yield Violation(f"minReplicas {low} is above maxReplicas {high}", at)
        elif not low <= count <= high:
            yield Violation(f"Worker.replicas {count} is outside [{low}, {high}]", at)
    if elastic.get("standalone") is True:
        yield Violation(
            "standalone: true makes the operator set PET_STANDALONE='' (torchrun "
            "then runs single-node rendezvous)",
            (*at, "standalone"),
            severity=WARNING,
        )
