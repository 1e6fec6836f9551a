"""Fixtures of the network configuration rules: the SR-IOV device plugin's config.json,
SR-IOV operator pool configs, CNI interface and network names, whereabouts IPAM sections."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import NAMESPACE, Docs, edit, nad


def _dp_configmap(*entries: dict[str, Any]) -> Callable[[], Docs]:
    def build() -> Docs:
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "sriovdp-config", "namespace": "kube-system"},
                "data": {"config.json": json.dumps({"resourceList": list(entries)})},
            }
        ]

    return build


def _entry(name: str = "rdma_vf", **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resourceName": name,
        "resourcePrefix": "nvidia.com",
        "selectors": {"vendors": ["15b3"], "pfNames": ["ens1f0"], "isRdma": True},
    }
    entry.update(fields)
    return {k: v for k, v in entry.items() if v is not None}


def _nic_policy(*entries: dict[str, Any]) -> Callable[[], Docs]:
    def build() -> Docs:
        return [
            {
                "apiVersion": "mellanox.com/v1alpha1",
                "kind": "NicClusterPolicy",
                "metadata": {"name": "nic-cluster-policy"},
                "spec": {
                    "sriovDevicePlugin": {
                        "image": "sriov-network-device-plugin",
                        "config": json.dumps({"resourceList": list(entries)}),
                    }
                },
            }
        ]

    return build


def _pools(*selectors: Any) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = []
        for index, selector in enumerate(selectors):
            spec: dict[str, Any] = {"maxUnavailable": 1}
            if selector is not None:
                spec["nodeSelector"] = selector
            docs.append(
                {
                    "apiVersion": "sriovnetwork.openshift.io/v1",
                    "kind": "SriovNetworkPoolConfig",
                    "metadata": {"name": f"pool-{index}", "namespace": "sriov-network-operator"},
                    "spec": spec,
                }
            )
        return docs

    return build


WORKER = {"matchLabels": {"node-role.kubernetes.io/worker": ""}}
GPU_WORKER = {"matchLabels": {"node-role.kubernetes.io/worker": "", "pool": "gpu"}}
CPU_WORKER = {"matchLabels": {"node-role.kubernetes.io/worker": "", "pool": "cpu"}}


def _networks(value: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for doc in docs:
            if doc["kind"] in ("PyTorchJob", "MPIJob"):
                for replica in next(
                    v for k, v in doc["spec"].items() if k.endswith("ReplicaSpecs")
                ).values():
                    annotations = (
                        replica["template"].setdefault("metadata", {}).setdefault("annotations", {})
                    )
                    annotations["k8s.v1.cni.cncf.io/networks"] = value

    return change


def _json_networks(interface: str) -> Callable[[Docs], None]:
    return _networks(json.dumps([{"name": "training-net", "interface": interface}]))


def _ipam(**fields: Any) -> Callable[[], Docs]:
    """The baseline NAD alone, its whereabouts section changed by `fields`."""

    def build() -> Docs:
        doc = nad()
        config = json.loads(doc["spec"]["config"])
        section = config["plugins"][0]["ipam"]
        for key, value in fields.items():
            if value is None:
                section.pop(key, None)
            else:
                section[key] = value
        doc["spec"]["config"] = json.dumps(config)
        return [doc]

    return build


def _named_nad(name: str) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = nad()
        config = json.loads(doc["spec"]["config"])
        config["name"] = name
        doc["spec"]["config"] = json.dumps(config)
        return [doc]

    return build


def _sriov_network(ipam: str) -> Callable[[], Docs]:
    return lambda: [
        {
            "apiVersion": "sriovnetwork.openshift.io/v1",
            "kind": "SriovNetwork",
            "metadata": {"name": "rail0", "namespace": "sriov-network-operator"},
            "spec": {"resourceName": "rail_rdma", "networkNamespace": NAMESPACE, "ipam": ipam},
        }
    ]


FIXTURES = {
    "sriov-device-plugin-config": (
        _dp_configmap(_entry(deviceType="netdevice")),
        _dp_configmap(_entry(deviceType="netDevice")),
    ),
    "sriov-pool-config-overlap": (_pools(WORKER, GPU_WORKER), _pools(CPU_WORKER, GPU_WORKER)),
    "cni-interface-name": (
        edit(_json_networks("rdma-rail-0-east")),
        edit(_json_networks("rdma-rail-0")),
    ),
    "cni-network-name": (_named_nad("training/net"), _named_nad("training-net")),
    "whereabouts-config-invalid": (
        _ipam(range="10.40.0.10-10.40.0.200"),
        _ipam(range="10.40.0.10-10.40.0.0/16"),
    ),
}

MORE = {
    "sriov-device-plugin-config": [
        # the prefix written into the name
        (
            _dp_configmap(_entry("nvidia.com/rdma_vf", resourcePrefix=None)),
            _dp_configmap(_entry("rdma_vf")),
        ),
        # two entries with one prefixed name
        (
            _dp_configmap(_entry(), _entry()),
            _dp_configmap(_entry(), _entry("rdma_vf_1")),
        ),
        # same name, other prefixes: two resources
        (
            _dp_configmap(_entry(), _entry()),
            _dp_configmap(_entry(), _entry(resourcePrefix="mellanox.com")),
        ),
        # a selector field written as a string
        (
            _dp_configmap(_entry(selectors={"vendors": "15b3"})),
            _dp_configmap(_entry(selectors={"vendors": ["15b3"]})),
        ),
        # selectors as a list of objects are accepted; an empty list is not
        (
            _dp_configmap(_entry(selectors=[])),
            _dp_configmap(_entry(selectors=[{"vendors": ["15b3"]}, {"pfNames": ["ens2f0"]}])),
        ),
        # no selectors at all: the plugin crashes
        (_dp_configmap(_entry(selectors=None)), _dp_configmap(_entry())),
        # RDMA and vDPA at once
        (
            _dp_configmap(
                _entry(selectors={"vendors": ["15b3"], "isRdma": True, "vdpaType": "vhost"})
            ),
            _dp_configmap(_entry(selectors={"vendors": ["15b3"], "vdpaType": "vhost"})),
        ),
        # the accelerator type ignores network selectors
        (
            _dp_configmap(_entry(deviceType="Accelerator", selectors={"pfNames": "x"})),
            _dp_configmap(_entry(deviceType="accelerator", selectors={"pfNames": "x"})),
        ),
        # NicClusterPolicy: a '.' passes the Network Operator's webhook, not the plugin
        (_nic_policy(_entry("rdma.vf")), _nic_policy(_entry("rdma_vf"))),
        # NicClusterPolicy: the plugin's own deviceType check
        (
            _nic_policy(_entry(deviceType="NetDevice")),
            _nic_policy(_entry(deviceType="netDevice")),
        ),
    ],
    "sriov-pool-config-overlap": [
        # no nodeSelector: every node
        (_pools(None, GPU_WORKER), _pools(GPU_WORKER)),
        # the same selector twice
        (_pools(GPU_WORKER, GPU_WORKER), _pools(GPU_WORKER, CPU_WORKER)),
        # expressions: cannot tell without the nodes
        (
            _pools(WORKER, GPU_WORKER),
            _pools(
                {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["gpu"]}]},
                GPU_WORKER,
            ),
        ),
    ],
    "cni-interface-name": [
        (edit(_networks("training-net@net 1")), edit(_networks("training-net@net1"))),
        (edit(_json_networks("rail:0")), edit(_json_networks("rail.0"))),
        (edit(_json_networks("..")), edit(_json_networks("net1"))),
    ],
    "cni-network-name": [
        (_named_nad("-training"), _named_nad("training_net.v1")),
    ],
    "whereabouts-config-invalid": [
        (_ipam(gateway="10.40.0.1/16"), _ipam(gateway="10.40.0.1")),
        (_ipam(range_start="10.40.0.10/16"), _ipam(range_start="10.40.0.10")),
        (_ipam(range="10.40.0.0"), _ipam(range="10.40.0.0/16")),
        (_ipam(range="10.50.0.10-10.40.0.0/16"), _ipam(range="010.040.000.000/16")),
        (
            _ipam(exclude=["10.40.0.0-10.40.0.9"]),
            _ipam(exclude=["10.40.0.0/28", "10.40.0.20"]),
        ),
        (
            _ipam(range=None, ipRanges=[{"range": "fd00::/64"}, {"range": "10.40.0.0/33"}]),
            _ipam(range=None, ipRanges=[{"range": "fd00::/64"}, {"range": "10.40.0.0/16"}]),
        ),
        # a templated range is not judged
        (_ipam(range_end="10.40.0.300"), _ipam(range="{{ .Values.range }}")),
        (_ipam(range_end="10.40.0.300"), _ipam(range_end="10.40.255.254")),
        (
            _sriov_network('{"type": "whereabouts", "range": "10.40.0.0/16", "gateway": "x"}'),
            _sriov_network('{"type": "whereabouts", "range": "10.40.0.0/16"}'),
        ),
    ],
}
