"""The rule registry: the decorators rule authors use and what they record.

A rule is a small function registered with an id, a severity, a title, a why, a fix
and, wherever it can report an error, the pinned sources that show the harm
(`RuleInfo.sources`; the severity contract in trainops/rules.py). Resource rules get
one document and the Context; pod rules get one pod template at a time (any workload
kind); render rules see the render as a whole (its kustomize inputs, for example).

Every pod meets every pod rule of its kind unless the rule's `applies` predicate
says otherwise, so a predicate that can only hold for pods setting some name (a
field, a resource, an annotation, a label) declares it (`needs`, `sets_any`): the
engine then picks a pod's rules by the names it sets, once per distinct set of
names, instead of asking each predicate. A rule that can only report when the render
holds some kind (a PriorityClass, a CRD) says so (`render_needs`), and renders without
it never run the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainops import rules as catalog
from trainops.policy.pods import PodTemplate

# Rules registered with `security=True`: only the platform's policy config (or an
# annotation on a path it lists) exempts from them, never the change being checked.
SECURITY = "security"
# `kinds=EVERY_KIND`: a resource rule that must see documents of every kind (rare:
# each such rule runs once per document of the render, so it must be cheap).
EVERY_KIND = ()


@dataclass(frozen=True)
class Violation:
    message: str
    path: tuple[Any, ...] = ()
    fix: str | None = None  # overrides the rule's generic fix when more precise
    # Overrides the rule's severity for this case: one of those its `when` names.
    severity: str | None = None


@dataclass(frozen=True)
class Rule:
    info: catalog.RuleInfo
    scope: str  # "resource" | "pod" | "render"
    check: Callable[..., Iterable[Violation]]
    # The documents (resource rules) or pods (pod rules) the rule is about, e.g.
    # `gpu_pod`; others never reach it.
    applies: Callable[[Any], bool] | None = None
    # Kinds one of which the render (or its platform) must hold for the rule to report
    # anything, e.g. PriorityClass for a rule that checks names against them; empty: any.
    render_needs: frozenset[str] = frozenset()
    # Host access (host namespaces, paths, privileges, capabilities, another service
    # account): graded by the posture declared for the object (policy/posture.py).
    by_posture: bool = False

    @property
    def id(self) -> str:
        return self.info.id


_RULES: dict[str, Rule] = {}


def _register(scope: str, **fields: Any) -> Callable:
    def decorate(function: Callable) -> Callable:
        if scope == "resource" and "kinds" not in fields:
            raise ValueError(
                f"resource rule {fields.get('id')!r} must name its kinds (or kinds=EVERY_KIND)"
            )
        kinds = tuple(fields.pop("kinds", ()))
        applies = fields.pop("applies", None)
        render_needs = frozenset(fields.pop("render_needs", ()))
        category = SECURITY if fields.pop("security", False) else "policy"
        by_posture = fields.pop("by_posture", False)
        sources = fields.pop("source", ())
        when: Mapping[str, str] = fields.pop("when", {})
        info = catalog.RuleInfo(
            kinds=kinds,
            category=category,
            sources=(sources,) if isinstance(sources, str) else tuple(sources),
            when=tuple(when.items()),
            **fields,
        )
        if info.id in _RULES and _RULES[info.id].check is not function:
            raise ValueError(f"policy rule {info.id!r} defined twice")
        catalog.register(info)
        _RULES[info.id] = Rule(info, scope, function, applies, render_needs, by_posture)
        return function

    return decorate


def resource_rule(**fields: Any) -> Callable:
    """Register `check(doc, ctx) -> Iterable[Violation]` for documents of `kinds`.

    `kinds` is required: a tuple of kinds, or EVERY_KIND for a rule about any object.
    `applies`, a predicate on the document (e.g. `common.queued`), keeps the rule from
    documents it cannot find anything in; it must hold wherever the rule can report.
    `render_needs`, kinds (e.g. ("PriorityClass",)) one of which the render or its
    platform must hold for the rule to find anything: in a render without them the rule
    is not run at all. `security=True` (any scope) makes the rule one a resource cannot
    exempt itself from; `by_posture=True` grades its findings by the object's declared
    security posture (policy/posture.py). `source`: the pinned URL (or URLs) showing the
    harm an error claims; `when`: {severity: condition} for a rule reporting several.
    """
    return _register("resource", **fields)


def pod_rule(**fields: Any) -> Callable:
    """Register `check(pod, ctx) -> Iterable[Violation]` for pod templates (of `kinds`).

    `applies`, a predicate on the pod such as `gpu_pod`, keeps the rule from pods it is
    not about (it must hold wherever the rule can report); the engine asks it once per
    pod for every rule that shares it. `render_needs`, `security`, `by_posture`, `source`
    and `when` as for resource rules.
    """
    return _register("pod", **fields)


def render_rule(**fields: Any) -> Callable:
    """Register `check(ctx) -> Iterable[tuple[Document | None, Violation]]` per render."""
    return _register("render", **fields)


@dataclass(frozen=True)
class Needs:
    """What a pod must have for a pod predicate to hold: one of `fields` among the names
    it sets (`PodTemplate.features`: fields of its spec and containers, resources, template
    annotations, document labels), unless its document is one of `kinds`. `exact`: the
    predicate holds exactly then, so the engine never calls it."""

    fields: frozenset[str]
    kinds: frozenset[str] = frozenset()
    exact: bool = False


def needs(*fields: str, kinds: Iterable[str] = ()) -> Callable:
    """Declare what a pod `applies` predicate needs (`Needs`): on a pod without it, the
    engine skips the predicate and its rules without calling anything. A declaration
    only saves work: tests/policies/test_applies.py evaluates every fixture and real
    manifest with and without them and wants the same findings."""

    def decorate(predicate: Callable) -> Callable:
        predicate.needs = Needs(frozenset(fields), frozenset(kinds))  # type: ignore[attr-defined]
        return predicate

    return decorate


def sets_any(*fields: str) -> Callable[[PodTemplate], bool]:
    """An `applies` predicate for pod rules about fields a pod seldom sets (hostNetwork,
    a container's securityContext): pods that set none of `fields` never reach them."""
    wanted = frozenset(fields)

    def predicate(pod: PodTemplate) -> bool:
        return not wanted.isdisjoint(pod.features)

    predicate.needs = Needs(wanted, exact=True)  # type: ignore[attr-defined]
    predicate.__name__ = predicate.__qualname__ = "sets_" + "_or_".join(fields)
    return predicate


def registered() -> dict[str, Rule]:
    return dict(_RULES)
