"""Findings on rendered objects name the file and line to fix.

A field mutated in a base file, in a strategic-merge patch, in a JSON6902 patch file
and in an inline JSON6902 patch of an overlay: text, JSON and SARIF each name that
file and line (kustomize's origin and transformer annotations, read back by
render/origin.py). SARIF is validated against the SARIF 2.1.0 schema (pinned copy in
tests/data/sarif). Generated overlay files also name the cluster.yaml key.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from tests.support import REPO, write
from trainops.profile.model import load_profile
from trainops.profile.overlay import generate
from trainops.profile.provenance import generated_by, key_line

SARIF_SCHEMA = REPO / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json"

BASE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: two
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: sidecar
        image: busybox:1.36
      - name: app
        image: nginx:1.27
"""
OVERLAY = """\
resources:
- ../base
namePrefix: prod-
patches:
- path: smp.yaml
- path: ports.yaml
  target:
    kind: Deployment
- target:
    kind: Deployment
    name: app
  patch: |-
    - op: replace
      path: /spec/minReadySeconds
      value: ten
"""
SMP = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  template:
    spec:
      containers:
      - name: app
        imagePullPolicyy: Always
"""
PORTS = """\
- op: add
  path: /spec/template/spec/containers/0/ports
  value:
  - name: web
    containerPort: http
"""


def line_of(text: str, marker: str) -> int:
    [line] = [i for i, content in enumerate(text.splitlines(), 1) if marker in content]
    return line


@pytest.fixture
def patched(tmp_path: Path) -> Path:
    write(tmp_path / "base" / "kustomization.yaml", "resources:\n- deployment.yaml\n")
    write(tmp_path / "base" / "deployment.yaml", BASE)
    write(tmp_path / "overlay" / "kustomization.yaml", OVERLAY)
    write(tmp_path / "overlay" / "smp.yaml", SMP)
    write(tmp_path / "overlay" / "ports.yaml", PORTS)
    return tmp_path


# Where each mutated field is, and the field's path in the rendered object.
EXPECTED = {
    "spec.replicas": ("base/deployment.yaml", BASE, "replicas: two"),
    "spec.template.spec.containers[0].imagePullPolicyy": ("overlay/smp.yaml", SMP, "Policyy"),
    "spec.template.spec.containers[0].ports[0].containerPort": (
        "overlay/ports.yaml",
        PORTS,
        "containerPort: http",
    ),
    "spec.minReadySeconds": ("overlay/kustomization.yaml", OVERLAY, "value: ten"),
}


def expected_places() -> dict[str, tuple[str, int]]:
    return {path: (file, line_of(text, marker)) for path, (file, text, marker) in EXPECTED.items()}


def test_text_names_the_base_patch_and_json6902_lines(trainops, patched: Path):
    run = trainops("validate", "--no-policies", "overlay", cwd=patched)
    assert run.code == 1, run.err
    for path, (file, line) in expected_places().items():
        matching = [ln for ln in run.out.splitlines() if f" {path}: " in ln]
        assert matching and matching[0].startswith(f"{file}:{line}: error: "), (path, run.out)
    # The base lies outside the overlay: the line says which overlay rendered it.
    assert "[schema] (via overlay)" in run.out


def test_json_names_file_line_and_target(trainops, patched: Path):
    run = trainops("validate", "--no-policies", "--format", "json", "overlay", cwd=patched)
    findings = {f["path"]: f for f in json.loads(run.out)["findings"]}
    for path, (file, line) in expected_places().items():
        finding = findings[path]
        assert (finding["file"], finding["line"]) == (file, line), finding
        assert finding["source"] == f"{file}:{line}" and finding["target"] == "overlay"


def test_sarif_is_valid_and_regions_point_at_the_patches(trainops, patched: Path):
    run = trainops("validate", "--no-policies", "--format", "sarif", "overlay", cwd=patched)
    sarif = json.loads(run.out)
    schema = jsonschema_rs.validator_for(json.loads(SARIF_SCHEMA.read_text()))
    assert [e.message for e in schema.iter_errors(sarif)] == []
    [sarif_run] = sarif["runs"]
    places = {}
    for result in sarif_run["results"]:
        [location] = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        path = location["logicalLocations"][0]["fullyQualifiedName"].split(" ", 1)[1]
        places[path] = (physical["artifactLocation"]["uri"], physical["region"]["startLine"])
        assert len(result["partialFingerprints"]["trainopsFinding/v1"]) == 32
    assert {p: places[p] for p in EXPECTED} == expected_places()
    assert sarif_run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == patched.as_uri() + "/"
    [invocation] = sarif_run["invocations"]
    assert invocation["exitCode"] == 1 and "--format sarif" in invocation["commandLine"]
    driver = sarif_run["tool"]["driver"]
    assert driver["informationUri"].startswith("https://")
    schema_rule = next(r for r in driver["rules"] if r["id"] == "schema")
    assert schema_rule["helpUri"].endswith("/docs/policies.md#schema")
    assert "builtin" in schema_rule["properties"]["tags"]


def test_fingerprints_stay_when_lines_move(trainops, patched: Path):
    def fingerprints() -> set[str]:
        run = trainops("validate", "--no-policies", "--format", "sarif", "overlay", cwd=patched)
        results = json.loads(run.out)["runs"][0]["results"]
        return {r["partialFingerprints"]["trainopsFinding/v1"] for r in results}

    before = fingerprints()
    smp = patched / "overlay" / "smp.yaml"
    smp.write_text("# a comment moves every line down\n" + smp.read_text())
    assert fingerprints() == before


@pytest.mark.own_cache
def test_cached_results_keep_their_places_when_the_tree_moves(
    trainops, patched: Path, tmp_path: Path, cache_dir: Path
):
    def renders() -> set[Path]:
        return set(cache_dir.rglob("render/*/*"))

    first = trainops("validate", "--no-policies", "--format", "json", "overlay", cwd=patched)
    cached = renders()
    assert len(cached) == 1
    moved = shutil.copytree(patched, tmp_path / "elsewhere" / "checkout")
    again = trainops("validate", "--no-policies", "--format", "json", "overlay", cwd=moved)
    assert renders() == cached  # the moved tree's render came from the cache
    assert json.loads(again.out) == json.loads(first.out)


def test_build_annotations_never_reach_checks_or_render_output(trainops, patched: Path):
    rendered = trainops("render", "overlay", cwd=patched)
    assert rendered.code == 0
    assert "config.kubernetes.io" not in rendered.out
    assert "annotations:" not in rendered.out  # the object had none: none is left
    as_json = json.loads(trainops("render", "--format", "json", "overlay", cwd=patched).out)
    assert "annotations" not in as_json[0]["object"]["metadata"]


def test_generated_overlay_findings_name_the_cluster_yaml_key(trainops, workspace: Path):
    storage = workspace / "overlays" / "lab-tcp" / "platform" / "storage.yaml"
    text = storage.read_text()
    storage.write_text(text.replace("storageClassName: ", "storageClassName: 42 #", 1))
    run = trainops("validate", "--format", "json", "overlays/lab-tcp", cwd=workspace)
    errors = [f for f in json.loads(run.out)["findings"] if f["severity"] == "error"]
    # A hand edit of a generated file is also drift from the profile, reported apart.
    assert [f["rule"] for f in errors].count("profile-drift") == 1
    [finding] = [f for f in errors if f["rule"] != "profile-drift"]
    assert finding["path"] == "spec.storageClassName"
    assert (finding["file"], finding["line"]) == (
        "overlays/lab-tcp/platform/storage.yaml",
        line_of(text, "storageClassName"),
    )
    profile = workspace / "overlays" / "lab-tcp" / "cluster.yaml"
    assert finding["profile"] == {
        "key": "storageClass",
        "file": "overlays/lab-tcp/cluster.yaml",
        "line": line_of(profile.read_text(), "storageClass:"),
    }
    text_run = trainops("validate", "overlays/lab-tcp", cwd=workspace)
    assert "generated from: overlays/lab-tcp/cluster.yaml:" in text_run.out


@pytest.mark.parametrize(
    ("file", "path", "key"),
    [
        ("platform/storage.yaml", ("spec", "storageClassName"), "storageClass"),
        ("platform/storage.yaml", ("spec", "resources", "requests", "storage"), "checkpointSize"),
        ("platform/network.yaml", ("metadata", "annotations"), "rdmaResource"),
        ("training/cluster/kustomization.yaml", ("images", 0, "newTag"), "image"),
    ],
)
def test_profile_keys_come_from_the_generator(file: str, path: tuple, key: str):
    profile = load_profile(REPO / "overlays" / "prod-roce" / "cluster.yaml")
    assert file in generate(profile)
    assert generated_by(profile, file, 0, list(path)) == key


def test_each_nccl_variable_and_resource_has_its_own_key():
    profile = load_profile(REPO / "overlays" / "prod-roce" / "cluster.yaml")
    files = generate(profile)
    patch = yaml.safe_load(files["training/cluster/torchrun.yaml"])
    container = ["spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0]
    env = patch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    index = {item["name"]: i for i, item in enumerate(env)}
    file = "training/cluster/torchrun.yaml"
    timeout = [*container, "env", index["NCCL_IB_TIMEOUT"], "value"]
    assert generated_by(profile, file, 0, timeout) == "nccl.NCCL_IB_TIMEOUT"
    gid = [*container, "env", index["NCCL_IB_GID_INDEX"]]
    assert generated_by(profile, file, 0, gid) == "gidIndex"
    gpus = [*container, "resources", "limits", "nvidia.com/gpu"]
    assert generated_by(profile, file, 0, gpus) == "gpusPerNode"
    text = (REPO / "overlays" / "prod-roce" / "cluster.yaml").read_text()
    assert key_line(text, "nccl.NCCL_IB_TIMEOUT") == line_of(text, "NCCL_IB_TIMEOUT:")


IMAGES_OVERLAY = """\
resources:
- ../base
- service.yaml
sortOptions:
  order: fifo
images:
- name: nginx
  newTag: latest
"""
SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
"""


def test_an_images_entry_is_the_place_of_the_tag_it_sets(trainops, patched: Path):
    write(patched / "images" / "kustomization.yaml", IMAGES_OVERLAY)
    write(patched / "images" / "service.yaml", SERVICE)
    run = trainops(
        "validate", "--format", "json", "--select", "image-pinned", "images", cwd=patched
    )
    [finding] = json.loads(run.out)["findings"]
    assert finding["path"].endswith(".image")
    assert (finding["file"], finding["line"]) == (
        "images/kustomization.yaml",
        line_of(IMAGES_OVERLAY, "newTag: latest"),
    )


def test_the_wrapper_keeps_the_targets_sort_order(trainops, patched: Path):
    write(patched / "images" / "kustomization.yaml", IMAGES_OVERLAY)
    write(patched / "images" / "service.yaml", SERVICE)
    rendered = trainops("render", "--format", "json", "images", cwd=patched)
    kinds = [record["object"]["kind"] for record in json.loads(rendered.out)]
    assert kinds == ["Deployment", "Service"]  # fifo; kustomize's legacy order is the reverse
