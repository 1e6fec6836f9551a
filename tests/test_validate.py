"""`trainops validate`: strict schema checks, findings, reports and exit codes.

These tests are about the schema check, so they run with --no-policies; the policy
pack has its own tests under tests/policies.
"""

from __future__ import annotations

import json
import os
import stat
import weakref
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support import PYTORCHJOB, write
from trainops.cache import Cache
from trainops.model import Document, Target
from trainops.pipeline import (
    FILE_UNIT_BYTES,
    PARALLEL_MIN_UNITS,
    RENDER_AHEAD,
    ValidateOptions,
    Validation,
)
from trainops.render.engine import Renderer, RenderOptions

CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"


def test_pytorchjob_typo_is_an_unknown_field_with_path_line_and_hint(trainops, tmp_path: Path):
    job = write(tmp_path / "job.yaml", PYTORCHJOB.format(replicas_key="replica"))
    run = trainops("validate", "--no-policies", "--format", "json", str(job))
    assert run.code == 1
    report = json.loads(run.out)
    assert report["summary"]["errors"] == 1
    [finding] = report["findings"]
    assert finding == {
        "rule": "schema",
        "severity": "error",
        "source": f"{job}:9",
        "target": str(job),
        "file": str(job),
        "line": 9,
        "resource": "PyTorchJob/ml/typo",
        "path": "spec.pytorchReplicaSpecs.Worker.replica",
        "message": 'unknown field "replica"',
        "fix": 'Did you mean "replicas"?',
    }


def test_the_same_job_without_the_typo_is_clean(trainops, tmp_path: Path):
    job = write(tmp_path / "job.yaml", PYTORCHJOB.format(replicas_key="replicas"))
    run = trainops("validate", "--no-policies", str(job))
    assert run.code == 0, run.out
    assert run.out.strip() == "1 target, 1 resource: 0 errors, 0 warnings, 0 info"


def test_no_strict_accepts_unknown_fields(trainops, tmp_path: Path):
    job = write(tmp_path / "job.yaml", PYTORCHJOB.format(replicas_key="replica"))
    assert trainops("validate", "--no-policies", "--no-strict", str(job)).code == 0


def test_wrong_types_and_missing_required_fields(trainops, tmp_path: Path):
    doc = write(
        tmp_path / "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: two\n"
        "  template:\n    spec:\n      containers:\n      - image: nginx:1.27\n",
    )
    report = trainops("validate", "--no-policies", "--format", "json", str(doc))
    findings = json.loads(report.out)["findings"]
    messages = {(f["path"], f["message"]) for f in findings}
    assert ("spec.replicas", 'expected integer, got string "two"') in messages
    assert ("spec.selector", 'missing required field "selector"') in messages
    assert ("spec.template.spec.containers[0].name", 'missing required field "name"') in messages


def test_custom_resource_metadata_is_checked_too(trainops, tmp_path: Path):
    text = PYTORCHJOB.format(replicas_key="replicas").replace(
        "  namespace: ml\n", "  namespace: ml\n  label:\n    a: b\n"
    )
    job = write(tmp_path / "job.yaml", text)
    report = trainops("validate", "--no-policies", "--format", "json", str(job))
    findings = json.loads(report.out)["findings"]
    assert [(f["path"], f["fix"]) for f in findings] == [
        ("metadata.label", 'Did you mean "labels"?')
    ]


def test_kind_without_schema_is_an_error_unless_ignored(trainops, tmp_path: Path):
    doc = write(
        tmp_path / "x.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\n"
    )
    run = trainops("validate", "--no-policies", str(doc))
    assert run.code == 1 and "no schema for example.com/v1 Gadget" in run.out
    assert trainops("validate", "--no-policies", "--ignore-missing-schemas", str(doc)).code == 0
    assert trainops("validate", "--no-policies", "--skip", "Gadget", str(doc)).code == 0


COSCHEDULING_PODGROUP = """\
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: gang
spec:
  minMember: {min_member}
  scheduleTimeoutSeconds: 60
"""


def test_a_kind_of_another_group_is_not_checked_against_a_core_schema(trainops, tmp_path: Path):
    """Core schema files keep a group's first label only: scheduler-plugins' PodGroup
    (scheduling.x-k8s.io) is checked against its own CRD, never Kubernetes' scheduling.k8s.io
    PodGroup types."""
    good = write(tmp_path / "pg.yaml", COSCHEDULING_PODGROUP.format(min_member=4))
    run = trainops("validate", "--no-policies", str(good))
    assert run.code == 0, run.out
    bad = write(tmp_path / "bad.yaml", COSCHEDULING_PODGROUP.format(min_member=0))
    run = trainops("validate", "--no-policies", str(bad))
    assert run.code == 1 and "spec.minMember" in run.out, run.out


def test_unsupported_kubernetes_version_is_input_error(trainops, tmp_path: Path):
    doc = write(tmp_path / "cm.yaml", CONFIGMAP.format(name="a"))
    run = trainops("validate", "--no-policies", "--kubernetes-version", "1.12", str(doc))
    assert run.code == 2 and "no bundled schemas for Kubernetes 1.12" in run.err


def test_api_removed_in_a_later_version_depends_on_kubernetes_version(trainops, tmp_path: Path):
    doc = write(
        tmp_path / "hpa.yaml",
        "apiVersion: flowcontrol.apiserver.k8s.io/v1beta3\nkind: FlowSchema\nmetadata:\n"
        "  name: f\nspec:\n  priorityLevelConfiguration:\n    name: p\n",
    )
    assert trainops("validate", "--no-policies", "--kubernetes-version", "1.28", str(doc)).code == 0
    later = trainops("validate", "--no-policies", "--kubernetes-version", "1.32", str(doc))
    assert later.code == 1 and "no schema for flowcontrol.apiserver.k8s.io/v1beta3" in later.out


def test_lists_and_stdin(trainops):
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n"
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n  data: {k: 1}\n"
    )
    run = trainops("validate", "--no-policies", "--format", "json", "-", stdin=text)
    report = json.loads(run.out)
    assert report["summary"]["resources"] == 2
    assert [f["resource"] for f in report["findings"]] == ["ConfigMap//b"]


def test_junit_has_a_suite_per_target_and_a_case_per_resource(trainops, tmp_path: Path):
    write(tmp_path / "a.yaml", CONFIGMAP.format(name="a") + "---\n" + CONFIGMAP.format(name="b"))
    write(tmp_path / "b.yaml", PYTORCHJOB.format(replicas_key="replica"))
    out = tmp_path / "report.xml"
    run = trainops("validate", "--no-policies", "--format", "junit", "-o", str(out), str(tmp_path))
    assert run.code == 1 and run.out == ""
    assert "trainops: 2 targets, 3 resources: 1 error, 0 warnings, 0 info -> " in run.err
    root = ET.parse(out).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    assert [c.get("name") for c in suites[0].findall("testcase")] == [
        "ConfigMap//a",
        "ConfigMap//b",
    ]
    [case] = suites[1].findall("testcase")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "schema"
    assert root.get("tests") == "3" and root.get("failures") == "1"


def test_sarif_has_rule_metadata_and_physical_locations(trainops, tmp_path: Path):
    job = write(tmp_path / "job.yaml", PYTORCHJOB.format(replicas_key="replica"))
    sarif = json.loads(trainops("validate", "--no-policies", "--format", "sarif", str(job)).out)
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
    assert rules["schema"]["shortDescription"]["text"]
    assert rules["schema"]["defaultConfiguration"]["level"] == "error"
    [result] = run["results"]
    assert result["ruleId"] == "schema" and result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": job.as_uri()}, "region": {"startLine": 9}}
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "schema"


def test_output_is_all_or_nothing_and_exit_codes(trainops, tmp_path: Path):
    good = write(tmp_path / "good.yaml", CONFIGMAP.format(name="a"))
    assert trainops("validate", "--no-policies", str(good)).code == 0
    bad = write(tmp_path / "bad.yaml", PYTORCHJOB.format(replicas_key="replica"))
    assert trainops("validate", "--no-policies", str(good), str(bad)).code == 1


def test_a_clean_repository_prints_one_line_and_show_info_brings_info_back(trainops):
    quiet = trainops("validate", "overlays", "argocd")
    assert quiet.code == 0, quiet.out
    [line] = quiet.out.splitlines()
    assert line.endswith("info (shown with --show-info)") and " 0 errors, 0 warnings, " in line
    info = int(line.split(" warnings, ")[1].split(" info")[0])
    assert info > 0
    verbose = trainops("validate", "overlays", "argocd", "--show-info")
    assert sum(": info: " in ln for ln in verbose.out.splitlines()) == info


def test_quiet_prints_the_summary_and_fail_on_sets_the_exit_code(trainops, tmp_path: Path):
    # A Service that selects no pod of the file: a warning, never an error.
    doc = write(
        tmp_path / "svc.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n"
        "    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n"
        "    spec:\n      containers:\n      - name: web\n        image: nginx:1.27.0\n"
        "        resources:\n          requests: {cpu: 100m, memory: 64Mi}\n"
        "          limits: {cpu: 100m, memory: 64Mi}\n"
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n"
        "  selector: {app: api}\n  ports:\n  - port: 80\n",
    )
    loud = trainops("validate", str(doc))
    assert loud.code == 0 and "warning: Service//web" in loud.out
    quiet = trainops("validate", "--quiet", str(doc))
    assert quiet.code == 0 and quiet.out.strip() == loud.out.splitlines()[-1]
    assert ", 1 warning, " in quiet.out
    strict = trainops("validate", "--fail-on", "warning", "--format", "junit", str(doc))
    assert strict.code == 1
    assert ET.fromstring(strict.out).find(".//failure").get("type") == "service-selects-pods"


def test_two_files_with_the_same_content_keep_their_own_names(trainops, tmp_path: Path):
    text = PYTORCHJOB.format(replicas_key="replica")
    first, second = write(tmp_path / "a.yaml", text), write(tmp_path / "b.yaml", text)
    for _ in range(2):  # the second run is answered from the cache
        run = trainops("validate", "--no-policies", "--format", "json", str(first), str(second))
        sources = sorted(f["source"].split(":")[0] for f in json.loads(run.out)["findings"])
        assert sources == [str(first), str(second)]


@pytest.mark.own_cache
def test_a_corrupt_cache_entry_is_a_miss(trainops, tmp_path: Path, cache_dir: Path):
    job = write(tmp_path / "job.yaml", PYTORCHJOB.format(replicas_key="replica"))
    first = trainops("validate", "--no-policies", "--format", "json", str(job))
    for entry in cache_dir.rglob("*"):
        if entry.is_file() and "validate" in entry.parts:
            entry.write_bytes(b"\x00not json")
    again = trainops("validate", "--no-policies", "--format", "json", str(job))
    assert (again.code, again.out) == (first.code, first.out)
    assert "Traceback" not in again.err


def test_worker_processes_find_what_one_process_finds(trainops, tmp_path: Path):
    # Enough plain YAML to be worth worker processes with -j 2.
    configmaps = "---\n".join(CONFIGMAP.format(name=f"c{i}") for i in range(4000))
    size = len(configmaps)
    files = PARALLEL_MIN_UNITS * FILE_UNIT_BYTES // size + 2
    for index in range(files):
        bad = f"---\nkind: ConfigMap\napiVersion: v1\nmetadata:\n  name: x{index}\n  labels: [1]\n"
        write(tmp_path / f"f{index}.yaml", configmaps + bad)
    targets = [Target("file", str(path)) for path in sorted(tmp_path.glob("f*.yaml"))]
    validation = Validation(Renderer(RenderOptions(jobs=2)), ValidateOptions("1.35", ("default",)))
    assert validation.worth_processes(validation.plan(targets))
    two = trainops("validate", "--no-cache", "-j", "2", "--format", "json", str(tmp_path))
    assert two.code == 1
    found = json.loads(two.out)
    assert found["summary"] == {
        "targets": files,
        "resources": files * 4001,
        "errors": files,
        "warnings": 0,
        "info": 0,
        "exemptions": 0,
    }
    # In target order, each file's own finding: what one process says of the first and
    # last files (the files differ only in their names, so those two stand for all).
    targets = [str(path) for path in sorted(tmp_path.glob("f*.yaml"), key=lambda p: p.name)]
    assert [finding["target"] for finding in found["findings"]] == targets
    ends = [targets[0], targets[-1]]
    one = trainops("validate", "--no-cache", "-j", "1", "--format", "json", *ends)
    assert one.code == 1
    assert json.loads(one.out)["findings"] == [
        finding for finding in found["findings"] if finding["target"] in ends
    ]


def test_without_a_cache_no_entry_is_encoded(tmp_path: Path, monkeypatch):
    # --no-cache used to encode every render and every report for a cache that keeps
    # nothing: a tenth of a 10,000-resource run.
    kustomization = tmp_path / "app"
    write(kustomization / "configmap.yaml", CONFIGMAP.format(name="one"))
    write(kustomization / "kustomization.yaml", "resources: [configmap.yaml]\n")
    plain = write(tmp_path / "plain.yaml", CONFIGMAP.format(name="two"))
    offered = []
    monkeypatch.setattr(Cache, "put", lambda self, *entry: offered.append(entry))
    validation = Validation(Renderer(RenderOptions()), ValidateOptions("1.35", ("default",)))
    report = validation.run(
        [Target("kustomization", str(kustomization)), Target("file", str(plain))]
    )
    assert [len(target.resources) for target in report.targets] == [1, 1]
    assert offered == []


def test_each_render_is_let_go_once_checked(tmp_path: Path, monkeypatch):
    # All renders used to stay alive until the last target was checked: 810 MiB at
    # 100,000 resources, and every full collection scanned them again.
    targets = [
        Target("file", str(write(tmp_path / f"f{i}.yaml", CONFIGMAP.format(name=f"c{i}"))))
        for i in range(12)
    ]
    renders: list[weakref.ref] = []
    alive_at_each_check: list[int] = []
    render, check = Renderer.render_plan, Validation.check

    def tracked_render(self, plan):
        result = render(self, plan)
        renders.append(weakref.ref(result))
        return result

    def counted_check(self, result, *rest):
        alive_at_each_check.append(sum(ref() is not None for ref in renders))
        return check(self, result, *rest)

    monkeypatch.setattr(Renderer, "render_plan", tracked_render)
    monkeypatch.setattr(Validation, "check", counted_check)
    validation = Validation(Renderer(RenderOptions(jobs=2)), ValidateOptions("1.35", ("default",)))
    report = validation.run(targets)
    assert [target.target for target in report.targets] == targets
    assert len(alive_at_each_check) == len(targets)
    assert max(alive_at_each_check) <= RENDER_AHEAD * 2 + 1


def test_a_documents_identity_is_read_once_and_kept():
    reads = []

    class Counted(dict):
        def get(self, key, default=None):
            reads.append(key)
            return super().get(key, default)

    doc = Document(obj=Counted(kind="ConfigMap", metadata={"name": "a"}), source="s")
    assert (doc.kind, doc.name, doc.kind, doc.name) == ("ConfigMap", "a", "ConfigMap", "a")
    assert reads.count("kind") == 1 and reads.count("metadata") == 1
    assert doc.__dict__["kind"] == "ConfigMap"  # kept on the instance: no descriptor call


def test_a_report_written_to_a_fifo_or_device_leaves_it_in_place(trainops, tmp_path: Path):
    """`-o /dev/null` once replaced /dev/null with a regular file (an atomic rename over it)."""
    job = write(tmp_path / "job.yaml", PYTORCHJOB.format(replicas_key="replicas"))
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader exists: the writer may open
    try:
        run = trainops("validate", "--no-policies", "--format", "json", "-o", str(fifo), str(job))
        assert run.code == 0, run.err
        assert stat.S_ISFIFO(fifo.stat().st_mode)
        report = json.loads(os.read(reader, 1 << 16))
    finally:
        os.close(reader)
    assert report["summary"]["resources"] == 1
