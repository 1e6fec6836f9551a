"""Git revisions as directories holding exactly what Argo CD would sync from them.

A revision is read object by object (`git ls-tree` + `git cat-file --batch`), never
checked out: the repository, its index and its worktree list stay untouched, and
`export-ignore` attributes (which `git archive` honours) cannot hide files. Submodules
are included at the commit the revision records, as Argo CD clones them. The working
tree is what `git add -A` would commit: tracked and untracked files, never ignored ones,
with each submodule's working tree.

Both revisions are resolved before anything is read, so a typo fails at once; in a
shallow clone an unknown revision gets the `git fetch --deepen` hint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainops.errors import InputError

WORKTREE = "working tree"
_SUBMODULE, _SYMLINK, _EXECUTABLE = "160000", "120000", "100755"


def _git(root: Path, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], input=stdin, capture_output=True, check=False
        )
    except FileNotFoundError:
        raise InputError("git is not installed; trainops diff compares Git revisions") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise InputError(f"git {args[0]}: {message[-1] if message else 'failed'}")
    return done.stdout


@dataclass(frozen=True)
class Revision:
    """A ref resolved to its commit (None: the working tree)."""

    ref: str | None
    commit: str | None

    def describe(self) -> str:
        """For headings: `HEAD~1 (3f2a9c1)`, or `working tree`."""
        return WORKTREE if self.commit is None else f"{self.ref} ({self.commit[:7]})"


def resolve(root: Path, ref: str | None) -> Revision:
    """The commit `ref` names; a one-line error (with a hint in a shallow clone) if none."""
    if ref is None:
        return Revision(None, None)
    if ref.startswith("-"):
        raise InputError(f"{ref!r} is not a revision")
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if done.returncode == 0:
        return Revision(ref, done.stdout.decode().strip())
    shallow = _git(root, "rev-parse", "--is-shallow-repository").decode().strip() == "true"
    if shallow:
        raise InputError(
            f"unknown revision {ref!r}: this clone is shallow, its history is cut short; "
            "run `git fetch --deepen=50` (or `git fetch --unshallow`) and try again"
        )
    raise InputError(f"unknown revision {ref!r} (a branch, tag or commit of this repository)")


@contextlib.contextmanager
def checkout(root: Path, revision: Revision) -> Iterator[Path]:
    """The project root as it is at `revision`, in a temporary directory."""
    top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip())
    prefix = _git(root, "rev-parse", "--show-prefix").decode().strip()
    with tempfile.TemporaryDirectory(prefix="trainops-diff-") as tmp:
        tree = Path(tmp)
        if revision.commit is None:
            _copy_worktree(top, tree, prefix)
        else:
            _write_commit(top, revision.commit, tree, prefix)
        yield tree / prefix


def _entries(listing: bytes) -> Iterator[tuple[str, str, str, str]]:
    """(mode, type, object, path) from `git ls-tree -r -z` or `ls-files -s -z` output."""
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        fields = meta.decode().split()
        if len(fields) == 3 and fields[1] in ("blob", "commit", "tree"):
            mode, kind, sha = fields
        else:  # ls-files -s: mode object stage
            mode, sha = fields[0], fields[1]
            kind = "commit" if mode == _SUBMODULE else "blob"
        yield mode, kind, sha, os.fsdecode(path)


def _destination(tree: Path, path: str) -> Path:
    parts = path.split("/")
    if any(part in ("", ".", "..", ".git") for part in parts):
        raise InputError(f"refusing the path {path!r} recorded in Git")
    return tree.joinpath(*parts)


def _write_commit(repo: Path, commit: str, tree: Path, prefix: str) -> None:
    pathspec = ["--", prefix] if prefix else []
    entries = list(_entries(_git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, *pathspec)))
    blobs = [(mode, sha, path) for mode, kind, sha, path in entries if kind == "blob"]
    data = _git(repo, "cat-file", "--batch", stdin="".join(f"{s}\n" for _, s, _ in blobs).encode())
    position = 0
    for mode, _, path in blobs:
        header_end = data.index(b"\n", position)
        size = int(data[position:header_end].split()[2])
        content = data[header_end + 1 : header_end + 1 + size]
        position = header_end + 1 + size + 1
        _write_blob(_destination(tree, path), mode, content)
    for _, kind, sha, path in entries:
        if kind == "commit":
            _write_commit(_submodule(repo, path, sha), sha, _destination(tree, path), "")


def _write_blob(target: Path, mode: str, content: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode == _SYMLINK:
        os.symlink(os.fsdecode(content), target)
        return
    target.write_bytes(content)
    if mode == _EXECUTABLE:
        target.chmod(0o755)


def _submodule(repo: Path, path: str, commit: str) -> Path:
    """The submodule's own repository, holding `commit`."""
    checkout_dir = repo / path
    hint = f"run `git submodule update --init {path}`"
    if not (checkout_dir / ".git").exists():
        raise InputError(f"submodule {path} is not checked out, so it cannot be compared; {hint}")
    done = subprocess.run(
        ["git", "-C", str(checkout_dir), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise InputError(f"submodule {path} lacks commit {commit[:7]}; {hint} (or fetch it)")
    return checkout_dir


def _copy_worktree(repo: Path, tree: Path, prefix: str) -> None:
    """What `git add -A` would commit: tracked and untracked files, not ignored ones."""
    pathspec = ["--", prefix] if prefix else []
    listing = _git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", *pathspec)
    submodules = {
        path
        for mode, _, _, path in _entries(_git(repo, "ls-files", "-s", "-z", *pathspec))
        if mode == _SUBMODULE
    }
    for record in dict.fromkeys(listing.split(b"\0")):
        path = os.fsdecode(record)
        if not path or path in submodules:
            continue
        source = repo / path
        target = _destination(tree, path)
        if source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), target)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for path in sorted(submodules):
        if (repo / path / ".git").exists():
            _copy_worktree(repo / path, _destination(tree, path), "")
