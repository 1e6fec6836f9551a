"""Fabric NIC selection (issue 43 item 4): the profile's pfNames and nicDeviceId say which
NICs get the SR-IOV VFs of the training network, in the SriovNetworkNodePolicy and the
Network Operator's SR-IOV device plugin, and are refused where nothing applies them (the
render alone; no live cluster)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.workspace import status
from trainops.profile import fabric
from trainops.profile.model import parse_profile

SRIOV = {
    "fabric": "roce",
    "network": "sriov-roce",
    "gidIndex": 3,
    "rdmaResource": "nvidia.com/roce_vf",
    "rdmaPerPod": 2,
    "rdmaProvider": "sriov-network-operator",
    "gpusPerNode": 8,
    "nodes": 4,
    "storageClass": "cephfs",
    "image": "ghcr.io/acme/trainer:1.0",
}
RAILS = ["ens1f0np0", "ens2f0np0"]


def _policy_selector(profile) -> dict:
    [_, policy] = fabric.sriov_documents(profile)
    return policy["spec"]["nicSelector"]


def test_the_node_policy_selects_the_profiles_physical_functions():
    profile = parse_profile({**SRIOV, "pfNames": RAILS, "nicDeviceId": "1021"}, "east")
    assert _policy_selector(profile) == {
        "vendor": fabric.MELLANOX,
        "deviceID": "1021",
        "pfNames": RAILS,
    }


def test_without_them_every_nic_of_the_vendor_gets_vfs():
    assert _policy_selector(parse_profile(SRIOV, "east")) == {"vendor": fabric.MELLANOX}


def test_the_network_operators_device_plugin_takes_the_vfs_of_those_functions_alone():
    profile = parse_profile({**SRIOV, "rdmaProvider": "network-operator", "pfNames": RAILS}, "e")
    policy = fabric.nic_cluster_policy(profile)
    config = json.loads(policy["spec"]["sriovDevicePlugin"]["config"])
    [resource] = config["resourceList"]
    assert resource["selectors"]["pfNames"] == RAILS


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"network": "macvlan", "nic": "eth1", "hca": ["mlx5_0"], "pfNames": RAILS},
         "pfNames: only applies to SR-IOV networks"),
        ({"rdmaProvider": "preinstalled", "pfNames": RAILS},
         "pfNames: nothing applies it with rdmaProvider preinstalled"),
        ({"rdmaProvider": "network-operator", "nicDeviceId": "1021"},
         "nicDeviceId: only sriov-network-operator selects physical functions by device ID"),
        ({"nicDeviceId": "ConnectX-7"}, "nicDeviceId: 'ConnectX-7' is not a PCI device ID"),
        ({"pfNames": ["ens1f0np0", "ens1f0np0"]}, "pfNames: names an interface twice"),
        ({"pfNames": ["a-name-longer-than-15"]}, "is not an interface name"),
        ({"pfNames": ["../eth0"]}, "is not an interface name"),
    ],
)  # fmt: skip
def test_nic_selection_is_refused_where_nothing_applies_it(trainops, workspace, change, message):
    source = workspace / "draft.yaml"
    source.write_text(yaml.safe_dump({**SRIOV, **change}))
    run = trainops("new-cluster", "draft", "--from", str(source), cwd=workspace)
    assert run.code == 2
    assert message in run.err and len(run.err.strip().splitlines()) == 1, run.err
    assert not (workspace / "overlays/draft").exists()


def test_set_and_new_cluster_write_them_into_the_fabric(trainops, workspace):
    run = trainops(
        "set", "prod-roce", "pfNames=[ens1f0np0, ens2f0np0]", "nicDeviceId=1021", cwd=workspace
    )
    assert run.code == 0, run.err
    fabric_yaml = workspace / "overlays/prod-roce/platform/fabric.yaml"
    policies = [
        d for d in yaml.safe_load_all(fabric_yaml.read_text())
        if d and d["kind"] == "SriovNetworkNodePolicy"
    ]  # fmt: skip
    assert policies[0]["spec"]["nicSelector"]["pfNames"] == RAILS
    assert policies[0]["spec"]["nicSelector"]["deviceID"] == "1021"
    check = trainops("validate", "--format", "json", "overlays/prod-roce", cwd=workspace)
    errors = [f for f in json.loads(check.out)["findings"] if f["severity"] == "error"]
    assert check.code == 0 and not errors, errors
    flags = ["--fabric", "roce", "--gpus-per-node", "8", "--nodes", "2", "--gid-index", "3",
             "--rdma-resource", "nvidia.com/roce_vf", "--rdma-provider", "network-operator",
             "--storage-class", "nfs", "--image", "ghcr.io/acme/trainer:1.0",
             "--pf-names", "ens1f0np0,ens2f0np0"]  # fmt: skip
    made = trainops("new-cluster", "fresh", *flags, cwd=workspace)
    assert made.code == 0, made.err
    profile = yaml.safe_load((workspace / "overlays/fresh/cluster.yaml").read_text())
    assert profile.get("pfNames") == RAILS, profile
    assert status(workspace) != ""
