"""Real-world manifests (Kubeflow's own examples) go through validate without crashes.

Every schema error they get is listed here with the reason it is genuine, so a
change that adds a false positive or loses a real error fails this test.
"""

from __future__ import annotations

import json

from tests.support import CORPUS

EXAMPLES = CORPUS / "kubeflow-training-operator-v1.9.0-examples"

# (file relative to the examples, path of the finding): why the API server rejects it.
GENUINE_ERRORS = {
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Master.template.apiVersion",
    ): "a pod template has no apiVersion (left over from the v1alpha1 API)",
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Master.template.kind",
    ): "a pod template has no kind",
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Worker.template.apiVersion",
    ): "a pod template has no apiVersion",
    (
        "xgboost/smoke-dist/xgboostjob_v1alpha1_rabit_test.yaml",
        "spec.xgbReplicaSpecs.Worker.template.kind",
    ): "a pod template has no kind",
}


def test_corpus_validates_without_crashes_and_only_genuine_errors(trainops):
    run = trainops("validate", "--format", "json", str(EXAMPLES))
    assert run.code == 1, run.err
    assert "Traceback" not in run.err
    report = json.loads(run.out)
    assert report["summary"]["targets"] == 31
    assert report["summary"]["resources"] == 33
    found = {
        (f["source"].split(":")[0].split("examples/", 1)[1], f["path"]) for f in report["findings"]
    }
    assert found == set(GENUINE_ERRORS)
    assert all(f["rule"] == "schema" and f["severity"] == "error" for f in report["findings"])


def test_corpus_through_the_kubeconform_front_end(trainops):
    schemas = str(CORPUS.parents[1] / "schemas")
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
