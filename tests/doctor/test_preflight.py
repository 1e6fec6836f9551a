"""`trainops preflight` on recorded API responses (no API server exists in CI): one
recording of a cluster that satisfies overlays/prod-roce, and variants that do not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from trainops.kube import RECORDING_KIND, request_key

OVERLAY = "overlays/prod-roce"
# The CRDs the overlay installs (the GPU Operator's chart brings ClusterPolicy's own).
CRDS = [
    "clusterqueues.kueue.x-k8s.io",
    "jaxjobs.kubeflow.org",
    "localqueues.kueue.x-k8s.io",
    "mpijobs.kubeflow.org",
    "network-attachment-definitions.k8s.cni.cncf.io",
    "paddlejobs.kubeflow.org",
    "pytorchjobs.kubeflow.org",
    "resourceflavors.kueue.x-k8s.io",
    "servicemonitors.monitoring.coreos.com",
    "tfjobs.kubeflow.org",
    "xgboostjobs.kubeflow.org",
]
NAD = "/apis/k8s.cni.cncf.io/v1/namespaces/training/network-attachment-definitions/training-net"
PVC = "/api/v1/namespaces/training/persistentvolumeclaims/checkpoints"
NODES = request_key(
    "/api/v1/nodes", {"labelSelector": "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"}
)


def node(name: str, gpus: int = 8, vfs: int = 2, cordoned: bool = False) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": cordoned},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "nvidia.com/roce_vf": str(vfs)}},
    }


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
        **{
            f"/api/v1/namespaces/{ns}": {"metadata": {"name": ns}}
            for ns in ("kube-system", "kubeflow", "mpi-operator", "training")
        },
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
    assert len([name for name in checks if name.startswith("crd ")]) == len(CRDS)
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


def test_preflight_needs_a_cluster_overlay(trainops):
    run = trainops("preflight", "base")
    assert run.code == 2 and "not a cluster overlay" in run.err
