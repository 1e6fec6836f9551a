"""Collects every local file a kustomize build reads.

The walk follows a kustomization's resources, components and bases, its patch
and generator files, and any other string in it that names an existing path;
remote resources are resolved through the mirror and walked like local ones.
The result keys the render cache (content of all inputs), decides whether the
build needs staging, and catches missing paths with the kustomization's file
and line before kustomize reports them without either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.render.discover import kustomization_file
from trainops.render.remote import RemoteRef, is_remote, parse_remote, resolve_in_mirror
from trainops.yamlio import load_yaml_mapping, locate

_REFERENCE_LISTS = ("resources", "components", "bases")
_PATH_LISTS = ("patchesStrategicMerge", "crds", "configurations")
_PATH_ENTRIES = ("patches", "patchesJson6902", "replacements")


@dataclass
class RemoteUse:
    """A remote URL listed in one of the kustomizations of the build."""

    kustomization: Path
    field: str
    index: int
    ref: RemoteRef | None
    local: Path | None  # the mirror's copy, when there is one

    @property
    def url(self) -> str:
        return self.ref.url if self.ref else ""


@dataclass
class InputGraph:
    root: Path
    files: set[Path] = field(default_factory=set)
    kustomizations: list[Path] = field(default_factory=list)
    remotes: list[RemoteUse] = field(default_factory=list)


def collect_inputs(directory: Path, mirror: Path | None) -> InputGraph:
    graph = InputGraph(root=directory.resolve())
    _walk_kustomization(graph.root, graph, mirror, visited=set())
    return graph


def _walk_kustomization(
    directory: Path, graph: InputGraph, mirror: Path | None, visited: set[Path]
) -> None:
    if directory in visited:
        return
    visited.add(directory)
    kfile = kustomization_file(directory)
    if kfile is None:
        raise InputError("directory has no kustomization.yaml", str(directory))
    graph.kustomizations.append(kfile)
    for entry in directory.iterdir():
        if entry.is_file():
            graph.files.add(entry)
    text = kfile.read_text(errors="replace")
    spec = load_yaml_mapping(text, str(kfile))

    for field_name in _REFERENCE_LISTS:
        for index, entry in _indexed_strings(spec, field_name):
            if is_remote(entry):
                ref = parse_remote(entry)
                local = resolve_in_mirror(ref, mirror) if ref else None
                graph.remotes.append(RemoteUse(kfile, field_name, index, ref, local))
                if local is not None:
                    _add_path(local.resolve(), graph, mirror, visited)
                continue
            target = (directory / entry).resolve()
            if not target.exists():
                _missing(kfile, text, field_name, index, entry)
            if target.is_dir() and kustomization_file(target) is None:
                raise InputError(
                    f"{field_name} entry '{entry}' is a directory without a kustomization.yaml",
                    str(kfile),
                    _line(text, (field_name, index)),
                )
            _add_path(target, graph, mirror, visited)

    for field_name in _PATH_LISTS:
        for index, entry in _indexed_strings(spec, field_name):
            if "\n" not in entry and not (directory / entry).exists():
                _missing(kfile, text, field_name, index, entry)
    for field_name in _PATH_ENTRIES:
        entries = spec.get(field_name)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            path = entry.get("path") if isinstance(entry, dict) else None
            if isinstance(path, str) and not (directory / path).exists():
                _missing(kfile, text, field_name, index, path, key="path")

    for value in iter_strings(spec):
        if "\n" in value or is_remote(value) or len(value) > 4096:
            continue
        candidate = directory / value.split("=", 1)[-1]
        try:
            if candidate.exists():
                _add_path(candidate.resolve(), graph, mirror, visited)
        except OSError:
            continue


def _add_path(path: Path, graph: InputGraph, mirror: Path | None, visited: set[Path]) -> None:
    if path.is_file():
        graph.files.add(path)
    elif path.is_dir():
        if kustomization_file(path) is not None:
            _walk_kustomization(path, graph, mirror, visited)
        else:
            graph.files.update(p for p in path.rglob("*") if p.is_file())


def _missing(
    kfile: Path, text: str, field_name: str, index: int, entry: str, key: str | None = None
) -> None:
    raise InputError(
        f"{field_name} entry '{entry}' does not exist",
        str(kfile),
        _line(text, (field_name, index), key),
    )


def _line(text: str, path: tuple[str | int, ...], key: str | None = None) -> int | None:
    line = locate(text, path, key)
    return line + 1 if line is not None else None


def _indexed_strings(spec: dict[str, Any], key: str) -> list[tuple[int, str]]:
    value = spec.get(key)
    if not isinstance(value, list):
        return []
    return [(index, item) for index, item in enumerate(value) if isinstance(item, str)]


def iter_strings(value: Any):
    """Every string anywhere inside a parsed YAML value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from iter_strings(item)
