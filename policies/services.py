"""Services as rendezvous uses them: a pod's hostname.subdomain resolves through a headless
Service named after the subdomain that selects the pod.

The cluster DNS publishes A records for <hostname>.<subdomain>.<namespace>.svc only from
the endpoints of a headless Service (clusterIP: None) of that name in the pod's namespace
that selects the pod, and only for Ready pods unless the Service publishes not-ready
addresses (Kubernetes v1.35 DNS for Services and Pods; the EndpointSlice controller).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, needs, pod_rule
from trainops.policy.pods import PodTemplate, argv, effective_labels, env_of, mapping

from . import commandline, common

POD_DNS = (
    "https://v1-35.docs.kubernetes.io/docs/concepts/services-networking/dns-pod-service/"
    "#pod-hostname-and-subdomain-field"
)
HEADLESS = (
    "https://v1-35.docs.kubernetes.io/docs/concepts/services-networking/service/#headless-services"
)


# Labels controllers add to a job's pods that their templates do not carry: a selector on
# one of them cannot be decided from the render.
CONTROLLER_LABELS = (
    "batch.kubernetes.io/",
    "job-name",
    "controller-uid",
    "jobset.sigs.k8s.io/",
    "training.kubeflow.org/",
    "trainer.kubeflow.org/",
    "volcano.sh/",
    "leaderworkerset.sigs.k8s.io/",
    "statefulset.kubernetes.io/",
    "apps.kubernetes.io/pod-index",
    "pod-template-hash",
    "kubeflow.org/",
    "ray.io/",
)
MISSING = object()


def _controller_label(key: str) -> bool:
    return any(key == p or key.startswith(p) for p in CONTROLLER_LABELS)


def selects(selector: Any, labels: dict[str, Any]) -> bool | None:
    """Whether a label selector matches `labels`; None when it depends on a label a
    controller adds."""
    selector = mapping(selector)
    unknown = False
    for key, value in mapping(selector.get("matchLabels")).items():
        present = labels.get(key, MISSING)
        if present is MISSING and _controller_label(str(key)):
            unknown = True
        elif present is MISSING or str(present) != str(value):
            return False
    for expression in selector.get("matchExpressions") or []:
        expression = mapping(expression)
        key, operator = str(expression.get("key")), expression.get("operator")
        values = [str(v) for v in expression.get("values") or []]
        if key not in labels and _controller_label(key):
            unknown = True
            continue
        value = str(labels[key]) if key in labels else None
        holds = {
            "In": value is not None and value in values,
            "NotIn": value is None or value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }.get(str(operator), True)
        if not holds:
            return False
    return None if unknown else True


def _subdomain(pod: PodTemplate) -> Any:
    """The pod's subdomain: its own, or a StatefulSet's serviceName (which the controller
    sets as its pods' subdomain)."""
    if pod.doc.kind == "StatefulSet" and not pod.spec.get("subdomain"):
        return mapping(pod.doc.obj.get("spec")).get("serviceName")
    return pod.spec.get("subdomain")


@needs("subdomain", kinds=("StatefulSet",))
def has_subdomain(pod: PodTemplate) -> bool:
    """Pods with a subdomain (a StatefulSet's pods get its serviceName)."""
    return bool(_subdomain(pod))


def _service(pod: PodTemplate, ctx: Context) -> Document | None:
    subdomain = _subdomain(pod)
    if not isinstance(subdomain, str) or not subdomain or not pod.doc.namespace:
        return None
    found = ctx.find("Service", subdomain, pod.doc.namespace)
    return found if found is not None and found.namespace == pod.doc.namespace else None


def _names_subdomain(pod: PodTemplate, subdomain: str) -> bool:
    """Whether a container reaches a pod by <hostname>.<subdomain> (args, command or env)."""
    pattern = re.compile(rf"[a-z0-9]([-a-z0-9]*[a-z0-9])?\.{re.escape(subdomain)}(\b|$)")
    for container in pod.containers:
        words = [*argv(container), *(str(v) for v in env_of(container).values() if v)]
        if any(pattern.search(word) for word in words):
            return True
    return False


@pod_rule(
    id="subdomain-service-headless",
    severity=ERROR,
    title="A pod's subdomain is a headless Service that selects the pod",
    why="A pod's <hostname>.<subdomain> (a StatefulSet pod's <pod>.<serviceName>) resolves "
    "only when a headless Service (clusterIP: None) of that name, in the pod's namespace, "
    "has the pod among its "
    "endpoints: a Service with a cluster IP gets one record for the Service, not one per "
    "pod, and a Service whose selector does not match the pod's labels (or that has no "
    "selector) has no endpoints for it. Ranks dialling rank 0 by that name retry until the "
    "rendezvous times out.",
    fix="Make the Service headless (clusterIP: None) and select labels every pod of the job "
    "carries (e.g. the job-name label).",
    applies=has_subdomain,
    source=(POD_DNS, HEADLESS),
    when={
        "error": "a container of the pod names a host in the subdomain (its rendezvous)",
        "warning": "nothing in the pod names a host in the subdomain",
    },
)
def subdomain_service_headless(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    service = _service(pod, ctx)
    if service is None:
        return
    spec = mapping(service.obj.get("spec"))
    subdomain = str(_subdomain(pod))
    severity = ERROR if _names_subdomain(pod, subdomain) else WARNING
    at = (*pod.path, "subdomain") if pod.spec.get("subdomain") else ("spec", "serviceName")
    if spec.get("type", "ClusterIP") == "ClusterIP" and spec.get("clusterIP") != "None":
        yield Violation(
            f"Service {subdomain} is not headless (clusterIP {spec.get('clusterIP', 'allocated')})"
            ": DNS has no record per pod",
            at,
            severity=severity,
        )
    elif spec.get("type", "ClusterIP") != "ClusterIP":
        yield Violation(
            f"Service {subdomain} is of type {spec['type']}, not a headless ClusterIP Service",
            at,
            severity=severity,
        )
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not selector:
        yield Violation(
            f"Service {subdomain} has no selector, so no endpoints for the pod's hostname",
            at,
            severity=severity,
        )
    elif selects({"matchLabels": selector}, effective_labels(pod)) is False:
        yield Violation(
            f"Service {subdomain} selects {selector}, which the pod's labels do not match",
            at,
            severity=severity,
        )


@pod_rule(
    id="subdomain-service-not-ready",
    severity=WARNING,
    title="A job's headless Service publishes its pods before they are Ready",
    why="DNS records of a headless Service's pods appear only once the pods are Ready unless "
    "the Service sets publishNotReadyAddresses: true. Training pods with a readiness probe "
    "that passes only after the job has formed (or a long initial delay) cannot look each "
    "other up during rendezvous.",
    fix="Set publishNotReadyAddresses: true on the Service the pods use as their subdomain "
    "(as JobSet does for its own).",
    applies=has_subdomain,
    source=HEADLESS,
)
def subdomain_service_not_ready(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    service = _service(pod, ctx)
    if service is None or mapping(service.obj.get("spec")).get("publishNotReadyAddresses"):
        return
    for index, container in enumerate(pod.containers):
        if container.get("readinessProbe"):
            yield Violation(
                f"container {container.get('name')} has a readiness probe and Service "
                f"{service.name} does not publish not-ready addresses: peers cannot resolve "
                "the pod until it is Ready",
                (*pod.container_path(index), "readinessProbe"),
            )
            return


SERVICE_PORTS = (
    "https://v1-35.docs.kubernetes.io/docs/concepts/services-networking/service/#defining-a-service"
)
TORCHRUN_DOCS = "https://docs.pytorch.org/docs/2.9/elastic/run.html"
_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# torchrun's default ports: --master-port for the static rendezvous, the c10d endpoint's.
STATIC_PORT, C10D_PORT = 29500, 29400


def _endpoints(container: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """(host, port) of the rendezvous endpoints a container dials."""
    env = env_of(container)

    def resolve(value: Any) -> str:
        return _VARIABLE.sub(lambda m: str(env.get(m.group(1)) or m.group(0)), str(value))

    if commandline.runs_torchrun(container):
        words = commandline.words(container)
        address, _ = commandline.flag(words, "--master-addr", "--master_addr")
        port, _ = commandline.flag(words, "--master-port", "--master_port")
        if address is not None:
            yield resolve(address), _port(resolve(port) if port is not None else STATIC_PORT)
        endpoint, _ = commandline.flag(words, "--rdzv-endpoint", "--rdzv_endpoint")
        if endpoint is not None:
            host, _, given = resolve(endpoint).partition(":")
            yield host, _port(given or C10D_PORT)
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        yield resolve(env["MASTER_ADDR"]), _port(resolve(env["MASTER_PORT"]))


def _port(value: Any) -> int:
    text = str(value).strip()
    return int(text) if text.isdigit() else -1


def _service_name(host: str, namespace: str) -> tuple[str, str] | None:
    """(Service, namespace) a host name reaches through cluster DNS, when it names one."""
    labels = host.lower().rstrip(".").split(".")
    if len(labels) == 1:
        return labels[0], namespace
    if len(labels) == 2 and labels[1] == namespace:
        return labels[0], namespace
    if len(labels) >= 3 and labels[2] == "svc":
        return labels[0], labels[1]
    return None


@pod_rule(
    id="rendezvous-service-port",
    severity=ERROR,
    title="A Service used as the rendezvous address forwards the rendezvous port",
    why="A Service with a cluster IP forwards only the ports it lists, each to its "
    "targetPort: ranks dialling the rendezvous through a Service that does not list the "
    "master port (torchrun's --master-port, 29500 by default; 29400 for a c10d endpoint), "
    "or that forwards it to another port, are refused or never answered, and wait until "
    "the rendezvous times out.",
    fix="List the rendezvous port in the Service's ports with the same targetPort, or dial "
    "rank 0's pod hostname through a headless Service.",
    applies=common.torch_rendezvous,
    source=(SERVICE_PORTS, TORCHRUN_DOCS),
)
def rendezvous_service_port(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.doc.kind == "PyTorchJob" or not pod.doc.namespace:
        return  # the training operator points the ranks at a Service it makes
    for index, container in enumerate(pod.containers):
        for host, port in dict.fromkeys(_endpoints(container)):
            found = _service_name(host, pod.doc.namespace) if "$" not in host else None
            service = ctx.find("Service", found[0], found[1]) if found and port > 0 else None
            if service is None or service.namespace != found[1]:
                continue
            spec = mapping(service.obj.get("spec"))
            if spec.get("clusterIP") == "None" or spec.get("type") == "ExternalName":
                continue  # DNS answers with the pods' own addresses
            ports = [mapping(p) for p in spec.get("ports") or []]
            entry = next((p for p in ports if p.get("port") == port), None)
            if entry is None:
                listed = ", ".join(str(p.get("port")) for p in ports) or "none"
                yield Violation(
                    f"{host}:{port} goes through Service {service.name}, which forwards "
                    f"ports {listed}, not {port}",
                    pod.container_path(index),
                )
            elif isinstance(entry.get("targetPort"), int) and entry["targetPort"] != port:
                yield Violation(
                    f"{host}:{port} goes through Service {service.name}, which forwards "
                    f"port {port} to {entry['targetPort']}, where rank 0 does not listen",
                    pod.container_path(index),
                )
