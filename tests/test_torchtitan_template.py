"""The torchtitan template: every cluster that runs the Training Operator offers it, it
renders with real kustomize and validates clean, `new-run --template torchtitan` makes a
run of it, and the policy pack's launcher rule holds it to trainer-launch."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.support import REPO
from tests.test_profiles import validate_clean
from tests.workspace import status
from trainops.profile.model import load_profile
from trainops.profile.overlay import templates

TITAN = ["python", "-m", "torchtitan.train"]
CLUSTERS = sorted(p.parent.name for p in (REPO / "overlays").glob("*/cluster.yaml"))


def offering() -> list[str]:
    return [
        name
        for name in CLUSTERS
        if "torchtitan" in templates(load_profile(REPO / "overlays" / name / "cluster.yaml"))
    ]


def rendered_jobs(trainops, workspace: Path, path: str) -> list[dict]:
    run = trainops("render", "--format", "json", path, cwd=workspace)
    assert run.code == 0, run.err
    return [r["object"] for r in json.loads(run.out) if r["object"]["kind"] == "PyTorchJob"]


def rank_containers(job: dict) -> list[dict]:
    specs = job["spec"]["pytorchReplicaSpecs"]
    return [specs[role]["template"]["spec"]["containers"][0] for role in ("Master", "Worker")]


def test_clusters_with_the_training_operator_offer_torchtitan_and_only_they():
    for name in CLUSTERS:
        profile = load_profile(REPO / "overlays" / name / "cluster.yaml")
        offered = "torchtitan" in templates(profile)
        assert offered == profile.trainer_v1, name
        generated = (REPO / "overlays" / name / "training/torchtitan/kustomization.yaml").exists()
        assert generated == offered, name
    assert len(offering()) >= 3


def test_each_clusters_torchtitan_template_renders_and_validates_clean(trainops, workspace):
    paths = [f"overlays/{name}/training/torchtitan" for name in offering()]
    report = validate_clean(trainops, workspace, *paths)
    assert report["summary"]["resources"] == 2 * len(paths)  # each job and its policy
    assert not [f for f in report["findings"] if f["severity"] == "warning"]
    for path in paths:
        (job,) = rendered_jobs(trainops, workspace, path)
        assert job["metadata"]["name"] == "train-torchtitan"
        assert job["metadata"]["labels"]["trainops.dev/workload"] == "torchtitan"
        for container in rank_containers(job):
            command = container["command"]
            assert command[:5] == ["trainer-launch", "--", *TITAN], path
            # Checkpoints straight into the run's own directory of the volume: each new
            # step-N is progress for trainer-launch's retry budget.
            folder = command[command.index("--checkpoint.folder") + 1]
            assert folder == "$(TRAINER_CHECKPOINT_DIR)"
            assert "--checkpoint.enable" in command
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            assert mounts["/checkpoints"]["subPathExpr"] == "$(TRAINER_JOB_NAME)"
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "240"
            # Its step metrics as the trainer's gauges, where the PodMonitor scrapes.
            imports = command[command.index("--override.imports") + 1]
            assert imports == "trainer.titan.prometheus_metrics"
            assert {"name": "metrics", "containerPort": 9400} in container["ports"]
            assert env["TRAINER_METRICS_PORT"] == "9400"
            # The cluster component reached it: GPUs of the node, one torchrun per pod.
            assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
        assert job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "ExitCode"


def test_new_run_torchtitan_renders_validates_and_keeps_the_platform_command(trainops, workspace):
    args = ["--module", "llama3", "--config", "llama3_8b", "--training.steps", "3000"]
    run = trainops(
        "new-run",
        "prod-roce",
        "llama3-8b-1",
        "--template",
        "torchtitan",
        "--nodes",
        "3",
        "--image",
        "ghcr.io/example-org/trainops-torchtitan:0.3.0",
        "--dataset-claim",
        "c4-en:/data",
        "--",
        *args,
        cwd=workspace,
    )
    assert run.code == 0, run.err
    path = "overlays/prod-roce/runs/llama3-8b-1"
    report = validate_clean(trainops, workspace, path)
    assert report["summary"]["resources"] == 2  # the job and its NetworkPolicy
    (job,) = rendered_jobs(trainops, workspace, path)
    assert job["metadata"]["name"] == "llama3-8b-1"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    for container in rank_containers(job):
        assert container["command"][:5] == ["trainer-launch", "--", *TITAN]
        assert container["args"] == args
        assert container["image"] == "ghcr.io/example-org/trainops-torchtitan:0.3.0"
        assert {"/data", "/checkpoints"} <= {m["mountPath"] for m in container["volumeMounts"]}


def test_new_run_torchtitan_refuses_a_command_and_args_without_module_or_config(
    trainops, workspace
):
    base = ["new-run", "prod-roce", "tt-1", "--template", "torchtitan", "--nodes", "2"]
    refused = trainops(*base, "--command", "python train.py", cwd=workspace)
    assert refused.code == 2
    assert "the template starts torchtitan" in refused.err
    refused = trainops(*base, "--", "--module", "llama3", "--training.steps", "5", cwd=workspace)
    assert refused.code == 2
    assert "give --config" in refused.err and "Traceback" not in refused.err
    assert status(workspace) == ""
    # Without arguments the run keeps the template's (the debug model).
    assert trainops(*base, cwd=workspace).code == 0
    (job,) = rendered_jobs(trainops, workspace, "overlays/prod-roce/runs/tt-1")
    assert rank_containers(job)[0]["args"] == [
        "--module",
        "llama3",
        "--config",
        "llama3_debugmodel",
    ]


def test_launcher_rule_accepts_the_template_and_flags_torchtitan_without_trainer_launch(
    trainops, workspace
):
    assert (
        trainops(
            "new-run",
            "lab-tcp",
            "bare-titan",
            "--template",
            "torchtitan",
            "--nodes",
            "2",
            cwd=workspace,
        ).code
        == 0
    )
    run_dir = workspace / "overlays/lab-tcp/runs/bare-titan"
    report = validate_clean(trainops, workspace, str(run_dir.relative_to(workspace)))
    assert "exitcode-policy-launcher" not in {f["rule"] for f in report["findings"]}
    # The same run started by torchrun's own entry point, as torchtitan's scripts do.
    kustomization = yaml.safe_load((run_dir / "kustomization.yaml").read_text())
    ops = [
        {
            "op": "replace",
            "path": f"/spec/pytorchReplicaSpecs/{role}/template/spec/containers/0/command",
            "value": ["torchrun", "--nproc-per-node", "8", "-m", "torchtitan.train"],
        }
        for role in ("Master", "Worker")
    ]
    kustomization["patches"].append(
        {"target": {"kind": "PyTorchJob"}, "patch": yaml.safe_dump(ops)}
    )
    (run_dir / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    flagged = trainops("validate", "--format", "json", str(run_dir), cwd=workspace)
    findings = json.loads(flagged.out)["findings"]
    rule = [f for f in findings if f["rule"] == "exitcode-policy-launcher"]
    assert len(rule) == 2, findings  # Master and Worker
    assert all("torchrun exits 1 for every failure" in f["message"] for f in rule)


def test_torchtitan_image_recipe_pins_the_release_the_docs_name():
    dockerfile = (REPO / "trainer" / "Dockerfile.torchtitan").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.MULTILINE))
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["TORCHTITAN_VERSION"])
    assert '"torchtitan==${TORCHTITAN_VERSION}"' in dockerfile
    guide = (REPO / "docs" / "torchtitan.md").read_text()
    assert f"**torchtitan {args['TORCHTITAN_VERSION']}** (PyPI)" in guide
    # The torch the project tests with, kept through torchtitan's own dependencies.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    pins = [d for deps in project["project"]["optional-dependencies"].values() for d in deps]
    assert f"torch=={args['TORCH_VERSION']}" in pins
    assert '"torch==${TORCH_VERSION}"' in dockerfile
    # trainer-launch from this repository, as the template's command needs; non-root.
    assert "--no-deps /opt/trainer" in dockerfile
    assert re.search(r'^ENTRYPOINT \["trainer-launch"\]$', dockerfile, re.MULTILINE)
    users = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")


@pytest.mark.parametrize("template", ["pytorchjob", "torchtitan"])
def test_a_one_node_run_is_the_master_alone(trainops, workspace, template):
    """--nodes 1 on a Master/Worker template: the Workers are removed (after the run's
    edits of their pod template), so the job is one pod whose torchrun sees one node
    (the operator's PET_NNODES counts the replicas), with the run's dataset and args."""
    image = ["--image", "ghcr.io/example-org/trainops-torchtitan:0.3.0"]
    made = trainops(
        "new-run", "prod-roce", "one-node", "--template", template, "--nodes", "1",
        *(image if template == "torchtitan" else []), "--dataset-claim", "corpus:/data",
        cwd=workspace,
    )  # fmt: skip
    assert made.code == 0, made.err
    path = "overlays/prod-roce/runs/one-node"
    validate_clean(trainops, workspace, path)
    (job,) = rendered_jobs(trainops, workspace, path)
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert list(specs) == ["Master"] and specs["Master"]["replicas"] == 1
    mounts = specs["Master"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert "/data" in {m["mountPath"] for m in mounts}
