"""Reads YAML streams into Documents: the cluster's reading, with line numbers.

Each document is decoded as kubectl, Argo CD and kubeconform decode it
(sigs.k8s.io/yaml: YAML 1.1 scalars, merge keys, see `trainops.kubeyaml`); what they
would refuse, deep nesting and alias bombs become one-line input errors naming the
file and line. A key written twice in one mapping is an input error too, unless the
caller asks for the repeated keys (`repeated`): then the last value wins, as kubectl
reads it, and each repetition is handed back with its lines. Locating the line of a
field for a finding re-reads the document's text and is only paid for when a finding
exists.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from trainops.errors import InputError
from trainops.kubeyaml.load import load_document
from trainops.kubeyaml.reader import (
    LAST_WINS,
    REFUSE,
    RepeatedKey,
    SyntaxProblem,
    YamlProblem,
    first_definition_line,
)
from trainops.kubeyaml.scalars import ScalarError, key_string, resolve_plain
from trainops.model import Document

MAX_FILE_BYTES = 16 * 1024 * 1024
_SEPARATOR = re.compile(r"^(---|\.\.\.)(?=[ \t\r]|$)", re.MULTILINE)
_LIST_KIND = re.compile(r"^[A-Za-z]*List$")


@dataclass(frozen=True)
class RepeatedKeyAt:
    """A key written twice in one mapping of a stream: 1-based lines in the stream."""

    key: str
    line: int  # the second writing, whose value is kept
    first_line: int | None
    path: tuple[str | int, ...]
    resource: str  # Kind/namespace/name of the document, as far as it says


def split_documents(text: str) -> list[tuple[int, str]]:
    """Split a YAML stream into (first line, text) per document.

    The first line is the first line holding content, and the text starts
    there, so line numbers found inside the text only need an offset.
    Document markers at column 0 always end a document in YAML, even inside
    block scalars, which makes this textual split exact.
    """
    chunks: list[tuple[int, str]] = []
    pending = ""  # directives (%YAML) that belong to the next document
    position, line = 0, 1
    for match in _SEPARATOR.finditer(text):
        _add_chunk(chunks, pending + text[position : match.start()], line)
        pending = ""
        line += text.count("\n", position, match.start())
        if match.group(1) == "...":
            end = text.find("\n", match.start())
            position = len(text) if end < 0 else end + 1
            line += 1
        else:
            position = match.start()
    _add_chunk(chunks, pending + text[position:], line)
    return chunks


def _add_chunk(chunks: list[tuple[int, str]], chunk: str, line: int) -> None:
    offset = 0
    for raw in chunk.splitlines(keepends=True):
        stripped = raw.strip()
        if stripped and not stripped.startswith("#") and stripped != "---":
            break
        offset += len(raw)
        line += 1
    else:
        return  # only markers, comments and blank lines: an empty document
    chunks.append((line, chunk[offset:]))


def read_text(path: str | os.PathLike[str], max_bytes: int = MAX_FILE_BYTES) -> str:
    """Read a manifest file as text, refusing binaries and oversized files."""
    shown = str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError("no such file or directory", shown) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", shown) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError("not a regular file (a FIFO, socket or device)", shown)
        if info.st_size > max_bytes:
            raise InputError(
                f"file is {info.st_size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB "
                "limit for a manifest (raise it with --max-file-size)",
                shown,
            )
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", shown) from None
    if len(data) > max_bytes:  # it grew after fstat
        raise InputError(f"file grew over the {max_bytes / 2**20:.0f} MiB limit", shown)
    return decode(data, shown)


def decode(data: bytes, where: str) -> str:
    if b"\x00" in data[:8192] or b"\x00" in data:
        raise InputError("binary file (contains NUL bytes), not YAML", where)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x})", where, line
        ) from None
    return text.removeprefix("\ufeff")


def load_documents(
    text: str,
    source: str,
    file: str | None = None,
    keep_text: bool = False,
    duplicates: str = REFUSE,
    repeated: list[RepeatedKeyAt] | None = None,
) -> list[Document]:
    """Parse a YAML stream into Documents.

    `file` names the file the text came from (None for kustomize output,
    whose lines mean nothing to the user); `keep_text` keeps each document's
    YAML so findings can later point at a line; `duplicates` says what a key
    written twice means (see trainops.kubeyaml.reader). A `repeated` list
    receives every key written twice, read LAST_WINS whatever `duplicates` says.
    """
    where = file or source
    documents: list[Document] = []
    found: list[RepeatedKey] | None = [] if repeated is not None else None
    if repeated is not None:
        duplicates = LAST_WINS
    with cycle_collection_paused():
        for line, chunk in split_documents(text):
            obj = parse_document(chunk, line, where, duplicates, found)
            if found and repeated is not None:
                repeated.extend(_repeated_at(found, chunk, line, obj))
                found.clear()
            if obj is None:
                continue
            for item in _expand_lists(obj, where, line):
                documents.append(
                    Document(
                        obj=item,
                        source=source,
                        file=file,
                        line=line if file else None,
                        text=chunk if keep_text and item is obj else None,
                    )
                )
    return documents


@contextlib.contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Parsed documents are trees: the cyclic collector would scan them for nothing,
    again and again as they pile up (a third of the time of a 10,000-document stream),
    and again while the policy pack reads them (a third of its time at that size)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def kept_objects_set_aside() -> Iterator[Callable[[], None]]:
    """A `set_aside()` that takes every object alive now out of the cyclic collector's
    scans until the block ends.

    Results that pile up over a run (a report per target, one entry per resource)
    would otherwise be scanned again by every full collection: at 100,000 resources
    that was a quarter of the run. Reference counting still frees what is dropped.
    """
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


def _repeated_at(
    found: list[RepeatedKey], chunk: str, first_line: int, obj: Any
) -> Iterator[RepeatedKeyAt]:
    resource = ""
    if isinstance(obj, dict):
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        parts = (obj.get("kind"), meta.get("namespace"), meta.get("name"))
        resource = "/".join(part if isinstance(part, str) else "" for part in parts)
    for item in found:
        first = first_definition_line(chunk, item.key, item.line)
        yield RepeatedKeyAt(
            key=item.key,
            line=first_line + item.line,
            first_line=first_line + first if first is not None else None,
            path=item.path,
            resource=resource,
        )


def parse_document(
    chunk: str,
    first_line: int,
    where: str,
    duplicates: str = REFUSE,
    repeated: list[RepeatedKey] | None = None,
) -> Any:
    """One document's data, or an InputError naming `where` and the line at fault."""
    try:
        return load_document(chunk, duplicates, repeated)
    except YamlProblem as problem:
        raise input_error(problem, chunk, first_line, where) from None


def _expand_lists(obj: Any, where: str, line: int) -> Iterator[dict[str, Any]]:
    if not isinstance(obj, dict):
        kind = type(obj).__name__.replace("str", "string").replace("dict", "mapping")
        raise InputError(
            f"document is a {kind}, not a mapping: every document must be a Kubernetes object",
            where,
            line,
        )
    for key in ("apiVersion", "kind"):
        value = obj.get(key)
        if not isinstance(value, str) or not value:
            problem = f"no '{key}'" if value in (None, "") else f"a '{key}' that is not a string"
            raise InputError(
                f"document has {problem}: every object needs apiVersion and kind", where, line
            )
    if _LIST_KIND.match(obj["kind"]) and isinstance(obj.get("items"), list):
        for item in obj["items"]:
            yield from _expand_lists(item, where, line)
        return
    yield obj


def input_error(problem: YamlProblem, chunk: str, first_line: int, where: str) -> InputError:
    """A one-line error with the exact line for a document the reader refused."""
    line = first_line + problem.line if problem.line is not None else first_line
    if isinstance(problem, SyntaxProblem):
        exc = problem.error
        content = [i for i, text in enumerate(chunk.splitlines()) if text.strip()]
        if content and problem.line is not None and problem.line > content[-1]:
            # Something left open (a bracket, a quote) and the parser ran to the end:
            # blame the last line with content or where the open construct started.
            candidates = [content[-1]]
            if exc.context_mark is not None:
                candidates.append(exc.context_mark.line)
            line = first_line + min(candidates)
        return InputError(_describe_yaml_error(exc, chunk), where, line)
    if problem.kind == "duplicate":
        first = first_definition_line(chunk, problem.key, problem.line)
        defined = f" (first defined on line {first_line + first})" if first is not None else ""
        return InputError(f"duplicate key '{problem.key}'{defined}", where, line)
    return InputError(problem.message, where, line)


def _describe_yaml_error(exc: yaml.MarkedYAMLError, chunk: str) -> str:
    problem = exc.problem or "invalid YAML"
    mark = exc.problem_mark
    if "'\\t'" in problem:
        return "tab character in indentation: YAML indents with spaces only"
    if mark is not None:
        lines = chunk.splitlines()
        if mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]:
            return "tab character in indentation: YAML indents with spaces only"
    context = f"{exc.context}: " if exc.context else ""
    return f"invalid YAML: {context}{problem}"


def locate(text: str, path: tuple[str | int, ...], key: str | None = None) -> int | None:
    """0-based line of `path` (or of `key` inside it) in a document's YAML text."""
    try:
        node = yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return None
    line = node.start_mark.line if node is not None else None
    steps = [*path, key] if key is not None else list(path)
    for step in steps:
        if isinstance(node, yaml.MappingNode) and isinstance(step, str):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and _key_of(key_node) == step:
                    line = key_node.start_mark.line
                    node = value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            if step >= len(node.value):
                return line
            node = node.value[step]
            line = node.start_mark.line
        else:
            return line
    return line


def _key_of(node: yaml.ScalarNode) -> str:
    if node.style:  # quoted or block: the text is the key
        return node.value
    try:
        return key_string(resolve_plain(node.value))
    except ScalarError:
        return node.value


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings as literal blocks (`|-`), as people write them."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_BlockDumper.add_representer(str, _represent_str)


def dump(obj: Any) -> str:
    """Block-style YAML in key order, as kustomize writes it."""
    return yaml.dump(
        obj, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False, width=1_000_000
    )


def load_yaml_mapping(text: str, where: str) -> dict[str, Any]:
    """Parse a one-document YAML file (kustomization, profile, config) strictly."""
    chunks = split_documents(text)
    if not chunks:
        return {}
    if len(chunks) > 1:
        raise InputError(f"expected one YAML document, found {len(chunks)}", where, chunks[1][0])
    line, chunk = chunks[0]
    obj = parse_document(chunk, line, where)
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise InputError("expected a mapping at the top level", where, line)
    return obj
