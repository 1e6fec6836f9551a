"""Generates argocd/projects.yaml: least-privilege AppProjects for every cluster and team.

Destinations name each cluster and namespace explicitly (no wildcards), so
the projects are regenerated whenever a cluster is added or its profile changes
what it installs. Three projects
separate what may reach a cluster: the platform (this repository, a fixed
list of kinds), the Helm add-ons (their chart repositories and this one for
their values, their own namespaces, the kinds their charts render) and the
runs (only training job kinds and their NetworkPolicies in the training namespace,
nothing cluster-scoped). Each team gets a project of its own, `trainops-team-<team>`: the
same kinds, in the team's namespace on the clusters that list the team, so
an Application of one team's runs cannot write into another team's namespace
or anything of the platform. Every project lists its namespaced kinds too:
without a namespaceResourceWhitelist a project allows every namespaced kind.
"""

from __future__ import annotations

from typing import Any

from trainops.profile.model import ClusterProfile
from trainops.profile.overlay import platform_namespaces
from trainops.yamlio import dump

TRAINING_NAMESPACE = "training"
ADDON_SOURCES = (
    "https://helm.ngc.nvidia.com/nvidia",
    "registry.k8s.io/kueue/charts",
    "https://volcano-sh.github.io/helm-charts",
)
ADDON_NAMESPACES = ("gpu-operator", "kueue-system", "volcano-system")

PLATFORM_CLUSTER_KINDS = (
    ("", "Namespace"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"),
    ("kueue.x-k8s.io", "ClusterQueue"),
    ("kueue.x-k8s.io", "ResourceFlavor"),
    ("kueue.x-k8s.io", "Topology"),
    ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("scheduling.volcano.sh", "Queue"),
    ("mellanox.com", "NicClusterPolicy"),
)
PLATFORM_NAMESPACED_KINDS = (
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("", "PersistentVolumeClaim"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("apps", "Deployment"),
    ("apps", "DaemonSet"),
    ("k8s.cni.cncf.io", "NetworkAttachmentDefinition"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("kueue.x-k8s.io", "LocalQueue"),
    ("monitoring.coreos.com", "PodMonitor"),
    ("monitoring.coreos.com", "PrometheusRule"),
    # The GPU health check (monitoring/).
    ("batch", "CronJob"),
    ("monitoring.coreos.com", "ServiceMonitor"),
    ("sriovnetwork.openshift.io", "SriovNetworkNodePolicy"),
    ("sriovnetwork.openshift.io", "SriovOperatorConfig"),
)
ADDON_CLUSTER_KINDS = (
    ("", "Namespace"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("apiregistration.k8s.io", "APIService"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("nfd.k8s-sigs.io", "NodeFeatureRule"),
    ("nvidia.com", "ClusterPolicy"),
    ("scheduling.volcano.sh", "Queue"),
)
# What the add-on charts render in their own namespaces (gpu-operator v25.10.1 with
# node-feature-discovery, kueue 0.19.2, volcano 1.13.0, with the values argocd/ sets).
ADDON_NAMESPACED_KINDS = (
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("apps", "Deployment"),
    ("apps", "DaemonSet"),
    ("batch", "Job"),
    ("policy", "PodDisruptionBudget"),
)
# What a run may hold: the job kinds the queue admits and the admission policy matches
# (a TFJob is neither: its GPUs would run outside every quota), and the NetworkPolicy
# that opens the job's pods to each other (named after the job, as the job is).
RUN_KINDS = (
    ("kubeflow.org", "PyTorchJob"),
    ("kubeflow.org", "MPIJob"),
    ("trainer.kubeflow.org", "TrainJob"),
    # A run's data preparation (`new-run --prepare`), once per run before its job.
    ("batch", "Job"),
    ("networking.k8s.io", "NetworkPolicy"),
)


def _kinds(pairs: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    return [{"group": group, "kind": kind} for group, kind in pairs]


def _destinations(clusters: list[str], namespaces: tuple[str, ...]) -> list[dict[str, str]]:
    return [{"name": c, "namespace": ns} for c in sorted(clusters) for ns in namespaces]


def _platform_destinations(profiles: list[ClusterProfile]) -> list[dict[str, str]]:
    return [
        {"name": p.name, "namespace": ns}
        for p in sorted(profiles, key=lambda p: p.name)
        for ns in [*platform_namespaces(p), *(t.namespace for t in p.teams)]
    ]


def team_clusters(profiles: list[ClusterProfile]) -> dict[str, list[ClusterProfile]]:
    """Each team name and the clusters whose profile lists it."""
    teams: dict[str, list[ClusterProfile]] = {}
    for p in sorted(profiles, key=lambda p: p.name):
        for team in p.teams:
            teams.setdefault(team.name, []).append(p)
    return dict(sorted(teams.items()))


def team_project(team: str) -> str:
    return f"trainops-team-{team}"


def _team_projects(repo_url: str, profiles: list[ClusterProfile]) -> list[dict[str, Any]]:
    return [
        _project(
            team_project(team),
            f"Training runs of team {team}: job objects in its own namespace, nothing else",
            {
                "sourceRepos": [repo_url],
                "destinations": [{"name": p.name, "namespace": team} for p in clusters],
                "clusterResourceWhitelist": [],
                "namespaceResourceWhitelist": _kinds(RUN_KINDS),
            },
        )
        for team, clusters in team_clusters(profiles).items()
    ]


def _project(name: str, description: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {"description": description, **spec},
    }


def render_projects(repo_url: str, profiles: list[ClusterProfile]) -> str:
    clusters = [p.name for p in profiles]
    projects = [
        _project(
            "trainops-platform",
            "Operators, networks, GPU policy, storage and queues of each training cluster",
            {
                "sourceRepos": [repo_url],
                "destinations": _platform_destinations(profiles),
                "clusterResourceWhitelist": _kinds(PLATFORM_CLUSTER_KINDS),
                "namespaceResourceWhitelist": _kinds(PLATFORM_NAMESPACED_KINDS),
            },
        ),
        _project(
            "trainops-addons",
            "Pinned Helm charts: GPU Operator, Kueue, Volcano",
            {
                # This repository for the values files (an Application's `ref` source).
                "sourceRepos": [*ADDON_SOURCES, repo_url],
                "destinations": _destinations(clusters, ADDON_NAMESPACES),
                "clusterResourceWhitelist": _kinds(ADDON_CLUSTER_KINDS),
                "namespaceResourceWhitelist": _kinds(ADDON_NAMESPACED_KINDS),
            },
        ),
        _project(
            "trainops-runs",
            "Training runs: job objects in the training namespace, nothing else",
            {
                "sourceRepos": [repo_url],
                "destinations": _destinations(clusters, (TRAINING_NAMESPACE,)),
                "clusterResourceWhitelist": [],
                "namespaceResourceWhitelist": _kinds(RUN_KINDS),
            },
        ),
        *_team_projects(repo_url, profiles),
    ]
    header = (
        "# Generated by trainops from overlays/*/cluster.yaml (new-cluster rewrites it).\n"
        "# Least privilege: explicit clusters, namespaces and kinds, no wildcards.\n"
    )
    return header + "---\n".join(dump(p) for p in projects)
