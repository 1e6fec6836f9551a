"""The profile's observability keys (`alerts`, `preflight`, `gpuHealth`) as a platform
engineer uses them: `trainops set`, the regenerated overlay rendered with real
kustomize, the preflight job `--emit-job` prints, and one-line errors for bad values."""

from __future__ import annotations

import pytest
import yaml

from tests.support import REPO


def _emit(trainops, workspace, overlay: str) -> dict:
    run = trainops("preflight", f"overlays/{overlay}", "--emit-job", "--name", "t", cwd=workspace)
    assert run.code == 0, run.err
    job, policy = yaml.safe_load_all(run.out)  # the job and its NetworkPolicy
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["name"] == "t"
    return job


def _render(trainops, workspace, path: str) -> list[dict]:
    run = trainops("render", path, cwd=workspace)
    assert run.code == 0, run.err
    return [d for d in yaml.safe_load_all(run.out) if d]


def test_pairwise_acceptance_with_a_floor_from_the_profile(trainops, workspace):
    run = trainops(
        "set",
        "prod-roce",
        "preflight.nodes=4",
        "preflight.mode=pairwise",
        "preflight.busbwFloor=180",
        cwd=workspace,
    )
    assert run.code == 0, run.err
    job = _emit(trainops, workspace, "prod-roce")
    assert (job["kind"], job["metadata"]["name"]) == ("MPIJob", "t")
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    [launcher] = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    assert launcher["command"][0] == "trainer-acceptance"
    # The cluster's NCCL settings reach the ranks: -x NAME for each, as mpirun takes them.
    forwarded = [launcher["command"][i + 1] for i, w in enumerate(launcher["command"]) if w == "-x"]
    assert {"NCCL_IB_TIMEOUT", "NCCL_IB_GID_INDEX", "NCCL_DEBUG"} <= set(forwarded)
    args = launcher["args"]
    assert args[: args.index("--")] == ["--min-busbw", "180", "--pairwise"]
    assert args[args.index("--") + 1 :] == ["-b", "8", "-e", "8G", "-f", "2", "-g", "1"]
    [worker] = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8  # the cluster's pod shape


def test_a_cluster_without_mpi_keeps_the_trainers_check_with_the_floor(trainops, workspace):
    profile = yaml.safe_load((REPO / "overlays/lab-tcp/cluster.yaml").read_text())
    profile.update(mpiOperator="none", nodes=4, preflight={"nodes": 3, "busbwFloor": 9.5})
    source = workspace / "cpu-lab.yaml"
    source.write_text(yaml.safe_dump(profile))
    run = trainops("new-cluster", "cpu-lab", "--from", str(source), cwd=workspace)
    assert run.code == 0, run.err
    job = _emit(trainops, workspace, "cpu-lab")
    assert job["kind"] == "PyTorchJob"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Worker"]["replicas"] == 2  # and the Master: three nodes
    for replica in replicas.values():
        [container] = replica["template"]["spec"]["containers"]
        assert container["args"][-2:] == ["--min-busbw", "9.5"]
    run = trainops("set", "cpu-lab", "preflight.mode=pairwise", cwd=workspace)
    assert run.code == 2 and "mpiOperator: none" in run.err
    assert len(run.err.strip().splitlines()) == 1


def test_alert_thresholds_and_gpu_health_follow_the_profile(trainops, workspace):
    run = trainops(
        "set",
        "prod-ib",
        "alerts.ettrTarget=0.8",
        "alerts.stallMinutes=30",
        "gpuHealth.level=3",
        "gpuHealth.schedule=0 4 * * 6",
        cwd=workspace,
    )
    assert run.code == 0, run.err
    docs = _render(trainops, workspace, "overlays/prod-ib/monitoring")
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    exprs = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert exprs["ETTRBelowTarget"].endswith("< 0.8")
    assert exprs["TrainingStalled"].endswith("> 1800")
    [cron] = [d for d in docs if d["kind"] == "CronJob"]
    assert cron["spec"]["schedule"] == "0 4 * * 6"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 32, 32)
    pod = job["template"]["spec"]
    [container] = pod["containers"]
    assert {"name": "DIAG_LEVEL", "value": "3"} in container["env"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    [monitor] = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}
    [board] = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "trainops-dashboard"
    ]
    assert board["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert "Training runs: prod-ib" in board["data"]["trainops-prod-ib.json"]


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("alerts.ettrTarget=2", "alerts.ettrTarget: must be above 0 and at most 1"),
        ("alerts.stragglerRatio=0.9", "alerts.stragglerRatio: must be above 1"),
        ("alerts.stallMinutes=soon", "alerts.stallMinutes: must be an integer"),
        ("alerts.bogus=1", "alerts.bogus: unknown key"),
        ("preflight.nodes=99", "preflight.nodes: must be between 1 and the cluster's 16 nodes"),
        ("preflight.mode=pairwise", "pairwise needs at least 3 nodes"),
        ("preflight.busbwFloor=-1", "preflight.busbwFloor: must not be negative"),
        ("gpuHealth.level=7", "gpuHealth.level: must be one of 1, 2, 3, 4"),
        ("gpuHealth.schedule=weekly", "is not a cron schedule"),
    ],
)
def test_bad_values_are_one_line_errors_and_change_nothing(
    trainops, workspace, assignment, message
):
    before = (workspace / "overlays/prod-roce/cluster.yaml").read_text()
    run = trainops("set", "prod-roce", assignment, cwd=workspace)
    assert run.code == 2, run.err
    assert message in run.err and "cluster.yaml" in run.err
    assert len(run.err.strip().splitlines()) == 1 and "Traceback" not in run.err
    assert (workspace / "overlays/prod-roce/cluster.yaml").read_text() == before
