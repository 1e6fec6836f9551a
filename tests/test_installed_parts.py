"""Clusters that come with parts installed (issue 43 item 5): `installed` and `monitoring`
leave out what a managed or pre-built cluster already runs or lacks, so its platform sync
does not fight or fail on it (the render alone; no live cluster)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support import write

TCP = ["--fabric", "tcp", "--nic", "eth1", "--gpus-per-node", "8", "--nodes", "2",
       "--storage-class", "nfs", "--image", "ghcr.io/acme/trainer:1.0"]  # fmt: skip


def _render(trainops, workspace, cluster: str) -> list[dict]:
    run = trainops("render", "--format", "json", f"overlays/{cluster}", cwd=workspace)
    assert run.code == 0, run.err
    return [record["object"] for record in json.loads(run.out)]


def test_a_managed_cluster_gets_no_multus_whereabouts_driver_or_prometheus_objects(
    trainops, workspace
):
    run = trainops(
        "new-cluster", "managed", *TCP, "--installed", "multus,whereabouts",
        "--installed", "gpu-driver", "--monitoring", "none", cwd=workspace,
    )  # fmt: skip
    assert run.code == 0, run.err
    overlay = workspace / "overlays/managed"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert not [r for r in kustomization["resources"] if r.endswith(("/multus", "/whereabouts"))]
    values = yaml.safe_load((overlay / "addons/gpu-operator.yaml").read_text())
    assert values["driver"]["enabled"] is False
    assert not (overlay / "monitoring/rules.yaml").exists()
    kinds = {obj["kind"] for obj in _render(trainops, workspace, "managed")}
    assert not kinds & {"PodMonitor", "PrometheusRule", "DaemonSet"}, kinds
    assert "NetworkAttachmentDefinition" in kinds  # the network itself stays
    check = trainops("validate", "--format", "json", "overlays/managed", cwd=workspace)
    errors = [f for f in json.loads(check.out)["findings"] if f["severity"] == "error"]
    assert check.code == 0 and not errors, errors


def test_by_default_the_overlay_installs_them(trainops, workspace):
    assert trainops("new-cluster", "plain", *TCP, cwd=workspace).code == 0
    kinds = {obj["kind"] for obj in _render(trainops, workspace, "plain")}
    assert {"PodMonitor", "PrometheusRule", "DaemonSet"} <= kinds
    values = yaml.safe_load((workspace / "overlays/plain/addons/gpu-operator.yaml").read_text())
    assert values["driver"]["enabled"] is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("installed: [istio]\n", "installed: 'istio' is not one of multus"),
        ("installed: [network-operator]\n", "installed: network-operator: the overlay installs"),
        ("monitoring: grafana\n", "monitoring: must be one of prometheus-operator, none"),
        ("monitoring: none\nalerts: {gpuTemperature: 85}\n", "alerts: set thresholds of"),
    ],
)
def test_parts_that_cannot_apply_are_refused_naming_the_key(trainops, workspace, extra, message):
    profile = "fabric: tcp\nnic: eth1\ngpusPerNode: 1\nnodes: 2\nstorageClass: nfs\nimage: r/t:1\n"
    source = write(workspace / "draft.yaml", profile + extra)
    run = trainops("new-cluster", "draft", "--from", str(source), cwd=workspace)
    assert run.code == 2
    assert message in run.err and len(run.err.strip().splitlines()) == 1, run.err
