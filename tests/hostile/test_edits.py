"""Edits are serialised and all or nothing: `set`, `new-cluster`, `new-run`.

Classes: "eight concurrent `trainops set`, two keys survive" (no lock), "`set` writes
cluster.yaml before the derived files" (a kill leaves an overlay that no longer
matches its profile and validate passes it), "a read-only directory (traceback)".
Writes fail or the process dies at every write in turn; what is left is either the
old state, or (after a kill) a state validate reports as profile-drift and that
running the same edit again completes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.harness import assert_handled, assert_refused, run_cli, write
from tests.workspace import status
from trainops import fsutil

EDIT = ("set", "lab-tcp", "nccl.NCCL_BUFFSIZE=8388608")  # cluster.yaml + 4 derived files
WRITES = 5


def _trainops(root: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trainops", *args],
        cwd=root,
        env={**os.environ, "TRAINOPS_CACHE_DIR": str(root / ".cache"), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


NCCL = {
    "NCCL_BUFFSIZE": "8388608",
    "NCCL_IB_TIMEOUT": "22",
    "NCCL_IB_RETRY_CNT": "7",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "2",
    "NCCL_MIN_CTAS": "4",
}


def test_eight_concurrent_sets_on_different_keys_all_survive(workspace: Path):
    processes = [_trainops(workspace, "set", "lab-tcp", f"nccl.{k}={v}") for k, v in NCCL.items()]
    results = [(p.wait(), p.stderr.read()) for p in processes]
    assert all(code == 0 for code, _ in results), results
    profile = (workspace / "overlays/lab-tcp/cluster.yaml").read_text()
    for name, value in NCCL.items():
        assert f"{name}: '{value}'" in profile or f"{name}: {value}" in profile, name
    regenerate = run_cli("set", "lab-tcp", cwd=workspace)
    assert "unchanged" in regenerate.out, regenerate  # derived files match the profile


def test_concurrent_new_runs_and_sets_all_land(workspace: Path):
    processes = [
        _trainops(workspace, "new-run", "lab-tcp", f"run-{i}", "--nodes", "2") for i in range(4)
    ] + [
        _trainops(workspace, "set", "prod-roce", f"nccl.{k}={v}") for k, v in list(NCCL.items())[:4]
    ]
    assert all(p.wait() == 0 for p in processes), [p.stderr.read() for p in processes]
    for i in range(4):
        assert (workspace / f"overlays/lab-tcp/runs/run-{i}/kustomization.yaml").is_file()
    profile = (workspace / "overlays/prod-roce/cluster.yaml").read_text()
    assert all(name in profile for name in list(NCCL)[:4])


def _failing_write(monkeypatch, at: int) -> None:
    """The `at`-th write of this edit fails as it would on a read-only directory."""
    real = fsutil.write_atomic
    count = {"n": 0}

    def write_atomic(path: Path, data) -> None:
        count["n"] += 1
        if count["n"] == at:
            raise PermissionError(13, "Permission denied", str(path))
        real(path, data)

    monkeypatch.setattr(fsutil, "write_atomic", write_atomic)
    monkeypatch.setattr("trainops.profile.writer.write_atomic", write_atomic)


@pytest.mark.parametrize("at", range(1, WRITES + 1))
def test_set_failing_at_any_write_changes_nothing(workspace: Path, monkeypatch, at: int):
    _failing_write(monkeypatch, at)
    outcome = run_cli(*EDIT, cwd=workspace)
    assert_refused(outcome, "cannot write", "Permission denied", "nothing was changed")
    assert status(workspace) == ""


@pytest.mark.parametrize("at", [1, 2])
def test_new_run_failing_at_any_write_changes_nothing(workspace: Path, monkeypatch, at: int):
    _failing_write(monkeypatch, at)
    outcome = run_cli("new-run", "lab-tcp", "fresh-run", "--nodes", "2", cwd=workspace)
    assert_handled(outcome)
    if outcome.code == 2:
        assert status(workspace) == ""
    else:  # new-run writes one file: a second failing write is never reached
        assert at == 2 and (workspace / "overlays/lab-tcp/runs/fresh-run").is_dir()


NEW_CLUSTER = (
    "new-cluster", "gpu-west", "--fabric", "tcp", "--nic", "ens4", "--gpus-per-node", "8",
    "--nodes", "2",
    "--storage-class", "nfs", "--image", "ghcr.io/example-org/trainops-trainer:0.1.0",
)  # fmt: skip


def test_new_cluster_whose_projects_write_fails_leaves_nothing(workspace: Path, monkeypatch):
    _failing_write(monkeypatch, 1)  # the overlay is staged by plain writes, projects.yaml after
    outcome = run_cli(*NEW_CLUSTER, cwd=workspace)
    assert_refused(outcome, "cannot write", "projects.yaml")
    assert status(workspace) == "" and not (workspace / "overlays/gpu-west").exists()


def test_new_cluster_whose_rename_fails_leaves_nothing(workspace: Path, monkeypatch):
    def rename(source, target):
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr("trainops.profile.writer.os.rename", rename)
    outcome = run_cli(*NEW_CLUSTER, cwd=workspace)
    assert_refused(outcome, "cannot write")
    assert status(workspace) == ""
    assert not [p for p in (workspace / "overlays").iterdir() if p.name.startswith(".")]


def test_a_directory_where_a_generated_file_belongs(workspace: Path):
    """A real failing write (root ignores file modes): nothing else changes."""
    target = workspace / "overlays/lab-tcp/training/cluster/mpi-forward.yaml"
    target.unlink(missing_ok=True)
    (target / "blocker").mkdir(parents=True)
    before = status(workspace)
    outcome = run_cli(*EDIT, cwd=workspace)
    assert_refused(outcome, "cannot write")
    assert status(workspace) == before


KILLER = """
import os, sys
from trainops import fsutil
from trainops.profile import writer
real, count, limit = fsutil.write_atomic, [0], int(os.environ["KILL_AT"])
def write_atomic(path, data):
    if count[0] == limit:
        os._exit(137)  # killed before this write, like SIGKILL
    count[0] += 1
    real(path, data)
fsutil.write_atomic = writer.write_atomic = write_atomic
from trainops.cli import main
sys.argv = ["trainops", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("kill_at", range(WRITES))
def test_set_killed_at_any_write_is_detected_and_completed_by_running_it_again(
    workspace: Path, kill_at: int
):
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, *EDIT],
        cwd=workspace,
        env={**os.environ, "KILL_AT": str(kill_at), "TRAINOPS_CACHE_DIR": str(workspace / ".c")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == 137, killed.stderr
    profile = (workspace / "overlays/lab-tcp/cluster.yaml").read_text()
    assert "NCCL_BUFFSIZE" not in profile  # the profile is written last
    validate = run_cli("validate", "--no-cache", "overlays/lab-tcp", cwd=workspace)
    assert_handled(validate)
    if kill_at == 0:
        assert status(workspace) == "" and validate.code == 0
    else:
        assert validate.code == 1 and "[profile-drift]" in validate.out, validate.out
    assert run_cli(*EDIT, cwd=workspace).code == 0
    assert "NCCL_BUFFSIZE" in (workspace / "overlays/lab-tcp/cluster.yaml").read_text()
    assert "unchanged" in run_cli("set", "lab-tcp", cwd=workspace).out


def test_new_cluster_killed_before_its_project_is_reported_and_completed(workspace: Path):
    """Killed after the overlay is renamed into place, before argocd/projects.yaml is
    written: Argo CD would refuse every application of the cluster, so validate says so
    and names the edit that completes it."""
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, *NEW_CLUSTER],
        cwd=workspace,
        env={**os.environ, "KILL_AT": "0", "TRAINOPS_CACHE_DIR": str(workspace / ".c")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == 137, killed.stderr
    assert (workspace / "overlays/gpu-west/cluster.yaml").is_file()
    assert "gpu-west" not in (workspace / "argocd/projects.yaml").read_text()
    validate = run_cli("validate", "--no-cache", "overlays/gpu-west", cwd=workspace)
    assert_handled(validate)
    assert validate.code == 1, validate.out
    drift = [line for line in validate.out.splitlines() if "[profile-drift]" in line]
    assert len(drift) == 3, drift  # one per project: platform, add-ons, runs
    assert all("`trainops set gpu-west` writes it" in line for line in drift)
    assert run_cli("set", "gpu-west", cwd=workspace).code == 0
    validate = run_cli("validate", "--no-cache", "overlays/gpu-west", cwd=workspace)
    assert "[profile-drift]" not in validate.out, validate.out


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ("hand-edit", "differs from what cluster.yaml generates"),
        ("deleted", "is missing"),
        ("stale", "no longer calls for it"),
    ],
)
def test_profile_drift_is_reported_and_set_repairs_it(workspace: Path, edit: str, words: str):
    cluster = workspace / "overlays/prod-roce/training/cluster"
    if edit == "hand-edit":
        path = cluster / "torchrun.yaml"
        path.write_text(path.read_text().replace("NCCL_IB_TIMEOUT", "NCCL_IB_TIMEOUT_X"))
    elif edit == "deleted":
        (cluster / "mpijob.yaml").unlink()
    else:
        write(cluster / "old.yaml", "# Generated from cluster.yaml by trainops.\nkind: X\n")
    outcome = run_cli("validate", "--no-cache", "overlays/prod-roce", cwd=workspace)
    if edit == "deleted":  # the overlay no longer renders: kustomize names the file
        assert_refused(outcome, "mpijob.yaml", "does not exist")
    else:
        assert outcome.code == 1 and "[profile-drift]" in outcome.out and words in outcome.out
    assert run_cli("set", "prod-roce", cwd=workspace).code == 0
    again = run_cli("validate", "--no-cache", "overlays/prod-roce", cwd=workspace)
    assert "[profile-drift]" not in again.out


HOSTILE_ASSIGNMENTS = [
    "nccl.NCCL_DEBUG=INFO\nevil: true",
    "nccl.NCCL_DEBUG=INFO\n---\nkind: Secret",
    "nodes=6\nfabric: ib",
    "nodes=!!python/object/apply:os.system ['touch PWNED']",
    "hca=[a, [b, [c]]]",
    "nodes=99999999999999999999999",
    "nccl={a: {b: c}}",
    "nodes=-1",
    "nodes=&a [*a]",
    "image=" + "x" * 100_000,
    "nccl.NCCL_DEBUG=" + "\x00",
    "apiVersion=v2",
    "../../etc/passwd=1",
    "nccl.../x=1",
]


@pytest.mark.parametrize("assignment", HOSTILE_ASSIGNMENTS)
def test_hostile_assignments(workspace: Path, assignment: str):
    outcome = run_cli("set", "lab-tcp", assignment, cwd=workspace)
    assert_handled(outcome)
    assert not (workspace / "PWNED").exists()
    if outcome.code == 0:  # accepted as a plain value: the profile still reads back
        check = run_cli("validate", "--no-cache", "overlays/lab-tcp", cwd=workspace)
        assert_handled(check)
        assert (
            "evil" not in (workspace / "overlays/lab-tcp/cluster.yaml").read_text().split("\n# ")[0]
        )
    else:
        assert status(workspace) == ""


@pytest.mark.parametrize(
    "name",
    ["../escape", "a/b", ".hidden", "UPPER", "x" * 200, "new\nline", "trail\n", "-flag", "a..b"],
)
def test_hostile_cluster_names_write_nothing(workspace: Path, name: str):
    outcome = run_cli("new-cluster", *NEW_CLUSTER[2:], "--", name, cwd=workspace)
    assert_refused(outcome)
    assert status(workspace) == ""
    assert not (workspace.parent / "escape").exists()


@pytest.mark.parametrize("name", ["../../escape", "a/b", "Run", "r" * 100, "run\n"])
def test_hostile_run_names_write_nothing(workspace: Path, name: str):
    outcome = run_cli("new-run", "--nodes", "2", "--", "lab-tcp", name, cwd=workspace)
    assert_refused(outcome, "DNS-1035")
    assert status(workspace) == ""


@pytest.mark.parametrize("name", ["bert-master-0", "bert-worker-12"])
def test_a_run_named_like_another_runs_service_writes_nothing(workspace: Path, name: str):
    outcome = run_cli("new-run", "--nodes", "2", "--", "lab-tcp", name, cwd=workspace)
    assert_refused(outcome, "ends like a PyTorchJob's Service")
    assert status(workspace) == ""


def test_a_profile_that_is_a_link_out_of_the_repository(workspace: Path, tmp_path: Path):
    profile = workspace / "overlays/lab-tcp/cluster.yaml"
    outside = write(tmp_path / "elsewhere.yaml", profile.read_text())
    profile.unlink()
    os.symlink(outside, profile)
    before = outside.read_text()
    outcome = run_cli(*EDIT, cwd=workspace)
    assert_handled(outcome)
    assert outside.read_text() == before  # an edit never writes through a link


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    ("linked", "command"),
    [
        ("overlays/lab-tcp", EDIT),
        ("overlays/lab-tcp", ("new-run", "--nodes", "2", "lab-tcp", "r-linked")),
        ("overlays", ("new-cluster", "linked-cluster", "--from", "overlays/lab-tcp/cluster.yaml")),
    ],
    ids=["set", "new-run", "new-cluster"],
)
def test_edits_never_write_through_a_linked_directory(
    workspace: Path, tmp_path: Path, linked: str, command: tuple[str, ...]
):
    """A directory of the repository replaced by a link to one elsewhere: the edit is
    refused and writes nothing there."""
    directory = workspace / linked
    outside = tmp_path / "elsewhere"
    directory.rename(outside)
    os.symlink(outside, directory)
    before = _tree(outside)
    outcome = run_cli(*command, cwd=workspace)
    assert_refused(outcome, "symbolic link", "outside the repository")
    assert _tree(outside) == before
