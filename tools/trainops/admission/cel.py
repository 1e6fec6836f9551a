"""Compiles the `x-kubernetes-validations` rules of a CRD and evaluates them.

The rules come from the sidecar `trainops schemas import` writes next to each
schema. A rule set is compiled once per kind and process (the schema registry
keeps it), never per resource. Evaluation follows the API server:

- a rule runs at the node it is attached to, once per list item or map value
  below it, and only where that node exists in the object;
- schema defaults are applied first (the API server defaults before it
  validates), so `self.reclaimWithinCohort == 'Never'` sees the default;
- at the root, `self.metadata` holds only `name` and `generateName`; an object with only
  `generateName` has the name the API server generates first (apiserver v0.35.0
  `registry/generic/registry/store.go` create, before BeforeCreate validates);
- an evaluation error (a missing key, a type mismatch) is a rejection, as it
  is for the API server ("no such key ... evaluating rule");
- rules that read `oldSelf` are transition rules: `violations` skips them and
  `transition_violations` evaluates them with an old object, for `trainops diff`.

The CEL runtime is Google's C++ implementation (cel-expr-python) with the
strings (v2) and optional-types extensions the API server also enables; a
rule using a Kubernetes-only library (quantity, url, ip, cidr, format, sets)
cannot be compiled here and is reported, not dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional, ext_strings

from trainops.admission import names
from trainops.schema.crd import ITEMS, VALUES

_OLD_SELF = re.compile(r"\boldSelf\b")
_FIELD_PATH_STEP = re.compile(r"\.([A-Za-z_$][\w$-]*)|\[\s*'((?:[^'\\]|\\.)*)'\s*\]|\[(\d+)\]")
_REASONS = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
}
_ENV: Any = None


def _env() -> Any:
    global _ENV
    if _ENV is None:
        _ENV = cel.NewEnv(
            variables={"self": cel.Type.DYN, "oldSelf": cel.Type.DYN},
            extensions=[ext_strings.ExtStrings(2), ext_optional.ExtOptional()],
        )
    return _ENV


@dataclass(frozen=True)
class Rule:
    """One compiled rule and where it is attached (schema steps, ITEMS/VALUES for items)."""

    path: tuple[str, ...]
    type: str
    source: str
    program: Any
    message: str
    message_program: Any = None
    field_path: tuple[str | int, ...] = ()
    reason: str = "FieldValueInvalid"


@dataclass(frozen=True)
class Failure:
    """A rule the object breaks: the path of the offending field and the API server's text."""

    path: tuple[str | int, ...]
    message: str
    rule: str


@dataclass
class _Node:
    rules: list[Rule] = field(default_factory=list)
    transitions: list[Rule] = field(default_factory=list)
    children: dict[str, _Node] = field(default_factory=dict)
    defaults: dict[str, Any] | None = None
    list_keys: tuple[str, ...] | None = None  # for list-type=map: how items pair up


class RuleSet:
    """The compiled rules of one CRD version."""

    def __init__(self, crd: str, spec: dict[str, Any]):
        self.crd = crd
        self.problems: list[str] = []  # rules that cannot be compiled, one line each
        self.reported = False  # whether `problems` were reported already in this run
        self.count = 0
        self._root = _Node()
        defaults = spec.get("defaults") or {}
        lists = spec.get("lists") or {}
        for entry in spec.get("rules") or []:
            compiled = self._compile(entry)
            if compiled is None:
                continue
            node = self._node(compiled.path, defaults, lists)
            transition = _OLD_SELF.search(entry["rule"]) is not None
            (node.transitions if transition else node.rules).append(compiled)
            self.count += 1

    @classmethod
    def load(cls, path: Path) -> RuleSet | None:
        if not path.is_file():
            return None
        spec = json.loads(path.read_bytes())
        return cls(str(spec.get("crd") or path.name), spec)

    def _compile(self, entry: dict[str, Any]) -> Rule | None:
        source = entry["rule"]
        path = tuple(entry.get("path") or ())
        where = "/".join(path) or "<root>"
        try:
            program = _env().compile(source)
            message_program = None
            if entry.get("messageExpression"):
                message_program = _env().compile(entry["messageExpression"])
        except RuntimeError as exc:
            reason = str(exc).splitlines()[0].removeprefix("INVALID_ARGUMENT: ")
            self.problems.append(
                f"CRD {self.crd}: rule `{source}` at {where} cannot be compiled ({reason}); "
                "it is not checked"
            )
            return None
        return Rule(
            path=path,
            type=str(entry.get("type") or "object"),
            source=source,
            program=program,
            message=str(entry.get("message") or f"failed rule: {source}"),
            message_program=message_program,
            field_path=parse_field_path(entry.get("fieldPath") or ""),
            reason=str(entry.get("reason") or "FieldValueInvalid"),
        )

    def _node(self, path: tuple[str, ...], defaults: dict, lists: dict) -> _Node:
        node, schema = self._root, defaults
        node.defaults = defaults or None
        for depth, step in enumerate(path):
            schema = (schema.get("children") or {}).get(step) or {}
            child = node.children.get(step)
            if child is None:
                child = node.children[step] = _Node(defaults=schema or None)
                listing = lists.get("/".join(path[: depth + 1]))
                if listing and listing.get("type") == "map":
                    child.list_keys = tuple(listing.get("keys") or ())
            node = child
        return node

    def violations(self, obj: dict[str, Any]) -> list[Failure]:
        """Rules `obj` breaks, transition rules aside."""
        found: list[Failure] = []
        for rule, value, at in _walk(self._root, obj, ()):
            if rule.path == ():
                value = _root_view(value)
            found.extend(_evaluate(rule, value, None, at))
        return found

    def transition_violations(self, old: dict[str, Any], new: dict[str, Any]) -> list[Failure]:
        """Transition rules (those reading `oldSelf`) the update from `old` to `new` breaks."""
        found: list[Failure] = []
        for rule, value, previous, at in _walk_pairs(self._root, new, old, ()):
            if rule.path == ():
                value, previous = _root_view(value), _root_view(previous)
            found.extend(_evaluate(rule, value, previous, at))
        return found


def _walk(
    node: _Node, value: Any, at: tuple[str | int, ...]
) -> Iterator[tuple[Rule, Any, tuple[str | int, ...]]]:
    if value is None:
        return
    if node.rules:
        defaulted = with_defaults(value, node.defaults)
        for rule in node.rules:
            yield rule, defaulted, at
    for step, child in node.children.items():
        if step == ITEMS:
            if isinstance(value, list):
                for index, item in enumerate(value):
                    yield from _walk(child, item, (*at, index))
        elif step == VALUES:
            if isinstance(value, dict):
                for key, item in value.items():
                    yield from _walk(child, item, (*at, str(key)))
        elif isinstance(value, dict) and step in value:
            yield from _walk(child, value[step], (*at, step))


def _walk_pairs(
    node: _Node, new: Any, old: Any, at: tuple[str | int, ...]
) -> Iterator[tuple[Rule, Any, Any, tuple[str | int, ...]]]:
    """Nodes present in both objects, paired the way the API server correlates them:
    properties and map values by key, items of list-type=map lists by their keys;
    items of other lists are not correlated, so rules below them never see oldSelf."""
    if new is None or old is None:
        return
    if node.transitions:
        new_defaulted = with_defaults(new, node.defaults)
        old_defaulted = with_defaults(old, node.defaults)
        for rule in node.transitions:
            yield rule, new_defaulted, old_defaulted, at
    for step, child in node.children.items():
        if step == ITEMS:
            if child.list_keys is None or not isinstance(new, list) or not isinstance(old, list):
                continue
            by_key = {_item_key(item, child.list_keys): item for item in old}
            for index, item in enumerate(new):
                previous = by_key.get(_item_key(item, child.list_keys))
                yield from _walk_pairs(child, item, previous, (*at, index))
        elif step == VALUES:
            if isinstance(new, dict) and isinstance(old, dict):
                for key, item in new.items():
                    yield from _walk_pairs(child, item, old.get(key), (*at, str(key)))
        elif isinstance(new, dict) and isinstance(old, dict):
            yield from _walk_pairs(child, new.get(step), old.get(step), (*at, step))


def _item_key(item: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(item, dict):
        return None
    return tuple(json.dumps(item.get(k), sort_keys=True) for k in keys)


def _root_view(obj: Any) -> Any:
    """The object as root rules see it: metadata reduced to name and generateName, the name
    generated from generateName where the object has none (as the API server does it)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return obj
    meta = obj["metadata"]
    view = {k: meta[k] for k in ("name", "generateName") if k in meta}
    name = names.object_name(meta)
    if name and not meta.get("name"):
        view["name"] = name
    return {**obj, "metadata": view}


def with_defaults(value: Any, schema: dict[str, Any] | None) -> Any:
    """`value` with the schema's defaults filled in, copying only what changes."""
    if not schema or "children" not in schema:
        return value
    children = schema["children"]
    if isinstance(value, dict):
        out = value
        for name, sub in children.items():
            if name in (ITEMS, VALUES):
                continue
            current = value.get(name)
            if current is None and "default" in sub and not (name in value and sub.get("nullable")):
                filled = with_defaults(sub["default"], sub)
            elif current is not None:
                filled = with_defaults(current, sub)
            else:
                continue
            if filled is not current:
                if out is value:
                    out = dict(value)
                out[name] = filled
        values = children.get(VALUES)
        if values is not None:
            filled_map = {k: with_defaults(v, values) for k, v in out.items()}
            if any(filled_map[k] is not out[k] for k in out):
                out = filled_map
        return out
    items = children.get(ITEMS)
    if isinstance(value, list) and items is not None:
        filled_list = [with_defaults(item, items) for item in value]
        if any(a is not b for a, b in zip(filled_list, value, strict=True)):
            return filled_list
    return value


def _evaluate(rule: Rule, value: Any, previous: Any, at: tuple[str | int, ...]) -> list[Failure]:
    data = {"self": value} if previous is None else {"self": value, "oldSelf": previous}
    try:
        result = rule.program.eval(data=data)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        # The object cannot be handed to CEL at all (a value CEL has no type for).
        return [Failure(at, f"{exc} evaluating rule: {rule.source}", rule.source)]
    kind = result.type().name().upper()
    if kind == "BOOL":
        if result.value() is True:
            return []
        detail = _message(rule, data)
    elif kind == "ERROR":
        detail = f"{result.value()} evaluating rule: {rule.source}"
    else:
        detail = f"rule evaluated to {kind}, not a bool: {rule.source}"
    return [Failure((*at, *rule.field_path), _api_text(rule, detail), rule.source)]


def _message(rule: Rule, data: dict[str, Any]) -> str:
    if rule.message_program is not None:
        try:
            result = rule.message_program.eval(data=data)
        except (RuntimeError, TypeError, ValueError, OverflowError):
            return rule.message
        text = result.value()
        if isinstance(text, str) and text.strip():
            return text
    return rule.message


def _api_text(rule: Rule, detail: str) -> str:
    """The field error as the API server words it."""
    label = _REASONS.get(rule.reason, "Invalid value")
    if label in ("Invalid value", "Duplicate value"):
        return f'{label}: "{rule.type}": {detail}'
    return f"{label}: {detail}"


def parse_field_path(text: str) -> tuple[str | int, ...]:
    """`.spec.items['a.b'][0]` -> ("spec", "items", "a.b", 0); "" -> ()."""
    steps: list[str | int] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _FIELD_PATH_STEP.match(text, position)
        if match is None:
            return tuple(steps)  # the API server rejects such CRDs; keep what was understood
        name, key, index = match.groups()
        if name is not None:
            steps.append(name)
        elif key is not None:
            steps.append(key.replace("\\'", "'"))
        else:
            steps.append(int(index))
        position = match.end()
    return tuple(steps)
