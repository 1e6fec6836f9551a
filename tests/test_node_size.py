"""Pods sized to the nodes (issue 43 item 2): the profile's nodeAllocatable, the per-pod
defaults that fit common GPU node types, `set` refusing pods above a declared node, and
validate's pod-fits-node on a run's pods (the render alone: no live cluster)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, write
from tests.workspace import status
from trainops import quantity
from trainops.model import Document
from trainops.policy.pods import pod_templates
from trainops.policy.settings import load_pack
from trainops.profile.model import parse_profile

BASE = {
    "fabric": "tcp",
    "nic": "eth1",
    "nodes": 2,
    "storageClass": "nfs",
    "image": "r/t:1",
}


def _first_requests(value):
    if isinstance(value, dict):
        if "requests" in value and isinstance(value["requests"], dict):
            return value["requests"]
        for item in value.values():
            found = _first_requests(item)
            if found:
                return found
    if isinstance(value, list):
        for item in value:
            found = _first_requests(item)
            if found:
                return found
    return {}


# Capacity of the smallest common node type of each GPU, from the providers' published
# specifications: a pod's request must stay below it, since the kubelet reserves part of it.
CAPACITY = [
    ("NVIDIA-H100-80GB-HBM3", 8, 96, "1872Gi"),  # Azure ND H100 v5 (96 vCPU); GCP a3-highgpu-8g
    ("NVIDIA-A100-SXM4-40GB", 8, 96, "680Gi"),  # GCP a2-highgpu-8g
    ("NVIDIA-L4", 1, 4, "16Gi"),  # GCP g2-standard-4
    ("", 8, 96, "680Gi"),  # no product named: the smallest 8-GPU type
]


@pytest.mark.parametrize(("product", "gpus", "cpus", "memory"), CAPACITY)
def test_default_pod_requests_fit_the_smallest_common_node_of_the_gpu(product, gpus, cpus, memory):
    profile = parse_profile(
        {**BASE, "gpusPerNode": gpus, **({"gpuProduct": product} if product else {})}, "draft"
    )
    assert profile.cpuPerPod < cpus
    assert quantity.parse(profile.memoryPerPod) < quantity.parse(memory)
    # and leave the node agents room: at most 90% of the node
    assert profile.cpuPerPod <= 0.9 * cpus


def test_new_cluster_writes_requests_below_the_node_it_names(trainops, workspace):
    run = trainops(
        "new-cluster", "gpu-h100", "--fabric", "tcp", "--nic", "eth1", "--gpus-per-node", "8",
        "--nodes", "2", "--storage-class", "nfs", "--image", "ghcr.io/acme/trainer:1.0",
        "--gpu-product", "NVIDIA-H100-80GB-HBM3", cwd=workspace,
    )  # fmt: skip
    assert run.code == 0, run.err
    template = (workspace / "overlays/gpu-h100/training/cluster/torchrun.yaml").read_text()
    requests = _first_requests(yaml.safe_load(template))
    assert quantity.parse(requests["cpu"]) < 96, requests  # Azure ND H100 v5 has 96 vCPUs


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"nodeAllocatable": {"cpu": "63500m", "memory": "900Gi"}, "cpuPerPod": 64},
            "cpuPerPod: 64 CPUs are more than a node offers (63.5 CPUs and 900Gi",
        ),
        (
            {"nodeAllocatable": {"cpu": 190, "memory": "900Gi"}, "memoryPerPod": "1Ti"},
            "memoryPerPod: 1Ti is more than a node offers (190 CPUs and 900Gi",
        ),
        ({"nodeAllocatable": {"cpu": 190}}, "nodeAllocatable.memory: is required"),
        ({"nodeAllocatable": {"cpu": "lots", "memory": "9Gi"}}, "nodeAllocatable.cpu: 'lots'"),
        ({"nodeAllocatable": {"gpu": 8}}, "nodeAllocatable.gpu: unknown key"),
    ],
)
def test_pods_above_the_declared_node_are_refused_naming_the_key(
    trainops, workspace, extra, message
):
    profile = {**BASE, "gpusPerNode": 8, **extra}
    source = write(workspace / "draft.yaml", yaml.safe_dump(profile))
    run = trainops("new-cluster", "draft", "--from", str(source), cwd=workspace)
    assert run.code == 2
    assert message in run.err and len(run.err.strip().splitlines()) == 1, run.err
    assert not (workspace / "overlays/draft").exists()


def test_set_refuses_a_node_smaller_than_the_pods_and_writes_nothing(trainops, workspace):
    # prod-roce's pods request 1536Gi each
    run = trainops("set", "prod-roce", "nodeAllocatable.memory=1000Gi", cwd=workspace)
    assert run.code == 2
    assert "memoryPerPod: 1536Gi is more than a node offers" in run.err
    assert status(workspace) == ""


def _run_asking(workspace: Path, cpus: str) -> str:
    """A copy of prod-roce's elastic run whose workers ask for `cpus` CPUs."""
    source = workspace / "overlays/prod-roce/runs/gpt-pretrain-1121/kustomization.yaml"
    target = workspace / "overlays/prod-roce/runs/gpt-wide-0001/kustomization.yaml"
    text = source.read_text().replace("gpt-pretrain-1121", "gpt-wide-0001")
    resize = (
        "    - op: replace\n"
        "      path: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/"
        "requests/cpu\n"
        f"      value: '{cpus}'\n"
        "    - op: replace\n"
        "      path: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/"
        "limits/cpu\n"
        f"      value: '{cpus}'\n"
    )
    marker = "- target:\n    kind: NetworkPolicy"
    text = text.replace(marker, resize.rstrip("\n") + "\n" + marker, 1)
    write(target, text)
    return "overlays/prod-roce/runs/gpt-wide-0001"


def test_validate_reports_a_run_whose_pods_outgrow_the_node(trainops, workspace):
    # prod-roce declares nodeAllocatable cpu 223
    run = trainops("validate", "--format", "json", _run_asking(workspace, "300"), cwd=workspace)
    findings = [f for f in json.loads(run.out)["findings"] if f["rule"] == "pod-fits-node"]
    assert run.code == 1 and findings, run.out
    assert findings[0]["severity"] == "error"
    assert "requests 300 cpu, more than a GPU node offers (223" in findings[0]["message"]


def test_validate_accepts_a_run_whose_pods_fit(trainops, workspace):
    run = trainops("validate", "--format", "json", _run_asking(workspace, "200"), cwd=workspace)
    assert not [f for f in json.loads(run.out)["findings"] if f["rule"] == "pod-fits-node"]


def test_a_pods_request_is_what_the_scheduler_reserves():
    """Containers summed, sidecars (restartable init containers) added, each other init
    container a floor with the sidecars started before it, the overhead on top."""
    load_pack(REPO / "policies")
    from trainops_policies.node_size import pod_requests  # importable once load_pack ran

    def box(cpu: str, memory: str, **more) -> dict:
        wanted = {"requests": {"cpu": cpu, "memory": memory}}
        return {"name": f"c{cpu}", "image": "i", "resources": wanted, **more}

    spec = {
        "containers": [
            box("10", "10Gi"),
            {"name": "l", "image": "i", "resources": {"limits": {"cpu": "2"}}},
        ],
        "initContainers": [
            box("1", "1Gi", restartPolicy="Always"),
            box("30", "4Gi"),  # a floor: 30 + the 1 of the sidecar before it
        ],
        "overhead": {"cpu": "500m", "memory": "1Gi"},
    }
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    pod = Document(obj=obj, source="p.yaml")
    requests = pod_requests(pod_templates(pod)[0])
    assert requests["cpu"] == Fraction(63, 2)  # max(10 + 2 + 1, 30 + 1) + 0.5
    assert requests["memory"] == 12 * 2**30  # max(10 + 1, 4 + 1) + 1


def test_new_cluster_takes_the_node_size_as_a_flag(trainops, workspace):
    common = ["--fabric", "tcp", "--nic", "eth1", "--gpus-per-node", "8", "--nodes", "2",
              "--storage-class", "nfs", "--image", "ghcr.io/acme/trainer:1.0"]  # fmt: skip
    run = trainops("new-cluster", "gpu-a", *common, "--node-allocatable", "95,600Gi", cwd=workspace)
    assert run.code == 0, run.err
    profile = yaml.safe_load((workspace / "overlays/gpu-a/cluster.yaml").read_text())
    assert profile["nodeAllocatable"] == {"cpu": "95", "memory": "600Gi"}
    template = (workspace / "overlays/gpu-a/training/cluster/torchrun.yaml").read_text()
    assert _first_requests(yaml.safe_load(template)) == {"cpu": "85", "memory": "540Gi"}
    bad = trainops("new-cluster", "gpu-b", *common, "--node-allocatable", "95", cwd=workspace)
    assert bad.code == 2 and "--node-allocatable: '95' is not CPU,MEMORY" in bad.err
