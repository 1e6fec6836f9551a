"""Synthetic renders of any size, for the linearity test and the scale benchmarks.

A render is made of units; each unit is the policy fixtures' clean RoCE cluster
render (network, claim, queue, ClusterPolicy, PyTorchJob, elastic job, MPIJob)
plus a Deployment with its Service, a ConfigMap, and a CRD with one of its custom
resources. Every unit has its own names and address range, and units share ten
namespaces, so namespaces grow with the render, as lookups by namespace must
survive. The ClusterPolicy is the cluster's one: only the first unit has it.

`every_fixture_render` covers every kind the pack reads: each rule's failing and passing
fixtures, copied with every object name and namespace made unique per fixture and copy,
so a rule that compares each object of a kind with every other grows with the square of
the copies; each copy of a fixture has its own 10.x addresses, as each network of a real
render has its own range. The kinds a cluster has a handful of whatever its size (its ClusterPolicy,
admission policies, SR-IOV node policies, priority classes) come from the first copy only.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

from tests.policies import catalog_fixtures, fixtures
from tests.policies.fixtures import baseline

UNIT = len(baseline()) + 6
# Kinds whose number is the cluster's configuration, not the size of its workload.
CLUSTER_CONFIGURATION = {
    "ClusterPolicy",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "SriovNetworkNodePolicy",
    "PriorityClass",
}


def synthetic_render(resources: int) -> list[dict[str, Any]]:
    """About `resources` objects (a whole number of units)."""
    template = baseline()
    out: list[dict[str, Any]] = []
    for index in range(max(1, resources // UNIT)):
        out.extend(_unit(template, index))
    return out


def _unit(template: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    namespace = f"team-{index % 10}"
    suffix = f"-{index}"
    docs = [copy.deepcopy(d) for d in template if not index or d["kind"] != "ClusterPolicy"]
    for doc in docs:
        meta = doc["metadata"]
        meta["name"] += suffix
        if "namespace" in meta:
            meta["namespace"] = namespace
        kind = doc["kind"]
        if kind == "NetworkAttachmentDefinition":
            config = json.loads(doc["spec"]["config"])
            config["name"] = meta["name"]
            config["plugins"][0]["ipam"]["range"] = f"10.{index // 256 % 256}.{index % 256}.0/24"
            doc["spec"]["config"] = json.dumps(config)
        elif "ReplicaSpecs" in "".join(doc.get("spec", {})):
            _rename_references(doc, suffix)
    docs += [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"web{suffix}", "namespace": namespace},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": f"web{suffix}"}},
                "template": {
                    "metadata": {"labels": {"app": f"web{suffix}"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": "registry.example.com/web:1.0.0",
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"cpu": "1", "memory": "256Mi"},
                                },
                            }
                        ]
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"web{suffix}", "namespace": namespace},
            "spec": {"selector": {"app": f"web{suffix}"}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"settings{suffix}", "namespace": namespace},
            "data": {"mode": "fast"},
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.u{index}.example.com"},
            "spec": {
                "group": f"u{index}.example.com",
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": True, "storage": True}],
            },
        },
        {
            "apiVersion": f"u{index}.example.com/v1",
            "kind": "Widget",
            "metadata": {
                "name": f"widget{suffix}",
                "namespace": namespace,
                "annotations": {
                    "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"
                },
            },
        },
    ]
    return docs


def _rename_references(job: dict[str, Any], suffix: str) -> None:
    """Point a job's pods at this unit's network, claim and queue."""
    labels = job["metadata"].get("labels", {})
    if "kueue.x-k8s.io/queue-name" in labels:
        labels["kueue.x-k8s.io/queue-name"] += suffix
    for replica in next(v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs")).values():
        template = replica["template"]
        annotations = template.get("metadata", {}).get("annotations", {})
        if "k8s.v1.cni.cncf.io/networks" in annotations:
            annotations["k8s.v1.cni.cncf.io/networks"] += suffix
        for volume in template["spec"].get("volumes", []):
            claim = volume.get("persistentVolumeClaim")
            if claim:
                claim["claimName"] += suffix


def every_fixture_render(copies: int) -> list[dict[str, Any]]:
    """Every rule's fixtures (failing and passing), `copies` times over."""
    renders = []
    for pairs in (fixtures.FIXTURES, catalog_fixtures.FIXTURES):
        for failing, passing in pairs.values():
            renders += [failing(), passing()]
    out: list[dict[str, Any]] = []
    blocks = itertools.count()
    for copy_index in range(copies):
        for render_index, render in enumerate(renders):
            if copy_index:
                render = [d for d in render if d.get("kind") not in CLUSTER_CONFIGURATION]
            out.extend(_renamed(render, f"-f{render_index}c{copy_index}", blocks))
    return out


def _renamed(
    render: list[dict[str, Any]], suffix: str, blocks: Iterator[int]
) -> list[dict[str, Any]]:
    """The render with each object's name and namespace suffixed, every string equal to
    one of them (the references between its objects) changed alike, and each 10.x/16 it
    names moved to a /16 of its own (from `blocks`)."""
    names = set()
    for doc in render:
        meta = doc.get("metadata") or {}
        names.update(v for v in (meta.get("name"), meta.get("namespace")) if isinstance(v, str))
    moved: dict[str, str] = {}

    def block(found: re.Match) -> str:
        if found.group(1) not in moved:
            number = next(blocks)
            moved[found.group(1)] = f"{11 + number // 256}.{number % 256}."
        return moved[found.group(1)]

    def rename(value: Any) -> Any:
        if isinstance(value, str):
            return value + suffix if value in names else _TEN_X.sub(block, value)
        if isinstance(value, dict):
            return {key: rename(item) for key, item in value.items()}
        if isinstance(value, list):
            return [rename(item) for item in value]
        return value

    return [rename(doc) for doc in render]


_TEN_X = re.compile(r"\b10\.(\d{1,3})\.(?=\d)")
