"""`trainops schemas import`: CRD schemas -> JSON schemas that validate like the API server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from tests.support import MIRROR, REPO, write
from trainops.schema.crd import convert, schema_files

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
        description: A widget.
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            description: Desired state.
            required: [size]
            properties:
              size:
                x-kubernetes-int-or-string: true
                anyOf: [{type: integer}, {type: string}]
                pattern: '^[0-9]+(Gi|Mi)?$'
              owner: {type: string, nullable: true}
              ratio: {type: number, minimum: 0, exclusiveMinimum: true}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                properties:
                  known: {type: string}
              template:
                type: object
                x-kubernetes-embedded-resource: true
                x-kubernetes-preserve-unknown-fields: true
              nested:
                type: object
                properties:
                  leaf: {type: boolean}
  - name: v1beta1
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
"""


def compile_variant(strict: bool):
    import yaml

    crd = yaml.safe_load(CRD)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema_rs.validator_for(convert(schema, strict))


def widget(**spec):
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {}, "spec": spec}


def test_only_served_versions_get_plain_and_strict_files():
    import yaml

    assert sorted(schema_files(yaml.safe_load(CRD))) == [
        "example.com/widget_v1-strict.json",
        "example.com/widget_v1.json",
    ]


def test_descriptions_are_dropped():
    import yaml

    crd = yaml.safe_load(CRD)
    text = json.dumps(schema_files(crd))
    assert "description" not in text and "Desired state" not in text


@pytest.mark.parametrize(
    ("spec", "valid"),
    [
        ({"size": 3}, True),
        ({"size": "10Gi"}, True),
        ({"size": "lots"}, False),  # the pattern applies to strings
        ({"size": [1]}, False),
        ({}, False),  # required
        ({"size": 1, "owner": None}, True),  # nullable
        ({"size": 1, "ratio": 0}, False),  # exclusive minimum
        ({"size": 1, "ratio": 0.5}, True),
        ({"size": 1, "extra": {"known": "a", "anything": [1, 2]}}, True),  # preserved
        ({"size": 1, "template": {"apiVersion": "v1", "kind": "Pod", "x": 1}}, True),
    ],
)
def test_extensions_validate_like_the_api_server(spec, valid):
    assert compile_variant(strict=True).is_valid(widget(**spec)) is valid


def test_root_always_admits_apiversion_kind_and_metadata():
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    validator = jsonschema_rs.validator_for(convert(schema, strict=True))
    assert validator.is_valid({"apiVersion": "a/v1", "kind": "K", "metadata": {}, "spec": {}})
    assert not validator.is_valid({"apiVersion": "a/v1", "kind": "K", "status": {}})


def test_strict_variant_closes_objects_that_list_properties():
    unknown = widget(size=1, nested={"leaf": True, "typo": 1})
    assert compile_variant(strict=False).is_valid(unknown)
    assert not compile_variant(strict=True).is_valid(unknown)
    assert not compile_variant(strict=True).is_valid(widget(size=1, sizes=2))


def test_import_is_idempotent_and_check_detects_drift(trainops, tmp_path: Path):
    crd = write(tmp_path / "crd.yaml", CRD)
    out = tmp_path / "schemas"
    first = trainops("schemas", "import", str(crd), "-o", str(out))
    assert first.code == 0 and "2 written" in first.out
    second = trainops("schemas", "import", str(crd), "-o", str(out))
    assert "0 written, 2 unchanged" in second.out
    assert trainops("schemas", "import", "--check", str(crd), "-o", str(out)).code == 0
    (out / "example.com" / "widget_v1-strict.json").write_text("{}")
    drift = trainops("schemas", "import", "--check", str(crd), "-o", str(out))
    assert drift.code == 1 and "widget_v1-strict.json" in drift.out


def test_committed_training_operator_schemas_match_their_crds(trainops):
    crds = sorted(
        (MIRROR / "kubeflow-training-operator-v1.9.0/manifests/base/crds").glob(
            "kubeflow.org_*.yaml"
        )
    )
    assert len(crds) == 6
    run = trainops("schemas", "import", "--check", *map(str, crds), "-o", str(REPO / "schemas"))
    assert run.code == 0, run.out


def test_committed_schemas_match_the_vendored_crds(trainops):
    """crds/ holds upstream CRDs pinned by commit; `make schemas` imports them."""
    sets = sorted(p for p in (REPO / "crds").iterdir() if p.is_dir())
    assert {p.name.split("-v")[0] for p in sets} >= {
        "volcano",
        "lws",
        "nvidia-dra-driver-gpu",
        "kueue",
        "network-operator",
    }
    for directory in sets:
        assert re.search(r"\(commit [0-9a-f]{40}\)", (directory / "SOURCE.md").read_text())
    crds = sorted(str(p) for directory in sets for p in directory.glob("*.yaml"))
    run = trainops("schemas", "import", "--check", *crds, "-o", str(REPO / "schemas"))
    assert run.code == 0, run.out
    for kind in ("batch.volcano.sh/job_v1alpha1", "leaderworkerset.x-k8s.io/leaderworkerset_v1"):
        assert (REPO / "schemas" / f"{kind}-strict.json").is_file()
    assert (REPO / "schemas" / "resource.nvidia.com/computedomain_v1beta1-strict.json").is_file()


def test_every_required_kind_has_a_committed_schema():
    expected = {
        "kubeflow.org/pytorchjob_v1",
        "kubeflow.org/mpijob_v1",
        "kubeflow.org/tfjob_v1",
        "trainer.kubeflow.org/trainjob_v1alpha1",
        "trainer.kubeflow.org/clustertrainingruntime_v1alpha1",
        "nvidia.com/clusterpolicy_v1",
        "k8s.cni.cncf.io/networkattachmentdefinition_v1",
        "argoproj.io/application_v1alpha1",
        "argoproj.io/applicationset_v1alpha1",
        "argoproj.io/appproject_v1alpha1",
        "kueue.x-k8s.io/localqueue_v1beta1",
        "kueue.x-k8s.io/clusterqueue_v1beta1",
        "scheduling.volcano.sh/podgroup_v1beta1",
        "scheduling.volcano.sh/queue_v1beta1",
        "monitoring.coreos.com/servicemonitor_v1",
        "monitoring.coreos.com/podmonitor_v1",
    }
    for name in expected:
        for suffix in ("", "-strict"):
            path = REPO / "schemas" / f"{name}{suffix}.json"
            assert path.is_file(), path
            jsonschema_rs.validator_for(json.loads(path.read_text()))


def test_cel_rules_are_kept_in_a_sidecar_with_their_path_defaults_and_list_keys():
    crd = yaml.safe_load(
        CRD.replace(
            "            required: [size]\n",
            "            required: [size]\n"
            "            x-kubernetes-validations:\n"
            "            - rule: self.owner != 'root'\n"
            "              message: no root\n"
            "              reason: FieldValueForbidden\n",
        ).replace(
            "                  leaf: {type: boolean}\n",
            "                  leaf: {type: boolean, default: false}\n"
            "                x-kubernetes-validations:\n"
            "                - rule: self.leaf == oldSelf.leaf\n",
        )
    )
    sidecar = schema_files(crd)["example.com/widget_v1.validations.json"]
    assert sidecar["crd"] == "widgets.example.com"
    assert [(r["path"], r["rule"]) for r in sidecar["rules"]] == [
        (["spec"], "self.owner != 'root'"),
        (["spec", "nested"], "self.leaf == oldSelf.leaf"),
    ]
    assert sidecar["rules"][0]["reason"] == "FieldValueForbidden"
    nested = sidecar["defaults"]["children"]["spec"]["children"]["nested"]
    assert nested["children"]["leaf"]["default"] is False


def test_committed_cel_sidecars_hold_every_rule_of_their_crds():
    from trainops.admission.cel import RuleSet

    total = 0
    for path in sorted((REPO / "schemas").glob("*/*.validations.json")):
        rules = RuleSet.load(path)
        assert rules is not None and rules.problems == [], path
        total += rules.count
    assert total >= 80


def test_a_go_pattern_the_engine_cannot_compile_leaves_the_rest_checked(trainops, tmp_path):
    """The AMD GPU Operator's DeviceConfig writes `\\0` in a pattern: valid for the API
    server's Go regexp, not for the ECMA-262 engine here. Only that pattern is left out."""
    crd = yaml.safe_load(CRD)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["socket"] = {"type": "string", "pattern": "^(/[^/\\\\0]+)*(/)?$"}
    spec["properties"]["pattern"] = {"type": "integer"}
    out = tmp_path / "schemas"
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd))
    assert trainops("schemas", "import", str(tmp_path / "crd.yaml"), "-o", str(out)).code == 0
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    version = crd["spec"]["versions"][0]["name"]
    doc = tmp_path / "obj.yaml"
    doc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": f"{group}/{version}",
                "kind": kind,
                "metadata": {"name": "x"},
                "spec": {"size": "2Gi", "socket": "/var/lib/kubelet", "pattern": "seven"},
            }
        )
    )
    run = trainops(
        "validate",
        "--no-policies",
        "--schema-location",
        "default",
        "--schema-location",
        f"{out}/{{{{.Group}}}}/{{{{.ResourceKind}}}}_{{{{.ResourceAPIVersion}}}}{{{{.StrictSuffix}}}}.json",
        str(doc),
    )
    assert run.code == 1, run.err
    assert "spec.pattern" in run.out and "expected integer" in run.out


def test_a_required_property_with_a_default_is_filled_in_not_missing():
    """The API server applies schema defaults while decoding a custom resource, before it
    validates: KubeRay's workerGroupSpecs[].maxReplicas is required and defaulted."""
    schema = {
        "type": "object",
        "required": ["maxReplicas", "groupName"],
        "properties": {
            "maxReplicas": {"type": "integer", "default": 2147483647},
            "groupName": {"type": "string"},
        },
    }
    validator = jsonschema_rs.validator_for(convert(schema, strict=True))
    assert validator.is_valid({"groupName": "g"})
    assert not validator.is_valid({"maxReplicas": 2})  # groupName has no default


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("group: example.com", "group: ../../victim"),
        ("group: example.com", "group: example.com/../../victim"),
        ("kind: Widget", "kind: x/../../victim/config"),
        ("- name: v1\n", "- name: v1/../../../victim\n"),
    ],
)
def test_names_that_would_leave_the_output_directory_are_refused(trainops, tmp_path, old, new):
    """Group, kind and version become the file's path: the API server refuses a CRD whose
    names are not DNS names (apiextensions validation.go), and so does the import."""
    crd = write(tmp_path / "in" / "crd.yaml", CRD.replace(old, new, 1))
    victim = write(tmp_path / "victim" / "config.json", "{}")
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    run = trainops("schemas", "import", str(crd), "-o", str(tmp_path / "in" / "out" / "schemas"))
    assert run.code == 2, run.out
    assert "crd.yaml:1:" in run.err and new.split(": ", 1)[-1].strip()[:20] in run.err
    assert len(run.err.strip().splitlines()) == 1 and "Traceback" not in run.err
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before
    assert victim.read_text() == "{}"
