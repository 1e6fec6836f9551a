"""Topology-aware placement: what a run asks of Kueue's topology can be granted.

Kueue's `Topology` (generated from the profile's levels) lists the node labels a
pod set may ask for, and carries how many nodes one domain of each level holds
(the `trainops.dev/nodes-per-domain` annotation the profile writes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import REPLICA_FIELDS, PodTemplate, mapping
from trainops.profile.topology import CAPACITY, REQUIRED, TAS_ANNOTATIONS

from . import common

PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"


def _levels(ctx: Context) -> dict[str, int | None]:
    """Every level of the render's Kueue Topologies, with its nodes per domain if known."""
    found: dict[str, int | None] = {}
    for topology in ctx.of_kind("Topology"):
        if not topology.api_version.startswith("kueue.x-k8s.io/"):
            continue
        try:
            capacity = json.loads(mapping(topology.metadata.get("annotations")).get(CAPACITY, "{}"))
        except ValueError:
            capacity = {}
        for level in mapping(topology.obj.get("spec")).get("levels") or []:
            label = str(mapping(level).get("nodeLabel", ""))
            nodes = capacity.get(label) if isinstance(capacity, dict) else None
            found[label] = nodes if isinstance(nodes, int) else found.get(label)
    return found


@pod_rule(
    id="topology-level-known",
    severity=ERROR,
    source="https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/cache/scheduler/tas_flavor_snapshot.go#L936",
    title="Topology requests name a level of the cluster's topology",
    why="Kueue places a pod set that asks for a topology domain only through a ResourceFlavor "
    "whose Topology has that level: a label the Topology does not list (or a cluster without "
    "a Topology) leaves the job pending, never admitted.",
    fix="Ask for one of the levels in cluster.yaml's topology (new-run --topology "
    "required:LABEL), or add the level to the profile.",
    kinds=(*REPLICA_FIELDS, "TrainJob", "ClusterTrainingRuntime", "TrainingRuntime"),
    applies=common.training_pod,
)
def topology_level_known(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    requests = [
        (key, str(pod.annotations[key])) for key in TAS_ANNOTATIONS if key in pod.annotations
    ]
    if not requests:
        return
    levels = ctx.memo("topology-levels", lambda: _levels(ctx))
    if not levels and not ctx.has_platform:
        return  # nothing to check against: a lone file
    for key, label in requests:
        if label not in levels:
            known = ", ".join(levels) or "none: the cluster has no Kueue Topology"
            yield Violation(
                f"{key}: {label} is not a level of the cluster's topology ({known})",
                (*pod.path[:-1], "metadata", "annotations", key),
            )


@resource_rule(
    id="topology-request-fits",
    severity=ERROR,
    source="https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/cache/scheduler/tas_flavor_snapshot.go#L2008",
    title="A required topology domain can hold the whole pod set",
    why="A pod set that requires one domain of a level (kueue.x-k8s.io/podset-required-"
    "topology) is admitted only when one domain has a free node for every pod; with more pods "
    "than one domain has nodes it waits forever.",
    fix="Require a larger level (a block instead of a rack), prefer instead of require "
    "(--topology preferred:LABEL), or run on fewer nodes.",
    kinds=tuple(REPLICA_FIELDS),
)
def topology_request_fits(doc: Document, ctx: Context) -> Iterator[Violation]:
    levels = ctx.memo("topology-levels", lambda: _levels(ctx))
    per_node = ctx.profile.gpusPerNode if ctx.profile is not None else None
    groups: dict[str, tuple[str, int, PodTemplate]] = {}
    for pod in ctx.pods(doc):
        label = pod.annotations.get(REQUIRED)
        if not label:
            continue
        # Pods of one node each, unless they use a fraction of the node's GPUs.
        share = max(1, per_node // pod.gpus) if per_node and pod.gpus else 1
        nodes = -(-(pod.replicas or 1) // share)
        group = str(pod.annotations.get(PODSET_GROUP) or pod.role)
        _, total, first = groups.get(group, (str(label), 0, pod))
        groups[group] = (str(label), total + nodes, first)
    for label, nodes, pod in groups.values():
        capacity = levels.get(label)
        if capacity is not None and nodes > capacity:
            yield Violation(
                f"the pods need {nodes} nodes in one {label} domain, which holds {capacity}",
                (*pod.path[:-1], "metadata", "annotations", REQUIRED),
            )
