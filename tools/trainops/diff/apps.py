"""What Argo CD syncs from a tree: the directories its ApplicationSets turn into
Applications, read from the git generators of the ApplicationSets in `argocd/`.

Only ApplicationSets whose Applications take their source path from the generator
(`{{.path.path}}`) count; those that install Helm charts for each cluster do not
point into the repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainops.diff.compare import ResourceKey
from trainops.model import Document

PATH_TEMPLATES = ("{{.path.path}}", "{{path}}", "{{ .path.path }}")
ARGOCD_DIR = "argocd"


def _generators(generators: Any) -> Iterator[dict]:
    for generator in generators if isinstance(generators, list) else []:
        if not isinstance(generator, dict):
            continue
        yield generator
        for nested in ("matrix", "merge"):
            inner = generator.get(nested)
            if isinstance(inner, dict):
                yield from _generators(inner.get("generators"))


def _source_paths(spec: dict) -> list[str]:
    template = (spec.get("template") or {}).get("spec") or {}
    sources = [template.get("source"), *(template.get("sources") or [])]
    return [s.get("path") for s in sources if isinstance(s, dict) and s.get("path")]


def application_paths(root: Path, appsets: list[Document]) -> list[str]:
    """Repository-relative directories that become Applications, sorted."""
    found: set[str] = set()
    for doc in appsets:
        spec = doc.obj.get("spec") or {}
        if not any(path in PATH_TEMPLATES for path in _source_paths(spec)):
            continue
        for generator in _generators(spec.get("generators")):
            git = generator.get("git")
            if not isinstance(git, dict):
                continue
            for entry in git.get("files") or []:
                for match in root.glob(str(entry.get("path", ""))):
                    if match.is_file():
                        found.add(str(match.parent.relative_to(root)))
            excluded: set[str] = set()
            for entry in git.get("directories") or []:
                matches = {
                    str(m.relative_to(root))
                    for m in root.glob(str(entry.get("path", "")))
                    if m.is_dir()
                }
                (excluded if entry.get("exclude") else found).update(matches)
            found -= excluded
    return sorted(found)


def keyed(app: str, documents: list[Document]) -> dict[ResourceKey, dict]:
    resources = {}
    for doc in documents:
        key = ResourceKey(app, doc.kind, doc.namespace or "", doc.name)
        resources[key] = doc.obj
    return resources
