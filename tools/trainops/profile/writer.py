"""Writes profiles, overlays and runs to the repository, atomically and idempotently.

Every edit runs under one lock per repository (`edit_lock`) and computes all of its
files in memory before writing any. A new overlay is assembled in a temporary
directory next to its destination and renamed into place. Existing overlays are
updated file by file (each write atomic), derived files first and cluster.yaml last,
so an edit killed half-way leaves the old profile with some files already derived
from the new one: `validate` reports that as profile-drift, and running the same
edit again completes it. An edit that fails (a read-only directory, a full disk)
puts back what it had written and exits 2. Writing what is already there changes
nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.fsutil import write_atomic, write_if_changed
from trainops.profile.edit import Assignment, apply_assignments
from trainops.profile.model import (
    API_VERSION,
    FIELD_DOCS,
    KIND,
    ClusterProfile,
    load_profile,
    parse_profile,
)
from trainops.profile.overlay import generate
from trainops.profile.projects import ADDON_SOURCES, render_projects
from trainops.profile.run_apps import render_run_apps
from trainops.profile.run_scope import run_path
from trainops.profile.runs import RunOptions, check_run_name, generate_run
from trainops.render.discover import KUSTOMIZATION_NAMES, display_path
from trainops.yamlio import dump, load_yaml_mapping

PROFILE = "cluster.yaml"
GENERATED_MARK = "# Generated from cluster.yaml by trainops."
PROJECTS = Path("argocd/projects.yaml")
RUN_APPS = Path("argocd/applicationsets/runs.yaml")
# Written by hand but sourced from this repository: their repoURLs follow repo-url.
SELF_SOURCED = (
    Path("argocd/applicationsets/platform.yaml"),
    Path("argocd/applicationsets/addons.yaml"),
)
_REPO_URL_LINE = re.compile(r"^(\s*(?:- )?repoURL:\s*)(\S+)\s*$", re.MULTILINE)


@dataclass
class WriteResult:
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.written or self.removed)

    def merge(self, other: WriteResult) -> None:
        self.written += other.written
        self.unchanged += other.unchanged
        self.removed += other.removed


def profile_text(values: dict[str, Any]) -> str:
    """A new cluster.yaml: each key the user gave, with a comment saying what it means."""
    lines = [
        "# Cluster profile: the one description of this GPU cluster. The overlay",
        "# next to it is generated from it; change it with `trainops set` so the",
        "# two stay in step. Keys: docs/overlays.md.",
        f"apiVersion: {API_VERSION}",
        f"kind: {KIND}",
    ]
    for key, doc in FIELD_DOCS.items():
        if key in values and values[key] not in (None, "", [], {}):
            lines.append(f"# {doc}")
            lines.append(dump({key: values[key]}).rstrip("\n"))
    return "\n".join(lines) + "\n"


def profile_values(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}


@contextlib.contextmanager
def edit_lock(root: Path) -> Iterator[None]:
    """Hold the repository's edit lock: `set`, `new-cluster` and `new-run` take turns.

    The lock is an flock on the overlays directory itself (or the root while there is
    none), so no lock file appears in the working tree; it is released when the
    process ends, however it ends.
    """
    directory = root / "overlays" if (root / "overlays").is_dir() else root
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise InputError(f"cannot open {directory} to lock it: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_cluster(root: Path, name: str, values: dict[str, Any], force: bool) -> WriteResult:
    """Create or update overlays/<name>/ from profile values (under the edit lock)."""
    with edit_lock(root):
        return _write_cluster(root, name, values, force)


def _write_cluster(root: Path, name: str, values: dict[str, Any], force: bool) -> WriteResult:
    directory = root / "overlays" / name
    profile = parse_profile(dict(values), name, f"overlays/{name}/{PROFILE}")
    existing = directory / PROFILE
    if existing.exists():
        current = profile_values(load_yaml_mapping(existing.read_text(), str(existing)))
        if current != values and not force:
            differences = ", ".join(
                f"{key}: {current.get(key)!r} -> {values.get(key)!r}"
                for key in sorted(set(current) | set(values))
                if current.get(key) != values.get(key)
            )
            raise InputError(
                f"overlays/{name} already exists with other settings ({differences}); "
                "pass --force to replace its profile, or use `trainops set`",
                str(existing),
            )
        changes = plan_overlay(root, name, profile)
        if current != values:
            changes.append(FileChange(existing, existing.read_text(), profile_text(values)))
        return apply_changes(root, changes + plan_projects(root, profile))
    files = {PROFILE: profile_text(values), **generate(profile)}
    projects = plan_projects(root, profile)
    real = directory.parent.resolve()
    if not real.is_relative_to(root.resolve()):
        raise InputError(
            f"overlays/ leads to {real} through a symbolic link, outside the repository "
            f"({root.resolve()}); nothing was changed"
        )
    staging = None
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        for leftover in directory.parent.glob(f".{name}.*"):  # of a killed run: we hold the lock
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=directory.parent))
        for relative, text in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        os.rename(staging, directory)
        staging = None
        result = WriteResult(written=[directory / relative for relative in files])
        try:
            result.merge(apply_changes(root, projects))
        except InputError:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return result
    except OSError as exc:
        raise _unwritable(exc, directory) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class FileChange:
    path: Path
    old: str | None  # None: the file is new
    new: str | None  # None: the file goes away


def plan_overlay(root: Path, name: str, profile: ClusterProfile) -> list[FileChange]:
    """What overlays/<name>/ must change (files to write or remove) to match `profile`."""
    directory = root / "overlays" / name
    changes = []
    files = generate(profile)
    for relative, text in files.items():
        path = directory / relative
        old = path.read_text() if path.is_file() else None
        if old != text:
            changes.append(FileChange(path, old, text))
    wanted = {directory / relative for relative in files}
    for path in sorted(directory.rglob("*.yaml")):
        if "runs" in path.relative_to(directory).parts or path in wanted:
            continue
        text = path.read_text()
        if path.name != PROFILE and text.startswith(GENERATED_MARK):
            changes.append(FileChange(path, text, None))
    return changes


def apply_changes(root: Path, changes: list[FileChange]) -> WriteResult:
    """Write every change in `_write_order`, all or nothing, inside the repository `root`.

    A change whose path leads out of `root` (a symbolic link on the way) is refused before
    anything is written; a write that fails puts back the files already changed. Both
    raise InputError.
    """
    base = root.resolve()
    for change in changes:
        real = change.path.resolve()
        if not real.is_relative_to(base):
            raise InputError(
                f"{display_path(change.path)} leads to {real} through a symbolic link, outside "
                f"the repository ({base}); nothing was changed"
            )
    result = WriteResult()
    done: list[FileChange] = []
    try:
        for change in sorted(changes, key=_write_order):
            if change.new is None:
                change.path.unlink()
                result.removed.append(change.path)
                _remove_empty_parents(change.path.parent)
            else:
                _record(result, change.path, write_if_changed(change.path, change.new))
            done.append(change)
    except OSError as exc:
        for change in reversed(done):
            with contextlib.suppress(OSError):
                if change.old is None:
                    change.path.unlink()
                else:
                    write_atomic(change.path, change.old)
        raise _unwritable(exc, change.path) from None
    return result


def _remove_empty_parents(directory: Path) -> None:
    """A template the profile no longer calls for leaves no empty directory behind."""
    while directory.name != "overlays" and not any(directory.iterdir()):
        directory.rmdir()
        directory = directory.parent


def _write_order(change: FileChange) -> int:
    """New and changed files before the kustomizations that name them, removals after
    the kustomizations stop naming them, profiles last: a kill between two writes
    leaves an overlay that still renders, which validate then reports as profile-drift."""
    if change.path.name == PROFILE:
        return 3
    if change.new is None:
        return 2
    return 1 if change.path.name in KUSTOMIZATION_NAMES else 0


def _unwritable(exc: OSError, path: Path) -> InputError:
    where = display_path(exc.filename) if exc.filename else display_path(path)
    return InputError(f"cannot write {where}: {exc.strerror or exc}; nothing was changed")


def plan_set(root: Path, name: str, assignments: list[Assignment]) -> list[FileChange]:
    """The profile edit and every derived file it changes, checked before anything is written.

    With no assignments: what regenerating the overlay from cluster.yaml changes. Call
    it under `edit_lock` when the changes are to be applied.
    """
    path = root / "overlays" / name / PROFILE
    if not path.is_file():
        raise InputError(f"no cluster {name!r}: overlays/{name}/{PROFILE} does not exist")
    old = path.read_text()
    new = apply_assignments(old, assignments)
    where = display_path(path)
    profile = parse_profile(load_yaml_mapping(new, where), name, where, new)
    changes = [FileChange(path, old, new)] if new != old else []
    changes += plan_overlay(root, name, profile)
    return changes + plan_projects(root, profile)


def missing_destinations(root: Path, profile: ClusterProfile) -> list[tuple[str, str]]:
    """(project, namespace) pairs argocd/projects.yaml generates for `profile`'s cluster
    but does not hold: a new-cluster killed after the overlay, or a hand edit.

    Argo CD refuses to sync an Application whose destination its project does not
    permit, so the cluster's platform and runs never arrive."""
    from trainops.config import load_project_config
    from trainops.yamlio import load_documents

    path = root / PROJECTS
    if not path.is_file():
        return []

    def destinations(text: str, where: str) -> dict[str, set[tuple[str, str]]]:
        held: dict[str, set[tuple[str, str]]] = {}
        for document in load_documents(text, where):
            project = document.obj
            if not isinstance(project, dict) or project.get("kind") != "AppProject":
                continue
            name = str((project.get("metadata") or {}).get("name"))
            entries = (project.get("spec") or {}).get("destinations") or []
            held[name] = {
                (str(entry.get("name")), str(entry.get("namespace")))
                for entry in entries
                if isinstance(entry, dict)
            }
        return held

    wanted = destinations(render_projects(load_project_config(root).repo_url, [profile]), "")
    held = destinations(path.read_text(), str(path))
    return [
        (project, namespace)
        for project, pairs in sorted(wanted.items())
        for cluster, namespace in sorted(pairs)
        if cluster == profile.name and (cluster, namespace) not in held.get(project, set())
    ]


def plan_projects(root: Path, edited: ClusterProfile | None = None) -> list[FileChange]:
    """argocd/projects.yaml and the runs ApplicationSets for the clusters under overlays/
    (`edited` replacing its own profile, or joining them when it is a new cluster)."""
    from trainops.config import load_project_config

    if not (root / PROJECTS).parent.is_dir():
        return []
    profiles = [load_profile(p) for p in sorted((root / "overlays").glob(f"*/{PROFILE}"))]
    if edited is not None:
        profiles = [p for p in profiles if p.name != edited.name] + [edited]
        profiles.sort(key=lambda p: p.name)
    repo_url = load_project_config(root).repo_url
    changes = []
    for relative, render in ((PROJECTS, render_projects), (RUN_APPS, render_run_apps)):
        path = root / relative
        text = render(repo_url, profiles)
        old = path.read_text() if path.is_file() else None
        if old != text:
            changes.append(FileChange(path, old, text))
    for relative in SELF_SOURCED:
        path = root / relative
        if path.is_file():
            old = path.read_text()
            text = sourced_from(old, repo_url)
            if text != old:
                changes.append(FileChange(path, old, text))
    return changes


def sourced_from(text: str, repo_url: str) -> str:
    """`text` with every repoURL that is not a chart repository pointing at `repo_url`."""

    def point(match: re.Match[str]) -> str:
        url = match.group(2)
        return match.group(0) if url in ADDON_SOURCES else f"{match.group(1)}{repo_url}"

    return _REPO_URL_LINE.sub(point, text)


def write_run(root: Path, cluster: str, run: str, options: RunOptions, force: bool) -> WriteResult:
    check_run_name(run)
    with edit_lock(root):
        return _write_run(root, cluster, run, options, force)


def _write_run(root: Path, cluster: str, run: str, options: RunOptions, force: bool) -> WriteResult:
    overlay = root / "overlays" / cluster
    if not (overlay / PROFILE).is_file():
        raise InputError(f"no cluster {cluster!r}: overlays/{cluster}/{PROFILE} does not exist")
    profile = load_profile(overlay / PROFILE)
    files = generate_run(profile, run, options)
    directory = overlay / run_path(options.scope.team, run)
    path = directory / "kustomization.yaml"
    if path.exists() and path.read_text() != files["kustomization.yaml"] and not force:
        raise InputError(
            f"run {run} already exists with other settings; runs are immutable once "
            "synced: pick a new run name (or --force if it was never synced)",
            str(path),
        )
    # apply_changes writes the kustomization last: until it names them, the other
    # files are not part of the run.
    changes = []
    for name, text in files.items():
        target = directory / name
        old = target.read_text() if target.is_file() else None
        changes.append(FileChange(target, old, text))
    return apply_changes(root, changes)


def _record(result: WriteResult, path: Path, written: bool) -> None:
    (result.written if written else result.unchanged).append(path)
