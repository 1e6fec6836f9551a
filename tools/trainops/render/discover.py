"""Finds what to render under the paths a user gives.

A directory holding a kustomization is one target (components are skipped:
they only make sense inside another kustomization). YAML and JSON files that
are not part of any kustomization are targets of their own. Files inside a
kustomization's directory tree are its inputs (patches, profiles), never
targets, but nested kustomizations (an overlay's `runs/`) are. A run directory
(a child of a `runs/` directory) without a kustomization is what Argo CD syncs
as a plain directory: its own manifest files are targets, its subdirectories
not (a directory source does not recurse), and a Jsonnet file there, which Argo CD would
evaluate, is refused. A directory holding a Chart.yaml is
a Helm chart: one target, rendered by helm.

A target reached through a symbolic link stays inside the repository the link is in:
a link to a directory or file elsewhere on the machine is refused, not rendered,
printed or cached.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from trainops.errors import InputError
from trainops.model import Target
from trainops.yamlio import load_yaml_mapping, read_text

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__"}
CHART_FILE = "Chart.yaml"


def kustomization_file(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_NAMES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def is_component(kustomization: Path) -> bool:
    """Whether the file's top-level `kind` is Component, as kustomize reads it (a line
    that only looks like one, inside a string, is not). A file that does not parse is
    no component: it stays a target, and its build reports the problem."""
    try:
        document = load_yaml_mapping(read_text(kustomization), str(kustomization))
    except (OSError, InputError):
        return False
    return document.get("kind") == "Component"


def display_path(path: Path | str) -> str:
    """Path as shown to users: relative to the working directory when below it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def repository_root(directory: Path) -> Path:
    """The root paths of a build must stay under: the trainops project (a pyproject.toml
    with [tool.trainops]) or Git repository holding `directory`; else the working
    directory when `directory` is below it. A directory in no repository and outside
    the working directory has no root to stay in but the filesystem's: there only
    kustomize's own load restrictor applies."""
    directory = directory.resolve()
    git_root = None
    for candidate in (directory, *directory.parents):
        pyproject = candidate / "pyproject.toml"
        try:
            if pyproject.is_file() and "[tool.trainops]" in pyproject.read_text(errors="replace"):
                return candidate
        except OSError:
            pass
        if git_root is None and (candidate / ".git").exists():
            git_root = candidate
    if git_root is not None:
        return git_root
    cwd = Path.cwd().resolve()
    return cwd if directory.is_relative_to(cwd) else Path(directory.anchor)


def discover(paths: Iterable[str], exclude: Iterable[Path] = ()) -> list[Target]:
    """Targets under `paths`, in a stable order, each listed once."""
    excluded = [p.resolve() for p in exclude]
    targets: list[Target] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: str, path: Path | str) -> None:
        shown = "-" if kind == "stdin" else display_path(path)
        if (kind, shown) not in seen:
            seen.add((kind, shown))
            targets.append(Target(kind, shown))

    for raw in paths:
        if raw == "-":
            add("stdin", "-")
            continue
        path = Path(raw)
        if not path.exists():
            raise InputError("no such file or directory", raw)
        _confined(path, raw)
        if path.is_file():
            if path.name in KUSTOMIZATION_NAMES:
                add("kustomization", path.parent)
            else:
                add("file", path)
            continue
        boundary = repository_root(path)
        for kind, found in _walk(path, excluded):
            if found.is_symlink():
                _confined(found, display_path(found), boundary)
            add(kind, found)
    return targets


def _confined(path: Path, shown: str, boundary: Path | None = None) -> None:
    """Refuse `path` when a symbolic link on the way leads out of the repository holding
    the place it was given at (`boundary`, else found from the link's own directory)."""
    given = Path(os.path.abspath(path))
    real = path.resolve()
    if real == given:
        return
    boundary = boundary or repository_root(given.parent)
    if not real.is_relative_to(boundary):
        raise InputError(
            f"a symbolic link leads to {real}, outside the repository ({boundary})", shown
        )


# Argo CD's repo server merges these from an Application's path into its source before
# generating manifests (argo-cd v3.5.1 reposerver/repository/repository.go,
# mergeSourceParameters): patches, name prefixes, images, labels, another source type.
ARGOCD_OVERRIDES = (".argocd-source.yaml", ".argocd-source-")


def argocd_override(name: str) -> bool:
    """Whether a file name is one of Argo CD's parameter override files."""
    return name == ARGOCD_OVERRIDES[0] or (
        name.startswith(ARGOCD_OVERRIDES[1]) and name.endswith(".yaml")
    )


def _synced_file(name: str, run: bool) -> bool:
    """Whether Argo CD syncs this manifest file of a directory. A run without a
    kustomization is a directory source, whose files Argo CD matches by their suffix alone
    (repository.go findManifests, v3.5.1), hidden ones too; its parameter override files
    (.argocd-source*.yaml) are refused by their own rule."""
    return not argocd_override(name) if run else not name.startswith(".")


def _no_jsonnet(run: Path, files: list[str]) -> None:
    """A run without a kustomization is an Argo CD directory source, and Argo CD evaluates
    the *.jsonnet files of a directory source (repository.go findManifests, v3.5.1) besides
    its YAML and JSON: what it would sync from them trainops cannot see, so it refuses them."""
    for name in sorted(files):
        if name.endswith(".jsonnet"):
            raise InputError(
                "Argo CD evaluates this Jsonnet file of a run directory and trainops cannot "
                "validate what it makes: write the run's manifests as YAML (or add a "
                "kustomization.yaml, under which Argo CD ignores Jsonnet)",
                display_path(run / name),
            )


def _walk(top: Path, excluded: list[Path]) -> Iterable[tuple[str, Path]]:
    inside_kustomization: dict[str, bool] = {}
    for root, dirs, files in os.walk(top):
        root_path = Path(root)
        # Argo CD's directory generator skips only hidden directories: under runs/, a run
        # named venv is synced, so it is validated.
        skipped = set() if root_path.name == "runs" else _SKIPPED_DIRS
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in skipped
            and not d.startswith(".")
            and (root_path / d).resolve() not in excluded
        )
        kustomization = kustomization_file(root_path)
        # A Helm chart, rendered whole by helm, unless a kustomization sits beside its
        # Chart.yaml: Argo CD then builds it with kustomize (discovery.go Discover walks the
        # files in lexical order and the last type found wins; Kustomization and
        # kustomization.yaml sort after Chart.yaml).
        if kustomization is None and (root_path / CHART_FILE).is_file():
            dirs[:] = []
            yield "helm", root_path
            continue
        parent_inside = inside_kustomization.get(str(root_path.parent), False)
        inside_kustomization[root] = parent_inside or kustomization is not None
        if kustomization is not None:
            if not is_component(kustomization):
                yield "kustomization", root_path
        elif not parent_inside or root_path.parent.name == "runs":
            run = root_path.parent.name == "runs"
            if run:
                _no_jsonnet(root_path, files)
            for name in sorted(files):
                if name.endswith(MANIFEST_SUFFIXES) and _synced_file(name, run):
                    yield "file", root_path / name
