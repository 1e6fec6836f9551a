"""The checks through `trainops validate`: file and line, rule ids, the skip flags, and a
CEL rule that cannot be compiled."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import write

BAD = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        volumeMounts:
        - name: cache
          mountPath: /cache
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: llama-7b.v2
spec:
  runtimeRef: {name: torch-distributed}
"""

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: quantity(self.size).isLessThan(quantity('1Gi'))
              message: too big
            - rule: self.replicas <= self.max
              message: replicas above max
            properties:
              size: {type: string}
              replicas: {type: integer}
              max: {type: integer, default: 4}
"""


def test_findings_carry_file_line_and_rule(trainops, tmp_path: Path):
    path = write(tmp_path / "bad.yaml", BAD)
    run = trainops("validate", "--no-policies", "--format", "json", str(path))
    assert run.code == 1
    found = {
        (f["rule"], f["source"].rsplit(":", 1)[1], f["path"])
        for f in json.loads(run.out)["findings"]
    }
    assert found == {
        ("api-validation", "16", "spec.template.spec.containers[0].volumeMounts[0].name"),
        ("cel", "19", ""),
    }
    text = trainops("validate", "--no-policies", str(path)).out
    assert 'Not found: "cache"' in text
    assert "metadata.name must match RFC 1035 DNS label format" in text


def test_skip_flags_turn_the_checks_off(trainops, tmp_path: Path):
    path = write(tmp_path / "bad.yaml", BAD)
    no_cel = json.loads(
        trainops("validate", "--no-policies", "--skip-cel", "--format", "json", str(path)).out
    )
    assert {f["rule"] for f in no_cel["findings"]} == {"api-validation"}
    run = trainops("validate", "--no-policies", "--skip-cel", "--skip-api-checks", str(path))
    assert run.code == 0, run.out


def test_a_rule_that_cannot_compile_is_one_warning_naming_crd_and_rule(trainops, tmp_path):
    crd = write(tmp_path / "crd.yaml", CRD)
    schemas = tmp_path / "schemas"
    assert trainops("schemas", "import", "-o", str(schemas), str(crd)).code == 0
    widgets = "".join(
        f"---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w{i}}}\n"
        f"spec: {{size: 2Gi, replicas: {3 + i}}}\n"
        for i in range(3)
    )
    path = write(tmp_path / "widgets.yaml", widgets)
    location = str(schemas) + "/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json"
    run = trainops(
        "validate",
        "--no-policies",
        "--no-strict",
        "--schema-location",
        "default",
        "--schema-location",
        location,
        "--format",
        "json",
        str(path),
    )
    findings = json.loads(run.out)["findings"]
    warnings = [f for f in findings if f["severity"] == "warning"]
    assert len(warnings) == 1
    assert "widgets.example.com" in warnings[0]["message"]
    assert "quantity(self.size)" in warnings[0]["message"]
    # The other rule still runs, with the schema default (max: 4) applied first.
    errors = {f["resource"] for f in findings if f["severity"] == "error"}
    assert errors == {"Widget//w2"}
