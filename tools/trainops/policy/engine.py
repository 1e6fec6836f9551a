"""The policy engine: registered rules, the context they see, and their evaluation.

A rule is a small function registered with an id, a severity, a title, a why
and a fix. Resource rules get one document and the Context; pod rules get one
pod template at a time (any workload kind); render rules see the render as a
whole (its kustomize inputs, for example). The Context holds every document
of the same render, the cluster's platform render for runs and templates,
and the cluster profile when there is one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from typing import Any

from trainops import rules as catalog
from trainops.model import Document, Finding, Target, json_path
from trainops.policy.pods import PodTemplate, pod_templates
from trainops.profile.model import ClusterProfile
from trainops.render.inputs import InputGraph
from trainops.yamlio import locate

EXEMPT_PREFIX = "trainops.dev/exempt-"


@dataclass(frozen=True)
class Violation:
    message: str
    path: tuple[Any, ...] = ()
    fix: str | None = None  # overrides the rule's generic fix when more precise
    severity: str | None = None  # overrides the rule's severity for this case


@dataclass
class Rule:
    info: catalog.RuleInfo
    scope: str  # "resource" | "pod" | "render"
    check: Callable[..., Iterable[Violation]]

    @property
    def id(self) -> str:
        return self.info.id


_RULES: dict[str, Rule] = {}


def _register(scope: str, **fields: Any) -> Callable:
    def decorate(function: Callable) -> Callable:
        kinds = tuple(fields.pop("kinds", ()))
        info = catalog.RuleInfo(kinds=kinds, category="policy", **fields)
        if info.id in _RULES and _RULES[info.id].check is not function:
            raise ValueError(f"policy rule {info.id!r} defined twice")
        catalog.register(info)
        _RULES[info.id] = Rule(info, scope, function)
        return function

    return decorate


def resource_rule(**fields: Any) -> Callable:
    """Register `check(doc, ctx) -> Iterable[Violation]` for documents of `kinds`."""
    return _register("resource", **fields)


def pod_rule(**fields: Any) -> Callable:
    """Register `check(pod, ctx) -> Iterable[Violation]` for every pod template."""
    return _register("pod", **fields)


def render_rule(**fields: Any) -> Callable:
    """Register `check(ctx) -> Iterable[tuple[Document | None, Violation]]` per render."""
    return _register("render", **fields)


def registered() -> dict[str, Rule]:
    return dict(_RULES)


@dataclass
class Context:
    """What a rule may look at besides the resource it checks."""

    target: Target
    documents: list[Document]
    platform: list[Document] = field(default_factory=list)
    profile: ClusterProfile | None = None
    inputs: InputGraph | None = None

    @cached_property
    def everything(self) -> list[Document]:
        """This render plus the platform's, each object once."""
        seen = {doc.resource_id for doc in self.documents}
        return self.documents + [d for d in self.platform if d.resource_id not in seen]

    @cached_property
    def _pods(self) -> dict[int, list[PodTemplate]]:
        return {}

    def pods(self, doc: Document) -> list[PodTemplate]:
        key = id(doc)
        if key not in self._pods:
            self._pods[key] = pod_templates(doc)
        return self._pods[key]

    def of_kind(self, *kinds: str) -> list[Document]:
        return [doc for doc in self.everything if doc.kind in kinds]

    def find(self, kind: str, name: str, namespace: str | None = None) -> Document | None:
        for doc in self.everything:
            in_namespace = namespace is None or doc.namespace in (namespace, "")
            if doc.kind == kind and doc.name == name and in_namespace:
                return doc
        return None

    @property
    def is_run(self) -> bool:
        return "runs" in self.target.path.replace("\\", "/").split("/")


@dataclass(frozen=True)
class Exemption:
    rule: str
    reason: str
    resources: tuple[str, ...]  # resource ids; "*" matches any part
    expires: date | None = None

    def covers(self, resource: str) -> bool:
        return any(_id_matches(pattern, resource) for pattern in self.resources)


def _id_matches(pattern: str, resource: str) -> bool:
    want, have = pattern.split("/"), resource.split("/")
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


@dataclass
class PolicySettings:
    severity: dict[str, str] = field(default_factory=dict)  # rule id -> severity or "off"
    exemptions: list[Exemption] = field(default_factory=list)  # only those still in force
    problems: list[Finding] = field(default_factory=list)  # about the settings themselves


def evaluate(ctx: Context, settings: PolicySettings) -> list[Finding]:
    """Run every rule over the render in `ctx`; apply exemptions and overrides."""
    found: list[tuple[Rule, Document | None, Violation]] = []
    for rule in _RULES.values():
        if settings.severity.get(rule.id) == "off":
            continue
        if rule.scope == "render":
            for doc, violation in rule.check(ctx):
                found.append((rule, doc, violation))
            continue
        for doc in ctx.documents:
            if rule.info.kinds and doc.kind not in rule.info.kinds:
                continue
            if rule.scope == "resource":
                for violation in rule.check(doc, ctx):
                    found.append((rule, doc, violation))
            else:
                for pod in ctx.pods(doc):
                    for violation in rule.check(pod, ctx):
                        found.append((rule, doc, violation))
    findings = []
    for rule, doc, violation in found:
        if doc is not None and _exempted(rule.id, doc, settings):
            continue
        severity = settings.severity.get(rule.id) or violation.severity or rule.info.severity
        findings.append(_finding(rule, doc, violation, severity, ctx.target))
    findings.sort(key=lambda f: (f.resource, f.path, f.rule, f.message))
    return findings


def _exempted(rule_id: str, doc: Document, settings: PolicySettings) -> bool:
    annotations = doc.metadata.get("annotations")
    if isinstance(annotations, dict) and str(annotations.get(EXEMPT_PREFIX + rule_id, "")).strip():
        return True
    return any(e.rule == rule_id and e.covers(doc.resource_id) for e in settings.exemptions)


def _finding(
    rule: Rule, doc: Document | None, violation: Violation, severity: str, target: Target
) -> Finding:
    line = None
    if doc is not None and doc.text is not None and doc.line is not None and violation.path:
        found = locate(doc.text, violation.path)
        line = doc.line + found if found is not None else doc.line
    elif doc is not None:
        line = doc.line
    return Finding(
        rule=rule.id,
        severity=severity,
        source=doc.source if doc is not None else target.path,
        resource=doc.resource_id if doc is not None else "",
        path=json_path(list(violation.path)),
        message=violation.message,
        fix=violation.fix or rule.info.fix,
        file=doc.file if doc is not None else None,
        line=line,
    )


@resource_rule(
    id="policy-exemption",
    severity="error",
    title="Exemption annotations name a real rule and give a reason",
    why="An exemption silences a finding a reviewer would otherwise see; one without a "
    "reason cannot be reviewed, and one naming no rule silences nothing (usually a typo).",
    fix="Write `trainops.dev/exempt-<rule-id>: <why this resource may break the rule>` with a "
    "rule id from `trainops policies list`.",
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
