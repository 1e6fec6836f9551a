"""Sidecars in training pods: whether Istio injects one, and what sidecars do to a job.

From Istio's own code at 1.30.3: the injection webhook's selectors (a namespace's
istio-injection label, only `enabled` injecting, wins over istio.io/rev; a pod's
sidecar.istio.io/inject label, not its annotation, opts it in where the namespace says
nothing), `injectRequired` (only "true" and "false" count; any other value falls back to the
namespace's policy), the annotations `validateAnnotations` checks (an invalid value makes the
webhook refuse the pod), and the injection template (`sidecar.istio.io/nativeSidecar:
"false"` makes istio-proxy an ordinary container, which never exits, so a Job's pod never
completes, and whose init container redirects the traffic of the pod's own init
containers to a proxy that is not running yet). The same holds for any proxy or log agent
a Job's pod runs as an ordinary container rather than as a native sidecar (an init
container with restartPolicy: Always).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, needs, pod_rule, resource_rule
from trainops.policy.pods import (
    REPLICA_FIELDS,
    TRAINING_KINDS,
    PodTemplate,
    argv,
    effective_labels,
    mapping,
)

from . import common

TAG = "https://github.com/istio/istio/blob/1.30.3/"
INJECT_REQUIRED = TAG + "pkg/kube/inject/inject.go#L223-L240"
SELECTORS = (
    TAG + "manifests/charts/istio-control/istio-discovery/templates/mutatingwebhook.yaml#L64-L145"
)
VALIDATE = TAG + "pkg/kube/inject/validate.go#L40-L81"
REFUSED = TAG + "pkg/kube/inject/webhook.go#L1198-L1202"
TEMPLATE = TAG + "manifests/charts/istio-control/istio-discovery/files/injection-template.yaml"
POD_PHASE = "https://v1-35.docs.kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-phase"

INJECT = "sidecar.istio.io/inject"
NAMESPACE_LABEL = "istio-injection"
REVISION = "istio.io/rev"
NATIVE = "sidecar.istio.io/nativeSidecar"
# Kinds whose pods are meant to run to completion.
JOB_KINDS = {"Job", "CronJob", "JobSet", "Pod", *TRAINING_KINDS}
PORT_LISTS = (
    "traffic.sidecar.istio.io/excludeInboundPorts",
    "traffic.sidecar.istio.io/excludeOutboundPorts",
    "traffic.sidecar.istio.io/includeInboundPorts",
)
CIDR_LISTS = (
    "traffic.sidecar.istio.io/excludeOutboundIPRanges",
    "traffic.sidecar.istio.io/includeOutboundIPRanges",
)
QUANTITIES = (
    "sidecar.istio.io/proxyCPU",
    "sidecar.istio.io/proxyMemory",
    "sidecar.istio.io/proxyCPULimit",
    "sidecar.istio.io/proxyMemoryLimit",
)
UINTS = (
    "readiness.status.sidecar.istio.io/initialDelaySeconds",
    "readiness.status.sidecar.istio.io/periodSeconds",
    "readiness.status.sidecar.istio.io/failureThreshold",
)
VALIDATED = (
    *PORT_LISTS,
    *CIDR_LISTS,
    *QUANTITIES,
    *UINTS,
    "sidecar.istio.io/interceptionMode",
    "status.sidecar.istio.io/port",
    "prometheus.istio.io/merge-metrics",
)
GO_BOOLS = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
QUANTITY = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
CIDR = re.compile(r"^(\d{1,3}(\.\d{1,3}){3}/\d{1,2}|[0-9a-fA-F:]+/\d{1,3})$")


def injection(pod: PodTemplate, ctx: Context) -> str | None:
    """Why Istio injects a sidecar into this pod ("" when it does not, None when the render
    cannot tell)."""
    if pod.spec.get("hostNetwork") is True:
        return ""
    label = pod.labels.get(INJECT)
    value = str(label) if label is not None else str(pod.annotations.get(INJECT, ""))
    if value == "false":
        return ""
    namespace = common.pod_namespace(pod)
    ns = ctx.find("Namespace", namespace) if namespace else None
    labels = mapping(ns.metadata.get("labels")) if ns is not None else None
    if labels is not None and NAMESPACE_LABEL in labels:
        enabled = labels[NAMESPACE_LABEL] == "enabled"
        return "the namespace's istio-injection label" if enabled else ""
    if labels is not None and REVISION in labels:
        return f"the namespace's {REVISION} label"
    if label is not None and str(label) == "true":
        return f"the pod's {INJECT} label"
    if pod.labels.get(REVISION):
        return f"the pod's {REVISION} label"
    return "" if labels is not None else None


def sets_inject(pod: PodTemplate) -> bool:
    """Pods that set sidecar.istio.io/inject (a template label is not among the names the
    engine indexes, so this predicate declares no `needs`)."""
    return INJECT in pod.annotations or INJECT in pod.labels


@pod_rule(
    id="istio-inject-value",
    severity=WARNING,
    title='sidecar.istio.io/inject is "true" or "false", on the pod\'s labels',
    why='Istio\'s injector accepts only the strings "true" and "false"; any other value '
    "(False, no, disabled, enabled) falls back to the namespace's policy, so a pod meant to "
    "run without a sidecar gets one in an injecting namespace. The annotation form only counts "
    "once the namespace injects: the webhook selects pods by the label.",
    fix='Set the label sidecar.istio.io/inject: "false" (or "true") on the pod template.',
    applies=sets_inject,
    source=(INJECT_REQUIRED, SELECTORS),
)
def inject_value(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    meta = (*pod.path[:-1], "metadata")
    for where, values in (("labels", pod.labels), ("annotations", pod.annotations)):
        value = values.get(INJECT)
        if value is not None and str(value) not in ("true", "false"):
            yield Violation(
                f'{INJECT}: {value!r} in the pod\'s {where} is neither "true" nor "false": '
                "Istio falls back to the namespace's injection policy",
                (*meta, where, INJECT),
            )
    if str(pod.annotations.get(INJECT)) == "true" and INJECT not in pod.labels:
        namespace = common.pod_namespace(pod)
        ns = ctx.find("Namespace", namespace) if namespace else None
        labels = mapping(ns.metadata.get("labels")) if ns is not None else None
        if (
            labels is not None
            and labels.get(NAMESPACE_LABEL) != "enabled"
            and REVISION not in labels
        ):
            yield Violation(
                f'{INJECT}: "true" is an annotation and Namespace {namespace} does not inject: '
                "the webhook selects pods by the label, so no sidecar is injected",
                (*meta, "annotations", INJECT),
            )


@resource_rule(
    id="istio-namespace-injection-label",
    severity=WARNING,
    title="A namespace's Istio injection labels select what they mean",
    why="Istio's webhooks inject into a namespace labelled istio-injection: enabled and none "
    "other (true, yes, on inject nothing, and pods there are not injected even with their own "
    "label); and where istio-injection is set, istio.io/rev is ignored, so the namespace gets "
    "the default revision, not the one named.",
    fix="Use istio-injection: enabled (or disabled), or only istio.io/rev: <revision>.",
    kinds=("Namespace",),
    source=SELECTORS,
)
def namespace_injection_label(doc: Document, ctx: Context) -> Iterator[Violation]:
    labels = mapping(doc.metadata.get("labels"))
    value = labels.get(NAMESPACE_LABEL)
    if value is None:
        return
    if str(value) not in ("enabled", "disabled"):
        yield Violation(
            f'{NAMESPACE_LABEL}: {value!r}: only "enabled" injects; this namespace gets no '
            "sidecars and its pods cannot opt in",
            ("metadata", "labels", NAMESPACE_LABEL),
        )
    if REVISION in labels:
        yield Violation(
            f"both {NAMESPACE_LABEL} and {REVISION}: {labels[REVISION]!r}: the revision is "
            f"ignored while {NAMESPACE_LABEL} is set",
            ("metadata", "labels", REVISION),
        )


def _port_list(value: str) -> str | None:
    """parsePorts: comma-separated ports, each trimmed; empty means none."""
    for port in value.strip().split(",") if value.strip() else []:
        if not port.strip().isdigit() or int(port.strip()) > 65535:
            return f"{port!r} is not a port number"
    return None


def _cidr_list(value: str) -> str | None:
    """validateCIDRList: netip.ParsePrefix on each comma-separated entry, untrimmed."""
    for cidr in value.split(",") if value else []:
        if not CIDR.match(cidr):
            return f"{cidr!r} is not a CIDR (address/prefix, no spaces)"
    return None


def _annotation_problem(name: str, value: str) -> str | None:
    """Why `validateAnnotations` refuses the value of annotation `name`, or None."""
    if name in PORT_LISTS:
        wildcard = name.endswith("includeInboundPorts") and value.strip() == "*"
        return None if wildcard else _port_list(value)
    if name in CIDR_LISTS:
        wildcard = name.endswith("includeOutboundIPRanges") and value == "*"
        return None if wildcard else _cidr_list(value)
    checks = {
        **dict.fromkeys(QUANTITIES, (QUANTITY.match, "not a resource quantity")),
        **dict.fromkeys(UINTS, (str.isdigit, "not a non-negative integer")),
        "sidecar.istio.io/interceptionMode": (
            lambda v: v in ("REDIRECT", "TPROXY", "NONE"),
            "not REDIRECT, TPROXY or NONE",
        ),
        "status.sidecar.istio.io/port": (
            lambda v: v.strip().isdigit() and int(v.strip()) <= 65535,
            "not a port number",
        ),
        "prometheus.istio.io/merge-metrics": (lambda v: v in GO_BOOLS, "not a boolean"),
    }
    check, problem = checks[name]
    return None if check(value) else problem


@needs(*VALIDATED)
def sets_validated(pod: PodTemplate) -> bool:
    return any(name in pod.annotations for name in VALIDATED)


@pod_rule(
    id="istio-annotation-invalid",
    severity=ERROR,
    title="Istio sidecar annotations have values the injector accepts",
    why="Istio's injector validates the traffic and proxy annotations of each pod it injects "
    "(excludeInboundPorts, excludeOutboundPorts and includeInboundPorts as comma-separated "
    "ports, IP ranges as CIDRs, proxy resources as quantities, interceptionMode); one invalid "
    "value fails the injection and the webhook, which fails closed, refuses the pod.",
    fix='Write ports as "29500,29400", ranges as "10.0.0.0/8,192.168.0.0/16" (no spaces), '
    'resources as "500m" or "1Gi".',
    applies=sets_validated,
    source=(VALIDATE, REFUSED),
    when={
        "error": "the render shows Istio injects the pod (its namespace's labels or its own)",
        "warning": "the render does not show whether the pod is injected",
    },
)
def annotation_invalid(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    why = injection(pod, ctx)
    if why == "":
        return
    for name in VALIDATED:
        value = pod.annotations.get(name)
        problem = _annotation_problem(name, str(value)) if value is not None else None
        if problem:
            yield Violation(
                f"{name}: {value!r}: {problem}; Istio's webhook refuses the pod it injects",
                (*pod.path[:-1], "metadata", "annotations", name),
                severity=ERROR if why else WARNING,
            )


@needs(NATIVE)
def non_native(pod: PodTemplate) -> bool:
    return str(pod.annotations.get(NATIVE)) == "false"


# Per training kind, the replica roles whose pods' completion completes the job (any other
# role's pods are deleted or left running when it is done): the launcher of an MPIJob, a
# job's Master or Chief where it has one.
DECIDING_ROLES = {"MPIJob": ("Launcher",)}
LEADING_ROLES = ("Master", "Chief")


def decides_completion(pod: PodTemplate, ctx: Context) -> bool:
    """Whether the job completes only once this pod's containers have all terminated."""
    kind = pod.doc.kind
    if kind == "Pod":
        return pod.spec.get("restartPolicy", "Always") != "Always"
    if kind not in JOB_KINDS:
        return False
    if kind in DECIDING_ROLES:
        return pod.role in DECIDING_ROLES[kind]
    if kind in REPLICA_FIELDS:
        roles = {p.role for p in ctx.pods(pod.doc)}
        leaders = roles.intersection(LEADING_ROLES)
        return pod.role in leaders if leaders else True
    spec = mapping(pod.doc.obj.get("spec"))
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
        spec = mapping(mapping(spec.get("template")).get("spec"))
    targets = mapping(spec.get("successPolicy")).get("targetReplicatedJobs")
    if kind != "Job" and isinstance(targets, list) and targets:
        return pod.role in {str(t) for t in targets}
    return True


def _quits_proxy(pod: PodTemplate) -> bool:
    """A container that tells the proxy to exit when it is done (pilot-agent's quitquitquit)."""
    return any("quitquitquit" in " ".join(argv(c)) for c in pod.containers)


@pod_rule(
    id="istio-sidecar-job-completion",
    severity=ERROR,
    title="Job pods with an Istio sidecar can complete",
    why='With sidecar.istio.io/nativeSidecar: "false" Istio injects istio-proxy as an '
    "ordinary container, which runs until it is told to stop; a pod is Succeeded only when "
    "all its containers have terminated, so when training exits the pod stays Running and "
    "the Job, JobSet or training job never completes (and holds its GPUs).",
    fix="Leave nativeSidecar unset (Istio >= 1.27 injects a native sidecar on Kubernetes >= "
    '1.33), label the pod sidecar.istio.io/inject: "false", or end the main command with '
    "curl -X POST localhost:15020/quitquitquit.",
    applies=non_native,
    source=(TEMPLATE + "#L29", TEMPLATE + "#L184-L193", POD_PHASE),
    when={
        "error": "the render shows Istio injects the pod (its namespace's labels or its own)",
        "warning": "the render does not show whether the pod is injected",
    },
)
def sidecar_job_completion(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    why = injection(pod, ctx)
    if not decides_completion(pod, ctx) or why == "" or _quits_proxy(pod):
        return
    yield Violation(
        f'{NATIVE}: "false" makes istio-proxy a regular container of this {pod.doc.kind} '
        "pod: it keeps running after training exits, so the pod never completes",
        (*pod.path[:-1], "metadata", "annotations", NATIVE),
        severity=ERROR if why else WARNING,
    )


@pod_rule(
    id="istio-init-container-network",
    severity=WARNING,
    title="Init containers of a pod with an Istio sidecar can reach the network",
    why="With an ordinary (not native) istio-proxy, istio-init installs the traffic "
    "redirection before the pod's own init containers run, and the proxy starts only after "
    "them: their outbound connections (downloading a dataset or model, waiting for the "
    "rendezvous host) go to a proxy that is not listening and fail.",
    fix="Leave sidecar.istio.io/nativeSidecar unset, run the init container as UID 1337, or "
    "exclude its destinations with traffic.sidecar.istio.io/excludeOutboundIPRanges.",
    applies=non_native,
    source=TEMPLATE,
)
def init_container_network(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if injection(pod, ctx) == "":
        return
    for index, init in enumerate(pod.spec.get("initContainers") or []):
        init = mapping(init)
        if init.get("restartPolicy") == "Always":
            continue
        uid = mapping(init.get("securityContext")).get("runAsUser")
        if uid == 1337:
            continue
        yield Violation(
            f"init container {init.get('name')} runs before the non-native istio-proxy, with "
            "its traffic already redirected to it",
            (*pod.path, "initContainers", index),
        )


HOLD = re.compile(r"holdApplicationUntilProxyStarts\s*:\s*true", re.IGNORECASE)


@pod_rule(
    id="istio-proxy-start-order",
    severity=WARNING,
    title="Training containers beside a non-native Istio proxy wait for it to start",
    why='With sidecar.istio.io/nativeSidecar: "false" the proxy is an ordinary container '
    "started together with the trainer, and Istio holds the trainer back only when "
    "holdApplicationUntilProxyStarts is on (off by default); the first connections (the "
    "rendezvous, a dataset download) leave before the proxy listens and are refused, and a "
    "launcher that does not retry fails the pod.",
    fix="Leave nativeSidecar unset, or annotate the pod with proxy.istio.io/config: "
    "'{ holdApplicationUntilProxyStarts: true }'.",
    applies=non_native,
    source=TEMPLATE + "#L71-L73",
)
def proxy_start_order(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if (not pod.training and not pod.uses_gpus) or injection(pod, ctx) == "":
        return
    if HOLD.search(str(pod.annotations.get("proxy.istio.io/config", ""))):
        return
    yield Violation(
        "the non-native istio-proxy starts with the trainer and nothing holds the trainer until "
        "the proxy is ready",
        (*pod.path[:-1], "metadata", "annotations", NATIVE),
    )


def _peer_policies(ctx: Context) -> dict[str, list[Document]]:
    found: dict[str, list[Document]] = {}
    for doc in ctx.of_kind("PeerAuthentication"):
        found.setdefault(doc.namespace or "default", []).append(doc)
    return found


def _mode(policy: Document) -> str:
    return str(mapping(mapping(policy.obj.get("spec")).get("mtls")).get("mode") or "UNSET")


def _selector(policy: Document) -> dict[str, Any]:
    return mapping(mapping(mapping(policy.obj.get("spec")).get("selector")).get("matchLabels"))


def effective_mtls(
    namespace: str, labels: dict[str, Any], ctx: Context
) -> tuple[str, Document | None]:
    """The mTLS mode Istio applies to a workload, and the policy it comes from: a policy
    selecting the workload beats its namespace's, which beats the root namespace's
    (istio-system); UNSET inherits from the next."""
    policies = ctx.memo("istio-peer-authentication", lambda: _peer_policies(ctx))
    own = policies.get(namespace, [])
    selecting = [
        p
        for p in own
        if _selector(p) and all(str(labels.get(k)) == str(v) for k, v in _selector(p).items())
    ]
    namespace_wide = [p for p in own if not _selector(p)]
    root = [p for p in policies.get("istio-system", []) if not _selector(p)]
    for level in (selecting, namespace_wide, root):
        for policy in level:
            if _mode(policy) != "UNSET":
                return _mode(policy), policy
    return "PERMISSIVE", None


@pod_rule(
    id="istio-strict-mtls-training",
    severity=WARNING,
    title="Strict mTLS does not sit between the ranks of a training job",
    why="NCCL's bootstrap and socket transport, Gloo and the torch rendezvous connect to "
    "ephemeral ports that no Service declares; through Istio sidecars such connections leave "
    "as plain TCP passthrough, and a STRICT PeerAuthentication makes the receiving sidecar "
    "refuse them, so the ranks cannot connect (and where they do, every collective byte goes "
    "through two proxies).",
    fix='Label the training pods sidecar.istio.io/inject: "false", or give them a '
    "PeerAuthentication of their own with mode PERMISSIVE or DISABLE.",
    applies=common.training_pod,
    render_needs=("PeerAuthentication",),
)
def strict_mtls_training(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    namespace = common.pod_namespace(pod)
    if namespace is None or not common.multi_node(pod, ctx) or not injection(pod, ctx):
        return
    mode, policy = effective_mtls(namespace, effective_labels(pod), ctx)
    if mode == "STRICT" and policy is not None:
        yield Violation(
            f"PeerAuthentication {policy.namespace}/{policy.name} (STRICT) covers the "
            f"sidecar-injected pods of multi-node {pod.doc.kind} {pod.doc.name}",
            pod.path,
        )


SIDECARS_DOC = (
    "https://v1-35.docs.kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/"
    "#jobs-with-sidecar-containers"
)
# Images of daemons that run until they are stopped: mesh proxies, database proxies, log
# shippers (repository path, without registry host or tag).
DAEMON_IMAGE = re.compile(
    r"(^|/)(istio/proxyv2|envoyproxy/envoy(-distroless)?|linkerd/proxy|cloud-sql-proxy|"
    r"cloudsql-proxy|fluent-bit|fluentd|timberio/vector|promtail|otel/"
    r"opentelemetry-collector(-contrib)?)$"
)


def _repository(image: str) -> str:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name.rsplit(":", 1)[0]
    return name


@pod_rule(
    id="job-sidecar-container",
    severity=ERROR,
    title="Proxies and log agents in Job pods run as native sidecars",
    why="A pod is Succeeded only when all its containers have terminated; a mesh proxy, "
    "database proxy or log shipper listed under containers runs until it is stopped, so when "
    "training exits the pod stays Running and the Job, JobSet or training job never "
    "completes. An init container with restartPolicy: Always (a native sidecar) is stopped "
    "after the main containers instead.",
    fix="Move the container to initContainers with restartPolicy: Always (Kubernetes >= 1.29), "
    "or have the main command stop it when training ends.",
    kinds=tuple(sorted(JOB_KINDS)),
    source=(POD_PHASE, SIDECARS_DOC),
)
def job_sidecar_container(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    containers = pod.containers
    if len(containers) < 2 or _quits_proxy(pod) or not decides_completion(pod, ctx):
        return
    for index, container in enumerate(containers):
        image = container.get("image")
        if isinstance(image, str) and DAEMON_IMAGE.search(_repository(image)):
            yield Violation(
                f"container {container.get('name')} ({image}) runs until it is stopped: the "
                f"{pod.doc.kind}'s pod never completes",
                pod.container_path(index),
            )
