"""The policy engine: exemptions, settings, platform context, reports and CLI."""

from __future__ import annotations

import json
import shutil
from datetime import date
from pathlib import Path

import pytest
import yaml

from tests.policies.fixtures import edit, job, pytorchjob
from tests.support import REPO, write
from trainops.errors import InputError
from trainops.model import Document, Target
from trainops.policy.engine import Context, PolicySettings, evaluate
from trainops.policy.pods import pod_templates
from trainops.policy.settings import load_pack, load_settings

load_pack(REPO / "policies")
NO_SHM = edit(
    lambda docs: [
        (
            spec.update(volumes=[v for v in spec["volumes"] if v["name"] != "dshm"]),
            spec["containers"][0].update(
                volumeMounts=[
                    m for m in spec["containers"][0]["volumeMounts"] if m["name"] != "dshm"
                ]
            ),
        )
        for spec in (
            r["template"]["spec"] for r in job(docs)["spec"]["pytorchReplicaSpecs"].values()
        )
    ]
)


def run(docs, settings=None):
    documents = [Document(obj=d, source="f.yaml") for d in docs]
    return evaluate(Context(Target("file", "f.yaml"), documents), settings or PolicySettings())


def rules_of(findings):
    return {f.rule for f in findings}


def test_annotation_with_a_reason_exempts_the_resource():
    docs = NO_SHM()
    assert "dev-shm-missing" in rules_of(run(docs))
    job(docs)["metadata"]["annotations"] = {
        "trainops.dev/exempt-dev-shm-missing": "tiny CPU smoke test image"
    }
    assert "dev-shm-missing" not in rules_of(run(docs))


def test_annotation_without_reason_is_an_error_and_exempts_nothing():
    docs = NO_SHM()
    job(docs)["metadata"]["annotations"] = {"trainops.dev/exempt-dev-shm-missing": " "}
    found = run(docs)
    assert {"dev-shm-missing", "policy-exemption"} <= rules_of(found)
    [problem] = [f for f in found if f.rule == "policy-exemption"]
    assert problem.severity == "error" and "gives no reason" in problem.message


def write_settings(tmp_path: Path, text: str) -> Path:
    return write(tmp_path / "config.yaml", text)


def test_config_exemption_until_a_date(tmp_path: Path):
    config = write_settings(
        tmp_path,
        """
exemptions:
- rule: dev-shm-missing
  resources: [PyTorchJob/training/*]
  reason: waiting for the node pool with bigger memory
  expires: 2999-01-01
""",
    )
    settings = load_settings(config)
    assert "dev-shm-missing" not in rules_of(run(NO_SHM(), settings))


def test_expired_exemption_is_an_error_and_no_longer_exempts(tmp_path: Path):
    config = write_settings(
        tmp_path,
        """
exemptions:
- rule: dev-shm-missing
  resources: [PyTorchJob/training/llama]
  reason: was fine last year
  expires: 2020-01-31
""",
    )
    settings = load_settings(config, today=date(2026, 11, 21))
    [problem] = settings.problems
    assert problem.severity == "error" and "expired on 2020-01-31" in problem.message
    assert problem.line == 6
    assert "dev-shm-missing" in rules_of(run(NO_SHM(), settings))


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("severity:\n  no-such-rule: warning\n", "unknown rule 'no-such-rule'", 2),
        ("severity:\n  dev-shm-missing: loud\n", "is not error, warning, info or off", 2),
        (
            "exemptions:\n- rule: nope\n  resources: [A/b/c]\n  reason: r\n  expires: 2999-01-01\n",
            "unknown rule 'nope'",
            2,
        ),
        (
            "exemptions:\n- rule: host-pid\n  resources: [A/b/c]\n  expires: 2999-01-01\n",
            "needs a reason",
            2,
        ),
        (
            "exemptions:\n- rule: host-pid\n  resources: [A/b/c]\n  reason: r\n",
            "needs an expiry date",
            2,
        ),
        (
            "exemptions:\n- rule: host-pid\n  resources: [Pod]\n  reason: r\n"
            "  expires: 2999-01-01\n",
            "Kind/namespace/name",
            3,
        ),
        ("rules: []\n", "unknown key 'rules'", 1),
    ],
)
def test_bad_settings_are_unreadable_input(tmp_path: Path, text, message, line):
    config = write_settings(tmp_path, text)
    with pytest.raises(InputError) as caught:
        load_settings(config)
    assert message in caught.value.message
    assert (caught.value.file, caught.value.line) == (str(config), line)


def test_severity_overrides_and_off(tmp_path: Path):
    quiet = load_settings(write_settings(tmp_path, "severity:\n  dev-shm-missing: 'off'\n"))
    assert "dev-shm-missing" not in rules_of(run(NO_SHM(), quiet))
    soft = load_settings(write_settings(tmp_path, "severity:\n  dev-shm-missing: warning\n"))
    assert {f.severity for f in run(NO_SHM(), soft) if f.rule == "dev-shm-missing"} == {"warning"}


def test_pod_templates_of_every_workload_kind():
    pod = {"containers": [{"name": "c", "image": "i:1"}]}
    template = {"metadata": {}, "spec": pod}
    cases = {
        "Pod": ({"apiVersion": "v1", "kind": "Pod", "spec": pod}, ["Pod"]),
        "Deployment": (
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "spec": {"replicas": 2, "template": template},
            },
            ["Deployment"],
        ),
        "CronJob": (
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "spec": {"jobTemplate": {"spec": {"template": template}}},
            },
            ["CronJob"],
        ),
        "MPIJob": (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "MPIJob",
                "spec": {
                    "mpiReplicaSpecs": {
                        "Launcher": {"template": template},
                        "Worker": {"template": template},
                    }
                },
            },
            ["Launcher", "Worker"],
        ),
        "TFJob": (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "spec": {
                    "tfReplicaSpecs": {
                        "Chief": {"template": template},
                        "PS": {"template": template},
                    }
                },
            },
            ["Chief", "PS"],
        ),
        "ClusterTrainingRuntime": (
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "ClusterTrainingRuntime",
                "spec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {"name": "node", "template": {"spec": {"template": template}}}
                            ]
                        }
                    }
                },
            },
            ["node"],
        ),
        "TrainJob": (
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "spec": {"trainer": {"image": "i:1", "numNodes": 4}},
            },
            ["trainer"],
        ),
    }
    for kind, (obj, roles) in cases.items():
        obj.setdefault("metadata", {"name": "x"})
        pods = pod_templates(Document(obj=obj, source="s"))
        assert [p.role for p in pods] == roles, kind
        assert all(p.containers for p in pods), kind


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """A copy of the repository's bases, schemas and policies with one cluster."""
    root = tmp_path_factory.mktemp("repo")
    for name in ("base", "schemas", "policies"):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO / "overlays/prod-roce", root / "overlays/prod-roce")
    return root


def test_runs_are_checked_against_their_clusters_platform(trainops, repository: Path):
    run_dir = repository / "overlays/prod-roce/runs/gpt-pretrain-1121"
    clean = trainops("validate", "--format", "json", str(run_dir), cwd=repository)
    assert json.loads(clean.out)["summary"]["errors"] == 0
    kustomization = run_dir / "kustomization.yaml"
    original = kustomization.read_text()
    try:
        # The run now asks for a network and a queue the platform does not define.
        kustomization.write_text(
            original
            + (
                "- target: {kind: PyTorchJob}\n  patch: |-\n"
                "    - op: replace\n      path: /metadata/labels/kueue.x-k8s.io~1queue-name\n"
                "      value: big-queue\n"
                "    - op: replace\n      path: /spec/pytorchReplicaSpecs/Worker/template/metadata/"
                "annotations/k8s.v1.cni.cncf.io~1networks\n      value: fast-net\n"
            )
        )
        broken = trainops("validate", "--format", "json", str(run_dir), cwd=repository)
    finally:
        kustomization.write_text(original)
    assert broken.code == 1
    found = {(f["rule"], f["message"].split(" (")[0]) for f in json.loads(broken.out)["findings"]}
    assert ("queue-exists", "no LocalQueue 'big-queue' in namespace training") in found
    assert any(
        rule == "multus-network-missing" and "training/fast-net" in message
        for rule, message in found
    )


def test_policy_findings_join_reports_and_exit_codes(trainops, tmp_path: Path):
    path = write(tmp_path / "job.yaml", yaml.safe_dump(job(NO_SHM())))
    run_ = trainops("validate", "--format", "sarif", str(path))
    assert run_.code == 1
    sarif = json.loads(run_.out)["runs"][0]
    rule_ids = {r["id"] for r in sarif["tool"]["driver"]["rules"]}
    assert {"schema", "dev-shm-missing", "nccl-socket-ifname"} <= rule_ids
    assert {r["ruleId"] for r in sarif["results"]} == {"dev-shm-missing", "nccl-debug-info"}
    results = [r for r in sarif["results"] if r["ruleId"] == "dev-shm-missing"]
    assert results and results[0]["locations"][0]["physicalLocation"]["region"]["startLine"] > 1
    assert trainops("validate", "--no-policies", str(path)).code == 0


def test_policies_cli(trainops):
    listing = trainops("policies", "list")
    assert listing.code == 0 and "dev-shm-missing" in listing.out and "schema" in listing.out
    explain = trainops("policies", "explain", "mpi-forwards-nccl")
    assert explain.code == 0 and "-x" in explain.out and "trainops.dev/exempt-" in explain.out
    unknown = trainops("policies", "explain", "mpi-forward-nccl")
    assert unknown.code == 2 and "did you mean mpi-forwards-nccl" in unknown.err


def test_the_example_job_needs_no_exemption():
    assert [f for f in run([pytorchjob()]) if f.severity == "error"] == []
