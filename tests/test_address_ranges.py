"""Addresses per training network: the profile's ipRange holds an address per attachment
of every pod the quotas admit, the default range grows with multi-rail clusters, and a run's
job is checked against the range of the platform network it attaches (runs are rendered
apart from it)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.policies.fixtures import nad, platform, pytorchjob
from tests.support import REPO
from trainops.model import Document, Target
from trainops.policy import Context
from trainops.policy.engine import evaluate
from trainops.policy.settings import PolicySettings, load_pack
from trainops.profile.model import ProfileError, parse_profile

load_pack(REPO / "policies")

IB = {
    "fabric": "ib",
    "gpusPerNode": 8,
    "image": "ghcr.io/acme/trainer:1.0",
    "storageClass": "cephfs",
    "rdmaResource": "nvidia.com/ib_vf",
}


def _profile(**values):
    return parse_profile({**IB, **values}, "big")


def test_a_range_smaller_than_the_clusters_attachments_is_refused():
    # 64 nodes, 8 rails: 512 attachments at full use; a /24 holds 254.
    with pytest.raises(ProfileError) as refused:
        _profile(nodes=64, rdmaPerPod=8, ipRange="10.50.0.0/24")
    message = str(refused.value)
    assert "ipRange" in message and "254 addresses" in message and "take 512" in message
    # spares are outside every quota: 64 nodes with 33 spare take 31 x 8 = 248
    assert _profile(nodes=64, spareNodes=33, rdmaPerPod=8, ipRange="10.50.0.0/24")
    assert _profile(nodes=64, rdmaPerPod=8, ipRange="10.50.0.0/22")


def test_a_shared_device_network_takes_one_address_per_pod():
    # host-device and macvlan attach once whatever rdmaPerPod says
    profile = _profile(
        fabric="roce",
        network="host-device",
        nic="ens1f0",
        hca=["mlx5_0"],
        rdmaResource="rdma/roce",
        nodes=200,
        rdmaPerPod=4,
        ipRange="10.40.0.0/24",
    )
    assert profile.ipRange == "10.40.0.0/24"


def test_the_default_range_holds_twice_the_attachments_of_a_large_cluster():
    assert _profile(nodes=4, rdmaPerPod=8).ipRange == "192.168.30.0/24"
    large = _profile(nodes=64, rdmaPerPod=8)
    assert large.ipRange == "192.168.24.0/21"  # 2046 addresses for 2 x 512
    assert _profile(nodes=10000, rdmaPerPod=8).ipRange == "10.0.0.0/14"


def _run_findings(replicas: int, cidr: str, rails: int = 2) -> list[str]:
    job = pytorchjob()
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"].setdefault("metadata", {}).setdefault("annotations", {})[
            "k8s.v1.cni.cncf.io/networks"
        ] = ",".join(["training-net"] * rails)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas - 1
    docs = [Document(obj=job, source="overlays/lab/runs/big/job.yaml")]
    shared = [nad(cidr=cidr), *platform()[1:]]
    ctx = Context(
        Target("kustomization", "overlays/lab/runs/big"),
        docs,
        platform=[Document(obj=copy.deepcopy(d), source="overlays/lab") for d in shared],
    )
    found = evaluate(ctx, PolicySettings())
    return [f"{f.severity}: {f.message}" for f in found if f.rule == "nad-ipam-capacity"]


def test_a_runs_job_is_checked_against_the_platform_networks_range():
    # 40 pods x 2 rails = 80 attachments; a /26 holds 62
    assert _run_findings(40, "10.40.0.0/26") == [
        "error: the job's pods attach training-net (training) 80 times; "
        "its range holds 62 addresses"
    ]
    assert _run_findings(31, "10.40.0.0/26") == []  # 62 attachments: just fits
    assert _run_findings(40, "10.40.0.0/25") == []


def test_the_generated_network_carries_the_sized_range():
    from trainops.profile.overlay import network_config

    config = network_config(_profile(nodes=64, rdmaPerPod=8))
    assert json.dumps(config["ipam"]) == '{"type": "whereabouts", "range": "192.168.24.0/21"}'
