"""The policy engine: registered rules, the context they see, and their evaluation.

A rule is a small function registered with an id, a severity, a title, a why
and a fix. Resource rules get one document and the Context; pod rules get one
pod template at a time (any workload kind); render rules see the render as a
whole (its kustomize inputs, for example). The Context holds every document
of the same render, the cluster's platform render for runs and templates,
and the cluster profile when there is one.

Every pod meets every pod rule of its kind unless the rule's `applies` predicate
says otherwise, so a predicate that can only hold for pods setting some name (a
field, a resource, an annotation, a label) declares it (`needs`, `sets_any`): the
engine then picks a pod's rules by the names it sets, once per distinct set of
names, instead of asking each predicate. A rule that can only report when the render
holds some kind (a PriorityClass, a CRD) says so (`render_needs`), and renders without
it never run the rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainops import rules as catalog
from trainops.model import ERROR, INFO, WARNING, Document, Finding, Target, json_path
from trainops.policy import trainjob
from trainops.policy.index import RenderIndex
from trainops.policy.pods import POD_KINDS, PodTemplate, effective_labels, pod_templates
from trainops.profile.model import ClusterProfile
from trainops.render.inputs import InputGraph, repository_root
from trainops.report import EXEMPTION_IN_EFFECT
from trainops.yamlio import cycle_collection_paused, locate

EXEMPT_PREFIX = "trainops.dev/exempt-"
# Rules registered with `security=True`: only the platform's policy config (or an
# annotation on a path it lists) exempts from them, never the change being checked.
SECURITY = "security"


@dataclass(frozen=True)
class Violation:
    message: str
    path: tuple[Any, ...] = ()
    fix: str | None = None  # overrides the rule's generic fix when more precise
    severity: str | None = None  # overrides the rule's severity for this case


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

    @property
    def id(self) -> str:
        return self.info.id


_RULES: dict[str, Rule] = {}
catalog.register(
    catalog.RuleInfo(
        id=EXEMPTION_IN_EFFECT,
        severity=INFO,
        title="Every exemption in effect is reported",
        why="An exemption hides a finding; reviewers must still see that it exists, why, "
        "and who granted it (the policy config, until a date, or an annotation).",
        fix="Fix the resource and drop the exemption when its reason no longer holds.",
    )
)
# `kinds=EVERY_KIND`: a resource rule that must see documents of every kind (rare:
# each such rule runs once per document of the render, so it must be cheap).
EVERY_KIND = ()


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
        info = catalog.RuleInfo(kinds=kinds, category=category, **fields)
        if info.id in _RULES and _RULES[info.id].check is not function:
            raise ValueError(f"policy rule {info.id!r} defined twice")
        catalog.register(info)
        _RULES[info.id] = Rule(info, scope, function, applies, render_needs)
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
    exempt itself from.
    """
    return _register("resource", **fields)


def pod_rule(**fields: Any) -> Callable:
    """Register `check(pod, ctx) -> Iterable[Violation]` for pod templates (of `kinds`).

    `applies`, a predicate on the pod such as `gpu_pod`, keeps the rule from pods it is
    not about (it must hold wherever the rule can report); the engine asks it once per
    pod for every rule that shares it. `render_needs` as for resource rules.
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


class Context:
    """What a rule may look at besides the resource it checks.

    Everything is a lookup on an index built once per render (`policy/index.py`):
    rules never get the render as a list, so no rule can rescan it per resource.
    """

    def __init__(
        self,
        target: Target,
        documents: Iterable[Document],
        platform: Iterable[Document] = (),
        profile: ClusterProfile | None = None,
        inputs: InputGraph | None = None,
    ):
        self.target = target
        self.profile = profile
        self.inputs = inputs
        platform = list(platform)
        self.has_platform = bool(platform)  # a run or template checked with its cluster
        # Whether exemption annotations may silence security rules here (set by evaluate).
        self.annotations_trusted = False
        with cycle_collection_paused():
            self._index = RenderIndex(documents, platform)
        self._pods: dict[int, list[PodTemplate]] = {}

    def pods(self, doc: Document) -> list[PodTemplate]:
        """The pod templates of `doc`; a TrainJob's are resolved against its runtime."""
        key = id(doc)
        found = self._pods.get(key)
        if found is None:
            runtime = self.runtime_for(doc) if doc.kind == "TrainJob" else None
            if runtime is not None:
                found = trainjob.effective_pods(doc, runtime)
            else:
                found = pod_templates(doc) if doc.kind in POD_KINDS else []
            self._pods[key] = found
        return found

    def runtime_for(self, doc: Document) -> Document | None:
        """The (Cluster)TrainingRuntime a TrainJob references, if this render has it."""
        ref = trainjob.runtime_ref(doc)
        if ref is None or ref[0] not in trainjob.RUNTIME_KINDS:
            return None
        kind, name = ref
        namespace = doc.namespace or "default" if kind == "TrainingRuntime" else None
        return self.find(kind, name, namespace)

    @property
    def kinds(self) -> frozenset[str]:
        """Every kind this render and the platform's hold."""
        return self._index.kinds

    def of_kind(self, *kinds: str) -> list[Document]:
        """Documents of these kinds in this render and the platform's, in render order."""
        return self._index.of_kind(*kinds)

    def find(self, kind: str, name: str, namespace: str | None = None) -> Document | None:
        """The first `kind` named `name` (in `namespace`, or cluster-scoped)."""
        return self._index.find(kind, name, namespace)

    def crd(self, group: str, kind: str) -> Document | None:
        """The CRD for group/kind when this render (not the platform) creates it."""
        return self._index.crd(group, kind)

    def pods_selected(self, namespace: str, selector: dict[str, Any]) -> list[PodTemplate]:
        """Pod templates in `namespace` whose labels hold every key/value of `selector`."""
        by_label = self._index.memo(
            ("pods-by-label", namespace), lambda: self._label_index(namespace)
        )
        pods, labelled = by_label
        if not selector:
            return list(pods)
        candidates: set[int] | None = None
        for item in selector.items():
            matching = labelled.get((str(item[0]), str(item[1])), set())
            candidates = matching if candidates is None else candidates & matching
            if not candidates:
                return []
        return [pods[i] for i in sorted(candidates or ())]

    def pods_in_namespace(self, namespace: str) -> list[PodTemplate]:
        """Every pod template of the documents in `namespace` ("default" when unset)."""
        return self._index.memo(
            ("pods", namespace),
            lambda: [pod for doc in self._index.in_namespace(namespace) for pod in self.pods(doc)],
        )

    def _label_index(self, namespace: str) -> tuple[list[PodTemplate], dict]:
        pods = self.pods_in_namespace(namespace)
        labelled: dict[tuple[str, str], set[int]] = defaultdict(set)
        for i, pod in enumerate(pods):
            for key, value in effective_labels(pod).items():
                labelled[(str(key), str(value))].add(i)
        return pods, labelled

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A fact about the whole render (e.g. every NAD's address ranges), computed once."""
        return self._index.memo(key, compute)

    @property
    def is_run(self) -> bool:
        return "runs" in self.target.path.replace("\\", "/").split("/")


@dataclass(frozen=True)
class Exemption:
    rule: str
    reason: str
    resources: tuple[str, ...]  # resource ids; "*" matches any part
    expires: date | None = None
    where: str = "policy config"  # file:line that grants it, shown with every use

    def covers(self, resource: str) -> bool:
        return any(_id_matches(pattern, resource) for pattern in self.resources)


def _id_matches(pattern: str, resource: str) -> bool:
    want, have = pattern.split("/"), resource.split("/")
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


@dataclass
class PolicySettings:
    severity: dict[str, str] = field(default_factory=dict)  # rule id -> severity or "off"
    exemptions: list[Exemption] = field(default_factory=list)  # only those still in force
    # Paths (repository-relative, globs) whose own exemption annotations may silence
    # security rules; a run is never one of them.
    annotation_paths: tuple[str, ...] = ()
    problems: list[Finding] = field(default_factory=list)  # about the settings themselves


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
        severity = settings.severity.get(rule.id) or violation.severity or rule.info.severity
        finding = _finding(rule, doc, pod, violation, severity, ctx.target)
        granted = _exemption(rule, doc, settings, ctx.annotations_trusted) if doc else None
        if granted is None:
            findings.append(finding)
        else:
            exempted.setdefault((id(doc), rule.id), [granted, finding]).append(finding)
    findings += [_exempted_finding(granted, silenced) for granted, *silenced in exempted.values()]
    findings.sort(key=lambda f: (f.resource, f.path, f.rule, f.message))
    return findings


def in_force(ctx: Context, settings: PolicySettings) -> tuple[Rule, ...]:
    """The rules to run on the render in `ctx`: those not turned off whose `render_needs`
    it meets."""
    held = ctx.kinds
    return tuple(
        rule
        for rule in _RULES.values()
        if settings.severity.get(rule.id) != "off"
        and (not rule.render_needs or not rule.render_needs.isdisjoint(held))
    )


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
        for kind in POD_KINDS | {k for r in pods for k in r.info.kinds}
    }
    return _Dispatch(
        [r for r in rules if r.scope == "render"],
        resource_table,
        for_kind(resource, ""),
        pod_table,
    )


Found = list[tuple[Rule, Document | None, PodTemplate | None, Violation]]


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
    for doc in ctx._index.documents:
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
                    for violation in rule.check(doc, ctx):
                        found.append((rule, doc, None, violation))
                except Exception as exc:
                    found.append((rule, doc, None, _internal_error(rule, exc)))
        if not dispatch.pod.get(kind):
            continue
        for pod in ctx.pods(doc):
            for applies, rules in dispatch.pod_groups(kind, pod.features):
                if applies is not None:
                    try:
                        if not applies(pod):
                            continue
                    except Exception:  # as for documents
                        pass
                for rule in rules:
                    try:
                        for violation in rule.check(pod, ctx):
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


def annotations_trusted(ctx: Context, settings: PolicySettings) -> bool:
    """Whether exemption annotations in this render may silence security rules: only
    when its path is one the platform's policy config lists, and never for a run."""
    if ctx.is_run or not settings.annotation_paths:
        return False
    path = Path(ctx.target.path)
    try:
        relative = path.resolve().relative_to(repository_root(path)).as_posix()
    except (ValueError, OSError, RuntimeError):
        return False
    return any(
        fnmatchcase(relative, pattern) or relative.startswith(pattern.rstrip("/") + "/")
        for pattern in settings.annotation_paths
    )


def _exemption(
    rule: Rule, doc: Document, settings: PolicySettings, trusted: bool
) -> tuple[str, str] | None:
    """(reason, who granted it) when an exemption covers `rule` on `doc`.

    The policy config's exemptions hold for every rule. A resource's own annotation
    holds for ordinary rules, and for security rules only where `trusted`: otherwise a
    change could open the gate that is checking it.
    """
    for exemption in settings.exemptions:
        if exemption.rule == rule.id and exemption.covers(doc.resource_id):
            until = f", until {exemption.expires.isoformat()}" if exemption.expires else ""
            return exemption.reason, f"{exemption.where}{until}"
    annotations = doc.metadata.get("annotations")
    reason = annotations.get(EXEMPT_PREFIX + rule.id) if isinstance(annotations, dict) else None
    if reason is None or not str(reason).strip():
        return None
    if rule.info.category == SECURITY and not trusted:
        return None
    return str(reason).strip(), f"annotation {EXEMPT_PREFIX}{rule.id}"


def _exempted_finding(granted: tuple[str, str], silenced: list[Finding]) -> Finding:
    """One info finding per resource and rule for what an exemption silenced."""
    reason, where = granted
    first = silenced[0]
    what = (
        first.message if len(silenced) == 1 else f"{len(silenced)} findings, first: {first.message}"
    )
    return replace(
        first,
        rule=EXEMPTION_IN_EFFECT,
        severity=INFO,
        message=f"{first.rule} exempted by {where}: {reason.rstrip('.')} (silences {what})",
        fix="",
    )


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


def exemption_annotations_present(doc: Document) -> bool:
    """Documents with annotations (where an exemption annotation could be)."""
    return bool(doc.metadata.get("annotations"))


@resource_rule(
    id="policy-exemption",
    severity="error",
    title="Exemption annotations name a real rule and give a reason",
    why="An exemption silences a finding a reviewer would otherwise see; one without a "
    "reason cannot be reviewed, and one naming no rule silences nothing (usually a typo).",
    fix="Write `trainops.dev/exempt-<rule-id>: <why this resource may break the rule>` with a "
    "rule id from `trainops policies list`.",
    kinds=EVERY_KIND,
    applies=exemption_annotations_present,
)
def exemption_annotations(doc: Document, ctx: Context) -> Iterator[Violation]:
    annotations = doc.metadata.get("annotations")
    for key, value in annotations.items() if isinstance(annotations, dict) else ():
        if not str(key).startswith(EXEMPT_PREFIX):
            continue
        rule_id = str(key)[len(EXEMPT_PREFIX) :]
        path = ("metadata", "annotations", key)
        if rule_id not in _RULES:
            yield Violation(f"exemption names unknown rule {rule_id!r}", path)
        elif not str(value).strip():
            yield Violation(f"exemption from {rule_id} gives no reason", path)
        elif _RULES[rule_id].info.category == SECURITY and not ctx.annotations_trusted:
            yield Violation(
                f"{rule_id} is a security rule: an annotation here does not exempt from it",
                path,
                fix="Ask the platform team for an exemption in policies/config.yaml (with a "
                "reason and an expiry), or fix the resource.",
                severity=WARNING,
            )
