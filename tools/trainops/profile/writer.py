"""Writes profiles, overlays and runs to the repository, atomically and idempotently.

A new overlay is assembled in a temporary directory next to its destination
and renamed into place, so a failure leaves nothing half-written. Existing
overlays are updated file by file (each write atomic); generated files the
profile no longer calls for are removed. Writing what is already there
changes nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.fsutil import write_if_changed
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
from trainops.profile.projects import render_projects
from trainops.profile.run_apps import render_run_apps
from trainops.profile.run_scope import RunScope, run_path
from trainops.profile.runs import check_run_name, generate_run
from trainops.render.discover import display_path
from trainops.yamlio import dump, load_yaml_mapping

PROFILE = "cluster.yaml"
GENERATED_MARK = "# Generated from cluster.yaml by trainops."
PROJECTS = Path("argocd/projects.yaml")
RUN_APPS = Path("argocd/applicationsets/runs.yaml")


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


def write_cluster(root: Path, name: str, values: dict[str, Any], force: bool) -> WriteResult:
    """Create or update overlays/<name>/ from profile values."""
    directory = root / "overlays" / name
    profile = parse_profile(dict(values), name, f"overlays/{name}/{PROFILE}")
    existing = directory / PROFILE
    if existing.exists():
        current = profile_values(load_yaml_mapping(existing.read_text(), str(existing)))
        if current != values:
            if not force:
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
            result = WriteResult()
            _record(result, existing, write_if_changed(existing, profile_text(values)))
            result.merge(regenerate(root, name))
            return result
        return regenerate(root, name)
    files = {PROFILE: profile_text(values), **generate(profile)}
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=directory.parent))
    try:
        for relative, text in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        os.rename(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result = WriteResult(written=[directory / relative for relative in files])
    result.merge(sync_projects(root))
    return result


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


def apply_changes(changes: list[FileChange]) -> WriteResult:
    result = WriteResult()
    for change in changes:
        if change.new is None:
            change.path.unlink()
            result.removed.append(change.path)
            _remove_empty_parents(change.path.parent)
        else:
            _record(result, change.path, write_if_changed(change.path, change.new))
    return result


def _remove_empty_parents(directory: Path) -> None:
    """A template the profile no longer calls for leaves no empty directory behind."""
    while directory.name != "overlays" and not any(directory.iterdir()):
        directory.rmdir()
        directory = directory.parent


def regenerate(root: Path, name: str) -> WriteResult:
    """Bring overlays/<name>/ in line with its cluster.yaml."""
    profile = load_profile(root / "overlays" / name / PROFILE)
    result = apply_changes(plan_overlay(root, name, profile))
    result.merge(sync_projects(root))
    return result


def plan_set(root: Path, name: str, assignments: list[Assignment]) -> list[FileChange]:
    """The profile edit and every derived file it changes, checked before anything is written."""
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


def plan_projects(root: Path, edited: ClusterProfile | None = None) -> list[FileChange]:
    """argocd/projects.yaml and the runs ApplicationSets for the clusters under overlays/
    (`edited` replacing its own profile)."""
    from trainops.config import load_project_config

    if not (root / PROJECTS).parent.is_dir():
        return []
    profiles = [load_profile(p) for p in sorted((root / "overlays").glob(f"*/{PROFILE}"))]
    if edited is not None:
        profiles = [edited if p.name == edited.name else p for p in profiles]
    repo_url = load_project_config(root).repo_url
    changes = []
    for relative, render in ((PROJECTS, render_projects), (RUN_APPS, render_run_apps)):
        path = root / relative
        text = render(repo_url, profiles)
        old = path.read_text() if path.is_file() else None
        if old != text:
            changes.append(FileChange(path, old, text))
    return changes


def sync_projects(root: Path) -> WriteResult:
    """Rewrite argocd/projects.yaml and the runs ApplicationSets for the clusters under
    overlays/."""
    return apply_changes(plan_projects(root))


def write_run(
    root: Path,
    cluster: str,
    run: str,
    template: str,
    nodes: int,
    image: str | None,
    args: list[str] | None,
    force: bool,
    mpi_implementation: str | None = None,
    scope: RunScope | None = None,
) -> WriteResult:
    check_run_name(run)
    overlay = root / "overlays" / cluster
    if not (overlay / PROFILE).is_file():
        raise InputError(f"no cluster {cluster!r}: overlays/{cluster}/{PROFILE} does not exist")
    profile = load_profile(overlay / PROFILE)
    text = generate_run(profile, run, template, nodes, image, args, mpi_implementation, scope)
    path = overlay / run_path(scope.team if scope else None, run) / "kustomization.yaml"
    if path.exists() and path.read_text() != text and not force:
        raise InputError(
            f"run {run} already exists with other settings; runs are immutable once "
            "synced: pick a new run name (or --force if it was never synced)",
            str(path),
        )
    result = WriteResult()
    _record(result, path, write_if_changed(path, text))
    return result


def _record(result: WriteResult, path: Path, written: bool) -> None:
    (result.written if written else result.unchanged).append(path)
