"""The chart facts the policies rely on (policies/charts.py) hold for the pinned chart
templates in tests/charts/ (SOURCE there), and the add-on values trainops sets use them."""

from __future__ import annotations

import re

import yaml

from tests.support import REPO
from trainops.policy.settings import load_pack

load_pack(REPO / "policies")

from policies.charts import CHARTS, full_name  # noqa: E402 (registered by load_pack)

CHARTS_DIR = REPO / "tests" / "charts"


def _template(chart: str, path: str) -> str:
    return (CHARTS_DIR / f"{chart}-{CHARTS[chart].version}" / path).read_text()


def _guards(text: str, line: str) -> list[str]:
    """The `{{- if ...}}` blocks still open where `line` appears."""
    open_blocks: list[str] = []
    for current in text.splitlines():
        if current.strip() == line:
            return open_blocks
        for tag in re.findall(r"\{\{-?\s*(if|with|range|end)\b([^}]*)\}\}", current):
            if tag[0] == "end":
                open_blocks.pop()
            else:
                open_blocks.append(f"{tag[0]}{tag[1]}".strip())
    raise AssertionError(f"{line!r} not in the template")


def test_every_fact_names_a_pinned_template():
    for chart in CHARTS.values():
        for obj in chart.objects:
            assert f"kind: {obj.kind}" in _template(chart.name, obj.template), obj


def test_the_gpu_operator_chart_always_renders_cluster_policy():
    text = _template("gpu-operator", "templates/clusterpolicy.yaml")
    assert _guards(text, "kind: ClusterPolicy") == []
    assert "  name: cluster-policy" in text.splitlines()


def test_kueues_kube_system_role_binding_is_switched_off_by_one_value():
    [obj] = CHARTS["kueue"].objects
    text = _template("kueue", obj.template)
    assert _guards(text, "kind: RoleBinding") == [f"if .Values.{obj.unless[0]}"]
    assert f"  namespace: {obj.namespace}" in text.splitlines()
    assert "-visibility-server-auth-reader'" in text


def test_the_kueue_add_on_turns_it_off_and_the_platform_binds_the_charts_account():
    appsets = list(yaml.safe_load_all((REPO / "argocd/applicationsets/addons.yaml").read_text()))
    [kueue] = [a for a in appsets if a["metadata"]["name"] == "kueue"]
    # The chart's source (the other one only supplies the generated values file).
    [helm] = [s["helm"] for s in kueue["spec"]["template"]["spec"]["sources"] if "helm" in s]
    values = helm["valuesObject"]
    key, off = CHARTS["kueue"].objects[0].unless
    assert values[key] == off
    binding = yaml.safe_load(
        (REPO / "base/training/queues/kueue/visibility-auth-reader.yaml").read_text()
    )
    fullname = full_name(helm["releaseName"], "kueue", values)
    assert binding["metadata"]["name"] == f"{fullname}-visibility-server-auth-reader"
    assert binding["subjects"][0]["name"] == f"{fullname}-controller-manager"
    assert binding["metadata"]["namespace"] == CHARTS["kueue"].objects[0].namespace


def test_full_name_follows_helm_conventions():
    assert full_name("kueue", "kueue", {}) == "kueue"
    assert full_name("prod-kueue", "kueue", {}) == "prod-kueue"
    assert full_name("queues", "kueue", {}) == "queues-kueue"
    assert full_name("x", "kueue", {"fullnameOverride": "kueue"}) == "kueue"


def test_every_cluster_tells_the_toolkit_to_ignore_visible_devices_of_unprivileged_pods():
    """The chart copies toolkit.env into the ClusterPolicy's toolkit (which sets it on
    nvidia-ctk-installer), and cdi.enabled, which moves the device plugin to CDI devices so
    that requested GPUs do not depend on the variable."""
    from trainops.profile.overlay import TOOLKIT_ENVVAR_WHEN_UNPRIVILEGED

    text = _template("gpu-operator", "templates/clusterpolicy.yaml")
    assert _guards(text, "env: {{ toYaml .Values.toolkit.env | nindent 6 }}") == [
        "if .Values.toolkit.env"
    ]
    assert "enabled: {{ .Values.cdi.enabled }}" in [line.strip() for line in text.splitlines()]
    for values_file in sorted(REPO.glob("overlays/*/addons/gpu-operator.yaml")):
        values = yaml.safe_load(values_file.read_text())
        assert values["cdi"]["enabled"] is True, values_file
        env = {e["name"]: e["value"] for e in values["toolkit"]["env"]}
        assert env[TOOLKIT_ENVVAR_WHEN_UNPRIVILEGED] == "false", values_file
