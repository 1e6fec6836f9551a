"""Edits to a cluster.yaml that keep what a human wrote: comments, key order, quoting.

Values of existing keys are replaced through a ruamel.yaml round trip, which leaves
every other byte alone. Keys are added and removed at the text level, with ruamel.yaml
only telling where each key sits, so that a key's documentation comment travels with
it: a new key arrives with its comment in the profile's usual order, a removed key
takes its comment along and leaves the next key's comment in place.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from trainops.errors import InputError
from trainops.profile.model import FIELD_DOCS, FIELD_TYPES
from trainops.yamlio import dump

_ASSIGNMENT = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:\.([A-Za-z0-9_]+))?(=(.*)|-)$", re.DOTALL)
_COMMENT = re.compile(r"^\s*#")


@dataclass(frozen=True)
class Assignment:
    """`KEY=VALUE`, `MAP.NAME=VALUE`, or `KEY-` / `MAP.NAME-` to remove."""

    key: str
    sub: str | None
    value: Any = None
    remove: bool = False

    @property
    def dotted(self) -> str:
        return f"{self.key}.{self.sub}" if self.sub else self.key


def parse_assignment(text: str) -> Assignment:
    match = _ASSIGNMENT.match(text)
    if not match:
        written = re.split(r"[.=]|-$", text, maxsplit=1)[0]
        spelled = [k for k in FIELD_DOCS if k.lower() == re.sub(r"[-_]", "", written).lower()]
        if spelled and spelled[0] != written:
            raise InputError(
                f"{written}: unknown profile key; did you mean {spelled[0]}? (profile keys "
                "are written as in cluster.yaml)"
            )
        raise InputError(
            f"{text!r} is not KEY=VALUE, MAP.NAME=VALUE or KEY- (to remove); "
            "for example nodes=6 or nccl.NCCL_IB_TIMEOUT=22"
        )
    key, sub, assigned, raw = match.groups()
    if key not in FIELD_DOCS:
        close = [k for k in FIELD_DOCS if k.lower() == key.lower()]
        hint = f"; did you mean {close[0]}?" if close else f" (keys: {', '.join(FIELD_DOCS)})"
        raise InputError(f"{key}: unknown profile key{hint}")
    expected = FIELD_TYPES[key]
    if sub and expected is not dict:
        raise InputError(f"{key}.{sub}: {key} is not a map, set it with {key}=VALUE")
    if assigned == "-":
        return Assignment(key, sub, remove=True)
    return Assignment(key, sub, _coerce(key, sub, raw))


# Keys whose values new-cluster's flags and set also take in a short form.
_PAIRS = {
    "teams": ("name", "gpus", "vision=32,nlp=16"),
    "topology": ("label", "nodes", "example.com/block=32,topology.kubernetes.io/rack=8"),
}
SHORT_FORMS = (*_PAIRS, "nodeAllocatable")
_STRING_MAPS = ("nccl",)  # entries are environment variables: always strings


def short_form(key: str, raw: str, where: str) -> Any:
    """A value of SHORT_FORMS written as new-cluster's flag takes it: NAME=NUMBER,...
    for teams and topology, CPU,MEMORY for nodeAllocatable."""
    if key == "nodeAllocatable":
        cpu, comma, memory = raw.partition(",")
        if not comma or not cpu.strip() or not memory.strip():
            raise InputError(f"{where}: {raw!r} is not CPU,MEMORY (e.g. 190,1900Gi)")
        return {"cpu": cpu.strip(), "memory": memory.strip()}
    name_key, count_key, example = _PAIRS[key]
    items = []
    for item in raw.split(","):
        name, eq, count = item.strip().partition("=")
        if not eq or not name.strip() or not count.strip().isdigit():
            raise InputError(f"{where} {raw!r}: expected NAME=NUMBER,... (e.g. {example})")
        items.append({name_key: name.strip(), count_key: int(count)})
    return items


def _coerce(key: str, sub: str | None, raw: str) -> Any:
    """The value as the profile stores it: typed by the key, not by how it looks."""
    where = f"{key}.{sub}" if sub else key
    if sub:
        return raw if key in _STRING_MAPS else _scalar(raw)
    expected = FIELD_TYPES[key]
    if expected is str:
        return raw
    if key in SHORT_FORMS and raw.strip()[:1] not in ("[", "{", ""):
        return short_form(key, raw, where)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise InputError(f"{where}: {raw!r} is not a YAML value") from None
    if expected is list and isinstance(value, str | int):
        value = [item.strip() for item in str(raw).split(",") if item.strip()]
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise InputError(f"{where}: must be an integer, not {raw!r}")
    if expected is list and not isinstance(value, list):
        raise InputError(f"{where}: must be a list (a,b or [a, b]), not {raw!r}")
    if expected is dict and not isinstance(value, dict):
        raise InputError(f"{where}: must be a map ({{NAME: value}}), not {raw!r}")
    return value


def _scalar(raw: str) -> Any:
    """A map entry as YAML reads it (3 a number, true a boolean), else the text itself."""
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        return raw
    return value if isinstance(value, str | int | float | bool) else raw


def _round_trip() -> YAML:
    handler = YAML()
    handler.preserve_quotes = True
    handler.width = 1_000_000
    handler.indent(mapping=2, sequence=2, offset=0)
    return handler


def _load(text: str) -> CommentedMap:
    data = _round_trip().load(text)
    return data if isinstance(data, CommentedMap) else CommentedMap()


def _dump(data: CommentedMap) -> str:
    out = io.StringIO()
    _round_trip().dump(data, out)
    return out.getvalue()


def apply_assignments(text: str, assignments: list[Assignment]) -> str:
    """The profile text with every assignment applied, in order."""
    for assignment in assignments:
        text = _apply(text, assignment)
    return text


def _apply(text: str, a: Assignment) -> str:
    data = _load(text)
    if a.remove:
        if a.sub is None:
            if a.key not in data:
                raise InputError(f"{a.key}: not set in the profile, nothing to remove")
            return _remove_lines(text, data, a.key)
        mapping = data.get(a.key)
        if not isinstance(mapping, dict) or a.sub not in mapping:
            raise InputError(f"{a.dotted}: not set in the profile, nothing to remove")
        if len(mapping) == 1:  # the map would be empty: drop it with its comment
            return _remove_lines(text, data, a.key)
        return _remove_lines(text, mapping, a.sub, parent=data, parent_key=a.key)
    if a.sub is not None:
        mapping = data.get(a.key)
        if not isinstance(mapping, dict):
            return _insert_top_level(text, data, a.key, {a.sub: a.value})
        if a.sub not in mapping and mapping and not mapping.fa.flow_style():
            return _insert_map_entry(text, data, a.key, a.sub, a.value)
        mapping[a.sub] = a.value
        return _dump(data)
    if a.key in data:
        if _merge_entries(data[a.key], a.value):
            return _dump(data)
        if isinstance(data[a.key], dict | list) or isinstance(a.value, dict | list):
            return _replace_block(text, data, a.key, a.value)
        data[a.key] = a.value
        return _dump(data)
    return _insert_top_level(text, data, a.key, a.value)


def _merge_entries(old: Any, new: Any) -> bool:
    """Update a list of mappings (teams, topology) in place, each entry matched by its
    first key's value, so the comments on the entries that stay are kept; False (the
    block is rewritten) when the entries are not such mappings, change order, or the last
    one goes: ruamel.yaml holds the next key's comment as the last entry's."""
    if not (isinstance(old, CommentedSeq) and old and isinstance(new, list) and new):
        return False
    if not all(isinstance(e, dict) and e for e in (*old, *new)):
        return False
    name = next(iter(new[0]))
    if any(name not in e for e in (*old, *new)):
        return False
    wanted = [e[name] for e in new]
    kept = [e[name] for e in old if e[name] in wanted]
    if kept != [w for w in wanted if w in kept] or old[-1][name] != wanted[-1]:
        return False
    if len(set(wanted)) != len(wanted) or len(kept) != len({e[name] for e in old} & set(kept)):
        return False
    by_name = {e[name]: e for e in old}
    for position in reversed(range(len(old))):
        if old[position][name] not in wanted:
            del old[position]
    for position, entry in enumerate(new):
        target = by_name.get(entry[name])
        if target is None:
            old.insert(position, CommentedMap(entry))
            continue
        for key in [k for k in target if k not in entry]:
            del target[key]
        for key, value in entry.items():
            if target.get(key) != value:
                target[key] = value
    return True


def _replace_block(text: str, data: CommentedMap, key: str, value: Any) -> str:
    """Rewrite KEY's lines alone. ruamel.yaml holds the comment above the next key as
    part of a block value's last entry, so replacing the value would drop it."""
    lines = text.splitlines(keepends=True)
    keys = list(data)
    start = data.lc.key(key)[0]
    after = keys.index(key) + 1
    end = _comment_start(lines, data.lc.key(keys[after])[0]) if after < len(keys) else len(lines)
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # blank lines before the next key stay
    return "".join(lines[:start] + dump({key: value}).splitlines(keepends=True) + lines[end:])


def _insert_top_level(text: str, data: CommentedMap, key: str, value: Any) -> str:
    """Add KEY with its documentation comment before the next key in FIELD_DOCS order."""
    lines = text.splitlines(keepends=True)
    order = list(FIELD_DOCS)
    later = [k for k in order[order.index(key) + 1 :] if k in data]
    block = [f"# {FIELD_DOCS[key]}\n", *dump({key: value}).splitlines(keepends=True)]
    if later:
        at = _comment_start(lines, data.lc.key(later[0])[0])
    else:
        at = len(lines)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
    return "".join(lines[:at] + block + lines[at:])


def _insert_map_entry(text: str, data: CommentedMap, key: str, sub: str, value: Any) -> str:
    """Add SUB after the last entry of the block map KEY, above the next key's comment
    (ruamel.yaml would put it below that comment, which it holds as the last entry's)."""
    lines = text.splitlines(keepends=True)
    mapping = data[key]
    keys = list(data)
    after = keys.index(key) + 1
    at = data.lc.key(keys[after])[0] if after < len(keys) else len(lines)
    at = _comment_start(lines, at)
    while at > 0 and not lines[at - 1].strip():
        at -= 1
    if at and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    indent = " " * mapping.lc.key(next(iter(mapping)))[1]
    entry = [indent + line for line in dump({sub: value}).splitlines(keepends=True)]
    return "".join(lines[:at] + entry + lines[at:])


def _remove_lines(
    text: str,
    mapping: CommentedMap,
    key: str,
    parent: CommentedMap | None = None,
    parent_key: str | None = None,
) -> str:
    """Delete KEY's lines, its own comment above it, and nothing of its neighbours."""
    lines = text.splitlines(keepends=True)
    keys = list(mapping)
    first = mapping.lc.key(key)[0]
    following = keys.index(key) + 1
    if following < len(keys):
        end = mapping.lc.key(keys[following])[0]
    elif parent is not None:
        parent_keys = list(parent)
        after = parent_keys.index(parent_key) + 1
        end = parent.lc.key(parent_keys[after])[0] if after < len(parent_keys) else len(lines)
    else:
        end = len(lines)
    end = _comment_start(lines, end)  # the next key's comment stays with it
    start = _comment_start(lines, first) if parent is None else first
    return "".join(lines[:start] + lines[end:])


def _comment_start(lines: list[str], line: int) -> int:
    """First line of the comment block directly above `line` (or `line` itself)."""
    while line > 0 and _COMMENT.match(lines[line - 1]):
        line -= 1
    return line
