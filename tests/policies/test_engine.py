"""The policy engine: exemptions, settings, platform context, reports and CLI."""

from __future__ import annotations

import copy
import json
import os
import shutil
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest
import yaml

from tests.policies.fixtures import baseline, edit, job, platform, pod, pytorchjob
from tests.support import REPO, write
from trainops.errors import InputError
from trainops.model import Document, Target
from trainops.policy import Context, Violation, engine, registered, registry, resource_rule
from trainops.policy.engine import evaluate
from trainops.policy.pods import pod_templates
from trainops.policy.settings import PolicySettings, load_pack, load_settings

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


def test_annotation_without_reason_is_a_warning_and_exempts_nothing():
    """It silences nothing and harms nothing in the cluster: a warning (severity contract)."""
    docs = NO_SHM()
    job(docs)["metadata"]["annotations"] = {"trainops.dev/exempt-dev-shm-missing": " "}
    found = run(docs)
    assert {"dev-shm-missing", "policy-exemption"} <= rules_of(found)
    [problem] = [f for f in found if f.rule == "policy-exemption"]
    assert problem.severity == "warning" and "gives no reason" in problem.message


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


def _run_at(docs, path: str, settings):
    documents = [Document(obj=d, source=path) for d in docs]
    return evaluate(Context(Target("kustomization", path), documents), settings)


@pytest.mark.parametrize(
    ("paths", "place", "exempt"),
    [
        ("", "overlays/prod/runs/r1", False),  # a run never inherits the platform's
        ("", "overlays/prod", True),
        ("paths: [overlays/prod/runs/r1]\n", "overlays/prod/runs/r1", True),
        ("paths: [overlays/prod/runs/r1]\n", "overlays/prod/runs/r2", False),
        ("paths: [overlays/prod/runs/r1]\n", "overlays/prod", False),
    ],
)
def test_config_exemptions_hold_where_they_say(tmp_path: Path, paths, place, exempt):
    """An exemption is bound to where the object is rendered, not its name alone: a run
    defining an object with a platform object's kind, namespace and name does not
    inherit the platform's exemption."""
    (tmp_path / ".git").mkdir()
    config = write_settings(
        tmp_path,
        "exemptions:\n- rule: dev-shm-missing\n  resources: [PyTorchJob/training/*]\n"
        "  reason: the platform's smoke test\n  expires: 2999-01-01\n  " + paths,
    )
    settings = load_settings(config)
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        (tmp_path / place).mkdir(parents=True)
        found = rules_of(_run_at(NO_SHM(), place, settings))
    finally:
        os.chdir(previous)
    assert ("dev-shm-missing" not in found) == exempt


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


def test_pod_templates_count_the_pods_each_template_makes():
    pod = {"containers": [{"name": "c", "image": "i:1"}]}
    template = {"metadata": {}, "spec": pod}
    cases = [
        (
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "spec": {
                    "parallelism": 4,
                    "completions": 4,
                    "completionMode": "Indexed",
                    "template": template,
                },
            },
            [("Job", 4)],
        ),
        (
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "spec": {
                    "replicatedJobs": [
                        {"name": "driver", "template": {"spec": {"template": template}}},
                        {
                            "name": "workers",
                            "replicas": 3,
                            "template": {"spec": {"parallelism": 2, "template": template}},
                        },
                    ]
                },
            },
            [("driver", 1), ("workers", 6)],
        ),
        (
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "spec": {
                    "tasks": [
                        {"name": "master", "replicas": 1, "template": template},
                        {"name": "worker", "replicas": 4, "template": template},
                    ]
                },
            },
            [("master", 1), ("worker", 4)],
        ),
        (
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "spec": {
                    "replicas": 2,
                    "leaderWorkerTemplate": {
                        "size": 4,
                        "leaderTemplate": template,
                        "workerTemplate": template,
                    },
                },
            },
            [("leader", 2), ("worker", 6)],
        ),
        (
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "spec": {
                    "mpiReplicaSpecs": {
                        "Launcher": {"replicas": 1, "template": template},
                        "Worker": {"replicas": 2, "template": template},
                    }
                },
            },
            [("Launcher", 1), ("Worker", 2)],
        ),
    ]
    for obj, expected in cases:
        obj["metadata"] = {"name": "x"}
        pods = pod_templates(Document(obj=obj, source="s"))
        assert [(p.role, p.replicas) for p in pods] == expected, obj["kind"]


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


def test_wrongly_typed_fields_are_schema_errors_not_rule_crashes(trainops, tmp_path: Path):
    docs = copy.deepcopy(baseline())
    job(docs)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "four"
    job(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "eight"
    job(docs, "MPIJob")["spec"]["slotsPerWorker"] = "x"
    path = write(tmp_path / "templated.yaml", yaml.safe_dump_all(docs))
    result = trainops("validate", "--format", "json", str(path))
    assert result.code == 1, result.err
    errors = [f for f in json.loads(result.out)["findings"] if f["severity"] == "error"]
    typed = {
        f["path"] for f in errors if f["rule"] == "schema" and "expected integer" in f["message"]
    }
    assert typed == {
        "spec.pytorchReplicaSpecs.Worker.replicas",
        "spec.mpiReplicaSpecs.Worker.replicas",
        "spec.slotsPerWorker",
    }
    assert [f for f in errors if "could not check" in f["message"]] == []


def test_a_trainjob_whose_runtime_patches_are_not_a_list_is_a_schema_error(trainops, tmp_path):
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "x", "namespace": "ml"},
        "spec": {"runtimeRef": {"name": "torch"}, "runtimePatches": 5, "trainer": {}},
    }
    path = write(tmp_path / "trainjob.yaml", yaml.safe_dump(trainjob))
    result = trainops("validate", "--format", "json", str(path))
    errors = [f for f in json.loads(result.out)["findings"] if f["severity"] == "error"]
    assert [f["rule"] for f in errors] == ["schema"]


def test_a_rule_that_raises_is_reported_and_the_other_rules_go_on(monkeypatch):
    def broken(pod, ctx):
        raise KeyError("boom")
        yield  # a generator, like every rule

    rule = registered()["dev-shm-missing"]
    monkeypatch.setitem(registry._RULES, rule.id, replace(rule, check=broken))
    found = run(NO_SHM())
    crashed = [f for f in found if f.rule == "dev-shm-missing"]
    assert crashed and all(
        f.severity == "error" and "could not check this resource: KeyError" in f.message
        for f in crashed
    )
    assert "nccl-debug-info" in rules_of(found)  # the rest of the pack still ran


def test_a_rule_is_asked_for_a_bounded_number_of_violations_per_pod(monkeypatch):
    asked = 0

    def endless(pod, ctx):  # a rule that pairs each pod with every other of a huge render
        nonlocal asked
        while True:
            asked += 1
            yield Violation(f"pair {asked}")

    rule = registered()["dev-shm-missing"]
    monkeypatch.setitem(registry._RULES, rule.id, replace(rule, check=endless))
    found = [f for f in run(NO_SHM()) if f.rule == "dev-shm-missing"]
    kept = engine.VIOLATIONS_KEPT
    notes = [f for f in found if f.severity == "info"]  # one per pod template
    assert notes and asked == (kept + 1) * len(notes)
    assert len(found) == (kept + 1) * len(notes)
    assert f"the first {kept} are shown" in notes[0].message


def test_an_applies_predicate_that_raises_lets_its_rules_run(monkeypatch):
    def broken(subject):
        raise TypeError("unexpected shape")

    rule = registered()["dev-shm-missing"]
    assert rule.applies is not None  # else the test would not test the predicate
    monkeypatch.setitem(registry._RULES, rule.id, replace(rule, applies=broken))
    assert "dev-shm-missing" in rules_of(run(NO_SHM()))  # as if the predicate had held


def test_resource_rules_name_their_kinds():
    with pytest.raises(ValueError, match="must name its kinds"):
        resource_rule(id="no-kinds", severity="error", title="t", why="w", fix="f")(
            lambda doc, ctx: iter(())
        )


def _runtime(name: str = "torch-distributed-roce") -> dict:
    template = pod("node")
    template["spec"]["containers"][0]["env"] = [
        e for e in template["spec"]["containers"][0]["env"] if e["name"] != "NCCL_SOCKET_IFNAME"
    ]
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": 8}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {"template": template},
                            },
                        }
                    ]
                }
            },
        },
    }


def _trainjob(**trainer) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama", "namespace": "training"},
        "spec": {"runtimeRef": {"name": "torch-distributed-roce"}, "trainer": trainer},
    }


def test_a_trainjob_is_checked_as_the_pods_its_runtime_makes():
    clean = _trainjob(numNodes=4, env=[{"name": "NCCL_SOCKET_IFNAME", "value": "=net1"}])
    found = run([*platform(), _runtime(), clean])
    assert [f for f in found if f.severity == "error" and f.resource.startswith("TrainJob")] == []
    pods = Context(Target("file", "f"), [Document(obj=o, source="f") for o in [_runtime(), clean]])
    [node] = pods.pods(pods.find("TrainJob", "llama"))
    assert node.replicas == 4 and not node.partial
    # What the TrainJob sets is reported where the TrainJob sets it.
    wrong_nic = _trainjob(numNodes=4, env=[{"name": "NCCL_SOCKET_IFNAME", "value": "=eth9"}])
    [finding] = [
        f
        for f in run([*platform(), _runtime(), wrong_nic])
        if f.rule == "nccl-socket-ifname" and f.resource.startswith("TrainJob")
    ]
    assert finding.path == "spec.trainer.env[0].value" and "=eth9" in finding.message


def test_trainjob_runtime_patches_merge_by_name_and_are_blamed_for_what_they_break():
    patched = _trainjob(numNodes=2)
    patched["spec"]["runtimePatches"] = [
        {
            "manager": "example.com/tuner",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {
                                        "template": {
                                            "spec": {
                                                "volumes": [
                                                    {"name": "dshm", "emptyDir": {"medium": ""}}
                                                ]
                                            }
                                        }
                                    }
                                },
                            }
                        ]
                    }
                }
            },
        }
    ]
    found = run([*platform(), _runtime(), patched])
    shm = [f for f in found if f.rule == "dev-shm-not-memory"]
    assert shm and all(f.path.startswith("spec.runtimePatches[0].") for f in shm), shm
    # The runtime alone is blamed at runtimeRef, naming the runtime.
    runtime = _runtime()
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]["containers"][0]["image"] = "registry.example.com/trainer:latest"
    [image] = [
        f
        for f in run([*platform(), runtime, _trainjob(numNodes=2)])
        if f.rule == "image-pinned" and f.resource.startswith("TrainJob")
    ]
    assert image.path == "spec.runtimeRef"
    assert "ClusterTrainingRuntime torch-distributed-roce at spec.template" in image.message


def test_trainjob_resources_merge_with_the_runtimes_by_resource_name():
    more_memory = _trainjob(numNodes=2, resourcesPerNode={"limits": {"memory": "2Ti"}})
    ctx = Context(
        Target("file", "f"), [Document(obj=o, source="f") for o in [_runtime(), more_memory]]
    )
    [node] = ctx.pods(ctx.find("TrainJob", "llama"))
    limits = node.containers[0]["resources"]["limits"]
    assert limits["memory"] == "2Ti" and limits["nvidia.com/gpu"] == 8
    path = (*node.container_path(0), "resources", "limits", "memory")
    assert node.origin(path) == (("spec", "trainer", "resourcesPerNode", "limits", "memory"), "")
