"""What the API server and the operators' admission webhooks reject that schemas cannot express.

`check(doc, registry)` returns the problems of one document: its CRD's CEL
rules (`cel`), the built-in API validation of Kubernetes kinds and of object
metadata (`api-validation`), and the validation of the operators the project
deploys (`webhook`). Each check is found by a dictionary lookup on the
document's apiVersion and kind; CEL rules are compiled once per kind by the
schema registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from trainops.admission import jobset, kueue, mpi_operator, names, trainer, training_operator
from trainops.admission.field import API, CEL, WEBHOOK, Problem
from trainops.admission.workloads import BUILT_IN
from trainops.model import ERROR, WARNING, Document
from trainops.rules import RuleInfo, register

MAX_OBJECT_BYTES = 3 * 1024 * 1024 // 2  # etcd's default request limit (--max-request-bytes)
API_FIX = "Correct the field; the API server refuses the object at apply with this message."
CEL_FIX = "Change the object so that the rule of its CRD holds (the message is the CRD's)."

register(
    RuleInfo(
        id=CEL,
        severity=ERROR,
        title="Custom resources satisfy their CRD's CEL validation rules",
        why="The API server evaluates every x-kubernetes-validations rule of a CRD on create "
        "and update and refuses the object when one is false: Argo CD's sync fails.",
        fix="Change the field the rule names; the finding carries the CRD's own message.",
        sources=(
            "https://github.com/kubernetes/apiextensions-apiserver/blob/v0.35.0/pkg/registry/customresource/strategy.go#L217",
            "https://github.com/kubernetes/apiserver/blob/v0.35.0/pkg/registry/generic/registry/store.go#L486",
        ),
    )
)
register(
    RuleInfo(
        id=API,
        severity=ERROR,
        title="Objects pass the API server's built-in validation",
        why="Kubernetes validates names, labels, pod specs and workload specs in Go code that "
        "no JSON schema carries: a selector that does not match its template or a mount of "
        "an undefined volume is refused at apply; inside a custom resource's template it is "
        "accepted and the operator's pods are refused later, so the job never starts.",
        fix="Correct the field as the message (the API server's own) says.",
        sources=(
            "https://github.com/kubernetes/apimachinery/blob/v0.35.0/pkg/api/validation/objectmeta.go#L182",
            "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/apis/core/validation/validation.go",
            "https://github.com/kubernetes/apiserver/blob/v0.35.0/pkg/registry/rest/create.go#L122",
            "https://github.com/kubeflow/mpi-operator/blob/v0.8.0/pkg/controller/mpi_job_controller.go#L1764",
        ),
    )
)
register(
    RuleInfo(
        id=WEBHOOK,
        severity=ERROR,
        title="Training objects pass their operator's admission checks",
        why="The Training Operator, MPI Operator, Trainer, JobSet and Kueue validate their "
        "objects in webhooks or controllers (names that must be DNS-1035 labels, replica "
        "counts, required containers, runtime references); a refused object never runs.",
        fix="Correct the object as the operator's message says.",
        sources=(
            "https://github.com/kubeflow/trainer/blob/v1.9.0/pkg/webhooks/pytorch/pytorchjob_webhook.go#L76",
            "https://github.com/kubeflow/mpi-operator/blob/v0.8.0/pkg/controller/mpi_job_controller.go#L608",
            "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/jobset/jobset.go#L91",
            "https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/webhooks/jobset_webhook.go#L166",
        ),
    )
)

Check = Callable[[dict[str, Any]], Iterator[Problem]]
# Built-in kinds whose size is worth measuring (data, or embedded files); other kinds
# only when they are custom resources or unknown.
BULKY = {("v1", "ConfigMap"), ("v1", "Secret")}
KUEUE_JOBS = {
    ("batch/v1", "Job"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "TFJob"),
    ("kubeflow.org/v1", "XGBoostJob"),
    ("kubeflow.org/v1", "PaddleJob"),
    ("kubeflow.org/v1", "JAXJob"),
    ("kubeflow.org/v2beta1", "MPIJob"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
}


def _training_operator(kind: str) -> Check:
    return lambda obj: training_operator.check(kind, obj)


def _runtime(kind: str) -> Check:
    return lambda obj: trainer.runtime(kind, obj)


OPERATOR_CHECKS: dict[tuple[str, str], Check] = {
    **{("kubeflow.org/v1", k): _training_operator(k) for k in training_operator.KINDS},
    ("kubeflow.org/v2beta1", "MPIJob"): mpi_operator.check,
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): jobset.check,
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): trainer.train_job,
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): _runtime("TrainingRuntime"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): _runtime("ClusterTrainingRuntime"),
    ("kueue.x-k8s.io/v1beta1", "ClusterQueue"): kueue.cluster_queue,
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): kueue.cluster_queue,
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"): kueue.resource_flavor,
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): kueue.resource_flavor,
}


# Mutating webhooks: what an operator fills in before the API server validates the object.
DEFAULTS: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): jobset.defaults,
}


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as the operators' mutating webhooks pass it on (unchanged for most kinds)."""
    mutate = DEFAULTS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    return mutate(obj) if mutate is not None else obj


def check(
    doc: Document, registry: Any, cel: bool = True, built_in: bool = True, schema_valid: bool = True
) -> list[Problem]:
    """Problems of one document. CEL rules run only on schema-valid documents (on a wrong
    type they would only repeat the schema error); the other checks tolerate any shape."""
    problems: list[Problem] = []
    key = (doc.api_version, doc.kind)
    if cel and schema_valid:
        rules = registry.rules(*key)
        if rules is not None:
            if rules.problems and not rules.reported:
                rules.reported = True
                problems.extend(Problem(CEL, (), text, "", WARNING) for text in rules.problems)
            for failure in rules.violations(doc.obj):
                problems.append(Problem(CEL, failure.path, failure.message, CEL_FIX))
    if built_in:
        problems.extend(_built_in(doc, key, registry))
    return problems


def _built_in(doc: Document, key: tuple[str, str], registry: Any) -> Iterator[Problem]:
    obj = doc.obj
    entry = BUILT_IN.get(key)
    if entry is not None:
        name_check, spec_check = entry
    else:
        compiled = registry.lookup(*key)
        custom = compiled is not None and not compiled.core
        # Custom resources' names are DNS-1123 subdomains; other kinds have rules of their own.
        name_check, spec_check = (names.dns1123_subdomain if custom else _any_name), None
    for problem in names.object_meta(obj.get("metadata"), name_check):
        yield Problem(problem.rule, problem.path, problem.message, API_FIX)
    if spec_check is not None:
        for path, message in spec_check(obj):
            yield Problem(API, path, message, API_FIX)
    operator = OPERATOR_CHECKS.get(key)
    if operator is not None:
        yield from operator(obj)
    if key in KUEUE_JOBS:
        yield from kueue.queue_labels(obj)
    if entry is not None and spec_check is not None and key not in BULKY:
        return  # a workload spec of 1.5 MiB is not written by hand; skip the serialisation
    size = len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str))
    if size > MAX_OBJECT_BYTES:
        yield Problem(
            API,
            (),
            f"Request entity too large: the object is {size} bytes, over etcd's "
            f"{MAX_OBJECT_BYTES}-byte limit",
            "Split the object (a ConfigMap per file, a smaller template).",
        )


def _any_name(name: str) -> tuple[str, ...]:
    return ()
