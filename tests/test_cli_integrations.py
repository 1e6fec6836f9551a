"""What a CI or an editor needs from the CLI: GitHub annotations, rule selection,
colour, shell completion, Helm charts, reports for unreadable input, validating the
current overlay, the targets a change affects, and flags named as flags."""

from __future__ import annotations

import io
import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support import PYTORCHJOB, REPO, write
from trainops.output import progress
from trainops.render.discover import discover

CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"


def typo_job(tmp_path: Path) -> Path:
    return write(tmp_path / "job.yaml", PYTORCHJOB.format(replicas_key="replica"))


def test_github_format_is_one_workflow_command_per_finding(trainops, tmp_path: Path):
    job = typo_job(tmp_path)
    run = trainops("validate", "--format", "github", str(job))
    lines = run.out.splitlines()
    assert run.code == 1
    error = next(line for line in lines if line.startswith("::error "))
    properties, _, message = error.removeprefix("::error ").partition("::")
    # ':' and ',' are escaped in properties, newlines in the message.
    assert properties.startswith(f"file={job},line=9,title=trainops schema")
    assert "\n" not in message and "%0AFix: Did you mean" in message
    warning = next(line for line in lines if line.startswith("::warning "))
    assert "title=trainops resources-set" in warning
    assert lines[-1].startswith("1 target, 1 resource: 1 error")


def test_select_and_ignore_keep_and_drop_rules(trainops, tmp_path: Path):
    job = typo_job(tmp_path)

    def rules(*flags: str) -> tuple[int, set[str]]:
        run = trainops("validate", "--format", "json", *flags, str(job))
        return run.code, {f["rule"] for f in json.loads(run.out)["findings"]}

    code, everything = rules()
    assert code == 1 and {"schema", "resources-set"} <= everything
    assert rules("--ignore", "schema") == (0, everything - {"schema"})
    assert rules("--select", "schema,resources-set") == (1, {"schema", "resources-set"})
    assert rules("--select", "schema", "--ignore", "schema") == (0, set())


def test_unknown_rule_ids_and_look_alike_flags_get_a_suggestion(trainops, tmp_path: Path):
    job = typo_job(tmp_path)
    run = trainops("validate", "--ignore", "dev-shm-mising", str(job))
    assert run.code == 2 and run.out == ""
    assert run.err.strip() == (
        "trainops: error: unknown rule id 'dev-shm-mising': did you mean 'dev-shm-missing'? "
        "(trainops policies list)"
    )
    assert "Did you mean '--ignore'?" in trainops("validate", "--skip-rule", "x", str(job)).err
    assert "Did you mean '--select'?" in trainops("validate", "--enable-rule", "x", str(job)).err


def test_colour_follows_the_flag_and_no_color(trainops, tmp_path: Path):
    job = typo_job(tmp_path)
    red = "\x1b[31m"
    assert red in trainops("validate", "--color", "always", str(job)).out
    assert red in trainops("validate", "--color", "always", str(job), env={"NO_COLOR": "1"}).out
    assert red not in trainops("validate", "--color", "never", str(job)).out
    # auto: a pipe is no terminal, and NO_COLOR would turn it off anyway.
    assert red not in trainops("validate", str(job), env={"NO_COLOR": "1"}).out
    assert red not in trainops("validate", str(job)).out


def complete(trainops, *words: str, cwd: Path = REPO) -> list[str]:
    env = {
        "_TRAINOPS_COMPLETE": "bash_complete",
        "COMP_WORDS": " ".join(["trainops", *words]),
        "COMP_CWORD": str(len(words)),
    }
    run = trainops(env=env, cwd=cwd)
    return [line.split(",", 1)[1] for line in run.out.splitlines()]


def test_shell_completion_offers_rule_ids_and_clusters(trainops):
    assert complete(trainops, "validate", "--ignore", "dev-shm-m") == ["dev-shm-missing"]
    assert complete(trainops, "validate", "--select", "schema,dev-shm-m") == [
        "schema,dev-shm-missing"
    ]
    assert "nccl-debug-info" in complete(trainops, "policies", "explain", "nccl-")
    clusters = {p.parent.name for p in (REPO / "overlays").glob("*/cluster.yaml")}
    assert set(complete(trainops, "set", "")) == clusters
    assert complete(trainops, "new-run", "lab-") == ["lab-tcp"]
    assert "validate" in complete(trainops, "val")


def test_the_completion_script_is_the_documented_one(trainops):
    run = trainops(env={"_TRAINOPS_COMPLETE": "bash_source"})
    assert "_TRAINOPS_COMPLETE=bash_complete" in run.out
    readme = (REPO / "README.md").read_text()
    assert 'eval "$(_TRAINOPS_COMPLETE=bash_source trainops)"' in readme


def chart(tmp_path: Path) -> Path:
    directory = tmp_path / "mychart"
    write(directory / "Chart.yaml", "apiVersion: v2\nname: mychart\nversion: 0.1.0\n")
    write(directory / "values.yaml", "replicas: 2\n")
    write(directory / "templates" / "cm.yaml", CONFIGMAP.format(name="{{ .Release.Name }}"))
    return directory


def test_a_helm_chart_without_helm_is_one_line_saying_how_to_pipe_it(trainops, tmp_path):
    directory = chart(tmp_path)
    env = {"PATH": str(Path(os.__file__).parent)}  # kubectl and helm are not on it
    run = trainops("validate", "mychart", cwd=tmp_path, env=env)
    assert run.code == 2 and run.out == ""
    assert run.err.strip() == (
        "trainops: error: mychart: is a Helm chart and helm is not on PATH: install helm, "
        "or render it and pipe it in: helm template mychart mychart | trainops validate -"
    )
    assert directory.is_dir()


FAKE_HELM = """#!/bin/sh
[ "$1" = template ] || exit 3
cat <<EOF
---
# Source: mychart/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: release-$2
data:
  k: v
EOF
"""


def test_a_helm_chart_is_rendered_with_helm_template_fake_helm_on_path(trainops, tmp_path):
    """helm cannot be installed here: a stand-in `helm` prints what `helm template` would."""
    chart(tmp_path)
    bin_dir = tmp_path / "bin"
    fake = write(bin_dir / "helm", FAKE_HELM)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    run = trainops("validate", "--format", "json", "mychart", cwd=tmp_path, env=env)
    assert run.code == 0, run.err
    report = json.loads(run.out)
    assert report["summary"]["targets"] == 1 and report["summary"]["resources"] == 1
    rendered = trainops("render", "--format", "json", "mychart", cwd=tmp_path, env=env)
    [record] = json.loads(rendered.out)
    assert record["object"]["metadata"]["name"] == "release-mychart"


def test_junit_is_written_when_the_input_cannot_be_read(trainops, tmp_path: Path):
    bad = write(tmp_path / "bad.yaml", "kind: [unclosed\n")
    report = tmp_path / "report.xml"
    run = trainops("validate", "--format", "junit", "-o", str(report), str(bad))
    assert run.code == 2 and run.err.startswith(f"trainops: error: {bad}:1: ")
    root = ET.parse(report).getroot()
    assert (root.get("tests"), root.get("errors")) == ("1", "1")
    [suite] = root
    assert suite.get("name") == str(bad)
    [case] = suite
    [error] = case
    assert error.tag == "error" and error.text == run.err.strip().removeprefix("trainops: error: ")


def test_validate_without_paths_inside_an_overlay_checks_that_overlay(trainops):
    runs = REPO / "overlays" / "lab-tcp" / "runs"
    run = trainops("validate", "--format", "json", cwd=runs)
    report = json.loads(run.out)
    expected = len([p for p in runs.iterdir() if (p / "kustomization.yaml").is_file()])
    assert report["summary"]["targets"] == expected, run.err


def test_changed_files_select_the_targets_that_read_them(trainops, workspace: Path):
    def targets(*changed: str) -> int:
        run = trainops("validate", "--changed", "--format", "json", *changed, cwd=workspace)
        assert run.code == 0, run.err
        return json.loads(run.out)["summary"]["targets"]

    assert targets("overlays/lab-tcp/platform/storage.yaml") == 1
    assert targets("docs/nothing.md") == 0
    # The profile decides the checks of every target of its cluster.
    cluster = discover([str(workspace / "overlays" / "lab-tcp")])
    assert len(cluster) > 1
    assert targets("overlays/lab-tcp/cluster.yaml") == len(cluster)


def test_new_cluster_names_every_missing_flag_at_once(trainops, workspace: Path):
    run = trainops("new-cluster", "gpu-east", "--fabric", "roce", cwd=workspace)
    assert run.code == 2
    assert run.err.strip() == (
        "trainops: error: missing required flags: --gpus-per-node, --nodes, --image, "
        "--storage-class, --rdma-resource (or give --from FILE)"
    )
    tcp = trainops("new-cluster", "gpu-east", "--fabric", "tcp", "--nodes", "2", cwd=workspace)
    assert "--gpus-per-node, --image, --storage-class, --nic (or" in tcp.err


def test_progress_line_is_rewritten_in_place_then_erased(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    stream = io.StringIO()
    line = progress.ProgressLine(stream=stream)
    line.start(3)
    line.advance(1)
    line.advance(2)
    line.close()
    assert stream.getvalue() == (
        "\r\x1b[Kvalidating 1/3 targets\r\x1b[Kvalidating 3/3 targets\r\x1b[K"
    )
