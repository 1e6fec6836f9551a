"""Builds one YAML document from libyaml's events, decoded as go-yaml v2 decodes it.

The document is built from the event stream with an explicit stack, so nesting
costs no recursion. Beyond the scalar rules in `scalars`, go-yaml v2 decoding means:
- merge keys: a plain `<<` key (or one tagged `!!merge`) merges a mapping, an alias
  to one, or a sequence of them (earlier ones win) into the mapping, at its place in
  key order, so a key written after `<<` overrides and one written before is
  overridden; in strict decoding any key set twice is an error;
- aliases decode the anchored node again (here: a copy), an anchor may be redefined,
  and an alias inside its own anchor is an error;
- alias expansion is bounded by go-yaml's ratio: once more than 100 decoded nodes
  come from aliases and more than 1,000 nodes are decoded, at most 99% of them may
  come from aliases (down to 10% between 400,000 and 4,000,000 nodes);
- complex keys (a mapping or sequence as a key) are refused; other keys become JSON
  strings (`yes:` is the key "true").
go-yaml refuses more than 10,000 nested levels; documents here stop at MAX_DEPTH,
far beyond any Kubernetes object, because every consumer of a document walks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yaml import MarkedYAMLError
from yaml._yaml import CParser
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.reader import ReaderError

from trainops.kubeyaml.scalars import (
    MERGE_TAG,
    NUMERIC_START,
    SPECIAL,
    ScalarError,
    json_value_problem,
    key_string,
    resolve_plain,
    resolve_tagged,
)

MAX_DEPTH = 256
REFUSE, LAST_WINS, STRICT = "refuse", "last-wins", "strict"
"""Duplicate keys: REFUSE a key written twice in one mapping (keys merged with `<<`
may be overridden); LAST_WINS as go-yaml's Unmarshal; STRICT as its UnmarshalStrict,
which also refuses a key set both by a merge and by the mapping."""


@dataclass(frozen=True)
class RepeatedKey:
    """A key written twice in one mapping, read LAST_WINS; `line` (0-based) is the
    second writing, `path` the keys and indexes down to it (the key included)."""

    key: str
    line: int
    path: tuple[str | int, ...]


_NO_KEY = object()
_MERGE = object()


class YamlProblem(ValueError):
    """A document the cluster's decoder refuses. `line` is 0-based within the text."""

    def __init__(self, message: str, line: int | None, kind: str = "invalid", key: str = ""):
        super().__init__(message)
        self.message = message
        self.line = line
        self.kind = kind  # "syntax", "duplicate", "alias", "depth" or "invalid"
        self.key = key  # the key set twice, for "duplicate"


class SyntaxProblem(YamlProblem):
    def __init__(self, error: MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        super().__init__(str(error.problem or error), mark.line if mark else None, "syntax")
        self.error = error


def allowed_alias_ratio(decoded: int) -> float:
    if decoded <= 400_000:
        return 0.99
    if decoded >= 4_000_000:
        return 0.10
    return 0.99 - 0.89 * (decoded - 400_000) / 3_600_000


def load_first_document(
    text: str, duplicates: str = REFUSE, repeated: list[RepeatedKey] | None = None
) -> Any:
    """The first document of `text` as plain Python data (None when it is empty).

    Raises YamlProblem for what the cluster would refuse and SyntaxProblem for text
    that is not YAML at all. With LAST_WINS, `repeated` (when given) receives every key
    written twice in one mapping (a key a merge set and the mapping overrides is none).
    """
    try:
        return _Builder(duplicates, repeated).build(CParser(text))
    except MarkedYAMLError as exc:
        # libyaml from 0.2.6 (PyYAML 6.0.4) stops at 1,000 levels in its scanner, which
        # reads a line's tokens ahead of the events, so a deep line ends here, not at MAX_DEPTH.
        if exc.problem == "exceeded maximum nesting depth":
            mark = exc.problem_mark or exc.context_mark
            raise _too_deep(mark.line if mark else None) from None
        raise SyntaxProblem(exc) from None
    except ReaderError as exc:
        line = text.count("\n", 0, exc.position)
        raise YamlProblem(
            f"unacceptable character #x{exc.character:04x}: control characters are not allowed",
            line,
            "syntax",
        ) from None


def alias_bomb_line(text: str) -> int | None:
    """The 0-based line where a document of `text` passes go-yaml's alias-expansion bound
    (as `_Builder` counts it), or None: counted on libyaml's events, nothing is built, so
    a bomb costs its own size. Text libyaml cannot parse is someone else's error (None)."""
    anchors: dict[str, int] = {}
    frames: list[list[Any]] = []  # [anchor, nodes] of each open collection
    decoded = from_aliases = 0
    try:
        for event in _events(text):
            kind = event.__class__
            if kind is DocumentStartEvent:
                anchors, frames, decoded, from_aliases = {}, [], 0, 0
            elif kind is AliasEvent:
                nodes = anchors.get(event.anchor, 0)
                decoded += 1 + nodes
                from_aliases += nodes
                if frames:
                    frames[-1][1] += 1 + nodes
                if (
                    from_aliases > 100
                    and decoded > 1000
                    and from_aliases / decoded > allowed_alias_ratio(decoded)
                ):
                    return event.start_mark.line
            elif kind is ScalarEvent:
                decoded += 1
                if event.anchor:
                    anchors[event.anchor] = 1
                if frames:
                    frames[-1][1] += 1
            elif kind in (SequenceStartEvent, MappingStartEvent):
                decoded += 1
                frames.append([event.anchor, 1])
            elif kind in (SequenceEndEvent, MappingEndEvent) and frames:
                anchor, nodes = frames.pop()
                if anchor:
                    anchors[anchor] = nodes
                if frames:
                    frames[-1][1] += nodes
    except (MarkedYAMLError, ReaderError):
        return None
    return None


def _too_deep(line: int | None) -> YamlProblem:
    return YamlProblem(
        f"nesting deeper than {MAX_DEPTH} levels: no Kubernetes object is that deep (a YAML bomb?)",
        line,
        "depth",
    )


def _is_merge_key(event: ScalarEvent) -> bool:
    return (event.tag is None and event.implicit[0]) or event.tag == MERGE_TAG


class _Builder:
    def __init__(self, duplicates: str, repeated: list[RepeatedKey] | None = None):
        self.duplicates = duplicates
        self.repeated = repeated
        self.stack: list[list[Any]] = []
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # name -> (value, nodes, depth)
        self.open_anchors: set[str] = set()
        self.decoded = 1  # the document node
        self.from_aliases = 0
        self.explicit_keys: dict[int, set[str]] = {}  # mappings that had a merge

    def build(self, parser: CParser) -> Any:
        get_event = parser.get_event
        special, numeric_start = SPECIAL, NUMERIC_START
        # [container, key, key line, anchor, decoded at start] per open collection
        stack: list[list[Any]] = self.stack
        container: Any = None
        key: Any = _NO_KEY
        key_line = 0
        root: Any = None
        while True:
            event = get_event()
            cls = event.__class__
            if cls is ScalarEvent:
                self.decoded += 1
                text = event.value
                tag = event.tag
                if tag is None and event.implicit[0]:
                    value = special.get(text, text)
                    if value is text and text[:1] in numeric_start:
                        value = resolve_plain(text)
                elif tag is None:
                    value = text
                else:
                    try:
                        value = resolve_tagged(tag, text)
                    except ScalarError as exc:
                        raise YamlProblem(str(exc), event.start_mark.line) from None
                is_key = key is _NO_KEY and container.__class__ is dict
                if value.__class__ is float and not is_key and json_value_problem(value):
                    raise YamlProblem(
                        f"{text} cannot be converted to JSON (unsupported value "
                        f"{json_value_problem(value)}): quote it to keep it a string",
                        event.start_mark.line,
                    )
                if event.anchor is not None:
                    self.anchors[event.anchor] = (value, 1, 0)
            elif cls is MappingStartEvent or cls is SequenceStartEvent:
                self.decoded += 1
                if len(stack) >= MAX_DEPTH:
                    raise _too_deep(event.start_mark.line)
                if key is _MERGE:
                    self.decoded -= cls is SequenceStartEvent  # go-yaml walks it, not decodes
                anchor = event.anchor
                if anchor is not None:
                    self.open_anchors.add(anchor)
                stack.append([container, key, key_line, anchor, self.decoded])
                container = {} if cls is MappingStartEvent else []
                key = _NO_KEY
                continue
            elif cls is MappingEndEvent or cls is SequenceEndEvent:
                value = container
                container, key, key_line, anchor, decoded_at_start = stack.pop()
                if anchor is not None:
                    self._close_anchor(anchor, value, decoded_at_start)
            elif cls is AliasEvent:
                value = self._alias(event, len(stack))
            elif cls is DocumentEndEvent or cls is StreamEndEvent:
                return root
            else:
                continue  # stream and document start
            if container is None:
                root = value
            elif container.__class__ is list:
                container.append(value)
            elif key is _NO_KEY:
                if value.__class__ is not str:
                    value = self._key(value, event)
                elif value == "<<" and cls is ScalarEvent and _is_merge_key(event):
                    self.decoded -= 1  # go-yaml does not decode the merge key itself
                    value = _MERGE
                key = value
                key_line = event.start_mark.line
            else:
                if key is _MERGE:
                    self._merge(container, value, key_line)
                elif key in container or self.explicit_keys:
                    self._set_again(container, key, value, key_line)
                else:
                    container[key] = value
                key = _NO_KEY

    def _key(self, value: Any, event: Any) -> str:
        if isinstance(value, dict | list):
            raise YamlProblem("a mapping or sequence cannot be a key", event.start_mark.line)
        try:
            return key_string(value)
        except ScalarError as exc:
            raise YamlProblem(str(exc), event.start_mark.line) from None

    def _set_again(self, mapping: dict[str, Any], key: str, value: Any, line: int) -> None:
        """Assign a key when the mapping already has it or some mapping had a merge."""
        explicit = self.explicit_keys.get(id(mapping))
        if key in mapping:
            merged_only = explicit is not None and key not in explicit
            if self.duplicates == STRICT or (self.duplicates == REFUSE and not merged_only):
                raise YamlProblem(f"key {key!r} already set in map", line, "duplicate", key)
            if self.repeated is not None and not merged_only:
                self.repeated.append(RepeatedKey(key, line, (*self._path(), key)))
        if explicit is not None:
            explicit.add(key)
        mapping[key] = value

    def _path(self) -> tuple[str | int, ...]:
        """Keys and indexes from the root down to the mapping being built."""
        path: list[str | int] = []
        for parent, key, *_ in self.stack[1:]:
            if parent.__class__ is list:
                path.append(len(parent))
            else:
                path.append("<<" if key is _MERGE else key)
        return tuple(path)

    def _merge(self, mapping: dict[str, Any], value: Any, line: int) -> None:
        sources = list(reversed(value)) if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise YamlProblem("map merge requires map or sequence of maps as the value", line)
        if id(mapping) not in self.explicit_keys:
            self.explicit_keys[id(mapping)] = set(mapping)
        for source in sources:
            for key, item in source.items():
                if self.duplicates == STRICT and key in mapping:
                    raise YamlProblem(f"key {key!r} already set in map", line, "duplicate", key)
                mapping[key] = item

    def _alias(self, event: Any, depth: int) -> Any:
        name = event.anchor
        if name in self.open_anchors:
            raise YamlProblem(
                f"anchor '{name}' value contains itself", event.start_mark.line, "alias"
            )
        if name not in self.anchors:
            raise YamlProblem(f"unknown anchor '{name}' referenced", event.start_mark.line)
        value, nodes, nested = self.anchors[name]
        self.decoded += 1 + nodes
        self.from_aliases += nodes
        if (
            self.from_aliases > 100
            and self.decoded > 1000
            and self.from_aliases / self.decoded > allowed_alias_ratio(self.decoded)
        ):
            raise YamlProblem(
                "alias expansion limit exceeded (nested anchors multiply into a huge "
                "document: a 'billion laughs' alias bomb?)",
                event.start_mark.line,
                "alias",
            )
        if depth + nested > MAX_DEPTH:
            raise YamlProblem(
                f"nesting deeper than {MAX_DEPTH} levels through alias '{name}'",
                event.start_mark.line,
                "depth",
            )
        return _copy(value) if nested else value

    def _close_anchor(self, name: str, value: Any, decoded_at_start: int) -> None:
        self.open_anchors.discard(name)
        self.anchors[name] = (value, self.decoded - decoded_at_start + 1, _depth(value))


def _copy(value: Any) -> Any:
    if value.__class__ is dict:
        return {key: _copy(item) for key, item in value.items()}
    if value.__class__ is list:
        return [_copy(item) for item in value]
    return value


def _depth(value: Any) -> int:
    """Nesting depth of a built value (iterative: values may be MAX_DEPTH deep)."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, level = pending.pop()
        if item.__class__ is dict:
            pending.extend((child, level + 1) for child in item.values())
        elif item.__class__ is list:
            pending.extend((child, level + 1) for child in item)
        else:
            deepest = max(deepest, level)
            continue
        deepest = max(deepest, level + 1)
    return deepest


def first_definition_line(text: str, key: str, line: int) -> int | None:
    """0-based line where `key`, set again on `line`, was first written in that mapping."""
    frames: list[list[Any]] = []  # per open collection: [keys seen or None, next is a key]
    try:
        for event in _events(text):
            cls = event.__class__
            if cls is MappingEndEvent or cls is SequenceEndEvent:
                frames.pop()
                continue
            if cls not in (ScalarEvent, AliasEvent, MappingStartEvent, SequenceStartEvent):
                continue
            top = frames[-1] if frames else None
            if top is not None and top[0] is not None:
                if top[1] and cls is ScalarEvent:
                    name, seen = _key_text(event), top[0]
                    if name == key and name in seen and event.start_mark.line == line:
                        return seen[name]
                    seen.setdefault(name, event.start_mark.line)
                top[1] = not top[1]
            if cls is MappingStartEvent:
                frames.append([{}, True])
            elif cls is SequenceStartEvent:
                frames.append([None, False])
    except (MarkedYAMLError, ReaderError, ScalarError):
        return None
    return None


def _events(text: str) -> Any:
    parser = CParser(text)
    while True:
        event = parser.get_event()
        if event.__class__ is StreamEndEvent:
            return
        yield event


def _key_text(event: ScalarEvent) -> str:
    if event.tag is None and event.implicit[0]:
        return key_string(resolve_plain(event.value))
    return event.value
