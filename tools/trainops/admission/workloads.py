"""Built-in kinds: what the API server checks beyond their schemas, after defaulting.

Facts from kubernetes `pkg/apis/apps/validation` (Deployment, ReplicaSet,
StatefulSet, DaemonSet: selector against template labels, restartPolicy
Always, strategies), `pkg/apis/batch/validation` (Job: restartPolicy,
selector, completion modes, backoffLimitPerIndex, podFailurePolicy,
successPolicy; CronJob: name length, schedule), `pkg/apis/policy/validation`
(PodDisruptionBudget), `pkg/apis/core/validation` (Pod, ConfigMap and Secret
keys and sizes, Service ports) and apimachinery's LabelSelector validation.
Every check here is what `kubectl apply` (and so Argo CD's sync) gets back as
"... is invalid".
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from typing import Any

from trainops.admission import names
from trainops.admission.cron import schedule_errors
from trainops.admission.field import (
    Path,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    too_long,
)
from trainops.admission.pods import Error, pod_spec

_PERCENT = re.compile(r"[0-9]+%")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_CONFIG_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
_MAX_CONFIG_BYTES = 1024 * 1024
_NON_NEGATIVE_MSG = "must be greater than or equal to 0"
_INDEXED_LIMIT = 100_000
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def non_negative(spec: dict[str, Any], keys: tuple[str, ...], at: Path) -> Iterator[Error]:
    for key in keys:
        value = _int(spec.get(key))
        if value is not None and value < 0:
            yield (*at, key), invalid(value, _NON_NEGATIVE_MSG)


# -- label selectors --------------------------------------------------------------------------


def label_selector(selector: Any, at: Path) -> Iterator[Error]:
    """ValidateLabelSelector: valid keys and values, operators with the values they need."""
    if not isinstance(selector, dict):
        return
    for problem in names.labels(selector.get("matchLabels"), (*at, "matchLabels")):
        yield problem.path, problem.message
    expressions = selector.get("matchExpressions")
    for index, expression in enumerate(expressions if isinstance(expressions, list) else []):
        if not isinstance(expression, dict):
            continue
        where = (*at, "matchExpressions", index)
        operator = expression.get("operator")
        values = expression.get("values")
        if operator in ("In", "NotIn"):
            if not values:
                yield (
                    (*where, "values"),
                    required("must be specified when `operator` is 'In' or 'NotIn'"),
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                yield (
                    (*where, "values"),
                    forbidden("may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
                )
        else:
            yield (
                (*where, "operator"),
                not_supported(operator or "", ("In", "NotIn", "Exists", "DoesNotExist")),
            )
        key = expression.get("key")
        if isinstance(key, str):
            for error in names.qualified_name(key):
                yield (*where, "key"), invalid(key, error)


def selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for key, value in _dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, dict):
            continue
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if (
            (operator == "In" and (not present or labels[key] not in values))
            or (operator == "NotIn" and present and labels[key] in values)
            or (operator == "Exists" and not present)
            or (operator == "DoesNotExist" and present)
        ):
            return False
    return True


def _selector_is_empty(selector: dict[str, Any]) -> bool:
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


# -- pod templates ----------------------------------------------------------------------------


def pod_template(template: Any, at: Path, claimed: frozenset[str] = frozenset()) -> Iterator[Error]:
    """ValidatePodTemplateSpec: the template's labels, annotations and pod spec."""
    if not isinstance(template, dict):
        return
    meta = _dict(template.get("metadata"))
    for problem in names.labels(meta.get("labels"), (*at, "metadata", "labels")):
        yield problem.path, problem.message
    for problem in names.annotations(meta.get("annotations"), (*at, "metadata", "annotations")):
        yield problem.path, problem.message
    yield from pod_spec(template.get("spec"), (*at, "spec"), claimed)


def _restart_policy(template: Any, default: str = "Always") -> str:
    spec = _dict(_dict(template).get("spec"))
    value = spec.get("restartPolicy")
    return value if isinstance(value, str) and value else default


def _template_labels(template: Any) -> dict[str, Any]:
    return _dict(_dict(_dict(template).get("metadata")).get("labels"))


def claim_names(templates: Any) -> frozenset[str]:
    """Names of PersistentVolumeClaim templates, which become volumes of the pods."""
    if not isinstance(templates, list):
        return frozenset()
    return frozenset(
        str(_dict(_dict(t).get("metadata")).get("name")) for t in templates if isinstance(t, dict)
    )


def replicated_workload(spec: dict[str, Any], at: Path, kind: str) -> Iterator[Error]:
    """The part apps/v1 Deployment, ReplicaSet, StatefulSet and DaemonSet share."""
    selector = spec.get("selector")
    template = spec.get("template")
    if not isinstance(selector, dict):
        yield (*at, "selector"), required()
    else:
        yield from label_selector(selector, (*at, "selector"))
        if _selector_is_empty(selector):
            yield (
                (*at, "selector"),
                invalid(selector, f"empty selector is invalid for {kind.lower()}"),
            )
        elif isinstance(template, dict) and not selector_matches(
            selector, _template_labels(template)
        ):
            yield (
                (*at, "template", "metadata", "labels"),
                invalid(_template_labels(template), "`selector` does not match template `labels`"),
            )
    if isinstance(template, dict):
        claimed = claim_names(spec.get("volumeClaimTemplates"))
        yield from pod_template(template, (*at, "template"), claimed)
        policy = _restart_policy(template)
        if policy != "Always":
            yield (
                (*at, "template", "spec", "restartPolicy"),
                not_supported(policy, ("Always",)),
            )
        if _dict(template.get("spec")).get("activeDeadlineSeconds") is not None:
            yield (
                (*at, "template", "spec", "activeDeadlineSeconds"),
                forbidden(f"activeDeadlineSeconds in {kind} is not Supported"),
            )
    yield from non_negative(spec, ("replicas", "minReadySeconds", "revisionHistoryLimit"), at)


def _int_or_percent(value: Any, at: Path) -> Iterator[Error]:
    if isinstance(value, str):
        if not _PERCENT.fullmatch(value):
            yield (
                at,
                invalid(
                    value,
                    "a valid percent string must be a numeric string followed by an ending '%' "
                    "(e.g. '1%', or '93%')",
                ),
            )
        elif int(value[:-1]) > 100:
            yield at, invalid(value, "must not be greater than 100%")
    elif _int(value) is not None and value < 0:
        yield at, invalid(value, _NON_NEGATIVE_MSG)


def _is_zero(value: Any) -> bool:
    return value == 0 or value == "0%"


def deployment(obj: dict[str, Any]) -> Iterator[Error]:
    spec = _dict(obj.get("spec"))
    at: Path = ("spec",)
    yield from replicated_workload(spec, at, "Deployment")
    strategy = _dict(spec.get("strategy"))
    kind = strategy.get("type") or "RollingUpdate"
    rolling = strategy.get("rollingUpdate")
    if kind == "Recreate" and rolling is not None:
        yield (
            (*at, "strategy", "rollingUpdate"),
            forbidden("may not be specified when strategy `type` is 'Recreate'"),
        )
    elif kind == "RollingUpdate":
        rolling = _dict(rolling)
        surge = rolling.get("maxSurge", "25%")
        unavailable = rolling.get("maxUnavailable", "25%")
        where = (*at, "strategy", "rollingUpdate")
        yield from _int_or_percent(surge, (*where, "maxSurge"))
        yield from _int_or_percent(unavailable, (*where, "maxUnavailable"))
        if _is_zero(surge) and _is_zero(unavailable):
            yield (
                (*where, "maxUnavailable"),
                invalid(unavailable, "may not be 0 when `maxSurge` is 0"),
            )
    elif kind != "Recreate":
        yield (*at, "strategy", "type"), not_supported(kind, ("Recreate", "RollingUpdate"))
    deadline = _int(spec.get("progressDeadlineSeconds"))
    ready = _int(spec.get("minReadySeconds")) or 0
    if deadline is not None and deadline <= ready:
        yield (
            (*at, "progressDeadlineSeconds"),
            invalid(deadline, "must be greater than minReadySeconds"),
        )


def replica_set(obj: dict[str, Any]) -> Iterator[Error]:
    yield from replicated_workload(_dict(obj.get("spec")), ("spec",), "ReplicaSet")


def daemon_set(obj: dict[str, Any]) -> Iterator[Error]:
    spec = _dict(obj.get("spec"))
    yield from replicated_workload(spec, ("spec",), "DaemonSet")
    strategy = _dict(spec.get("updateStrategy"))
    rolling = _dict(strategy.get("rollingUpdate"))
    where = ("spec", "updateStrategy", "rollingUpdate")
    if (strategy.get("type") or "RollingUpdate") == "RollingUpdate":
        surge, unavailable = rolling.get("maxSurge", 0), rolling.get("maxUnavailable", 1)
        yield from _int_or_percent(surge, (*where, "maxSurge"))
        yield from _int_or_percent(unavailable, (*where, "maxUnavailable"))
        if _is_zero(surge) and _is_zero(unavailable):
            yield (
                (*where, "maxUnavailable"),
                invalid(unavailable, "may not be 0 when `maxSurge` is 0"),
            )


def stateful_set(obj: dict[str, Any]) -> Iterator[Error]:
    spec = _dict(obj.get("spec"))
    at: Path = ("spec",)
    yield from replicated_workload(spec, at, "StatefulSet")
    policy = spec.get("podManagementPolicy") or "OrderedReady"
    if policy not in ("OrderedReady", "Parallel"):
        yield (*at, "podManagementPolicy"), invalid(policy, "must be 'OrderedReady' or 'Parallel'")
    strategy = _dict(spec.get("updateStrategy"))
    kind = strategy.get("type") or "RollingUpdate"
    if kind == "OnDelete" and strategy.get("rollingUpdate") is not None:
        yield (
            (*at, "updateStrategy", "rollingUpdate"),
            invalid(strategy["rollingUpdate"], "only allowed for updateStrategy 'RollingUpdate'"),
        )
    elif kind not in ("OnDelete", "RollingUpdate"):
        yield (*at, "updateStrategy"), invalid(kind, "must be 'RollingUpdate' or 'OnDelete'")
    claims = spec.get("volumeClaimTemplates")
    for index, claim in enumerate(claims if isinstance(claims, list) else []):
        name = _dict(_dict(claim).get("metadata")).get("name")
        if isinstance(name, str):
            for error in names.dns1123_label(name):
                yield (
                    ("spec", "volumeClaimTemplates", index, "metadata", "name"),
                    invalid(name, error),
                )


# -- batch ------------------------------------------------------------------------------------


def job_spec(
    spec: dict[str, Any],
    at: Path,
    labels_generated: bool,
    restart_default: str = "Always",
    mode_default: str = "NonIndexed",
    claimed: frozenset[str] = frozenset(),
) -> Iterator[Error]:
    """validateJobSpec after defaulting. `labels_generated`: the API server generates the
    selector unless manualSelector is set; the defaults are those of whoever creates the
    Job (the pod default Always; JobSet's webhook makes it OnFailure and Indexed)."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec = {**spec, "completions": 1, "parallelism": 1}  # SetDefaults_Job
    if not spec.get("completionMode"):
        spec = {**spec, "completionMode": mode_default}
    yield from non_negative(
        spec,
        ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit"),
        at,
    )
    deadline = _int(spec.get("activeDeadlineSeconds"))
    if deadline == 0:
        yield (*at, "activeDeadlineSeconds"), invalid(0, "must be greater than 0")
    template = spec.get("template")
    selector = spec.get("selector")
    manual = spec.get("manualSelector") is True
    if isinstance(selector, dict):
        yield from label_selector(selector, (*at, "selector"))
        if not manual and labels_generated:
            yield (
                (*at, "selector"),
                invalid(selector, "`selector` not auto-generated"),
            )
        elif isinstance(template, dict) and not selector_matches(
            selector, _template_labels(template)
        ):
            yield (
                (*at, "template", "metadata", "labels"),
                invalid(_template_labels(template), "`selector` does not match template `labels`"),
            )
    elif manual:
        yield (*at, "selector"), required()
    if isinstance(template, dict):
        yield from pod_template(template, (*at, "template"), claimed)
        policy = _restart_policy(template, restart_default)
        if policy not in ("OnFailure", "Never"):
            yield (
                (*at, "template", "spec", "restartPolicy"),
                not_supported(policy, ("OnFailure", "Never")),
            )
        if spec.get("podFailurePolicy") is not None and policy != "Never":
            yield (
                (*at, "template", "spec", "restartPolicy"),
                invalid(policy, 'only "Never" is supported when podFailurePolicy is specified'),
            )
    elif template is None:
        yield (*at, "template"), required()
    yield from _completion_mode(spec, at)
    yield from _pod_failure_policy(spec, at)


def _completion_mode(spec: dict[str, Any], at: Path) -> Iterator[Error]:
    mode = spec.get("completionMode") or "NonIndexed"
    indexed = mode == "Indexed"
    completions = _int(spec.get("completions"))
    parallelism = _int(spec.get("parallelism"))
    per_index = _int(spec.get("backoffLimitPerIndex"))
    max_failed = _int(spec.get("maxFailedIndexes"))
    if mode not in ("Indexed", "NonIndexed"):
        yield (*at, "completionMode"), not_supported(mode, ("NonIndexed", "Indexed"))
    if indexed:
        if completions is None:
            yield (*at, "completions"), required("when completion mode is Indexed")
        elif completions > _INDEXED_LIMIT:
            yield (
                (*at, "completions"),
                invalid(
                    completions,
                    "must be less than or equal to 100000 when completion mode is Indexed",
                ),
            )
        if parallelism is not None and parallelism > _INDEXED_LIMIT:
            yield (
                (*at, "parallelism"),
                invalid(
                    parallelism,
                    "must be less than or equal to 100000 when completion mode is Indexed",
                ),
            )
    if per_index is not None:
        if per_index < 0:
            yield (*at, "backoffLimitPerIndex"), invalid(per_index, _NON_NEGATIVE_MSG)
        if not indexed:
            yield (
                (*at, "backoffLimitPerIndex"),
                invalid(per_index, "requires indexed completion mode"),
            )
    if max_failed is not None:
        if per_index is None:
            yield (*at, "maxFailedIndexes"), invalid(max_failed, "requires backoffLimitPerIndex")
        elif completions is not None and max_failed > completions:
            yield (
                (*at, "maxFailedIndexes"),
                invalid(max_failed, "must be less than or equal to completions"),
            )
    if spec.get("successPolicy") is not None and not indexed:
        yield (
            (*at, "successPolicy"),
            invalid(spec["successPolicy"], "requires indexed completion mode"),
        )


def _pod_failure_policy(spec: dict[str, Any], at: Path) -> Iterator[Error]:
    policy = spec.get("podFailurePolicy")
    rules = _dict(policy).get("rules")
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(rule, dict):
            continue
        where = (*at, "podFailurePolicy", "rules", index)
        codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if codes is None and not conditions:
            yield (
                where,
                invalid("", "specifying one of OnExitCodes and OnPodConditions is required"),
            )
        elif codes is not None and conditions:
            yield (
                (*where, "onPodConditions"),
                forbidden("specifying both OnExitCodes and OnPodConditions is not supported"),
            )
        action = rule.get("action")
        if action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            yield (*where, "action"), invalid(action, "requires the backoffLimitPerIndex to be set")
        if isinstance(codes, dict):
            values = codes.get("values") if isinstance(codes.get("values"), list) else []
            if codes.get("operator") == "In" and 0 in values:
                yield (
                    (*where, "onExitCodes", "values"),
                    invalid(0, "must not be 0 for the In operator"),
                )
            numbers = [v for v in values if _int(v) is not None]
            if numbers != sorted(numbers):
                yield (*where, "onExitCodes", "values"), invalid(values, "must be ordered")
            if len(set(numbers)) != len(numbers):
                yield (*where, "onExitCodes", "values"), duplicate(values)


def job(obj: dict[str, Any]) -> Iterator[Error]:
    spec = _dict(obj.get("spec"))
    yield from job_spec(spec, ("spec",), labels_generated=True)
    name = _dict(obj.get("metadata")).get("name")
    if isinstance(name, str) and len(name) > names.LABEL_VALUE_MAX:
        # The API server labels the pods with the Job's name (batch.kubernetes.io/job-name).
        yield (
            ("metadata", "name"),
            invalid(
                name,
                f"must be no more than 63 characters (the {JOB_NAME_LABEL} label of its pods "
                "holds the name)",
            ),
        )


def cron_job(obj: dict[str, Any]) -> Iterator[Error]:
    name = _dict(obj.get("metadata")).get("name")
    if isinstance(name, str) and len(name) > 52:
        yield ("metadata", "name"), invalid(name, "must be no more than 52 characters")
    spec = _dict(obj.get("spec"))
    schedule = spec.get("schedule")
    if isinstance(schedule, str):
        if spec.get("timeZone") and ("TZ=" in schedule):
            yield (
                ("spec", "schedule"),
                invalid(schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule"),
            )
        for error in schedule_errors(schedule):
            yield ("spec", "schedule"), invalid(schedule, error)
    yield from non_negative(
        spec,
        ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"),
        ("spec",),
    )
    template = _dict(_dict(spec.get("jobTemplate")).get("spec"))
    yield from job_spec(template, ("spec", "jobTemplate", "spec"), labels_generated=True)


# -- policy and core --------------------------------------------------------------------------


def pod_disruption_budget(obj: dict[str, Any]) -> Iterator[Error]:
    spec = _dict(obj.get("spec"))
    low, high = spec.get("minAvailable"), spec.get("maxUnavailable")
    if low is not None and high is not None:
        yield ("spec",), invalid(spec, "minAvailable and maxUnavailable cannot be both set")
    for key, value in (("minAvailable", low), ("maxUnavailable", high)):
        if value is not None:
            yield from _int_or_percent(value, ("spec", key))
    yield from label_selector(spec.get("selector"), ("spec", "selector"))


def pod(obj: dict[str, Any]) -> Iterator[Error]:
    yield from pod_spec(obj.get("spec"), ("spec",))


def pod_template_object(obj: dict[str, Any]) -> Iterator[Error]:
    yield from pod_template(obj.get("template"), ("template",))


def _data_keys(obj: dict[str, Any], fields: tuple[str, ...]) -> Iterator[Error]:
    seen: dict[str, str] = {}
    size = 0
    for field_name in fields:
        data = obj.get(field_name)
        if not isinstance(data, dict):
            continue
        for key, value in data.items():
            key = str(key)
            where = (field_name, key)
            if len(key) > names.DNS1123_SUBDOMAIN_MAX:
                yield where, invalid(key, names.max_length(names.DNS1123_SUBDOMAIN_MAX))
            if not _CONFIG_KEY.fullmatch(key):
                yield where, invalid(key, _CONFIG_KEY_MSG)
            if key in seen:
                yield where, invalid(key, f"duplicate of key present in {seen[key]}")
            seen[key] = field_name
            size += len(key) + (len(value.encode()) if isinstance(value, str) else 0)
    if size > _MAX_CONFIG_BYTES:
        yield (), too_long(_MAX_CONFIG_BYTES)


def config_map(obj: dict[str, Any]) -> Iterator[Error]:
    yield from _data_keys(obj, ("data", "binaryData"))


def secret(obj: dict[str, Any]) -> Iterator[Error]:
    yield from _data_keys(obj, ("data", "stringData"))
    data = obj.get("data")
    for key, value in (data if isinstance(data, dict) else {}).items():
        if isinstance(value, str):
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                yield (
                    ("data", str(key)),
                    invalid(
                        "<secret value>", "is not valid base64 (the API server cannot decode it)"
                    ),
                )
    kind = obj.get("type")
    keys = set(_dict(data)) | set(_dict(obj.get("stringData")))
    wanted = {
        "kubernetes.io/tls": ("tls.crt", "tls.key"),
        "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
        "kubernetes.io/dockercfg": (".dockercfg",),
        "kubernetes.io/basic-auth": (),
        "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    }.get(kind if isinstance(kind, str) else "", ())
    for key in wanted:
        if key not in keys:
            yield ("data", key), required()


def service(obj: dict[str, Any]) -> Iterator[Error]:
    spec = _dict(obj.get("spec"))
    ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    seen: set[str] = set()
    for index, port in enumerate(ports):
        where = ("spec", "ports", index)
        name = port.get("name")
        if len(ports) > 1 and not name:
            yield (*where, "name"), required()
        if isinstance(name, str) and name:
            for error in names.dns1123_label(name):
                yield (*where, "name"), invalid(name, error)
            if name in seen:
                yield (*where, "name"), duplicate(name)
            seen.add(name)
        number = _int(port.get("port"))
        if number is not None and not 1 <= number <= 65535:
            yield (*where, "port"), invalid(number, "must be between 1 and 65535, inclusive")
    if spec.get("type") == "ExternalName" and not spec.get("externalName"):
        yield ("spec", "externalName"), required()
    yield from names_of(spec.get("selector"), ("spec", "selector"))


def names_of(labels: Any, at: Path) -> Iterator[Error]:
    for problem in names.labels(labels, at):
        yield problem.path, problem.message


Check = Callable[[dict[str, Any]], Iterator[Error]]

# (apiVersion, kind) -> (how its name is validated, its spec checks)
BUILT_IN: dict[tuple[str, str], tuple[names.NameCheck, Check | None]] = {
    ("v1", "Pod"): (names.dns1123_subdomain, pod),
    ("v1", "PodTemplate"): (names.dns1123_subdomain, pod_template_object),
    ("v1", "Service"): (names.dns1035_label, service),
    ("v1", "Namespace"): (names.dns1123_label, None),
    ("v1", "ConfigMap"): (names.dns1123_subdomain, config_map),
    ("v1", "Secret"): (names.dns1123_subdomain, secret),
    ("v1", "ServiceAccount"): (names.dns1123_subdomain, None),
    ("v1", "PersistentVolumeClaim"): (names.dns1123_subdomain, None),
    ("apps/v1", "Deployment"): (names.dns1123_subdomain, deployment),
    ("apps/v1", "ReplicaSet"): (names.dns1123_subdomain, replica_set),
    ("apps/v1", "StatefulSet"): (names.dns1123_subdomain, stateful_set),
    ("apps/v1", "DaemonSet"): (names.dns1123_subdomain, daemon_set),
    ("batch/v1", "Job"): (names.dns1123_subdomain, job),
    ("batch/v1", "CronJob"): (names.dns1123_subdomain, cron_job),
    ("policy/v1", "PodDisruptionBudget"): (names.dns1123_subdomain, pod_disruption_budget),
}
