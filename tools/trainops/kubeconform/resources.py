"""Files, documents and resources as kubeconform finds them.

Folders are walked in name order (symbolic links to folders are not followed); a file
is read when its name ends in .yaml, .yml or .json, named or found, unless a
`-ignore-filename-pattern` matches its path. A stream is cut at every line starting
with `---` (the rest of that line is dropped), each piece is one resource, and a
resource of kind `List` stands for its items. A file with no resource still counts
as one empty result; on stdin every piece is a result, blank ones included.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.kubeyaml.load import load_document
from trainops.kubeyaml.reader import LAST_WINS, STRICT, YamlProblem

MAX_BYTES = 256 * 2**20
"""kubeconform's own bound (its largest document); trainops validate stops at 16 MiB."""


@dataclass
class Resource:
    path: str
    obj: dict[str, Any] | None = None  # None: empty, or `error` says why there is none
    error: str = ""
    kind: str = ""
    version: str = ""
    namespace: str = ""
    name: str = ""


def split_stream(text: str) -> list[str]:
    """Pieces of a stream cut at `\\n---`, the rest of each separator line dropped."""
    pieces = []
    position = 0
    while True:
        found = text.find("\n---", position)
        if found < 0:
            if position < len(text):
                pieces.append(text[position:])
            return pieces
        pieces.append(text[position:found])
        end = text.find("\n", found + 4)
        if end < 0:
            return pieces
        position = end + 1


def find_files(paths: list[str], ignore: list[str]) -> Iterator[tuple[str, str]]:
    """(path, error) for every file to read; error is set when a path cannot be walked."""
    try:
        patterns = [re.compile(pattern) for pattern in ignore]
    except re.error as exc:
        for path in paths:
            yield path, f"error parsing regexp: {exc}"
        return
    for root in paths:
        yield from _walk(root, patterns)


def _walk(root: str, patterns: list[re.Pattern[str]]) -> Iterator[tuple[str, str]]:
    pending = [root]
    while pending:
        path = pending.pop()
        try:
            info = os.lstat(path)
        except OSError as exc:
            yield path, f"lstat {path}: {_go_error(exc)}"
            return
        if stat.S_ISDIR(info.st_mode):
            try:
                names = sorted(os.listdir(path), reverse=True)
            except OSError as exc:
                yield root, f"open {path}: {_go_error(exc)}"
                return
            pending.extend(os.path.normpath(os.path.join(path, name)) for name in names)
        elif path.lower().endswith((".yaml", ".yml", ".json")) and not any(
            pattern.search(path) for pattern in patterns
        ):
            yield path, ""


def _go_error(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def read_file(path: str) -> tuple[str | None, str]:
    """(text, error) of a manifest file, bounded like every input of trainops."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        return None, f"open {path}: {_go_error(exc)}"
    return decode(data)


def decode(data: bytes) -> tuple[str | None, str]:
    if len(data) > MAX_BYTES:
        return None, f"over the {MAX_BYTES // 2**20} MiB limit for a manifest"
    try:
        return data.decode("utf-8").removeprefix("\ufeff"), ""
    except UnicodeDecodeError:
        return None, "yaml: invalid leading UTF-8 octet"


def resources_of(path: str, text: str, strict: bool, stdin: bool) -> list[Resource]:
    found: list[Resource] = []
    for piece in split_stream(text):
        if not piece and not stdin:
            continue
        found.extend(_resources(path, piece, strict))
    if not found and not stdin:
        found.append(Resource(path))
    return found


def _resources(path: str, text: str, strict: bool) -> list[Resource]:
    if not text:
        return [Resource(path)]
    try:
        obj = load_document(text, LAST_WINS)
    except YamlProblem as problem:
        return [Resource(path, error=_unmarshal_error(problem))]
    resource = _with_signature(Resource(path), obj)
    if resource.error or not resource.kind or resource.kind.lower() != "list":
        if strict and not resource.error and obj is not None:
            try:
                load_document(text, STRICT)
            except YamlProblem as problem:
                resource.error = _unmarshal_error(problem)
        return [resource]
    items = obj.get("items") if isinstance(obj.get("items"), list) else []
    return [_with_signature(Resource(path), item) for item in items]


def _with_signature(resource: Resource, obj: Any) -> Resource:
    if obj is None:
        return resource
    if not isinstance(obj, dict):
        resource.error = (
            "error unmarshalling resource: error unmarshaling JSON: while decoding JSON: "
            f"json: cannot unmarshal {_json_type(obj)} into Go value of type "
            "map[string]interface {}"
        )
        return resource
    resource.obj = obj
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    resource.kind = _text(obj.get("kind"))
    resource.version = _text(obj.get("apiVersion"))
    resource.namespace = _text(metadata.get("namespace"))
    resource.name = _text(metadata.get("name"))
    if isinstance(metadata.get("generateName"), str):
        resource.name = metadata["generateName"] + "{{ generateName }}"
    if not resource.kind:
        resource.error = "error while parsing: missing 'kind' key"
    elif not resource.version:
        resource.error = "error while parsing: missing 'apiVersion' key"
    return resource


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "array" if isinstance(value, list) else "string"


def _unmarshal_error(problem: YamlProblem) -> str:
    where = f"line {problem.line + 1}: " if problem.line is not None else ""
    return f"error unmarshalling resource: error converting YAML to JSON: yaml: {where}{problem}"
