"""What Kueue's own job webhooks refuse on the objects it manages (Kueue v0.19.2).

A batch Job (`pkg/controller/jobs/job/job_webhook.go`, validatePartialAdmissionCreate and
validateSyncCompletionCreate): kueue.x-k8s.io/job-min-parallelism must be an integer above
0 and below the Job's pod count (parallelism, or completions where fewer), and not beside
an elastic job; kueue.x-k8s.io/job-completions-equal-parallelism must be a boolean, and
true only on an Indexed Job whose completions equal its parallelism.

A RayCluster (`pkg/controller/jobs/raycluster/raycluster_webhook.go`, validateCreate):
the in-tree autoscaler only as an elastic job (kueue.x-k8s.io/elastic-job: "true"), and no
worker group named "head", which names the head's pod set.

Both apply to objects Kueue manages: those naming a queue (kueue.x-k8s.io/queue-name).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, is_int, mapping

from .placement import KUEUE_LABEL, MIN_PARALLELISM

KUEUE = "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/controller/jobs/"
SYNC_COMPLETIONS = "kueue.x-k8s.io/job-completions-equal-parallelism"
ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"  # pkg/constants/constants.go
HEAD_POD_SET = "head"


def _managed(metadata: dict[str, Any]) -> bool:
    return bool(mapping(metadata.get("labels")).get(KUEUE_LABEL))


def _job(doc: Document) -> tuple[dict[str, Any], dict[str, Any], tuple[Any, ...]]:
    """A Job's (or a CronJob's job template's) metadata, spec and the path to them."""
    if doc.kind == "CronJob":
        template = mapping(mapping(doc.obj.get("spec")).get("jobTemplate"))
        return (
            mapping(template.get("metadata")),
            mapping(template.get("spec")),
            (
                "spec",
                "jobTemplate",
            ),
        )
    return doc.metadata, mapping(doc.obj.get("spec")), ()


def _parse_bool(text: str) -> bool | None:
    """Go's strconv.ParseBool."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


@resource_rule(
    id="kueue-job-annotations",
    severity=ERROR,
    source=(KUEUE + "job/job_webhook.go#L152-L190", KUEUE + "job/job_controller.go#L451-L458"),
    title="A queued batch Job's partial-admission annotations are ones Kueue's webhook accepts",
    why="Kueue's Job webhook refuses a queued Job whose kueue.x-k8s.io/job-min-parallelism is "
    "not an integer between 1 and one less than its pod count (equal to parallelism is not "
    "'all or nothing', it is refused), or is set on an elastic job, and one whose "
    "kueue.x-k8s.io/job-completions-equal-parallelism is not a boolean, or is true on a "
    "NonIndexed Job or with completions other than parallelism. The Job (or every Job a "
    "CronJob creates) is never created.",
    fix="Give job-min-parallelism a value below the pod count (leave it out for all or "
    "nothing); use job-completions-equal-parallelism only on an Indexed Job with completions "
    "equal to parallelism.",
    kinds=("Job", "CronJob"),
)
def kueue_job_annotations(doc: Document, ctx: Context) -> Iterator[Violation]:
    metadata, spec, base = _job(doc)
    if not _managed(metadata):
        return
    annotations = mapping(metadata.get("annotations"))
    at = (*base, "metadata", "annotations")
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    if not is_int(parallelism):
        return
    pods = min(parallelism, completions) if is_int(completions) else parallelism
    if MIN_PARALLELISM in annotations:
        value = str(annotations[MIN_PARALLELISM])
        number = int(value) if value.lstrip("-").isdigit() else None
        if number is None or not 0 < number < pods:
            yield Violation(
                f"{MIN_PARALLELISM} {value!r} must be an integer between 1 and {pods - 1} (the "
                f"Job runs {pods} pods): Kueue's webhook refuses the Job",
                (*at, MIN_PARALLELISM),
            )
        if str(annotations.get(ELASTIC_JOB)) == "true":
            yield Violation(
                "partial admission and an elastic job cannot be used together",
                (*at, MIN_PARALLELISM),
            )
    if SYNC_COMPLETIONS in annotations:
        enabled = _parse_bool(str(annotations[SYNC_COMPLETIONS]))
        if enabled is None:
            yield Violation(
                f"{SYNC_COMPLETIONS} {annotations[SYNC_COMPLETIONS]!r} is not a boolean",
                (*at, SYNC_COMPLETIONS),
            )
        elif enabled and spec.get("completionMode", "NonIndexed") == "NonIndexed":
            yield Violation(
                f"{SYNC_COMPLETIONS} is true on a NonIndexed Job (completionMode): Kueue's "
                "webhook refuses it",
                (*base, "spec", "completionMode"),
            )
        elif enabled and (completions if completions is not None else 1) != parallelism:
            yield Violation(
                f"{SYNC_COMPLETIONS} is true but completions {completions} differs from "
                f"parallelism {parallelism}",
                (*base, "spec", "completions"),
            )


@resource_rule(
    id="kueue-raycluster-webhook",
    severity=ERROR,
    source=KUEUE + "raycluster/raycluster_webhook.go#L133-L167",
    title="A queued RayCluster uses no autoscaler outside elastic jobs and no worker group "
    "named head",
    why="Kueue reserves a queued RayCluster's quota once, for all its pods: its RayCluster "
    "webhook refuses enableInTreeAutoscaling unless the cluster is an elastic job (the "
    "ElasticJobsViaWorkloadSlices gate and kueue.x-k8s.io/elastic-job: 'true'), and refuses "
    "a worker group named 'head', the name of the head's pod set.",
    fix="Turn the in-tree autoscaler off (or make the RayCluster an elastic job) and rename "
    "the worker group.",
    kinds=("RayCluster",),
)
def kueue_raycluster_webhook(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not _managed(doc.metadata):
        return
    spec = mapping(doc.obj.get("spec"))
    elastic = str(mapping(doc.metadata.get("annotations")).get(ELASTIC_JOB)) == "true"
    if spec.get("enableInTreeAutoscaling") is True and not elastic:
        yield Violation(
            "a Kueue-managed RayCluster may autoscale only as an elastic job "
            f"({ELASTIC_JOB}: 'true' with the ElasticJobsViaWorkloadSlices gate): the "
            "webhook refuses it",
            ("spec", "enableInTreeAutoscaling"),
        )
    for index, group in enumerate(dicts(spec.get("workerGroupSpecs"))):
        if group.get("groupName") == HEAD_POD_SET:
            yield Violation(
                "worker group named 'head': the name is reserved for the head's pod set",
                ("spec", "workerGroupSpecs", index, "groupName"),
            )
