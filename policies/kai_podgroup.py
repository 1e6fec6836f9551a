"""KAI Scheduler PodGroups with SubGroups (hierarchical gangs), as KAI's PodGroup webhook
checks them (KAI-Scheduler v0.17.0 `pkg/apis/scheduling/v2alpha2/podgroup_webhook.go`:
validatePodGroupSpec, validateSubGroups, validateSubGroupMinFields).

The webhook refuses, on create and update: minMember beside minSubGroup (on the PodGroup or
on one SubGroup), a SubGroup name used twice, a parent that names no SubGroup of the
PodGroup, a cycle of parents, a leaf SubGroup without minMember or with minSubGroup, a
mid-level SubGroup with minMember, and a minSubGroup below 1 or above the number of direct
children. A gang that asks for more SubGroups than it has could never be satisfied anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, is_int, mapping

from .scheduling import KAI_GROUP

WEBHOOK = (
    "https://github.com/kai-scheduler/KAI-Scheduler/blob/v0.17.0/pkg/apis/scheduling/"
    "v2alpha2/podgroup_webhook.go"
)


def _kai_podgroup(doc: Document) -> bool:
    return doc.api_version.startswith(KAI_GROUP)


def _set(value: Any) -> bool:
    return value is not None


def _minimum_problem(owner: str, spec: dict[str, Any], children: int, leaf: bool) -> str | None:
    """What the webhook says of one level's minMember/minSubGroup, or None."""
    member, subgroups = spec.get("minMember"), spec.get("minSubGroup")
    if is_int(member) and member > 0 and _set(subgroups):
        return f"{owner} sets both minMember and minSubGroup, which are mutually exclusive"
    if leaf and _set(subgroups):
        return f"{owner} is a leaf (no child SubGroups) but sets minSubGroup"
    if leaf and owner != "the PodGroup" and member is None:
        return f"{owner} is a leaf SubGroup without minMember, which the webhook requires"
    if not leaf and owner != "the PodGroup" and is_int(member) and member > 0:
        return f"{owner} has child SubGroups, so it takes minSubGroup, not minMember"
    if _set(subgroups):
        if not is_int(subgroups) or subgroups < 1:
            return f"{owner} has minSubGroup {subgroups!r}; it must be greater than 0"
        if subgroups > children:
            return (
                f"{owner} wants minSubGroup {subgroups} of its {children} direct child "
                "SubGroup(s): the gang could never be satisfied"
            )
    return None


@resource_rule(
    id="kai-podgroup-subgroups",
    severity=ERROR,
    source=WEBHOOK,
    title="A KAI PodGroup's SubGroups form a tree its webhook accepts",
    why="KAI's PodGroup webhook refuses a PodGroup whose SubGroups do not form a tree (a "
    "parent that is not one of its SubGroups, a name used twice, a cycle) or whose minimums "
    "contradict it: minMember and minSubGroup together, a leaf SubGroup without minMember or "
    "with minSubGroup, a mid-level SubGroup with minMember, minSubGroup below 1 or above the "
    "number of direct children. The gang's pods then never get a PodGroup to schedule them.",
    fix="Give each leaf SubGroup minMember and each SubGroup with children minSubGroup (at "
    "most its number of children), name parents among the PodGroup's own SubGroups, and set "
    "either minMember or minSubGroup on the PodGroup, not both.",
    kinds=("PodGroup",),
    applies=_kai_podgroup,
)
def kai_podgroup_subgroups(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    subgroups = dicts(spec.get("subGroups"))
    names = [str(group.get("name")) for group in subgroups]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        yield Violation(f"SubGroup name {duplicate!r} is used twice", ("spec", "subGroups"))
        return
    children: dict[str | None, list[str]] = {}
    for index, group in enumerate(subgroups):
        parent = group.get("parent")
        if parent is not None and str(parent) not in names:
            yield Violation(
                f"SubGroup {names[index]!r} names parent {parent!r}, which is not one of the "
                f"PodGroup's SubGroups ({', '.join(names)}): the webhook refuses the PodGroup",
                ("spec", "subGroups", index, "parent"),
            )
            return
        children.setdefault(None if parent is None else str(parent), []).append(names[index])
    if _has_cycle(children, names):
        yield Violation("the SubGroups' parents form a cycle", ("spec", "subGroups"))
        return
    levels = [("the PodGroup", spec, None, ("spec",))]
    levels += [
        (f"SubGroup {names[i]!r}", group, names[i], ("spec", "subGroups", i))
        for i, group in enumerate(subgroups)
    ]
    for owner, level, name, path in levels:
        below = children.get(name, [])
        leaf = not below if name is not None else not subgroups
        problem = _minimum_problem(owner, level, len(below), leaf)
        if problem:
            yield Violation(problem, path)


def _has_cycle(children: dict[str | None, list[str]], names: list[str]) -> bool:
    """Some SubGroup cannot be reached from the roots: its parents loop."""
    reached, todo = set(), list(children.get(None, []))
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(children.get(name, []))
    return len(reached) < len(names)
