"""JobSet jobset.x-k8s.io/v1alpha2: the JobSet v0.12.0 webhook and the Jobs it will create.

Facts from kubernetes-sigs/jobset v0.12.0 `pkg/webhooks/jobset_webhook.go`
(Default, ValidateCreate, validateFailurePolicy, validateCoordinator) and
`pkg/util/placement/placement.go` (child Job names `<jobset>-<replicatedJob>-<index>`,
pod names `<job>-<podIndex>-<5 random characters>`). The mutating webhook runs
first: completionMode defaults to Indexed and restartPolicy to OnFailure.
The Job templates are validated as Jobs only when the controller creates them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.admission import names
from trainops.admission.embedded import later
from trainops.admission.field import WEBHOOK, Path, Problem, invalid, too_long
from trainops.admission.workloads import claim_names, job_spec

MAX_INT32 = 2**31 - 1
RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
JOB_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
FIX = "Change the JobSet as its webhook asks; it refuses the JobSet at apply."
JOB_NAME_TOO_LONG = (
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
)
POD_NAME_TOO_LONG = (
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
)


def _problem(path: Path, message: str) -> Problem:
    return Problem(WEBHOOK, path, message, FIX)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dns1035(value: str, too_long_message: str) -> list[str]:
    return [
        too_long_message if e == names.max_length(63) else e for e in names.dns1035_label(value)
    ]


def defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with what the JobSet mutating webhook (Default) fills in before validation
    that a schema requires: the names of failure policy rules ("failurePolicyRule<i>")."""
    rules = _dict(_dict(obj.get("spec")).get("failurePolicy")).get("rules")
    if not isinstance(rules, list) or all(_dict(r).get("name") for r in rules):
        return obj
    named = [
        {**rule, "name": f"failurePolicyRule{i}"}
        if isinstance(rule, dict) and not rule.get("name")
        else rule
        for i, rule in enumerate(rules)
    ]
    spec = obj["spec"]
    return {**obj, "spec": {**spec, "failurePolicy": {**spec["failurePolicy"], "rules": named}}}


def check(obj: dict[str, Any]) -> Iterator[Problem]:
    name = names.object_name(_dict(obj.get("metadata")))
    spec = _dict(obj.get("spec"))
    yield from check_spec(spec, name, ("spec",))
    claimed = volume_claims(spec)
    for index, rjob in enumerate(_replicated_jobs(spec)):
        template = _dict(_dict(rjob.get("template")).get("spec"))
        where: Path = ("spec", "replicatedJobs", index, "template", "spec")
        errors = job_spec(template, where, True, "OnFailure", "Indexed", claimed)
        yield from later(errors, "JobSet", "the JobSet controller", "Jobs")


def volume_claims(spec: dict[str, Any]) -> frozenset[str]:
    """Volumes the JobSet controller adds to every pod from spec.volumeClaimPolicies."""
    policies = spec.get("volumeClaimPolicies")
    found: frozenset[str] = frozenset()
    for policy in policies if isinstance(policies, list) else []:
        found |= claim_names(_dict(policy).get("templates"))
    return found


def _replicated_jobs(spec: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = spec.get("replicatedJobs")
    return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []


def check_spec(spec: dict[str, Any], name: str, at: Path) -> Iterator[Problem]:
    """ValidateCreate on a JobSet spec (`name`: the JobSet's name, for child names)."""
    rjobs = _replicated_jobs(spec)
    if rjobs and rjobs[0].get("dependsOn") is not None:
        yield _problem(
            (*at, "replicatedJobs", 0, "dependsOn"),
            "DependsOn can't be set for the first ReplicatedJob",
        )
    network = _dict(spec.get("network"))
    subdomain = network.get("subdomain")
    if isinstance(subdomain, str) and subdomain:
        where = (*at, "network", "subdomain")
        for error in names.dns1123_subdomain(subdomain):
            yield _problem(where, invalid(subdomain, error))
        too_long_msg = ".spec.network.subdomain is too long, must be less than 63 characters"
        for error in _dns1035(subdomain, too_long_msg):
            yield _problem(where, invalid(subdomain, error))
    manager = spec.get("managedBy")
    if isinstance(manager, str) and len(manager) > 63:
        yield _problem((*at, "managedBy"), too_long(63))
    seen: list[str] = []
    for index, rjob in enumerate(rjobs):
        where = (*at, "replicatedJobs", index)
        rname = str(rjob.get("name") or "")
        seen.append(rname)
        replicas = rjob.get("replicas", 1)
        replicas = replicas if isinstance(replicas, int) else 1
        template = _dict(_dict(rjob.get("template")).get("spec"))
        parallelism = template.get("parallelism", 1)
        if isinstance(parallelism, int) and parallelism * replicas > MAX_INT32:
            yield _problem(
                where,
                f"the product of replicas and parallelism must not exceed {MAX_INT32} for "
                f"replicatedJob '{rname}'",
            )
        group = rjob.get("groupName", "default")
        if isinstance(group, str):
            too_long_msg = (
                ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
            )
            for error in _dns1035(group, too_long_msg):
                yield _problem((*where, "groupName"), invalid(group, error))
        longest_job = f"{name}-{rname}-{replicas - 1}"
        for error in _dns1035(longest_job, JOB_NAME_TOO_LONG):
            yield _problem((*where, "name"), invalid(longest_job, error))
        completions = template.get("completions")
        if (template.get("completionMode") or "Indexed") == "Indexed" and isinstance(
            completions, int
        ):
            pod = f"{longest_job}-{completions - 1}-abcde"
            for error in _dns1035(pod, POD_NAME_TOO_LONG):
                yield _problem((*where, "name"), invalid(longest_job, error))
        for dependency in rjob.get("dependsOn") or []:
            target = _dict(dependency).get("name")
            if target not in seen[:-1]:
                yield _problem(
                    (*where, "dependsOn"),
                    f"replicatedJob: {rname} cannot depend on replicatedJob: {target}",
                )
    names_set = set(seen)
    for target in _dict(spec.get("successPolicy")).get("targetReplicatedJobs") or []:
        if target not in names_set:
            yield _problem(
                (*at, "successPolicy", "targetReplicatedJobs"),
                f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs",
            )
    yield from _failure_policy(_dict(spec.get("failurePolicy")), names_set, at)
    yield from _coordinator(spec.get("coordinator"), rjobs, at)


def _failure_policy(policy: dict[str, Any], rjob_names: set[str], at: Path) -> Iterator[Problem]:
    rules = policy.get("rules")
    by_name: dict[str, list[int]] = {}
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        rule = _dict(rule)
        where = (*at, "failurePolicy", "rules", index)
        rule_name = str(rule.get("name") or f"failurePolicyRule{index}")  # the webhook's default
        by_name.setdefault(rule_name, []).append(index)
        if len(rule_name) > 128:
            yield _problem(
                (*where, "name"),
                f"invalid failure policy rule name of length {len(rule_name)}, the rule name "
                "must be at least 1 characters long and at most 128 characters long",
            )
        if not RULE_NAME.fullmatch(rule_name):
            yield _problem(
                (*where, "name"),
                f"invalid failure policy rule name '{rule_name}', a failure policy rule name "
                "must start with an alphabetic character, optionally followed by a string of "
                "alphanumeric characters or '_,:', and must end with an alphanumeric character "
                "or '_'",
            )
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in rjob_names:
                yield _problem(
                    (*where, "targetReplicatedJobs"),
                    f"invalid replicatedJob name '{target}' in failure policy does not appear "
                    "in .spec.ReplicatedJobs",
                )
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in JOB_FAILURE_REASONS:
                yield _problem(
                    (*where, "onJobFailureReasons"),
                    f"invalid job failure reason '{reason}' in failure policy is not a "
                    "recognized job failure reason",
                )
    for rule_name, indexes in by_name.items():
        if len(indexes) > 1:
            yield _problem(
                (*at, "failurePolicy", "rules"),
                f"rule names are not unique, rules with indices {indexes} all have the same "
                f"name '{rule_name}'",
            )


def _coordinator(value: Any, rjobs: list[dict[str, Any]], at: Path) -> Iterator[Problem]:
    if not isinstance(value, dict):
        return
    where = (*at, "coordinator")
    target = value.get("replicatedJob")
    rjob = next((j for j in rjobs if j.get("name") == target), None)
    if rjob is None:
        yield _problem(where, f"coordinator replicatedJob {target} does not exist")
        return
    job_index, pod_index = value.get("jobIndex", 0), value.get("podIndex", 0)
    replicas = rjob.get("replicas", 1)
    if isinstance(job_index, int) and isinstance(replicas, int) and not 0 <= job_index < replicas:
        yield _problem(
            where, f"coordinator job index {job_index} is invalid for replicatedJob {target}"
        )
        return
    template = _dict(_dict(rjob.get("template")).get("spec"))
    completions = template.get("completions")
    if (template.get("completionMode") or "Indexed") != "Indexed" or completions is None:
        yield _problem(
            where,
            "job for coordinator pod must be indexed completion mode, and completions number "
            "must be set",
        )
    elif (
        isinstance(pod_index, int)
        and isinstance(completions, int)
        and not (0 <= pod_index < completions)
    ):
        yield _problem(
            where,
            f"coordinator pod index {pod_index} is invalid for replicatedJob {target} job "
            f"index {job_index}",
        )
