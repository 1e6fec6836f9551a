"""Hosts that carry the GPU driver (issue 43 item 5, `installed: [gpu-driver]`) and GPUDirect.

The GPU Operator (v25.10.1) reads `driver.rdma` and `driver.kernelModuleType` only while it
builds its driver DaemonSet, which it deletes when `driver.enabled` is false, and its
validator never waits for nvidia_peermem (trainops/profile/host_driver.py cites the lines).
So the generated values must not claim rdma.enabled, the profile refuses the combination
no host can provide, and `trainops preflight` checks the hosts' modules on the live nodes.
Preflight reads recorded API-server responses: the API server is the only thing mocked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, write
from trainops.kube import RECORDING_KIND, request_key

PROD_IB = (REPO / "overlays/prod-ib/cluster.yaml").read_text()
NODES = request_key("/api/v1/nodes", {"labelSelector": "nvidia.com/gpu.product=NVIDIA-H200"})
PROBE = "/apis/apps/v1/namespaces/training/daemonsets/gpudirect-probe"
PROBE_PODS = request_key(
    "/api/v1/namespaces/training/pods", {"labelSelector": "app=gpudirect-probe"}
)


def _cluster(trainops, workspace: Path, name: str, extra: str, base: str = PROD_IB) -> Path:
    source = write(workspace / f"{name}.yaml", base + extra)
    run = trainops("new-cluster", name, "--from", str(source), cwd=workspace)
    assert run.code == 0, run.err
    return workspace / "overlays" / name


def _values(overlay: Path) -> tuple[str, dict]:
    text = (overlay / "addons/gpu-operator.yaml").read_text()
    return text, yaml.safe_load(text)


def test_hosts_with_the_driver_get_no_peermem_the_operator_would_ignore(trainops, workspace):
    overlay = _cluster(trainops, workspace, "hostib", "installed: [gpu-driver]\n")
    text, values = _values(overlay)
    # The operator deletes its driver DaemonSet, the only reader of driver.rdma: saying
    # rdma.enabled there would promise an nvidia-peermem nothing loads.
    assert values["driver"]["enabled"] is False
    assert values["driver"]["rdma"] == {"enabled": False, "useHostMofed": False}
    assert "needs the hosts to have\n# nvidia_peermem loaded" in text
    assert "--emit-gpudirect-probe" in text
    check = trainops("validate", "--format", "json", "overlays/hostib", cwd=workspace)
    findings = json.loads(check.out)["findings"]
    assert check.code == 0 and not [f for f in findings if f["severity"] != "info"], findings


def test_with_the_operators_driver_peermem_stays_on(trainops, workspace):
    overlay = _cluster(trainops, workspace, "opib", "")
    text, values = _values(overlay)
    assert values["driver"]["enabled"] is True
    assert values["driver"]["rdma"] == {"enabled": True, "useHostMofed": True}
    assert "nvidia_peermem" not in text


def test_host_driver_with_peermem_and_the_mofed_container_is_refused(trainops, workspace):
    source = write(
        workspace / "draft.yaml", PROD_IB + "ofed: driver-container\ninstalled: [gpu-driver]\n"
    )
    run = trainops("new-cluster", "draft", "--from", str(source), cwd=workspace)
    assert run.code == 2
    assert "installed: gpu-driver with gpudirect peermem and ofed driver-container" in run.err
    assert len(run.err.strip().splitlines()) == 1, run.err
    # The same profile with the operator's driver container is fine.
    source = write(workspace / "ok.yaml", PROD_IB + "ofed: driver-container\n")
    assert trainops("new-cluster", "ok", "--from", str(source), cwd=workspace).code == 0


@pytest.mark.parametrize(
    ("gpudirect", "readiness"),
    [
        ("peermem", "test -d /sys/module/nvidia_peermem"),
        ("dmabuf", "grep -q 'Open Kernel Module' /proc/driver/nvidia/version"),
    ],
)
def test_emit_gpudirect_probe_tests_the_hosts_module_on_every_gpu_node(
    trainops, workspace, gpudirect, readiness
):
    base = PROD_IB.replace("gpudirect: peermem", f"gpudirect: {gpudirect}")
    _cluster(trainops, workspace, "hostib", "installed: [gpu-driver]\n", base)
    run = trainops("preflight", "overlays/hostib", "--emit-gpudirect-probe", cwd=workspace)
    assert run.code == 0, run.err
    probe = yaml.safe_load(run.out)
    assert probe["kind"] == "DaemonSet" and probe["metadata"]["name"] == "gpudirect-probe"
    spec = probe["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    [container] = spec["containers"]
    assert container["readinessProbe"]["exec"]["command"][-1] == readiness
    assert "resources" in container and "nvidia.com/gpu" not in container["resources"]["limits"]
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_emit_gpudirect_probe_refuses_where_the_operator_provides_the_modules(trainops, workspace):
    _cluster(trainops, workspace, "opib", "")
    run = trainops("preflight", "overlays/opib", "--emit-gpudirect-probe", cwd=workspace)
    assert run.code == 2 and "nothing to probe" in run.err, run.err


def _node(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "nvidia.com/ib_vf": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _probe_pod(node: str, ready: bool) -> dict:
    return {
        "metadata": {"name": f"gpudirect-probe-{node}"},
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def _preflight_check(trainops, workspace: Path, overlay: str, responses: dict):
    recording = write(
        workspace / "recording.json",
        json.dumps({"kind": RECORDING_KIND, "responses": responses}),
    )
    run = trainops(
        "preflight", overlay, "--recording", str(recording), "--format", "json", cwd=workspace
    )
    assert run.code in (0, 1), run.err
    checks = {c["check"]: c for c in json.loads(run.out)["checks"]}
    return run, checks.get("gpudirect on the hosts")


def test_preflight_on_a_recorded_api_server_fails_a_node_without_nvidia_peermem(
    trainops, workspace
):
    _cluster(trainops, workspace, "hostib", "installed: [gpu-driver]\n")
    nodes = [f"gpu-{i}" for i in range(4)]
    responses = {
        NODES: {"items": [_node(n) for n in nodes]},
        PROBE: {"status": {"numberReady": 3, "desiredNumberScheduled": 4}},
        PROBE_PODS: {"items": [_probe_pod(n, ready=n != "gpu-2") for n in nodes]},
    }
    run, check = _preflight_check(trainops, workspace, "overlays/hostib", responses)
    assert run.code == 1
    assert check["status"] == "fail"
    assert check["detail"] == "3 of 4 GPU nodes have nvidia_peermem loaded; not: gpu-2"
    assert "modprobe nvidia-peermem" in check["fix"]


def test_preflight_on_a_recorded_api_server_passes_when_every_host_loaded_it(trainops, workspace):
    _cluster(trainops, workspace, "hostib", "installed: [gpu-driver]\n")
    nodes = [f"gpu-{i}" for i in range(4)]
    responses = {
        NODES: {"items": [_node(n) for n in nodes]},
        PROBE: {"status": {"numberReady": 4, "desiredNumberScheduled": 4}},
        PROBE_PODS: {"items": [_probe_pod(n, ready=True) for n in nodes]},
    }
    _, check = _preflight_check(trainops, workspace, "overlays/hostib", responses)
    assert (check["status"], check["detail"]) == (
        "pass",
        "every one of 4 GPU nodes has nvidia_peermem loaded",
    )


def test_preflight_on_a_recorded_api_server_warns_until_the_hosts_are_probed(trainops, workspace):
    _cluster(trainops, workspace, "hostib", "installed: [gpu-driver]\n")
    responses = {NODES: {"items": [_node("gpu-0")]}}
    _, check = _preflight_check(trainops, workspace, "overlays/hostib", responses)
    assert check["status"] == "warn"
    assert check["detail"] == "not probed (the hosts must have nvidia_peermem loaded)"
    assert "--emit-gpudirect-probe" in check["fix"]


def test_preflight_on_a_recorded_api_server_skips_it_where_the_operator_loads_peermem(
    trainops, workspace
):
    _cluster(trainops, workspace, "opib", "")
    responses = {NODES: {"items": [_node("gpu-0")]}}
    _, check = _preflight_check(trainops, workspace, "overlays/opib", responses)
    assert check is None


def test_the_profile_reference_says_what_the_hosts_must_do():
    text = (REPO / "docs/overlays.md").read_text()
    assert "so the hosts also load nvidia-peermem for gpudirect peermem" in text
    assert "modprobe nvidia-peermem" in text
