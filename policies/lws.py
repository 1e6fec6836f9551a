"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) admission, and JobSet dependsOn ordering.

Facts from kubernetes-sigs/lws v0.10.0: `pkg/webhooks/leaderworkerset_webhook.go` (Default
runs first: rollingUpdateConfiguration defaults to maxUnavailable 1, maxSurge 0; the CRD
defaults replicas and size to 1; generalValidate refuses the object) and the CRD enums in
`api/leaderworkerset/v1/leaderworkerset_types.go`. The LWS CRD is not in the schema bundle,
so the enum values are checked here.

JobSet v0.12.0 `pkg/controllers/depends_on.go`: a replicated job with `dependsOn` is created
only once the named one reached its status (Complete: every child Job succeeded; Ready:
ready + failed + succeeded Jobs equal its replicas), and the success policy
(`success_policy.go`) is executed before any Job is created in a reconcile.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, env_of, is_int, mapping

from . import common

LWS = "https://github.com/kubernetes-sigs/lws/blob/v0.10.0/"
WEBHOOK = LWS + "pkg/webhooks/leaderworkerset_webhook.go"
TYPES = LWS + "api/leaderworkerset/v1/leaderworkerset_types.go"
JOBSET = "https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/"
DEPENDS_ON = JOBSET + "pkg/controllers/depends_on.go"
CONTROLLER = JOBSET + "pkg/controllers/jobset_controller.go"
SUCCESS = JOBSET + "pkg/controllers/success_policy.go"

SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
MAX_INT32 = 2**31 - 1
MAX_REPLICAS = 1_000_000
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_PERCENT = re.compile(r"^[0-9]+%$")
# field path under spec -> allowed values (CRD enums)
ENUMS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("startupPolicy",), ("LeaderCreated", "LeaderReady")),
    (
        ("leaderWorkerTemplate", "restartPolicy"),
        ("Default", "RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None"),
    ),
    (("rolloutStrategy", "type"), ("RollingUpdate",)),
    (
        ("leaderWorkerTemplate", "subGroupPolicy", "subGroupPolicyType"),
        ("LeaderWorker", "LeaderExcluded"),
    ),
    (("networkConfig", "subdomainPolicy"), ("Shared", "UniquePerReplica")),
)


def _lws(doc: Document) -> bool:
    return doc.api_version.startswith("leaderworkerset.x-k8s.io/")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "$(" in value or "${" in value)


def _count(value: Any, default: int | None) -> int | None:
    """An int32 field as the webhook sees it: the CRD default when absent, None when unknown."""
    if value is None:
        return default
    return value if is_int(value) else None


@resource_rule(
    id="lws-webhook",
    severity=ERROR,
    source=(WEBHOOK + "#L123-L190", WEBHOOK + "#L196-L260"),
    title="LeaderWorkerSets pass the LWS webhook",
    why="The LWS validating webhook (failurePolicy Fail) refuses a LeaderWorkerSet whose name "
    "is not a DNS-1035 label (it names the headless Service), replicas outside 0..1000000, "
    "size below 1, replicas x size above 2^31-1, a rollingUpdateConfiguration whose "
    "maxUnavailable or maxSurge is negative, not an integer or percentage, or above 100%, a "
    "negative partition, maxUnavailable and maxSurge that both come to 0 groups, a "
    "subGroupSize below 1, above size, or dividing neither size nor size-1 (only size-1 with "
    "subGroupPolicyType LeaderExcluded), and the subgroup-exclusive-topology annotation "
    "without a subGroupPolicy. Nothing is created.",
    fix="Keep size >= 1, pick a subGroupSize that divides size (or size-1: the leader is the "
    "extra pod; LeaderExcluded needs size-1), give maxUnavailable or maxSurge a non-zero "
    "value, and set the subgroup annotation only with subGroupPolicy.",
    kinds=("LeaderWorkerSet",),
    applies=_lws,
)
def lws_webhook(doc: Document, ctx: Context) -> Iterator[Violation]:
    yield from _name(doc)
    spec = mapping(doc.obj.get("spec"))
    template = mapping(spec.get("leaderWorkerTemplate"))
    replicas = _count(spec.get("replicas"), 1)
    size = _count(template.get("size"), 1)
    if replicas is not None and not 0 <= replicas <= MAX_REPLICAS:
        yield Violation(
            f"replicas {replicas} is outside 0..{MAX_REPLICAS}: the LWS webhook refuses it",
            ("spec", "replicas"),
        )
    if size is not None and size < 1:
        yield Violation(
            f"leaderWorkerTemplate.size {size} is below 1: the LWS webhook refuses it",
            ("spec", "leaderWorkerTemplate", "size"),
        )
    if replicas is not None and size is not None and replicas * size > MAX_INT32:
        yield Violation(
            f"replicas x size = {replicas * size} exceeds {MAX_INT32}: the LWS webhook refuses it",
            ("spec", "replicas"),
        )
    yield from _rolling_update(spec, replicas)
    yield from _subgroups(doc, template, size)


def _name(doc: Document) -> Iterator[Violation]:
    name = doc.metadata.get("name")
    if not isinstance(name, str) or not name or _templated(name):
        return
    if len(name) > 63 or not _DNS1035.match(name):
        yield Violation(
            f"name {name!r} is not a DNS-1035 label (lowercase letters, digits and '-', starting "
            "with a letter, at most 63): the LWS webhook refuses it",
            ("metadata", "name"),
        )


def _scaled(value: Any, replicas: int, round_up: bool) -> int | None:
    """intstr.GetScaledValueFromIntOrPercent; None when the value is invalid or unknown."""
    if is_int(value):
        return value
    if isinstance(value, str) and _PERCENT.match(value):
        scaled = int(value[:-1]) * replicas / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return None


def _rolling_update(spec: dict[str, Any], replicas: int | None) -> Iterator[Violation]:
    rollout = mapping(spec.get("rolloutStrategy"))
    config = rollout.get("rollingUpdateConfiguration")
    if not isinstance(config, dict):
        return  # absent: the webhook's Default sets maxUnavailable 1, maxSurge 0
    base = ("spec", "rolloutStrategy", "rollingUpdateConfiguration")
    values = {
        "maxUnavailable": config.get("maxUnavailable", 1),
        "maxSurge": config.get("maxSurge", 0),
    }
    unknown = False
    for key, value in values.items():
        if _templated(value) or not (is_int(value) or isinstance(value, str)):
            unknown = True
            continue
        if is_int(value) and value < 0:
            yield Violation(f"{key} {value} is negative: the LWS webhook refuses it", (*base, key))
        elif isinstance(value, str) and not _PERCENT.match(value):
            yield Violation(
                f"{key} {value!r} is neither an integer nor a percentage such as '10%': the LWS "
                "webhook refuses it",
                (*base, key),
            )
        elif isinstance(value, str) and int(value[:-1]) > 100:
            yield Violation(
                f"{key} {value} is above 100%: the LWS webhook refuses it", (*base, key)
            )
    partition = config.get("partition")
    if is_int(partition) and partition < 0:
        yield Violation(
            f"partition {partition} is negative: the LWS webhook refuses it", (*base, "partition")
        )
    if unknown or not replicas:
        return
    unavailable = _scaled(values["maxUnavailable"], replicas, False)
    surge = _scaled(values["maxSurge"], replicas, True)
    if unavailable == 0 and surge == 0:
        yield Violation(
            f"maxUnavailable {values['maxUnavailable']} and maxSurge {values['maxSurge']} both "
            f"come to 0 of {replicas} groups: the LWS webhook refuses it (no update could proceed)",
            (*base, "maxUnavailable"),
        )


def _subgroups(doc: Document, template: dict[str, Any], size: int | None) -> Iterator[Violation]:
    policy = template.get("subGroupPolicy")
    if not isinstance(policy, dict):
        if SUBGROUP_EXCLUSIVE in mapping(doc.metadata.get("annotations")):
            yield Violation(
                f"{SUBGROUP_EXCLUSIVE} is set without leaderWorkerTemplate.subGroupPolicy: the "
                "LWS webhook refuses it",
                ("metadata", "annotations", SUBGROUP_EXCLUSIVE),
            )
        return
    at = ("spec", "leaderWorkerTemplate", "subGroupPolicy", "subGroupSize")
    sub = policy.get("subGroupSize")
    if not is_int(sub) or size is None:
        return
    if sub < 1:
        yield Violation(f"subGroupSize {sub} is below 1: the LWS webhook refuses it", at)
        return
    if size % sub and (size - 1) % sub:
        yield Violation(
            f"subGroupSize {sub} divides neither size {size} nor size-1 {size - 1}: the LWS "
            "webhook refuses it",
            at,
        )
    if size < sub:
        yield Violation(
            f"subGroupSize {sub} is larger than size {size}: the LWS webhook refuses it", at
        )
    if policy.get("subGroupPolicyType") == "LeaderExcluded" and (size - 1) % sub:
        yield Violation(
            f"subGroupPolicyType LeaderExcluded needs size-1 ({size - 1}) divisible by "
            f"subGroupSize {sub}: the LWS webhook refuses it",
            at,
        )


@resource_rule(
    id="lws-enum",
    severity=ERROR,
    source=(
        TYPES + "#L134-L138",
        TYPES + "#L167-L173",
        TYPES + "#L196-L200",
        TYPES + "#L210-L216",
        TYPES + "#L247-L250",
    ),
    title="LeaderWorkerSet enum fields hold values the CRD allows",
    why="The LeaderWorkerSet CRD enumerates startupPolicy (LeaderCreated, LeaderReady), "
    "leaderWorkerTemplate.restartPolicy (RecreateGroupOnPodRestart, RecreateGroupAfterStart, "
    "None, deprecated Default), rolloutStrategy.type (RollingUpdate), "
    "subGroupPolicy.subGroupPolicyType (LeaderWorker, LeaderExcluded) and "
    "networkConfig.subdomainPolicy (Shared, UniquePerReplica); the API server refuses any "
    "other value (the words are case-sensitive).",
    fix="Use one of the values the CRD lists, spelled exactly.",
    kinds=("LeaderWorkerSet",),
    applies=_lws,
)
def lws_enum(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    for path, allowed in ENUMS:
        parent = spec
        for key in path[:-1]:
            parent = mapping(parent.get(key))
        value = parent.get(path[-1])
        if value is None or _templated(value) or value in allowed:
            continue
        yield Violation(
            f"{'.'.join(path)} {value!r} is not one of {', '.join(allowed)}: the API server "
            "refuses the LeaderWorkerSet",
            ("spec", *path),
        )


@resource_rule(
    id="lws-restart-policy-default",
    severity=WARNING,
    source=WEBHOOK + "#L52-L59",
    title="restartPolicy: Default is not the default",
    why="The LWS webhook turns the deprecated restartPolicy value Default into None: a failed "
    "pod is restarted alone and its group is not recreated, while leaving restartPolicy out "
    "gives RecreateGroupOnPodRestart. A distributed group whose one pod restarted usually "
    "waits for peers that never rejoin the old rendezvous.",
    fix="Leave restartPolicy out (or write RecreateGroupOnPodRestart) to recreate the group on "
    "a pod restart; write None if restarting a pod alone is meant.",
    kinds=("LeaderWorkerSet",),
    applies=_lws,
)
def lws_restart_policy_default(doc: Document, ctx: Context) -> Iterator[Violation]:
    template = mapping(mapping(doc.obj.get("spec")).get("leaderWorkerTemplate"))
    if template.get("restartPolicy") == "Default":
        yield Violation(
            "restartPolicy Default is deprecated and means None: the LWS webhook sets None, so "
            "a failed pod restarts alone instead of recreating its group",
            ("spec", "leaderWorkerTemplate", "restartPolicy"),
        )


# ----- JobSet dependsOn ---------------------------------------------------------------


def _jobset_spec(doc: Document) -> tuple[dict[str, Any], tuple[str, ...]]:
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "JobSet":
        return spec, ("spec",)
    return mapping(mapping(spec.get("template")).get("spec")), ("spec", "template", "spec")


def _complete_dependencies(rjob: dict[str, Any]) -> list[str]:
    return [
        d["name"]
        for d in dicts(rjob.get("dependsOn"))
        if d.get("status") == "Complete" and isinstance(d.get("name"), str)
    ]


def _depends(doc: Document) -> bool:
    spec, _ = _jobset_spec(doc)
    return any(r.get("dependsOn") for r in dicts(spec.get("replicatedJobs")))


@resource_rule(
    id="jobset-depends-on-success-policy",
    severity=ERROR,
    source=(CONTROLLER + "#L198-L203", SUCCESS + "#L24-L64", DEPENDS_ON + "#L17-L20"),
    title="The success policy does not end the JobSet before a dependent replicated job starts",
    why="A replicated job with dependsOn status Complete is created only after every Job of "
    "the one it names succeeded, and the JobSet controller executes the success policy "
    "before creating Jobs. When the success policy is met by the dependency alone "
    "(operator Any over all replicated jobs or over the dependency, or operator All whose "
    "targetReplicatedJobs are only replicated jobs it waits on), the JobSet is marked "
    "Completed and the dependent replicated job never runs.",
    fix="Add the dependent replicated job to successPolicy.targetReplicatedJobs (operator "
    "All), or leave successPolicy out.",
    kinds=("JobSet", *common.RUNTIME_KINDS),
    applies=_depends,
)
def jobset_depends_on_success_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _jobset_spec(doc)
    policy = spec.get("successPolicy")
    if not isinstance(policy, dict):
        return
    operator = policy.get("operator", "All")
    targets = policy.get("targetReplicatedJobs") or []
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        return
    if any(_templated(t) for t in targets) or operator not in ("All", "Any"):
        return
    for index, rjob in enumerate(dicts(spec.get("replicatedJobs"))):
        name = rjob.get("name")
        waits = _complete_dependencies(rjob)
        if not waits or not isinstance(name, str) or name in targets:
            continue
        if operator == "Any":
            met = not targets or any(w in targets for w in waits)
        else:
            met = bool(targets) and all(t in waits for t in targets)
        if met:
            yield Violation(
                f"replicatedJob {name!r} waits for {', '.join(waits)} to Complete, but the "
                f"successPolicy (operator {operator}) is met by then: the JobSet completes and "
                f"{name!r} is never created",
                (*base, "replicatedJobs", index, "dependsOn"),
            )


def _words(container: dict[str, Any]) -> Iterator[str]:
    for key in ("command", "args"):
        for word in container.get(key) or []:
            if isinstance(word, str):
                yield word
    for value in env_of(container).values():
        if value:
            yield value


@resource_rule(
    id="jobset-depends-on-complete-service",
    severity=WARNING,
    source=DEPENDS_ON + "#L17-L25",
    title="A replicated job does not wait for the completion of a service it connects to",
    why="dependsOn status Complete creates the dependent replicated job only when every Job "
    "of the named one has succeeded (status Ready: when they are ready, failed or "
    "succeeded). A dependent whose containers address the named job's pods "
    "(<jobset>-<job>-<index>-<pod>) needs them running: if they are a long-running service "
    "they never complete and the dependent is never created; if they do finish, their "
    "pods are gone when the dependent connects.",
    fix="Use dependsOn status Ready for a replicated job that must be running when the "
    "dependent starts.",
    kinds=("JobSet",),
    applies=_depends,
)
def jobset_depends_on_complete_service(doc: Document, ctx: Context) -> Iterator[Violation]:
    jobset = doc.metadata.get("name")
    if not isinstance(jobset, str) or not jobset or _templated(jobset):
        return
    spec = mapping(doc.obj.get("spec"))
    for index, rjob in enumerate(dicts(spec.get("replicatedJobs"))):
        waits = _complete_dependencies(rjob)
        if not waits:
            continue
        pod = mapping(
            mapping(mapping(mapping(rjob.get("template")).get("spec")).get("template")).get("spec")
        )
        containers = dicts(pod.get("containers")) + dicts(pod.get("initContainers"))
        hosts = {w: re.compile(rf"\b{re.escape(f'{jobset}-{w}-')}\d+-\d+\b") for w in waits}
        for dependency, pattern in hosts.items():
            if any(pattern.search(word) for c in containers for word in _words(c)):
                yield Violation(
                    f"replicatedJob {rjob.get('name')!r} connects to pods of {dependency!r} but "
                    f"waits for it to Complete: it starts only after those pods have exited "
                    "(never, for a service)",
                    ("spec", "replicatedJobs", index, "dependsOn"),
                )
