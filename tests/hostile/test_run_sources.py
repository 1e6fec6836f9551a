"""What validate reads of a run directory is what Argo CD syncs from it (attack round 14).

F1: a run with both Chart.yaml and a kustomization was validated as a Helm chart while
Argo CD builds it with kustomize (discovery.go Discover: the last source type found in
lexical order wins, and kustomization files sort after Chart.yaml). F2: a run without a
kustomization is an Argo CD directory source, which syncs every *.yaml/yml/json file and
evaluates every *.jsonnet, hidden ones too (repository.go findManifests); validate
skipped hidden files."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainops.errors import InputError
from trainops.render.discover import discover

CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"


def run_directory(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()  # the repository's root
    run = tmp_path / "overlays" / "lab" / "runs" / "r1"
    run.mkdir(parents=True)
    return run


def test_a_kustomization_beside_a_chart_is_rendered_as_argo_cd_builds_it(tmp_path):
    run = run_directory(tmp_path)
    (run / "Chart.yaml").write_text("apiVersion: v2\nname: r1\nversion: 0.1.0\n")
    (run / "templates").mkdir()
    (run / "templates" / "cm.yaml").write_text(CONFIGMAP.format(name="benign"))
    (run / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
    (run / "cm.yaml").write_text(CONFIGMAP.format(name="synced"))
    targets = discover([str(tmp_path / "overlays")])
    assert [(t.kind, Path(t.path).name) for t in targets] == [("kustomization", "r1")]


def test_a_chart_alone_is_still_a_chart(tmp_path):
    run = run_directory(tmp_path)
    (run / "Chart.yaml").write_text("apiVersion: v2\nname: r1\nversion: 0.1.0\n")
    targets = discover([str(tmp_path / "overlays")])
    assert [(t.kind, Path(t.path).name) for t in targets] == [("helm", "r1")]


def test_a_runs_hidden_manifest_files_are_validated(tmp_path):
    run = run_directory(tmp_path)
    (run / "job.yaml").write_text(CONFIGMAP.format(name="shown"))
    (run / ".ckpt.yaml").write_text(CONFIGMAP.format(name="hidden"))
    (run / ".argocd-source.yaml").write_text("kustomize: {}\n")  # its own rule refuses it
    names = sorted(Path(t.path).name for t in discover([str(tmp_path / "overlays")]))
    assert names == [".ckpt.yaml", "job.yaml"]


def test_a_runs_hidden_jsonnet_is_refused_like_any_other(tmp_path):
    run = run_directory(tmp_path)
    (run / "job.yaml").write_text(CONFIGMAP.format(name="shown"))
    (run / ".x.jsonnet").write_text("{}\n")
    with pytest.raises(InputError, match="Argo CD evaluates this Jsonnet file"):
        discover([str(tmp_path / "overlays")])


def test_hidden_files_outside_runs_stay_skipped(tmp_path):
    (tmp_path / ".git").mkdir()
    plain = tmp_path / "manifests"
    plain.mkdir()
    (plain / "a.yaml").write_text(CONFIGMAP.format(name="a"))
    (plain / ".editor-backup.yaml").write_text(CONFIGMAP.format(name="b"))
    names = [Path(t.path).name for t in discover([str(plain)])]
    assert names == ["a.yaml"]
