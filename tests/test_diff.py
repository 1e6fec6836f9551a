"""`trainops diff` between Git revisions of a private copy of the repository."""

from __future__ import annotations

import json
import shutil

from tests.support import REPO
from tests.workspace import commit
from trainops.diff.compare import MISSING, field_changes


def diff_json(trainops, workspace, *args: str) -> dict:
    run = trainops("diff", "--format", "json", *args, cwd=workspace)
    assert run.code == 0, run.err
    return json.loads(run.out)


def test_an_nccl_change_shows_exactly_that_change_in_every_affected_resource(trainops, workspace):
    assert trainops("set", "prod-roce", "nccl.NCCL_IB_TIMEOUT=23", cwd=workspace).code == 0
    commit(workspace, "NCCL_IB_TIMEOUT 23 on prod-roce")
    report = diff_json(trainops, workspace, "--base", "HEAD~1", "--head", "HEAD")
    resources = report["resources"]
    assert {r["change"] for r in resources} == {"modified"}
    assert {r["app"] for r in resources} == {"overlays/prod-roce/runs/gpt-pretrain-1121"}
    for resource in resources:
        assert resource["fields"], resource
        for change in resource["fields"]:
            assert change["path"].endswith("env[NCCL_IB_TIMEOUT].value")
            assert (change["old"], change["new"]) == ("22", "23")
    [run] = [r for r in resources if "/runs/" in r["app"]]
    assert any("already exists" in w for w in run["warnings"])
    assert report["base"].startswith("HEAD~1 (") and report["head"].startswith("HEAD (")


def test_an_immutable_queue_change_is_flagged(trainops, workspace):
    assert trainops("set", "prod-ib", "queue=research", cwd=workspace).code == 0
    run = trainops("diff", "overlays/prod-ib/runs", cwd=workspace)
    assert run.code == 0
    assert '~ spec.runPolicy.schedulingPolicy.queue: "training" -> "research"' in run.out
    assert "spec.runPolicy.schedulingPolicy.queue is immutable" in run.out  # the CRD's rule
    strict = trainops("diff", "--fail-on-warning", cwd=workspace)
    assert strict.code == 1


def test_a_deleted_run_is_pruned_and_said_so(trainops, workspace):
    shutil.rmtree(workspace / "overlays/lab-tcp/runs/mlp-smoke-1121")
    report = diff_json(trainops, workspace)
    # The job and its NetworkPolicy.
    gone = {r["resource"].split("/")[0]: r for r in report["resources"]}
    assert set(gone) == {"PyTorchJob", "NetworkPolicy"}, report["resources"]
    removed = gone["PyTorchJob"]
    assert removed["change"] == "removed" and removed["resource"].endswith("mlp-smoke-1121")
    assert "Argo CD prunes run mlp-smoke-1121" in removed["warnings"][0]


def test_markdown_is_ready_for_a_pull_request_comment(trainops, workspace):
    assert trainops("set", "prod-ib", "queue=research", cwd=workspace).code == 0
    run = trainops("diff", "--format", "markdown", cwd=workspace)
    assert run.out.startswith("### trainops diff: `HEAD (")
    assert "> [!WARNING]" in run.out
    assert '| `spec.runPolicy.schedulingPolicy.queue` | `"training"` | `"research"` |' in run.out


def test_no_change_says_so(trainops, workspace):
    run = trainops("diff", cwd=workspace)
    assert run.code == 0 and run.out.startswith("no changes to synced resources")


def test_an_unknown_revision_is_a_one_line_error(trainops, workspace):
    run = trainops("diff", "--base", "no-such-branch", cwd=workspace)
    assert run.code == 2
    assert len(run.err.strip().splitlines()) == 1 and "no-such-branch" in run.err


def test_a_path_that_selects_no_application_is_an_error_not_no_changes(trainops, workspace):
    """Issue 45: a misspelled path compared nothing and said "no changes"."""
    run = trainops("diff", "overlays/prod-rcoe", cwd=workspace)
    assert run.code == 2 and len(run.err.strip().splitlines()) == 1
    assert "overlays/prod-rcoe: no Application Argo CD syncs" in run.err
    assert trainops("diff", "overlays/prod-roce", cwd=workspace).code == 0
    # A run deleted in the working tree is still selected: it is at the base revision.
    shutil.rmtree(workspace / "overlays/lab-tcp/runs/mlp-smoke-1121")
    gone = diff_json(trainops, workspace, "overlays/lab-tcp/runs/mlp-smoke-1121")
    assert {r["change"] for r in gone["resources"]} == {"removed"}


def test_a_run_of_plain_manifests_is_compared_as_argo_cd_syncs_it(trainops, workspace):
    """Issue 45: a run directory without a kustomization is an Argo CD directory source;
    diff refused it (exit 2) where validate and Argo CD read its files."""
    run = workspace / "overlays/prod-roce/runs/bare-0001"
    run.mkdir()
    (run / "settings.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bare\n  namespace: training\n"
    )
    report = diff_json(trainops, workspace)
    assert [(r["app"], r["resource"], r["change"]) for r in report["resources"]] == [
        ("overlays/prod-roce/runs/bare-0001", "ConfigMap/training/bare", "added")
    ]


def test_named_lists_are_matched_by_name():
    old = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    new = {
        "env": [
            {"name": "A", "value": "1"},
            {"name": "X", "value": "9"},
            {"name": "B", "value": "3"},
        ]
    }
    changes = {(c.path, c.kind) for c in field_changes(old, new)}
    assert changes == {("env[B].value", "changed"), ("env[X]", "added")}


def test_unnamed_lists_compare_by_position():
    changes = field_changes({"args": ["a", "b"]}, {"args": ["a", "c", "d"]})
    assert [(c.path, c.old, c.new) for c in changes] == [
        ("args[1]", "b", "c"),
        ("args[2]", MISSING, "d"),
    ]


def _modified(old: dict, new: dict):
    from trainops.diff.compare import ResourceDiff, ResourceKey, field_changes

    key = ResourceKey("overlays/x", old["kind"], "ns", old["metadata"]["name"])
    return ResourceDiff(key, "modified", field_changes(old, new), old, new)


def _hazards(old: dict, change) -> list[str]:
    import copy

    from trainops.diff.hazards import hazards
    from trainops.schema.registry import SchemaRegistry, crd_location

    registry = SchemaRegistry([crd_location(REPO / "schemas")], "1.35", strict=False)
    new = copy.deepcopy(old)
    change(new)
    return hazards(_modified(old, new), registry)


TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "llama"},
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
}


def test_crd_immutables_come_from_their_transition_rules():
    found = _hazards(TRAINJOB, lambda o: o["spec"]["trainer"].update(numNodes=4))
    assert any(h.startswith("spec.trainer: ") and "field is immutable" in h for h in found)
    assert _hazards(TRAINJOB, lambda o: o["spec"].update(suspend=True)) == []
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"failurePolicy": {"maxRestarts": 1}, "replicatedJobs": []},
    }
    found = _hazards(jobset, lambda o: o["spec"]["failurePolicy"].update(maxRestarts=3))
    assert any("spec.failurePolicy" in h and "Value is immutable" in h for h in found)
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "training"},
        "spec": {"clusterQueue": "gpu"},
    }
    assert _hazards(queue, lambda o: o["spec"].update(clusterQueue="cpu"))


def test_built_in_immutables_no_rule_expresses():
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt"},
        "spec": {"storageClassName": "cephfs", "resources": {"requests": {"storage": "1Ti"}}},
    }
    assert _hazards(claim, lambda o: o["spec"].update(storageClassName="nfs"))
    grow = lambda o: o["spec"]["resources"]["requests"].update(storage="2Ti")  # noqa: E731
    assert _hazards(claim, grow) == []
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"a": "b"}}},
    }
    assert _hazards(sts, lambda o: o["spec"].update(serviceName="db2"))
    assert _hazards(sts, lambda o: o["spec"].update(replicas=3)) == []
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "immutable": True,
        "data": {"a": "1"},
    }
    assert _hazards(config, lambda o: o["data"].update(a="2"))


def test_an_edited_trainjob_run_is_immutable_and_a_runtime_change_reaches_new_runs_only(
    trainops, workspace
):
    run = workspace / "overlays/prod-b200/runs/llama-pretrain-1124/kustomization.yaml"
    run.write_text(run.read_text().replace("value: 4\n", "value: 6\n"))
    assert trainops("set", "prod-b200", "nccl.NCCL_IB_TIMEOUT=23", cwd=workspace).code == 0
    report = diff_json(trainops, workspace)
    warnings = {r["resource"]: r["warnings"] for r in report["resources"]}
    edited = warnings["TrainJob/training/llama-pretrain-1124"]
    assert any(w.startswith("spec.trainer: ") and "field is immutable" in w for w in edited)
    assert any("already exists" in w for w in edited)
    runtime = warnings["ClusterTrainingRuntime/torch-distributed-ib"]
    assert any("only TrainJobs created afterwards" in w for w in runtime)


def test_switching_mpijob_to_the_mpi_operator_warns_that_the_crd_takes_its_jobs(
    trainops, workspace
):
    assert trainops("set", "prod-ib", "mpiOperator=mpi-operator", cwd=workspace).code == 0
    report = diff_json(trainops, workspace, "overlays/prod-ib")
    [crd] = [
        r
        for r in report["resources"]
        if r["resource"] == "CustomResourceDefinition/mpijobs.kubeflow.org"
    ]
    assert any("no longer serves v1" in w and "deletes every object" in w for w in crd["warnings"])
