"""The scheduler add-ons' configuration: Helm values of the kueue and volcano charts.

Kueue (chart 0.19.2) reads its whole Configuration from the value
`managerConfig.controllerManagerConfigYaml`, which replaces the chart's default
text: the chart's own settings are carried over here, and to them the profile adds

- `waitForPodsReady`: an admitted job whose pods are not all running (and, after a
  failure, again running) within `podsReadyTimeout` is evicted and requeued with an
  exponential backoff, so a job placed in part does not hold GPUs idle (Kueue 0.19
  enables it with a 30-minute timeout when the key is absent; here the profile says);
- `integrations.frameworks`: the job kinds the cluster runs. The chart's default
  list leaves out `kubeflow.org/pytorchjob`, so PyTorchJobs would run outside the
  queue's quota;
- `fairSharing` when the cluster has teams: preemption between the teams' queues
  by weighted share (Kueue's default strategies).

Volcano (chart 1.13.0) takes `custom.scheduler_config_override`: with teams, the
`capacity` plugin (queues' deserved, capability and guarantee; it replaces
`proportion`, the two cannot run together) and the `preempt` and `reclaim`
actions; with topology levels, the `network-topology-aware` plugin and the
controller's HyperNode discovery from node labels.
"""

from __future__ import annotations

from typing import Any

from trainops.profile.model import ClusterProfile
from trainops.profile.topology import volcano_discovery
from trainops.yamlio import dump

KUEUE_CHART = "0.19.2"
VOLCANO_CHART = "1.13.0"
# The chart's default Configuration (charts/kueue/values.yaml at v0.19.2) minus the
# keys the profile decides (integrations, waitForPodsReady, fairSharing).
KUEUE_CHART_DEFAULTS: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 10,
            "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 300, "burst": 500},
}
# Kueue's own defaults of the preemption strategies (a valid pair, pkg/config/validation.go).
FAIR_SHARING = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


def kueue_frameworks(p: ClusterProfile) -> list[str]:
    """Kueue integrations for the job kinds this cluster runs (names as Kueue registers them)."""
    frameworks = ["batch/job"]
    if p.trainer_v1:
        frameworks.append("kubeflow.org/pytorchjob")
    if p.mpi_v2:
        frameworks.append("kubeflow.org/mpijob")  # Kueue's MPIJob integration is v2beta1
    if p.trainer_v2:
        frameworks += ["jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"]
    return frameworks


def kueue_configuration(p: ClusterProfile) -> dict[str, Any]:
    config = dict(KUEUE_CHART_DEFAULTS)
    config["waitForPodsReady"] = {
        "timeout": p.podsReadyTimeout,
        # After a pod fails while the job runs, the same time to be whole again.
        "recoveryTimeout": p.podsReadyTimeout,
        "blockAdmission": False,
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffBaseSeconds": p.requeueBackoffSeconds,
            "backoffMaxSeconds": p.requeueBackoffMaxSeconds,
        },
    }
    config["integrations"] = {"frameworks": kueue_frameworks(p)}
    if p.teams:
        config["fairSharing"] = {"preemptionStrategies": list(FAIR_SHARING)}
    return config


def kueue_values(p: ClusterProfile) -> dict[str, Any]:
    # The chart's other values (names, the kube-system RoleBinding) are the kueue
    # ApplicationSet's, the same for every cluster.
    return {"managerConfig": {"controllerManagerConfigYaml": dump(kueue_configuration(p))}}


VOLCANO_ACTIONS = "enqueue, allocate, backfill"
VOLCANO_TEAM_ACTIONS = "enqueue, allocate, preempt, reclaim, backfill"


def volcano_scheduler_config(p: ClusterProfile) -> dict[str, Any]:
    """The chart's default scheduler configuration (config/volcano-scheduler.conf at
    v1.13.0) with the capacity plugin for teams and topology-aware placement."""
    second = [
        {"name": "overcommit"},
        {"name": "drf", "enablePreemptable": False},
        {"name": "predicates"},
        {"name": "capacity" if p.teams else "proportion"},
        {"name": "nodeorder"},
        {"name": "binpack"},
    ]
    if p.topology:
        second.append({"name": "network-topology-aware"})
    return {
        "actions": VOLCANO_TEAM_ACTIONS if p.teams else VOLCANO_ACTIONS,
        "tiers": [
            {
                "plugins": [
                    {"name": "priority"},
                    {"name": "gang", "enablePreemptable": False},
                    {"name": "conformance"},
                ]
            },
            {"plugins": second},
        ],
    }


def volcano_values(p: ClusterProfile) -> dict[str, Any]:
    # The chart inserts the scheduler's override as text but the controller's through
    # toYaml (templates/scheduler.yaml, controllers.yaml): one a string, the other a map.
    custom: dict[str, Any] = {"scheduler_config_override": dump(volcano_scheduler_config(p))}
    if p.topology:
        custom["controller_config_override"] = volcano_discovery(p.topology)
    return {"custom": custom}
