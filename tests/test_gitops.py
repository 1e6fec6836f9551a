"""The repository's own GitOps content: it renders, validates, and keeps its promises."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.hostile.harness import run_cli
from tests.support import MIRROR, REPO, write
from tests.workspace import make_workspace
from trainops.cache import Cache
from trainops.config import load_project_config
from trainops.model import Target
from trainops.profile import tenancy
from trainops.profile.model import load_profile
from trainops.profile.overlay import generate
from trainops.profile.projects import render_projects
from trainops.render.engine import Renderer, RenderOptions
from trainops.render.inputs import iter_strings

OVERLAYS = sorted(p.parent for p in (REPO / "overlays").glob("*/cluster.yaml"))
CLUSTERS = [p.name for p in OVERLAYS]
V1_CLUSTERS = [p.name for p in OVERLAYS if load_profile(p / "cluster.yaml").trainer_v1]


# An overlay's patch that sets one NCCL variable on the Workers only.
WORKER_NCCL_PATCH = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: train
  namespace: training
spec:
  pytorchReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: pytorch
            env:
            - name: NCCL_IB_TIMEOUT
              value: "23"
"""


@pytest.fixture
def kustomize(shared_cache_dir: Path):
    """Render with real kustomize, remote bases from the repository's mirror. The tests
    render the same overlays again and again: the run's render cache, keyed by content,
    builds each once (a cluster overlay costs kustomize about 1.5 CPU-s)."""
    renderer = Renderer(RenderOptions(mirror=MIRROR), Cache(shared_cache_dir))

    def render(path: Path) -> list[dict]:
        [result] = renderer.render([Target("kustomization", str(path))])
        return [doc.obj for doc in result.documents]

    return render


def the_job(docs: list[dict]) -> dict:
    """The one job of a template's or run's render (beside its NetworkPolicy)."""
    [job] = [d for d in docs if d["kind"] != "NetworkPolicy"]
    return job


def assert_own_checkpoint_directory(container: dict, job_label: str, mounted: bool = True) -> None:
    """The trainer sees only its job's directory of the shared volume, and knows its job
    (an MPI launcher only passes both on to the ranks: `mounted` False)."""
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["TRAINER_CHECKPOINT_DIR"]["value"] == "/checkpoints"
    name = env["TRAINER_JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert name == f"metadata.labels['{job_label}']"
    if not mounted:
        return
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == "/checkpoints"]
    assert mount == {
        "name": "checkpoints",
        "mountPath": "/checkpoints",
        "subPathExpr": "$(TRAINER_JOB_NAME)",
    }


def container_env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def pod_specs(job: dict):
    for key, value in job["spec"].items():
        if key.endswith("ReplicaSpecs"):
            for role, replica in value.items():
                yield role, replica["template"]["spec"]


def pod_annotations(job: dict):
    for key, value in job["spec"].items():
        if key.endswith("ReplicaSpecs"):
            for role, replica in value.items():
                yield role, replica["template"]["metadata"].get("annotations", {})


def test_four_clusters_with_the_required_shapes():
    assert CLUSTERS == ["lab-tcp", "prod-b200", "prod-ib", "prod-roce"]
    lab, b200, ib, roce = (load_profile(p / "cluster.yaml") for p in OVERLAYS)
    assert (lab.fabric, lab.network, lab.gpusPerNode) == ("tcp", "macvlan", 1)
    assert (b200.fabric, b200.trainer, b200.mpiOperator) == ("ib", "v2", "mpi-operator")
    assert {lab.mpiOperator, ib.mpiOperator} == {"training-operator"}
    # Kueue queues only the MPI Operator's v2beta1 MPIJobs.
    assert roce.mpiOperator == "mpi-operator"
    assert {lab.trainer, ib.trainer, roce.trainer} == {"v1"}
    assert (roce.fabric, roce.network, roce.gpusPerNode, roce.scheduler) == (
        "roce",
        "sriov-roce",
        8,
        "kueue",
    )
    assert roce.gidIndex is not None and roce.placement == "pack"
    assert (ib.fabric, ib.scheduler) == ("ib", "volcano")
    for overlay in OVERLAYS:
        assert len(list((overlay / "runs").iterdir())) >= 1, overlay


def test_every_overlay_run_and_argocd_validates_with_zero_errors(trainops):
    run = trainops("validate", "--format", "json", "overlays", "argocd")
    assert run.code == 0, run.out
    summary = json.loads(run.out)["summary"]
    assert summary["errors"] == 0
    assert summary["targets"] >= 4 * 6 + 1  # platform, 4 templates and a run per cluster
    warnings = [f for f in json.loads(run.out)["findings"] if f["severity"] == "warning"]
    assert warnings == []  # the mirror holds every pinned remote base


def test_an_overlay_nccl_patch_keeps_every_other_variable(tmp_path: Path, kustomize):
    """An overlay patching one NCCL variable of a job keeps the base's and fabric's others."""
    overlay = tmp_path / "overlay"
    template = os.path.relpath(REPO / "overlays/prod-roce/training/pytorchjob", overlay)
    write(
        overlay / "kustomization.yaml",
        f"resources:\n- {template}\npatches:\n- path: nccl.yaml\n",
    )
    write(
        overlay / "nccl.yaml",
        WORKER_NCCL_PATCH,
    )
    job = the_job(kustomize(overlay))
    specs = dict(pod_specs(job))
    worker = container_env(specs["Worker"]["containers"][0])
    master = container_env(specs["Master"]["containers"][0])
    assert worker["NCCL_IB_TIMEOUT"] == "23"  # the overlay's change
    assert master["NCCL_IB_TIMEOUT"] == "22"  # the cluster's value, untouched elsewhere
    for name in (
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_IB_DISABLE",
        "NCCL_IB_GID_INDEX",
        "NCCL_SOCKET_IFNAME",
        "TRAINER_CHECKPOINT_DIR",
    ):
        assert name in worker, name
    assert len(worker) == len(master)
    assert specs["Worker"]["containers"][0]["image"].startswith("ghcr.io/")


def test_without_the_merge_keys_component_the_same_patch_drops_variables(tmp_path: Path, kustomize):
    """The control: kustomize's default for custom resources replaces the env list."""
    base = tmp_path / "base"
    write(base / "kustomization.yaml", "resources:\n- job.yaml\n")
    job = (REPO / "base/training/pytorchjob/pytorchjob.yaml").read_text()
    write(base / "job.yaml", job)
    overlay = tmp_path / "overlay"
    write(overlay / "kustomization.yaml", "resources:\n- ../base\npatches:\n- path: p.yaml\n")
    write(
        overlay / "p.yaml",
        WORKER_NCCL_PATCH,
    )
    rendered = the_job(kustomize(overlay))
    worker = dict(pod_specs(rendered))["Worker"]["containers"][0]
    assert container_env(worker) == {"NCCL_IB_TIMEOUT": "23"}
    assert "image" not in worker  # the whole container was replaced
    merge_keys = os.path.relpath(REPO / "base/components/merge-keys", base)
    write(base / "kustomization.yaml", f"resources:\n- job.yaml\ncomponents:\n- {merge_keys}\n")
    merged = the_job(kustomize(overlay))
    worker = dict(pod_specs(merged))["Worker"]["containers"][0]
    assert {"NCCL_DEBUG", "NCCL_IB_TIMEOUT"} <= set(container_env(worker))


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_mpi_launcher_forwards_every_worker_variable(cluster, kustomize):
    job = the_job(kustomize(REPO / "overlays" / cluster / "training" / "mpijob"))
    specs = dict(pod_specs(job))
    launcher = specs["Launcher"]["containers"][0]
    worker = specs["Worker"]["containers"][0]
    command = launcher["command"]
    forwarded = {command[i + 1] for i, arg in enumerate(command) if arg == "-x"}
    nccl = {name for name in container_env(worker) if name.startswith(("NCCL_", "TRAINER_"))}
    assert nccl <= forwarded
    assert (
        container_env(launcher).items()
        >= {
            k: v
            for k, v in container_env(worker).items()
            if k in nccl and k != "TRAINER_CHECKPOINT_DIR"
        }.items()
    )
    assert "nvidia.com/gpu" not in launcher["resources"].get("limits", {})
    profile = load_profile(REPO / "overlays" / cluster / "cluster.yaml")
    assert job["spec"]["slotsPerWorker"] == profile.gpusPerNode
    assert "-np" not in command


@pytest.mark.parametrize("cluster", V1_CLUSTERS)
def test_templates_honour_the_profile(cluster, kustomize):
    profile = load_profile(REPO / "overlays" / cluster / "cluster.yaml")
    job = the_job(kustomize(REPO / "overlays" / cluster / "training" / "pytorchjob"))
    assert job["spec"]["nprocPerNode"] == str(profile.gpusPerNode)
    assert "backoffLimit" not in job["spec"]["runPolicy"]  # counts nothing under ExitCode
    for role, spec in pod_specs(job):
        container = spec["containers"][0]
        # The cluster owns the launcher, a run the program (trainer-launch's args).
        assert container["command"] == ["trainer-launch"]
        assert container["args"][:2] == ["--module", "trainer"]
        limits = container["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == profile.gpusPerNode
        assert (profile.rdmaResource in limits) == profile.rdma
        # Non-root: IPC_LOCK would never reach the process (memlock comes from the runtime).
        caps = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
        assert "IPC_LOCK" not in caps
        security = spec["securityContext"]
        assert security["runAsUser"] == 1000 and security["runAsNonRoot"] is True
        assert security["fsGroupChangePolicy"] == "OnRootMismatch"
        env = container_env(container)
        assert env["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG_SUBSYS" in env
        if profile.rdma and profile.sriov:
            # One attachment per VF; NCCL uses every VF the pod sees.
            assert "NCCL_IB_HCA" not in env
            networks = dict(pod_annotations(job))[role]["k8s.v1.cni.cncf.io/networks"]
            assert networks.split(",") == ["training-net"] * profile.rdmaPerPod
        elif profile.rdma:
            assert env["NCCL_IB_HCA"] == "=" + ",".join(profile.hca)
        timeout = int(env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"])
        assert 30 < timeout < spec["terminationGracePeriodSeconds"]
        shm = {v["name"]: v for v in spec["volumes"]}["dshm"]["emptyDir"]
        assert shm == {"medium": "Memory", "sizeLimit": profile.shmSize}
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/checkpoints", "/dev/shm"} <= mounts
        assert_own_checkpoint_directory(container, "training.kubeflow.org/job-name")
        assert spec["terminationGracePeriodSeconds"] > 30


def test_platform_objects_and_sync_waves(kustomize):
    docs = kustomize(REPO / "overlays" / "prod-roce")
    by_kind = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    [nad] = by_kind["NetworkAttachmentDefinition"]
    config = json.loads(nad["spec"]["config"])
    assert config["plugins"][0]["type"] == "sriov"
    assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == "nvidia.com/roce_vf"
    [pvc] = by_kind["PersistentVolumeClaim"]
    assert (
        pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        and pvc["spec"]["storageClassName"] == "cephfs"
    )

    def wave(doc):
        return int(doc["metadata"].get("annotations", {}).get("argocd.argoproj.io/sync-wave", "0"))

    assert {wave(d) for d in by_kind["CustomResourceDefinition"]} == {-2}
    assert {wave(d) for d in by_kind["Deployment"]} == {-2}
    for kind in ("NetworkAttachmentDefinition", "PersistentVolumeClaim", "LocalQueue"):
        assert {wave(d) for d in by_kind[kind]} == {-1}, kind
    # One owner per object: the GPU Operator's chart owns its ClusterPolicy. No job runs
    # in a sync (no hook waits on two nodes or on a queue).
    assert "ClusterPolicy" not in by_kind and "PyTorchJob" not in by_kind
    [queue] = by_kind["ClusterQueue"]
    profile = load_profile(REPO / "overlays/prod-roce/cluster.yaml")
    assert profile.rdmaResource in queue["spec"]["resourceGroups"][0]["coveredResources"]
    [multus] = [d for d in by_kind["DaemonSet"] if d["metadata"]["name"] == "kube-multus-ds"]
    daemon = multus["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert daemon["limits"] == {"memory": "1Gi"}
    for crd in by_kind["CustomResourceDefinition"]:
        if crd["spec"]["group"] == "kubeflow.org":
            assert (
                "ServerSideApply=true"
                in crd["metadata"]["annotations"]["argocd.argoproj.io/sync-options"]
            )


def test_volcano_cluster_turns_on_gang_scheduling_for_all_pods(kustomize):
    docs = kustomize(REPO / "overlays" / "prod-ib")
    [operator] = [
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "training-operator"
    ]
    assert (
        "--gang-scheduler-name=volcano"
        in operator["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    run = the_job(kustomize(REPO / "overlays/prod-ib/runs/cnn-mpi-1121"))
    replicas = sum(r["replicas"] for r in run["spec"]["mpiReplicaSpecs"].values())
    assert run["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == replicas


def test_runs_set_only_what_a_run_changes(kustomize):
    for overlay in OVERLAYS:
        for run_dir in (overlay / "runs").iterdir():
            kustomization = yaml.safe_load((run_dir / "kustomization.yaml").read_text())
            assert set(kustomization) <= {"apiVersion", "kind", "resources", "images", "patches"}
            assert kustomization["resources"][0].startswith("../../training/")
            job = the_job(kustomize(run_dir))
            assert job["metadata"]["name"] == run_dir.name
            assert "ttlSecondsAfterFinished" not in job["spec"].get("runPolicy", {})


def test_committed_overlays_are_exactly_what_the_profiles_generate():
    for overlay in OVERLAYS:
        profile = load_profile(overlay / "cluster.yaml")
        for relative, text in generate(profile).items():
            assert (overlay / relative).read_text() == text, f"{overlay.name}/{relative} is stale"


def test_argocd_projects_list_every_cluster_and_every_rendered_kind(kustomize):
    config = load_project_config(REPO)
    profiles = [load_profile(overlay / "cluster.yaml") for overlay in OVERLAYS]
    assert (REPO / "argocd/projects.yaml").read_text() == render_projects(config.repo_url, profiles)
    projects = {
        p["metadata"]["name"]: p["spec"]
        for p in yaml.safe_load_all((REPO / "argocd/projects.yaml").read_text())
    }
    for spec in projects.values():
        text = json.dumps(spec)
        assert '"*"' not in text  # no wildcard source, destination or kind
    platform = projects["trainops-platform"]
    allowed = {(k["group"], k["kind"]) for k in platform["clusterResourceWhitelist"]}
    allowed |= {(k["group"], k["kind"]) for k in platform["namespaceResourceWhitelist"]}
    runs_allowed = {
        (k["group"], k["kind"]) for k in projects["trainops-runs"]["namespaceResourceWhitelist"]
    }
    for overlay in OVERLAYS:
        for doc in kustomize(overlay):
            group = doc["apiVersion"].rpartition("/")[0]
            assert (group, doc["kind"]) in allowed, (overlay.name, doc["kind"])
            namespace = doc["metadata"].get("namespace")
            if namespace:
                assert {"name": overlay.name, "namespace": namespace} in platform["destinations"]
        for run_dir in (overlay / "runs").iterdir():
            for doc in kustomize(run_dir):
                assert (doc["apiVersion"].rpartition("/")[0], doc["kind"]) in runs_allowed


def test_every_repo_url_in_argocd_is_the_configured_one():
    config = load_project_config(REPO)
    for path in (REPO / "argocd").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            for text in iter_strings(doc):
                if "github.com" in text and text.endswith(".git"):
                    assert text == config.repo_url, path


FORK = "https://git.acme.example/ml/trainops.git"


def test_a_fork_points_every_application_at_itself(tmp_path):
    """After a fork: set repo-url, regenerate (trainops set CLUSTER), and every repoURL
    and sourceRepos entry of this repository in argocd/ names the fork; chart
    repositories stay."""
    root = make_workspace(tmp_path / "fork")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(load_project_config(root).repo_url, FORK))
    outcome = run_cli("set", "lab-tcp", cwd=root)
    assert outcome.code == 0, outcome.err
    seen = set()
    for path in (root / "argocd").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            for text in iter_strings(doc):
                if text.endswith(".git"):
                    assert text == FORK, path
                    seen.add(path.name)
    assert {"platform.yaml", "addons.yaml", "runs.yaml", "projects.yaml"} <= seen
    charts = (root / "argocd/applicationsets/addons.yaml").read_text()
    assert "repoURL: https://helm.ngc.nvidia.com/nvidia" in charts


def _by_kind(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


def _deployment_args(docs: list[dict], name: str) -> list[str]:
    [deployment] = [d for d in _by_kind(docs)["Deployment"] if d["metadata"]["name"] == name]
    return deployment["spec"]["template"]["spec"]["containers"][0].get("args", [])


def test_mpi_operator_cluster_has_one_owner_of_the_mpijob_crd(kustomize):
    """mpiOperator: mpi-operator installs the MPI Operator's CRD, and no Training Operator
    MPIJob; the other clusters keep the v1 CRD only. (tests/test_profiles.py covers a
    cluster that runs both operators.)"""
    for overlay in OVERLAYS:
        docs = kustomize(overlay)
        kinds = _by_kind(docs)
        crds = [
            c for c in kinds["CustomResourceDefinition"] if c["spec"]["group"] == "kubeflow.org"
        ]
        [mpijobs] = [c for c in crds if c["metadata"]["name"] == "mpijobs.kubeflow.org"]
        versions = [v["name"] for v in mpijobs["spec"]["versions"]]
        deployments = {d["metadata"]["name"] for d in kinds["Deployment"]}
        profile = load_profile(overlay / "cluster.yaml")
        if profile.mpi_v2:
            assert versions == ["v2beta1"]
            assert _deployment_args(docs, "mpi-operator")[:2] == [
                "-alsologtostderr",
                "--lock-namespace=mpi-operator",
            ]
            if not profile.trainer_v1:  # no Training Operator and none of its v1 kinds
                assert {c["spec"]["names"]["kind"] for c in crds} == {"MPIJob"}
                assert "training-operator" not in deployments
            else:  # the Training Operator serves every kind but MPIJob
                args = _deployment_args(docs, "training-operator")
                assert "--enable-scheme=pytorchjob" in args
                assert "--enable-scheme=mpijob" not in args
        else:
            assert versions == ["v1"]
            training_operator = _deployment_args(docs, "training-operator")
            assert not any("--enable-scheme" in arg for arg in training_operator)
            # The images it injects into jobs are pinned.
            assert "--pytorch-init-container-image=docker.io/library/alpine:3.21.3" in (
                training_operator
            )
            assert "mpi-operator" not in deployments
        for crd in crds:
            annotations = crd["metadata"]["annotations"]
            assert annotations["argocd.argoproj.io/sync-wave"] == "-2"
            assert "ServerSideApply=true" in annotations["argocd.argoproj.io/sync-options"]


def test_v2beta1_mpijob_template_keeps_every_promise_of_the_v1_one(kustomize):
    profile = load_profile(REPO / "overlays/prod-b200/cluster.yaml")
    job = the_job(kustomize(REPO / "overlays/prod-b200/training/mpijob"))
    spec = job["spec"]
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    assert spec["mpiImplementation"] == "OpenMPI"
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runLauncherAsWorker"] is False
    assert spec["slotsPerWorker"] == profile.gpusPerNode
    specs = dict(pod_specs(job))
    launcher, worker = specs["Launcher"], specs["Worker"]
    # The ranks run as the image's user: the keys go where its ssh and sshd look.
    dockerfile = (REPO / "trainer/Dockerfile").read_text()
    assert "useradd --uid 1000" in dockerfile and "--create-home" in dockerfile
    assert spec["sshAuthMountPath"] == "/home/trainer/.ssh"
    assert "HostKey /home/trainer/.ssh/id_rsa" in dockerfile
    for pod in (launcher, worker):
        assert pod["securityContext"]["runAsUser"] == 1000
    container = worker["containers"][0]
    assert container["command"][:2] == ["/usr/sbin/sshd", "-De"]
    sshd_config = container["command"][container["command"].index("-f") + 1]
    assert sshd_config in dockerfile and "Port 2222" in dockerfile
    assert container["readinessProbe"]["tcpSocket"]["port"] == 2222
    # Everything the v1 template guarantees.
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == profile.gpusPerNode
    assert limits[profile.rdmaResource] == profile.rdmaPerPod
    assert "capabilities" not in container.get("securityContext", {})
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    assert worker["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": profile.shmSize}
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/checkpoints", "/dev/shm"}
    assert worker["terminationGracePeriodSeconds"] > 30
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": profile.gpuProduct}
    assert "podAffinity" in worker["affinity"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == profile.queue
    annotations = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    networks = annotations["k8s.v1.cni.cncf.io/networks"].split(",")
    assert networks == ["training-net"] * profile.rdmaPerPod
    # Ranks start over SSH: the launcher carries and forwards every variable they need.
    command = launcher["containers"][0]["command"]
    forwarded = {command[i + 1] for i, arg in enumerate(command) if arg == "-x"}
    launcher_env = container_env(launcher["containers"][0])
    for name in (
        "NCCL_NET_GDR_LEVEL",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_DISABLE",
        "TRAINER_CHECKPOINT_DIR",
    ):
        assert name in forwarded and name in launcher_env, name
    assert {"PATH", "LD_LIBRARY_PATH"} <= forwarded
    assert "--allow-run-as-root" not in command
    assert "nvidia.com/gpu" not in launcher["containers"][0]["resources"]["limits"]


def _runtime(docs: list[dict], name: str) -> dict:
    [runtime] = [
        d for d in docs if d["kind"] == "ClusterTrainingRuntime" and d["metadata"]["name"] == name
    ]
    return runtime


def _replicated_pods(runtime: dict) -> dict[str, dict]:
    return {
        job["name"]: job["template"]["spec"]["template"]
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }


def test_trainer_v2_cluster_installs_trainer_and_jobset_with_their_certificates(kustomize):
    docs = kustomize(REPO / "overlays/prod-b200")
    kinds = _by_kind(docs)
    deployments = {d["metadata"]["name"]: d for d in kinds["Deployment"]}
    assert {"kubeflow-trainer-controller-manager", "jobset-controller-manager"} <= set(deployments)
    for crd in kinds["CustomResourceDefinition"]:
        annotations = crd["metadata"]["annotations"]
        assert annotations["argocd.argoproj.io/sync-wave"] == "-2", crd["metadata"]["name"]
        if crd["spec"]["group"] != "k8s.cni.cncf.io":  # Multus's small one
            assert "ServerSideApply=true" in annotations["argocd.argoproj.io/sync-options"]
    groups = {c["spec"]["group"] for c in kinds["CustomResourceDefinition"]}
    assert {"trainer.kubeflow.org", "jobset.x-k8s.io"} <= groups
    # The webhooks' certificates are the controllers' to fill: empty in Git, mounted.
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in kinds["Secret"]}
    for namespace, name, deployment in (
        ("kubeflow-system", "kubeflow-trainer-webhook-cert", "kubeflow-trainer-controller-manager"),
        ("jobset-system", "jobset-webhook-server-cert", "jobset-controller-manager"),
    ):
        assert not secrets[(namespace, name)].get("data")
        volumes = deployments[deployment]["spec"]["template"]["spec"]["volumes"]
        assert name in {v.get("secret", {}).get("secretName") for v in volumes}
    webhooks = [w for d in kinds["ValidatingWebhookConfiguration"] for w in d["webhooks"]]
    trainer_hooks = [w for w in webhooks if "trainer.kubeflow.org" in w["name"]]
    namespaces = {w["clientConfig"]["service"]["namespace"] for w in trainer_hooks}
    assert trainer_hooks and namespaces == {"kubeflow-system"}
    # Runtimes after the webhook that validates them, and before any run.
    for runtime in kinds["ClusterTrainingRuntime"]:
        annotations = runtime["metadata"]["annotations"]
        assert annotations["argocd.argoproj.io/sync-wave"] == "-1"
        assert "SkipDryRunOnMissingResource=true" in annotations["argocd.argoproj.io/sync-options"]
    assert "TrainJob" not in kinds  # the preflight runs on demand, not in a sync


def test_the_platforms_argo_cd_application_leaves_the_certificates_to_the_operators(kustomize):
    [appset] = yaml.safe_load_all((REPO / "argocd/applicationsets/platform.yaml").read_text())
    spec = appset["spec"]["template"]["spec"]
    assert "RespectIgnoreDifferences=true" in spec["syncPolicy"]["syncOptions"]
    ignored = {(i.get("kind"), i.get("name")) for i in spec["ignoreDifferences"]}
    docs = kustomize(REPO / "overlays/prod-b200") + kustomize(REPO / "overlays/prod-roce")
    certificates = [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-cert")
    ]
    assert len(certificates) == 3
    for name in certificates:
        assert ("Secret", name) in ignored
    assert {
        ("ValidatingWebhookConfiguration", None),
        ("MutatingWebhookConfiguration", None),
        ("CustomResourceDefinition", None),
    } <= ignored


@pytest.mark.parametrize("name", ["torch-distributed-ib", "mpi-distributed-ib"])
def test_cluster_runtimes_carry_everything_the_v1_templates_carry(name, kustomize):
    profile = load_profile(REPO / "overlays/prod-b200/cluster.yaml")
    runtime = _runtime(kustomize(REPO / "overlays/prod-b200"), name)
    pods = _replicated_pods(runtime)
    node = pods["node"]
    spec, container = node["spec"], node["spec"]["containers"][0]
    env = container_env(container)
    assert "NCCL_IB_HCA" not in env  # SR-IOV: the pod sees only its own VFs
    networks = node["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
    assert networks.split(",") == ["training-net"] * profile.rdmaPerPod
    assert env["NCCL_SOCKET_IFNAME"] == "=net1" and env["NCCL_IB_DISABLE"] == "0"
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == profile.gpusPerNode
    assert limits[profile.rdmaResource] == profile.rdmaPerPod
    assert "capabilities" not in container.get("securityContext", {})
    assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": profile.shmSize}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "checkpoints"}
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/checkpoints", "/dev/shm"}
    assert spec["terminationGracePeriodSeconds"] > 30
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": profile.gpuProduct}
    term = spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["matchLabelKeys"] == ["jobset.sigs.k8s.io/jobset-name"]
    # The ExitCode policy of the v1 templates: 1-127 fail for good, the rest restart.
    template = runtime["spec"]["template"]["spec"]
    assert template["failurePolicy"]["rules"][0]["onJobFailureReasons"] == ["PodFailurePolicy"]
    [trainer_job] = [
        job
        for job in template["replicatedJobs"]
        if job["template"].get("metadata", {}).get("labels", {})
        == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    ]
    [rule] = trainer_job["template"]["spec"]["podFailurePolicy"]["rules"]
    assert (rule["action"], rule["onExitCodes"]["operator"]) == ("FailJob", "NotIn")
    assert set(rule["onExitCodes"]["values"]) == {0, *range(128, 256)}
    trainer_container = trainer_job["template"]["spec"]["template"]["spec"]["containers"][0]
    assert trainer_container["name"] == "node"
    assert_own_checkpoint_directory(container, "jobset.sigs.k8s.io/jobset-name")
    launches_mpirun = "launcher" in pods
    assert_own_checkpoint_directory(
        trainer_container, "jobset.sigs.k8s.io/jobset-name", mounted=not launches_mpirun
    )
    uid = {e["name"]: e for e in trainer_container["env"]}["TRAINER_JOB_UID"]
    assert (
        uid["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"
    )
    if "launcher" in pods:
        mpi = runtime["spec"]["mlPolicy"]["mpi"]
        assert mpi["numProcPerNode"] == profile.gpusPerNode
        assert mpi["sshAuthMountPath"] == "/home/trainer/.ssh" and not mpi["runLauncherAsNode"]
        command = trainer_container["command"]
        forwarded = {command[i + 1] for i, arg in enumerate(command) if arg == "-x"}
        wanted = {k for k in env if k.startswith(("NCCL_", "TRAINER_"))}
        assert wanted <= forwarded and wanted <= set(container_env(trainer_container))
        assert "nvidia.com/gpu" not in trainer_container["resources"]["limits"]


def test_trainjob_run_names_its_clusters_runtime_and_queue(kustomize):
    profile = load_profile(REPO / "overlays/prod-b200/cluster.yaml")
    job = the_job(kustomize(REPO / "overlays/prod-b200/runs/llama-pretrain-1124"))
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert job["spec"]["runtimeRef"] == {"name": f"torch-distributed-{profile.fabric}"}
    assert job["spec"]["trainer"]["numProcPerNode"] == profile.gpusPerNode
    assert job["spec"]["trainer"]["numNodes"] == 4
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == profile.queue
    # Only what a run decides: the rest is the runtime's.
    assert set(job["spec"]["trainer"]) == {"numNodes", "numProcPerNode", "args"}


NOT_JOBS = ("cluster", "runtimes")  # a Component, the cluster's training runtimes


@pytest.mark.parametrize("cluster", ["lab-tcp", "prod-b200", "prod-ib", "prod-roce"])
def test_every_template_opens_its_jobs_pods_to_each_other_alone(cluster, kustomize):
    """Each template's NetworkPolicy is the one tenancy declares for its job, renamed with
    the job (torchtitan, the fabric acceptance test); the namespace isolates the rest."""
    for template in sorted((REPO / "overlays" / cluster / "training").iterdir()):
        if not (template / "kustomization.yaml").is_file() or template.name in NOT_JOBS:
            continue
        docs = kustomize(template)
        jobs = [d for d in docs if d["kind"] in tenancy.JOB_LABELS]
        policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
        assert len(jobs) == 1, template
        job = jobs[0]["metadata"]
        expected = tenancy.job_network_policy(jobs[0]["kind"], job["name"], job["namespace"])
        assert policies == [expected], template
    platform = kustomize(REPO / "overlays" / cluster)
    [apart] = [d for d in platform if d["metadata"]["name"] == tenancy.JOBS_APART]
    assert apart["metadata"]["namespace"] == "training"
