"""Argo CD ownership: one Application per object, projects that admit what their charts
render, and ApplicationSets that do not delete what they generated."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

import yaml

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts, mapping

from .charts import CHARTS, always_rendered, full_name

APP_KINDS = ("Application", "ApplicationSet")


@resource_rule(
    id="argocd-single-owner",
    severity=WARNING,
    title="No object in Git is also rendered by an add-on's Helm chart",
    why="Two Argo CD Applications that sync one object fight over it: both apply it with the "
    "same server-side-apply field manager, so each sync can strip the other's fields (a "
    "chart-rendered ClusterPolicy whose Git copy lacks the operand images fails with 'empty "
    "image path'), tracking labels flap, and the chart's upgrades never reach the object. "
    "Argo CD applies both by default (FailOnSharedResource is off); what breaks depends on "
    "how the two copies differ.",
    fix="Leave the object to the chart and set it through the add-on's Helm values (trainops "
    "generates overlays/<cluster>/addons/gpu-operator.yaml from cluster.yaml); drop it from "
    "the kustomization.",
    kinds=tuple(sorted({kind for _, kind, _ in always_rendered()})),
)
def single_owner(doc: Document, ctx: Context) -> Iterator[Violation]:
    group = doc.api_version.rpartition("/")[0]
    chart = always_rendered().get((group, doc.kind, doc.name))
    if chart is None:
        return
    yield Violation(
        f"the {chart.name} chart ({chart.version}) always renders {doc.kind} {doc.name}: "
        "with it installed as an add-on, two Applications own this object",
        ("metadata", "name"),
    )


def _app_spec(doc: Document) -> dict[str, Any]:
    spec = mapping(doc.obj.get("spec"))
    return mapping(mapping(spec.get("template")).get("spec")) if doc.kind != "Application" else spec


def _helm_values(helm: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    text = helm.get("values")
    if isinstance(text, str) and len(text) < 1_000_000:
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError:
            loaded = None
        values.update(mapping(loaded))
    values.update(mapping(helm.get("valuesObject")))
    for parameter in dicts(helm.get("parameters")):
        values[str(parameter.get("name"))] = parameter.get("value")
    return values


def _switched_off(values: dict[str, Any], key: str, value: Any) -> bool:
    found = values.get(key)
    return found == value or str(found).lower() == str(value).lower()


def _allows(patterns: list[dict[str, Any]], key: str, value: str) -> bool:
    return any(fnmatch.fnmatchcase(value, str(p.get(key, ""))) for p in patterns)


@resource_rule(
    id="appproject-chart-namespaces",
    severity=ERROR,
    title="An add-on's AppProject admits every namespace its chart writes to",
    why="A chart may render objects outside its release namespace (Kueue's renders a "
    "RoleBinding in kube-system). If the Application's project does not allow that "
    "destination, Argo CD refuses the whole sync as invalid: nothing of the add-on installs.",
    fix="Turn the object off through the chart's values and create it from an Application "
    "whose project reaches that namespace (trainops: the platform creates Kueue's kube-system "
    "RoleBinding), or add the namespace to the project's destinations.",
    kinds=APP_KINDS,
    source=(
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/controller/sync.go#L658",
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/controller/sync.go#L667",
    ),
)
def chart_namespaces(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = _app_spec(doc)
    project = ctx.find("AppProject", str(spec.get("project") or "default"), doc.namespace)
    if project is None:
        return
    project_spec = mapping(project.obj.get("spec"))
    destinations = dicts(project_spec.get("destinations"))
    kinds = project_spec.get("namespaceResourceWhitelist")
    sources = [spec.get("source"), *(spec.get("sources") or [])]
    for index, source in enumerate(sources):
        source = mapping(source)
        chart = CHARTS.get(str(source.get("chart", "")))
        if chart is None:
            continue
        helm = mapping(source.get("helm"))
        values = _helm_values(helm)
        release = str(helm.get("releaseName") or chart.name)
        at = ("spec", "source") if index == 0 else ("spec", "sources", index - 1)
        if doc.kind == "ApplicationSet":
            at = ("spec", "template", *at)
        for obj in chart.objects:
            if obj.namespace is None or (obj.unless and _switched_off(values, *obj.unless)):
                continue
            name = obj.name.format(fullname=full_name(release, chart.name, values))
            what = f"the {chart.name} chart ({chart.version}) renders {obj.kind} {name}"
            if not _allows(destinations, "namespace", obj.namespace):
                yield Violation(
                    f"{what} in {obj.namespace}, which AppProject {project.name} does not "
                    "allow: Argo CD rejects the sync",
                    at,
                )
            elif isinstance(kinds, list) and not any(
                _allows([k], "group", obj.group) and _allows([k], "kind", obj.kind) for k in kinds
            ):
                yield Violation(f"{what}, a kind AppProject {project.name} does not allow", at)


@resource_rule(
    id="appproject-namespaced-kinds",
    severity=WARNING,
    title="AppProjects list the namespaced kinds they allow",
    why="Without namespaceResourceWhitelist (or a blacklist) an AppProject allows every "
    "namespaced kind in its destinations: Roles, RoleBindings, Secrets, whatever an "
    "Application renders. A project meant to be least privilege then is not.",
    fix="List the namespaced kinds the project's Applications render in "
    "spec.namespaceResourceWhitelist (argocd/projects.yaml is generated that way).",
    kinds=("AppProject",),
)
def namespaced_kinds(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if "namespaceResourceWhitelist" not in spec and "namespaceResourceBlacklist" not in spec:
        yield Violation(
            "no namespaceResourceWhitelist: every namespaced kind is allowed", ("spec",)
        )


@resource_rule(
    id="applicationset-preserve-resources",
    severity=WARNING,
    title="ApplicationSets keep what they synced when an Application goes away",
    why="An ApplicationSet deletes the Application of a generator entry that disappears (an "
    "overlay renamed or removed, a label changed), and by default that deletion cascades to "
    "every resource the Application synced: namespaces with their volumes (Delete=false on "
    "a claim does not survive its namespace), CRDs and so every custom resource, drivers.",
    fix="Set spec.syncPolicy.preserveResourcesOnDeletion: true on the ApplicationSet; delete "
    "resources deliberately, not as a side effect of a rename.",
    kinds=("ApplicationSet",),
)
def preserve_resources(doc: Document, ctx: Context) -> Iterator[Violation]:
    policy = mapping(mapping(doc.obj.get("spec")).get("syncPolicy"))
    if policy.get("preserveResourcesOnDeletion") is not True:
        yield Violation(
            "preserveResourcesOnDeletion is not set: removing a generator entry deletes "
            "everything its Application synced",
            ("spec", "syncPolicy"),
        )
