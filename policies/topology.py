"""Topology-aware placement: what a run asks of Kueue's topology can be granted, and the
pod-set annotations Kueue's job webhooks accept.

Kueue's `Topology` (generated from the profile's levels) lists the node labels a
pod set may ask for, and carries how many nodes one domain of each level holds
(the `trainops.dev/nodes-per-domain` annotation the profile writes). Kueue v0.19.2's
`jobframework/tas_validation.go` refuses pod sets whose topology annotations contradict
each other (ValidateTASPodSetRequest, ValidateSliceSizeAnnotationUpperBound,
ValidatePodSetGroupingTopology); it reads them from each pod template, never the job.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from trainops.admission import names
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import REPLICA_FIELDS, PodTemplate, mapping
from trainops.profile.topology import (
    CAPACITY,
    PODSET_GROUP,
    PREFERRED,
    REQUIRED,
    TAS_ANNOTATIONS,
)

from . import common
from .placement import QUEUED_KINDS

UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
POD_SET_ANNOTATIONS = (
    REQUIRED,
    PREFERRED,
    UNCONSTRAINED,
    SLICE_REQUIRED,
    SLICE_SIZE,
    SLICE_CONSTRAINTS,
    PODSET_GROUP,
)
TAS_VALIDATION = (
    "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/controller/jobframework/"
    "tas_validation.go"
)
# Go's strconv.ParseBool.
GO_BOOLS = frozenset(
    {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
)
# Kinds whose Kueue webhook checks podset-group-name pairs (ValidatePodSetGroupingTopology).
GROUPING_KINDS = ("JobSet", "LeaderWorkerSet", "MPIJob", "RayCluster", "RayJob")


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
    source=(
        "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/cache/scheduler/tas_flavor_snapshot.go#L936",
        "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/cache/scheduler/tas_flavor_snapshot.go#L940-L944",
    ),
    title="Topology requests name a level of the cluster's topology",
    why="Kueue places a pod set that asks for a topology domain (or slices of one, "
    "podset-slice-required-topology) only through a ResourceFlavor "
    "whose Topology has that level: a label the Topology does not list (or a cluster without "
    "a Topology) leaves the job pending, never admitted.",
    fix="Ask for one of the levels in cluster.yaml's topology (new-run --topology "
    "required:LABEL), or add the level to the profile.",
    kinds=(*REPLICA_FIELDS, "TrainJob", "ClusterTrainingRuntime", "TrainingRuntime"),
    applies=common.training_pod,
)
def topology_level_known(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    requests = [
        (key, str(pod.annotations[key]))
        for key in (*TAS_ANNOTATIONS, SLICE_REQUIRED)
        if key in pod.annotations
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


def _annotation_path(pod: PodTemplate, key: str) -> tuple[Any, ...]:
    return (*pod.path[:-1], "metadata", "annotations", key)


def _int32(text: Any) -> int | None:
    try:
        value = int(str(text), 10)
    except ValueError:
        return None
    return value if -(2**31) <= value < 2**31 else None


def _pod_set_problems(pod: PodTemplate) -> Iterator[tuple[str, str]]:
    """(annotation, why the webhook refuses it) for one pod set's topology annotations."""
    notes = {k: pod.annotations[k] for k in POD_SET_ANNOTATIONS if k in pod.annotations}
    exclusive = [k for k in (REQUIRED, PREFERRED, UNCONSTRAINED) if k in notes]
    if len(exclusive) > 1:
        yield exclusive[1], f"{' and '.join(exclusive)} together: one topology request at most"
    for key in (REQUIRED, PREFERRED, SLICE_REQUIRED):
        if key in notes:
            for error in names.qualified_name(str(notes[key])):
                yield key, f"{notes[key]!r} is not a node label name: {error}"
    if UNCONSTRAINED in notes and str(notes[UNCONSTRAINED]) not in GO_BOOLS:
        yield UNCONSTRAINED, f"{notes[UNCONSTRAINED]!r} must be a boolean value"
    if SLICE_SIZE in notes:
        size = _int32(notes[SLICE_SIZE])
        if size is None:
            yield SLICE_SIZE, f"{notes[SLICE_SIZE]!r} must be a numeric value"
        elif size < 1:
            yield SLICE_SIZE, f"{size} must be greater than or equal to 1"
        elif pod.replicas is not None and size > pod.replicas:
            yield SLICE_SIZE, f"{size} must not be greater than the pod set's {pod.replicas} pods"
        if SLICE_REQUIRED not in notes:
            yield SLICE_SIZE, f"set without {SLICE_REQUIRED}"
    elif SLICE_REQUIRED in notes:
        yield SLICE_REQUIRED, f"set without {SLICE_SIZE}, which must then be set"
    if PODSET_GROUP in notes:
        group = str(notes[PODSET_GROUP])
        if group.isdigit():
            yield PODSET_GROUP, f"{group!r} must not be a number"
        for other in (SLICE_SIZE, SLICE_REQUIRED, SLICE_CONSTRAINTS):
            if other in notes:
                yield PODSET_GROUP, f"may not be set when {other} is specified"
        if REQUIRED not in notes and PREFERRED not in notes:
            yield PODSET_GROUP, f"may not be set when neither {PREFERRED} nor {REQUIRED} is"
    if SLICE_CONSTRAINTS in notes:
        yield from _constraint_problems(str(notes[SLICE_CONSTRAINTS]), notes, pod.replicas)


def _constraint_problems(
    text: str, notes: dict[str, Any], replicas: int | None
) -> Iterator[tuple[str, str]]:
    key = SLICE_CONSTRAINTS
    for other in (SLICE_REQUIRED, SLICE_SIZE):
        if other in notes:
            yield key, f"may not be set when {other} is specified"
    try:
        layers = json.loads(text)
    except ValueError as error:
        yield key, f"must be a valid JSON array: {error}"
        return
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        yield key, "must be a valid JSON array of {topology, size} objects"
        return
    if not 1 <= len(layers) <= 3:
        yield key, f"has {len(layers)} layers: between 1 and 3 are allowed"
        return
    sizes: list[int] = []
    seen: set[str] = set()
    for index, layer in enumerate(layers):
        label, size = str(layer.get("topology", "")), layer.get("size")
        for error in names.qualified_name(label):
            yield key, f"layer {index}: topology {label!r} is not a label name: {error}"
        if label in seen:
            yield key, f"layer {index}: topology {label!r} appears twice"
        seen.add(label)
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            yield key, f"layer {index}: size {size!r} must be greater than or equal to 1"
            return
        sizes.append(size)
    for parent, child in itertools.pairwise(sizes):
        if parent % child:
            yield key, f"size {child} must evenly divide the parent layer size {parent}"
    if replicas is not None and sizes[0] > replicas:
        yield key, f"size {sizes[0]} must not be greater than the pod set's {replicas} pods"


def _has_pod_set_annotations(doc: Document) -> bool:
    """Queued documents (the `applies` predicate of the pod-set annotation rules)."""
    return common.queued(doc)


@resource_rule(
    id="kueue-topology-annotations",
    severity=ERROR,
    source=(TAS_VALIDATION + "#L34-L212", TAS_VALIDATION + "#L310-L390"),
    title="A pod set's topology annotations are ones Kueue's webhook accepts together",
    why="Kueue's job webhooks (ValidateTASPodSetRequest) refuse a job whose pod template asks "
    "for more than one of podset-required-topology, podset-preferred-topology and "
    "podset-unconstrained-topology, names a level that is not a label name, writes a "
    "non-boolean unconstrained value, gives podset-slice-size without "
    "podset-slice-required-topology (or the other way round), a slice size that is not a "
    "number from 1 to the pod set's size, a numeric podset-group-name or one beside slice "
    "annotations or without a required/preferred topology, or a malformed "
    "podset-slice-required-topology-constraints: the job is never created.",
    fix="Keep one topology request per pod template; give slice-required-topology and "
    "slice-size together (size at most the pod set's pods); name groups with words.",
    kinds=QUEUED_KINDS,
    applies=_has_pod_set_annotations,
)
def topology_annotations(doc: Document, ctx: Context) -> Iterator[Violation]:
    for pod in ctx.pods(doc):
        if not any(k in pod.annotations for k in POD_SET_ANNOTATIONS):
            continue
        for key, why in _pod_set_problems(pod):
            yield Violation(
                f"{pod.role} pod template, {key}: {why}; Kueue's webhook refuses the {doc.kind}",
                _annotation_path(pod, key),
            )


@resource_rule(
    id="kueue-podset-group",
    severity=ERROR,
    source=TAS_VALIDATION + "#L214-L302",
    title="Pod sets grouped for topology come in pairs Kueue accepts",
    why="kueue.x-k8s.io/podset-group-name places two pod sets (a leader and its workers) in "
    "one topology domain; Kueue's webhook (ValidatePodSetGroupingTopology) refuses a group "
    "of other than exactly two pod sets, one where neither pod set has a single pod, and one "
    "whose two pod sets do not ask for the same required or preferred level.",
    fix="Group exactly the launcher (one pod) with its workers, and give both the same "
    "podset-required-topology (or podset-preferred-topology).",
    kinds=GROUPING_KINDS,
    applies=_has_pod_set_annotations,
)
def podset_group(doc: Document, ctx: Context) -> Iterator[Violation]:
    groups: dict[str, list[PodTemplate]] = {}
    for pod in ctx.pods(doc):
        name = pod.annotations.get(PODSET_GROUP)
        if name is not None:
            groups.setdefault(str(name), []).append(pod)
    for name, pods in groups.items():
        at = _annotation_path(pods[0], PODSET_GROUP)
        if len(pods) != 2:
            yield Violation(
                f"podset-group-name {name!r} groups {len(pods)} pod set(s): only groups of "
                "exactly 2 are accepted",
                at,
            )
            continue
        # A LeaderWorkerSet is admitted one group (one leader, size-1 workers) at a time.
        counts = [pod.replicas for pod in pods]
        if doc.kind != "LeaderWorkerSet" and None not in counts and 1 not in counts:
            yield Violation(
                f"podset-group-name {name!r} groups pod sets of {counts[0]} and {counts[1]} "
                "pods: one of them must have a single pod",
                at,
            )
        wanted = [(p.annotations.get(REQUIRED), p.annotations.get(PREFERRED)) for p in pods]
        if wanted[0] != wanted[1] or wanted[0] == (None, None):
            yield Violation(
                f"podset-group-name {name!r}: {pods[0].role} and {pods[1].role} must ask for "
                "the same podset-required-topology or podset-preferred-topology",
                at,
            )


def _job_level_annotations(doc: Document) -> bool:
    """Documents whose own annotations carry a pod-set annotation (the `applies` predicate)."""
    notes = mapping(doc.metadata.get("annotations"))
    # A TrainJob's pod sets come from the JobSet its runtime builds: left to the runtime.
    skip = ("Pod", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")
    return doc.kind not in skip and any(k in notes for k in POD_SET_ANNOTATIONS)


@resource_rule(
    id="kueue-topology-annotation-on-job",
    severity=WARNING,
    title="Kueue's pod-set topology annotations are on the pod templates",
    why="Kueue builds each pod set's topology request from the annotations of that pod "
    "set's template (jobframework PodSetTopologyRequest); the same annotation on the job's "
    "own metadata is not read, so the pods are placed without the topology they were meant "
    "to get (slower collectives across racks or blocks), and nothing reports it.",
    fix="Move the annotation to spec...template.metadata.annotations of every pod set that "
    "should be placed by topology.",
    kinds=QUEUED_KINDS,
    applies=_job_level_annotations,
    source="https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/pkg/controller/jobframework/tas.go#L60-L70",
)
def topology_annotation_on_job(doc: Document, ctx: Context) -> Iterator[Violation]:
    notes = mapping(doc.metadata.get("annotations"))
    pods = ctx.pods(doc)
    for key in POD_SET_ANNOTATIONS:
        if key in notes and not any(key in pod.annotations for pod in pods):
            yield Violation(
                f"{key} is an annotation of the {doc.kind}, not of its pod templates: "
                "Kueue ignores it",
                ("metadata", "annotations", key),
            )
