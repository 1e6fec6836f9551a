"""`trainops diff` compares what Argo CD would sync, and says why it cannot.

Classes: "with no refs, resources already committed were shown as added" (the HEAD
side came from `git archive`, which honours export-ignore, and the working tree side
took ignored files), "overlays in a git submodule are invisible", "a bad --head is
noticed only after the base has been rendered", "a shallow clone's missing history is
reported as a raw git failure".
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hostile.harness import assert_handled, assert_refused, run_cli, write
from tests.workspace import commit, git

RUN = (
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    "resources:\n- ../../training/pytorchjob\nnamePrefix: {name}-\n"
)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("diff-cache")  # content-keyed: safe to share


def _diff(root: Path, cache: Path, *args: str):
    outcome = run_cli("diff", "--format", "json", *args, cwd=root, cache=cache)
    assert_handled(outcome)
    return outcome


def _changes(outcome) -> list[tuple[str, str]]:
    report = json.loads(outcome.out)
    return [(r["change"], r["resource"]) for r in report["resources"]]


def test_no_change_even_with_ignored_files_and_export_ignore(workspace: Path, shared_cache: Path):
    write(workspace / ".gitattributes", "base/operators/mirror/** export-ignore\n")
    write(workspace / ".gitignore", "overlays/lab-tcp/runs/scratch/\n")
    commit(workspace, "attributes")
    write(workspace / "overlays/lab-tcp/runs/scratch/kustomization.yaml", RUN.format(name="x"))
    outcome = _diff(workspace, shared_cache)
    assert outcome.code == 0 and _changes(outcome) == [], _changes(outcome)[:5]


def test_an_untracked_run_is_a_change(workspace: Path, shared_cache: Path):
    write(workspace / "overlays/lab-tcp/runs/new-run/kustomization.yaml", RUN.format(name="n"))
    changes = _changes(_diff(workspace, shared_cache))
    assert [c for c in changes if c[0] == "added"], changes
    assert all(c[0] == "added" for c in changes)


def test_a_deleted_tracked_run_is_removed(workspace: Path, shared_cache: Path):
    run = next((workspace / "overlays/lab-tcp/runs").iterdir())
    shutil.rmtree(run)
    changes = _changes(_diff(workspace, shared_cache))
    assert changes and all(change == "removed" for change, _ in changes), changes


def _submodule(workspace: Path, tmp_path: Path, name: str) -> Path:
    source = tmp_path / "runs-repo"
    write(source / "kustomization.yaml", RUN.format(name=name))
    git(source.parent, "init", "-q", str(source))
    git(source, "-c", "user.email=a@b", "-c", "user.name=a", "add", "-A")
    git(source, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "run")
    git(
        workspace,
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        str(source),
        f"overlays/lab-tcp/runs/{name}",
    )
    return source


def test_a_run_in_a_submodule_is_seen_as_argo_cd_sees_it(
    workspace: Path, tmp_path: Path, shared_cache: Path
):
    _submodule(workspace, tmp_path, "sub-run")
    commit(workspace, "add a run as a submodule")
    changes = _changes(_diff(workspace, shared_cache, "--base", "HEAD~1", "--head", "HEAD"))
    assert ("added", "PyTorchJob/training/sub-run-train") in changes, changes


def test_a_submodule_not_checked_out_is_one_line_with_the_fix(
    workspace: Path, tmp_path: Path, shared_cache: Path
):
    _submodule(workspace, tmp_path, "sub-run")
    commit(workspace, "add a run as a submodule")
    git(workspace, "submodule", "deinit", "-q", "-f", "overlays/lab-tcp/runs/sub-run")
    outcome = _diff(workspace, shared_cache, "--base", "HEAD~1", "--head", "HEAD")
    assert_refused(outcome, "submodule", "git submodule update --init")


def test_a_bad_head_is_refused_before_the_base_is_rendered(workspace: Path, shared_cache: Path):
    write(workspace / "overlays/lab-tcp/kustomization.yaml", "resources:\n- nowhere\n")
    commit(workspace, "a base that cannot render")
    outcome = _diff(workspace, shared_cache, "--base", "HEAD", "--head", "no-such-branch")
    assert_refused(outcome, "unknown revision 'no-such-branch'")
    assert "kustomization" not in outcome.err


def test_a_shallow_clone_gets_the_deepen_hint(workspace: Path, tmp_path: Path, shared_cache):
    commit(workspace, "second")
    clone = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{workspace}", str(clone)], check=True
    )
    outcome = _diff(clone, shared_cache, "--base", "HEAD~1")
    assert_refused(outcome, "shallow", "git fetch --deepen")


@pytest.mark.parametrize("ref", ["--upload-pack=touch PWNED", "HEAD:../../etc", "@{-99}", "a..b"])
def test_hostile_refs_are_one_line(workspace: Path, shared_cache: Path, ref: str):
    outcome = _diff(workspace, shared_cache, f"--base={ref}")
    assert_refused(outcome)
    assert not (workspace / "PWNED").exists()
