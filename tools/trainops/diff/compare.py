"""Per-resource, per-field differences between two renders.

Resources are matched by (Application path, kind, namespace, name). Lists whose items
all carry a unique `name` (containers, env, volumes, ports...) are matched by name, so
inserting one environment variable shows as one added entry, not as every later
entry changing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MISSING = object()


@dataclass(frozen=True)
class ResourceKey:
    app: str  # the path Argo CD syncs, relative to the repository root
    kind: str
    namespace: str
    name: str

    @property
    def resource(self) -> str:
        return "/".join(part for part in (self.kind, self.namespace, self.name) if part)


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any = MISSING
    new: Any = MISSING

    @property
    def kind(self) -> str:
        if self.old is MISSING:
            return "added"
        return "removed" if self.new is MISSING else "changed"


@dataclass
class ResourceDiff:
    key: ResourceKey
    change: str  # added | removed | modified
    fields: list[FieldChange] = field(default_factory=list)
    old: dict | None = None
    new: dict | None = None
    warnings: list[str] = field(default_factory=list)


def compare(old: dict[ResourceKey, dict], new: dict[ResourceKey, dict]) -> list[ResourceDiff]:
    diffs = []
    for key in sorted(set(old) | set(new), key=_order):
        before, after = old.get(key), new.get(key)
        if before is None:
            diffs.append(ResourceDiff(key, "added", new=after))
        elif after is None:
            diffs.append(ResourceDiff(key, "removed", old=before))
        elif before != after:
            diffs.append(ResourceDiff(key, "modified", field_changes(before, after), before, after))
    return diffs


def _order(key: ResourceKey) -> tuple:
    return (key.app, key.kind, key.namespace, key.name)


def field_changes(old: Any, new: Any, path: str = "") -> list[FieldChange]:
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for name in list(old) + [k for k in new if k not in old]:
            child = _child(path, str(name))
            if name not in new:
                changes.append(FieldChange(child, old[name], MISSING))
            elif name not in old:
                changes.append(FieldChange(child, MISSING, new[name]))
            else:
                changes.extend(field_changes(old[name], new[name], child))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        if _named(old) and _named(new):
            return field_changes(_by_name(old), _by_name(new), path)
        changes = []
        for index in range(max(len(old), len(new))):
            child = f"{path}[{index}]"
            if index >= len(new):
                changes.append(FieldChange(child, old[index], MISSING))
            elif index >= len(old):
                changes.append(FieldChange(child, MISSING, new[index]))
            else:
                changes.extend(field_changes(old[index], new[index], child))
        return changes
    return [] if old == new else [FieldChange(path, old, new)]


def _child(path: str, name: str) -> str:
    if name.startswith("["):  # an item of a name-keyed list
        return f"{path}{name}"
    return f"{path}.{name}" if path else name


def _named(items: list) -> bool:
    names = [item.get("name") for item in items if isinstance(item, dict)]
    return (
        bool(items)
        and len(names) == len(items)
        and all(isinstance(n, str) for n in names)
        and len(set(names)) == len(names)
    )


def _by_name(items: list[dict]) -> dict:
    """A list of named items as a map keyed `[name]`, which paths print as such."""
    return {f"[{item['name']}]": item for item in items}
