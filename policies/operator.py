"""What the Training Operator accepts but then fails on: names too long for the Services it
creates, elastic bounds that never converge (its webhook's own checks are in
trainops.admission)."""

from __future__ import annotations

from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import REPLICA_FIELDS, is_int, mapping

KUBEFLOW_KINDS = tuple(REPLICA_FIELDS)


def _specs(doc: Document) -> dict:
    value = (doc.obj.get("spec") or {}).get(REPLICA_FIELDS.get(doc.kind, ""))
    return value if isinstance(value, dict) else {}


# Longest name the Services the operator creates per pod may have (DNS-1035 labels).
SERVICE_NAME_MAX = 63


@resource_rule(
    id="job-name-length",
    severity=ERROR,
    title="Training job names leave room for the names of their pods' Services",
    why="The Training Operator creates a Service for every pod, named "
    "<job>-<replica type>-<index> (training-operator pkg/core/utils.go GenGeneralName). Service "
    "names are DNS-1035 labels of at most 63 characters. The webhook accepts any job name up "
    "to 63 characters, so a long name is admitted and then its Services cannot be created: "
    "the pods cannot find each other.",
    fix="Shorten the job name so that <job>-<replica type>-<highest index> fits in 63 characters.",
    kinds=KUBEFLOW_KINDS,
    source=(
        "https://github.com/kubeflow/trainer/blob/v1.9.0/pkg/core/utils.go#L30",
        "https://github.com/kubeflow/trainer/blob/v1.9.0/pkg/controller.v1/common/service.go#L243",
        "https://github.com/kubernetes/apimachinery/blob/v0.35.0/pkg/api/validation/generic.go#L59",
    ),
)
def name_length(doc: Document, ctx: Context) -> Iterator[Violation]:
    name = doc.name
    for role, replica in _specs(doc).items():
        count = replica.get("replicas", 1) if isinstance(replica, dict) else 1
        if not is_int(count) or count < 1:
            continue
        service = f"{name}-{str(role).lower()}-{count - 1}"
        if len(service) > SERVICE_NAME_MAX:
            yield Violation(
                f"Service {service!r} would be {len(service)} characters (at most "
                f"{SERVICE_NAME_MAX})",
                ("metadata", "name"),
            )
            return


@resource_rule(
    id="elastic-policy",
    severity=WARNING,
    title="elasticPolicy bounds hold the Worker replicas",
    why="minReplicas above maxReplicas, or Worker replicas outside [minReplicas, maxReplicas], "
    "do not converge: torchrun refuses min above max, waits (until its join timeout) for a "
    "node count the job cannot reach, or leaves the nodes above max idle. The "
    "webhook checks neither (it refuses only elasticPolicy without a Worker and "
    "nProcPerNode together with spec.nprocPerNode).",
    fix="Keep minReplicas <= Worker replicas <= maxReplicas; use spec.nprocPerNode, not the "
    "deprecated elasticPolicy.nProcPerNode.",
    kinds=("PyTorchJob",),
)
def elastic_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    elastic = spec.get("elasticPolicy")
    worker = _specs(doc).get("Worker")
    if not isinstance(elastic, dict) or not isinstance(worker, dict):
        return
    at = ("spec", "elasticPolicy")
    if "nProcPerNode" in elastic and "nprocPerNode" not in spec:
        yield Violation(
            "elasticPolicy.nProcPerNode is deprecated; use spec.nprocPerNode",
            (*at, "nProcPerNode"),
        )
    low = elastic.get("minReplicas", elastic.get("maxReplicas"))
    high = elastic.get("maxReplicas", low)
    count = worker.get("replicas", 1)
    if is_int(low) and is_int(high) and is_int(count):
        if low > high:
            yield Violation(f"minReplicas {low} is above maxReplicas {high}", at)
        elif not low <= count <= high:
            yield Violation(f"Worker.replicas {count} is outside [{low}, {high}]", at)
    if elastic.get("standalone") is True:
        yield Violation(
            "standalone: true makes the operator set PET_STANDALONE='' (torchrun "
            "then runs single-node rendezvous)",
            (*at, "standalone"),
        )
