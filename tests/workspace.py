"""A private copy of the repository in a Git repository of its own, for tests that
generate overlays, edit profiles or compare revisions."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support import REPO

CONTENT = ("base", "overlays", "argocd", "policies", "schemas")
FILES = ("pyproject.toml", "README.md")


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


_template: Path | None = None


def make_workspace(target: Path) -> Path:
    """A copy of the repository's content at `target` (new or empty), committed as "initial".

    The first call of a test process builds it; later ones copy that, Git directory
    included (hashing and compressing the content again cost about 0.4 CPU-s each).
    """
    global _template
    if _template is None:
        scratch = Path(tempfile.mkdtemp(prefix="trainops-workspace-"))
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        _template = _build(scratch / "repo")
    shutil.copytree(_template, target, symlinks=True, dirs_exist_ok=True)
    return target


def _build(target: Path) -> Path:
    for name in CONTENT:
        shutil.copytree(REPO / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILES:
        shutil.copy(REPO / name, target / name)
    git(target, "init", "-q", "-b", "main")
    git(target, "config", "user.email", "ci@example.com")
    git(target, "config", "user.name", "ci")
    commit(target, "initial")
    return target


def commit(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)


def status(root: Path) -> str:
    return git(root, "status", "--porcelain")
