"""Where a rendered field came from: the base or patch file and line to fix.

kustomize records, when asked (`buildMetadata`, see render/kustomize.py), the file
each object was read from (`config.kubernetes.io/origin`) and the kustomizations
whose transformers changed it (`alpha.config.kubernetes.io/transformations`).
`strip_origins` moves those annotations off the objects, before schemas and
policies see them, onto `Document.origin`. `Placer` then answers, for a finding's
field, which file wrote it: the last patch of those kustomizations that sets the
field (strategic-merge or JSON6902, in a file or inline), else the `images` or
`namespace` entry that rewrote it, else the resource's own file; and, when that
file is generated from a cluster profile, the cluster.yaml key behind it.
Lists are followed by their merge keys (`name`, `mountPath`...), so a container
patched by name is found whatever its position in the rendered list.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainops.model import INFO, Document, Finding, Origin
from trainops.render.discover import display_path

ORIGIN = "config.kubernetes.io/origin"
TRANSFORMATIONS = "alpha.config.kubernetes.io/transformations"
PATCH_TRANSFORMERS = (
    "PatchTransformer",
    "PatchStrategicMergeTransformer",
    "PatchJson6902Transformer",
)
GENERATED_HEADER = "# Generated from cluster.yaml by trainops."
# Keys that identify a list item across a patch and its target (kustomize's merge keys
# for the lists that appear in pod templates, plus `key` for expressions and tolerations).
MERGE_KEYS = ("name", "mountPath", "containerPort", "devicePath", "topologyKey", "key", "ip")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NODE_ERRORS = (yaml.YAMLError, ValueError, RecursionError)


def strip_origins(documents: Iterable[Document]) -> None:
    """Move kustomize's build annotations from each object onto `Document.origin`."""
    parsed: dict[tuple[str | None, str | None], Origin] = {}
    for doc in documents:
        metadata = doc.obj.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        if not isinstance(annotations, dict):
            continue
        if ORIGIN not in annotations and TRANSFORMATIONS not in annotations:
            continue
        origin_text = annotations.pop(ORIGIN, None)
        transformations_text = annotations.pop(TRANSFORMATIONS, None)
        if not annotations:
            del metadata["annotations"]
        if doc.text is not None:
            doc.text = _strip_text(doc.text, emptied=not annotations)
        key = (origin_text, transformations_text)
        if key not in parsed:
            parsed[key] = _parse_origin(origin_text, transformations_text)
        doc.origin = parsed[key]


# kustomize writes top-level metadata annotations at an indent of four spaces.
_ANNOTATION_TEXT = re.compile(
    r"^    (?:alpha\.)?config\.kubernetes\.io/(?:origin|transformations): \|-?\n(?:      .*\n)*",
    re.MULTILINE,
)
_EMPTY_ANNOTATIONS = re.compile(r"^  annotations:\n(?!   )", re.MULTILINE)


def _strip_text(text: str, emptied: bool) -> str:
    """The document's YAML as kustomize writes it without the build annotations."""
    text = _ANNOTATION_TEXT.sub("", text)
    return _EMPTY_ANNOTATIONS.sub("", text, count=1) if emptied else text


def _parse_origin(origin_text: Any, transformations_text: Any) -> Origin:
    origin = _load(origin_text)
    steps = _load(transformations_text)
    transformations = []
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and isinstance(step.get("configuredIn"), str):
            by = step.get("configuredBy")
            kind = by.get("kind") if isinstance(by, dict) else ""
            transformations.append((step["configuredIn"], str(kind or "")))
    origin = origin if isinstance(origin, dict) else {}
    path = origin.get("path") if isinstance(origin.get("path"), str) else None
    repo = origin.get("repo") if isinstance(origin.get("repo"), str) else None
    return Origin(path=path, repo=repo, transformations=tuple(transformations))


def _load(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return None


# -- paths ---------------------------------------------------------------------------------


def split_path(text: str, obj: Any) -> list[str | int]:
    """Parse `spec.containers[0].env` back into steps, reading keys with dots
    (annotation names) against the object itself."""
    parts: list[str | int] = []
    node, rest = obj, text
    while rest:
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0 or not rest[1:end].isdigit():
                break
            index = int(rest[1:end])
            parts.append(index)
            node = node[index] if isinstance(node, list) and index < len(node) else None
            rest = rest[end + 1 :]
            continue
        rest = rest.removeprefix(".")
        key = None
        if isinstance(node, dict):
            for candidate in node:
                if (
                    isinstance(candidate, str)
                    and rest.startswith(candidate)
                    and rest[len(candidate) : len(candidate) + 1] in ("", ".", "[")
                    and (key is None or len(candidate) > len(key))
                ):
                    key = candidate
        if key is None:
            key = re.match(r"[^.\[]*", rest).group(0)  # type: ignore[union-attr]
            if not key:
                break
        parts.append(key)
        node = node.get(key) if isinstance(node, dict) else None
        rest = rest[len(key) :]
    return parts


def _pointer(path: str) -> list[str | int]:
    """A JSON pointer (`/spec/containers/0/env/-`) as steps; `-` stays a string."""
    steps: list[str | int] = []
    for raw in path.split("/")[1:]:
        step = raw.replace("~1", "/").replace("~0", "~")
        steps.append(int(step) if step.isdigit() else step)
    return steps


def _value_at(obj: Any, parts: list[str | int]) -> Any:
    for step in parts:
        if isinstance(step, str) and isinstance(obj, dict):
            obj = obj.get(step)
        elif isinstance(step, int) and isinstance(obj, list) and step < len(obj):
            obj = obj[step]
        else:
            return None
    return obj


# -- walking YAML nodes alongside the rendered object --------------------------------------


@dataclass
class Walk:
    """How far a field's path got inside one YAML node: its deepest line and steps."""

    complete: bool
    line: int  # 0-based within the text the node was composed from
    steps: list[str | int]  # the path in the file's own terms (its list indices)


def walk(node: yaml.Node, parts: list[str | int], rendered: Any) -> Walk:
    line = node.start_mark.line
    steps: list[str | int] = []
    value = rendered
    for step in parts:
        if isinstance(step, str) and isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == step:
                    line, node = key_node.start_mark.line, value_node
                    break
            else:
                return Walk(False, line, steps)
            value = value.get(step) if isinstance(value, dict) else None
        elif isinstance(step, int) and isinstance(node, yaml.SequenceNode):
            item = value[step] if isinstance(value, list) and step < len(value) else None
            index = _matching_item(node.value, item, step)
            if index is None:
                return Walk(False, line, steps)
            node = node.value[index]
            line, value, step = node.start_mark.line, item, index
        else:
            return Walk(False, line, steps)
        steps.append(step)
    return Walk(True, line, steps)


def _matching_item(items: list[yaml.Node], rendered: Any, index: int) -> int | None:
    """The position in `items` of the rendered list item: by merge key, by value,
    or (lists without keys are replaced whole by patches) by position."""
    if isinstance(rendered, dict):
        for key in MERGE_KEYS:
            wanted = rendered.get(key)
            if isinstance(wanted, str | int) and not isinstance(wanted, bool):
                for position, item in enumerate(items):
                    if _scalar_field(item, key) == str(wanted):
                        return position
                return None
    elif isinstance(rendered, str | int | float | bool):
        text = _scalar_text(rendered)
        for position, item in enumerate(items):
            if isinstance(item, yaml.ScalarNode) and item.value == text:
                return position
        return None
    return index if index < len(items) else None


def _scalar_field(node: yaml.Node, key: str) -> str | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == key and isinstance(value_node, yaml.ScalarNode):
                return value_node.value
    return None


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- sources: files, their documents, the patches of a kustomization ------------------------


@dataclass
class Source:
    """A YAML text with its documents as nodes; `offset` is the line of its first
    line in `file` (non-zero for patches written inline in a kustomization)."""

    file: Path
    documents: list[yaml.Node]
    offset: int = 0


@dataclass
class Patch:
    source: Source
    target: dict[str, Any] | None
    json6902: bool


def _compose(text: str) -> list[yaml.Node]:
    try:
        return [node for node in yaml.compose_all(text, Loader=_Loader) if node is not None]
    except _NODE_ERRORS:
        return []


def _to_python(node: yaml.Node) -> Any:
    try:
        return yaml.load(yaml.serialize(node), Loader=_Loader)
    except _NODE_ERRORS:
        return None


class Placer:
    """Places findings on the files of one rendered kustomization (`root`)."""

    def __init__(self, root: Path):
        self.root = root
        self._sources: dict[Path, Source | None] = {}
        self._patches: dict[Path, list[Patch]] = {}
        self._profiles: dict[Path, Any] = {}

    def place_all(self, findings: list[Finding], documents: list[Document]) -> list[Finding]:
        by_id: dict[str, Document] = {}
        for doc in documents:
            if doc.origin is not None:
                by_id.setdefault(doc.resource_id, doc)
        placed = []
        for finding in findings:
            doc = by_id.get(finding.resource) if finding.file is None else None
            placed.append(self.place(finding, doc) if doc is not None else finding)
        return placed

    def place(self, finding: Finding, doc: Document) -> Finding:
        parts = split_path(finding.path, doc.obj)
        try:
            found = self._locate(doc, parts)
        except (OSError, *_NODE_ERRORS):
            found = None
        if found is None:
            return finding
        file, line, document_index, steps = found
        changes: dict[str, Any] = {"file": display_path(file), "line": line + 1}
        if finding.severity != INFO:  # what to change, for the findings to act on
            changes.update(self._profile_key(file, document_index, steps))
        return dataclasses.replace(finding, **changes)

    def _locate(
        self, doc: Document, parts: list[str | int]
    ) -> tuple[Path, int, int, list[str | int]] | None:
        assert doc.origin is not None
        base = self._base_walk(doc, parts)
        rendered = _value_at(doc.obj, parts)
        # A field that holds a whole mapping or list is the base's when the base has it;
        # a value (or a field that does not exist, like a misspelt key) is the last
        # writer's.
        if base is not None and base[1].complete and isinstance(rendered, dict | list):
            return base[0].file, base[0].offset + base[1].line, base[2], base[1].steps
        for kfile, kind in _last_first(doc.origin.transformations):
            path = self._resolve(kfile)
            if path is None:
                continue
            if kind in PATCH_TRANSFORMERS:
                for patch in reversed(self._kustomization_patches(path)):
                    hit = self._patch_walk(patch, doc, parts)
                    if hit is not None:
                        return patch.source.file, patch.source.offset + hit[0], hit[1], hit[2]
            elif kind == "ImageTagTransformer" and parts and parts[-1] == "image":
                hit = self._image_entry(path, rendered)
                if hit is not None:
                    return path, hit[0], 0, hit[1]
            elif kind == "NamespaceTransformer" and parts == ["metadata", "namespace"]:
                hit = self._top_key(path, "namespace")
                if hit is not None:
                    return path, hit, 0, ["namespace"]
        if base is not None:
            return base[0].file, base[0].offset + base[1].line, base[2], base[1].steps
        return None

    def _resolve(self, relative: str) -> Path | None:
        path = Path(os.path.normpath(self.root / relative))
        return path if path.is_file() else None

    def _source(self, path: Path) -> Source | None:
        if path not in self._sources:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                text = ""
            documents = _compose(text)
            self._sources[path] = Source(path, documents) if documents else None
        return self._sources[path]

    def _base_walk(self, doc: Document, parts: list[str | int]) -> tuple[Source, Walk, int] | None:
        assert doc.origin is not None
        if doc.origin.path is None or doc.origin.repo is not None:
            return None
        path = self._resolve(doc.origin.path)
        source = self._source(path) if path is not None else None
        if source is None:
            return None
        index = _pick_document(source.documents, doc, None)
        if index is None:
            return None
        return source, walk(source.documents[index], parts, doc.obj), index

    def _patch_walk(
        self, patch: Patch, doc: Document, parts: list[str | int]
    ) -> tuple[int, int, list[str | int]] | None:
        if patch.target is not None and not _selected(patch.target, doc, self._base_name(doc)):
            return None
        if patch.json6902:
            return self._json6902_walk(patch, doc, parts)
        index = _pick_document(patch.source.documents, doc, self._base_name(doc), patch.target)
        if index is None:
            return None
        found = walk(patch.source.documents[index], parts, doc.obj)
        return (found.line, index, found.steps) if found.complete else None

    def _json6902_walk(
        self, patch: Patch, doc: Document, parts: list[str | int]
    ) -> tuple[int, int, list[str | int]] | None:
        operations = patch.source.documents[0]
        if not isinstance(operations, yaml.SequenceNode):
            return None
        for position in reversed(range(len(operations.value))):
            node = operations.value[position]
            op = _to_python(node)
            if not isinstance(op, dict) or op.get("op") not in ("add", "replace", "copy", "move"):
                continue
            pointer = _pointer(str(op.get("path", "")))
            if len(pointer) > len(parts) or not all(
                want == got or (want == "-" and isinstance(got, int))
                for want, got in zip(pointer, parts, strict=False)
            ):
                continue
            rest = parts[len(pointer) :]
            found = walk(node, ["value", *rest], {"value": _value_at(doc.obj, pointer)})
            if found.steps:
                return found.line, 0, [position, *found.steps]
            return node.start_mark.line, 0, [position]
        return None

    def _base_name(self, doc: Document) -> str:
        """The object's name in its own file (before prefixes and renames)."""
        base = self._base_walk(doc, ["metadata", "name"])
        if base is None or not base[1].complete:
            return doc.name
        node = base[0].documents[base[2]]
        value = _to_python(node)
        name = value.get("metadata", {}).get("name") if isinstance(value, dict) else None
        return name if isinstance(name, str) else doc.name

    def _kustomization_patches(self, kfile: Path) -> list[Patch]:
        if kfile not in self._patches:
            self._patches[kfile] = list(self._read_patches(kfile))
        return self._patches[kfile]

    def _read_patches(self, kfile: Path) -> Iterable[Patch]:
        source = self._source(kfile)
        if source is None or not isinstance(source.documents[0], yaml.MappingNode):
            return
        fields = {key.value: value for key, value in source.documents[0].value}
        for name in ("patchesStrategicMerge", "patches", "patchesJson6902"):
            entries = fields.get(name)
            if not isinstance(entries, yaml.SequenceNode):
                continue
            for entry in entries.value:
                patch = self._read_patch(kfile, entry, force_json=name == "patchesJson6902")
                if patch is not None:
                    yield patch

    def _read_patch(self, kfile: Path, entry: yaml.Node, force_json: bool) -> Patch | None:
        target = None
        content: yaml.Node | None = entry
        if isinstance(entry, yaml.MappingNode):
            fields = {key.value: value for key, value in entry.value}
            spec = _to_python(entry)
            target = spec.get("target") if isinstance(spec, dict) else None
            target = target if isinstance(target, dict) else None
            content = fields.get("path") or fields.get("patch")
            inline = "patch" in fields and "path" not in fields
        else:
            inline = isinstance(entry, yaml.ScalarNode) and "\n" in entry.value
        if not isinstance(content, yaml.ScalarNode):
            return None
        if inline:
            offset = content.start_mark.line + (1 if content.style in ("|", ">") else 0)
            documents = _compose(content.value)
            source = Source(kfile, documents, offset) if documents else None
        else:
            path = Path(os.path.normpath(kfile.parent / content.value))
            source = self._source(path) if path.is_file() else None
        if source is None:
            return None
        json6902 = force_json or isinstance(source.documents[0], yaml.SequenceNode)
        return Patch(source, target, json6902)

    def _image_entry(self, kfile: Path, image: Any) -> tuple[int, list[str | int]] | None:
        source = self._source(kfile)
        if source is None or not isinstance(image, str):
            return None
        images = walk(source.documents[0], ["images"], None)
        if not images.complete:
            return None
        spec = _to_python(source.documents[0]) or {}
        for index, entry in enumerate(spec.get("images") or []):
            if not isinstance(entry, dict):
                continue
            names = [entry.get("newName"), entry.get("name")]
            if any(isinstance(n, str) and image.startswith(n) for n in names):
                for key in ("digest", "newTag", "newName"):
                    if key in entry:
                        found = walk(source.documents[0], ["images", index, key], spec)
                        return found.line, found.steps
        return None

    def _top_key(self, kfile: Path, key: str) -> int | None:
        source = self._source(kfile)
        if source is None:
            return None
        found = walk(source.documents[0], [key], None)
        return found.line if found.complete else None

    # -- profiles ---------------------------------------------------------------------------

    def _profile_key(self, file: Path, document: int, steps: list[str | int]) -> dict[str, Any]:
        """The cluster.yaml key that generated `file`'s field, if the file is generated."""
        try:
            with file.open(errors="replace") as handle:
                generated = handle.readline().startswith(GENERATED_HEADER)
        except OSError:
            return {}
        cluster = next((d for d in file.parents if (d / "cluster.yaml").is_file()), None)
        if not generated or cluster is None:
            return {}
        from trainops.profile.provenance import generated_by, key_line

        profile_file = cluster / "cluster.yaml"
        if profile_file not in self._profiles:
            from trainops.errors import InputError
            from trainops.profile.model import load_profile

            try:
                self._profiles[profile_file] = load_profile(profile_file)
            except InputError:
                self._profiles[profile_file] = None
        profile = self._profiles[profile_file]
        if profile is None:
            return {}
        key = generated_by(profile, file.relative_to(cluster).as_posix(), document, steps)
        if key is None:
            return {}
        line = key_line(profile_file.read_text(errors="replace"), key)
        return {
            "profile_key": key,
            "profile_file": display_path(profile_file),
            "profile_line": line,
        }


def _last_first(transformations: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Each (kustomization, transformer kind) once, the last applied first."""
    return list(dict.fromkeys(reversed(transformations)))


def _pick_document(
    documents: list[yaml.Node],
    doc: Document,
    base_name: str | None,
    target: dict[str, Any] | None = None,
) -> int | None:
    """Which document of a file describes `doc`: same kind, then same name."""
    same_kind = []
    for index, node in enumerate(documents):
        if not isinstance(node, yaml.MappingNode):
            continue
        fields = {key.value: value for key, value in node.value}
        kind = fields.get("kind")
        if isinstance(kind, yaml.ScalarNode) and kind.value == doc.kind:
            name = walk(node, ["metadata", "name"], None)
            value = _scalar_field(fields.get("metadata"), "name") if name.complete else None
            same_kind.append((index, value))
    if target is not None:  # a targeted patch's own name does not matter
        return same_kind[0][0] if same_kind else None
    names = {doc.name, base_name}
    for index, name in same_kind:
        if name in names:
            return index
    if base_name is None:  # the resource's own file: a prefixed or suffixed name
        for index, name in same_kind:
            if name and name in doc.name:
                return index
        return same_kind[0][0] if len(same_kind) == 1 else None
    return None


def _selected(target: dict[str, Any], doc: Document, base_name: str) -> bool:
    """Whether a patch's target selector picks `doc` (kustomize's selector semantics:
    kind, group and version exact; name and namespace anchored regular expressions)."""
    group, _, version = doc.api_version.rpartition("/")
    exact = {"kind": doc.kind, "group": group, "version": version}
    for key, actual in exact.items():
        if target.get(key) not in (None, "", actual):
            return False
    for key, actuals in (("name", (doc.name, base_name)), ("namespace", (doc.namespace,))):
        wanted = target.get(key)
        if wanted in (None, ""):
            continue
        try:
            if not any(re.fullmatch(str(wanted), a) for a in actuals):
                return False
        except re.error:
            if str(wanted) not in actuals:
                return False
    labels = doc.metadata.get("labels")
    annotations = doc.metadata.get("annotations")
    return _matches(target.get("labelSelector"), labels) and _matches(
        target.get("annotationSelector"), annotations
    )


def _matches(selector: Any, values: Any) -> bool:
    """Equality-based label selectors (`a=b,c!=d,e,!f`); anything else matches."""
    if not isinstance(selector, str) or not selector.strip():
        return True
    values = values if isinstance(values, dict) else {}
    for term in selector.split(","):
        term = term.strip()
        if "!=" in term:
            key, wanted = (part.strip() for part in term.split("!=", 1))
            if str(values.get(key)) == wanted:
                return False
        elif "=" in term:
            key, wanted = (part.strip() for part in term.replace("==", "=").split("=", 1))
            if str(values.get(key)) != wanted:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in values:
                return False
        elif " " not in term and term not in values:
            return False
    return True
