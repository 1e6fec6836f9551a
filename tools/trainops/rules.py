"""The catalog of rule ids trainops reports, with the text reports need.

Built-in checks (schema, rendering) register here; the policy pack registers
its rules through the same `register` call, so SARIF rule metadata, JUnit
messages and the generated documentation all read one catalog.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainops.model import ERROR, WARNING


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: str
    title: str
    why: str
    fix: str
    kinds: tuple[str, ...] = field(default=())
    category: str = "builtin"


DOCTOR = "doctor"  # the category of the findings `trainops doctor` prints

_CATALOG: dict[str, RuleInfo] = {}


def register(info: RuleInfo) -> RuleInfo:
    existing = _CATALOG.get(info.id)
    if existing is not None and existing != info:
        raise ValueError(f"rule id {info.id!r} registered twice")
    _CATALOG[info.id] = info
    return info


def catalog() -> dict[str, RuleInfo]:
    return dict(_CATALOG)


def lookup(rule_id: str) -> RuleInfo | None:
    return _CATALOG.get(rule_id)


register(
    RuleInfo(
        id="schema",
        severity=ERROR,
        title="Object matches the strict schema of its kind",
        why="The API server rejects objects with unknown fields, wrong types or missing "
        "required fields at apply time, after the change is merged and Argo CD is "
        "already syncing.",
        fix="Correct the field named in the finding; for a kind with no schema, import its "
        "CRD with `trainops schemas import`.",
    )
)
register(
    RuleInfo(
        id="remote-resource",
        severity=WARNING,
        title="Remote kustomize resources have an offline copy",
        why="Without network (CI), a remote base can only be rendered from a mirror; "
        "what it contains is otherwise not validated at all.",
        fix="Add the pinned upstream to the mirror directory (--remote-mirror) or render "
        "with --allow-network.",
    )
)
