"""What the Helm charts of common cluster add-ons render whatever their values say, or
unless a value turns it off (no rules here).

Argo CD installs these charts from their repositories; the validator does not
render them, so their facts are kept as data, each naming the chart version and
template it was read from. tests/test_chart_facts.py checks every fact against
the pinned templates in tests/charts/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChartObject:
    """An object a chart renders. `name` may contain {fullname} (the release's full name);
    `namespace` None means the release namespace; `unless` is a values key and the value
    that turns the object off (None: always rendered)."""

    group: str
    kind: str
    name: str
    namespace: str | None
    template: str
    unless: tuple[str, Any] | None = None


@dataclass(frozen=True)
class Chart:
    name: str
    version: str  # the version the facts were read from
    objects: tuple[ChartObject, ...]


CHARTS = {
    chart.name: chart
    for chart in (
        Chart(
            "gpu-operator",
            "v25.10.1",
            (
                ChartObject(
                    "nvidia.com",
                    "ClusterPolicy",
                    "cluster-policy",
                    None,
                    "templates/clusterpolicy.yaml",
                ),
            ),
        ),
        Chart(
            "kueue",
            "0.19.2",
            (
                ChartObject(
                    "rbac.authorization.k8s.io",
                    "RoleBinding",
                    "{fullname}-visibility-server-auth-reader",
                    "kube-system",
                    "templates/visibility/role_binding.yaml",
                    unless=("enableVisibilityAuthReaderRoleBinding", False),
                ),
            ),
        ),
    )
}


def always_rendered() -> dict[tuple[str, str, str], Chart]:
    """(group, kind, name) of the objects a chart renders whatever its values, by chart."""
    return {
        (obj.group, obj.kind, obj.name): chart
        for chart in CHARTS.values()
        for obj in chart.objects
        if obj.unless is None and "{" not in obj.name
    }


def full_name(release: str, chart: str, values: dict[str, Any]) -> str:
    """Helm's usual `<chart>.fullname`: fullnameOverride, else the release name when it
    contains the chart's name, else <release>-<chart>."""
    override = values.get("fullnameOverride")
    if isinstance(override, str) and override:
        return override[:63].rstrip("-")
    name = values.get("nameOverride") or chart
    full = release if str(name) in release else f"{release}-{name}"
    return full[:63].rstrip("-")
