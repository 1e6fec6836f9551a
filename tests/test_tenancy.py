"""Clusters many teams share: new-cluster --teams on Kueue and Volcano, runs per team, and
what keeps one team's run out of another team's namespace, queue, networks and
registries, both as `validate`'s rules and as the cluster's generated admission policy
evaluated offline (the API server that would run it cannot exist here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.workspace import commit, make_workspace
from trainops.appsets import application_paths
from trainops.model import Document

IMAGE = "ghcr.io/example-org/trainops-trainer:0.1.0"
KUEUE = [
    "--fabric", "roce", "--gpus-per-node", "8", "--nodes", "12", "--rdma-per-pod", "2",
    "--gid-index", "3", "--rdma-resource", "nvidia.com/roce_vf", "--storage-class", "cephfs",
    "--scheduler", "kueue", "--gpu-product", "NVIDIA-H100-80GB-HBM3", "--image", IMAGE,
    "--teams", "vision=32,nlp=48", "--spare-nodes", "1",
    "--topology", "topology.kubernetes.io/zone=12,topology.kubernetes.io/rack=4",
    "--topology-key", "topology.kubernetes.io/rack",
]  # fmt: skip
VOLCANO = [
    "--fabric", "ib", "--gpus-per-node", "8", "--nodes", "16", "--rdma-per-pod", "4",
    "--rdma-resource", "nvidia.com/ib_vf", "--storage-class", "lustre", "--scheduler", "volcano",
    "--trainer", "both", "--gpu-product", "NVIDIA-H200", "--image", IMAGE,
    "--teams", "vision=64,nlp=48", "--spare-nodes", "2",
    "--topology", "example.com/block=8,topology.kubernetes.io/rack=4",
    "--topology-key", "topology.kubernetes.io/rack",
]  # fmt: skip


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One repository with a two-team Kueue cluster and a two-team Volcano cluster, and a
    run per team on each."""
    base = tmp_path_factory.mktemp("tenancy")
    root = make_workspace(base / "repo")

    def cli(*args: str) -> None:
        environment = {**os.environ, "TRAINOPS_CACHE_DIR": str(base / "cache")}
        done = subprocess.run(
            [sys.executable, "-m", "trainops", *args],
            cwd=root,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    cli("new-cluster", "gpu-east", *KUEUE)
    cli("new-cluster", "gpu-west", *VOLCANO)
    cli("new-run", "gpu-east", "vit-0412", "--team", "vision", "--nodes", "4", "--priority",
        "urgent", "--topology", "required:topology.kubernetes.io/rack")  # fmt: skip
    cli("new-run", "gpu-east", "bert-0412", "--team", "nlp", "--template", "mpijob", "--nodes", "2")
    cli("new-run", "gpu-west", "vit-0413", "--team", "vision", "--nodes", "4")
    cli(
        "new-run",
        "gpu-west",
        "bert-0413",
        "--team",
        "nlp",
        "--template",
        "trainjob",
        "--nodes",
        "2",
    )
    commit(root, "two shared clusters")
    return root


def findings(trainops, root: Path, *paths: str) -> list[dict]:
    run = trainops("validate", "--format", "json", *paths, cwd=root)
    assert run.code in (0, 1), run.err
    return json.loads(run.out)["findings"]


def errors(trainops, root: Path, *paths: str) -> list[dict]:
    return [f for f in findings(trainops, root, *paths) if f["severity"] == "error"]


def rendered(trainops, root: Path, path: str) -> list[dict]:
    run = trainops("render", "--format", "json", path, cwd=root)
    assert run.code == 0, run.err
    return [r["object"] for r in json.loads(run.out)]


def jobs_of(docs: list[dict]) -> list[dict]:
    """A run's render but its NetworkPolicy: the job (and its data preparation)."""
    return [d for d in docs if d["kind"] != "NetworkPolicy"]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {
        f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}".lstrip("/"): d
        for d in docs
        if d["kind"] == kind
    }


@pytest.mark.parametrize("cluster", ["gpu-east", "gpu-west"])
def test_two_team_clusters_and_their_runs_validate_clean(trainops, shared, cluster):
    """Every object of the platform, the templates and each team's run passes the schemas,
    the API server's and operators' checks (Kueue's webhook included) and the policies."""
    assert errors(trainops, shared, f"overlays/{cluster}") == []


def test_kueue_teams_get_namespaces_queues_in_one_cohort_priorities_and_topology(trainops, shared):
    docs = rendered(trainops, shared, "overlays/gpu-east")
    queues = by_kind(docs, "ClusterQueue")
    assert set(queues) == {"training", "vision", "nlp"}
    assert {q["spec"]["cohortName"] for q in queues.values()} == {"gpu-east"}
    gpus = {
        name: next(
            r["nominalQuota"]
            for r in q["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
            if r["name"] == "nvidia.com/gpu"
        )
        for name, q in queues.items()
    }
    # 12 nodes, one spare: 88 GPUs in quotas, the platform's queue holds what teams leave.
    assert gpus == {"vision": "32", "nlp": "48", "training": "8"}
    for team in ("vision", "nlp"):
        assert queues[team]["spec"]["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": team
        }
        assert queues[team]["spec"]["preemption"] == {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
        }
        assert by_kind(docs, "LocalQueue")[f"{team}/{team}"]["spec"]["clusterQueue"] == team
        namespace = by_kind(docs, "Namespace")[team]["metadata"]["labels"]
        assert namespace["pod-security.kubernetes.io/enforce"] == "baseline"
        assert (
            by_kind(docs, "ServiceAccount")[f"{team}/default"]["automountServiceAccountToken"]
            is False
        )
        assert f"{team}/checkpoints" in by_kind(docs, "PersistentVolumeClaim")
        assert f"{team}/training-net" in by_kind(docs, "NetworkAttachmentDefinition")
    priorities = {n: d["value"] for n, d in by_kind(docs, "WorkloadPriorityClass").items()}
    assert priorities == {"urgent": 10000, "standard": 1000, "best-effort": 100}
    [topology] = by_kind(docs, "Topology").values()
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/rack",
        "kubernetes.io/hostname",
    ]
    assert by_kind(docs, "ResourceFlavor")["gpu"]["spec"]["topologyName"] == "gpu-east"


def test_a_team_run_is_in_its_namespace_queue_priority_and_topology(trainops, shared):
    [job] = jobs_of(rendered(trainops, shared, "overlays/gpu-east/teams/vision/runs/vit-0412"))
    assert job["metadata"]["namespace"] == "vision"
    labels = job["metadata"]["labels"]
    assert labels["trainops.dev/team"] == "vision"
    assert labels["kueue.x-k8s.io/queue-name"] == "vision"
    assert labels["kueue.x-k8s.io/priority-class"] == "urgent"
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        annotations = replica["template"]["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/podset-required-topology"] == (
            "topology.kubernetes.io/rack"
        )
        assert "kueue.x-k8s.io/podset-preferred-topology" not in annotations
        assert annotations["kueue.x-k8s.io/podset-group-name"] == "ranks"


def test_volcano_teams_get_queues_with_deserved_quota_and_the_capacity_plugin(trainops, shared):
    docs = rendered(trainops, shared, "overlays/gpu-west")
    queues = by_kind(docs, "Queue")
    assert queues["vision"]["spec"]["deserved"] == {"nvidia.com/gpu": "64"}
    assert queues["nlp"]["spec"]["deserved"] == {"nvidia.com/gpu": "48"}
    assert queues["training"]["spec"]["deserved"] == {"nvidia.com/gpu": "0"}  # 14 usable nodes
    # Volcano has no cohorts: the platform's Queue borrows up to its capability.
    comment = (shared / "overlays/gpu-west/platform/queue.yaml").read_text()
    assert "cohort" not in comment and "up to its capability (reclaimable)" in comment
    assert {n: d["value"] for n, d in by_kind(docs, "PriorityClass").items()} == {
        "urgent": 10000,
        "standard": 1000,
        "best-effort": 100,
    }
    runtime = by_kind(docs, "ClusterTrainingRuntime")["torch-distributed-ib"]
    assert runtime["spec"]["podGroupPolicy"]["volcano"]["networkTopology"] == {
        "mode": "soft",
        "highestTierAllowed": 1,  # the rack: the first HyperNode tier above the nodes
    }
    values = yaml.safe_load((shared / "overlays/gpu-west/addons/volcano.yaml").read_text())
    scheduler = yaml.safe_load(values["custom"]["scheduler_config_override"])
    plugins = [p["name"] for tier in scheduler["tiers"] for p in tier["plugins"]]
    assert "capacity" in plugins and "proportion" not in plugins
    assert "network-topology-aware" in plugins
    assert "reclaim" in scheduler["actions"] and "preempt" in scheduler["actions"]
    [trainjob] = jobs_of(rendered(trainops, shared, "overlays/gpu-west/teams/nlp/runs/bert-0413"))
    [patch] = trainjob["spec"]["runtimePatches"]
    annotations = patch["trainingRuntimeSpec"]["template"]["metadata"]["annotations"]
    assert annotations == {"scheduling.volcano.sh/queue-name": "nlp"}


def test_argo_cd_gives_each_team_a_project_and_runs_application_set_of_its_own(trainops, shared):
    projects = {
        p["metadata"]["name"]: p["spec"]
        for p in yaml.safe_load_all((shared / "argocd/projects.yaml").read_text())
    }
    vision = projects["trainops-team-vision"]
    assert vision["destinations"] == [
        {"name": "gpu-east", "namespace": "vision"},
        {"name": "gpu-west", "namespace": "vision"},
    ]
    assert vision["clusterResourceWhitelist"] == []
    assert {k["kind"] for k in vision["namespaceResourceWhitelist"]} <= {
        "PyTorchJob",
        "MPIJob",
        "TFJob",
        "TrainJob",
        "Job",  # a run's data-preparation Job
        "NetworkPolicy",  # the job's, opening its pods to each other
    }
    # The platform project reaches the team namespaces (their queues, claims, networks).
    platform = projects["trainops-platform"]["destinations"]
    assert {"name": "gpu-east", "namespace": "nlp"} in platform
    appsets = {
        a["metadata"]["name"]: a["spec"]
        for a in yaml.safe_load_all((shared / "argocd/applicationsets/runs.yaml").read_text())
    }
    runs = appsets["runs-vision"]
    assert runs["generators"][0]["git"]["directories"] == [
        {"path": "overlays/*/teams/vision/runs/*"}
    ]
    assert runs["template"]["spec"]["project"] == "trainops-team-vision"
    assert runs["template"]["spec"]["destination"]["namespace"] == "vision"
    # diff (and Argo CD) see each team's run as an Application of its own.
    documents = [
        Document(obj=a, source="argocd/applicationsets/runs.yaml")
        for a in yaml.safe_load_all((shared / "argocd/applicationsets/runs.yaml").read_text())
    ]
    paths = application_paths(shared, documents)
    assert "overlays/gpu-east/teams/vision/runs/vit-0412" in paths
    assert "overlays/gpu-west/teams/nlp/runs/bert-0413" in paths
    assert not any(p.endswith("/teams/vision") or p.endswith("/runs") for p in paths)


# -- one team's run reaching into another team's -------------------------------------------

VIOLATIONS = {
    "namespace": (
        lambda text: text.replace("namespace: vision", "namespace: nlp"),
        "run-team-namespace",
    ),
    "queue": (
        lambda text: text.replace(
            "path: /metadata/labels/kueue.x-k8s.io~1queue-name\n      value: vision",
            "path: /metadata/labels/kueue.x-k8s.io~1queue-name\n      value: nlp",
        ),
        "run-team-queue",
    ),
    "attachment": (
        lambda text: text.replace(
            "patches:\n",
            "patches:\n- target:\n    kind: PyTorchJob\n  patch: |-\n    - op: replace\n"
            "      path: /spec/pytorchReplicaSpecs/Worker/template/metadata/annotations/"
            "k8s.v1.cni.cncf.io~1networks\n      value: kube-system/host-net\n",
        ),
        "network-attachment-approved",
    ),
    "default-network": (
        lambda text: text.replace(
            "patches:\n",
            "patches:\n- target:\n    kind: PyTorchJob\n  patch: |-\n    - op: add\n"
            "      path: /spec/pytorchReplicaSpecs/Worker/template/metadata/annotations/"
            "v1.multus-cni.io~1default-network\n      value: kube-system/host-net\n",
        ),
        "network-attachment-approved",
    ),
    "registry": (
        lambda text: (
            text + "images:\n- name: ghcr.io/example-org/trainops-trainer\n"
            "  newName: docker.io/someone/trainer\n  newTag: 6.6.6\n"
        ),
        "image-registry-approved",
    ),
}


def _self_exempted(text: str, *rules: str) -> str:
    """The run with its job annotated trainops.dev/exempt-<rule> for each of `rules`."""
    notes = "".join(f"        trainops.dev/exempt-{r}: the run says so\n" for r in rules)
    return text.replace(
        "patches:\n",
        "patches:\n- target:\n    kind: PyTorchJob\n  patch: |-\n"
        "    apiVersion: kubeflow.org/v1\n    kind: PyTorchJob\n    metadata:\n"
        f"      name: any\n      annotations:\n{notes}",
        1,
    )


@pytest.mark.parametrize("exempted", [False, True], ids=["plain", "self-exempted"])
@pytest.mark.parametrize("what", sorted(VIOLATIONS))
def test_a_run_reaching_outside_its_team_fails_by_rule_and_by_admission_policy(
    trainops, shared, tmp_path, what, exempted
):
    """A run's own exemption annotations do not open the tenancy gate (round 10: they
    silenced the rule and the admission policy's denial, 0 errors)."""
    change, rule = VIOLATIONS[what]
    run = shared / "overlays/gpu-east/teams/vision/runs/vit-0412/kustomization.yaml"
    original = run.read_text()
    changed = change(original)
    assert changed != original
    if exempted:
        changed = _self_exempted(changed, rule, "admission-policy")
    target = shared / "overlays/gpu-east/teams/vision/runs/sneaky"
    target.mkdir()
    try:
        (target / "kustomization.yaml").write_text(
            changed.replace("value: vit-0412", "value: sneaky")
        )
        found = errors(trainops, shared, "overlays/gpu-east/teams/vision/runs/sneaky")
    finally:
        (target / "kustomization.yaml").unlink()
        target.rmdir()
    rules = {f["rule"] for f in found}
    assert rule in rules, found
    denied = [f["message"] for f in found if f["rule"] == "admission-policy"]
    assert denied, found
    assert all(
        m.startswith(
            "ValidatingAdmissionPolicy 'trainops-runs' with binding 'trainops-runs' denied"
        )
        for m in denied
    )


def test_the_admission_policy_admits_every_generated_run(trainops, shared):
    """The same policy, evaluated on the runs new-run wrote, refuses none of them."""
    for cluster in ("gpu-east", "gpu-west"):
        found = findings(trainops, shared, f"overlays/{cluster}/teams")
        assert [f for f in found if f["rule"] == "admission-policy"] == []


def test_team_flags_are_checked_before_anything_is_written(trainops, shared):
    for args, message in [
        (("--team", "robotics"), "has no such team"),
        (("--team", "vision", "--priority", "sometime"), "may use best-effort, standard, urgent"),
        (("--topology", "required:example.com/nowhere"), "is not a level"),
        (("--topology", "anywhere"), "use required:LABEL or preferred:LABEL"),
        # Kueue admits a required request inside one domain: a rack holds 4 nodes.
        (
            ("--nodes", "5", "--topology", "required:topology.kubernetes.io/rack"),
            "5 nodes never fit one topology.kubernetes.io/rack domain, which holds 4; "
            "use preferred:topology.kubernetes.io/rack (or require topology.kubernetes.io/zone)",
        ),
    ]:
        run = trainops("new-run", "gpu-east", "never-0412", "--nodes", "2", *args, cwd=shared)
        assert run.code == 2 and message in run.err, run.err
        assert re.match(r"^trainops: error: ", run.err) and run.err.count("\n") == 1
    assert not list(shared.glob("overlays/gpu-east/**/never-0412"))


def test_diff_warns_that_an_edited_team_run_is_not_updated(trainops, shared):
    run = shared / "overlays/gpu-east/teams/nlp/runs/bert-0412/kustomization.yaml"
    original = run.read_text()
    run.write_text(original.replace("value: 2\n", "value: 3\n", 1))
    try:
        result = trainops("diff", "--format", "json", cwd=shared)
    finally:
        run.write_text(original)
    assert result.code == 0, result.err
    [changed] = [
        r
        for r in json.loads(result.out)["resources"]
        if r["app"] == "overlays/gpu-east/teams/nlp/runs/bert-0412"
    ]
    assert any("run bert-0412 already exists" in w for w in changed["warnings"])


def test_a_platform_run_taking_a_teams_namespace_fails(trainops, shared):
    """A run under overlays/<cluster>/runs/ belongs to no team: a job there in a team's
    namespace would spend that team's quota outside the team's project."""
    made = trainops("new-run", "gpu-east", "borrowed", "--nodes", "2", cwd=shared)
    assert made.code == 0, made.err
    run = shared / "overlays/gpu-east/runs/borrowed"
    try:
        kustomization = run / "kustomization.yaml"
        text = kustomization.read_text()
        assert errors(trainops, shared, "overlays/gpu-east/runs/borrowed") == []
        assert "\nnamespace:" not in text  # the template's own: the platform's namespace
        kustomization.write_text(text + "namespace: vision\n")
        found = errors(trainops, shared, "overlays/gpu-east/runs/borrowed")
    finally:
        shutil.rmtree(run)
    assert "run-team-namespace" in {f["rule"] for f in found}, found


def _renamed_platform_run(trainops, shared: Path, name: str) -> Path:
    """A platform run on gpu-east named `name` (new-run refuses names that are taken:
    written under a free name, then renamed as a hand edit would)."""
    made = trainops("new-run", "gpu-east", "free-name", "--nodes", "2", cwd=shared)
    assert made.code == 0, made.err
    made_dir = shared / "overlays/gpu-east/runs/free-name"
    for file in made_dir.iterdir():
        file.write_text(file.read_text().replace("free-name", name))
    return made_dir.rename(made_dir.with_name(name))


@pytest.mark.parametrize(
    ("name", "other"),
    [
        (
            "vision-vit-0412",
            "overlays/gpu-east/teams/vision/runs/vit-0412 (ApplicationSet runs-vision)",
        ),
        ("platform", "overlays/gpu-east (ApplicationSet training-platform)"),
        ("vision-vit-0413", None),  # team vision's vit-0413 is gpu-west's: another name
    ],
)
def test_a_run_named_as_another_directorys_application_is_never_synced(
    trainops, shared, name, other
):
    """Application names come from paths (<cluster>-<run>, <cluster>-<team>-<run>,
    <cluster>-platform): two directories with one name get one Application, and the
    ApplicationSet controller syncs only one of them. Both runs are told, and once the
    platform run is gone the team's run validates clean again (the finding depends on
    the tree, so it is not served from the cache)."""
    run = _renamed_platform_run(trainops, shared, name)
    team_run = "overlays/gpu-east/teams/vision/runs/vit-0412"
    try:
        found = errors(trainops, shared, f"overlays/gpu-east/runs/{name}", team_run)
    finally:
        shutil.rmtree(run)
    mine = [f for f in found if f["rule"] == "run-application-name-unique"]
    if other is None:
        assert mine == [], mine
        return
    assert other in mine[0]["message"], mine
    assert f"gpu-east-{name}" in mine[0]["message"], mine
    assert mine[0]["source"].startswith(f"overlays/gpu-east/runs/{name}/kustomization.yaml:")
    if name.startswith("vision-"):  # the team's run is told too
        assert {f["target"].rpartition("/")[2] for f in mine} == {name, "vit-0412"}, mine
    assert errors(trainops, shared, team_run) == []


@pytest.mark.parametrize(
    ("args", "taken"),
    [
        (["vision-vit-0412", "--nodes", "2"], "gpu-east-vision-vit-0412"),
        (["platform", "--nodes", "2"], "gpu-east-platform"),
        (["vit-0500", "--team", "vision", "--nodes", "2"], None),
    ],
)
def test_new_run_refuses_a_name_another_directorys_application_has(trainops, shared, args, taken):
    """The same names new-run would write: refused before anything is written, with the
    name and the directory that has it."""
    made = trainops("new-run", "gpu-east", *args, cwd=shared)
    directory = (
        shared
        / "overlays/gpu-east"
        / (f"teams/vision/runs/{args[0]}" if "--team" in args else f"runs/{args[0]}")
    )
    written = directory.exists()
    if written:
        shutil.rmtree(directory)
    if taken is None:
        assert made.code == 0 and written, made.err
        return
    assert made.code == 2 and not written, made.err
    assert taken in made.err and "pick another run name" in made.err, made.err
    assert "Traceback" not in made.err


def test_a_run_cannot_replace_the_platforms_parameters_or_policy(trainops, shared):
    """A run that carries its own trainops-runs ConfigMap (any registry) and its own
    trainops-runs policy (admit everything) is still checked against the platform's: its
    project would never sync them, and the cluster keeps the platform's."""
    run = shared / "overlays/gpu-east/teams/vision/runs/vit-0412"
    kustomization = run / "kustomization.yaml"
    text = kustomization.read_text()
    platform = rendered(trainops, shared, "overlays/gpu-east")
    own_params = by_kind(platform, "ConfigMap")["vision/trainops-runs"]
    own_params["data"] = {**own_params["data"], "registries": "docker.io/"}
    [policy] = [
        d
        for d in platform
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "trainops-runs"
    ]
    policy["spec"]["validations"] = [{"expression": "true"}]
    policy["spec"].pop("variables", None)
    try:
        (run / "copies.yaml").write_text(yaml.safe_dump_all([own_params, policy]))
        kustomization.write_text(
            text.replace("resources:\n", "resources:\n- copies.yaml\n", 1)
            + "images:\n- name: ghcr.io/example-org/trainops-trainer\n"
            "  newName: docker.io/evil/miner\n"
        )
        found = errors(trainops, shared, "overlays/gpu-east/teams/vision/runs/vit-0412")
    finally:
        kustomization.write_text(text)
        (run / "copies.yaml").unlink()
    rules = {f["rule"] for f in found}
    assert {"image-registry-approved", "admission-policy", "run-kind-synced"} <= rules, found
    kinds = {f["resource"].split("/")[0] for f in found if f["rule"] == "run-kind-synced"}
    assert kinds == {"ConfigMap", "ValidatingAdmissionPolicy"}, found


def test_a_run_of_a_kind_no_queue_admits_fails_its_sync(trainops, shared):
    """A TFJob: the Training Operator would run it, but Kueue's integrations and the
    admission policy know only the cluster's job kinds, so its GPUs would escape the
    quota. The run's project does not sync it."""
    run = shared / "overlays/gpu-east/teams/vision/runs/vit-0412"
    kustomization = run / "kustomization.yaml"
    text = kustomization.read_text()
    tfjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf", "labels": QUEUED_LABELS},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": GPU_POD}}}},
    }
    try:
        (run / "tf.yaml").write_text(yaml.safe_dump(tfjob))
        kustomization.write_text(text.replace("resources:\n", "resources:\n- tf.yaml\n", 1))
        found = errors(trainops, shared, "overlays/gpu-east/teams/vision/runs/vit-0412")
    finally:
        kustomization.write_text(text)
        (run / "tf.yaml").unlink()
    assert [f["resource"] for f in found if f["rule"] == "run-kind-synced"] == [
        "TFJob/vision/tf"
    ], found


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        # Another kind, another run's name: the same checkpoint directory.
        ("- op: replace\n  path: /metadata/name\n  value: vit-0413", "another run's checkpoint"),
        (
            "- op: add\n  path: /metadata/annotations\n  value:\n    argocd.argoproj.io/hook: Sync",
            "deletes and recreates a hook",
        ),
        (
            "- op: add\n  path: /metadata/annotations\n  value:\n"
            "    argocd.argoproj.io/sync-options: Replace=true",
            "sync option Replace=true",
        ),
    ],
)
@pytest.mark.parametrize("exempted", [False, True], ids=["plain", "self-exempted"])
def test_a_runs_job_is_its_own(trainops, shared, patch, message, exempted):
    """A job named after another run (of any kind) mounts that run's checkpoints, and a
    hook or Replace sync option lets Argo CD delete or overwrite a live job by name; the
    run's own exemption annotation changes nothing (round 10: it silenced the rule)."""
    run = shared / "overlays/gpu-east/teams/vision/runs/vit-0412"
    kustomization = run / "kustomization.yaml"
    text = kustomization.read_text()
    assert errors(trainops, shared, "overlays/gpu-east/teams/vision/runs/vit-0412") == []
    extra = (
        ("patches:\n" if "patches:" not in text else "")
        + "- target:\n    kind: PyTorchJob\n  patch: |-\n"
        + "".join(f"    {line}\n" for line in patch.splitlines())
    )
    if exempted:  # after the patch under test, which may set the whole annotation map
        extra += (
            "- target:\n    kind: PyTorchJob\n  patch: |-\n    apiVersion: kubeflow.org/v1\n"
            "    kind: PyTorchJob\n    metadata:\n      name: any\n      annotations:\n"
            "        trainops.dev/exempt-run-job-own-name: continues the other run\n"
        )
    try:
        kustomization.write_text(text.rstrip("\n") + "\n" + extra)
        found = errors(trainops, shared, "overlays/gpu-east/teams/vision/runs/vit-0412")
    finally:
        kustomization.write_text(text)
    mine = [f["message"] for f in found if f["rule"] == "run-job-own-name"]
    assert mine and message in mine[0], found


# -- every kind that makes pods passes the same gate -------------------------------------

GPU_POD = {
    "containers": [
        {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": 8}}}
    ],
    "restartPolicy": "Never",
}
QUEUED_LABELS = {
    "trainops.dev/team": "vision",
    "kueue.x-k8s.io/queue-name": "vision",
    "kueue.x-k8s.io/priority-class": "standard",
}


def _job(labels: dict, pod: dict = GPU_POD) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "side-job", "labels": labels},
        "spec": {"template": {"spec": pod}},
    }


def _template(kind: str, api: str) -> dict:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": f"side-{kind.lower()}"},
        "spec": {
            "selector": {"matchLabels": {"app": "side"}},
            "template": {"metadata": {"labels": {"app": "side"}}, "spec": GPU_POD},
        },
    }


SIDE_DOORS = {
    "unqueued-job": (_job({"trainops.dev/team": "vision"}), "queue in LocalQueue vision"),
    "job-of-another-team": (
        _job({**QUEUED_LABELS, "trainops.dev/team": "nlp"}),
        "belongs to team vision",
    ),
    "job-from-any-registry": (
        _job(QUEUED_LABELS, {**GPU_POD, "containers": [{"name": "m", "image": "docker.io/x/y"}]}),
        "images come from",
    ),
    "privileged-job": (
        _job(
            QUEUED_LABELS,
            {**GPU_POD, "hostNetwork": True},
        ),
        "training pods take no privilege",
    ),
    "cronjob-queued-on-itself-only": (
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "side-cron", "labels": QUEUED_LABELS},
            "spec": {
                "schedule": "0 * * * *",
                "jobTemplate": {"spec": {"template": {"spec": GPU_POD}}},
            },
        },
        "queue in LocalQueue vision",
    ),
    "jobset-unqueued": (
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "side-jobset", "labels": {"trainops.dev/team": "vision"}},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": 1,
                        "template": {"spec": {"template": {"spec": GPU_POD}}},
                    }
                ]
            },
        },
        "queue in LocalQueue vision",
    ),
    # A render is applied by a person or Argo CD, never by a job controller: an owner
    # reference in it is forged, and the policy checks the object as it checks any other.
    "pod-claiming-a-job-owner": (
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "side-job-0-abcde",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "side-job",
                        "uid": "0c6b0a44-5a3f-4f53-9a3e-6b9d0f0c2a11",
                        "controller": True,
                    }
                ],
            },
            "spec": {**GPU_POD, "initContainers": [{"name": "i", "image": "docker.io/alpine"}]},
        },
        "Pod side-job-0-abcde asks for GPUs or RDMA devices outside the queue",
    ),
    "job-claiming-a-cronjob-owner": (
        {
            **_job({}, {**GPU_POD, "containers": [{"name": "m", "image": "docker.io/x/y"}]}),
            "metadata": {
                "name": "side-job",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "CronJob",
                        "name": "nightly",
                        "uid": "0c6b0a44-5a3f-4f53-9a3e-6b9d0f0c2a12",
                        "controller": True,
                    }
                ],
            },
        },
        "namespace vision belongs to team vision",
    ),
    # No GPU request, so no quota counts it, yet the container runtime shows it every GPU.
    "job-seeing-all-gpus": (
        _job(
            QUEUED_LABELS,
            {
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                    }
                ],
                "restartPolicy": "Never",
            },
        ),
        "NVIDIA_VISIBLE_DEVICES may only be void or none",
    ),
    "bare-gpu-pod": (
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "side-pod"}, "spec": GPU_POD},
        "Pod side-pod asks for GPUs or RDMA devices outside the queue",
    ),
    "gpu-deployment": (
        {
            **_template("Deployment", "apps/v1"),
            "spec": {
                **_template("Deployment", "apps/v1")["spec"],
                "template": {
                    "metadata": {"labels": {"app": "side"}},
                    "spec": {**GPU_POD, "restartPolicy": "Always"},
                },
            },
        },
        "Deployment side-deployment asks for GPUs or RDMA devices outside the queue",
    ),
    "gpu-daemonset": (
        {
            **_template("DaemonSet", "apps/v1"),
            "spec": {
                **_template("DaemonSet", "apps/v1")["spec"],
                "template": {
                    "metadata": {"labels": {"app": "side"}},
                    "spec": {**GPU_POD, "restartPolicy": "Always"},
                },
            },
        },
        "DaemonSet side-daemonset asks for GPUs or RDMA devices outside the queue",
    ),
}


def _admission_denials(trainops, shared: Path, obj: dict, cluster: str = "gpu-east") -> list[str]:
    target = shared / f"overlays/{cluster}/teams/vision/runs/side-door"
    target.mkdir()
    try:
        (target / "objects.yaml").write_text(yaml.safe_dump(obj))
        (target / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            "namespace: vision\nresources:\n- objects.yaml\n"
        )
        found = findings(trainops, shared, f"overlays/{cluster}/teams/vision/runs/side-door")
    finally:
        shutil.rmtree(target)
    return [f["message"] for f in found if f["rule"] == "admission-policy"]


@pytest.mark.parametrize("door", sorted(SIDE_DOORS))
def test_every_kind_that_makes_pods_is_refused_outside_the_teams_rules(trainops, shared, door):
    """A batch Job, CronJob, JobSet, bare Pod, Deployment or DaemonSet in a team's namespace
    meets the same gate as a training job: queue, team, registry, privilege, and no GPUs
    outside the queue."""
    obj, message = SIDE_DOORS[door]
    denied = _admission_denials(trainops, shared, obj)
    assert any(message in m for m in denied), denied


@pytest.mark.parametrize(
    "obj",
    [
        _job(QUEUED_LABELS),
        # A Deployment without accelerators (a dashboard beside the runs) is not queued.
        {
            **_template("Deployment", "apps/v1"),
            "spec": {
                **_template("Deployment", "apps/v1")["spec"],
                "template": {
                    "metadata": {"labels": {"app": "side"}},
                    "spec": {"containers": [{"name": "ui", "image": IMAGE}]},
                },
            },
        },
    ],
    ids=["queued-job", "deployment-without-gpus"],
)
def test_pod_bearing_kinds_within_the_teams_rules_are_admitted(trainops, shared, obj):
    assert _admission_denials(trainops, shared, obj) == []


def test_the_gpu_health_check_queues_like_a_job(trainops, shared):
    """Its pods take whole nodes: outside the queue they would take them from admitted runs."""
    east = by_kind(rendered(trainops, shared, "overlays/gpu-east/monitoring"), "CronJob")
    job = east["training/gpu-health"]["spec"]["jobTemplate"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] == "1"
    west = by_kind(rendered(trainops, shared, "overlays/gpu-west/monitoring"), "CronJob")
    template = west["training/gpu-health"]["spec"]["jobTemplate"]["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "training"


def test_the_platform_namespace_admits_the_health_checks_image():
    from trainops.profile.tenancy import PLATFORM_IMAGES

    base = Path(__file__).resolve().parents[1] / "base"
    cron = yaml.safe_load((base / "monitoring/gpu-health/cronjob.yaml").read_text())
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == list(PLATFORM_IMAGES)


def test_a_plain_job_on_volcano_queues_by_its_pods(trainops, shared):
    """Volcano queues a batch Job's pods by their scheduler, queue annotation and priority."""
    labels = {"trainops.dev/team": "vision"}
    denied = _admission_denials(trainops, shared, _job(labels), "gpu-west")
    assert any("queue in Volcano queue vision" in m for m in denied), denied
    job = _job(labels, {**GPU_POD, "schedulerName": "volcano", "priorityClassName": "standard"})
    job["spec"]["template"]["metadata"] = {
        "annotations": {"scheduling.volcano.sh/queue-name": "vision"}
    }
    assert _admission_denials(trainops, shared, job, "gpu-west") == []


@pytest.mark.parametrize("cluster", ["gpu-east", "gpu-west"])
def test_a_team_runs_data_preparation_queues_as_the_run_does(trainops, shared, cluster):
    """The prepare Job is a batch Job in the team's namespace: the gate asks it to queue."""
    made = trainops(
        "new-run", cluster, "prep-0412", "--team", "vision", "--nodes", "2",
        "--dataset-claim", "corpus:/data", "--prepare", "python prepare.py --out /data",
        cwd=shared,
    )  # fmt: skip
    assert made.code == 0, made.err
    run = shared / f"overlays/{cluster}/teams/vision/runs/prep-0412"
    try:
        found = findings(trainops, shared, str(run.relative_to(shared)))
        jobs = by_kind(rendered(trainops, shared, str(run.relative_to(shared))), "Job")
        header = (run / "prepare.yaml").read_text().split("\napiVersion", 1)[0]
    finally:
        shutil.rmtree(run)
    # A PyTorchJob's ranks wait in trainer-launch, not in an init container.
    assert "trainer-launch waits for (TRAINER_WAIT_FOR_FILE)" in header, header
    assert "init container" not in header
    assert [f for f in found if f["rule"] == "admission-policy"] == []
    prepare = jobs["vision/prep-0412-prepare"]
    if cluster == "gpu-east":
        assert prepare["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "vision"
    else:
        assert prepare["spec"]["template"]["spec"]["schedulerName"] == "volcano"


NO_BORROWING = f"""\
fabric: tcp
nic: eth1
gpusPerNode: 8
nodes: 4
storageClass: nfs
scheduler: kueue
gpuProduct: NVIDIA-H100-80GB-HBM3
image: {IMAGE}
teams:
- name: vision
  gpus: 16
  borrowingLimit: 0
- name: nlp
  gpus: 16
"""


def test_a_team_run_larger_than_its_borrowing_limit_allows_is_refused(trainops, workspace):
    """Issue 43 (walkthrough 2): with borrowingLimit 0 a team's queue holds its own 2 nodes;
    new-run wrote a 3-node run that validate then found never admitted. A team that may
    borrow takes the other's quota."""
    profile = workspace / "no-borrowing.yaml"
    profile.write_text(NO_BORROWING)
    assert trainops("new-cluster", "lab", "--from", str(profile), cwd=workspace).code == 0
    refused = trainops("new-run", "lab", "r1", "--team", "vision", "--nodes", "3", cwd=workspace)
    assert refused.code == 2 and refused.err.count("\n") == 1, refused.err
    assert "team vision's queue holds at most 2 nodes at once" in refused.err
    assert "borrowingLimit 0" in refused.err
    assert not (workspace / "overlays/lab/teams/vision/runs/r1").exists()
    made = trainops("new-run", "lab", "r2", "--team", "nlp", "--nodes", "4", cwd=workspace)
    assert made.code == 0, made.err
    assert errors(trainops, workspace, "overlays/lab/teams/nlp/runs/r2") == []


def test_a_team_run_larger_than_all_its_cohort_can_lend_is_never_admitted(trainops, shared):
    """Kueue admits a workload's pod sets together, borrowing only what the cohort's other
    queues could lend: 12 nodes of GPUs exceed the 11 the quotas hand out (one is spare)."""
    refused = trainops("new-run", "gpu-east", "huge-0412", "--nodes", "12", cwd=shared)
    assert refused.code == 2 and "the queues hand out 11 of the cluster's 12" in refused.err
    made = trainops("new-run", "gpu-east", "huge-0412", "--team", "vision", "--nodes", "11",
                    cwd=shared)  # fmt: skip
    assert made.code == 0, made.err
    run = "overlays/gpu-east/teams/vision/runs/huge-0412"
    kustomization = shared / run / "kustomization.yaml"
    text = kustomization.read_text()
    # One more Worker than the 11 usable nodes: 12 pods of 8 GPUs.
    grown = re.sub(r"(Worker/replicas\n\s+value: )10\n", r"\g<1>11\n", text)
    assert grown != text, text
    kustomization.write_text(grown)
    try:
        too_big = [f for f in errors(trainops, shared, run) if f["rule"] == "kueue-quota-fits"]
    finally:
        shutil.rmtree(shared / run)
    assert too_big and "could lend" in too_big[0]["message"], too_big
    # Amounts as the profile writes them: memory in Gi, not in bytes.
    memory = [f["message"] for f in too_big if " memory at once" in f["message"]]
    assert memory and re.search(r"needs \d+(\.\d)?Gi memory at once", memory[0]), memory
    assert re.search(r"at most \d+(\.\d)?Gi with what cohort", memory[0]), memory


# -- the jobs of one namespace reach their own pods only ---------------------------------

RUNS = {
    "overlays/gpu-east/teams/vision/runs/vit-0412": ("vit-0412", "training.kubeflow.org/job-name"),
    "overlays/gpu-east/teams/nlp/runs/bert-0412": ("bert-0412", "training.kubeflow.org/job-name"),
    "overlays/gpu-west/teams/nlp/runs/bert-0413": ("bert-0413", "jobset.sigs.k8s.io/jobset-name"),
}


@pytest.mark.parametrize("path", sorted(RUNS))
def test_a_runs_pods_admit_their_own_job_alone(trainops, shared, path):
    name, label = RUNS[path]
    own = {"matchLabels": {label: name}}
    policy = by_kind(rendered(trainops, shared, path), "NetworkPolicy")
    team = path.split("/")[3]
    assert policy == {
        f"{team}/{name}": {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": team},
            "spec": {
                "podSelector": own,
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": own}]}],
            },
        }
    }
    # The team's namespace isolates every pod but for the metrics port.
    cluster = path.split("/")[1]
    apart = by_kind(rendered(trainops, shared, f"overlays/{cluster}"), "NetworkPolicy")
    assert apart[f"{team}/trainops-jobs-apart"]["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": "metrics"}]}
    ]


def _edited_run(shared, path: str, edit) -> tuple[Path, str]:
    kustomization = shared / path / "kustomization.yaml"
    text = kustomization.read_text()
    kustomization.write_text(edit(text))
    return kustomization, text


@pytest.mark.parametrize("path", sorted(RUNS))
def test_a_run_that_leaves_its_network_policy_behind_hangs(trainops, shared, path):
    """Renamed job, template's policy kept: the namespace's isolation drops the ranks'
    connections to each other."""

    def keep_the_templates_policy(text: str) -> str:
        return text[: text.index("- target:\n    kind: NetworkPolicy")]

    kustomization, text = _edited_run(shared, path, keep_the_templates_policy)
    try:
        found = errors(trainops, shared, path)
    finally:
        kustomization.write_text(text)
    rules = {f["rule"] for f in found}
    assert {"network-policy-job-peers", "run-job-own-name"} <= rules, found
    assert errors(trainops, shared, path) == []


@pytest.mark.parametrize(
    "peers",
    [
        [{"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "trainops"}}}],
        [{"namespaceSelector": {}}],
        [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
    ],
)
def test_a_run_cannot_reopen_another_jobs_pods(trainops, shared, peers):
    """A policy of its own name in the run, selecting another run's pods (vit-0412's) and
    admitting anyone: refused by the rule and by the cluster's admission policy."""
    path = "overlays/gpu-east/teams/nlp/runs/bert-0412"
    selector = {"matchLabels": {"training.kubeflow.org/job-name": "vit-0412"}}
    ops = [
        {"op": "replace", "path": "/spec/podSelector", "value": selector},
        {"op": "add", "path": "/spec/ingress/-", "value": {"from": peers}},
    ]
    patch = "- target:\n    kind: NetworkPolicy\n  patch: |-\n" + "".join(
        f"    {line}\n" for line in yaml.safe_dump(ops).splitlines()
    )
    kustomization, text = _edited_run(shared, path, lambda t: t.rstrip("\n") + "\n" + patch)
    try:
        found = errors(trainops, shared, path)
    finally:
        kustomization.write_text(text)
    by_rule = {f["rule"]: f["message"] for f in found}
    assert "vit-0412's pods" in by_rule.get("network-policy-own-job", ""), found
    assert "trainops-runs-network" in by_rule.get("admission-policy", ""), found
