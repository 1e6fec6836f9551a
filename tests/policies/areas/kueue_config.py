"""Fixtures of kueue-config-invalid (policies/cluster_config.py): what Kueue v0.19.2's
manager refuses in the Configuration of its ConfigMap (strict decoding, pkg/config/
validation.go), in a ConfigMap or in the kueue chart's Helm values of an Argo CD
Application. Each failing render differs from its passing one in the one value checked."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from tests.policies.fixtures import Docs

BASE: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "leaderElection": {"leaderElect": True},
    "integrations": {"frameworks": ["batch/job", "kubeflow.org/pytorchjob", "pod"]},
    "waitForPodsReady": {
        "timeout": "10m",
        "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 5},
    },
}


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def config(**changes: Any) -> Callable[[], Docs]:
    """Kueue's manager ConfigMap, its Configuration changed by `changes` (None drops a key)."""

    def build() -> Docs:
        text = yaml.safe_dump(_merged(BASE, changes), sort_keys=False)
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
                "data": {"controller_manager_config.yaml": text},
            }
        ]

    return build


def application(**changes: Any) -> Callable[[], Docs]:
    """An Argo CD Application of the kueue chart whose valuesObject holds the Configuration."""

    def build() -> Docs:
        text = yaml.safe_dump(_merged(BASE, changes), sort_keys=False)
        return [
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {"name": "kueue", "namespace": "argocd"},
                "spec": {
                    "project": "default",
                    "source": {
                        "repoURL": "oci://registry.k8s.io/kueue/charts",
                        "chart": "kueue",
                        "targetRevision": "0.19.2",
                        "helm": {
                            "valuesObject": {"managerConfig": {"controllerManagerConfigYaml": text}}
                        },
                    },
                    "destination": {
                        "server": "https://kubernetes.default.svc",
                        "namespace": "kueue-system",
                    },
                },
            }
        ]

    return build


def v1beta1(**changes: Any) -> Callable[[], Docs]:
    return config(apiVersion="config.kueue.x-k8s.io/v1beta1", **changes)


def _frameworks(*names: str) -> dict[str, Any]:
    return {"frameworks": list(names)}


FIXTURES = {
    "kueue-config-invalid": (
        config(integrations=_frameworks("batch/job", "kubeflow.org/pytorchjobs", "pod")),
        config(integrations=_frameworks("batch/job", "kubeflow.org/pytorchjob", "pod")),
    ),
}

MORE = {
    "kueue-config-invalid": [
        # a framework listed twice
        (
            config(integrations=_frameworks("batch/job", "jobset.x-k8s.io/jobset", "batch/job")),
            config(integrations=_frameworks("batch/job", "jobset.x-k8s.io/jobset")),
        ),
        # the bare kind name, not Kueue's framework name
        (
            config(integrations=_frameworks("batch/job", "rayjob")),
            config(integrations=_frameworks("batch/job", "ray.io/rayjob")),
        ),
        # external frameworks are Kind.version.group
        (
            config(integrations={"externalFrameworks": ["example.com/v1/MyJob"]}),
            config(integrations={"externalFrameworks": ["MyJob.v1.example.com"]}),
        ),
        (
            config(multiKueue={"externalFrameworks": [{"name": "MyJob"}]}),
            config(multiKueue={"externalFrameworks": [{"name": "MyJob.v1.example.com"}]}),
        ),
        # requeuing timestamp and backoff
        (
            config(waitForPodsReady={"requeuingStrategy": {"timestamp": "eviction"}}),
            config(waitForPodsReady={"requeuingStrategy": {"timestamp": "Eviction"}}),
        ),
        (
            config(waitForPodsReady={"requeuingStrategy": {"backoffLimitCount": -1}}),
            config(waitForPodsReady={"requeuingStrategy": {"backoffLimitCount": 0}}),
        ),
        (
            config(waitForPodsReady={"timeout": "-5m"}),
            config(waitForPodsReady={"timeout": "5m"}),
        ),
        # v1beta1 with waitForPodsReady enabled is checked; disabled, it is dropped
        (
            v1beta1(
                waitForPodsReady={
                    "enable": True,
                    "requeuingStrategy": {"timestamp": "LastEviction"},
                }
            ),
            v1beta1(
                waitForPodsReady={
                    "enable": False,
                    "requeuingStrategy": {"timestamp": "LastEviction"},
                }
            ),
        ),
        # fair sharing strategies: one of three lists, in order
        (
            config(
                fairSharing={
                    "preemptionStrategies": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]
                }
            ),
            config(
                fairSharing={
                    "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
                }
            ),
        ),
        (
            config(fairSharing={"preemptionStrategies": []}),
            config(fairSharing={"preemptionStrategies": ["LessThanInitialShare"]}),
        ),
        # v1beta1 defaults an empty list when fair sharing is enabled
        (
            v1beta1(fairSharing={"enable": True, "preemptionStrategies": ["LessThanFinalShare"]}),
            v1beta1(fairSharing={"enable": True}),
        ),
        # resource transformations
        (
            config(
                resources={
                    "transformations": [{"input": "nvidia.com/mig-1g.10gb", "strategy": "Keep"}]
                }
            ),
            config(
                resources={
                    "transformations": [{"input": "nvidia.com/mig-1g.10gb", "strategy": "Retain"}]
                }
            ),
        ),
        (
            config(
                resources={
                    "transformations": [
                        {"input": "nvidia.com/mig-1g.10gb", "strategy": "Replace"},
                        {"input": "nvidia.com/mig-1g.10gb", "strategy": "Retain"},
                    ]
                }
            ),
            config(
                resources={
                    "transformations": [
                        {"input": "nvidia.com/mig-1g.10gb", "strategy": "Replace"},
                        {"input": "nvidia.com/mig-2g.20gb", "strategy": "Retain"},
                    ]
                }
            ),
        ),
        # device class mappings
        (
            config(
                resources={
                    "deviceClassMappings": [
                        {"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]},
                        {"name": "example.com/gpu2", "deviceClassNames": ["gpu.example.com"]},
                    ]
                }
            ),
            config(
                resources={
                    "deviceClassMappings": [
                        {"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]},
                        {"name": "example.com/gpu2", "deviceClassNames": ["gpu2.example.com"]},
                    ]
                }
            ),
        ),
        (
            config(resources={"deviceClassMappings": [{"name": "example.com/gpu"}]}),
            config(
                resources={
                    "deviceClassMappings": [
                        {"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]}
                    ]
                }
            ),
        ),
        # a namespace selector that does not exempt kube-system
        (
            config(managedJobsNamespaceSelector={}),
            config(
                managedJobsNamespaceSelector={
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", "kueue-system"],
                        }
                    ]
                }
            ),
        ),
        (
            config(
                managedJobsNamespaceSelector={
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kueue-system"],
                        }
                    ]
                }
            ),
            config(managedJobsNamespaceSelector={"matchLabels": {"kueue-managed": "true"}}),
        ),
        # strict decoding: v1beta1 fields in a v1beta2 file, misspelt keys
        (
            config(waitForPodsReady={"enable": True}),
            v1beta1(waitForPodsReady={"enable": True}),
        ),
        (
            config(queueVisibility={"updateIntervalSeconds": 5}),
            v1beta1(queueVisibility={"updateIntervalSeconds": 5}),
        ),
        (
            config(integration={"frameworks": ["batch/job"]}),
            config(integrations={"frameworks": ["batch/job"]}),
        ),
        (
            config(apiVersion="config.kueue.x-k8s.io/v1alpha1"),
            config(apiVersion="config.kueue.x-k8s.io/v1beta1"),
        ),
        # internal certificates
        (
            config(internalCertManagement={"enable": True, "webhookServiceName": "Kueue_Webhook"}),
            config(internalCertManagement={"enable": True, "webhookServiceName": "kueue-webhook"}),
        ),
        # the kueue chart's values in an Argo CD Application
        (
            application(integrations=_frameworks("batch/job", "kubeflow.org/pytorchjobs")),
            application(integrations=_frameworks("batch/job", "kubeflow.org/pytorchjob")),
        ),
    ],
}
