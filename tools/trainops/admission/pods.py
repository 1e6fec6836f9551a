"""Pod spec validation the API server applies and JSON schemas cannot express.

Facts from kubernetes `pkg/apis/core/validation/validation.go` (ValidatePodSpec,
validateContainers, ValidateVolumes, validateVolumeMounts, validateEnv,
ValidateResourceRequirements, validateProbe, ValidateTolerations,
validateTopologySpreadConstraints, validateHostNetwork, ValidateSecurityContext)
for Kubernetes 1.35, after the API server's defaulting (an unset restartPolicy
is Always, an unset toleration operator is Equal).

`pod_spec` yields (path, message) pairs; the caller says when the API server
sees them: at apply (Pods, built-in workloads) or only when an operator creates
the pods of a custom resource.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainops import quantity
from trainops.admission import names
from trainops.admission.field import (
    Path,
    duplicate,
    forbidden,
    invalid,
    not_found,
    not_supported,
    required,
)

Error = tuple[Path, str]

_ENV_NAME = re.compile(r"[ -<>-~]+")  # printable ASCII except '=' (relaxed, GA in 1.34)
_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_VOLUME_SOURCES = frozenset(
    """hostPath emptyDir gcePersistentDisk awsElasticBlockStore gitRepo secret nfs iscsi
    glusterfs persistentVolumeClaim rbd flexVolume cinder cephfs flocker downwardAPI fc
    azureFile configMap vsphereVolume quobyte azureDisk photonPersistentDisk projected
    portworxVolume scaleIO storageos csi ephemeral image""".split()
)
_PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_QOS_RESOURCES = frozenset({"cpu", "memory"})
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_NON_NEGATIVE_MSG = "must be greater than or equal to 0"


def _dicts(value: Any) -> list[tuple[int, dict[str, Any]]]:
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]


def _negative(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value < 0


def pod_spec(spec: Any, at: Path, claimed: frozenset[str] = frozenset()) -> Iterator[Error]:
    """Everything ValidatePodSpec reports that a JSON schema lets through. `claimed`: volumes
    the controller adds from claim templates (StatefulSet, JobSet volumeClaimPolicies)."""
    if not isinstance(spec, dict):
        return
    containers = _dicts(spec.get("containers"))
    init = _dicts(spec.get("initContainers"))
    if not containers:
        yield (*at, "containers"), required()
    volumes = yield from _volumes(spec.get("volumes"), (*at, "volumes"))
    volumes |= claimed
    host_network = spec.get("hostNetwork") is True
    seen: set[str] = set()
    ports: set[str] = set()
    for field_name, items in (("initContainers", init), ("containers", containers)):
        for index, container in items:
            where = (*at, field_name, index)
            name = container.get("name")
            if isinstance(name, str):
                for error in names.dns1123_label(name):
                    yield (*where, "name"), invalid(name, error)
                if name in seen:
                    yield (*where, "name"), duplicate(name)
                seen.add(name)
            yield from _container(container, where, volumes, host_network, ports)
            if field_name == "containers" and "restartPolicy" in container:
                yield (*where, "restartPolicy"), forbidden("may not be set for non-init containers")
    yield from tolerations(spec.get("tolerations"), (*at, "tolerations"))
    yield from _topology_spread(
        spec.get("topologySpreadConstraints"), (*at, "topologySpreadConstraints")
    )
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline < 1:
        yield (
            (*at, "activeDeadlineSeconds"),
            invalid(deadline, "must be between 1 and 2147483647, inclusive"),
        )
    if spec.get("dnsPolicy") == "None" and not isinstance(spec.get("dnsConfig"), dict):
        yield (*at, "dnsConfig"), required("must provide `dnsConfig` when `dnsPolicy` is None")
    yield from _node_selector(spec.get("nodeSelector"), (*at, "nodeSelector"))
    yield from _pod_enums(spec, at)
    for key in ("nodeName", "runtimeClassName"):
        value = spec.get(key)
        if isinstance(value, str) and value:
            for error in names.dns1123_subdomain(value):
                yield (*at, key), invalid(value, error)
    dns = spec.get("dnsConfig")
    for index, option in _dicts(dns.get("options") if isinstance(dns, dict) else None):
        if not option.get("name"):
            yield (*at, "dnsConfig", "options", index, "name"), required()
    yield from _user_ids(spec.get("securityContext"), (*at, "securityContext"))
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    yield from _node_affinity(node, (*at, "affinity", "nodeAffinity"))


# Enumerations ValidatePodSpec checks (validateRestartPolicy, validateDNSPolicy,
# validatePreemptionPolicy, validateOS's validOS), after defaulting.
_POD_ENUMS = {
    "restartPolicy": ("Always", "OnFailure", "Never"),
    "dnsPolicy": ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"),
    "preemptionPolicy": ("PreemptLowerPriority", "Never"),
}
_OS_NAMES = ("linux", "windows")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_MAX_ID = 2147483647


def _pod_enums(spec: dict[str, Any], at: Path) -> Iterator[Error]:
    for key, supported in _POD_ENUMS.items():
        value = spec.get(key)
        if isinstance(value, str) and value not in supported:
            yield (*at, key), not_supported(value, supported)
    os = spec.get("os")
    if isinstance(os, dict):
        name = os.get("name")
        if not name:
            yield (*at, "os", "name"), required()
        elif isinstance(name, str) and name not in _OS_NAMES:
            yield (*at, "os", "name"), not_supported(name, _OS_NAMES)


def _user_ids(value: Any, at: Path) -> Iterator[Error]:
    """IsValidUserID / IsValidGroupID on a pod's or container's security context."""
    if not isinstance(value, dict):
        return
    for key in ("runAsUser", "runAsGroup", "fsGroup"):
        number = value.get(key)
        number_given = isinstance(number, int) and not isinstance(number, bool)
        if number_given and not 0 <= number <= _MAX_ID:
            yield (*at, key), invalid(number, f"must be between 0 and {_MAX_ID}, inclusive")


def _node_affinity(value: Any, at: Path) -> Iterator[Error]:
    """validateNodeSelectorRequirement's operators, required and preferred terms."""
    if not isinstance(value, dict):
        return
    required_terms = value.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = [
        (("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", i), term)
        for i, term in _dicts(
            required_terms.get("nodeSelectorTerms") if isinstance(required_terms, dict) else None
        )
    ]
    terms += [
        (
            ("preferredDuringSchedulingIgnoredDuringExecution", i, "preference"),
            item.get("preference"),
        )
        for i, item in _dicts(value.get("preferredDuringSchedulingIgnoredDuringExecution"))
    ]
    for where, term in terms:
        if not isinstance(term, dict):
            continue
        for field_name in ("matchExpressions", "matchFields"):
            for index, requirement in _dicts(term.get(field_name)):
                operator = requirement.get("operator")
                if isinstance(operator, str) and operator not in _SELECTOR_OPERATORS:
                    path = (*at, *where, field_name, index, "operator")
                    yield path, not_supported(operator, _SELECTOR_OPERATORS)


def _volumes(value: Any, at: Path) -> Iterator[Error]:
    """Checks volumes; returns the set of their names (for the mounts)."""
    found: set[str] = set()
    for index, volume in _dicts(value):
        where = (*at, index)
        name = volume.get("name")
        if isinstance(name, str):
            for error in names.dns1123_label(name):
                yield (*where, "name"), invalid(name, error)
            if name in found:
                yield (*where, "name"), duplicate(name)
            found.add(name)
        # A volume naming no source (`emptyDir:` left empty reads as none) is defaulted
        # to an emptyDir before validation (SetDefaults_Volume, pkg/apis/core/v1/defaults.go).
        sources = [key for key in volume if key in _VOLUME_SOURCES and volume[key] is not None]
        if len(sources) > 1:
            yield (*where, sources[1]), forbidden("may not specify more than 1 volume type")
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and not claim.get("claimName"):
            yield (*where, "persistentVolumeClaim", "claimName"), required()
    return found


def _container(
    container: dict[str, Any], at: Path, volumes: set[str], host_network: bool, ports: set[str]
) -> Iterator[Error]:
    mount_paths: set[str] = set()
    for index, mount in _dicts(container.get("volumeMounts")):
        where = (*at, "volumeMounts", index)
        name = mount.get("name")
        if isinstance(name, str) and name not in volumes:
            yield (*where, "name"), not_found(name)
        path = mount.get("mountPath")
        if isinstance(path, str):
            if not path:
                yield (*where, "mountPath"), required()
            elif path in mount_paths:
                yield (*where, "mountPath"), invalid(path, "must be unique")
            mount_paths.add(path)
        sub = mount.get("subPath")
        if isinstance(sub, str) and sub:
            if sub.startswith("/"):
                yield (*where, "subPath"), invalid(sub, "must be a relative path")
            elif ".." in sub.split("/"):
                yield (*where, "subPath"), invalid(sub, "must not contain '..'")
    for index, port in _dicts(container.get("ports")):
        where = (*at, "ports", index)
        name = port.get("name")
        if isinstance(name, str) and name:
            for error in _port_name(name):
                yield (*where, "name"), invalid(name, error)
            if name in ports:
                yield (*where, "name"), duplicate(name)
            ports.add(name)
        number = port.get("containerPort")
        if isinstance(number, int) and not 1 <= number <= 65535:
            yield (
                (*where, "containerPort"),
                invalid(number, "must be between 1 and 65535, inclusive"),
            )
        host = port.get("hostPort")
        if isinstance(host, int) and host != 0:
            if not 1 <= host <= 65535:
                yield (*where, "hostPort"), invalid(host, "must be between 1 and 65535, inclusive")
            elif host_network and isinstance(number, int) and host != number:
                yield (
                    (*where, "hostPort"),
                    invalid(host, "must match `containerPort` when `hostNetwork` is true"),
                )
        protocol = port.get("protocol")
        if isinstance(protocol, str) and protocol not in ("TCP", "UDP", "SCTP"):
            yield (*where, "protocol"), not_supported(protocol, ("SCTP", "TCP", "UDP"))
    yield from _env(container.get("env"), (*at, "env"))
    yield from _resources(container.get("resources"), (*at, "resources"))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        yield from _probe(container.get(probe), (*at, probe), probe != "readinessProbe")
    yield from _security_context(container.get("securityContext"), (*at, "securityContext"))
    yield from _user_ids(container.get("securityContext"), (*at, "securityContext"))


def _port_name(name: str) -> list[str]:
    """IsValidPortName: an IANA service name."""
    errors = []
    if len(name) > 15:
        errors.append("must be no more than 15 characters")
    if not _PORT_NAME.fullmatch(name):
        errors.append(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
            if not re.fullmatch(r"[a-z0-9-]*", name)
            else "must not begin or end with a hyphen"
        )
    if "--" in name:
        errors.append("must not contain consecutive hyphens")
    if not re.search(r"[a-z]", name):
        errors.append("must contain at least one letter (a-z)")
    return errors


def _env(value: Any, at: Path) -> Iterator[Error]:
    for index, item in _dicts(value):
        where = (*at, index)
        name = item.get("name")
        if isinstance(name, str):
            if not name:
                yield (*where, "name"), required()
            elif not _ENV_NAME.fullmatch(name):
                yield (
                    (*where, "name"),
                    invalid(
                        name,
                        "a valid environment variable name must consist only of printable "
                        "ASCII characters other than '='",
                    ),
                )
        source = item.get("valueFrom")
        if isinstance(source, dict):
            if item.get("value"):
                yield (
                    (*where, "valueFrom"),
                    invalid("", "may not be specified when `value` is not empty"),
                )
            kinds = [key for key in _ENV_SOURCES if source.get(key) is not None]
            if not kinds:
                yield (
                    (*where, "valueFrom"),
                    invalid(
                        "",
                        "must specify one of: `fieldRef`, "
                        "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                    ),
                )
            elif len(kinds) > 1:
                yield (
                    (*where, "valueFrom"),
                    invalid("", "may not have more than one field specified at a time"),
                )


@lru_cache(maxsize=4096)  # the same resource names and amounts recur in every container
def _resource_entry(name: str, raw: Any) -> tuple[tuple[str, ...], Fraction | None]:
    """Messages for one `name: amount` of limits or requests, and the parsed amount."""
    errors = [invalid(name, error) for error in names.qualified_name(name)]
    native = "/" not in name or name.startswith("kubernetes.io/")
    standard = name in _STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-")
    if native and not standard:
        errors.append(invalid(name, "must be a standard resource for containers"))
    amount = quantity.parse(raw)
    if amount is None:
        errors.append(invalid(raw, quantity.PARSE_ERROR))
    elif amount < 0:
        errors.append(invalid(raw, _NON_NEGATIVE_MSG))
    elif amount.denominator != 1 and not _overcommit(name) and "/" in name:
        errors.append(invalid(raw, "must be an integer"))
    return tuple(errors), amount


def _overcommit(name: str) -> bool:
    """IsOvercommitAllowed: native resources except hugepages."""
    native = "/" not in name or name.startswith("kubernetes.io/")
    return native and not name.startswith("hugepages-")


def _resources(value: Any, at: Path) -> Iterator[Error]:
    if not isinstance(value, dict):
        return
    parsed: dict[str, dict[str, Any]] = {}
    for part in ("limits", "requests"):
        amounts = value.get(part)
        parsed[part] = {}
        if not isinstance(amounts, dict):
            continue
        for name, raw in amounts.items():
            name = str(name)
            hashable = raw if isinstance(raw, str | int | float) else str(raw)
            errors, amount = _resource_entry(name, hashable)
            for message in errors:
                yield (*at, part, name), message
            if amount is not None:
                parsed[part][name] = (raw, amount)
    limits, requests = parsed["limits"], parsed["requests"]
    for name, (raw, amount) in requests.items():
        if name in limits:
            limit_raw, limit = limits[name]
            if amount != limit and not _overcommit(name):
                yield (
                    (*at, "requests"),
                    invalid(raw, f"must be equal to {name} limit of {limit_raw}"),
                )
            elif amount > limit:
                yield (
                    (*at, "requests"),
                    invalid(raw, f"must be less than or equal to {name} limit of {limit_raw}"),
                )
        elif not _overcommit(name):
            yield (*at, "limits"), required("Limit must be set for non overcommitable resources")
    names_used = set(limits) | set(requests)
    if any(n.startswith("hugepages-") for n in names_used) and not names_used & _QOS_RESOURCES:
        yield at, forbidden("HugePages require cpu or memory")


def _probe(value: Any, at: Path, single_success: bool) -> Iterator[Error]:
    if not isinstance(value, dict):
        return
    handlers = [key for key in _PROBE_HANDLERS if value.get(key) is not None]
    if not handlers:
        yield at, required("must specify a handler type")
    elif len(handlers) > 1:
        yield (*at, handlers[1]), forbidden("may not specify more than 1 handler type")
    for key in (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
        "terminationGracePeriodSeconds",
    ):
        if _negative(value.get(key)):
            yield (*at, key), invalid(value[key], _NON_NEGATIVE_MSG)
    success = value.get("successThreshold")
    if single_success and isinstance(success, int) and success not in (0, 1):
        yield (*at, "successThreshold"), invalid(success, "must be 1")
    grace = value.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace == 0:
        yield (*at, "terminationGracePeriodSeconds"), invalid(0, "must be greater than 0")


def _security_context(value: Any, at: Path) -> Iterator[Error]:
    if not isinstance(value, dict) or value.get("allowPrivilegeEscalation") is not False:
        return
    if value.get("privileged") is True:
        yield (
            at,
            invalid("", "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"),
        )
    added = (
        (value.get("capabilities") or {}).get("add")
        if isinstance(value.get("capabilities"), dict)
        else None
    )
    # ValidateSecurityContext compares the literal string: only "CAP_SYS_ADMIN" is refused;
    # "SYS_ADMIN" (the spelling runtimes also accept) passes validation.
    if isinstance(added, list) and "CAP_SYS_ADMIN" in added:
        yield (
            at,
            invalid(
                "",
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` "
                "CAP_SYS_ADMIN",
            ),
        )


def tolerations(value: Any, at: Path) -> Iterator[Error]:
    for index, toleration in _dicts(value):
        where = (*at, index)
        key = toleration.get("key")
        operator = toleration.get("operator") or "Equal"
        if isinstance(key, str) and key:
            for error in names.qualified_name(key):
                yield (*where, "key"), invalid(key, error)
        elif operator != "Exists":
            yield (
                (*where, "operator"),
                invalid(
                    operator,
                    'operator must be Exists when `key` is empty, which means "match all '
                    'values and all keys"',
                ),
            )
        effect = toleration.get("effect")
        seconds = toleration.get("tolerationSeconds")
        if seconds is not None and effect != "NoExecute":
            yield (
                (*where, "effect"),
                invalid(effect or "", "effect must be 'NoExecute' when `tolerationSeconds` is set"),
            )
        value_ = toleration.get("value")
        if operator == "Equal":
            if isinstance(value_, str):
                for error in names.label_value(value_):
                    yield (*where, "operator"), invalid(value_, error)
        elif operator == "Exists":
            if value_:
                yield (
                    (*where, "operator"),
                    invalid(toleration, "value must be empty when `operator` is 'Exists'"),
                )
        else:
            yield (*where, "operator"), not_supported(operator, ("Equal", "Exists"))
        if effect and effect not in _EFFECTS:
            yield (*where, "effect"), not_supported(effect, _EFFECTS)


def _topology_spread(value: Any, at: Path) -> Iterator[Error]:
    seen: set[tuple[Any, Any]] = set()
    for index, constraint in _dicts(value):
        where = (*at, index)
        skew = constraint.get("maxSkew")
        if isinstance(skew, int) and skew <= 0:
            yield (*where, "maxSkew"), invalid(skew, "must be greater than zero")
        key = constraint.get("topologyKey")
        if not key:
            yield (*where, "topologyKey"), required("can not be empty")
        when = constraint.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            yield (
                (*where, "whenUnsatisfiable"),
                not_supported(when or "", ("DoNotSchedule", "ScheduleAnyway")),
            )
        domains = constraint.get("minDomains")
        if domains is not None:
            if isinstance(domains, int) and domains <= 0:
                yield (*where, "minDomains"), invalid(domains, "must be greater than 0")
            elif when == "ScheduleAnyway":
                yield (
                    (*where, "minDomains"),
                    invalid(
                        domains,
                        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not "
                        "ScheduleAnyway",
                    ),
                )
        pair = (key, when)
        if key and pair in seen:
            yield (*where, "{topologyKey, whenUnsatisfiable}"), duplicate(f"{{{key}, {when}}}")
        seen.add(pair)


def _node_selector(value: Any, at: Path) -> Iterator[Error]:
    for problem in names.labels(value, at):
        yield problem.path, problem.message
