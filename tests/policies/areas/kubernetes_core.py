"""Fixtures of the Kubernetes core rules: Dynamic Resource Allocation requests, selectors and
namespaces, ComputeDomains, headless Services as pod subdomains, NetworkPolicies around a
job, and claims and StorageClasses (policies/dra.py, services.py, network_policy.py,
storage.py, volumes.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import (
    NAMESPACE,
    Docs,
    edit,
    indexed_job,
    job,
    platform,
    pods_of,
    storage_class,
)

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]

# -- Dynamic Resource Allocation ---------------------------------------------------------------


def _request(**exactly: Any) -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8, **exactly}}


def _template(
    request: dict[str, Any] | None = None,
    namespace: str = NAMESPACE,
    name: str = "node-gpus",
    **devices: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request or _request()], **devices}}},
    }


def _claims(*extra: dict[str, Any], template: str = "node-gpus") -> Callable[[], Docs]:
    """The baseline's PyTorchJob with its GPUs from a per-pod claim template."""

    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
            for container in spec["containers"]:
                container["resources"]["claims"] = [{"name": "gpus"}]
        docs.extend(copy.deepcopy(list(extra)))

    return edit(change)


def _selector(expression: str) -> dict[str, Any]:
    return _request(selectors=[{"cel": {"expression": expression}}])


def _namespace(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": labels},
    }


def _device_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }


def _compute_domain(template: str = "imex-channel", name: str = "llama-domain") -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": template}}},
    }


_FIRST_AVAILABLE = {
    "name": "gpu",
    "firstAvailable": [
        {"name": "h100", "deviceClassName": "gpu.nvidia.com", "count": 8},
        {"name": "a100", "deviceClassName": "gpu.nvidia.com", "count": 8},
    ],
}
_QUANTITY_OK = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
_PRODUCT_OK = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'


def _gpu_config(**parameters: Any) -> dict[str, Any]:
    config = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", **parameters}
    return _template(config=[{"opaque": {"driver": "gpu.nvidia.com", "parameters": config}}])


def _mig_config(kind: str) -> dict[str, Any]:
    """A template whose request of the driver's MIG class carries a config of `kind`."""
    config = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind}
    return _template(
        request=_request(deviceClassName="mig.nvidia.com", count=1),
        config=[
            {"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": config}}
        ],
    )


# -- Services as pod subdomains ----------------------------------------------------------------


def _service(name: str = "ddp", headless: bool = True, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"selector": {"app.kubernetes.io/part-of": "trainops"}, **spec}
    if headless:
        body["clusterIP"] = "None"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": body,
    }


def _indexed(*extra: dict[str, Any], probe: bool = False) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = indexed_job(4)
        if probe:
            doc["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
                "tcpSocket": {"port": 29500}
            }
        return [*platform(), doc, *copy.deepcopy(list(extra))]

    return build


def _statefulset() -> dict[str, Any]:
    doc = indexed_job(4)
    template = doc["spec"]["template"]
    template["spec"].pop("subdomain")
    template["spec"]["restartPolicy"] = "Always"
    template["spec"]["containers"][0]["args"][3] = "--master-addr=trainer-0.workers"
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "trainer", "namespace": NAMESPACE},
        "spec": {
            "serviceName": "workers",
            "replicas": 4,
            "selector": {"matchLabels": {"app.kubernetes.io/part-of": "trainops"}},
            "template": template,
        },
    }


def _through_service(port: int, target: int | None = None) -> Callable[[], Docs]:
    """An Indexed Job whose ranks dial rank 0 through a ClusterIP Service."""

    def build() -> Docs:
        doc = indexed_job(4)
        args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
        args[3] = "--master-addr=rendezvous"
        entry: dict[str, Any] = {"name": "c10d", "port": port}
        if target is not None:
            entry["targetPort"] = target
        service = _service("rendezvous", headless=False, ports=[entry])
        return [*platform(), _service(), service, doc]

    return build


# -- NetworkPolicies ---------------------------------------------------------------------------

_PEERS = {"podSelector": {}}  # every pod of the namespace
_DNS = {
    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def _policy(types: list[str], **rules: Any) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "training-isolation", "namespace": NAMESPACE},
        "spec": {"podSelector": {}, "policyTypes": types, **rules},
    }


def _with(*extra: dict[str, Any]) -> Callable[[], Docs]:
    return edit(lambda docs: docs.extend(copy.deepcopy(list(extra))))


def _ingress(ports: list[dict] | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"from": [_PEERS]}
    if ports is not None:
        rule["ports"] = ports
    return _policy(["Ingress"], ingress=[rule])


def _egress(*rules: dict[str, Any]) -> dict[str, Any]:
    return _policy(["Egress"], egress=list(rules))


# -- claims and StorageClasses -----------------------------------------------------------------


def _claim(change: Callable[[dict[str, Any]], None]) -> Callable[[], Docs]:
    def apply(docs: Docs) -> None:
        pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
        change(pvc)

    return edit(apply)


def _classes(*classes: dict[str, Any], claim_class: str | None = None) -> Callable[[], Docs]:
    def apply(docs: Docs) -> None:
        docs.extend(copy.deepcopy(list(classes)))
        if claim_class is not None:
            next(d for d in docs if d["kind"] == "PersistentVolumeClaim")["spec"][
                "storageClassName"
            ] = claim_class

    return edit(apply)


def _cephfs(**fields: Any) -> dict[str, Any]:
    return {**storage_class("cephfs", "cephfs.csi.ceph.com"), **fields}


def _default(name: str) -> dict[str, Any]:
    found = storage_class(name, "cephfs.csi.ceph.com")
    found["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    return found


def _pinned(binding: str) -> Callable[[], Docs]:
    """An Indexed Job whose pods set nodeName and mount the checkpoint claim."""

    def build() -> Docs:
        doc = indexed_job(4)
        doc["spec"]["template"]["spec"]["nodeName"] = "gpu-node-1"
        return [*platform(), _cephfs(volumeBindingMode=binding), _service(), doc]

    return build


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value

    return change


# rule id -> (failing render, passing render)
FIXTURES: dict[str, Pair] = {
    "dra-request-invalid": (
        _claims(_template(_request(allocationMode="All"))),
        _claims(_template(_request(allocationMode="All", count=None))),
    ),
    "dra-selector-cel": (
        _claims(_template(_selector(_PRODUCT_OK.replace("==", "=")))),
        _claims(_template(_selector(_PRODUCT_OK))),
    ),
    "dra-device-class-exists": (
        _claims(
            _device_class("gpu.example.com"), _template(_request(deviceClassName="gpu.exmaple.com"))
        ),
        _claims(
            _device_class("gpu.example.com"), _template(_request(deviceClassName="gpu.example.com"))
        ),
    ),
    "dra-admin-access-namespace": (
        _claims(_namespace(), _template(_request(adminAccess=True))),
        _claims(
            _namespace(**{"resource.kubernetes.io/admin-access": "true"}),
            _template(_request(adminAccess=True)),
        ),
    ),
    "nvidia-dra-gpu-config": (
        _claims(_gpu_config(kind="GPUConfig")),
        _claims(_gpu_config()),
    ),
    "dra-claim-template-exists": (
        _claims(_template(name="node-gpu")),
        _claims(_template(name="node-gpus")),
    ),
    "dra-claim-namespace": (
        _claims(_template(namespace="gpu-claims")),
        _claims(_template()),
    ),
    "computedomain-template-taken": (
        _claims(_compute_domain(), _template(name="imex-channel")),
        _claims(_compute_domain(), _template(name="node-gpus")),
    ),
    "subdomain-service-headless": (
        _indexed(_service(headless=False)),
        _indexed(_service()),
    ),
    "subdomain-service-not-ready": (
        _indexed(_service(), probe=True),
        _indexed(_service(publishNotReadyAddresses=True), probe=True),
    ),
    "rendezvous-service-port": (_through_service(8080), _through_service(29500)),
    "network-policy-invalid": (
        _with(_ingress([{"protocol": "TCP", "endPort": 65535}])),
        _with(_ingress([{"protocol": "TCP", "port": 1, "endPort": 65535}])),
    ),
    "network-policy-job-peers": (
        _with(_ingress([{"protocol": "TCP", "port": 29500}])),
        _with(_ingress(None)),
    ),
    "network-policy-dns-egress": (
        _with(_egress({"to": [_PEERS]})),
        _with(_egress({"to": [_PEERS]}, _DNS)),
    ),
    "pvc-spec-invalid": (
        _claim(_set(("spec", "accessModes"), None)),
        _claim(_set(("spec", "accessModes"), ["ReadWriteMany"])),
    ),
    "storageclass-invalid": (
        _classes(_cephfs(reclaimPolicy="Recycle")),
        _classes(_cephfs(reclaimPolicy="Retain")),
    ),
    "storageclass-one-default": (
        _classes(_default("cephfs"), _default("gp3")),
        _classes(_default("cephfs"), storage_class("gp3", "ebs.csi.aws.com")),
    ),
    "pvc-storage-class-exists": (
        _classes(storage_class("ceph-fs", "cephfs.csi.ceph.com")),
        _classes(_cephfs()),
    ),
    "pvc-wait-for-consumer-node-name": (_pinned("WaitForFirstConsumer"), _pinned("Immediate")),
    "pvc-claim-namespace": (
        _claim(_set(("metadata", "namespace"), "storage")),
        _claim(_set(("metadata", "namespace"), NAMESPACE)),
    ),
    "pvc-volume-mode-use": (
        _claim(_set(("spec", "volumeMode"), "Block")),
        _claim(_set(("spec", "volumeMode"), "Filesystem")),
    ),
}

MORE: dict[str, list[Pair]] = {
    "dra-request-invalid": [
        (  # a device toleration with operator Exists and a value
            _claims(
                _template(
                    _request(
                        tolerations=[{"key": "maintenance", "operator": "Exists", "value": "x"}]
                    )
                )
            ),
            _claims(
                _template(_request(tolerations=[{"key": "maintenance", "operator": "Exists"}]))
            ),
        ),
        (  # both exactly and firstAvailable
            _claims(_template({**_FIRST_AVAILABLE, "exactly": _request()["exactly"]})),
            _claims(_template(_FIRST_AVAILABLE)),
        ),
        (  # the device plugin's resource name as a class
            _claims(_template(_request(deviceClassName="nvidia.com/gpu"))),
            _claims(_template(_request(deviceClassName="gpu.nvidia.com"))),
        ),
        (  # a constraint naming a request the claim lacks
            _claims(
                _template(
                    constraints=[
                        {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
                    ]
                )
            ),
            _claims(
                _template(
                    constraints=[
                        {"requests": ["gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
                    ]
                )
            ),
        ),
        (  # matchAttribute without its domain
            _claims(_template(constraints=[{"matchAttribute": "pcieRoot"}])),
            _claims(_template(constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])),
        ),
        (  # a sub-request of firstAvailable named in a constraint
            _claims(
                _template(
                    _FIRST_AVAILABLE,
                    constraints=[
                        {"requests": ["gpu/b200"], "matchAttribute": "gpu.nvidia.com/uuid"}
                    ],
                )
            ),
            _claims(
                _template(
                    _FIRST_AVAILABLE,
                    constraints=[
                        {"requests": ["gpu/h100"], "matchAttribute": "gpu.nvidia.com/uuid"}
                    ],
                )
            ),
        ),
    ],
    "dra-selector-cel": [
        (  # a capacity compared like a number
            _claims(_template(_selector('device.capacity["gpu.nvidia.com"].memory >= "80Gi"'))),
            _claims(_template(_selector(_QUANTITY_OK))),
        ),
        (  # a field `device` does not have
            _claims(_template(_selector('device.productName == "H100"'))),
            _claims(_template(_selector(_PRODUCT_OK))),
        ),
        (  # attributes without device
            _claims(_template(_selector(_PRODUCT_OK.replace("device.", "")))),
            _claims(_template(_selector(_PRODUCT_OK))),
        ),
        (  # not a boolean
            _claims(_template(_selector('"gpu.nvidia.com"'))),
            _claims(_template(_selector('device.driver == "gpu.nvidia.com"'))),
        ),
    ],
    "nvidia-dra-gpu-config": [
        (
            _claims(_gpu_config(sharing={"strategy": "TimeSliced"})),
            _claims(_gpu_config()),
        ),
        (
            _claims(
                _gpu_config(
                    sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Fast"}}
                )
            ),
            _claims(_gpu_config()),
        ),
        (_claims(_mig_config("GpuConfig")), _claims(_mig_config("MigDeviceConfig"))),
        (
            _claims(
                _gpu_config(
                    sharing={
                        "strategy": "MPS",
                        "mpsConfig": {"defaultActiveThreadPercentage": 50},
                        "timeSlicingConfig": {"interval": "Default"},
                    }
                )
            ),
            _claims(_gpu_config()),
        ),
    ],
    "dra-claim-namespace": [
        (  # the ComputeDomain that makes the channel template lives elsewhere
            _claims(
                {**_compute_domain(), "metadata": {"name": "llama-domain", "namespace": "imex"}},
                template="imex-channel",
            ),
            _claims(_compute_domain(), template="imex-channel"),
        ),
    ],
    "computedomain-template-taken": [
        (
            _claims(_compute_domain(), _compute_domain(name="other-domain")),
            _claims(_compute_domain(), _compute_domain("other-channel", name="other-domain")),
        ),
    ],
    "subdomain-service-headless": [
        (  # a StatefulSet's governing Service with a cluster IP
            lambda: [_statefulset(), _service("workers", headless=False)],
            lambda: [_statefulset(), _service("workers")],
        ),
        (  # the Service selects other pods
            _indexed(_service(selector={"app": "other"})),
            _indexed(_service()),
        ),
    ],
    "rendezvous-service-port": [
        (_through_service(29500, 8080), _through_service(29500, 29500)),
    ],
    "network-policy-invalid": [
        (
            _with(_policy(["Ingress", "Egres"], ingress=[{"from": [_PEERS]}])),
            _with(_policy(["Ingress", "Egress"], ingress=[{"from": [_PEERS]}], egress=[{}])),
        ),
        (
            _with(
                _policy(
                    ["Ingress"],
                    ingress=[{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, **_PEERS}]}],
                )
            ),
            _with(_policy(["Ingress"], ingress=[{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}])),
        ),
        (
            _with(
                _policy(
                    ["Ingress"],
                    ingress=[
                        {"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}
                    ],
                )
            ),
            _with(
                _policy(
                    ["Ingress"],
                    ingress=[
                        {"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}]}
                    ],
                )
            ),
        ),
    ],
    "network-policy-job-peers": [
        (  # egress to the job's pods on the rendezvous port only
            _with(_egress({"to": [_PEERS], "ports": [{"port": 29500}]}, _DNS)),
            _with(_egress({"to": [_PEERS]}, _DNS)),
        ),
        (  # ingress from other pods only
            _with(
                _policy(
                    ["Ingress"],
                    ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "metrics"}}}]}],
                )
            ),
            _with(_policy(["Ingress"], ingress=[{"from": [_PEERS]}])),
        ),
    ],
    "network-policy-dns-egress": [
        (  # port 53 without a protocol is TCP only
            _with(_egress({"to": [_PEERS]}, {**_DNS, "ports": [{"port": 53}]})),
            _with(_egress({"to": [_PEERS]}, _DNS)),
        ),
    ],
    "pvc-spec-invalid": [
        (
            _claim(_set(("spec", "resources"), None)),
            _claim(_set(("spec", "resources"), {"requests": {"storage": "10Ti"}})),
        ),
        (
            _claim(_set(("spec", "accessModes"), ["ReadWriteOncePod", "ReadWriteMany"])),
            _claim(_set(("spec", "accessModes"), ["ReadWriteMany"])),
        ),
    ],
    "storageclass-invalid": [
        (
            _classes(_cephfs(volumeBindingMode="WaitForConsumer")),
            _classes(_cephfs(volumeBindingMode="WaitForFirstConsumer")),
        ),
    ],
}
