"""Cluster profiles: new-cluster, new-run and set, on a private copy of the repository."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.support import write
from tests.test_gitops_defects import DEFECT_RULES
from tests.workspace import commit, status
from trainops.profile.edit import apply_assignments, parse_assignment

ROCE = [
    "--fabric",
    "roce",
    "--gpus-per-node",
    "8",
    "--nodes",
    "4",
    "--rdma-per-pod",
    "2",
    "--gid-index",
    "3",
    "--rdma-resource",
    "nvidia.com/roce_vf",
    "--storage-class",
    "cephfs",
    "--scheduler",
    "kueue",
    "--image",
    "ghcr.io/example-org/trainops-trainer:0.1.0",
]


def job_records(out: str) -> list[dict]:
    """The render's records but the run's NetworkPolicy."""
    return [r for r in json.loads(out) if r["object"]["kind"] != "NetworkPolicy"]


def validate_clean(trainops, workspace: Path, *paths: str) -> dict:
    run = trainops("validate", "--format", "json", *paths, cwd=workspace)
    report = json.loads(run.out)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert run.code == 0 and errors == [], errors
    return report


def test_new_cluster_writes_an_overlay_that_validates_and_argo_cd_picks_up(trainops, workspace):
    run = trainops("new-cluster", "gpu-east", *ROCE, cwd=workspace)
    assert run.code == 0, run.err
    assert (workspace / "overlays/gpu-east/cluster.yaml").is_file()
    assert "gpu-east" in (workspace / "argocd/projects.yaml").read_text()
    validate_clean(trainops, workspace, "overlays/gpu-east")
    # The ApplicationSets find it with no other edit: the diff shows a new Application.
    diff = json.loads(trainops("diff", "--format", "json", cwd=workspace).out)
    apps = {entry["app"] for entry in diff["resources"] if entry["change"] == "added"}
    assert "overlays/gpu-east" in apps


@pytest.mark.parametrize("fabric", ["tcp", "roce"])
def test_new_cluster_without_a_gpu_product_validates_without_warnings(trainops, workspace, fabric):
    """Issue 43 item 8: the pods select GPU nodes by the GPU Operator's gpu.present label."""
    tcp = ["--fabric", "tcp", "--nic", "eth1", *ROCE[2:6], *ROCE[12:]]
    flags = tcp if fabric == "tcp" else ROCE
    assert "--gpu-product" not in flags
    assert trainops("new-cluster", "any-gpu", *flags, cwd=workspace).code == 0
    report = validate_clean(trainops, workspace, "overlays/any-gpu")
    warnings = [f["rule"] for f in report["findings"] if f["severity"] == "warning"]
    assert warnings == []
    job = (workspace / "overlays/any-gpu/training/cluster/torchrun.yaml").read_text()
    assert "nvidia.com/gpu.present" in job


def test_a_cluster_whose_teams_lend_it_every_node_admits_its_own_mpi_jobs(trainops, workspace):
    """Issue 43: the quotas make room for the MPI launcher's pod, which Kueue admits with its
    workers. Before, a new cluster whose teams hold every usable node (the platform queue
    borrowing them all) failed validate: its MPIJob asked for 172.5 CPUs of 172."""
    flags = ["--fabric", "tcp", "--nic", "eth1", *ROCE[2:4], "--nodes", "3", *ROCE[12:]]
    teams = ["--teams", "vision=8,nlp=8", "--spare-nodes", "1"]
    assert trainops("new-cluster", "lab-west", *flags, *teams, cwd=workspace).code == 0
    validate_clean(trainops, workspace, "overlays/lab-west")
    queue = (workspace / "overlays/lab-west/platform/queue.yaml").read_text()
    assert "- name: memory\n        nominalQuota: '0'\n" in queue  # was 0Pi
    # The teams' runs are scraped: the PodMonitor looks in their namespaces too.
    rendered = trainops("render", "--format", "json", "overlays/lab-west", cwd=workspace)
    (monitor,) = [
        r["object"]
        for r in json.loads(rendered.out)
        if r["object"]["kind"] == "PodMonitor" and r["object"]["metadata"]["name"] == "trainer"
    ]
    selector = monitor["spec"]["namespaceSelector"]
    assert selector == {"matchNames": ["training", "vision", "nlp"]}, selector


def test_new_cluster_flags_for_the_network_write_what_set_writes(trainops, workspace):
    """Issue 43 (new-user walkthrough): network, ipRange, pkey and gpudirect had no flag."""
    ib = ["--fabric", "ib", *ROCE[2:6], "--rdma-per-pod", "8"]
    ib += ["--rdma-resource", "nvidia.com/ib_vf", *ROCE[12:]]
    extra = ["--network", "ib-sriov", "--ip-range", "10.40.0.0/22", "--pkey", "0x8001"]
    extra += ["--gpudirect", "dmabuf"]
    made = trainops("new-cluster", "ib-flags", *ib, *extra, cwd=workspace)
    assert made.code == 0, made.err
    assert trainops("new-cluster", "ib-set", *ib, cwd=workspace).code == 0
    keys = ["network=ib-sriov", "ipRange=10.40.0.0/22", "pkey=0x8001", "gpudirect=dmabuf"]
    edited = trainops("set", "ib-set", *keys, cwd=workspace)
    assert edited.code == 0, edited.err
    by_flags = (workspace / "overlays/ib-flags/cluster.yaml").read_text()
    assert "pkey: '0x8001'" in by_flags and "ipRange: 10.40.0.0/22" in by_flags
    assert by_flags == (workspace / "overlays/ib-set/cluster.yaml").read_text()
    network = (workspace / "overlays/ib-flags/platform/network.yaml").read_text()
    assert '"pkey": "0x8001"' in network
    # ib-sriov-cni waits for ib-kubernetes's GUID only with this flag (a pkey needs both).
    assert '"ibKubernetesEnabled": true' in network
    for bad in ("zz", "0x10000", "0", "32770", "0x8000"):
        refused = trainops("set", "ib-set", f"pkey={bad}", cwd=workspace)
        assert refused.code == 2, (bad, refused.out)
        assert f"pkey: '{bad}' is not a partition key" in refused.err, refused.err


def test_new_cluster_twice_with_the_same_flags_changes_nothing(trainops, workspace):
    assert trainops("new-cluster", "gpu-east", *ROCE, cwd=workspace).code == 0
    commit(workspace, "add gpu-east")
    again = trainops("new-cluster", "gpu-east", *ROCE, cwd=workspace)
    assert again.code == 0 and "unchanged" in again.out
    assert status(workspace) == ""


def test_new_cluster_with_other_flags_needs_force(trainops, workspace):
    assert trainops("new-cluster", "gpu-east", *ROCE, cwd=workspace).code == 0
    commit(workspace, "add gpu-east")
    other = [*ROCE[:4], "--nodes", "6", *ROCE[6:]]
    refused = trainops("new-cluster", "gpu-east", *other, cwd=workspace)
    assert refused.code == 2
    assert "already exists with other settings (nodes: 4 -> 6)" in refused.err
    assert status(workspace) == ""
    forced = trainops("new-cluster", "gpu-east", *other, "--force", cwd=workspace)
    assert forced.code == 0, forced.err
    assert "nodes: 6" in (workspace / "overlays/gpu-east/cluster.yaml").read_text()


@pytest.mark.parametrize("template", ["pytorchjob", "elastic", "mpijob"])
def test_new_run_renders_a_job_named_after_the_run(trainops, workspace, template):
    run = trainops(
        "new-run",
        "prod-roce",
        "sft-7",
        "--template",
        template,
        "--nodes",
        "3",
        "--",
        "--model",
        "gpt",
        "--max-steps",
        "500",
        cwd=workspace,
    )
    assert run.code == 0, run.err
    report = validate_clean(trainops, workspace, "overlays/prod-roce/runs/sft-7")
    assert report["summary"]["resources"] == 2  # the job and its NetworkPolicy
    rendered = trainops(
        "render", "--format", "json", "overlays/prod-roce/runs/sft-7", cwd=workspace
    )
    [record] = job_records(rendered.out)
    assert record["object"]["metadata"]["name"] == "sft-7"
    assert "--max-steps" in json.dumps(record["object"])


def test_mpijob_run_on_an_mpi_operator_cluster_is_v2beta1(trainops, workspace):
    run = trainops(
        "new-run", "prod-b200", "allreduce-2", "--template", "mpijob", "--nodes", "2", cwd=workspace
    )
    assert run.code == 0, run.err
    validate_clean(trainops, workspace, "overlays/prod-b200/runs/allreduce-2")
    rendered = trainops(
        "render", "--format", "json", "overlays/prod-b200/runs/allreduce-2", cwd=workspace
    )
    [record] = job_records(rendered.out)
    job = record["object"]
    assert (job["apiVersion"], job["metadata"]["name"]) == ("kubeflow.org/v2beta1", "allreduce-2")
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_intel_mpi_run_gets_hydra_mpirun_and_needs_its_own_image(trainops, workspace):
    args = [
        "new-run",
        "prod-b200",
        "intel-1",
        "--template",
        "mpijob",
        "--nodes",
        "2",
        "--mpi-implementation",
        "Intel",
    ]
    refused = trainops(*args, cwd=workspace)
    assert refused.code == 2 and "ships Open MPI; give --image" in refused.err
    assert status(workspace) == ""
    run = trainops(*args, "--image", "ghcr.io/example-org/intel-trainer:2025.1", cwd=workspace)
    assert run.code == 0, run.err
    validate_clean(trainops, workspace, "overlays/prod-b200/runs/intel-1")
    rendered = trainops(
        "render", "--format", "json", "overlays/prod-b200/runs/intel-1", cwd=workspace
    )
    [record] = job_records(rendered.out)
    spec = record["object"]["spec"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert spec["mpiImplementation"] == "Intel"
    assert launcher["command"] == ["mpirun"]  # no Open MPI -x
    assert launcher["args"][:3] == ["python", "-m", "trainer"]
    assert launcher["image"] == "ghcr.io/example-org/intel-trainer:2025.1"


def test_mpi_implementation_needs_an_mpi_operator_cluster(trainops, workspace):
    run = trainops(
        "new-run",
        "prod-ib",
        "x-1",
        "--template",
        "mpijob",
        "--nodes",
        "2",
        "--mpi-implementation",
        "MPICH",
        "--image",
        "r/mpich:1.0",
        cwd=workspace,
    )
    assert run.code == 2 and "mpiOperator: mpi-operator" in run.err
    assert len(run.err.strip().splitlines()) == 1 and status(workspace) == ""


def test_switching_a_cluster_to_the_mpi_operator_rewrites_operators_templates_and_projects(
    trainops, workspace
):
    run = trainops("set", "prod-ib", "mpiOperator=mpi-operator", cwd=workspace)
    assert run.code == 0, run.err
    for changed in (
        "b/overlays/prod-ib/kustomization.yaml",
        "b/overlays/prod-ib/training/mpijob/kustomization.yaml",
        "b/argocd/projects.yaml",
    ):
        assert changed in run.out, changed
    projects = (workspace / "argocd/projects.yaml").read_text()
    assert "name: prod-ib\n    namespace: mpi-operator" in projects
    report = validate_clean(trainops, workspace, "overlays/prod-ib")
    # Gang scheduling reaches both operators; the Training Operator keeps its kinds.
    rendered = trainops("render", "--format", "json", "overlays/prod-ib", cwd=workspace)
    args = {
        r["object"]["metadata"]["name"]: r["object"]["spec"]["template"]["spec"]["containers"][
            0
        ].get("args", [])
        for r in json.loads(rendered.out)
        if r["object"]["kind"] == "Deployment"
    }
    assert "--gang-scheduling=volcano" in args["mpi-operator"]
    assert "--gang-scheduler-name=volcano" in args["training-operator"]
    assert "--enable-scheme=pytorchjob" in args["training-operator"]
    assert report["summary"]["errors"] == 0


def _changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    old_lines, new_lines = old.splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines)
    return [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]


def test_set_changes_only_the_edited_line_and_keeps_hand_comments(trainops, workspace):
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    text = profile.read_text().replace("nodes: 16\n", "nodes: 16  # racks a and b\n")
    text = text.replace(
        "queue: training\n", "# Finance signs off quota changes.\nqueue: training\n"
    )
    profile.write_text(text)
    assert trainops("set", "prod-roce", "nodes=24", cwd=workspace).code == 0
    assert _changed_lines(text, profile.read_text()) == [
        ("nodes: 16  # racks a and b", "nodes: 24  # racks a and b")
    ]
    generated = (workspace / "overlays/prod-roce/platform/queue.yaml").read_text()
    assert "23 nodes x 8 GPUs, 1 spare node" in generated  # derived files regenerated


def test_set_a_map_key_keeps_its_quoting_and_reaches_every_template(trainops, workspace):
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    before = profile.read_text()
    run = trainops("set", "overlays/prod-roce", "nccl.NCCL_IB_TIMEOUT=23", cwd=workspace)
    assert run.code == 0, run.err
    assert _changed_lines(before, profile.read_text()) == [
        ("  NCCL_IB_TIMEOUT: '22'", "  NCCL_IB_TIMEOUT: '23'")
    ]
    assert "+              value: '23'" in run.out  # the unified diff of a template
    torchrun = (workspace / "overlays/prod-roce/training/cluster/torchrun.yaml").read_text()
    assert torchrun.count("value: '23'") == 2  # Master and Worker
    validate_clean(trainops, workspace, "overlays/prod-roce")


def test_removing_then_adding_a_key_restores_the_file_with_its_comment(trainops, workspace):
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    original = profile.read_text()
    assert (
        trainops("set", "prod-roce", "gpuProduct-", "nccl.NCCL_IB_RETRY_CNT-", cwd=workspace).code
        == 0
    )
    removed = profile.read_text()
    assert "gpuProduct" not in removed and "nvidia.com/gpu.product node label" not in removed
    assert "# node label naming the network locality domain" in removed  # neighbour kept
    assert "NCCL_IB_RETRY_CNT" not in removed
    run = trainops(
        "set",
        "prod-roce",
        "gpuProduct=NVIDIA-H100-80GB-HBM3",
        "nccl.NCCL_IB_RETRY_CNT=7",
        cwd=workspace,
    )
    assert run.code == 0, run.err
    assert profile.read_text() == original


def test_a_new_entry_of_a_map_stays_inside_it_above_the_next_keys_comment(trainops, workspace):
    """ruamel.yaml holds the next key's comment as the map's last entry's and would write a
    new entry below it (the entry then read as part of the map, the comment out of place)."""
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    original = profile.read_text()
    assert "  memory: 2000Gi\n# CPU cores each training pod" in original
    run = trainops(
        "set", "prod-roce", "nodeAllocatable.memory-", "nodeAllocatable.memory=2000Gi",
        cwd=workspace,
    )  # fmt: skip
    assert run.code == 0, run.err
    assert profile.read_text() == original


def test_set_takes_new_clusters_value_forms_and_keeps_the_next_keys_comment(trainops, workspace):
    """Issue 43 item 8: set reads teams, topology and nodeAllocatable as new-cluster's flags
    write them. Replacing a block value kept its lines only: ruamel.yaml holds the next
    key's comment as the block's last entry's and dropped it with the old value."""
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    short = trainops("set", "prod-roce", "nodeAllocatable=224,2000Gi", cwd=workspace)
    assert short.code == 0, short.err
    text = profile.read_text()
    assert "nodeAllocatable:\n  cpu: '224'\n  memory: 2000Gi\n# CPU cores each training pod" in text
    teams = trainops("set", "prod-roce", "teams=vision=64,nlp=32", "--dry-run", cwd=workspace)
    flow = "teams=[{name: vision, gpus: 64}, {name: nlp, gpus: 32}]"
    as_yaml = trainops("set", "prod-roce", flow, "--dry-run", cwd=workspace)
    assert teams.code == as_yaml.code == 0, teams.err + as_yaml.err
    assert teams.out == as_yaml.out and "+- name: vision\n+  gpus: 64\n" in teams.out
    bad = trainops("set", "prod-roce", "teams=vision", cwd=workspace)
    assert bad.code == 2
    assert "teams 'vision': expected NAME=NUMBER,... (e.g. vision=32,nlp=16)" in bad.err


def test_set_keeps_the_comments_of_list_entries_that_stay():
    """Issue 43 (walkthrough 2): replacing teams rewrote the whole block and dropped the
    comments on its entries; entries matched by name are updated in place."""
    text = (
        "fabric: tcp\nteams:\n- name: vision   # the CV group\n  gpus: 32\n"
        "- name: nlp\n  gpus: 16  # one node\n# the racks\ntopologyKey: rack\n"
    )
    grown = apply_assignments(text, [parse_assignment("teams=vision=64,robo=8,nlp=16")])
    assert grown == (
        "fabric: tcp\nteams:\n- name: vision   # the CV group\n  gpus: 64\n"
        "- name: robo\n  gpus: 8\n- name: nlp\n  gpus: 16  # one node\n# the racks\n"
        "topologyKey: rack\n"
    )
    # The last entry gone (ruamel.yaml holds the next key's comment as its): the block is
    # rewritten, the next key's comment kept.
    shrunk = apply_assignments(text, [parse_assignment("teams=vision=8")])
    assert (
        shrunk == "fabric: tcp\nteams:\n- name: vision\n  gpus: 8\n# the racks\ntopologyKey: rack\n"
    )


def test_set_types_a_map_entry_as_the_key_reads_it(trainops, workspace):
    """gpuHealth.level is a number (was written '3'); nccl entries stay strings."""
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    assert trainops("set", "prod-roce", "gpuHealth.level=3", cwd=workspace).code == 0
    assert "gpuHealth:\n  level: 3\n" in profile.read_text()
    validate_clean(trainops, workspace, "overlays/prod-roce")


def test_set_dry_run_prints_the_diff_and_writes_nothing(trainops, workspace):
    run = trainops("set", "prod-roce", "nodes=2", "--dry-run", cwd=workspace)
    assert run.code == 0
    assert "-nodes: 16\n+nodes: 2\n" in run.out and "dry run" in run.out
    assert status(workspace) == ""


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("fabric=fddi", "overlays/prod-roce/cluster.yaml:7: fabric: must be one of tcp, roce, ib"),
        ("gpusPerNode=eight", "gpusPerNode: must be an integer, not 'eight'"),
        ("Nodes=3", "Nodes: unknown profile key; did you mean nodes?"),
        # new-cluster's flag spelling, and snake case: the key is named as cluster.yaml has it
        ("spare-nodes=2", "spare-nodes: unknown profile key; did you mean spareNodes?"),
        ("gpu_health.level=3", "gpu_health: unknown profile key; did you mean gpuHealth?"),
        ("hca=mlx5_0", "hca: a pod on the sriov-roce network sees only its own VFs"),
        ("nodes.x=1", "nodes.x: nodes is not a map"),
        ("nccl.NCCL_NOPE-", "nccl.NCCL_NOPE: not set in the profile"),
        ("nodes", "'nodes' is not KEY=VALUE"),
    ],
)
def test_bad_assignments_are_one_line_errors_and_write_nothing(
    trainops, workspace, assignment, message
):
    run = trainops("set", "prod-roce", assignment, cwd=workspace)
    assert run.code == 2
    assert message in run.err and len(run.err.strip().splitlines()) == 1
    assert status(workspace) == ""


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (
            "fabric: ib\ngpusPerNode: 8\nnodes: 2\nstorageClass: nfs\nimage: r/t:1\n"
            "network: host-device\nnic: ib0\nrdmaResource: x/ib\n",
            "hca: is required for the ib fabric",
        ),
        (
            "fabric: roce\ngpusPerNode: 8\nnodes: 2\nstorageClass: nfs\nimage: r/t:1\n"
            "rdmaResource: x/vf\nscheduler: kueue\nmpiOperator: training-operator\n",
            "mpiOperator: Kueue does not manage the Training Operator's MPIJob",
        ),
        (
            "fabric: tcp\nnic: eth1\ngpusPerNode: 1\nnodes: 2\nstorageClass: nfs\nimage: r/t:1\n"
            "rdmaResource: x/ib\n",
            "rdmaResource: only applies to RDMA fabrics",
        ),
        (
            "fabric: tcp\nnic: eth1\ngpusPerNode: one\nnodes: 2\nstorageClass: nfs\nimage: r/t:1\n",
            "gpusPerNode: must be an integer",
        ),
        (
            "fabric: tcp\nnic: eth1\ngpusPerNode: 1\nnodes: 2\nstorageClass: nfs\nimage: r/t:1\n"
            "colour: blue\n",
            "colour: unknown key",
        ),
    ],
)
def test_impossible_profiles_name_the_key(trainops, workspace, profile, message):
    source = write(workspace / "draft.yaml", profile)
    run = trainops("new-cluster", "draft", "--from", str(source), cwd=workspace)
    assert run.code == 2
    assert message in run.err and len(run.err.strip().splitlines()) == 1
    assert not (workspace / "overlays/draft").exists()


# The README's path for a new cluster and a run; diagnostics need a live cluster.
README_FLOW = ("new-cluster", "set", "validate", "new-run")


def _readme_commands(readme: str) -> list[list[str]]:
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", readme, re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            if "bin/trainops" not in command.split("#", 1)[0]:
                continue  # other tools' lines need not be shell-quoted as trainops's are
            words = shlex.split(command)
            if words and words[0].endswith("bin/trainops") and words[1] in README_FLOW:
                commands.append(words[1:])
    return commands


def test_a_new_user_follows_the_readme_to_a_new_cluster_and_a_run(trainops, workspace):
    commands = _readme_commands((workspace / "README.md").read_text())
    verbs = [words[0] for words in commands]
    assert "new-cluster" in verbs and "new-run" in verbs
    for words in commands:
        run = trainops(*words, cwd=workspace)
        assert run.code == 0, (words, run.err, run.out)
    clusters = sorted(p.parent.name for p in (workspace / "overlays").glob("*/cluster.yaml"))
    assert len(clusters) == 5
    report = validate_clean(trainops, workspace, "overlays")
    # Free of every issue-11 defect, warnings included.
    found = {f["rule"] for f in report["findings"]}
    assert not found & DEFECT_RULES, sorted(found & DEFECT_RULES)


def _render_one(trainops, workspace, path: str) -> dict:
    rendered = trainops("render", "--format", "json", path, cwd=workspace)
    [record] = job_records(rendered.out)
    return record["object"]


@pytest.mark.parametrize(
    ("template", "runtime"),
    [("trainjob", "torch-distributed-ib"), ("trainjob-mpi", "mpi-distributed-ib")],
)
def test_trainjob_run_validates_with_its_cluster_and_names_its_runtime(
    trainops, workspace, template, runtime
):
    run = trainops(
        "new-run",
        "prod-b200",
        "v2-run",
        "--template",
        template,
        "--nodes",
        "2",
        "--",
        "--model",
        "gpt",
        cwd=workspace,
    )
    assert run.code == 0, run.err
    validate_clean(trainops, workspace, "overlays/prod-b200/runs/v2-run")
    job = _render_one(trainops, workspace, "overlays/prod-b200/runs/v2-run")
    assert (job["kind"], job["spec"]["runtimeRef"]["name"]) == ("TrainJob", runtime)
    # The reference trainer: as trainer-launch's module (torch), or what mpirun starts.
    program = ["--module", "trainer"] if template == "trainjob" else ["python", "-m", "trainer"]
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert job["spec"]["trainer"]["args"] == [*program, "--model", "gpt"]


def test_a_trainjob_runs_broken_override_is_caught_at_the_trainjobs_path(trainops, workspace):
    assert (
        trainops(
            "new-run",
            "prod-b200",
            "bad-net",
            "--template",
            "trainjob",
            "--nodes",
            "2",
            cwd=workspace,
        ).code
        == 0
    )
    kustomization = workspace / "overlays/prod-b200/runs/bad-net/kustomization.yaml"
    text = kustomization.read_text()
    text = text.replace(
        "      value: 2\n",
        "      value: 2\n    - op: add\n      path: /spec/trainer/env\n"
        "      value: [{name: NCCL_SOCKET_IFNAME, value: '=ib0'}]\n",
    )
    kustomization.write_text(text)
    run = trainops("validate", "--format", "json", "overlays/prod-b200/runs/bad-net", cwd=workspace)
    assert run.code == 1
    [finding] = [f for f in json.loads(run.out)["findings"] if f["severity"] == "error"]
    assert (finding["rule"], finding["resource"], finding["path"]) == (
        "nccl-socket-ifname",
        "TrainJob/training/bad-net",
        "spec.trainer.env[0].value",
    )
    assert "=ib0 matches none of the pod's interfaces" in finding["message"]


def test_runs_only_use_templates_their_cluster_offers(trainops, workspace):
    v1_only = trainops(
        "new-run", "prod-roce", "x-1", "--template", "trainjob", "--nodes", "2", cwd=workspace
    )
    assert v1_only.code == 2 and "has no trainjob template (trainer: v1" in v1_only.err
    v2_only = trainops(
        "new-run", "prod-b200", "x-2", "--template", "pytorchjob", "--nodes", "2", cwd=workspace
    )
    assert v2_only.code == 2 and "use mpijob, trainjob, trainjob-mpi" in v2_only.err
    image = trainops(
        "new-run",
        "prod-b200",
        "x-3",
        "--template",
        "trainjob-mpi",
        "--nodes",
        "2",
        "--image",
        "r/t:2.0",
        cwd=workspace,
    )
    assert image.code == 2 and "launcher only" in image.err
    assert status(workspace) == ""


def test_a_trainer_v2_profile_without_the_training_operator_cannot_keep_its_mpijob(
    trainops, workspace
):
    run = trainops("set", "prod-b200", "mpiOperator=training-operator", cwd=workspace)
    assert run.code == 2
    assert "mpiOperator: training-operator needs the Training Operator" in run.err
    assert status(workspace) == ""


def test_trainer_both_with_volcano_renders_every_path(trainops, workspace):
    """A cluster serving v1 and v2 with Volcano: both operators' templates, the runtimes'
    PodGroup policy and queue, and the Training Operator's enable-scheme flags."""
    profile = (
        "fabric: tcp\nnic: eth1\ngpusPerNode: 2\nnodes: 4\nstorageClass: nfs\n"
        "image: r/trainer:1.0\nscheduler: volcano\nqueue: research\ntrainer: both\n"
        "mpiOperator: mpi-operator\n"
    )
    source = write(workspace / "both.yaml", profile)
    assert trainops("new-cluster", "gpu-both", "--from", str(source), cwd=workspace).code == 0
    templates = sorted(p.name for p in (workspace / "overlays/gpu-both/training").iterdir())
    assert templates == [
        "cluster",
        "elastic",
        "mpijob",
        "preflight",
        "pytorchjob",
        "runtimes",
        "torchtitan",
        "trainjob",
        "trainjob-mpi",
    ]
    validate_clean(trainops, workspace, "overlays/gpu-both")
    rendered = trainops("render", "--format", "json", "overlays/gpu-both", cwd=workspace)
    objects = [r["object"] for r in json.loads(rendered.out)]
    runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterTrainingRuntime"}
    assert set(runtimes) == {"torch-distributed-tcp", "mpi-distributed-tcp"}
    for runtime in runtimes.values():
        assert runtime["spec"]["podGroupPolicy"] == {"volcano": {}}
        annotations = runtime["spec"]["template"]["metadata"]["annotations"]
        assert annotations["scheduling.volcano.sh/queue-name"] == "research"
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            assert job["template"]["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    args = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0].get("args", [])
        for o in objects
        if o["kind"] == "Deployment"
    }
    assert "--enable-scheme=pytorchjob" in args["training-operator"]
    assert not any("mpijob" in a for a in args["training-operator"])
    assert {"kubeflow-trainer-controller-manager", "jobset-controller-manager"} <= set(args)
