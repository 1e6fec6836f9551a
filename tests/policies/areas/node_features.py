"""Fixtures of the node feature and GPU telemetry rules (policies/node_features.py: Node
Feature Discovery rules, dcgm-exporter metrics): per rule a render that breaks it and one
that keeps it, each the baseline with one thing changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import Docs, edit

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]


def _rule(feature: str, **expressions: dict[str, Any]) -> Callable[[Docs], None]:
    return lambda docs: docs.append(
        {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeatureRule",
            "metadata": {"name": "gpu-nodes"},
            "spec": {
                "rules": [
                    {
                        "name": "nvidia gpu",
                        "labels": {"example.com/gpu": "true"},
                        "matchFeatures": [{"feature": feature, "matchExpressions": expressions}],
                    }
                ]
            },
        }
    )


def _metrics(text: str, key: str = "metrics", name: str = "dcgm-metrics") -> Callable[[Docs], None]:
    return lambda docs: docs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "gpu-monitoring"},
            "data": {key: text},
        }
    )


GOOD = (
    "# Format\n"
    "DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).\n"
    "DCGM_FI_DEV_XID_ERRORS,    gauge, Value of the last XID error encountered.\n"
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor pipe is active.\n"
    "DCGM_EXP_XID_ERRORS_COUNT, gauge, Count of XID errors.\n"
)


IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"


def _exporter(value: str, with_configmap: str | None = None) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        if with_configmap is not None:
            _metrics(GOOD, key=with_configmap)(docs)
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "dcgm-exporter", "namespace": "gpu-monitoring"},
                "spec": {
                    "selector": {"matchLabels": {"app": "dcgm-exporter"}},
                    "template": {
                        "metadata": {"labels": {"app": "dcgm-exporter"}},
                        "spec": {
                            "containers": [
                                {
                                    "name": "exporter",
                                    "image": IMAGE,
                                    "env": [
                                        {"name": "DCGM_EXPORTER_CONFIGMAP_DATA", "value": value}
                                    ],
                                }
                            ]
                        },
                    },
                },
            }
        )

    return change


FIXTURES: dict[str, Pair] = {
    "nfd-rule-expression": (
        edit(_rule("kernel.loadedmodule", nvidia={"op": "Exists", "value": ["true"]})),
        edit(_rule("kernel.loadedmodule", nvidia={"op": "Exists"})),
    ),
    "nfd-pci-id-format": (
        edit(_rule("pci.device", vendor={"op": "In", "value": ["0x10de"]})),
        edit(_rule("pci.device", vendor={"op": "In", "value": ["10de"]})),
    ),
    "dcgm-exporter-metrics": (
        edit(_metrics(GOOD + "DCGM_FI_DEV_GPU_TEMP, gauge\n")),
        edit(_metrics(GOOD + "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")),
    ),
    "dcgm-exporter-configmap": (
        edit(_exporter("dcgm-metrics")),
        edit(_exporter("gpu-monitoring:dcgm-metrics")),
    ),
}

MORE: dict[str, list[Pair]] = {
    "nfd-rule-expression": [
        (
            edit(_rule("kernel.version", full={"op": "Gt", "value": ["5.15"]})),
            edit(_rule("kernel.version", full={"op": "Gt", "value": ["5.15"], "type": "version"})),
        ),
        (
            edit(_rule("kernel.version", major={"op": "GtLt", "value": ["6", "5"]})),
            edit(_rule("kernel.version", major={"op": "GtLt", "value": ["5", "7"]})),
        ),
        (
            edit(_rule("kernel.loadedmodule", nvidia={"op": "InRegexp", "value": ["*nvidia*"]})),
            edit(_rule("kernel.loadedmodule", nvidia={"op": "InRegexp", "value": [".*nvidia.*"]})),
        ),
        (
            edit(_rule("kernel.version", full={"op": "Ge", "value": ["5.15"], "type": "semver"})),
            edit(_rule("kernel.version", full={"op": "Ge", "value": ["v5.15"], "type": "version"})),
        ),
        (
            edit(_rule("kernel.version", major={"op": "Gt", "value": ["4", "5"]})),
            edit(_rule("kernel.version", major={"op": "Gt", "value": ["4"]})),
        ),
        (
            edit(_rule("kernel.loadedmodule", nvidia={"op": "In", "value": []})),
            edit(_rule("kernel.loadedmodule", nvidia={"op": "In", "value": ["nvidia"]})),
        ),
    ],
    "nfd-pci-id-format": [
        (
            edit(_rule("pci.device", **{"class": {"op": "In", "value": ["030200"]}})),
            edit(_rule("pci.device", **{"class": {"op": "In", "value": ["0302", "0300"]}})),
        ),
        (
            # Some values written otherwise: a warning.
            edit(_rule("pci.device", vendor={"op": "In", "value": ["10DE", "10de"]})),
            edit(_rule("usb.device", vendor={"op": "In", "value": ["0x10DE"]})),
        ),
    ],
    "dcgm-exporter-metrics": [
        (
            edit(_metrics(GOOD + "DCGM_FI_DEV_GPU_TEMP, gague, GPU temperature.\n")),
            # A profiling field that DCP does not enable is skipped before its type is read.
            edit(_metrics(GOOD + "DCGM_FI_PROF_SM_ACTIVE, ratio, SM active.\n")),
        ),
        (
            edit(_metrics(GOOD + "DCGM_EXP_XID_ERRORS, counter, XID errors.\n")),
            edit(_metrics(GOOD + "DCGM_EXP_CLOCK_EVENTS_COUNT, counter, Clock events.\n")),
        ),
        (
            edit(_metrics(GOOD + "GPU_UTIL, gauge, utilization.\n", key="dcgm-metrics.csv")),
            edit(_metrics(GOOD, key="dcgm-metrics.csv")),
        ),
    ],
    "dcgm-exporter-configmap": [
        (
            edit(_exporter("gpu-monitoring:dcgm-metrics", with_configmap="dcgm-metrics.csv")),
            edit(_exporter("gpu-monitoring:dcgm-metrics", with_configmap="metrics")),
        ),
    ],
}
