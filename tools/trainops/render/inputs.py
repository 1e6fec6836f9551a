"""Collects every local file a kustomize build can read, and keeps it inside the repository.

kustomize's load restrictor lets a kustomization read files only below its own
directory; other directories enter a build only as kustomizations named by
`resources`, `components`, `bases`, `generators`, `transformers` or `validators`.
So the inputs of a build are the whole trees of the kustomization directories it
reaches (plus remote resources, resolved through the mirror): hashing those trees,
rather than the files some field names, keeps the cache key complete whatever a
generator or transformer config reads (files named inline or in other files, helm
values, symlinks).

Only the fields kustomize reads as paths are followed; any other string in a
kustomization (an annotation value `/usr`, say) is data. Every path followed must
resolve inside the repository holding the target (or the mirror), and the trees
hashed are bounded in files and bytes. Missing paths are reported with the
kustomization's file and line before kustomize reports them without either.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.kubeyaml.reader import alias_bomb_line
from trainops.render.discover import MANIFEST_SUFFIXES, kustomization_file, repository_root
from trainops.render.remote import RemoteRef, is_remote, parse_remote, resolve_in_mirror
from trainops.yamlio import load_yaml_mapping, locate, read_text

# Fields whose entries are kustomization directories (or, for resources, files), in
# the order kustomize accumulates them: resources (bases count as resources), then
# the generators run, then components, then the transformers.
_RESOURCE_LISTS = ("resources", "bases")
_COMPONENT_LISTS = ("components",)
_GENERATOR_FIELDS = frozenset({"configMapGenerator", "secretGenerator"})
_TRANSFORMER_FIELDS = frozenset(
    {
        "patches",
        "patchesStrategicMerge",
        "patchesJson6902",
        "images",
        "namespace",
        "namePrefix",
        "nameSuffix",
        "labels",
        "commonLabels",
        "commonAnnotations",
        "replicas",
        "replacements",
    }
)
# Fields whose entries are plugin configs: a file, a kustomization directory, or inline YAML.
_PLUGIN_LISTS = ("generators", "transformers", "validators")
_PATH_LISTS = ("patchesStrategicMerge", "crds", "configurations")
_PATH_ENTRIES = ("patches", "patchesJson6902", "replacements")
# Directories left out of the trees hashed (virtual environments, dependencies: thousands
# of files no build reads). A build reaches into them only through a path some field
# names, and every such path is an input of its own (`local_path`, `generator_sources`).
_SKIPPED_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__"})

MAX_INPUT_FILES = 20_000
MAX_INPUT_BYTES = 1 << 30


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
    # Symbolic links met in the trees, with their target text: part of the key even
    # when the build cannot follow them (a link out of the repository).
    links: dict[Path, str] = field(default_factory=dict)
    size: int = 0
    # The top-level fields any of its kustomizations sets, and the kind of the root
    # one: what decides whether it may share a kustomize process (render/batch.py).
    fields: set[str] = field(default_factory=set)
    root_kind: str = "Kustomization"
    # kustomize takes the first `openapi` setting it meets for the whole process: the
    # schema file (or built-in version) of that first one, and whether any generator
    # or transformer ran before it was met (with the built-in schema).
    schema: tuple[str, str] | None = None
    transformed_before_schema: bool = False


class _Walk:
    """One collection: the graph being filled, the places paths may lead, the budget."""

    def __init__(self, graph: InputGraph, mirror: Path | None, boundary: Path):
        self.graph = graph
        self.mirror = mirror.resolve() if mirror is not None else None
        self.boundary = boundary
        self.visited: set[Path] = set()
        self.trees: set[Path] = set()

    def allowed(self, path: Path) -> bool:
        return path.is_relative_to(self.boundary) or (
            self.mirror is not None and path.is_relative_to(self.mirror)
        )

    def kustomization(self, directory: Path) -> None:
        if directory in self.visited:
            return
        self.visited.add(directory)
        kfile = kustomization_file(directory)
        if kfile is None:
            raise InputError("directory has no kustomization.yaml", str(directory))
        real = kfile.resolve()
        if not self.allowed(real):
            raise InputError(
                f"a symbolic link leads to {real}, outside the repository ({self.boundary})",
                str(kfile),
            )
        self.graph.kustomizations.append(kfile)
        self.tree(directory, kfile)
        text = read_text(kfile)
        spec = load_yaml_mapping(text, str(kfile))
        if len(self.graph.kustomizations) == 1:
            self.graph.root_kind = str(spec.get("kind") or "Kustomization")
        self.graph.fields.update(str(key) for key in spec)
        schema_path = _value_of(spec.get("openapi"), "path")
        if isinstance(schema_path, str) and _special(directory / schema_path):
            raise InputError(
                f"openapi path '{schema_path}' {SPECIAL}", str(kfile), _line(text, ("openapi",))
            )
        if "openapi" in spec and self.graph.schema is None:
            self.graph.schema = _schema_setting(directory, spec["openapi"])
        for field_name in _RESOURCE_LISTS:
            for index, entry in _indexed_strings(spec, field_name):
                self.reference(directory, kfile, text, field_name, index, entry)
        if not _GENERATOR_FIELDS.isdisjoint(spec):
            self.transformation()
            self.generator_sources(directory, kfile, text, spec)
        for field_name in _COMPONENT_LISTS:
            for index, entry in _indexed_strings(spec, field_name):
                self.reference(directory, kfile, text, field_name, index, entry)
        if not _TRANSFORMER_FIELDS.isdisjoint(spec):
            self.transformation()
        for field_name in _PLUGIN_LISTS:
            for index, entry in _indexed_strings(spec, field_name):
                if "\n" not in entry:  # one line: a path; several: an inline config
                    self.reference(directory, kfile, text, field_name, index, entry)
        for field_name in _PATH_LISTS:
            for index, entry in _indexed_strings(spec, field_name):
                if "\n" not in entry:
                    self.local_path(directory, kfile, text, field_name, index, entry)
        for field_name in _PATH_ENTRIES:
            entries = spec.get(field_name)
            for index, entry in enumerate(entries if isinstance(entries, list) else []):
                path = entry.get("path") if isinstance(entry, dict) else None
                if isinstance(path, str):
                    self.local_path(directory, kfile, text, field_name, index, path, key="path")

    def transformation(self) -> None:
        if self.graph.schema is None:
            self.graph.transformed_before_schema = True

    def reference(
        self, directory: Path, kfile: Path, text: str, field_name: str, index: int, entry: str
    ) -> None:
        if is_remote(entry):
            ref = parse_remote(entry)
            try:
                local = resolve_in_mirror(ref, self.mirror) if ref else None
            except InputError as exc:
                raise InputError(
                    f"{field_name} entry '{entry}': {exc.message}",
                    str(kfile),
                    _line(text, (field_name, index)),
                ) from None
            self.graph.remotes.append(RemoteUse(kfile, field_name, index, ref, local))
            if local is not None:
                self.target(local, kfile, text, field_name, index, entry)
            return
        target = self.local_path(directory, kfile, text, field_name, index, entry)
        self.target(target, kfile, text, field_name, index, entry)

    def target(
        self, target: Path, kfile: Path, text: str, field_name: str, index: int, entry: str
    ) -> None:
        if target.is_dir():
            if kustomization_file(target) is None:
                raise InputError(
                    f"{field_name} entry '{entry}' is a directory without a kustomization.yaml",
                    str(kfile),
                    _line(text, (field_name, index)),
                )
            self.kustomization(target)
        elif target.is_file():
            self.add_file(target)
        else:
            raise InputError(
                f"{field_name} entry '{entry}' is not a file or directory",
                str(kfile),
                _line(text, (field_name, index)),
            )

    def local_path(
        self,
        directory: Path,
        kfile: Path,
        text: str,
        field_name: str,
        index: int,
        entry: str,
        key: str | None = None,
    ) -> Path:
        """`entry` resolved against `directory`: it must exist and stay inside."""

        def where() -> tuple[str, int | None]:  # located only for an error: it parses `text`
            return str(kfile), _line(text, (field_name, index), key)

        target = _resolve(directory / entry, where)
        if not self.allowed(target):
            raise InputError(
                f"{field_name} entry '{entry}' resolves to {target}, outside the repository "
                f"({self.boundary})",
                *where(),
            )
        if not target.exists():
            raise InputError(f"{field_name} entry '{entry}' does not exist", *where())
        if _special(target):
            raise InputError(f"{field_name} entry '{entry}' {SPECIAL}", *where())
        if target.is_file():
            self.add_file(target)
        return target

    def generator_sources(
        self, directory: Path, kfile: Path, text: str, spec: dict[str, Any]
    ) -> None:
        """The files configMapGenerator and secretGenerator entries read (`files`, `envs`,
        `env`). One that is missing or outside is left for kustomize to report."""
        for field_name in sorted(_GENERATOR_FIELDS):
            entries = spec.get(field_name)
            for index, entry in enumerate(entries if isinstance(entries, list) else []):
                if not isinstance(entry, dict):
                    continue
                named = [*_strings(entry.get("files")), *_strings(entry.get("envs"))]
                named += _strings([entry.get("env")])
                for source in named:
                    path = source.rpartition("=")[2]
                    try:
                        target = (directory / path).resolve()
                    except (OSError, RuntimeError):
                        continue
                    if not self.allowed(target):
                        continue
                    if _special(target):
                        raise InputError(
                            f"{field_name} source '{source}' {SPECIAL}",
                            str(kfile),
                            _line(text, (field_name, index)),
                        )
                    if target.is_file():
                        self.add_file(target)

    def tree(self, directory: Path, kfile: Path) -> None:
        """Every regular file under a kustomization directory (the files it may read)."""
        if any(directory.is_relative_to(done) for done in self.trees):
            return
        self.trees = {t for t in self.trees if not t.is_relative_to(directory)} | {directory}

        def unreadable(error: OSError) -> None:
            raise InputError(f"cannot read {error.filename}: {error.strerror}", str(kfile))

        for top, dirs, files in os.walk(directory, onerror=unreadable):
            here = Path(top)
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            for name in [d for d in dirs if (here / d).is_symlink()]:
                self.graph.links[here / name] = os.readlink(here / name)
            for name in files:
                path = here / name
                try:
                    info = path.lstat()
                except OSError:
                    continue
                if stat.S_ISLNK(info.st_mode):
                    self.graph.links[path] = os.readlink(path)
                    try:
                        real = path.resolve(strict=True)
                    except (OSError, RuntimeError):
                        continue  # dangling or looping: kustomize cannot read it either
                    if self.allowed(real) and real.is_file():
                        self.add_file(path)
                elif stat.S_ISREG(info.st_mode):
                    self.add_file(path, info.st_size)

    def add_file(self, path: Path, size: int | None = None) -> None:
        graph = self.graph
        if path in graph.files:
            return
        graph.files.add(path)
        graph.size += path.stat().st_size if size is None else size
        if len(graph.files) > MAX_INPUT_FILES or graph.size > MAX_INPUT_BYTES:
            raise InputError(
                f"the build reads more than {MAX_INPUT_FILES} files or "
                f"{MAX_INPUT_BYTES >> 20} MiB (kustomization directories are read whole); "
                "move unrelated files out of the kustomization directories",
                str(graph.root),
            )
        if path.name.endswith(MANIFEST_SUFFIXES):
            _refuse_alias_bomb(path)


def _refuse_alias_bomb(path: Path) -> None:
    """Kustomize expands YAML aliases without go-yaml's bound (a 700-byte file took 30 s
    and 6.7 GB): a file past the bound is refused here, before kustomize reads it."""
    try:
        data = path.read_bytes()
    except OSError:
        return  # kustomize reports what it cannot read
    if b"&" not in data or b"*" not in data:
        return
    line = alias_bomb_line(data.decode("utf-8", errors="replace"))
    if line is not None:
        raise InputError(
            "alias expansion limit exceeded (nested anchors multiply into a huge document: "
            "a 'billion laughs' alias bomb?); kustomize would expand it without bound",
            str(path),
            line + 1,
        )


def collect_inputs(directory: Path, mirror: Path | None) -> InputGraph:
    """The files, links and remote resources a build of `directory` can read."""
    root = _resolve(directory, lambda: (str(directory), None))
    graph = InputGraph(root=root)
    _Walk(graph, mirror, repository_root(root)).kustomization(root)
    return graph


SPECIAL = "is a FIFO, socket or device: kustomize would block or read without end on it"


def _special(path: Path) -> bool:
    """Whether `path` (followed through links) exists and is neither a regular file nor a
    directory."""
    try:
        mode = path.stat().st_mode
    except (OSError, RuntimeError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _value_of(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _schema_setting(directory: Path, openapi: Any) -> tuple[str, str]:
    """What an `openapi` field sets: ("path", the schema file) or ("version", a built-in
    one); ("unknown", "") when kustomize would read it otherwise or fail on it."""
    if isinstance(openapi, dict):
        path, version = openapi.get("path"), openapi.get("version")
        if isinstance(path, str) and version is None:
            try:
                return ("path", str((directory / path).resolve(strict=True)))
            except (OSError, RuntimeError):
                return ("unknown", "")
        if isinstance(version, str) and path is None:
            return ("version", version)
    return ("unknown", "")


def _resolve(path: Path, where: Callable[[], tuple[str, int | None]]) -> Path:
    """`path` resolved; an error names the (file, line) `where` gives."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise InputError(f"cannot resolve {path}: {exc}", *where()) from None


def _line(text: str, path: tuple[str | int, ...], key: str | None = None) -> int | None:
    line = locate(text, path, key)
    return line + 1 if line is not None else None


def _indexed_strings(spec: dict[str, Any], key: str) -> list[tuple[int, str]]:
    value = spec.get(key)
    if not isinstance(value, list):
        return []
    return [(index, item) for index, item in enumerate(value) if isinstance(item, str)]


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


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
