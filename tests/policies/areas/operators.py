"""Fixtures of the operators' rules (policies/sriov.py, policies/cluster_config.py): the
SR-IOV Network Operator's and the NVIDIA Network Operator's admission checks, the NVIDIA
device plugin's configs, the GPU Operator's ClusterPolicy and GPU feature discovery's labels.
Each failing render differs from its passing one in the one thing the rule checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import NAMESPACE, Docs, edit, job, pods_of

OPERATOR_NAMESPACE = "sriov-network-operator"


def node_policy(name: str = "rail0", **spec: Any) -> dict[str, Any]:
    """A SriovNetworkNodePolicy the webhook admits, with `spec` changed."""
    base = {
        "resourceName": "rail_rdma",
        "nodeSelector": {"feature.node.kubernetes.io/network-sriov.capable": "true"},
        "numVfs": 8,
        "nicSelector": {"vendor": "15b3", "pfNames": ["ens1f0"]},
        "deviceType": "netdevice",
        "isRdma": True,
    }
    base.update(spec)
    return {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": "SriovNetworkNodePolicy",
        "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


def operator_config(name: str = "default", namespace: str = OPERATOR_NAMESPACE, **spec: Any):
    return {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": "SriovOperatorConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def sriov_network(kind: str = "SriovNetwork", namespace: str = OPERATOR_NAMESPACE, **spec: Any):
    base = {
        "resourceName": "rail_rdma",
        "networkNamespace": NAMESPACE,
        "ipam": '{"type": "whereabouts", "range": "10.60.0.0/16"}',
    }
    base.update(spec)
    return {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": kind,
        "metadata": {"name": "rail0", "namespace": namespace},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


def nad_named(name: str) -> dict[str, Any]:
    """A hand-written NAD in the training namespace."""
    config = {"cniVersion": "1.0.0", "name": name, "type": "sriov", "ipam": {}}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "openshift.io/rail_rdma"},
        },
        "spec": {"config": json.dumps(config)},
    }


def macvlan_network(ipam: str) -> dict[str, Any]:
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "MacvlanNetwork",
        "metadata": {"name": "storage-net"},
        "spec": {"networkNamespace": NAMESPACE, "master": "ens2f0", "mode": "bridge", "ipam": ipam},
    }


def docs(*builders: Callable[[], Any]) -> Callable[[], Docs]:
    return lambda: [copy.deepcopy(b()) for b in builders]


def webhook_on() -> dict[str, Any]:
    return operator_config(enableOperatorWebhook=True)


def policy(**spec: Any) -> Callable[[], Docs]:
    """One node policy, on a cluster whose SriovOperatorConfig runs the operator's webhook."""
    return docs(webhook_on, lambda: node_policy(**spec))


def two_policies(first: dict[str, Any], second: dict[str, Any]) -> Callable[[], Docs]:
    return docs(
        webhook_on,
        lambda: node_policy("rail0", **first),
        lambda: node_policy("rail1", **second),
    )


# -- NVIDIA Network Operator ------------------------------------------------------------------


NETWORK_OPERATOR_WEBHOOK = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "network-operator-validating-webhook-configuration"},
    "webhooks": [
        {
            "name": "vnicclusterpolicy.kb.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {
                "service": {
                    "name": "network-operator-webhook-service",
                    "namespace": "nvidia-network-operator",
                }
            },
            "rules": [
                {
                    "apiGroups": ["mellanox.com"],
                    "apiVersions": ["v1alpha1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["nicclusterpolicies", "hostdevicenetworks"],
                }
            ],
        }
    ],
}


def nic_cluster_policy(name: str = "nic-cluster-policy", **spec: Any) -> Callable[[], Docs]:
    base: dict[str, Any] = {
        "ofedDriver": {
            "image": "doca-driver",
            "repository": "nvcr.io/nvidia/mellanox",
            "version": "doca3.1.0-25.07-0.6.6.0-0",
        },
        "rdmaSharedDevicePlugin": {
            "image": "k8s-rdma-shared-dev-plugin",
            "repository": "ghcr.io/mellanox",
            "version": "v1.5.3",
            "config": json.dumps(
                {"configList": [{"resourceName": "rdma_shared_device_a", "rdmaHcaMax": 63}]}
            ),
        },
    }
    base.update(spec)
    doc = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": name},
        "spec": base,
    }
    return docs(lambda: NETWORK_OPERATOR_WEBHOOK, lambda: doc)


def host_device_network(resource: str) -> Callable[[], Docs]:
    doc = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "HostDeviceNetwork",
        "metadata": {"name": "hostdev-net"},
        "spec": {
            "networkNamespace": NAMESPACE,
            "resourceName": resource,
            "ipam": '{"type": "whereabouts", "range": "10.70.0.0/16"}',
        },
    }
    return docs(lambda: NETWORK_OPERATOR_WEBHOOK, lambda: doc)


def ib_pool(start: str, end: str) -> dict[str, Any]:
    return {
        "ibKubernetes": {
            "image": "ib-kubernetes",
            "repository": "ghcr.io/mellanox",
            "version": "v1.1.2",
            "pKeyGUIDPoolRangeStart": start,
            "pKeyGUIDPoolRangeEnd": end,
        }
    }


# -- NVIDIA device plugin and GPU Operator -----------------------------------------------------


def plugin_config(default: str | None = "training", **configs: Any) -> Callable[[Docs], None]:
    """A device plugin ConfigMap with `configs` (key -> config) named by the ClusterPolicy."""

    def change(docs: Docs) -> None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "device-plugin-config", "namespace": "gpu-operator"},
                "data": {key: json.dumps(value) for key, value in configs.items()},
            }
        )
        policy = next(d for d in docs if d["kind"] == "ClusterPolicy")
        config = {"name": "device-plugin-config"}
        if default is not None:
            config["default"] = default
        policy["spec"]["devicePlugin"] = {"config": config}

    return change


PLAIN = {"version": "v1", "flags": {"migStrategy": "none"}}


def shared(**resource: Any) -> dict[str, Any]:
    entry = {"name": "nvidia.com/gpu", "replicas": 4, **resource}
    return {"version": "v1", "sharing": {"timeSlicing": {"resources": [entry]}}}


def mig_request(strategy: str | None, profile: str = "nvidia.com/mig-3g.40gb"):
    def change(docs: Docs) -> None:
        policy = next(d for d in docs if d["kind"] == "ClusterPolicy")
        if strategy is not None:
            policy["spec"]["mig"] = {"strategy": strategy}
        for spec in pods_of(job(docs)):
            limits = spec["containers"][0]["resources"]["limits"]
            del limits["nvidia.com/gpu"]
            limits[profile] = 2

    return change


def node_selector(key: str, value: str) -> Callable[[Docs], None]:
    """Every job's pods select nodes by `key: value` alone."""

    def change(docs: Docs) -> None:
        for doc in docs:
            if doc["kind"] in ("PyTorchJob", "MPIJob"):
                for spec in pods_of(doc):
                    spec["nodeSelector"] = {key: value}

    return change


def node_affinity(key: str, *terms: list[str]) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec.pop("nodeSelector")
            spec["affinity"]["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
                        for values in terms
                    ]
                }
            }

    return change


def both(*changes: Callable[[Docs], None]) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for one in changes:
            one(docs)

    return change


def _deployment_on_network(docs: Docs) -> None:
    """A CPU Deployment that attaches the SR-IOV training network and requests no VF."""
    docs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "loader", "namespace": NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {"app": "loader"}},
                "template": {
                    "metadata": {
                        "labels": {"app": "loader"},
                        "annotations": {"k8s.v1.cni.cncf.io/networks": "training-net"},
                    },
                    "spec": {
                        "containers": [
                            {
                                "name": "loader",
                                "image": "registry.example.com/loader:1.0.0",
                                "resources": {
                                    "requests": {"cpu": "1", "memory": "1Gi"},
                                    "limits": {"cpu": "1", "memory": "1Gi"},
                                },
                            }
                        ]
                    },
                },
            },
        }
    )


def _second_cluster_policy(name: str) -> Callable[[Docs], None]:
    """Another ClusterPolicy (the same one again when `name` is the baseline's)."""

    def change(docs: Docs) -> None:
        policy = copy.deepcopy(next(d for d in docs if d["kind"] == "ClusterPolicy"))
        policy["metadata"]["name"] = name
        docs.append(policy)

    return change


def mig_config(text: str, key: str = "config.yaml") -> Callable[[Docs], None]:
    """The ClusterPolicy's MIG manager reads `text` from a ConfigMap of the render."""

    def change(docs: Docs) -> None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "custom-mig-config", "namespace": "gpu-operator"},
                "data": {key: text},
            }
        )
        policy = next(d for d in docs if d["kind"] == "ClusterPolicy")
        policy["spec"]["migManager"] = {"config": {"name": "custom-mig-config"}}

    return change


def mig_layout(**entry: Any) -> str:
    base = {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    base.update(entry)
    layout = {k: v for k, v in base.items() if v is not None}
    return json.dumps({"version": "v1", "mig-configs": {"all-3g.40gb": [layout]}})


def _injector(enabled: bool) -> Callable[[Docs], None]:
    return lambda docs: docs.append(operator_config(enableInjector=enabled))


def _drivers(*specs: dict[str, Any]) -> Callable[[], Docs]:
    """NVIDIADrivers named driver-0, driver-1, ... with these specs (on top of a base)."""
    base = {"driverType": "gpu", "image": "driver", "repository": "nvcr.io/nvidia",
            "version": "580.95.05"}  # fmt: skip
    docs = [
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": f"driver-{index}"},
            "spec": {**base, **spec},
        }
        for index, spec in enumerate(specs)
    ]
    return lambda: copy.deepcopy(docs)


H100 = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
A100 = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}


FIXTURES = {
    "nvidia-driver-spec": (
        _drivers({**H100, "usePrecompiled": True, "gds": {"enabled": True}}),
        _drivers({**H100, "usePrecompiled": True, "gds": {"enabled": False}}),
    ),
    "sriov-policy-webhook": (
        policy(resourceName="rail.rdma"),
        policy(resourceName="rail_rdma"),
    ),
    "sriov-policy-conflict": (
        two_policies(
            {"nicSelector": {"pfNames": ["ens1f0#0-3"]}},
            {
                "resourceName": "rail_b",
                "nicSelector": {"pfNames": ["ens1f0#2-7"]},
            },
        ),
        two_policies(
            {"nicSelector": {"pfNames": ["ens1f0#0-3"]}},
            {
                "resourceName": "rail_b",
                "nicSelector": {"pfNames": ["ens1f0#4-7"]},
            },
        ),
    ),
    "sriov-operator-namespace": (
        docs(operator_config, lambda: sriov_network(namespace=NAMESPACE)),
        docs(operator_config, sriov_network),
    ),
    "operator-network-cni-fields": (
        docs(lambda: sriov_network(ipam="type: whereabouts\nrange: 10.60.0.0/16")),
        docs(lambda: sriov_network(ipam='{"type": "whereabouts", "range": "10.60.0.0/16"}')),
    ),
    "operator-network-nad-clash": (
        docs(sriov_network, lambda: nad_named("rail0")),
        docs(sriov_network, lambda: nad_named("rail0-static")),
    ),
    "nicclusterpolicy-webhook": (
        nic_cluster_policy(ofedDriver={"image": "doca-driver", "version": "25.07"}),
        nic_cluster_policy(ofedDriver={"image": "doca-driver", "version": "25.07-0.6.6.0-0"}),
    ),
    "hostdevicenetwork-resource-name": (
        host_device_network("nvidia.com/hostdev"),
        host_device_network("hostdev"),
    ),
    "device-plugin-config-invalid": (
        edit(plugin_config(training=shared(replicas=1))),
        edit(plugin_config(training=shared(replicas=2, rename="nvidia.com/gpu.shared"))),
    ),
    "clusterpolicy-device-plugin-config": (
        edit(plugin_config(default="trainig", training=PLAIN)),
        edit(plugin_config(default="training", training=PLAIN)),
    ),
    "mig-parted-config-invalid": (
        edit(mig_config(mig_layout(**{"mig-devices": {"3g40gb": 2}}))),
        edit(mig_config(mig_layout(**{"mig-devices": {"3g.40gb": 2}}))),
    ),
    "clusterpolicy-singleton": (
        edit(_second_cluster_policy("gpu-cluster-policy-h100")),
        edit(_second_cluster_policy("gpu-cluster-policy")),
    ),
    "mig-strategy-resources": (
        edit(mig_request("single")),
        edit(mig_request("mixed")),
    ),
    "gfd-node-labels": (
        edit(node_selector("nvidia.com/gpu.family", "Hopper")),
        edit(node_selector("nvidia.com/gpu.family", "hopper")),
    ),
}


def without_webhook_config(build: Callable[[], Docs], enabled: bool | None) -> Callable[[], Docs]:
    """`build` with its SriovOperatorConfig's webhook off, or (None) without the config."""

    def change() -> Docs:
        out = [d for d in build() if d["kind"] != "SriovOperatorConfig"]
        if enabled is not None:
            out.append(operator_config(enableOperatorWebhook=enabled))
        return out

    return change


MORE = {
    "nvidia-driver-spec": [
        (_drivers({**H100, "usePrecompiled": True, "gdrcopy": {"enabled": True}}), _drivers(H100)),
        (_drivers(H100, {}), _drivers(H100, A100)),
        (_drivers(H100, H100), _drivers(H100, A100)),
    ],
    "sriov-policy-webhook": [
        # the render does not say whether the webhook runs: a warning; it says it is off: quiet
        (
            without_webhook_config(policy(numVfs=0), None),
            without_webhook_config(policy(numVfs=0), False),
        ),
        # a '-' is refused by v1.6.0 only (a warning): later builds accept it
        (policy(resourceName="rail-rdma"), policy(resourceName="rail_rdma")),
        (policy(nicSelector={}), policy(nicSelector={"rootDevices": ["0000:3b:00.0"]})),
        (
            policy(nicSelector={"vendor": "15B3", "pfNames": ["ens1f0"]}),
            policy(nicSelector={"vendor": "15b3", "pfNames": ["ens1f0"]}),
        ),
        (
            policy(nicSelector={"pfNames": ["ens1f0#0-8"]}),
            policy(nicSelector={"pfNames": ["ens1f0#0-7"]}),
        ),
        (
            policy(nicSelector={"pfNames": ["ens1f0#7-0"]}),
            policy(nicSelector={"pfNames": ["ens1f0#0-7"]}),
        ),
        (
            policy(nicSelector={"pfNames": ["ens1f0#0:7"]}),
            policy(nicSelector={"pfNames": ["ens1f0#0-7"]}),
        ),
        (policy(numVfs=0), policy(numVfs=1)),
        (policy(numVfs=200), policy(numVfs=128)),
        (policy(deviceType="vfio-pci"), policy(deviceType="vfio-pci", isRdma=False)),
        # the mutating webhook sets isRdma: true for InfiniBand before validation
        (
            policy(deviceType="vfio-pci", isRdma=False, linkType="ib"),
            policy(deviceType="netdevice", isRdma=False, linkType="ib"),
        ),
        (
            policy(linkType="ib", eSwitchMode="switchdev"),
            policy(linkType="eth", eSwitchMode="switchdev"),
        ),
        (policy(vdpaType="virtio"), policy(vdpaType="virtio", eSwitchMode="switchdev")),
        (
            policy(eSwitchMode="legacy", bridge={"ovs": {}}),
            policy(eSwitchMode="switchdev", bridge={"ovs": {}}),
        ),
    ],
    "sriov-policy-conflict": [
        # the same PF without ranges in two policies on the same nodes
        (
            two_policies({}, {"resourceName": "rail_b"}),
            two_policies({}, {"resourceName": "rail_b", "nicSelector": {"pfNames": ["ens2f0"]}}),
        ),
        # disjoint node selectors: the webhook never compares them
        (
            two_policies({}, {"resourceName": "rail_b", "nodeSelector": {}}),
            two_policies({}, {"resourceName": "rail_b", "nodeSelector": {"pool": "b"}}),
        ),
        (
            two_policies(
                {"nicSelector": {"pfNames": ["ens1f0#0-3"]}},
                {"externallyManaged": True, "nicSelector": {"pfNames": ["ens1f0#4-7"]}},
            ),
            two_policies(
                {"externallyManaged": True, "nicSelector": {"pfNames": ["ens1f0#0-3"]}},
                {"externallyManaged": True, "nicSelector": {"pfNames": ["ens1f0#4-7"]}},
            ),
        ),
        (
            two_policies(
                {"nicSelector": {"pfNames": ["ens1f0"]}},
                {"excludeTopology": True, "nicSelector": {"pfNames": ["ens2f0"]}},
            ),
            two_policies(
                {"nicSelector": {"pfNames": ["ens1f0"]}},
                {
                    "resourceName": "rail_b",
                    "excludeTopology": True,
                    "nicSelector": {"pfNames": ["ens2f0"]},
                },
            ),
        ),
    ],
    "sriov-operator-namespace": [
        (docs(lambda: operator_config("sriov-config")), docs(operator_config)),
        (
            docs(
                operator_config,
                lambda: {**node_policy(), "metadata": {"name": "rail0", "namespace": NAMESPACE}},
            ),
            docs(operator_config, node_policy),
        ),
    ],
    "operator-network-cni-fields": [
        (
            docs(lambda: sriov_network(metaPlugins='[{"type": "tuning"}]')),
            docs(lambda: sriov_network(metaPlugins='{"type": "tuning"}, {"type": "rdma"}')),
        ),
        (
            docs(lambda: macvlan_network('{"type": "whereabouts", "range": "10.80.0.0/16",}')),
            docs(lambda: macvlan_network('{"type": "whereabouts", "range": "10.80.0.0/16"}')),
        ),
        (
            docs(lambda: sriov_network("SriovIBNetwork", capabilities='{"ips": true')),
            docs(lambda: sriov_network("SriovIBNetwork", capabilities='{"ips": true}')),
        ),
    ],
    "nicclusterpolicy-webhook": [
        (nic_cluster_policy("nic-policy"), nic_cluster_policy()),
        # without the webhook in the render: a warning
        (
            lambda: nic_cluster_policy(ofedDriver={"image": "doca-driver", "version": "25.07"})()[
                1:
            ],
            lambda: nic_cluster_policy()()[1:],
        ),
        (
            nic_cluster_policy(**ib_pool("02:00:00:00:00:00:00:ff", "02:00:00:00:00:00:00:00")),
            nic_cluster_policy(**ib_pool("02:00:00:00:00:00:00:00", "02:00:00:00:00:00:00:ff")),
        ),
        (
            nic_cluster_policy(**ib_pool("02:00:00:00:00:00:00", "02:00:00:00:00:00:00:ff")),
            nic_cluster_policy(**ib_pool("02:00:00:00:00:00:00:00", "02:00:00:00:00:00:00:ff")),
        ),
        (
            nic_cluster_policy(
                sriovDevicePlugin={
                    "image": "sriov-network-device-plugin",
                    "config": json.dumps({"resourceList": [{"resourceName": "rail-a"}]}),
                }
            ),
            nic_cluster_policy(
                sriovDevicePlugin={
                    "image": "sriov-network-device-plugin",
                    "config": json.dumps({"resourceList": [{"resourceName": "rail_a"}]}),
                }
            ),
        ),
        (
            nic_cluster_policy(
                rdmaSharedDevicePlugin={
                    "image": "k8s-rdma-shared-dev-plugin",
                    "config": "{configList: []}",
                }
            ),
            nic_cluster_policy(
                rdmaSharedDevicePlugin={
                    "image": "k8s-rdma-shared-dev-plugin",
                    "config": '{"configList": []}',
                }
            ),
        ),
    ],
    "device-plugin-config-invalid": [
        (
            edit(plugin_config(training={**PLAIN, "version": "v2"})),
            edit(plugin_config(training=PLAIN)),
        ),
        (
            edit(plugin_config(training={"version": "v1", "flags": {"migStrategy": "Mixed"}})),
            edit(plugin_config(training={"version": "v1", "flags": {"migStrategy": "mixed"}})),
        ),
        (
            edit(plugin_config(training=shared(devices="some"))),
            edit(plugin_config(training=shared(devices="all"))),
        ),
        (
            edit(
                plugin_config(
                    training={
                        "version": "v1",
                        "flags": {"migStrategy": "mixed"},
                        "sharing": {
                            "mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
                        },
                    }
                )
            ),
            edit(
                plugin_config(
                    training={
                        "version": "v1",
                        "flags": {"migStrategy": "single"},
                        "sharing": {
                            "mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
                        },
                    }
                )
            ),
        ),
    ],
    "clusterpolicy-device-plugin-config": [
        # a warning: no default, so unlabelled nodes get an empty config
        (
            edit(plugin_config(default=None, training=PLAIN)),
            edit(plugin_config(default="training", training=PLAIN)),
        ),
    ],
    "mig-parted-config-invalid": [
        (edit(mig_config(mig_layout(), key="config")), edit(mig_config(mig_layout()))),
        (edit(mig_config(mig_layout(devices="0,1"))), edit(mig_config(mig_layout(devices=[0, 1])))),
        (
            edit(mig_config(mig_layout(**{"mig-devices": None}))),
            edit(mig_config(mig_layout(**{"mig-enabled": False, "mig-devices": None}))),
        ),
        (
            edit(mig_config(mig_layout(**{"mig-devices": {"3g.40gb": 0}}))),
            edit(mig_config(mig_layout(**{"mig-devices": {"3g.40gb": 1, "1g.10gb+me": 1}}))),
        ),
        (
            edit(
                mig_config(
                    json.dumps({"mig-configs": {"x": [{"devices": "all", "mig-enabled": False}]}})
                )
            ),
            edit(
                mig_config(
                    json.dumps(
                        {
                            "version": "v1",
                            "mig-configs": {"x": [{"devices": "all", "mig-enabled": False}]},
                        }
                    )
                )
            ),
        ),
    ],
    "mig-strategy-resources": [
        # mixed, but the ClusterPolicy's own MIG layouts never create 3g.40gb instances
        (
            edit(
                both(
                    mig_request("mixed"), mig_config(mig_layout(**{"mig-devices": {"1g.10gb": 7}}))
                )
            ),
            edit(both(mig_request("mixed"), mig_config(mig_layout()))),
        ),
        # no strategy in the ClusterPolicy: the device plugin's default is none
        (edit(mig_request(None)), edit(mig_request("mixed"))),
        # a device plugin config that sets migStrategy may make some nodes mixed (warning)
        (
            edit(
                both(
                    mig_request("single"),
                    plugin_config(training={"version": "v1", "flags": {"migStrategy": "mixed"}}),
                )
            ),
            edit(
                both(
                    mig_request("mixed"),
                    plugin_config(training={"version": "v1", "flags": {"migStrategy": "mixed"}}),
                )
            ),
        ),
    ],
    "gfd-node-labels": [
        (
            edit(node_selector("nvidia.com/gpu.memory", "80GB")),
            edit(node_selector("nvidia.com/gpu.memory", "81559")),
        ),
        (
            edit(node_affinity("nvidia.com/gpu.family", ["Hopper", "Ampere"])),
            edit(node_affinity("nvidia.com/gpu.family", ["Hopper"], ["hopper"])),
        ),
        # nvidia.com/gpu time-sliced on every node: the product label ends in -SHARED
        (
            edit(
                both(
                    plugin_config(training=shared()),
                    node_selector("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
                )
            ),
            edit(
                both(
                    plugin_config(training=shared()),
                    node_selector("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3-SHARED"),
                )
            ),
        ),
        # a key nothing writes (warning)
        (
            edit(node_selector("nvidia.com/gpu.model", "H100")),
            edit(node_selector("nvidia.com/gpu.machine", "DGX-H100")),
        ),
    ],
    "network-device-count": [
        # with the network-resources-injector on, a VF nobody requests is added to the pod
        (edit(_deployment_on_network), edit(both(_deployment_on_network, _injector(True)))),
    ],
}
