"""`trainops kubeconform`: kubeconform's flags, messages and output formats, built-in engine.

kubeconform's own acceptance suite runs in test_kubeconform_peer.py; these cover trainops'
schemas, CRD locations and the formats on a mixed folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support import PYTORCHJOB, REPO, write
from trainops.kubeconform.flags import UsageError, parse

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
    assert lines[0].endswith(
        "- at '/spec/pytorchReplicaSpecs/Worker': additional properties 'replica' not allowed"
    )
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
        {
            "path": "/spec/pytorchReplicaSpecs/Worker",
            "msg": "additional properties 'replica' not allowed",
        }
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
    assert tap[0] == "TAP version 13"
    typo = "typo.yaml (kubeflow.org/v1/PyTorchJob/ml/typo): problem validating schema"
    assert any(line.startswith("not ok ") and typo in line for line in tap)
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
    assert f"{bad} - failed validation: error unmarshalling resource: " in run.out
    assert "yaml: line 2: did not find expected node content" in run.out


def test_go_style_flag_parsing():
    options = parse(["--strict", "-output=junit", "-n", "8", "-summary=false", "dir", "-v"])
    assert (options.strict, options.output, options.summary, options.files) == (
        True,
        "junit",
        False,
        ["dir", "-v"],  # Go stops at the first argument that is not a flag
    )
    with pytest.raises(UsageError, match="flag provided but not defined: -frobnicate"):
        parse(["-frobnicate"])
    with pytest.raises(UsageError, match=r'invalid value "1\.25" for flag -kubernetes-version'):
        parse(["-kubernetes-version", "1.25"])
    with pytest.raises(UsageError, match="flag needs an argument: -output"):
        parse(["-output"])


def test_unknown_output_format_and_stdin_from_a_terminal(trainops, manifests: Path):
    run = kubeconform(trainops, "-output", "xml", str(manifests))
    assert run.code == 1 and "'outputFormat' must be" in run.err and run.out == ""


def test_junit_for_every_status_is_valid_against_the_suites_schema(trainops, tmp_path, manifests):
    """kubeconform's suite checks JUnit for one valid file only; here every status."""
    xmllint = shutil.which("xmllint")
    assert xmllint, "xmllint is missing: apt-get install -y libxml2-utils (.ci/run does)"
    write(manifests / "empty.yaml", "# nothing\n")
    write(manifests / "broken.yaml", "a: [\n")
    run = kubeconform(
        trainops,
        "-output",
        "junit",
        "-skip",
        "ConfigMap",
        "-schema-location",
        "default",
        "-schema-location",
        CRD_LOCATION,
        "-strict",
        str(manifests),
    )
    report = write(tmp_path / "report.xml", run.out)
    root = ET.fromstring(run.out)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")
    assert root.get("disabled") == "1"
    xsd = REPO / "tests" / "peer" / "kubeconform" / "fixtures" / "junit.xsd"
    checked = subprocess.run(
        [xmllint, "--noout", "--schema", str(xsd), str(report)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_cache_holds_self_contained_default_schemas(trainops, tmp_path: Path):
    """A real kubeconform run offline with the same -cache finds what trainops stored."""
    cache = tmp_path / "cache"
    cache.mkdir()
    manifest = write(tmp_path / "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    assert kubeconform(trainops, "-cache", str(cache), str(manifest)).code == 0
    url = (
        "https://raw.githubusercontent.com/yannh/kubernetes-json-schema/master/"
        "master-standalone/configmap-v1.json"
    )
    stored = cache / hashlib.sha256(url.encode()).hexdigest()
    schema = json.loads(stored.read_text())
    refs = set(re.findall(r'"\$ref": "([^"]*)"', stored.read_text()))
    assert refs and all(ref.startswith("#/definitions/") for ref in refs)
    assert all(ref.removeprefix("#/definitions/") in schema["definitions"] for ref in refs)
    # The stored schema is what the next run reads: break it and the run notices.
    stored.write_text(json.dumps({"type": "string"}))
    location = url.replace("configmap-v1.json", "{{ .ResourceKind }}-v1.json")  # same URL
    run = kubeconform(trainops, "-cache", str(cache), "-schema-location", location, str(manifest))
    assert run.code == 1 and "got object, want string" in run.out


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
