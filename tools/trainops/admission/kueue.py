"""Kueue v0.18 webhooks: ClusterQueue, ResourceFlavor, and the queue labels of jobs.

Facts from kubernetes-sigs/kueue v0.18 `pkg/webhooks/clusterqueue_webhook.go`
(validateResourceGroups, validateFlavorQuotas, validateLimit, validateLendingLimit,
totals), `pkg/webhooks/resourceflavor_webhook.go` (labels, taints, tolerations)
and `pkg/controller/jobframework/validation.go` (ValidateQueueName: the
queue-name label is a DNS-1123 subdomain; max-exec-time-seconds is a positive
integer). Checks the CRDs' CEL rules already make (preemption, flavor
fungibility) are not repeated: the API server stops at those before the webhook.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops import quantity
from trainops.admission import names
from trainops.admission.field import WEBHOOK, Path, Problem, duplicate, invalid
from trainops.admission.pods import tolerations
from trainops.admission.workloads import label_selector

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
FIX = "Change the object as Kueue's webhook asks; it refuses it at apply."


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _problem(path: Path, message: str) -> Problem:
    return Problem(WEBHOOK, path, message, FIX)


def cluster_queue(obj: dict[str, Any]) -> Iterator[Problem]:
    spec = _dict(obj.get("spec"))
    has_cohort = bool(spec.get("cohortName") or spec.get("cohort"))  # v1beta2 | v1beta1
    at: Path = ("spec", "resourceGroups")
    groups = [_dict(g) for g in _list(spec.get("resourceGroups"))]
    covered_seen: set[str] = set()
    flavors_seen: set[str] = set()
    for i, group in enumerate(groups):
        covered = [str(c) for c in _list(group.get("coveredResources"))]
        for j, name in enumerate(covered):
            where = (*at, i, "coveredResources", j)
            for error in names.qualified_name(name):
                yield _problem(where, invalid(name, error))
            if name in covered_seen:
                yield _problem(where, duplicate(name))
            covered_seen.add(name)
        for j, flavor in enumerate(_dict(f) for f in _list(group.get("flavors"))):
            where = (*at, i, "flavors", j)
            yield from _flavor_quotas(flavor, covered, has_cohort, where)
            fname = flavor.get("name")
            if isinstance(fname, str):
                if fname in flavors_seen:
                    yield _problem((*where, "name"), duplicate(fname))
                flavors_seen.add(fname)
    for label, count in (
        ("flavors", sum(len(_list(g.get("flavors"))) for g in groups)),
        ("covered resources", sum(len(_list(g.get("coveredResources"))) for g in groups)),
    ):
        if count > 256:
            yield _problem(
                at,
                invalid(
                    count,
                    f"total number of {label} across all resourceGroups must be ≤ 256, got {count}",
                ),
            )
    for problem in label_selector(spec.get("namespaceSelector"), ("spec", "namespaceSelector")):
        yield _problem(*problem)


def _flavor_quotas(
    flavor: dict[str, Any], covered: list[str], has_cohort: bool, at: Path
) -> Iterator[Problem]:
    for i, quota in enumerate(_dict(q) for q in _list(flavor.get("resources"))):
        if i >= len(covered):
            break
        where = (*at, "resources", i)
        if quota.get("name") != covered[i]:
            yield _problem(
                (*where, "name"),
                invalid(quota.get("name"), "must match the name in coveredResources"),
            )
        nominal = quantity.parse(quota.get("nominalQuota"))
        if nominal is not None and nominal < 0:
            yield _problem(
                (*where, "nominalQuota"),
                invalid(quota["nominalQuota"], "must be greater than or equal to 0"),
            )
        for key in ("borrowingLimit", "lendingLimit"):
            if key not in quota or quota[key] is None:
                continue
            amount = quantity.parse(quota[key])
            if amount is not None and amount < 0:
                yield _problem(
                    (*where, key), invalid(quota[key], "must be greater than or equal to 0")
                )
            if not has_cohort:
                yield _problem(
                    (*where, key), invalid(quota[key], "must be nil when cohort is empty")
                )
            if (
                key == "lendingLimit"
                and amount is not None
                and nominal is not None
                and amount > nominal
            ):
                yield _problem(
                    (*where, key),
                    invalid(quota[key], "must be less than or equal to the nominalQuota"),
                )


def resource_flavor(obj: dict[str, Any]) -> Iterator[Problem]:
    spec = _dict(obj.get("spec"))
    for problem in names.labels(spec.get("nodeLabels"), ("spec", "nodeLabels"), WEBHOOK):
        yield Problem(WEBHOOK, problem.path, problem.message, FIX)
    seen: set[tuple[Any, Any]] = set()
    for i, taint in enumerate(_dict(t) for t in _list(spec.get("nodeTaints"))):
        where = ("spec", "nodeTaints", i)
        key, value = taint.get("key"), taint.get("value")
        if isinstance(key, str):
            for error in names.qualified_name(key):
                yield _problem((*where, "key"), invalid(key, error))
        if isinstance(value, str):
            errors = names.label_value(value)
            if errors:
                yield _problem((*where, "value"), invalid(value, ";".join(errors)))
        pair = (taint.get("effect"), key)
        if pair in seen:
            yield _problem(where, duplicate(taint, "taints must be unique by key and effect pair"))
        seen.add(pair)
    for problem in tolerations(spec.get("tolerations"), ("spec", "tolerations")):
        yield _problem(*problem)


def queue_labels(obj: dict[str, Any]) -> Iterator[Problem]:
    """The labels Kueue's job webhooks check on every job kind it manages."""
    labels = _dict(_dict(obj.get("metadata")).get("labels"))
    queue = labels.get(QUEUE_LABEL)
    if isinstance(queue, str):
        errors = names.dns1123_subdomain(queue)
        if errors:
            yield _problem(("metadata", "labels", QUEUE_LABEL), invalid(queue, ",".join(errors)))
    limit = labels.get(MAX_EXEC_LABEL)
    if isinstance(limit, str):
        where = ("metadata", "labels", MAX_EXEC_LABEL)
        try:
            seconds = int(limit)
        except ValueError:
            yield _problem(
                where, invalid(limit, f'strconv.Atoi: parsing "{limit}": invalid syntax')
            )
        else:
            if seconds <= 0:
                yield _problem(where, invalid(seconds, "should be greater than 0"))
