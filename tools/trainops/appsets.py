"""What Argo CD's ApplicationSets make of a repository tree: for each git generator,
the directories it matches (a files generator: each matched file's directory) and the
Application name its template gives each.

Names are worked out only where the template's metadata.name is built from the path
parameters alone (path, basename, filename, segments); a name that needs a file's
contents, a `pathParamPrefix`, a templatePatch or a nested generator is left unknown.
A files generator's `selector.matchLabels` is checked against the top-level scalar
keys of each matched file, as the controller checks its flattened parameters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from trainops.errors import InputError
from trainops.model import Document, Target
from trainops.yamlio import load_yaml_mapping, read_text

if TYPE_CHECKING:
    from trainops.render.engine import Renderer

# A repository's glob may match anything; past this many matches a generator is not
# worked out (its Applications' names stay unknown).
MAX_MATCHES = 200_000
PATH_TEMPLATES = ("{{.path.path}}", "{{path}}", "{{ .path.path }}")

_GO_PARAM = re.compile(r"\{\{-?\s*(?:\.path\.(\w+)|index\s+\.path\.segments\s+(\d+))\s*-?\}\}")
_FAST_PARAM = re.compile(r"\{\{\s*path(?:\.(\w+)|\[(\d+)\])?\s*\}\}")


@dataclass(frozen=True)
class GeneratedApplication:
    """One Application a git generator makes: its ApplicationSet, the directory it was
    generated for (relative to the repository), its name (None: not worked out) and
    whether the Application's source is that directory."""

    appset: str
    path: str
    name: str | None
    source_is_path: bool


def _source_paths(spec: dict) -> list[str]:
    template = (spec.get("template") or {}).get("spec") or {}
    sources = [template.get("source"), *(template.get("sources") or [])]
    return [s.get("path") for s in sources if isinstance(s, dict) and s.get("path")]


def _git_generators(generators: Any, nested: bool = False) -> Iterator[tuple[dict, bool]]:
    """Every git generator, with whether it sits inside a matrix or merge generator."""
    for generator in generators if isinstance(generators, list) else []:
        if not isinstance(generator, dict):
            continue
        if isinstance(generator.get("git"), dict):
            yield generator, nested
        for kind in ("matrix", "merge"):
            inner = generator.get(kind)
            if isinstance(inner, dict):
                yield from _git_generators(inner.get("generators"), True)


def _glob(root: Path, pattern: Any, want_dirs: bool) -> list[Path] | None:
    """What `pattern` matches below root, or None past MAX_MATCHES or outside root."""
    text = str(pattern or "")
    if not text or text.startswith("/") or ".." in text.split("/"):
        return None
    found = []
    for match in root.glob(text):
        if match.is_dir() if want_dirs else match.is_file():
            found.append(match)
            if len(found) > MAX_MATCHES:
                return None
    return found


def _name(template: Any, directory: str, filename: str, go: bool) -> str | None:
    """The template with the path parameters of `directory` put in, or None when it
    needs anything else."""
    if not isinstance(template, str):
        return None
    params = {"path": directory, "basename": directory.rpartition("/")[2], "filename": filename}
    segments = directory.split("/")
    unknown = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal unknown
        key, index = match.group(1), match.group(2)
        if index is not None:
            if int(index) < len(segments):
                return segments[int(index)]
        elif params.get(key or "path"):
            return params[key or "path"]
        unknown = True
        return ""

    name = (_GO_PARAM if go else _FAST_PARAM).sub(substitute, template)
    return None if unknown or "{{" in name else name


def _selected(selector: Any, file: Path) -> bool | None:
    """Whether a files generator's selector keeps `file`; None: cannot tell."""
    if not selector:
        return True
    if not isinstance(selector, dict) or selector.get("matchExpressions"):
        return None
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, dict):
        return None
    try:
        content = load_yaml_mapping(read_text(file), str(file))
    except (InputError, OSError):
        return None
    return all(
        not isinstance(content.get(k), (dict, list)) and str(content.get(k)) == str(v)
        for k, v in labels.items()
    )


def _would_match(pattern: Any, directory: str) -> bool:
    parts = str(pattern or "").split("/")
    return len(parts) == len(directory.split("/")) and PurePosixPath(directory).match(str(pattern))


def generated_applications(
    root: Path, appsets: list[Document], planned: tuple[str, ...] = ()
) -> list[GeneratedApplication]:
    """The Applications the git generators of `appsets` make of the tree at `root`, as if
    the `planned` directories (relative to root) were there too."""
    found: list[GeneratedApplication] = []
    for doc in appsets:
        spec = doc.obj.get("spec") if isinstance(doc.obj.get("spec"), dict) else {}
        source_is_path = any(path in PATH_TEMPLATES for path in _source_paths(spec))
        template = ((spec.get("template") or {}).get("metadata") or {}).get("name")
        go = spec.get("goTemplate") is True
        plain = not spec.get("templatePatch")
        for generator, nested in _git_generators(spec.get("generators")):
            git = generator["git"]
            named = plain and not nested
            named = named and not git.get("pathParamPrefix") and not git.get("template")
            entries: dict[str, tuple[str, bool | None]] = {}
            for entry in git.get("files") or []:
                matches = _glob(root, entry.get("path") if isinstance(entry, dict) else None, False)
                for match in matches or []:
                    keep = _selected(generator.get("selector"), match) if named else None
                    if keep is not False:
                        directory = str(match.parent.relative_to(root))
                        entries[directory] = (match.name, keep)
            included: set[str] = set()
            excluded: set[str] = set()
            for entry in git.get("directories") or []:
                if not isinstance(entry, dict):
                    continue
                matches = _glob(root, entry.get("path"), True) or []
                chosen = excluded if entry.get("exclude") else included
                chosen.update(str(m.relative_to(root)) for m in matches)
                chosen.update(d for d in planned if _would_match(entry.get("path"), d))
            for directory in sorted(included - excluded):
                entries[directory] = ("", True)
            for directory, (filename, keep) in sorted(entries.items()):
                name = _name(template, directory, filename, go) if named and keep else None
                found.append(GeneratedApplication(doc.name, directory, name, source_is_path))
    return found


def application_paths(root: Path, appsets: list[Document]) -> list[str]:
    """Repository-relative directories that become Applications syncing themselves."""
    return sorted({app.path for app in generated_applications(root, appsets) if app.source_is_path})


@dataclass(frozen=True)
class NameConflict:
    """A directory's Application name, which the Applications in `others` (each
    "DIRECTORY (ApplicationSet NAME)") share."""

    name: str
    others: tuple[str, ...]


def name_conflicts(apps: list[GeneratedApplication]) -> dict[str, NameConflict]:
    """The directories whose Application shares its name with another Application."""
    by_name: dict[str, list[GeneratedApplication]] = {}
    for app in apps:
        if app.name is not None:
            by_name.setdefault(app.name, []).append(app)
    conflicts: dict[str, NameConflict] = {}
    for name, same in by_name.items():
        for app in same if len(same) > 1 else ():
            others = tuple(f"{o.path} (ApplicationSet {o.appset})" for o in same if o is not app)
            conflicts[app.path] = NameConflict(name, others)
    return conflicts


def argocd_appsets(root: Path, renderer: Renderer) -> list[Document]:
    """The ApplicationSets of the repository at `root` (its argocd/ kustomization
    rendered); none when it has no argocd/ or it does not render (validating argocd/
    reports why)."""
    argocd = root / "argocd"
    if not (argocd / "kustomization.yaml").is_file():
        return []
    try:
        [control] = renderer.render([Target("kustomization", str(argocd))])
    except InputError:
        return []
    return [doc for doc in control.documents if doc.kind == "ApplicationSet"]


def name_taken(root: Path, appsets: list[Document], directory: str) -> NameConflict | None:
    """Whether the Application a new `directory` (relative to root) would get has the
    name of another directory's."""
    apps = generated_applications(root, appsets, planned=(directory,))
    return name_conflicts(apps).get(directory)
