"""Real-world manifests go through validate without crashes, and only with reviewed errors.

tests/corpus holds upstream manifests pinned by commit (each set's SOURCE.md);
../shared/corpus and the installs in ../shared/upstream join them when present.
Every error finding on them must be listed, with the reason it is true, in
tests/corpus-reviewed.yaml, and every listed one must still appear: a
rule change that adds a false error, or loses a true one, fails here. Findings
reviewed as true that the severity contract makes warnings or info (`kept`) must
still be reported.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.support import CORPUS, REPO, SHARED

EXAMPLES = CORPUS / "kubeflow-training-operator-v1.9.0-examples"
MPI_EXAMPLES = CORPUS / "kubeflow-mpi-operator-v0.8.0-examples"
RUNTIMES = CORPUS / "kubeflow-trainer-v2.3.0-runtimes"
REVIEWED = REPO / "tests" / "corpus-reviewed.yaml"
# Installs of the operators the project deploys (kustomizations in ../shared/upstream).
UPSTREAM_INSTALLS = [
    "kubeflow-training-operator-v1.9.0/manifests",
    "kubeflow-mpi-operator-v0.8.0/manifests/overlays/standalone",
    "kubeflow-trainer-v2.3.0/manifests",
    "kubernetes-sigs-jobset-v0.12.0/config/default",
    "multus-cni-v4.3.0/deployments",
]
_LINE = re.compile(r":\d+$")


def _key(finding: dict) -> str:
    source = _LINE.sub("", finding.get("target") or finding["source"])
    source = source.split("tests/corpus/", 1)[-1]
    if SHARED is not None:
        source = source.replace(f"{SHARED}/upstream/", "upstream/")
        source = source.replace(f"{SHARED}/corpus/", "shared/")
    return f"{source} | {finding['resource']} | {finding['path']}"


def _reviewed() -> dict:
    return yaml.safe_load(REVIEWED.read_text())


def _corpus_targets() -> list[str]:
    targets = [str(p) for p in sorted(CORPUS.iterdir()) if p.is_dir()]
    if SHARED is not None:
        ours = {p.name for p in CORPUS.iterdir()}
        extra = [p for p in sorted((SHARED / "corpus").iterdir()) if p.name not in ours]
        targets += [str(p) for p in extra if p.is_dir()]
    return targets


def test_the_corpus_is_pinned_upstream_manifests():
    sets = [p for p in CORPUS.iterdir() if p.is_dir()]
    manifests = [f for s in sets for f in s.rglob("*.y*ml")]
    assert len(manifests) >= 60 and len(sets) >= 10
    for directory in sets:
        source = (directory / "SOURCE.md").read_text()
        assert re.search(r"commit [0-9a-f]{40}|tag v\d", source), directory


@pytest.mark.slow
def test_every_error_on_the_corpus_is_a_reviewed_true_finding(trainops):
    reports = [trainops("validate", "--format", "json", *_corpus_targets())]
    if SHARED is not None:
        installs = [str(SHARED / "upstream" / path) for path in UPSTREAM_INSTALLS]
        # Installs hold controllers' own kinds (certificates, webhooks...) trainops has no
        # schema for; the corpus run above reports missing schemas.
        reports.append(
            trainops("validate", "--ignore-missing-schemas", "--format", "json", *installs)
        )
    reviewed = _reviewed()
    uncovered = set(reviewed["uncovered"])
    found: set[str] = set()
    warned: set[str] = set()
    for run in reports:
        assert run.code == 1, run.err  # findings, not bad input (2) or a crash
        assert "Traceback" not in run.err
        report = json.loads(run.out)
        assert report["summary"]["resources"] > 0
        for finding in report["findings"]:
            assert "could not check" not in finding["message"], finding
            key = f"{finding['rule']} | {_key(finding)}"
            if finding["severity"] in ("warning", "info"):
                warned.add(key)
            if finding["severity"] != "error":
                continue
            missing = finding["message"].removeprefix("no schema for ")
            if missing != finding["message"]:
                assert missing.split(":")[0] in uncovered, finding
                continue
            found.add(key)
    listed, pinned = (
        {f"{group['rule']} | {entry}" for group in reviewed[section] for entry in group["at"]}
        for section in ("findings", "kept")
    )
    if SHARED is None:
        listed = {entry for entry in listed if " | upstream/" not in entry}
        pinned = {entry for entry in pinned if " | upstream/" not in entry}
    assert sorted(found - listed) == [], "error findings nobody reviewed (false errors?)"
    assert sorted(listed - found) == [], "reviewed findings that no longer appear"
    # Findings judged true whose harm the severity contract makes a warning or info.
    assert sorted(pinned - warned) == [], "true findings (kept) that no longer appear"


def test_every_reviewed_group_says_why():
    for group in _reviewed()["findings"] + _reviewed()["kept"]:
        assert group["rule"] and group["at"]
        reason = group["reason"]
        assert len(reason) > 40 and "\n" not in reason, group["rule"]
    assert all(len(why) > 20 for why in _reviewed()["uncovered"].values())


def test_null_fields_are_pruned_not_reported(trainops):
    """NVIDIA's sample ClusterPolicy leaves fields empty (null); the API server prunes them."""
    sample = CORPUS / "nvidia-gpu-operator-v26.3.3-samples/config/samples/v1_clusterpolicy.yaml"
    assert re.search(r":\s*\n", sample.read_text())
    run = trainops("validate", "--format", "json", str(sample))
    assert run.code == 0, run.out
    assert json.loads(run.out)["findings"] == []


def test_mpi_operator_v2beta1_examples_have_no_schema_error(trainops):
    """Two of them leave the Worker's `command:` empty (null): the API server prunes a
    null field of a custom resource before validating it, so that is not an error."""
    run = trainops("validate", "--no-policies", "--format", "json", str(MPI_EXAMPLES))
    assert run.code == 0, run.out
    report = json.loads(run.out)
    assert (report["summary"]["targets"], report["summary"]["resources"]) == (5, 5)
    assert report["findings"] == []
    null_command = (MPI_EXAMPLES / "pi/pi-intel.yaml").read_text()
    assert "            command:\n            args:" in null_command


def test_upstream_trainer_runtimes_have_no_schema_error(trainops):
    run = trainops("validate", "--no-policies", "--format", "json", str(RUNTIMES))
    assert run.code == 0, run.out
    report = json.loads(run.out)
    assert (report["summary"]["targets"], report["summary"]["resources"]) == (3, 12)
    assert report["findings"] == []


def test_corpus_through_the_kubeconform_front_end(trainops):
    schemas = str(REPO / "schemas")
    location = (
        schemas + "/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}{{.StrictSuffix}}.json"
    )
    run = trainops(
        "kubeconform",
        "-strict",
        "-summary",
        "-schema-location",
        "default",
        "-schema-location",
        location,
        str(EXAMPLES),
        env={"TRAINOPS_KUBECONFORM": "builtin"},
    )
    assert run.out.splitlines()[-1] == (
        "Summary: 33 resources found in 31 files - Valid: 32, Invalid: 1, Errors: 0, Skipped: 0"
    )
