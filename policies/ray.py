"""KubeRay (ray.io/v1): the checks the operator runs on RayJobs, RayClusters and
RayServices before it creates anything, and the GPU and clean-up settings that decide
whether a Ray training run gets and gives back its GPUs.

Facts from KubeRay v1.6.2 (`ray-operator/controllers/ray/utils/validation.go`, which the
RayJob and RayCluster controllers and the optional webhook call: an object that fails it
is never reconciled, a RayJob is marked failed), and the RayJob API
(`ray-operator/apis/ray/v1/rayjob_types.go`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, env_of, gpu_count, is_int, mapping

from . import common

KUBERAY = "https://github.com/ray-project/kuberay/blob/v1.6.2/ray-operator/"
VALIDATION = KUBERAY + "controllers/ray/utils/validation.go"
RAY_KINDS = ("RayJob", "RayCluster", "RayService")
CLUSTER_SELECTOR_KEY = "ray.io/cluster"
AUTOSCALER_V2_ENV = "RAY_enable_autoscaler_v2"
FT_ANNOTATION = "ray.io/ft-enabled"
EXTERNAL_STORAGE_ANNOTATION = "ray.io/external-storage-namespace"
RAY_START_RESOURCES = ("num-cpus", "num-gpus", "memory", "resources")
MAX_CLUSTER_NAME = 53  # MaxRayClusterNameLength; a RayJob's is 6 shorter
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _ray(doc: Document) -> bool:
    return doc.api_version.startswith("ray.io/")


def _cluster_spec(doc: Document) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The RayClusterSpec a Ray object holds, and its path."""
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "RayCluster":
        return spec, ("spec",)
    field = "rayClusterSpec" if doc.kind == "RayJob" else "rayClusterConfig"
    inner = spec.get(field)
    return (inner, ("spec", field)) if isinstance(inner, dict) else (None, ())


def _head_container(cluster: dict[str, Any]) -> dict[str, Any]:
    head = mapping(cluster.get("headGroupSpec"))
    containers = mapping(mapping(head.get("template")).get("spec")).get("containers")
    return mapping(containers[0]) if isinstance(containers, list) and containers else {}


def _autoscaling(cluster: dict[str, Any]) -> bool:
    return cluster.get("enableInTreeAutoscaling") is True


def _autoscaler_v2(cluster: dict[str, Any]) -> bool:
    return mapping(cluster.get("autoscalerOptions")).get("version") == "v2"


def _flag_on(value: Any) -> bool:
    return str(value) in ("1", "true")


@resource_rule(
    id="kuberay-cluster-spec",
    severity=ERROR,
    source=(VALIDATION + "#L22-L39", VALIDATION + "#L59-L231", VALIDATION + "#L730-L751"),
    title="Ray clusters pass KubeRay's validation",
    why="KubeRay's ValidateRayClusterSpec (run for a RayCluster, a RayJob's rayClusterSpec "
    "and a RayService's rayClusterConfig) refuses: a head or worker group without "
    "containers, resources given both in rayStartParams (num-cpus, num-gpus, memory, "
    "resources) and in the group's resources field, a worker group with negative "
    "replicas bounds or minReplicas above maxReplicas, suspended worker groups with the "
    "autoscaler, RAY_enable_autoscaler_v2 in the head without enableInTreeAutoscaling (or "
    "together with autoscalerOptions.version), a head or worker restartPolicy other than "
    "Never with autoscaler v2, idleTimeoutSeconds without autoscaler v2, GCS fault "
    "tolerance set both by the ray.io/ft-enabled annotation and gcsFaultToleranceOptions "
    "(or RAY_REDIS_ADDRESS without the options, or Redis settings outside them), and a "
    "RayCluster "
    "name that is longer than 53 characters or not a DNS-1035 label. The operator records "
    "an event and creates no pods; a RayJob fails validation.",
    fix="Give each group a container, set resources in one place, keep minReplicas <= "
    "maxReplicas, enable autoscaler v2 through enableInTreeAutoscaling and "
    "autoscalerOptions.version: v2, and name the cluster with at most 53 lowercase "
    "letters, digits and '-', starting with a letter.",
    kinds=RAY_KINDS,
    applies=_ray,
)
def cluster_spec(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind == "RayCluster":
        yield from _name(doc, MAX_CLUSTER_NAME)
    cluster, base = _cluster_spec(doc)
    if cluster is None:
        return
    yield from _groups(cluster, base)
    yield from _autoscaler(cluster, base)
    yield from _fault_tolerance(doc, cluster, base)


def _fault_tolerance(doc: Document, cluster: dict[str, Any], base: tuple) -> Iterator[Violation]:
    annotations = mapping(doc.metadata.get("annotations"))
    options = cluster.get("gcsFaultToleranceOptions")
    env = env_of(_head_container(cluster))
    params = mapping(mapping(cluster.get("headGroupSpec")).get("rayStartParams"))
    head_env = (*base, "headGroupSpec", "template", "spec", "containers", 0, "env")
    if options is not None and annotations.get(FT_ANNOTATION):
        yield Violation(
            f"{FT_ANNOTATION} annotation and gcsFaultToleranceOptions are both set",
            (*base, "gcsFaultToleranceOptions"),
        )
    enabled = options is not None or str(annotations.get(FT_ANNOTATION, "")).lower() == "true"
    if not enabled and "RAY_REDIS_ADDRESS" in env:
        yield Violation("RAY_REDIS_ADDRESS in the head without gcsFaultToleranceOptions", head_env)
    if options is not None:
        clashes = [
            what
            for what, present in (
                ("rayStartParams redis-password", params.get("redis-password") not in (None, "")),
                ("env REDIS_PASSWORD", "REDIS_PASSWORD" in env),
                ("env RAY_REDIS_ADDRESS", "RAY_REDIS_ADDRESS" in env),
                (
                    f"annotation {EXTERNAL_STORAGE_ANNOTATION}",
                    bool(annotations.get(EXTERNAL_STORAGE_ANNOTATION)),
                ),
            )
            if present
        ]
        if clashes:
            yield Violation(
                f"gcsFaultToleranceOptions with {', '.join(clashes)}: set them in the options",
                (*base, "gcsFaultToleranceOptions"),
            )
    if params.get("redis-username") not in (None, "") or "REDIS_USERNAME" in env:
        yield Violation(
            "a redis username in rayStartParams or REDIS_USERNAME: KubeRay takes it only from "
            "gcsFaultToleranceOptions.redisUsername",
            head_env,
        )


def _name(doc: Document, limit: int) -> Iterator[Violation]:
    name = str(doc.metadata.get("name") or "")
    if not name and doc.metadata.get("generateName"):
        name = f"{doc.metadata['generateName']}abcde"  # the API server adds five characters
    if not name or "$" in name or "{" in name:
        return
    if len(name) > limit:
        yield Violation(
            f"{doc.kind} name {name!r} has {len(name)} characters; KubeRay allows {limit}",
            ("metadata", "name"),
        )
    elif not _DNS1035.match(name):
        yield Violation(
            f"{doc.kind} name {name!r} is not a DNS-1035 label (a lowercase letter first, "
            "then letters, digits and '-')",
            ("metadata", "name"),
        )


def _group_containers(group: dict[str, Any]) -> Any:
    return mapping(mapping(group.get("template")).get("spec")).get("containers")


def _groups(cluster: dict[str, Any], base: tuple) -> Iterator[Violation]:
    head = mapping(cluster.get("headGroupSpec"))
    groups = [("Head", head, (*base, "headGroupSpec"))]
    for index, worker in enumerate(dicts(cluster.get("workerGroupSpecs"))):
        groups.append(
            (str(worker.get("groupName", index)), worker, (*base, "workerGroupSpecs", index))
        )
    for name, group, at in groups:
        containers = _group_containers(group)
        if isinstance(mapping(group.get("template")).get("spec"), dict) and not containers:
            yield Violation(f"group {name} has no container", (*at, "template"))
        params = mapping(group.get("rayStartParams"))
        given = [key for key in RAY_START_RESOURCES if params.get(key) not in (None, "")]
        if given and mapping(group.get("resources")):
            yield Violation(
                f"group {name} sets {', '.join(given)} in rayStartParams and a resources "
                "field: KubeRay takes only one",
                (*at, "resources"),
            )
        if name == "Head" and at[-1] == "headGroupSpec":
            continue
        low, high = group.get("minReplicas"), group.get("maxReplicas")
        for field, value in (("minReplicas", low), ("maxReplicas", high)):
            if is_int(value) and value < 0:
                yield Violation(f"worker group {name} has negative {field} {value}", (*at, field))
        if is_int(low) and is_int(high) and low > high:
            yield Violation(
                f"worker group {name} has minReplicas {low} above maxReplicas {high}",
                (*at, "minReplicas"),
            )
        idle = group.get("idleTimeoutSeconds")
        if idle is not None:
            if is_int(idle) and idle < 0:
                yield Violation(
                    f"worker group {name}: idleTimeoutSeconds {idle} is negative",
                    (*at, "idleTimeoutSeconds"),
                )
            elif not _autoscaler_v2(cluster) and not _flag_on(
                env_of(_head_container(cluster)).get(AUTOSCALER_V2_ENV)
            ):
                yield Violation(
                    f"worker group {name} sets idleTimeoutSeconds without autoscaler v2",
                    (*at, "idleTimeoutSeconds"),
                )
        if group.get("suspend") is True and _autoscaling(cluster):
            yield Violation(
                f"worker group {name} is suspended with the autoscaler enabled",
                (*at, "suspend"),
            )


def _autoscaler(cluster: dict[str, Any], base: tuple) -> Iterator[Violation]:
    env = env_of(_head_container(cluster))
    head_at = (*base, "headGroupSpec", "template", "spec")
    if AUTOSCALER_V2_ENV in env:
        if not _autoscaling(cluster) and _flag_on(env[AUTOSCALER_V2_ENV]):
            yield Violation(
                f"{AUTOSCALER_V2_ENV}={env[AUTOSCALER_V2_ENV]} in the head without "
                "enableInTreeAutoscaling: true",
                (*head_at, "containers", 0, "env"),
            )
        elif _autoscaling(cluster) and mapping(cluster.get("autoscalerOptions")).get("version"):
            yield Violation(
                f"autoscalerOptions.version and the head's {AUTOSCALER_V2_ENV} are both set",
                (*base, "autoscalerOptions", "version"),
            )
    if not (_autoscaling(cluster) and _autoscaler_v2(cluster)):
        return
    head = mapping(mapping(cluster.get("headGroupSpec")).get("template"))
    policies = [("head", mapping(head.get("spec")).get("restartPolicy"), head_at)]
    for index, worker in enumerate(dicts(cluster.get("workerGroupSpecs"))):
        spec = mapping(mapping(worker.get("template")).get("spec"))
        policies.append(
            (
                f"worker group {worker.get('groupName', index)}",
                spec.get("restartPolicy"),
                (*base, "workerGroupSpecs", index, "template", "spec"),
            )
        )
    for what, policy, at in policies:
        if policy not in (None, "", "Never"):
            yield Violation(
                f"{what} restartPolicy {policy} with autoscaler v2 (Never or unset)",
                (*at, "restartPolicy"),
            )


@resource_rule(
    id="kuberay-rayjob-spec",
    severity=ERROR,
    source=(
        VALIDATION + "#L279-L376",
        VALIDATION + "#L494-L531",
        KUBERAY + "controllers/ray/rayjob_controller.go#L233-L245",
    ),
    title="RayJobs pass KubeRay's validation",
    why="KubeRay's ValidateRayJobSpec marks a RayJob failed (ValidationFailed) before it "
    "creates a cluster when: it is suspended (as Kueue creates every queued RayJob) with "
    "shutdownAfterJobFinishes false; ttlSecondsAfterFinished is negative, or positive "
    "without shutdownAfterJobFinishes; it has neither rayClusterSpec nor clusterSelector, "
    "or a clusterSelector without ray.io/cluster, in SidecarMode, with a backoffLimit or "
    "suspended; backoffLimit > 0 in InteractiveMode or negative; SidecarMode comes with "
    "submitterPodTemplate, submitterConfig or a head restartPolicy other than Never; "
    "activeDeadlineSeconds or preRunningDeadlineSeconds is not positive; or the name is "
    "longer than 47 characters or not a DNS-1035 label.",
    fix="Set shutdownAfterJobFinishes: true wherever the job is queued, suspended or given a "
    "TTL; give either rayClusterSpec or clusterSelector {ray.io/cluster: NAME}; drop what "
    "the chosen submissionMode does not support; use positive deadlines.",
    when={
        "error": "KubeRay's validation refuses the RayJob",
        "warning": "submitterPodTemplate or submitterConfig in HTTPMode or InteractiveMode, "
        "where no submitter pod runs and KubeRay ignores them",
    },
    kinds=("RayJob",),
    applies=_ray,
)
def rayjob_spec(doc: Document, ctx: Context) -> Iterator[Violation]:
    yield from _name(doc, MAX_CLUSTER_NAME - 6)
    spec = mapping(doc.obj.get("spec"))
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    queued = common.KUEUE_LABEL in mapping(doc.metadata.get("labels"))
    if (spec.get("suspend") is True or queued) and not shutdown:
        why = "suspended" if spec.get("suspend") is True else "queued by Kueue (created suspended)"
        yield Violation(
            f"the RayJob is {why} with shutdownAfterJobFinishes false",
            ("spec", "shutdownAfterJobFinishes"),
        )
    ttl = spec.get("ttlSecondsAfterFinished")
    if is_int(ttl) and ttl < 0:
        yield Violation(
            f"ttlSecondsAfterFinished {ttl} is negative", ("spec", "ttlSecondsAfterFinished")
        )
    elif is_int(ttl) and ttl > 0 and not shutdown and not _deletion_rules(spec):
        yield Violation(
            f"ttlSecondsAfterFinished {ttl} with shutdownAfterJobFinishes false",
            ("spec", "ttlSecondsAfterFinished"),
        )
    mode = spec.get("submissionMode", "K8sJobMode")
    selector = mapping(spec.get("clusterSelector"))
    backoff = spec.get("backoffLimit")
    if selector:
        if not selector.get(CLUSTER_SELECTOR_KEY):
            yield Violation(
                f"clusterSelector has no {CLUSTER_SELECTOR_KEY}", ("spec", "clusterSelector")
            )
        if mode == "SidecarMode":
            yield Violation("clusterSelector in SidecarMode", ("spec", "submissionMode"))
        if is_int(backoff) and backoff > 0:
            yield Violation(
                f"backoffLimit {backoff} with clusterSelector", ("spec", "backoffLimit")
            )
        if spec.get("suspend") is True:
            yield Violation("a clusterSelector RayJob cannot be suspended", ("spec", "suspend"))
    elif not isinstance(spec.get("rayClusterSpec"), dict):
        yield Violation("neither rayClusterSpec nor clusterSelector is set", ("spec",))
    if mode == "InteractiveMode" and is_int(backoff) and backoff > 0:
        yield Violation(f"backoffLimit {backoff} in InteractiveMode", ("spec", "backoffLimit"))
    if mode in ("HTTPMode", "InteractiveMode"):
        for field in ("submitterPodTemplate", "submitterConfig"):
            if spec.get(field) is not None:
                yield Violation(
                    f"{field} in {mode}: only K8sJobMode runs a submitter pod, so it is ignored",
                    ("spec", field),
                    severity=WARNING,
                )
    if mode == "SidecarMode":
        for field in ("submitterPodTemplate", "submitterConfig"):
            if spec.get(field) is not None:
                yield Violation(f"{field} in SidecarMode", ("spec", field))
        head = mapping(
            mapping(mapping(spec.get("rayClusterSpec")).get("headGroupSpec")).get("template")
        )
        policy = mapping(head.get("spec")).get("restartPolicy")
        if policy not in (None, "", "Never"):
            yield Violation(
                f"head restartPolicy {policy} in SidecarMode (Never or unset)",
                ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "restartPolicy"),
            )
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        value = spec.get(field)
        if is_int(value) and value <= 0:
            yield Violation(f"{field} {value} is not positive", ("spec", field))
    if is_int(backoff) and backoff < 0:
        yield Violation(f"backoffLimit {backoff} is negative", ("spec", "backoffLimit"))
    rules = _deletion_rules(spec)
    if rules and shutdown:
        yield Violation(
            "shutdownAfterJobFinishes together with deletionStrategy.deletionRules",
            ("spec", "deletionStrategy"),
        )


def _deletion_rules(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return dicts(mapping(spec.get("deletionStrategy")).get("deletionRules"))


def _group_gpus(group: dict[str, Any]) -> int:
    params = mapping(group.get("rayStartParams"))
    given = str(params.get("num-gpus", ""))
    if given.isdigit():
        return int(given)
    containers = _group_containers(group)
    return gpu_count(mapping(containers[0])) if isinstance(containers, list) and containers else 0


@resource_rule(
    id="kuberay-gpu-resources",
    severity=WARNING,
    source=KUBERAY + "apis/ray/v1/rayjob_types.go#L276-L294",
    title="Ray groups advertise the GPUs their pods have, and a RayJob's cluster gives them back",
    why="entrypointNumGpus reserves GPUs for the driver: when no group of the RayJob's own "
    "cluster has GPUs the driver never starts and the job stays pending. With "
    "shutdownAfterJobFinishes false (the default) the RayCluster a RayJob created keeps "
    "running after the job ends, and its GPU workers stay allocated until someone deletes "
    "it. A group's rayStartParams num-gpus other than its container's GPU limit makes Ray "
    "schedule onto GPUs the pod does not have, or leave some idle.",
    fix="Give a worker group the GPUs entrypointNumGpus asks for (or set it to 0), set "
    "shutdownAfterJobFinishes: true (with ttlSecondsAfterFinished for logs), and leave "
    "num-gpus out of rayStartParams (KubeRay takes it from the container's limits).",
    kinds=RAY_KINDS,
    applies=_ray,
)
def gpu_resources(doc: Document, ctx: Context) -> Iterator[Violation]:
    cluster, base = _cluster_spec(doc)
    if cluster is None:
        return
    head = mapping(cluster.get("headGroupSpec"))
    groups = [(head, (*base, "headGroupSpec"), "head")]
    for index, worker in enumerate(dicts(cluster.get("workerGroupSpecs"))):
        groups.append(
            (worker, (*base, "workerGroupSpecs", index), str(worker.get("groupName", index)))
        )
    for group, at, name in groups:
        params = mapping(group.get("rayStartParams"))
        given = str(params.get("num-gpus", ""))
        containers = _group_containers(group)
        if not given.isdigit() or not isinstance(containers, list) or not containers:
            continue
        limit = gpu_count(mapping(containers[0]))
        if int(given) != limit:
            yield Violation(
                f"group {name}: rayStartParams num-gpus {given} but its Ray container has "
                f"{limit} GPUs",
                (*at, "rayStartParams", "num-gpus"),
            )
    if doc.kind != "RayJob":
        return
    spec = mapping(doc.obj.get("spec"))
    wanted = spec.get("entrypointNumGpus")
    gpus = any(_group_gpus(group) for group, _, _ in groups)
    if isinstance(wanted, (int, float)) and wanted > 0 and not gpus:
        yield Violation(
            f"entrypointNumGpus {wanted} but no group of the RayJob's cluster has GPUs",
            ("spec", "entrypointNumGpus"),
        )
    held = spec.get("suspend") is True or common.KUEUE_LABEL in mapping(doc.metadata.get("labels"))
    if held or spec.get("shutdownAfterJobFinishes") is True or _deletion_rules(spec):
        return  # the suspended or queued case is kuberay-rayjob-spec's error
    if gpus:
        yield Violation(
            "the RayJob's GPU cluster outlives the job: shutdownAfterJobFinishes is not true",
            ("spec", "shutdownAfterJobFinishes"),
        )
