"""Shared fixtures: run the real `trainops` CLI in a subprocess with an isolated cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, Run


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


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
