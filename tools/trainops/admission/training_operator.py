"""The Training Operator v1.9 validating webhooks (PyTorchJob, TFJob, XGBoostJob,
PaddleJob, JAXJob) and the pod templates of its jobs.

Facts from kubeflow/training-operator v1.9 `pkg/webhooks/*/..._webhook.go`
(validatePyTorchJob and its siblings) and `pkg/common/util/webhooks.go`
(ValidateRunPolicy). The webhook sees the object as submitted (no defaulting),
so a Master without `replicas` is refused like one with 2. MPIJob v1 has no
webhook in v1.9.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.admission import names
from trainops.admission.embedded import later
from trainops.admission.field import (
    WEBHOOK,
    Problem,
    forbidden,
    invalid,
    not_supported,
    required,
)
from trainops.admission.workloads import pod_template
from trainops.policy.pods import DEFAULT_CONTAINERS, REPLICA_FIELDS

MANAGERS = ("kueue.x-k8s.io/multikueue", "kubeflow.org/training-operator")
FIX = "Change the job as the Training Operator's webhook asks; it refuses the job at apply."


@dataclass(frozen=True)
class JobKind:
    roles: tuple[str, ...] | None  # None: any role name (TFJob)
    single_master: tuple[str, ...] = ()  # roles that must have exactly one replica
    at_least_one: tuple[str, ...] = ()  # roles that need replicas >= 1 when given
    required_role: str | None = None


KINDS = {
    "PyTorchJob": JobKind(("Master", "Worker"), ("Master",), ("Worker",)),
    "TFJob": JobKind(None),
    "XGBoostJob": JobKind(("Master", "Worker"), ("Master",), required_role="Master"),
    "PaddleJob": JobKind(("Master", "Worker")),
    "JAXJob": JobKind(("Worker",)),
}


def check(kind: str, obj: dict[str, Any]) -> Iterator[Problem]:
    rules = KINDS[kind]
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    # The webhook sees the object after the API server has generated its name.
    name = names.object_name(meta)
    if isinstance(name, str) and name:
        errors = names.dns1035_label(name)
        if errors:
            yield Problem(
                WEBHOOK,
                ("metadata", "name" if meta.get("name") else "generateName"),
                invalid(name, "should match: " + ",".join(errors)),
                FIX,
            )
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    field = REPLICA_FIELDS[kind]
    replicas = spec.get(field)
    at = ("spec", field)
    if kind != "JAXJob":
        yield from _run_policy(spec.get("runPolicy"))
    if not isinstance(replicas, dict):
        yield Problem(WEBHOOK, at, required("must be required"), FIX)
        return
    if kind == "PyTorchJob":
        yield from _elastic(spec, replicas)
    chiefs = 0
    for role, replica in replicas.items():
        role = str(role)
        where = (*at, role)
        containers_at = (*where, "template", "spec", "containers")
        if rules.roles is not None and role not in rules.roles:
            yield Problem(WEBHOOK, where, not_supported(role, rules.roles), FIX)
        if role in ("Chief", "Master"):
            chiefs += 1
        replica = replica if isinstance(replica, dict) else {}
        template = replica.get("template") if isinstance(replica.get("template"), dict) else {}
        pod = template.get("spec") if isinstance(template.get("spec"), dict) else {}
        containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
        if not containers:
            yield Problem(WEBHOOK, containers_at, required("must be specified"), FIX)
        for index, container in enumerate(containers):
            if not container.get("image"):
                yield Problem(
                    WEBHOOK, (*containers_at, index, "image"), required("must be required"), FIX
                )
        wanted = DEFAULT_CONTAINERS[kind]
        if not any(c.get("name") == wanted for c in containers):
            quoted = f'"{wanted}"' if kind == "PaddleJob" else wanted
            yield Problem(
                WEBHOOK,
                containers_at,
                required(f"must have at least one container with name {quoted}"),
                f"Name the training container {wanted!r}: the operator finds it by name.",
            )
        count = replica.get("replicas")
        if role in rules.single_master and count != 1:
            yield Problem(WEBHOOK, (*where, "replicas"), forbidden("must be 1"), FIX)
        elif role in rules.at_least_one and isinstance(count, int) and count < 1:
            yield Problem(WEBHOOK, (*where, "replicas"), forbidden("must be at least 1"), FIX)
        yield from later(
            pod_template(template, (*where, "template")), kind, "the Training Operator"
        )
    if kind == "TFJob" and chiefs > 1:
        yield Problem(WEBHOOK, at, forbidden("must not have more than 1 Chief or Master role"), FIX)
    if rules.required_role and rules.required_role not in replicas:
        yield Problem(WEBHOOK, (*at, rules.required_role), required("must be present"), FIX)


def _run_policy(policy: Any) -> Iterator[Problem]:
    if not isinstance(policy, dict):
        return
    manager = policy.get("managedBy")
    if isinstance(manager, str) and manager not in MANAGERS:
        yield Problem(
            WEBHOOK, ("spec", "runPolicy", "managedBy"), not_supported(manager, MANAGERS), FIX
        )


def _elastic(spec: dict[str, Any], replicas: dict[str, Any]) -> Iterator[Problem]:
    elastic = spec.get("elasticPolicy")
    if not isinstance(elastic, dict):
        return
    if "Worker" not in replicas:
        yield Problem(
            WEBHOOK,
            ("spec", "pytorchReplicaSpecs", "Worker"),
            required("must be configured if elastic policy is used"),
            FIX,
        )
    if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
        yield Problem(
            WEBHOOK,
            ("spec", "elasticPolicy", "nProcPerNode"),
            forbidden("must not be used with spec.nprocPerNode"),
            "Drop elasticPolicy.nProcPerNode (deprecated); keep spec.nprocPerNode.",
        )
