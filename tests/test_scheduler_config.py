"""The scheduler add-ons' generated configuration, rendered as their pinned charts render it.

helm is not here, so the two chart templates the values feed (tests/charts, SOURCE
there) are checked to be the pipelines this test reproduces: Kueue's manager-config
template parses `managerConfig.controllerManagerConfigYaml` (fromYaml), adds
internalCertManagement when absent and writes it back (toYaml); Volcano's scheduler
template inserts `scheduler_config_override` as text and its controller template writes
`controller_config_override` through toYaml. The rendered Configuration is then held
against Kueue's own type (its JSON field names) and the chart's defaults.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support import REPO
from trainops.model import Target
from trainops.profile.model import load_profile, parse_profile
from trainops.profile.schedulers import FAIR_SHARING, kueue_values, volcano_values
from trainops.render.engine import Renderer, RenderOptions

CHARTS = REPO / "tests" / "charts"
KUEUE = CHARTS / "kueue-0.19.2"
VOLCANO = CHARTS / "volcano-1.13.0"
# Kueue job kinds by the integration that manages them (names as the chart lists them).
FRAMEWORK_OF = {
    ("kubeflow.org/v1", "PyTorchJob"): "kubeflow.org/pytorchjob",
    ("kubeflow.org/v2beta1", "MPIJob"): "kubeflow.org/mpijob",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org/trainjob",
}


def render_kueue_config(values: dict) -> dict:
    template = (KUEUE / "templates/manager/manager-config.yaml").read_text()
    assert ".Values.managerConfig.controllerManagerConfigYaml | fromYaml" in template
    assert "if not $config.internalCertManagement" in template
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    config.setdefault(
        "internalCertManagement",
        {
            "enable": True,
            "webhookServiceName": "kueue-webhook-service",
            "webhookSecretName": "kueue-webhook-server-cert",
        },
    )
    return yaml.safe_load(yaml.safe_dump(config))  # toYaml, and the manager reading it


def _json_fields(struct: str) -> set[str]:
    """The JSON field names of a Go struct in Kueue's vendored configuration_types.go."""
    source = (KUEUE / "apis/configuration_types.go").read_text()
    body = re.search(rf"^type {struct} struct {{\n(.*?)^}}", source, re.S | re.M)
    assert body, struct
    fields = set(re.findall(r'json:"([A-Za-z]+)', body.group(1)))
    for inline in re.findall(r"^\s+([\w.]+)\s+`json:\",inline\"`", body.group(1), re.M):
        # metav1.TypeMeta is apimachinery's: apiVersion and kind.
        fields |= {"apiVersion", "kind"} if inline == "metav1.TypeMeta" else _json_fields(inline)
    return fields


STRUCTS = {
    (): "Configuration",
    ("waitForPodsReady",): "WaitForPodsReady",
    ("waitForPodsReady", "requeuingStrategy"): "RequeuingStrategy",
    ("integrations",): "Integrations",
    ("fairSharing",): "FairSharing",
    ("health",): "ControllerHealth",
    ("metrics",): "ControllerMetrics",
    ("webhook",): "ControllerWebhook",
    ("controller",): "ControllerConfigurationSpec",
    ("clientConnection",): "ClientConnection",
    ("internalCertManagement",): "InternalCertManagement",
}


def _unknown_fields(config: dict) -> list[str]:
    unknown = []
    for path, struct in STRUCTS.items():
        node = config
        for step in path:
            node = node.get(step) if isinstance(node, dict) else None
        if isinstance(node, dict):
            allowed = _json_fields(struct)
            unknown += [".".join((*path, key)) for key in node if key not in allowed]
    return unknown


def clusters() -> list[str]:
    return sorted(p.parent.name for p in (REPO / "overlays").glob("*/cluster.yaml"))


@pytest.mark.parametrize("cluster", [c for c in clusters() if c != "lab-tcp"])
def test_committed_add_on_values_are_what_the_profile_generates(cluster):
    profile = load_profile(REPO / "overlays" / cluster / "cluster.yaml")
    values = yaml.safe_load(
        (REPO / "overlays" / cluster / "addons" / f"{profile.scheduler}.yaml").read_text()
    )
    generate = kueue_values if profile.scheduler == "kueue" else volcano_values
    assert values == generate(profile)


def kueue_clusters() -> list[str]:
    return [
        c
        for c in clusters()
        if load_profile(REPO / "overlays" / c / "cluster.yaml").scheduler == "kueue"
    ]


@pytest.mark.parametrize("cluster", kueue_clusters())
def test_kueue_configuration_renders_valid_with_waitforpodsready_and_the_clusters_frameworks(
    cluster,
):
    profile = load_profile(REPO / "overlays" / cluster / "cluster.yaml")
    config = render_kueue_config(kueue_values(profile))
    assert _unknown_fields(config) == []
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    ready = config["waitForPodsReady"]
    assert ready["timeout"] == profile.podsReadyTimeout == "15m"
    assert ready["requeuingStrategy"]["backoffBaseSeconds"] == profile.requeueBackoffSeconds
    assert ready["requeuingStrategy"]["backoffMaxSeconds"] == profile.requeueBackoffMaxSeconds
    assert ready["requeuingStrategy"]["timestamp"] in ("Eviction", "Creation")
    # Every setting of the chart's own Configuration is kept (integrations excepted: ours).
    default = yaml.safe_load(
        yaml.safe_load((KUEUE / "values.yaml").read_text())["managerConfig"][
            "controllerManagerConfigYaml"
        ]
    )
    for key, value in default.items():
        if key != "integrations":
            assert config[key] == value, key
    # Each job kind the cluster renders is managed by Kueue, which the chart's default
    # list would not do for PyTorchJob.
    kinds = _rendered_job_kinds(cluster)
    frameworks = set(config["integrations"]["frameworks"])
    missing = {FRAMEWORK_OF[k] for k in kinds if k in FRAMEWORK_OF} - frameworks
    assert missing == set()
    chart_names = set(
        re.findall(r'-\s+"([a-z0-9.-]+/[a-z]+)"', (KUEUE / "values.yaml").read_text())
    )
    assert frameworks <= chart_names  # names the chart knows (listed or commented out)
    assert "kubeflow.org/pytorchjob" not in default["integrations"]["frameworks"]


def _rendered_job_kinds(cluster: str) -> set[tuple[str, str]]:
    renderer = Renderer(RenderOptions())
    overlay = REPO / "overlays" / cluster / "training"
    targets = [Target("kustomization", str(d)) for d in sorted(overlay.iterdir()) if d.is_dir()]
    kinds = set()
    for result in renderer.render(targets):
        kinds |= {(d.api_version, d.kind) for d in result.documents}
    return kinds


def test_fair_sharing_only_with_teams_and_with_a_valid_strategy_pair():
    base = {
        "fabric": "tcp",
        "nic": "eth1",
        "gpusPerNode": 8,
        "nodes": 8,
        "image": "ghcr.io/example-org/trainer:1.0.0",
        "storageClass": "nfs",
        "scheduler": "kueue",
    }
    alone = render_kueue_config(kueue_values(parse_profile(dict(base), "solo")))
    assert "fairSharing" not in alone
    shared = parse_profile({**base, "teams": [{"name": "a", "gpus": 32}]}, "shared")
    config = render_kueue_config(kueue_values(shared))
    assert config["fairSharing"] == {"preemptionStrategies": FAIR_SHARING}
    assert _unknown_fields(config) == []
    # Kueue accepts these sets only (pkg/config/validation.go validStrategySets).
    assert FAIR_SHARING == ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


def test_volcano_configuration_renders_as_the_chart_inserts_it():
    scheduler_template = (VOLCANO / "templates/scheduler.yaml").read_text()
    controller_template = (VOLCANO / "templates/controllers.yaml").read_text()
    assert ".Values.custom.scheduler_config_override | nindent 4" in scheduler_template
    assert "toYaml .Values.custom.controller_config_override | nindent 4" in controller_template
    profile = parse_profile(
        {
            "fabric": "tcp",
            "nic": "eth1",
            "gpusPerNode": 8,
            "nodes": 16,
            "image": "ghcr.io/example-org/trainer:1.0.0",
            "storageClass": "nfs",
            "scheduler": "volcano",
            "teams": [{"name": "a", "gpus": 64}],
            "topology": [{"label": "example.com/block", "nodes": 8}],
            "topologyKey": "example.com/block",
        },
        "west",
    )
    custom = volcano_values(profile)["custom"]
    # The scheduler's override is text inserted as-is: a string holding YAML.
    assert isinstance(custom["scheduler_config_override"], str)
    scheduler = yaml.safe_load(custom["scheduler_config_override"])
    default = yaml.safe_load((VOLCANO / "config/volcano-scheduler.conf").read_text())
    names = [p["name"] for tier in scheduler["tiers"] for p in tier["plugins"]]
    defaults = [p["name"] for tier in default["tiers"] for p in tier["plugins"]]
    assert set(defaults) - {"proportion"} <= set(names)  # the chart's plugins stay
    assert "capacity" in names and "proportion" not in names
    # The controller's override goes through toYaml: a map, which renders as YAML text.
    controller = yaml.safe_load(yaml.safe_dump(custom["controller_config_override"]))
    [source] = controller["networkTopologyDiscovery"]
    assert source["source"] == "label" and source["enabled"] is True
    levels = source["config"]["networkTopologyTypes"]["training"]
    assert levels == [{"nodeLabel": "example.com/block"}, {"nodeLabel": "kubernetes.io/hostname"}]
