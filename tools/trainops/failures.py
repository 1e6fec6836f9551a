"""The failure-mode catalog: how training on Kubernetes goes wrong, component by component.

`policies/catalog/<component>.yaml` holds one component's entries. Each says what
a user writes, what then happens, the public source that shows it, and either the
checks that catch it (ids of policy rules, of the admission checks `schema`, `cel`,
`api-validation` and `webhook`, of the doctor's findings, or `diff` for `trainops
diff`) or, under `offline`, why no check of the manifests can. docs/failure-modes.md
and the links from docs/policies.md to the entries are generated from these files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.yamlio import load_yaml_mapping, read_text

# What happens to the run, in the words the catalog uses.
HAPPENS = {
    "error": "error",
    "hang": "hang",
    "slowdown": "silent slowdown",
    "lost-data": "lost data",
    "wasted-resources": "wasted resources",
}
DIFF = "diff"  # `trainops diff` warns before the sync (immutable fields, pruned runs)
_ENTRY_KEYS = {"id", "writes", "happens", "effect", "source", "caught", "offline"}


@dataclass(frozen=True)
class Entry:
    id: str
    component: str  # the file's stem
    writes: str
    happens: str
    effect: str
    source: str
    caught: tuple[str, ...]
    offline: str | None  # why no offline check can catch it


@dataclass(frozen=True)
class Component:
    key: str
    name: str
    version: str
    entries: tuple[Entry, ...]


def load(directory: Path) -> list[Component]:
    """Every component file of the catalog, in file-name order."""
    components = [_component(path) for path in sorted(directory.glob("*.yaml"))]
    seen: dict[str, str] = {}
    for component in components:
        for entry in component.entries:
            if entry.id in seen:
                raise InputError(
                    f"entry {entry.id!r} is also in {seen[entry.id]}.yaml",
                    str(directory / f"{component.key}.yaml"),
                )
            seen[entry.id] = component.key
    return components


def entries(components: Iterable[Component]) -> list[Entry]:
    return [entry for component in components for entry in component.entries]


def by_check(components: Iterable[Component]) -> dict[str, list[Entry]]:
    """Check id -> the entries it catches."""
    found: dict[str, list[Entry]] = {}
    for entry in entries(components):
        for check in entry.caught:
            found.setdefault(check, []).append(entry)
    return found


def _component(path: Path) -> Component:
    where = str(path)
    data = load_yaml_mapping(read_text(path), where)
    name, version, items = data.get("component"), data.get("version"), data.get("entries")
    if not isinstance(name, str) or not isinstance(version, str) or not isinstance(items, list):
        raise InputError("needs component, version and a list of entries", where)
    return Component(
        path.stem, name, version, tuple(_entry(item, path.stem, where) for item in items)
    )


def _entry(item: Any, component: str, where: str) -> Entry:
    if not isinstance(item, dict):
        raise InputError("an entry must be a mapping", where)
    name = item.get("id")
    unknown = set(item) - _ENTRY_KEYS
    if unknown:
        raise InputError(f"entry {name!r}: unknown keys {sorted(unknown)}", where)
    for key in ("id", "writes", "happens", "effect", "source"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise InputError(f"entry {name!r}: {key} must be a non-empty string", where)
    if item["happens"] not in HAPPENS:
        raise InputError(f"entry {name!r}: happens must be one of {sorted(HAPPENS)}", where)
    if not item["source"].startswith("https://"):
        raise InputError(f"entry {name!r}: source must be an https address", where)
    caught = item.get("caught") or []
    offline = item.get("offline")
    if not isinstance(caught, list) or not all(isinstance(c, str) for c in caught):
        raise InputError(f"entry {name!r}: caught must be a list of check ids", where)
    if offline is not None and (not isinstance(offline, str) or not offline.strip()):
        raise InputError(f"entry {name!r}: offline must say why", where)
    if not caught and offline is None:
        raise InputError(
            f"entry {name!r}: needs the checks that catch it or an offline reason", where
        )
    return Entry(
        name,
        component,
        item["writes"],
        item["happens"],
        item["effect"],
        item["source"],
        tuple(caught),
        offline,
    )
