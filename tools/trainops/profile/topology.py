"""The cluster's network topology: its levels, and what each scheduler is told about them.

`topology:` in cluster.yaml lists the levels of the fabric from the outermost in,
each a node label and how many nodes one domain of that level holds (for example
a block of 32 nodes, a rack of 8). The node level (kubernetes.io/hostname, one
node) is always the innermost. From this come:

- on Kueue: a `Topology` named after the cluster whose levels are these labels, and
  the `topologyName` of the GPU ResourceFlavor; pod sets then ask for a domain with
  `kueue.x-k8s.io/podset-required-topology` or `podset-preferred-topology`;
- on Volcano: the label source of its HyperNode discovery (one HyperNode tier per
  level, tier 1 the innermost above the node) and the `networkTopology` of the
  Trainer v2 runtimes' PodGroups (tier numbers, hard or soft).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
TAS_ANNOTATIONS = (REQUIRED, PREFERRED)
# Kueue places two pod sets in the same topology domain when they share a group name;
# a group is exactly two pod sets, one of them a single pod (a PyTorchJob's Master).
PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"
MODES = ("required", "preferred")
CAPACITY = "trainops.dev/nodes-per-domain"
_LABEL = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z"
)


@dataclass(frozen=True)
class Level:
    label: str
    nodes: int  # nodes in one domain of this level


Fail = Callable[[str, str], Exception]


def parse_levels(raw: Any, total_nodes: int, fail: Fail) -> list[Level]:
    """Levels outermost first, the node level appended when absent; [] when not set."""
    if raw in (None, []):
        return []
    if not isinstance(raw, list):
        raise fail("topology", "must be a list of levels ({label: ..., nodes: ...})")
    levels: list[Level] = []
    for index, entry in enumerate(raw):
        where = f"topology[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"label", "nodes"}:
            raise fail(where, "must be a mapping with label and nodes (nodes per domain)")
        label, nodes = entry.get("label"), entry.get("nodes")
        if not isinstance(label, str) or not _LABEL.match(label) or len(label) > 316:
            raise fail(f"{where}.label", f"{label!r} is not a node label key")
        if label == HOSTNAME:
            nodes = 1 if nodes is None else nodes
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise fail(f"{where}.nodes", "must be the number of nodes in one domain (>= 1)")
        levels.append(Level(label, nodes))
    labels = [level.label for level in levels]
    if len(set(labels)) != len(labels):
        raise fail("topology", "each level needs its own node label")
    if HOSTNAME in labels[:-1]:
        raise fail("topology", f"{HOSTNAME} can only be the innermost level")
    if labels[-1] != HOSTNAME:
        levels.append(Level(HOSTNAME, 1))
    for outer, inner in itertools.pairwise(levels):
        if outer.nodes < inner.nodes or outer.nodes % inner.nodes:
            raise fail(
                "topology",
                f"a {outer.label} domain ({outer.nodes} nodes) must hold whole "
                f"{inner.label} domains ({inner.nodes} nodes)",
            )
    if levels[0].nodes > total_nodes:
        raise fail("topology", f"a {levels[0].label} domain holds more than the cluster's nodes")
    return levels


def level(levels: list[Level], label: str) -> Level | None:
    return next((lvl for lvl in levels if lvl.label == label), None)


def volcano_tier(levels: list[Level], label: str) -> int:
    """Volcano numbers HyperNode tiers from the nodes' first grouping outwards (tier 1)."""
    above_nodes = [lvl.label for lvl in levels if lvl.label != HOSTNAME]
    return len(above_nodes) - above_nodes.index(label)


def kueue_topology(name: str, levels: list[Level]) -> dict[str, Any]:
    capacity = {lvl.label: lvl.nodes for lvl in levels}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {
            "name": name,
            "annotations": {
                "argocd.argoproj.io/sync-wave": "-1",
                "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true",
                # For `trainops validate`: how many nodes one domain of each level holds.
                CAPACITY: json.dumps(capacity, separators=(",", ":")),
            },
        },
        "spec": {"levels": [{"nodeLabel": lvl.label} for lvl in levels]},
    }


def volcano_discovery(levels: list[Level]) -> dict[str, Any]:
    """The Volcano controller's HyperNode discovery from node labels: tier 1 groups nodes
    by the innermost label above the node, each further label one tier up."""
    return {
        "networkTopologyDiscovery": [
            {
                "source": "label",
                "enabled": True,
                "config": {
                    "networkTopologyTypes": {
                        "training": [{"nodeLabel": lvl.label} for lvl in levels],
                    }
                },
            }
        ]
    }
