"""`trainops preflight` on recorded API responses (no API server exists in CI): one
recording of a cluster that satisfies overlays/prod-roce, and variants that do not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from trainops.kube import RECORDING_KIND, request_key

OVERLAY = "overlays/prod-roce"
# The CRDs the overlay installs (the GPU Operator's chart brings ClusterPolicy's own).
CRDS = [
    "clusterqueues.kueue.x-k8s.io",
    "ippools.whereabouts.cni.cncf.io",
    "jaxjobs.kubeflow.org",
    "localqueues.kueue.x-k8s.io",
    "mpijobs.kubeflow.org",
    "network-attachment-definitions.k8s.cni.cncf.io",
    "overlappingrangeipreservations.whereabouts.cni.cncf.io",
    "ovsnetworks.sriovnetwork.openshift.io",
    "paddlejobs.kubeflow.org",
    "podmonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
    "pytorchjobs.kubeflow.org",
    "resourceflavors.kueue.x-k8s.io",
    "sriovibnetworks.sriovnetwork.openshift.io",
    "sriovnetworknodepolicies.sriovnetwork.openshift.io",
    "sriovnetworknodestates.sriovnetwork.openshift.io",
    "sriovnetworkpoolconfigs.sriovnetwork.openshift.io",
    "sriovnetworks.sriovnetwork.openshift.io",
    "sriovoperatorconfigs.sriovnetwork.openshift.io",
    "tfjobs.kubeflow.org",
    "workloadpriorityclasses.kueue.x-k8s.io",
    "xgboostjobs.kubeflow.org",
]
NAMESPACES = ("kube-system", "kubeflow", "mpi-operator", "sriov-network-operator", "training")
RACK = "topology.kubernetes.io/rack"
NAD = "/apis/k8s.cni.cncf.io/v1/namespaces/training/network-attachment-definitions/training-net"
PVC = "/api/v1/namespaces/training/persistentvolumeclaims/checkpoints"
NODES = request_key(
    "/api/v1/nodes", {"labelSelector": "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"}
)


def node(
    name: str, gpus: int = 8, vfs: int = 2, cordoned: bool = False, ready: bool = True, rack=None
) -> dict:
    index = int(name.rsplit("-", 1)[-1])
    return {
        "metadata": {"name": name, "labels": {RACK: rack or f"rack-{index // 4}"}},
        "spec": {"unschedulable": cordoned},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "nvidia.com/roce_vf": str(vfs)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def attached(name: str, address: str) -> dict:
    """A pod Multus attached to the training network (its network-status annotation)."""
    status = [
        {"name": "cilium", "interface": "eth0", "ips": ["10.0.3.7"], "default": True},
        {"name": "training/training-net", "interface": "net1", "ips": [address]},
    ]
    annotations = {"k8s.v1.cni.cncf.io/network-status": json.dumps(status)}
    return {"metadata": {"name": name, "annotations": annotations}}


def probe_pod(node_name: str, ready: bool = True) -> dict:
    return {
        "metadata": {"name": f"checkpoint-probe-{node_name}"},
        "spec": {"nodeName": node_name},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


PODS = "/api/v1/namespaces/training/pods"
PROBE = "/apis/apps/v1/namespaces/training/daemonsets/checkpoint-probe"
PROBE_PODS = request_key(PODS, {"labelSelector": "app=checkpoint-probe"})


@pytest.fixture(scope="module")
def nad_config(tmp_path_factory) -> str:
    import subprocess
    import sys

    rendered = subprocess.run(
        [sys.executable, "-m", "trainops", "render", "--format", "json", OVERLAY],
        capture_output=True,
        text=True,
        check=True,
    )
    [nad] = [
        r["object"]
        for r in json.loads(rendered.stdout)
        if r["object"]["kind"] == "NetworkAttachmentDefinition"
        and r["source"].endswith("prod-roce")
    ]
    return nad["spec"]["config"]


@pytest.fixture
def healthy(nad_config) -> dict:
    established = {"status": {"conditions": [{"type": "Established", "status": "True"}]}}
    responses = {
        **{f"/api/v1/namespaces/{ns}": {"metadata": {"name": ns}} for ns in NAMESPACES},
        "/apis/apps/v1/daemonsets": {
            "items": [
                {
                    "metadata": {"name": "kube-multus-ds"},
                    "status": {"numberReady": 16, "desiredNumberScheduled": 16},
                }
            ]
        },
        **{
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}": established
            for name in CRDS
        },
        NAD: {"spec": {"config": nad_config}},
        PVC: {"status": {"phase": "Bound", "accessModes": ["ReadWriteMany"]}},
        NODES: {"items": [node(f"gpu-{i}") for i in range(16)]},
        PODS: {"items": [attached("llama-worker-0", "10.40.0.12")]},
        PROBE: {"status": {"numberReady": 16, "desiredNumberScheduled": 16}},
        PROBE_PODS: {"items": [probe_pod(f"gpu-{i}") for i in range(16)]},
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/training": {"metadata": {}},
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/training/localqueues/training": {"metadata": {}},
        "/apis/nvidia.com/v1/clusterpolicies/cluster-policy": {"status": {"state": "ready"}},
    }
    return responses


def preflight(trainops, tmp_path: Path, responses: dict, *args: str):
    recording = tmp_path / "cluster.json"
    recording.write_text(json.dumps({"kind": RECORDING_KIND, "responses": responses}))
    return trainops("preflight", OVERLAY, "--recording", str(recording), *args)


def statuses(run) -> dict[str, tuple[str, str]]:
    return {c["check"]: (c["status"], c["detail"]) for c in json.loads(run.out)["checks"]}


def test_preflight_passes_on_a_recorded_cluster_that_satisfies_the_overlay(
    trainops, tmp_path, healthy
):
    run = preflight(trainops, tmp_path, healthy, "--format", "json")
    assert run.code == 0, run.out + run.err
    checks = statuses(run)
    assert {status for status, _ in checks.values()} == {"pass"}
    assert {name.removeprefix("crd ") for name in checks if name.startswith("crd ")} == set(CRDS)
    assert checks["nodes"][1].startswith("16 of 16 nodes labelled")
    assert checks["pvc training/checkpoints"] == ("pass", "Bound, ReadWriteMany")


def test_preflight_fails_on_a_recorded_cluster_that_does_not(trainops, tmp_path, healthy):
    broken = copy.deepcopy(healthy)
    del broken[NAD]
    broken[PVC] = {"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"]}}
    broken[NODES] = {"items": [node("gpu-0"), node("gpu-1", vfs=0), node("gpu-2", cordoned=True)]}
    broken["/apis/apps/v1/daemonsets"]["items"][0]["status"]["numberReady"] = 12
    pytorchjobs = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org"
    broken[pytorchjobs] = {"status": {"conditions": [{"type": "Established", "status": "False"}]}}
    broken["/apis/nvidia.com/v1/clusterpolicies/cluster-policy"] = {"status": {"state": "notReady"}}
    run = preflight(trainops, tmp_path, broken, "--format", "json")
    assert run.code == 1
    checks = statuses(run)
    assert checks["network training/training-net"][0] == "fail"
    assert checks["pvc training/checkpoints"] == ("fail", "Bound but ReadWriteOnce")
    assert checks["multus"] == ("warn", "kube-multus-ds: 12/16 ready")
    assert checks["crd pytorchjobs.kubeflow.org"] == ("fail", "not Established")
    assert checks["gpu-operator"] == ("fail", "ClusterPolicy cluster-policy: notReady")
    status, detail = checks["nodes"]
    assert status == "warn" and detail.startswith("1 of 3 nodes")
    assert "gpu-1 (nvidia.com/roce_vf 0/2)" in detail and "gpu-2 (cordoned)" in detail


def test_preflight_checks_what_the_overlay_assumes_of_nodes_and_fabric(trainops, tmp_path, healthy):
    """Topology labels on Ready nodes, the advertised RDMA resource, net1 inside ipRange and
    a checkpoint write from every GPU node: each fails on its own broken recording."""
    broken = copy.deepcopy(healthy)
    nodes = [node(f"gpu-{i}") for i in range(16)]
    del nodes[3]["metadata"]["labels"][RACK]
    nodes[5]["status"]["conditions"][0]["status"] = "False"
    nodes[7]["status"]["allocatable"]["nvidia.com/roce_vf"] = "1"
    broken[NODES] = {"items": nodes}
    broken[PODS] = {
        "items": [attached("llama-worker-0", "10.40.0.12"), attached("llama-worker-1", "10.9.0.4")]
    }
    broken[PROBE_PODS] = {"items": [probe_pod(f"gpu-{i}", ready=i != 9) for i in range(16)]}
    run = preflight(trainops, tmp_path, broken, "--format", "json")
    assert run.code == 1
    checks = statuses(run)
    status, detail = checks["topology"]
    assert status == "fail"
    assert "not Ready: gpu-5" in detail and f"gpu-3 (no {RACK})" in detail
    assert checks["rdma resource"] == (
        "warn",
        "15 of 16 GPU nodes advertise nvidia.com/roce_vf (>= 2 per pod); short: gpu-7 (1)",
    )
    assert checks["net1 addresses"] == (
        "fail",
        "outside 10.40.0.0/16: training/llama-worker-1 10.9.0.4",
    )
    assert checks["checkpoint writes"] == (
        "fail",
        "15 of 16 GPU nodes wrote to the checkpoint claim; not: gpu-9",
    )


def test_preflight_fails_nodes_too_small_for_a_training_pod(trainops, tmp_path, healthy):
    """prod-roce's pods request 96 CPUs and 1536Gi: a node offering less cannot run one
    (kube-scheduler's NodeResourcesFit), whatever its GPUs."""
    broken = copy.deepcopy(healthy)
    nodes = [node(f"gpu-{i}") for i in range(3)]
    sizes = [("223", "2000Gi"), ("95500m", "2000Gi"), ("223", "1100Gi")]
    for item, (cpu, memory) in zip(nodes, sizes, strict=True):
        item["status"]["allocatable"].update({"cpu": cpu, "memory": memory})
    broken[NODES] = {"items": nodes}
    checks = statuses(preflight(trainops, tmp_path, broken, "--format", "json"))
    status, detail = checks["nodes"]
    assert status == "warn" and detail.startswith("1 of 3 nodes"), detail
    assert "96 cpu, 1536Gi memory" in detail
    assert "gpu-1 (cpu 95.5/96)" in detail and "gpu-2 (memory 1100Gi/1536Gi)" in detail


def test_preflight_names_the_missing_probe_and_attachment_as_warnings(trainops, tmp_path, healthy):
    quiet = copy.deepcopy(healthy)
    del quiet[PROBE]
    quiet[PODS] = {"items": []}
    run = preflight(trainops, tmp_path, quiet, "--format", "json")
    assert run.code == 0
    checks = statuses(run)
    assert checks["checkpoint writes"] == ("warn", "not probed")
    assert checks["net1 addresses"] == ("warn", "no pod attached to the training network yet")


def test_preflight_warns_when_a_domain_holds_more_nodes_than_the_profile_says(
    trainops, tmp_path, healthy, workspace
):
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    levels = "topology:\n- label: topology.kubernetes.io/rack\n  nodes: 2\n"
    profile.write_text(profile.read_text() + levels)
    recording = tmp_path / "cluster.json"
    recording.write_text(json.dumps({"kind": RECORDING_KIND, "responses": healthy}))
    run = trainops(
        "preflight", OVERLAY, "--recording", str(recording), "--format", "json", cwd=workspace
    )
    status, detail = statuses(run)["topology"]
    assert status == "warn"
    assert "topology.kubernetes.io/rack=rack-0 has 4 nodes, the profile says 2" in detail


def test_emit_checkpoint_probe_writes_from_every_gpu_node(trainops):
    run = trainops("preflight", OVERLAY, "--emit-checkpoint-probe")
    assert run.code == 0, run.err
    probe = yaml.safe_load(run.out)
    assert probe["kind"] == "DaemonSet" and probe["metadata"]["name"] == "checkpoint-probe"
    spec = probe["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "checkpoints"
    assert "/checkpoints/.preflight/$NODE_NAME" in spec["containers"][0]["command"][-1]


def test_preflight_warns_when_the_network_differs_from_git(trainops, tmp_path, healthy):
    drifted = copy.deepcopy(healthy)
    drifted[NAD] = {"spec": {"config": '{"cniVersion": "0.3.1", "type": "macvlan"}'}}
    run = preflight(trainops, tmp_path, drifted)
    assert run.code == 0  # a warning
    assert "differs from Git" in run.out
    assert run.out.rstrip().endswith("passed, 1 warnings, 0 failed")


def test_emit_job_prints_a_preflight_job_without_sync_hooks(trainops):
    run = trainops("preflight", OVERLAY, "--emit-job", "--name", "pf-drill")
    assert run.code == 0, run.err
    # The fabric acceptance test: nccl-tests under the cluster's MPIJob.
    assert "name: pf-drill" in run.out and "- trainer-acceptance" in run.out
    assert "argocd.argoproj.io/hook" not in run.out
    assert "NCCL_IB_TIMEOUT" in run.out  # the cluster's fabric settings come along
    # Its NetworkPolicy, renamed with it: the namespace admits nothing else between pods.
    job, policy = yaml.safe_load_all(run.out)
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["name"] == "pf-drill"
    own = {"matchLabels": {"training.kubeflow.org/job-name": "pf-drill"}}
    assert policy["spec"]["podSelector"] == own
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": own}]}]
    assert policy["metadata"]["namespace"] == job["metadata"]["namespace"] == "training"


def test_preflight_needs_a_cluster_overlay(trainops):
    run = trainops("preflight", "base")
    assert run.code == 2 and "not a cluster overlay" in run.err
