"""Shared fixtures: run the real `trainops` CLI in a subprocess, with a render cache of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, Run


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "own_cache: the test reads or damages the render cache, so it gets its own"
    )


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One render cache for every test process of the run (xdist's workers share the
    run's temporary root): entries are keyed by content and written atomically, so a
    render one worker made serves the others, whichever finishes first."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    cache = root / "render-cache"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture
def cache_dir(request: pytest.FixtureRequest, tmp_path: Path, shared_cache_dir: Path) -> Path:
    """The render cache the CLI uses: one per test run unless the test is `own_cache`.

    Entries are keyed by everything a render reads (relative paths, file contents, the
    kustomize binary, the toolkit's code), so a workspace copied from the repository
    reuses what an earlier test rendered and a changed overlay never meets a stale
    entry: a cold render of the whole repository costs about 17 CPU-seconds.
    """
    if request.node.get_closest_marker("own_cache"):
        return tmp_path / "cache"
    return shared_cache_dir


@pytest.fixture
def trainops(cache_dir: Path):
    """Call the CLI as a user would: a separate process, real exit codes and streams."""

    def call(*args: str, cwd: Path | None = None, env: dict | None = None, stdin: str = "") -> Run:
        environment = dict(os.environ)
        environment["TRAINOPS_CACHE_DIR"] = str(cache_dir)
        environment.update(env or {})
        done = subprocess.run(
            [sys.executable, "-m", "trainops", *args],
            cwd=cwd or REPO,
            env=environment,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    return call


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    from tests.workspace import make_workspace

    return make_workspace(tmp_path / "repo")


# Files outside tests/trainer that take a minute or more of a worker (measured on the
# 2-core CI machine): handed out right after the trainer's, not in alphabetical order,
# where test_profiles.py came last and ran alone for half a minute.
LONG_FILES = (
    "tests/test_profiles.py",
    "tests/hostile/test_edits.py",
    "tests/test_gitops.py",
    "tests/hostile/test_diff_revisions.py",
    "tests/test_diff.py",
    "tests/test_tenancy.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The trainer's tests first, then the long files, keeping the order within each group.

    They take most of the suite's time: started first, the files of real launches
    spread over the xdist workers and the short files fill the end, where a long
    file started last would leave the other workers idle until it ends. (`make test`
    passes --no-loadscope-reorder, or xdist would hand out files by their number of
    tests, the trainer's few long ones last.)
    """

    def group(item: pytest.Item) -> int:
        if item.nodeid.startswith("tests/trainer/"):
            return 0
        return 1 if item.nodeid.split("::", 1)[0] in LONG_FILES else 2

    items.sort(key=group)
