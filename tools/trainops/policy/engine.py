"""The policy engine: which rules meet which documents and pods, and what they report.

Rules come from the registry (policy/registry.py), each render's facts from its Context
(policy/context.py); the engine dispatches each document and pod template to the rules
of its kind whose preconditions it meets, grades host access by posture
(policy/posture.py), applies severity overrides and exemptions (policy/exemptions.py)
and turns violations into findings placed at their file and line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainops.model import ERROR, INFO, Document, Finding, Target, json_path
from trainops.policy import posture
from trainops.policy.context import Context
from trainops.policy.exemptions import annotations_trusted, exempted_finding, granted
from trainops.policy.pods import POD_KINDS, PodTemplate
from trainops.policy.registry import Needs, Rule, Violation, registered
from trainops.policy.settings import PolicySettings
from trainops.yamlio import cycle_collection_paused, locate


def evaluate(ctx: Context, settings: PolicySettings) -> list[Finding]:
    """Run every rule over the render in `ctx`; apply exemptions and overrides.

    Rules are dispatched by kind: a document meets only the resource rules of its
    kind (and those that declared `kinds=EVERY_KIND`) whose `applies` predicate holds
    for it, and a pod template only the pod rules whose predicate holds for it (each
    predicate asked once per document or pod).
    A rule that raises is reported as an internal error for that resource and rule;
    the other rules go on. A violation an exemption covers is reported as an
    `exemption-in-effect` info finding naming the rule, the reason and who granted it.
    """
    ctx.annotations_trusted = annotations_trusted(ctx, settings)
    dispatch = _dispatch(in_force(ctx, settings))
    with cycle_collection_paused():
        found = _violations(ctx, dispatch)
    findings = []
    exempted: dict[tuple[int, str], list[Finding]] = {}
    for rule, doc, pod, violation in found:
        severity, violation = _severity(rule, doc, violation, ctx, settings)
        finding = _finding(rule, doc, pod, violation, severity, ctx.target)
        grant = granted(rule, doc, settings, ctx) if doc else None
        if grant is None:
            findings.append(finding)
        else:
            exempted.setdefault((id(doc), rule.id), [grant, finding]).append(finding)
    findings += [exempted_finding(grant, silenced) for grant, *silenced in exempted.values()]
    findings.sort(key=lambda f: (f.resource, f.path, f.rule, f.message))
    return findings


def in_force(ctx: Context, settings: PolicySettings) -> tuple[Rule, ...]:
    """The rules to run on the render in `ctx`: those not turned off whose `render_needs`
    it meets."""
    held = ctx.kinds
    return tuple(
        rule
        for rule in registered().values()
        if settings.severity.get(rule.id) != "off"
        and (not rule.render_needs or not rule.render_needs.isdisjoint(held))
    )


# The dispatch entry of pod templates found by shape in custom resources of other kinds:
# the pod rules that name no kinds.
EMBEDDED = ""
# Rules grouped by their `applies` predicate (None: every document or pod of the kind).
Grouped = list[tuple[Callable[[Any], bool] | None, list[Rule]]]
# Pod rules of one kind grouped by predicate, with the names one of which a pod must
# set for the predicate to hold (None: no such need for this kind).
PodGroups = list[tuple[Callable[[Any], bool] | None, frozenset[str] | None, list[Rule]]]
# Distinct (kind, pod features) whose pod rules are remembered: real renders have a few
# dozen; past this, hostile input with a different shape per pod selects them anew.
SELECTIONS_KEPT = 4096


@dataclass
class _Dispatch:
    """Rules by the kind of document they apply to, grouped by their `applies` predicate.

    `every_resource`: resource rules for kinds no rule names. `pod`: per pod-bearing
    kind, its pod rules, with what each predicate needs (`Needs`).
    """

    render: list[Rule]
    resource: dict[str, Grouped]
    every_resource: Grouped
    pod: dict[str, PodGroups]
    _selected: dict[tuple[str, frozenset[Any]], Grouped] = field(default_factory=dict)

    def pod_groups(self, kind: str, features: frozenset[Any]) -> Grouped:
        """The pod rules (by predicate) that may report on a pod of `kind` setting
        `features`; a predicate whose need is exact is not called (None)."""
        key = (kind, features)
        found = self._selected.get(key)
        if found is None:
            found = [
                (applies, rules)
                for applies, fields, rules in self.pod.get(kind, ())
                if fields is None or not fields.isdisjoint(features)
            ]
            if len(self._selected) < SELECTIONS_KEPT:
                self._selected[key] = found
        return found


# Renders differ in the rules they need (`render_needs`) and settings in those they turn
# off: a repository has a few such sets, each dispatched once.
@lru_cache(maxsize=64)
def _dispatch(rules: tuple[Rule, ...]) -> _Dispatch:
    def for_kind(scoped: list[Rule], kind: str) -> Grouped:
        groups: dict[Any, list[Rule]] = {}
        for rule in scoped:
            if not rule.info.kinds or kind in rule.info.kinds:
                groups.setdefault(rule.applies, []).append(rule)
        return list(groups.items())

    resource = [r for r in rules if r.scope == "resource"]
    resource_table = {
        kind: for_kind(resource, kind) for rule in resource for kind in rule.info.kinds
    }

    def with_needs(grouped: Grouped, kind: str) -> PodGroups:
        table: PodGroups = []
        for applies, scoped in grouped:
            need: Needs | None = getattr(applies, "needs", None)
            if need is None or kind in need.kinds:
                table.append((applies, None, scoped))
            elif need.fields:  # with no fields, nothing of this kind can meet the need
                table.append((None if need.exact else applies, need.fields, scoped))
        return table

    pods = [r for r in rules if r.scope == "pod"]
    pod_table = {
        kind: with_needs(for_kind(pods, kind), kind)
        for kind in POD_KINDS | {k for r in pods for k in r.info.kinds} | {EMBEDDED}
    }
    return _Dispatch(
        [r for r in rules if r.scope == "render"],
        resource_table,
        for_kind(resource, ""),
        pod_table,
    )


Found = list[tuple[Rule, Document | None, PodTemplate | None, Violation]]
# Violations one rule reports on one document or pod: past this the rule is not asked for
# more, so a rule that pairs each object with every other of a large render stays linear
# in the render and its report readable.
VIOLATIONS_KEPT = 32


def _first_violations(rule: Rule, violations: Iterable[Violation]) -> Iterator[Violation]:
    for count, violation in enumerate(violations):
        if count == VIOLATIONS_KEPT:
            yield Violation(
                f"{rule.id} has more findings on this resource; the first {VIOLATIONS_KEPT} "
                "are shown",
                severity=INFO,
            )
            return
        yield violation


def _violations(ctx: Context, dispatch: _Dispatch) -> Found:
    """Every rule's violations over the render, with the rule, document and pod of each.

    An `applies` predicate that raises lets its rules run, so that they report what they
    make of the input (an internal error at worst). Predicates are called inline: this
    loop runs some 25 of them per pod.
    """
    found: Found = []
    for rule in dispatch.render:
        try:
            for doc, violation in rule.check(ctx):
                found.append((rule, doc, None, violation))
        except Exception as exc:  # a rule bug must not end the run or hide other findings
            found.append((rule, None, None, _internal_error(rule, exc)))
    for doc in ctx.documents:
        kind = doc.kind
        for applies, rules in dispatch.resource.get(kind, dispatch.every_resource):
            if applies is not None:
                try:
                    if not applies(doc):
                        continue
                except Exception:  # a predicate that raises lets its rules run
                    pass
            for rule in rules:
                try:
                    for violation in _first_violations(rule, rule.check(doc, ctx)):
                        found.append((rule, doc, None, violation))
                except Exception as exc:
                    found.append((rule, doc, None, _internal_error(rule, exc)))
        # A kind of its own, or a custom resource whose pod templates were found by shape.
        pod_kind = kind if kind in dispatch.pod else EMBEDDED
        if not dispatch.pod.get(pod_kind):
            continue
        for pod in ctx.pods(doc):
            for applies, rules in dispatch.pod_groups(pod_kind, pod.features):
                if applies is not None:
                    try:
                        if not applies(pod):
                            continue
                    except Exception:  # as for documents
                        pass
                for rule in rules:
                    try:
                        for violation in _first_violations(rule, rule.check(pod, ctx)):
                            found.append((rule, doc, pod, violation))
                    except Exception as exc:
                        found.append((rule, doc, pod, _internal_error(rule, exc)))
    return found


def _internal_error(rule: Rule, exc: Exception) -> Violation:
    return Violation(
        f"rule {rule.id} could not check this resource: {type(exc).__name__}: {exc}",
        severity=ERROR,
        fix="This is a trainops bug; please report it with the resource. Meanwhile exempt "
        f"the resource from {rule.id} with a reason.",
    )


def _severity(
    rule: Rule, doc: Document | None, violation: Violation, ctx: Context, settings: PolicySettings
) -> tuple[str, Violation]:
    """The severity of one violation, and the violation as reported.

    The policy config's override wins. Otherwise the violation's own severity, or the
    rule's; a rule graded by posture reports at most what the object's posture makes of
    host access, and says which posture that is.
    """
    override = settings.severity.get(rule.id)
    if override:
        return override, violation
    severity = violation.severity or rule.info.severity
    if rule.by_posture and doc is not None:
        graded, why = posture.grade(doc, ctx, settings.enforcement)
        severity = posture.milder(violation.severity or ERROR, graded)
        violation = Violation(f"{violation.message} [{why}]", violation.path, violation.fix)
    return severity, violation


def _finding(
    rule: Rule,
    doc: Document | None,
    pod: PodTemplate | None,
    violation: Violation,
    severity: str,
    target: Target,
) -> Finding:
    path, origin = pod.origin(violation.path) if pod is not None else (violation.path, "")
    message = f"{violation.message} (from {origin})" if origin else violation.message
    line = None
    if doc is not None and doc.text is not None and doc.line is not None and path:
        found = locate(doc.text, path)
        line = doc.line + found if found is not None else doc.line
    elif doc is not None:
        line = doc.line
    return Finding(
        rule=rule.id,
        severity=severity,
        source=doc.source if doc is not None else target.path,
        resource=doc.resource_id if doc is not None else "",
        path=json_path(list(path)),
        message=message,
        fix=violation.fix or rule.info.fix,
        file=doc.file if doc is not None else None,
        line=line,
    )
