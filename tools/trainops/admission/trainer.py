"""Kubeflow Trainer v2.3.0: the TrainJob and training runtime webhooks, and the
JobSet a runtime becomes.

Facts from kubeflow/trainer v2.3.0 `pkg/webhooks/trainingruntime_webhook.go` and
`clustertrainingruntime_webhook.go` (validateReplicatedJobs: an ancestor
replicated job has one replica and its named container) and
`pkg/webhooks/trainjob_webhook.go` (the runtime reference names a supported
runtime kind). The torch plugin's checks of a TrainJob (reserved PET_*
variables) need the runtime it names and are not made per document.
A runtime's JobSet template is validated only when a TrainJob uses it: the
Trainer creates a JobSet named after the TrainJob, JobSet's webhook checks it
then, and its Jobs are validated when the JobSet controller creates them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.admission.embedded import later
from trainops.admission.field import WEBHOOK, Problem, invalid
from trainops.admission.jobset import volume_claims
from trainops.admission.workloads import job_spec

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_CONTAINERS = {
    "trainer": "node",
    "model-initializer": "model-initializer",
    "dataset-initializer": "dataset-initializer",
}
RUNTIME_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
FIX = "Change the object as the Trainer's webhook asks; it refuses it at apply."


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def runtime(kind: str, obj: dict[str, Any]) -> Iterator[Problem]:
    at = ("spec", "template", "spec", "replicatedJobs")
    jobset = _dict(_dict(_dict(obj.get("spec")).get("template")).get("spec"))
    claimed = volume_claims(jobset)
    rjobs = jobset.get("replicatedJobs")
    for index, rjob in enumerate(rjobs if isinstance(rjobs, list) else []):
        rjob = _dict(rjob)
        template = _dict(rjob.get("template"))
        job = _dict(template.get("spec"))
        ancestor = _dict(_dict(template.get("metadata")).get("labels")).get(ANCESTOR_LABEL)
        if ancestor in ANCESTOR_CONTAINERS:
            replicas = rjob.get("replicas", 1)
            if replicas != 1:
                yield Problem(
                    WEBHOOK, (*at, index, "replicas"), invalid(replicas, "always must be 1"), FIX
                )
            pod = _dict(_dict(job.get("template")).get("spec"))
            containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
            wanted = ANCESTOR_CONTAINERS[ancestor]
            if not any(c.get("name") == wanted for c in containers):
                yield Problem(
                    WEBHOOK,
                    (*at, index, "template", "spec", "template", "spec", "containers"),
                    invalid(
                        [c.get("name") for c in containers],
                        f"must contain the required container for the ancestor: {ancestor}",
                    ),
                    f"Name the {ancestor} step's container {wanted!r}: the Trainer looks it up.",
                )
        where = (*at, index, "template", "spec")
        # The Trainer fills parallelism and completions from the TrainJob; JobSet's webhook
        # defaults completionMode and restartPolicy.
        filled = {
            **job,
            "completions": job.get("completions", 1),
            "parallelism": job.get("parallelism", 1),
        }
        errors = job_spec(filled, where, True, "OnFailure", "Indexed", claimed)
        yield from later(errors, kind, "the JobSet controller (for each TrainJob using it)", "Jobs")


def train_job(obj: dict[str, Any]) -> Iterator[Problem]:
    ref = _dict(_dict(obj.get("spec")).get("runtimeRef"))
    group = ref.get("apiGroup", RUNTIME_GROUP)
    kind = ref.get("kind", "ClusterTrainingRuntime")
    if group != RUNTIME_GROUP or kind not in RUNTIME_KINDS:
        yield Problem(
            WEBHOOK,
            ("spec", "runtimeRef"),
            f"unsupported runtime: {kind}.{group}",
            f"Point runtimeRef at a ClusterTrainingRuntime or TrainingRuntime of {RUNTIME_GROUP}.",
        )
