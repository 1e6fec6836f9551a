"""Git revisions as directories: `git archive` into a temporary tree, never a checkout.

The working tree is used as it is; any other revision is extracted from Git, which
leaves the repository, its index and its worktree list untouched.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from trainops.errors import InputError

WORKTREE = "working tree"


def _git(root: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise InputError("git is not installed; trainops diff compares Git revisions") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise InputError(f"git {' '.join(args)}: {message[-1] if message else 'failed'}")
    return done.stdout


def describe(root: Path, ref: str | None) -> str:
    """A ref with its short commit, for headings: `HEAD~1 (3f2a9c1)`."""
    if ref is None:
        return WORKTREE
    commit = _git(root, "rev-parse", "--short", "--verify", f"{ref}^{{commit}}").decode().strip()
    return f"{ref} ({commit})"


@contextlib.contextmanager
def checkout(root: Path, ref: str | None) -> Iterator[Path]:
    """The project root as it is at `ref` (None: the working tree itself)."""
    if ref is None:
        yield root
        return
    _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    prefix = _git(root, "rev-parse", "--show-prefix").decode().strip()
    archive = _git(root, "archive", "--format=tar", ref, "--", prefix or ".")
    with tempfile.TemporaryDirectory(prefix="trainops-diff-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / prefix
