"""KubeRay (ray.io/v1): the checks the operator runs on RayJobs, RayClusters and
RayServices before it creates anything, and the GPU and clean-up settings that decide
whether a Ray training run gets and gives back its GPUs.

Facts from KubeRay v1.6.2 (`ray-operator/controllers/ray/utils/validation.go`, which the
RayJob and RayCluster controllers and the optional webhook call: an object that fails it
is never reconciled, a RayJob is marked failed), and the RayJob API
(`ray-operator/apis/ray/v1/rayjob_types.go`).

From KubeRay v1.7.0: the operator's batch-scheduler flags (`apis/config/v1alpha1/
config_utils.go`, checked at start), what its volcano and kai-scheduler plugins
(`controllers/ray/batchscheduler/`) refuse or cannot build, read from the operator
Deployment of the render when there is one, and the serve Service's port naming
(`controllers/ray/common/service.go`).
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


# -- Batch schedulers and the serve Service (KubeRay v1.7.0) ------------------------------

KUBERAY17 = "https://github.com/ray-project/kuberay/blob/v1.7.0/ray-operator/"
BATCH = KUBERAY17 + "controllers/ray/batchscheduler/"
VOLCANO_PLUGIN = BATCH + "volcano/volcano_scheduler.go"
KAI_PLUGIN = BATCH + "kai-scheduler/kai_scheduler.go"
SERVICE_GO = KUBERAY17 + "controllers/ray/common/service.go"
# The --batch-scheduler values ValidateBatchSchedulerConfig accepts (config_utils.go).
BATCH_SCHEDULERS = ("volcano", "yunikorn", "scheduler-plugins", "kai-scheduler")
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
TOPOLOGY_MODE_LABEL = "volcano.sh/network-topology-mode"
TOPOLOGY_TIER_LABEL = "volcano.sh/network-topology-highest-tier-allowed"
RAY_PRIORITY_LABEL = "ray.io/priority-class-name"
KAI_QUEUE = "kai.scheduler/queue"
SERVE_SERVICE_ANNOTATION = "ray.io/enable-serve-service"
_ATOI = re.compile(r"^[+-]?[0-9]+$")
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")


def _templated(text: Any) -> bool:
    return "{{" in str(text) or "$(" in str(text)


def _operator_container(container: dict[str, Any]) -> bool:
    image = str(container.get("image") or "")
    return "kuberay/operator" in image or "kuberay-operator" in image


def _go_flags(words: list[Any]) -> dict[str, str] | None:
    """The flags a Go flag.Parse reads from `words` (it stops at the first non-flag), or
    None when a word is templated."""
    found: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = str(words[index])
        if _templated(word):
            return None
        if word == "--" or not word.startswith("-") or word == "-":
            break
        name, sep, value = word.lstrip("-").partition("=")
        if not sep:
            booleans = (
                "enable-batch-scheduler",
                "enable-leader-election",
                "enable-metrics",
                "zap-devel",
            )
            if name in booleans or name.startswith(("use-", "forced-")):
                value = "true"
            elif index + 1 < len(words):
                index += 1
                value = str(words[index])
                if _templated(value):
                    return None
        found[name] = value
        index += 1
    return found


def _operator_scheduler(flags: dict[str, str]) -> tuple[str | None, str | None]:
    """(the batch scheduler the operator runs, or why it exits at start); (None, None)
    when the flags do not say (a --config file replaces them)."""
    if "config" in flags:
        return None, None
    gates = {
        key.strip(): value.strip()
        for key, _, value in (
            part.partition("=") for part in flags.get("feature-gates", "").split(",")
        )
    }
    enabled = flags.get("enable-batch-scheduler", "false") in _GO_TRUE
    name = flags.get("batch-scheduler", "")
    if gates.get("KubernetesWAS", "").lower() == "true":
        if enabled or name:
            return None, (
                "the KubernetesWAS feature gate cannot be combined with --batch-scheduler or "
                "--enable-batch-scheduler"
            )
        return "kubernetes-was", None
    if enabled and name:
        return None, "both --enable-batch-scheduler (deprecated) and --batch-scheduler are set"
    if enabled:
        return "volcano", None
    if name and name not in BATCH_SCHEDULERS:
        return None, (
            f"--batch-scheduler={name} is not supported (volcano, yunikorn, scheduler-plugins "
            "or kai-scheduler)"
        )
    return name, None


def _operators(ctx: Context) -> list[tuple[Document, str | None, str | None]]:
    """The KubeRay operator Deployments of the render: (doc, scheduler, why it exits)."""
    found = []
    for doc in ctx.of_kind("Deployment"):
        spec = mapping(mapping(mapping(doc.obj.get("spec")).get("template")).get("spec"))
        for container in dicts(spec.get("containers")):
            if not _operator_container(container):
                continue
            command = [w for w in container.get("command") or [] if isinstance(w, (str, int))]
            flags = _go_flags([*command[1:], *(container.get("args") or [])])
            if flags is None:
                break
            scheduler, problem = _operator_scheduler(flags)
            found.append((doc, scheduler, problem))
            break
    return found


def _render_scheduler(ctx: Context) -> str | None:
    """The batch scheduler of the KubeRay operator the render deploys ('' for none), or
    None when no operator Deployment says one thing for certain."""
    operators = ctx.memo("kuberay-operators", lambda: _operators(ctx))
    values = {scheduler for _, scheduler, problem in operators if problem is None}
    if len(operators) == 0 or len(values) != 1 or any(p for _, _, p in operators):
        return None
    return next(iter(values))


def _is_operator(doc: Document) -> bool:
    spec = mapping(mapping(mapping(doc.obj.get("spec")).get("template")).get("spec"))
    return any(_operator_container(c) for c in dicts(spec.get("containers")))


@resource_rule(
    id="kuberay-operator-batch-scheduler",
    severity=ERROR,
    source=(
        KUBERAY17 + "apis/config/v1alpha1/config_utils.go#L15-L46",
        KUBERAY17 + "main.go#L193-L195",
    ),
    title="The KubeRay operator is started with a batch scheduler it supports",
    why="At start the KubeRay operator checks its batch-scheduler flags "
    "(ValidateBatchSchedulerConfig) and exits when --batch-scheduler is not volcano, "
    "yunikorn, scheduler-plugins or kai-scheduler, when the deprecated "
    "--enable-batch-scheduler comes with --batch-scheduler, or when the KubernetesWAS "
    "feature gate comes with either: the operator crash-loops and no RayCluster, RayJob or "
    "RayService is reconciled.",
    fix="Pass one --batch-scheduler=<volcano|yunikorn|scheduler-plugins|kai-scheduler> "
    "(the Helm value batchScheduler.name) and drop --enable-batch-scheduler.",
    kinds=("Deployment",),
    applies=_is_operator,
)
def operator_batch_scheduler(doc: Document, ctx: Context) -> Iterator[Violation]:
    operators = ctx.memo("kuberay-operators", lambda: _operators(ctx))
    for found, _, problem in operators:
        if found is doc and problem:
            yield Violation(
                f"{problem}: the KubeRay operator exits at start",
                ("spec", "template", "spec", "containers"),
            )


def _labels(doc: Document) -> dict[str, Any]:
    return mapping(doc.metadata.get("labels"))


def _topology_problem(labels: dict[str, Any]) -> tuple[str, str] | None:
    """(label, why) when KubeRay's volcano plugin cannot make a PodGroup of the labels."""
    if TOPOLOGY_MODE_LABEL not in labels:
        return None
    mode, tier = labels[TOPOLOGY_MODE_LABEL], labels.get(TOPOLOGY_TIER_LABEL)
    if _templated(mode) or _templated(tier):
        return None
    if mode not in (None, "", "hard", "soft"):
        return TOPOLOGY_MODE_LABEL, (
            f"{TOPOLOGY_MODE_LABEL}={mode!r} is not hard or soft: the API server refuses the "
            "PodGroup"
        )
    if tier is None:
        return None
    if not _ATOI.match(str(tier)):
        return TOPOLOGY_TIER_LABEL, (
            f"{TOPOLOGY_TIER_LABEL}={tier!r} is not an integer: KubeRay cannot build the PodGroup"
        )
    if int(str(tier)) < 0:
        return TOPOLOGY_TIER_LABEL, (
            f"{TOPOLOGY_TIER_LABEL}={tier} is negative: the API server refuses the PodGroup"
        )
    return None


@resource_rule(
    id="kuberay-batch-scheduler-support",
    severity=ERROR,
    source=(
        VOLCANO_PLUGIN + "#L72-L76",
        VOLCANO_PLUGIN + "#L237-L251",
        KAI_PLUGIN + "#L38-L51",
        KUBERAY17 + "controllers/ray/rayjob_controller.go#L192-L200",
        KUBERAY17 + "controllers/ray/raycluster_controller.go#L989-L998",
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/pkg/webhooks/admission/podgroups/"
        "validate/validate_podgroup.go#L101-L117",
    ),
    title="Ray objects are ones the KubeRay operator's batch scheduler can gang",
    why="With --batch-scheduler=volcano (or --enable-batch-scheduler) KubeRay makes a Volcano "
    "PodGroup for every RayCluster and RayJob before any pod: it refuses a RayJob with a "
    "clusterSelector ('gang scheduling does not support RayJob ... referencing an existing "
    "RayCluster'), and fails to build the PodGroup when volcano.sh/network-topology-highest-"
    "tier-allowed is not an integer, or when the PodGroup is refused (a mode other than hard "
    "or soft, a negative tier, a volcano.sh/queue-name queue that does not exist). With "
    "--batch-scheduler=kai-scheduler it refuses every RayJob in "
    "K8sJobMode, the default submissionMode. The controller retries forever: the RayJob "
    "stays Initializing, the RayCluster gets no pods. Labels for a scheduler the operator "
    "does not run (volcano.sh/queue-name, ray.io/priority-class-name, the topology labels) "
    "are ignored.",
    fix="Use rayClusterSpec (not clusterSelector) with Volcano, submissionMode SidecarMode, "
    "HTTPMode or InteractiveMode with KAI, an integer tier and mode hard or soft, or start "
    "the operator with the scheduler the labels are for.",
    when={
        "error": "the render's KubeRay operator runs the scheduler that refuses the object",
        "warning": "topology labels KubeRay's volcano plugin cannot use, or scheduler labels "
        "the render's operator ignores",
    },
    kinds=("RayCluster", "RayJob"),
    applies=_ray,
)
def batch_scheduler_support(doc: Document, ctx: Context) -> Iterator[Violation]:
    scheduler = _render_scheduler(ctx)
    labels = _labels(doc)
    spec = mapping(doc.obj.get("spec"))
    originated = labels.get("ray.io/originated-from-crd") == "RayJob"
    topology = _topology_problem(labels)
    own_group = not (doc.kind == "RayCluster" and originated)  # a RayJob's cluster has none
    if topology and own_group:
        label, why = topology
        if scheduler == "volcano":
            yield Violation(f"{why}; the {doc.kind} never gets pods", ("metadata", "labels", label))
        elif scheduler is None:
            yield Violation(
                f"{why} (with the operator's volcano batch scheduler the {doc.kind} never "
                "gets pods)",
                ("metadata", "labels", label),
                severity=WARNING,
            )
    if TOPOLOGY_TIER_LABEL in labels and TOPOLOGY_MODE_LABEL not in labels:
        yield Violation(
            f"{TOPOLOGY_TIER_LABEL} without {TOPOLOGY_MODE_LABEL}: KubeRay reads the tier only "
            "with a mode, so the PodGroup gets no network topology",
            ("metadata", "labels", TOPOLOGY_TIER_LABEL),
            severity=WARNING,
        )
    if (
        doc.kind == "RayJob"
        and scheduler == "volcano"
        and not isinstance(spec.get("rayClusterSpec"), dict)
        and mapping(spec.get("clusterSelector"))
    ):
        yield Violation(
            "a clusterSelector RayJob with the operator's volcano batch scheduler: KubeRay "
            "refuses to gang it and the RayJob stays Initializing",
            ("spec", "clusterSelector"),
        )
    queue = labels.get(VOLCANO_QUEUE_LABEL)
    if (
        scheduler == "volcano"
        and own_group
        and queue
        and queue != "default"
        and not _templated(queue)
    ):
        queues = ctx.memo("kuberay-volcano-queues", lambda: _volcano_queue_names(ctx))
        if (queues or ctx.has_platform) and str(queue) not in queues:
            yield Violation(
                f"no Volcano Queue {queue!r}: Volcano's PodGroup webhook refuses the PodGroup "
                f"KubeRay makes, and the {doc.kind} never gets pods",
                ("metadata", "labels", VOLCANO_QUEUE_LABEL),
            )
    mode = spec.get("submissionMode", "K8sJobMode")
    if doc.kind == "RayJob" and scheduler == "kai-scheduler" and mode == "K8sJobMode":
        yield Violation(
            "a K8sJobMode RayJob with the operator's kai-scheduler batch scheduler: KubeRay "
            "refuses it and the RayJob stays Initializing",
            ("spec", "submissionMode"),
        )
    if scheduler is not None and scheduler != "volcano":
        for label in (VOLCANO_QUEUE_LABEL, RAY_PRIORITY_LABEL):
            if labels.get(label):
                yield Violation(
                    f"{label} is read only by KubeRay's volcano batch scheduler, and the "
                    f"operator runs {scheduler or 'none'}: the label is ignored",
                    ("metadata", "labels", label),
                    severity=WARNING,
                )


def _volcano_queue_names(ctx: Context) -> frozenset[str]:
    return frozenset(
        d.name for d in ctx.of_kind("Queue") if d.api_version.startswith("scheduling.volcano.sh/")
    )


def _serve_ports(cluster: dict[str, Any]) -> list[str] | None:
    """The names KubeRay gives the head container's ports, or None when it declares none
    (KubeRay then uses its defaults, serve among them) or one is templated."""
    ports = dicts(_head_container(cluster).get("ports"))
    if not ports:
        return None
    names = []
    for port in ports:
        name = port.get("name") or f"{port.get('containerPort')}-port"
        if _templated(name) or _templated(port.get("containerPort")):
            return None
        names.append(str(name))
    return names


@resource_rule(
    id="kuberay-serve-port",
    severity=ERROR,
    source=(
        SERVICE_GO + "#L214-L231",
        SERVICE_GO + "#L277-L280",
        SERVICE_GO + "#L446-L450",
        KUBERAY17 + "controllers/ray/raycluster_controller.go#L359-L378",
    ),
    title="A Ray head that serves traffic has a port named serve",
    why="KubeRay builds the Ray Serve Service from the head container's ports named serve or "
    "serve-<anything>; when the head declares ports and none is so named, building the "
    "Service fails ('Please specify a port named serve'): a RayService without "
    "spec.serveService never gets its Services and never becomes ready, and a RayCluster "
    "annotated ray.io/enable-serve-service: 'true' stops reconciling before it creates any "
    "pod.",
    fix="Name the Serve port of the head's Ray container serve (or serve-grpc, ...), or give "
    "the RayService a spec.serveService.",
    kinds=("RayService", "RayCluster"),
    applies=_ray,
)
def serve_port(doc: Document, ctx: Context) -> Iterator[Violation]:
    cluster, base = _cluster_spec(doc)
    if cluster is None:
        return
    if doc.kind == "RayService" and mapping(doc.obj.get("spec")).get("serveService") is not None:
        return
    annotations = mapping(doc.metadata.get("annotations"))
    if doc.kind == "RayCluster" and str(annotations.get(SERVE_SERVICE_ANNOTATION)) != "true":
        return
    names = _serve_ports(cluster)
    if names is None or any(n == "serve" or n.startswith("serve-") for n in names):
        return
    effect = (
        "the RayService never gets its Services"
        if doc.kind == "RayService"
        else "the RayCluster creates no pods"
    )
    yield Violation(
        f"the head container's ports are {', '.join(names)}, none named serve or serve-*: "
        f"KubeRay cannot build the serve Service and {effect}",
        (*base, "headGroupSpec", "template", "spec", "containers", 0, "ports"),
    )
