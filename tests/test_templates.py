"""Unrendered templates: one `template-placeholders` warning, not one false error per field.

Real files on disk, the real CLI. `--env` renders envsubst references from the
environment as GNU envsubst does, then the file is checked like any other.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import write
from trainops.render.templates import envsubst

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: $NODES
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: web
        image: ${{IMAGE}}
        {extra}
"""
# A real error the rendered file still has: a container port above 65535.
BAD_PORT = "ports: [{containerPort: 70000}]"


def _validate(trainops, *args: str, env: dict | None = None) -> tuple[int, list[dict]]:
    run = trainops("validate", "--no-policies", "--format", "json", *args, env=env)
    assert run.code in (0, 1), run.err
    return run.code, json.loads(run.out)["findings"]


def test_envsubst_template_is_one_warning_naming_its_placeholders(trainops, tmp_path: Path):
    path = write(tmp_path / "deploy.yaml", DEPLOYMENT.format(extra=BAD_PORT))
    code, findings = _validate(trainops, str(path))
    assert code == 0
    assert [(f["rule"], f["severity"]) for f in findings] == [("template-placeholders", "warning")]
    message = findings[0]["message"]
    assert "2 placeholders ($NODES, ${IMAGE})" in message
    assert "not checked" in message
    assert findings[0]["line"] == 6  # replicas: $NODES


def test_with_env_the_rendered_file_is_checked(trainops, tmp_path: Path):
    path = write(tmp_path / "deploy.yaml", DEPLOYMENT.format(extra=BAD_PORT))
    env = {"NODES": "2", "IMAGE": "busybox:1.36"}
    code, findings = _validate(trainops, "--env", str(path), env=env)
    assert code == 1
    assert {f["rule"] for f in findings} != {"template-placeholders"}
    assert all(f["rule"] != "template-placeholders" for f in findings)
    paths = [f["path"] for f in findings]
    assert any("containerPort" in p for p in paths), findings
    assert not any("replicas" in p or p.endswith("image") for p in paths), findings
    # Unset, a reference becomes empty, as envsubst makes it: replicas is then null.
    code, findings = _validate(trainops, "--env", str(path), env={"IMAGE": "busybox:1.36"})
    assert all(f["rule"] != "template-placeholders" for f in findings)


def test_env_leaves_shell_defaults_which_stay_placeholders(trainops, tmp_path: Path):
    path = write(
        tmp_path / "deploy.yaml", DEPLOYMENT.format(extra="").replace("$NODES", "${NODES:-2}")
    )
    code, findings = _validate(trainops, "--env", str(path), env={"IMAGE": "busybox:1.36"})
    assert code == 0
    assert [f["rule"] for f in findings] == ["template-placeholders"]
    assert "${NODES:-2}" in findings[0]["message"]


def test_helm_action_that_breaks_yaml_is_the_warning_not_bad_input(trainops, tmp_path: Path):
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.x }}-cfg\ndata:\n  a: b\n"
    )
    path = write(tmp_path / "cm.yaml", text)
    code, findings = _validate(trainops, str(path))
    assert code == 0
    assert [(f["rule"], f["severity"], f["line"]) for f in findings] == [
        ("template-placeholders", "warning", 4)
    ]
    assert "{{ .Values.x }}" in findings[0]["message"]
    # Still a warning with --env: envsubst leaves Helm's actions alone.
    code, findings = _validate(trainops, "--env", str(path))
    assert code == 0 and [f["rule"] for f in findings] == ["template-placeholders"]


def test_yaml_error_before_the_first_action_is_still_bad_input(trainops, tmp_path: Path):
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [a\ndata:\n  a: '{{ .x }}'\n"
    path = write(tmp_path / "cm.yaml", text)
    run = trainops("validate", "--no-policies", str(path))
    assert run.code == 2 and "invalid YAML" in run.err


def test_shell_references_are_not_placeholders(trainops, tmp_path: Path):
    text = DEPLOYMENT.format(extra='command: ["sh", "-c", "echo $HOME ${USER}"]')
    text = text.replace("$NODES", "2").replace("${IMAGE}", "busybox:1.36")
    text += "        args: [$(POD_IP)]\n        env: [{name: A, value: $HOME}]\n"
    text += "        " + BAD_PORT + "\n"
    path = write(tmp_path / "deploy.yaml", text)
    code, findings = _validate(trainops, str(path))
    assert code == 1  # checked normally: the real error is reported
    assert all(f["rule"] != "template-placeholders" for f in findings)
    assert any("containerPort" in f["path"] for f in findings), findings


def test_configmap_scripts_are_not_placeholders(trainops, tmp_path: Path):
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: scripts\n"
        "data:\n  run.sh: |\n    echo ${HOME} $PATH {{ not-helm }}\n"
    )
    code, findings = _validate(trainops, str(write(tmp_path / "cm.yaml", text)))
    assert code == 0 and findings == []


@pytest.mark.parametrize(
    "text",
    [
        "a: $NOPE ${NOPE} ${HOME:-x} $(X) $$HOME ${1} $1 ${A-b} $_x ${\n",
        "image: ${REGISTRY}/app:${TAG}\nname: $HOME-$USER_x\n",
    ],
)
def test_envsubst_matches_gnu_envsubst(text):
    environ = {"HOME": "/home/u", "REGISTRY": "r.example", "TAG": "1"}
    expected = "a:   ${HOME:-x} $(X) $/home/u ${1} $1 ${A-b}  ${\n"
    if text.startswith("image"):
        expected = "image: r.example/app:1\nname: /home/u-\n"
    assert envsubst(text, environ) == expected
    gnu = shutil.which("envsubst")
    if gnu is not None:  # the real tool agrees
        done = subprocess.run(
            [gnu], input=text, env=environ, capture_output=True, text=True, check=True
        )
        assert done.stdout == expected
