"""scheduler-plugins' ElasticQuota, as its CapacityScheduling plugin enforces it
(scheduler-plugins v0.34.7 `pkg/capacityscheduling/capacity_scheduling.go` PreFilter: a pod
whose request, added to what its namespace's quota already uses, exceeds the quota's max is
Unschedulable). A pod asking alone for more than max never schedules. Only pods of a
second scheduler (schedulerName other than default-scheduler) meet the plugin.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops import quantity
from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, pod_rule
from trainops.policy.pods import PodTemplate, mapping

from . import common
from .placement import kueue_requests

SOURCE = (
    "https://github.com/kubernetes-sigs/scheduler-plugins/blob/v0.34.7/pkg/capacityscheduling/"
    "capacity_scheduling.go#L272-L275"
)


@pod_rule(
    id="elastic-quota-max",
    severity=ERROR,
    source=SOURCE,
    title="A pod of the capacity scheduler asks for no more than its namespace's ElasticQuota max",
    why="scheduler-plugins' CapacityScheduling refuses a pod whenever its namespace's "
    "ElasticQuota usage plus the pod's request would exceed the quota's max: a pod that asks "
    "alone for more than max (one 8-GPU worker under max 4) is Unschedulable on every node, "
    "free capacity or not, and its job never starts.",
    fix="Raise the ElasticQuota's max to at least one pod's request (for a gang, all of its "
    "pods'), or shrink the pods.",
    applies=common.gpu_pod,
    render_needs=("ElasticQuota",),
)
def elastic_quota_max(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    scheduler = pod.spec.get("schedulerName")
    if not scheduler or scheduler == "default-scheduler":
        return
    quotas = ctx.memo("elastic-quotas", lambda: _by_namespace(ctx.of_kind("ElasticQuota")))
    for found in quotas.get(pod.doc.namespace, ()):
        limits = mapping(mapping(found.obj.get("spec")).get("max"))
        for resource, wanted in sorted(kueue_requests(pod).items()):
            most = quantity.parse(limits.get(resource))
            if most is not None and wanted > most:
                yield Violation(
                    f"each {pod.role or 'pod'} requests {float(wanted):g} {resource}, more than "
                    f"ElasticQuota {found.name}'s max {limits[resource]}: it never schedules",
                    pod.path,
                )


def _by_namespace(quotas: list[Document]) -> dict[str | None, list[Document]]:
    out: dict[str | None, list[Document]] = {}
    for quota in quotas:
        out.setdefault(quota.namespace, []).append(quota)
    return out
