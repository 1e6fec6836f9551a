"""Which cluster.yaml key generated a field of a generated overlay file.

Found by asking the generator itself rather than keeping a second table that could
drift from it: each key of the profile is changed in turn (a number by one, a name
by a suffix, a choice to each other choice, each `nccl` variable on its own), the
overlay is generated again, and the fields that change are that key's. A field
changed by several keys goes to the one that changes the fewest fields (the most
specific: `storageClass` rather than `fabric`), counted in the field's file first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import yaml

from trainops.profile.model import (
    FABRICS,
    GPUDIRECT,
    MPI_OPERATORS,
    NETWORKS,
    OFED_SOURCES,
    PLACEMENTS,
    RDMA_PROVIDERS,
    SCHEDULERS,
    TRAINERS,
    ClusterProfile,
    profile_keys,
)
from trainops.profile.overlay import generate
from trainops.yamlio import locate

_CHOICES: dict[str, tuple[str, ...]] = {
    "fabric": FABRICS,
    "network": tuple(dict.fromkeys(n for names in NETWORKS.values() for n in names)),
    "scheduler": SCHEDULERS,
    "gpudirect": GPUDIRECT,
    "placement": PLACEMENTS,
    "trainer": TRAINERS,
    "mpiOperator": MPI_OPERATORS,
    "rdmaProvider": RDMA_PROVIDERS,
    "ofed": OFED_SOURCES,
}
_QUANTITY = re.compile(r"^(\d+)(\D*)$")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Field = tuple[str, int, tuple[Any, ...]]  # (file, document index, path in the document)
_TABLES: dict[str, dict[str, set[Field]]] = {}


def generated_by(
    profile: ClusterProfile, file: str, document: int, path: list[str | int]
) -> str | None:
    """The profile key behind `path` of document `document` in the generated `file`
    (relative to the overlay), or None when no key changes it."""
    table = _table(profile)
    wanted = tuple(path)
    best: tuple[int, int, int, str] | None = None
    for key, changed in table.items():
        exact = inside = False
        in_file = 0
        for f, d, p in changed:
            if f != file:
                continue
            in_file += 1
            if d != document:
                continue
            if wanted[: len(p)] == p:
                exact = True  # the key changes this field or a field holding it
            elif p[: len(wanted)] == wanted:
                inside = True  # the key changes something inside this field
        if exact or inside:
            rank = (0 if exact else 1, in_file, len(changed), key)
            best = rank if best is None or rank < best else best
    return best[-1] if best else None


def key_line(text: str, key: str) -> int | None:
    """1-based line of a key (`nccl.NCCL_IB_TIMEOUT` included) in cluster.yaml text."""
    top, _, inner = key.partition(".")
    found = locate(text, (top,), inner) if inner else locate(text, (), top)
    return found + 1 if found is not None else None


def _table(profile: ClusterProfile) -> dict[str, set[Field]]:
    memo = repr(profile)
    if memo not in _TABLES:
        baseline = _fields(generate(profile))
        table: dict[str, set[Field]] = {}
        for key, variant in _variants(profile):
            try:
                changed = _diff(baseline, _fields(generate(variant)))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a combination the generator does not make
            if changed:
                table.setdefault(key, set()).update(changed)
        _TABLES.clear()  # one profile at a time: a run checks cluster after cluster
        _TABLES[memo] = table
    return _TABLES[memo]


def _variants(profile: ClusterProfile) -> Iterator[tuple[str, ClusterProfile]]:
    for key in profile_keys():
        value = getattr(profile, key)
        if key in _CHOICES:
            for choice in _CHOICES[key]:
                if choice != value:
                    yield key, dataclasses.replace(profile, **{key: choice})
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            yield key, dataclasses.replace(profile, **{key: value + 1})
        elif isinstance(value, str):
            yield key, dataclasses.replace(profile, **{key: _other(value)})
        elif isinstance(value, list):
            yield key, dataclasses.replace(profile, **{key: [_other(str(v)) for v in value]})
        elif isinstance(value, dict):
            for name in value:
                changed = {**value, name: _other(str(value[name]))}
                yield f"{key}.{name}", dataclasses.replace(profile, **{key: changed})


def _other(value: str) -> str:
    """A different value of the same shape: sizes keep their unit, tags stay tags."""
    match = _QUANTITY.match(value)
    if match:
        return f"{int(match.group(1)) * 2}{match.group(2)}"
    return value + "9" if value else "x"


def _fields(files: dict[str, str]) -> dict[Field, Any]:
    leaves: dict[Field, Any] = {}
    for name, text in files.items():
        for index, document in enumerate(yaml.load_all(text, Loader=_Loader)):
            for path, value in _leaves(document, ()):
                leaves[(name, index, path)] = value
    return leaves


def _leaves(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path, value


def _diff(before: dict[Field, Any], after: dict[Field, Any]) -> set[Field]:
    return {f for f in before.keys() | after.keys() if before.get(f) != after.get(f)}
