"""The RDMA fabric under GitOps: what provides the resource and the driver runs depend on.

`rdmaProvider` in the profile picks who installs the RDMA stack:

- `network-operator` (NVIDIA Network Operator v26.4.1, base/operators/network-operator):
  a NicClusterPolicy runs the device plugin that advertises exactly the profile's
  `rdmaResource` (the RDMA shared device plugin on the `nic` of host-device and macvlan
  networks; the SR-IOV device plugin on the VFs of SR-IOV networks, which the hosts
  create), the MOFED driver container when `ofed: driver-container`, ib-kubernetes
  when an InfiniBand partition key is set (it alone applies `pkey`), and the CNI plugins;
- `sriov-network-operator` (v1.6.0, base/operators/sriov-network-operator, SR-IOV
  networks only): a SriovNetworkNodePolicy makes one RDMA VF per rail on the GPU nodes and
  advertises them under `rdmaResource` (the operator's resource prefix is set to its
  prefix); the operator also installs the sriov, ib-sriov and rdma CNI plugins;
- `preinstalled`: the hosts already provide all of it; `trainops preflight` checks that
  the nodes advertise the resource.

Whereabouts (the IPAM of every training network) is installed on every cluster
(base/operators/whereabouts). The GPU Operator's GPUDirect settings follow `gpudirect`
and `ofed` (`overlay.gpu_operator_values`).
"""

from __future__ import annotations

import json
from typing import Any

from trainops.profile.model import GPU_NODES, ClusterProfile

NVIDIA_REPOSITORY = "nvcr.io/nvidia/mellanox"
NETWORK_OPERATOR_RELEASE = "network-operator-v26.4.1"  # component images of that release
DOCA_DRIVER = "doca3.4.1-26.04-1.1.0.0-1"  # the MOFED container of Network Operator v26.4.1
SRIOV_NAMESPACE = "sriov-network-operator"
NETWORK_OPERATOR_NAMESPACE = "nvidia-network-operator"
UFM_SECRET = "ufm-secret"  # UFM credentials for ib-kubernetes: created outside Git
MELLANOX = "15b3"
WAVE = {
    "argocd.argoproj.io/sync-wave": "-1",
    "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true",
}


def operators(p: ClusterProfile) -> list[str]:
    """The fabric's directories under base/operators."""
    extra = ["whereabouts"]
    if p.rdma and p.rdmaProvider != "preinstalled":
        extra.insert(0, p.rdmaProvider)
    return extra


def resource_parts(p: ClusterProfile) -> tuple[str, str]:
    prefix, _, name = p.rdmaResource.partition("/")
    return prefix, name


def _component(image: str, **extra: Any) -> dict[str, Any]:
    return {
        "image": image,
        "repository": NVIDIA_REPOSITORY,
        "version": NETWORK_OPERATOR_RELEASE,
        **extra,
    }


def _device_plugin(p: ClusterProfile) -> tuple[str, dict[str, Any]]:
    prefix, name = resource_parts(p)
    if p.sriov:
        # The VFs of the RDMA NICs: one advertised device per VF.
        selectors: dict[str, Any] = {"vendors": [MELLANOX], "isRdma": True}
        selectors["linkTypes"] = ["infiniband"] if p.fabric == "ib" else ["ether"]
        if p.pfNames:
            selectors["pfNames"] = list(p.pfNames)
        config = {
            "resourceList": [
                {"resourcePrefix": prefix, "resourceName": name, "selectors": selectors}
            ]
        }
        return "sriovDevicePlugin", _component(
            "sriov-network-device-plugin", config=json.dumps(config, indent=2)
        )
    # A shared device: every pod on the node gets the NIC's RDMA device (up to rdmaHcaMax).
    config = {
        "configList": [
            {
                "resourceName": name,
                "resourcePrefix": prefix,
                "rdmaHcaMax": 63,
                "selectors": {"vendors": [MELLANOX], "ifNames": [p.nic]},
            }
        ]
    }
    return "rdmaSharedDevicePlugin", _component(
        "k8s-rdma-shared-dev-plugin", config=json.dumps(config, indent=2)
    )


def nic_cluster_policy(p: ClusterProfile) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if p.ofed == "driver-container":
        spec["ofedDriver"] = {
            "image": "doca-driver",
            "repository": NVIDIA_REPOSITORY,
            "version": DOCA_DRIVER,
            # A driver upgrade reloads the RDMA stack: one node at a time, drained first.
            "upgradePolicy": {
                "autoUpgrade": True,
                "maxParallelUpgrades": 1,
                "drain": {
                    "enable": True,
                    "force": True,
                    "deleteEmptyDir": True,
                    "timeoutSeconds": 300,
                },
            },
        }
    key, plugin = _device_plugin(p)
    spec[key] = plugin
    if p.pkey:
        spec["ibKubernetes"] = _component(
            "ib-kubernetes",
            pKeyGUIDPoolRangeStart="02:00:00:00:00:00:00:00",
            pKeyGUIDPoolRangeEnd="02:FF:FF:FF:FF:FF:FF:FF",
            ufmSecret=UFM_SECRET,
        )
    # The standard CNI plugins (host-device, macvlan) on every node; Multus and
    # whereabouts are the platform's own (base/operators).
    spec["secondaryNetwork"] = {"cniPlugins": _component("plugins")}
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy", "annotations": WAVE},
        "spec": spec,
    }


def _nic_selector(p: ClusterProfile) -> dict[str, Any]:
    """The NICs that get VFs: the profile's pfNames and nicDeviceId, else every NIC of the
    vendor (front-end and storage NICs too, whose VFs would join the training pool)."""
    selector: dict[str, Any] = {"vendor": MELLANOX}
    if p.nicDeviceId:
        selector["deviceID"] = p.nicDeviceId
    if p.pfNames:
        selector["pfNames"] = list(p.pfNames)
    return selector


def sriov_documents(p: ClusterProfile) -> list[dict[str, Any]]:
    _, name = resource_parts(p)
    config = {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": "SriovOperatorConfig",
        "metadata": {"name": "default", "namespace": SRIOV_NAMESPACE, "annotations": WAVE},
        "spec": {
            # No webhooks: their certificates would need cert-manager.
            "enableInjector": False,
            "enableOperatorWebhook": False,
            "configDaemonNodeSelector": GPU_NODES,
            "logLevel": 2,
            # Changing VFs reboots or resets NICs: drain the node first.
            "disableDrain": False,
            "configurationMode": "daemon",
        },
    }
    policy = {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": "SriovNetworkNodePolicy",
        "metadata": {"name": "training", "namespace": SRIOV_NAMESPACE, "annotations": WAVE},
        "spec": {
            "resourceName": name,
            "nodeSelector": GPU_NODES,
            # One VF on each RDMA NIC (rail): a pod takes rdmaPerPod of them.
            "numVfs": 1,
            "nicSelector": _nic_selector(p),
            "deviceType": "netdevice",
            "isRdma": True,
            "linkType": "ib" if p.fabric == "ib" else "eth",
            "priority": 90,
        },
    }
    return [config, policy]


def documents(p: ClusterProfile) -> list[dict[str, Any]]:
    if not p.rdma or p.rdmaProvider == "preinstalled":
        return []
    if p.rdmaProvider == "network-operator":
        return [nic_cluster_policy(p)]
    return sriov_documents(p)


def resource_prefix_patch(p: ClusterProfile) -> dict[str, Any] | None:
    """The SR-IOV operator advertises <RESOURCE_PREFIX>/<resourceName>: set the prefix."""
    if not p.rdma or p.rdmaProvider != "sriov-network-operator":
        return None
    prefix, _ = resource_parts(p)
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sriov-network-operator", "namespace": SRIOV_NAMESPACE},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "sriov-network-operator",
                            "env": [{"name": "RESOURCE_PREFIX", "value": prefix}],
                        }
                    ]
                }
            }
        },
    }
    return patch
