"""Fixtures of policies/dra.py for the NVIDIA DRA driver's ComputeDomain configs and for
DeviceTaintRules against the tolerations of a claim's requests."""

from __future__ import annotations

from typing import Any

from tests.policies.areas.kubernetes_core import _claims, _request, _template

CD = "compute-domain.nvidia.com"


def _cd_config(driver: str = CD, **parameters: Any) -> dict[str, Any]:
    config = {"apiVersion": "resource.nvidia.com/v1beta1", **parameters}
    return _template(
        request=_request(deviceClassName="compute-domain-default-channel.nvidia.com", count=1),
        name="imex",
        config=[{"requests": ["gpu"], "opaque": {"driver": driver, "parameters": config}}],
    )


def _gpu_request_config() -> dict[str, Any]:
    """A template for the channel and a GPU, the config naming only the GPU request."""
    template = _cd_config(kind="ComputeDomainChannelConfig")
    requests = template["spec"]["spec"]["devices"]["requests"]
    requests.append({**_request(), "name": "gpu-too"})
    template["spec"]["spec"]["devices"]["config"][0]["requests"] = ["gpu-too"]
    return template


def _channel(**parameters: Any) -> Any:
    """The baseline's job with GPUs from node-gpus and a hand-written channel template."""
    parameters.setdefault("kind", "ComputeDomainChannelConfig")
    return _claims(_template(), _cd_config(**parameters))


def _taint_rule(
    selector: dict[str, Any] | None = None, name: str = "gpu-maintenance", **taint: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "taint": {
            "key": "example.com/maintenance",
            "value": "true",
            "effect": "NoSchedule",
            **taint,
        }
    }
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


_GPUS = {"driver": "gpu.nvidia.com"}


def _tolerating(*tolerations: dict[str, Any], **rule: Any) -> Any:
    return _claims(
        _template(_request(tolerations=list(tolerations))),
        _taint_rule(rule.pop("selector", _GPUS), **rule),
    )


_EXISTS = {"key": "example.com/maintenance", "operator": "Exists"}
_EQUAL = {"key": "example.com/maintenance", "operator": "Equal", "value": "true"}
_FIRST_AVAILABLE = {
    "name": "gpu",
    "firstAvailable": [
        {"name": "h100", "deviceClassName": "gpu.nvidia.com", "count": 8},
        {"name": "other", "deviceClassName": "gpu.example.com", "count": 8},
    ],
}

FIXTURES = {
    "nvidia-dra-computedomain-config": (_channel(domainID=""), _channel(domainID="8c1e5b2a-uid")),
    "dra-device-taint-untolerated": (_tolerating(), _tolerating(_EXISTS)),
}

MORE = {
    "nvidia-dra-computedomain-config": [
        # a GPU driver config sent to the compute-domain plugin: not a recognized configuration
        (_channel(kind="GpuConfig", domainID="x"), _channel(domainID="x")),
        # no domainID at all
        (_channel(), _channel(domainID="x")),
        (
            _channel(kind="ComputeDomainDaemonConfig"),
            _channel(kind="ComputeDomainDaemonConfig", domainID="x"),
        ),
        # strict decoding: a misspelt field fails, whatever the requests
        (_channel(domainId="x"), _channel(domainID="x")),
        # an unknown apiVersion is not decoded
        (
            _channel(apiVersion="resource.nvidia.com/v1", domainID="x"),
            _channel(domainID="x"),
        ),
        # a config naming only a GPU request is never applied to compute-domain devices
        (_channel(), _claims(_template(), _gpu_request_config())),
        # a templated domainID is not ours to judge
        (_channel(domainID=""), _channel(domainID="{{ .Values.domainUID }}")),
    ],
    "dra-device-taint-untolerated": [
        # Equal without a value matches only a taint without one
        (_tolerating({"key": "example.com/maintenance", "operator": "Equal"}), _tolerating(_EQUAL)),
        # Equal with the taint's value, or no operator (defaulted to Equal)
        (
            _tolerating({**_EQUAL, "value": "yes"}),
            _tolerating({k: v for k, v in _EQUAL.items() if k != "operator"}),
        ),
        # a toleration of another effect does not tolerate the taint
        (
            _tolerating({**_EXISTS, "effect": "NoExecute"}),
            _tolerating({**_EXISTS, "effect": "NoSchedule"}),
        ),
        # an empty key with Exists tolerates every taint
        (
            _tolerating({"key": "other.example.com/x", "operator": "Exists"}),
            _tolerating({"operator": "Exists"}),
        ),
        # the empty selector taints every device; a pool selector only some; None blocks nothing
        (_tolerating(selector={}), _tolerating(selector={**_GPUS, "pool": "node-7"})),
        (_tolerating(effect="NoExecute"), _tolerating(effect="None")),
        # another driver's devices are not the claim's
        (_tolerating(), _tolerating(selector={"driver": CD})),
        # a rule without a selector matches no device
        (_tolerating(), _claims(_template(), _taint_rule(None))),
        # firstAvailable: blocked only when every alternative is
        (
            _claims(
                _template(
                    {**_FIRST_AVAILABLE, "firstAvailable": _FIRST_AVAILABLE["firstAvailable"][:1]}
                ),
                _taint_rule(_GPUS),
            ),
            _claims(_template(_FIRST_AVAILABLE), _taint_rule(_GPUS)),
        ),
    ],
}
