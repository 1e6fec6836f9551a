"""A key written twice: a finding at its second line, the file checked with the last value.

kubectl and Argo CD (plain directories) keep the last value; kustomize refuses a resource
with a repeated key. Real files on disk, the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import write
from trainops.kubeyaml.reader import LAST_WINS, RepeatedKey, load_first_document

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  terminationGracePeriodSeconds: 30
  terminationGracePeriodSeconds: soon
  containers:
  - name: main
    image: busybox:1.36
    ports: [{containerPort: 70000}]
"""


def _findings(trainops, *args: str) -> tuple[int, list[dict]]:
    run = trainops("validate", "--no-policies", "--format", "json", *args)
    assert run.code in (0, 1), run.err
    return run.code, json.loads(run.out)["findings"]


def test_repeated_key_is_a_finding_and_the_rest_is_checked(trainops, tmp_path: Path):
    path = write(tmp_path / "pod.yaml", POD)
    code, findings = _findings(trainops, str(path))
    assert code == 1
    repeated = [f for f in findings if f["rule"] == "yaml-duplicate-key"]
    assert len(repeated) == 1
    finding = repeated[0]
    assert (finding["severity"], finding["line"], finding["path"]) == (
        "warning",
        7,
        "spec.terminationGracePeriodSeconds",
    )
    assert "first on line 6" in finding["message"]
    assert "kubectl" in finding["message"] and "kustomize" in finding["message"]
    rules = {f["path"]: f for f in findings if f["rule"] != "yaml-duplicate-key"}
    # The last value is the one checked: 'soon' is refused, 30 would not be.
    assert any(
        p == "spec.terminationGracePeriodSeconds" and "soon" in f["message"]
        for p, f in rules.items()
    ), findings
    # Another error in the same file is still reported.
    assert any("containerPort" in p for p in rules), findings


def test_last_value_used_when_it_is_the_valid_one(trainops, tmp_path: Path):
    text = POD.replace(": 30\n", ": later\n").replace(": soon\n", ": 30\n")
    text = text.replace("    ports: [{containerPort: 70000}]\n", "")
    code, findings = _findings(trainops, str(write(tmp_path / "pod.yaml", text)))
    assert code == 0
    assert [f["rule"] for f in findings] == ["yaml-duplicate-key"]


def test_repeated_key_in_a_kustomize_resource_is_an_error(trainops, tmp_path: Path):
    write(tmp_path / "app" / "kustomization.yaml", "resources:\n- pod.yaml\n")
    path = write(tmp_path / "app" / "pod.yaml", POD)
    code, findings = _findings(trainops, str(path))
    repeated = [f for f in findings if f["rule"] == "yaml-duplicate-key"]
    assert code == 1 and [f["severity"] for f in repeated] == ["error"]
    assert "kustomize refuses to build it" in repeated[0]["message"]


def test_reader_records_repeated_keys_with_their_path():
    repeated: list[RepeatedKey] = []
    doc = load_first_document("a: 1\nb:\n  - {x: 1, x: 2}\na: 3\n", LAST_WINS, repeated)
    assert doc == {"a": 3, "b": [{"x": 2}]}
    assert repeated == [RepeatedKey("x", 2, ("b", 0, "x")), RepeatedKey("a", 3, ("a",))]
    merged: list[RepeatedKey] = []
    load_first_document("base: &b {p: 1}\nm: {<<: *b, p: 2}\n", LAST_WINS, merged)
    assert merged == []  # overriding a merged key is no repetition
