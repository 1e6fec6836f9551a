"""`trainops kubeconform`: kubeconform's flags and output formats on the built-in engine."""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support import PYTORCHJOB, REPO, write
from trainops.kubeconform import UsageError, parse_args

CRD_LOCATION = str(
    REPO
    / "schemas"
    / "{{.Group}}"
    / "{{.ResourceKind}}_{{.ResourceAPIVersion}}{{.StrictSuffix}}.json"
)
BUILTIN = {"TRAINOPS_KUBECONFORM": "builtin"}


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    write(tmp_path / "m" / "good.yaml", PYTORCHJOB.format(replicas_key="replicas"))
    write(tmp_path / "m" / "typo.yaml", PYTORCHJOB.format(replicas_key="replica"))
    write(
        tmp_path / "m" / "sub" / "cm.json",
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}',
    )
    write(tmp_path / "m" / "notes.txt", "not a manifest")
    return tmp_path / "m"


def kubeconform(trainops, *args):
    return trainops("kubeconform", *args, env=BUILTIN)


def test_text_output_and_summary(trainops, manifests: Path):
    run = kubeconform(
        trainops,
        "-strict",
        "-summary",
        "-schema-location",
        "default",
        "-schema-location",
        CRD_LOCATION,
        str(manifests),
    )
    assert run.code == 1
    lines = run.out.splitlines()
    assert lines[0].startswith(f"{manifests}/typo.yaml - PyTorchJob typo is invalid: ")
    assert "'/spec/pytorchReplicaSpecs/Worker/replica'" in lines[0]
    assert lines[-1] == (
        "Summary: 3 resources found in 3 files - Valid: 2, Invalid: 1, Errors: 0, Skipped: 0"
    )


def test_strictness_follows_the_flag(trainops, manifests: Path):
    typo = str(manifests / "typo.yaml")
    assert kubeconform(trainops, "-schema-location", CRD_LOCATION, typo).code == 0
    assert kubeconform(trainops, "-strict", "-schema-location", CRD_LOCATION, typo).code == 1


def test_json_output(trainops, manifests: Path):
    run = kubeconform(
        trainops,
        "-strict",
        "-summary",
        "-output=json",
        "-schema-location",
        "default",
        "-schema-location",
        CRD_LOCATION,
        str(manifests),
    )
    payload = json.loads(run.out)
    assert payload["summary"] == {"valid": 2, "invalid": 1, "errors": 0, "skipped": 0}
    [invalid] = payload["resources"]
    assert invalid["status"] == "statusInvalid" and invalid["kind"] == "PyTorchJob"
    assert invalid["validationErrors"] == [
        {"path": "/spec/pytorchReplicaSpecs/Worker/replica", "msg": 'unknown field "replica"'}
    ]


def test_missing_schemas_are_errors_or_skips(trainops, manifests: Path):
    run = kubeconform(trainops, "--summary", str(manifests))  # no CRD location: PyTorchJob unknown
    assert run.code == 1
    assert "PyTorchJob typo failed validation: could not find schema for PyTorchJob" in run.out
    skipped = kubeconform(trainops, "-ignore-missing-schemas", "-summary", str(manifests))
    assert skipped.code == 0 and "Valid: 1, Invalid: 0, Errors: 0, Skipped: 2" in skipped.out


def test_tap_and_junit(trainops, manifests: Path):
    common = ["-strict", "-schema-location", "default", "-schema-location", CRD_LOCATION]
    tap = kubeconform(trainops, *common, "-output", "tap", str(manifests)).out.splitlines()
    assert tap[-1] == "1..3"
    assert any(line.startswith("not ok ") and "typo.yaml (PyTorchJob typo)" in line for line in tap)
    junit = kubeconform(trainops, *common, "-output", "junit", str(manifests))
    root = ET.fromstring(junit.out)
    assert root.get("name") == "kubeconform" and root.get("failures") == "1"
    assert len(root.findall("testsuite")) == 3
    case = root.find(".//testcase[@name='ml/typo']")
    assert case is not None and case.get("classname") == "PyTorchJob@kubeflow.org/v1"


def test_skip_reject_ignore_pattern_and_stdin(trainops, manifests: Path):
    skipped = kubeconform(
        trainops,
        "-summary",
        "-skip",
        "PyTorchJob,v1/ConfigMap",
        "-ignore-filename-pattern",
        "typo",
        str(manifests),
    )
    assert skipped.out == (
        "Summary: 2 resources found in 2 files - Valid: 0, Invalid: 0, Errors: 0, Skipped: 2\n"
    )
    rejected = kubeconform(trainops, "-reject", "ConfigMap", str(manifests / "sub"))
    assert rejected.code == 1 and "prohibited resource kind ConfigMap" in rejected.out
    stdin = trainops(
        "kubeconform",
        "-summary",
        env=BUILTIN,
        stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    )
    assert stdin.out.strip().endswith(
        "found parsing stdin - Valid: 1, Invalid: 0, Errors: 0, Skipped: 0"
    )


def test_unparseable_file_is_an_error_result_not_a_crash(trainops, tmp_path: Path):
    bad = write(tmp_path / "bad.yaml", "a: [\n")
    run = kubeconform(trainops, "-summary", str(bad))
    assert run.code == 1 and "Traceback" not in run.err
    assert f"{bad} - failed validation: line 1: invalid YAML" in run.out


def test_go_style_flag_parsing():
    options = parse_args(["--strict", "-output=junit", "-n", "8", "-summary=false", "dir"])
    assert (options.strict, options.output, options.summary, options.paths) == (
        True,
        "junit",
        False,
        ["dir"],
    )
    with pytest.raises(UsageError, match="flag provided but not defined: -frobnicate"):
        parse_args(["-frobnicate"])
    with pytest.raises(UsageError, match="-output must be one of"):
        parse_args(["-output", "xml"])


def test_real_kubeconform_stub_on_path_receives_the_arguments(trainops, tmp_path: Path):
    """kubeconform is not installed here: a stand-in script records how it is called."""
    bin_dir = tmp_path / "bin"
    record = tmp_path / "args.txt"
    stub = write(bin_dir / "kubeconform", f'#!/bin/sh\necho "$@" > {record}\nexit 3\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    run = trainops("kubeconform", "-strict", "-output", "json", "x.yaml", env=env)
    assert run.code == 3
    assert record.read_text().strip() == "-strict -output json x.yaml"
