"""Where a run belongs and how it is scheduled: its team, priority and topology request.

A team's run lives in `overlays/<cluster>/teams/<team>/runs/<run>/` and is put in the
team's namespace; its job carries the team label and names the team's queue
(Kueue's queue-name label; Volcano's schedulingPolicy.queue, or for a TrainJob
the queue annotation of a runtime patch). Any run may name a priority (Kueue's
WorkloadPriorityClass label, Volcano's schedulingPolicy.priorityClass) and, on a
Kueue cluster with topology levels, require or prefer one domain of a level for
its pods (Kueue's pod-set annotations, the Master and the Workers of a
PyTorchJob grouped into one domain).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainops.errors import InputError
from trainops.profile.model import ClusterProfile
from trainops.profile.teams import Team
from trainops.profile.tenancy import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    TEAM_LABEL,
    VOLCANO_QUEUE,
    default_priority,
)
from trainops.profile.topology import MODES, PODSET_GROUP, PREFERRED, REQUIRED, level

TEAMS_DIR = "teams"
RUNTIME_PATCH_MANAGER = "trainops.dev/team"
# The pod templates of each template's job, as JSON pointers.
POD_TEMPLATES = {
    "pytorchjob": [
        "/spec/pytorchReplicaSpecs/Master/template",
        "/spec/pytorchReplicaSpecs/Worker/template",
    ],
    "elastic": ["/spec/pytorchReplicaSpecs/Worker/template"],
    "torchtitan": [
        "/spec/pytorchReplicaSpecs/Master/template",
        "/spec/pytorchReplicaSpecs/Worker/template",
    ],
    "mpijob": ["/spec/mpiReplicaSpecs/Worker/template"],
}


@dataclass(frozen=True)
class RunScope:
    team: str | None = None
    priority: str | None = None
    topology: str | None = None  # "required:LABEL" or "preferred:LABEL"


def run_path(team: str | None, run: str) -> str:
    """The run's directory inside its cluster's overlay."""
    return f"{TEAMS_DIR}/{team}/runs/{run}" if team else f"runs/{run}"


def _label(key: str) -> str:
    return "/metadata/labels/" + key.replace("/", "~1")


def _annotation(template: str, key: str) -> str:
    return f"{template}/metadata/annotations/" + key.replace("/", "~1")


def scope_ops(
    profile: ClusterProfile, template: str, kind: str, scope: RunScope, nodes: int
) -> list[dict[str, Any]]:
    """The patch operations that put the job in its team's queue, at its priority and
    topology (checked against the profile and the run's `nodes`: one-line errors for what
    it does not offer)."""
    team = _team(profile, scope.team)
    ops: list[dict[str, Any]] = []
    if team is not None:
        ops.append({"op": "add", "path": _label(TEAM_LABEL), "value": team.name})
        ops += _queue_ops(profile, kind, team)
    priority = _priority(profile, team, scope.priority)
    if priority is not None:
        ops += _priority_ops(profile, kind, priority)
    if scope.topology:
        ops += _topology_ops(profile, template, scope.topology, nodes)
    return ops


def plain_job_scope(profile: ClusterProfile, scope: RunScope) -> dict[str, dict[str, str]]:
    """What puts a run's batch Job (its data preparation) in the run's queue at the run's
    priority, as the admission gate asks of every job: the Job's labels, its pod
    template's annotations and pod spec fields."""
    team = _team(profile, scope.team)
    labels = {TEAM_LABEL: team.name} if team else {}
    queue = team.queue if team else profile.queue
    out: dict[str, dict[str, str]] = {"labels": labels, "annotations": {}, "pod": {}}
    if profile.scheduler == "default":
        return out
    priority = scope.priority or default_priority(profile, team)
    if profile.scheduler == "kueue":
        labels.update({QUEUE_LABEL: queue, PRIORITY_LABEL: priority})
    else:
        out["annotations"] = {VOLCANO_QUEUE: queue}
        out["pod"] = {"schedulerName": "volcano", "priorityClassName": priority}
    return out


def _team(profile: ClusterProfile, name: str | None) -> Team | None:
    if name is None:
        return None
    team = profile.team(name)
    if team is None:
        known = ", ".join(t.name for t in profile.teams) or "none"
        raise InputError(
            f"--team {name!r}: cluster {profile.name} has no such team (teams: {known})"
        )
    return team


def _queue_ops(profile: ClusterProfile, kind: str, team: Team) -> list[dict[str, Any]]:
    if profile.scheduler == "kueue":
        return [{"op": "replace", "path": _label(QUEUE_LABEL), "value": team.queue}]
    if kind != "TrainJob":
        return [
            {"op": "replace", "path": "/spec/runPolicy/schedulingPolicy/queue", "value": team.queue}
        ]
    # The runtime (the platform's, shared) names the platform's queue; the Trainer takes the
    # TrainJob's runtime patches' template annotations over it for the Volcano PodGroup.
    patch = {
        "manager": RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {"metadata": {"annotations": {VOLCANO_QUEUE: team.queue}}}
        },
    }
    return [{"op": "add", "path": "/spec/runtimePatches", "value": [patch]}]


def _priority(profile: ClusterProfile, team: Team | None, name: str | None) -> str | None:
    """The run's priority when it differs from the template's (the cluster's default)."""
    if profile.scheduler == "default":
        if name is not None:
            raise InputError(
                "--priority needs a scheduler that orders and preempts jobs (kueue or volcano)"
            )
        return None
    allowed = team.priorities if team else tuple(profile.priorities)
    chosen = name if name is not None else default_priority(profile, team)
    if chosen not in allowed:
        who = f"team {team.name}" if team else f"cluster {profile.name}"
        raise InputError(f"--priority {chosen!r}: {who} may use {', '.join(allowed)}")
    return None if chosen == default_priority(profile) else chosen


def _priority_ops(profile: ClusterProfile, kind: str, priority: str) -> list[dict[str, Any]]:
    if profile.scheduler == "kueue":
        return [{"op": "replace", "path": _label(PRIORITY_LABEL), "value": priority}]
    if kind == "TrainJob":
        raise InputError(
            "--priority on a Volcano TrainJob: its PodGroup takes the priority of the "
            "runtime's pods, which a TrainJob cannot change; use the cluster's default "
            f"({default_priority(profile)}) or a PyTorchJob or MPIJob run"
        )
    return [
        {
            "op": "replace",
            "path": "/spec/runPolicy/schedulingPolicy/priorityClass",
            "value": priority,
        }
    ]


def _topology_ops(
    profile: ClusterProfile, template: str, request: str, nodes: int
) -> list[dict[str, Any]]:
    mode, _, label = request.partition(":")
    if mode not in MODES or not label:
        raise InputError(f"--topology {request!r}: use required:LABEL or preferred:LABEL")
    if profile.scheduler != "kueue" or not profile.topology:
        raise InputError(
            "--topology needs Kueue's topology-aware scheduling: a kueue cluster with "
            "topology levels in its profile (Volcano runs take the runtime's network topology)"
        )
    domain = level(profile.topology, label)
    if domain is None:
        levels = ", ".join(lvl.label for lvl in profile.topology)
        raise InputError(f"--topology {request!r}: {label!r} is not a level ({levels})")
    if mode == "required" and nodes > domain.nodes:
        # Kueue admits a required request only inside one domain of the level.
        wider = [lvl.label for lvl in profile.topology if lvl.nodes >= nodes]
        hint = f" (or require {wider[-1]})" if wider else ""
        raise InputError(
            f"--topology {request!r}: {nodes} nodes never fit one {label} domain, which holds "
            f"{domain.nodes}; use preferred:{label}{hint}"
        )
    if template not in POD_TEMPLATES:
        raise InputError(
            f"--topology on a {template} run: a TrainJob's pods are its runtime's, placed by "
            "the cluster's default (placement and topologyKey in the profile)"
        )
    key = REQUIRED if mode == "required" else PREFERRED
    templates = POD_TEMPLATES[template]
    # With placement pack the template prefers the pack level: a required request takes
    # its place (Kueue refuses a pod set with two topology annotations); a preferred one
    # overwrites it.
    replaces_default = key == REQUIRED and profile.placement == "pack"
    ops: list[dict[str, Any]] = []
    for path in templates:
        if replaces_default:
            ops.append({"op": "remove", "path": _annotation(path, PREFERRED)})
        ops.append({"op": "add", "path": _annotation(path, key), "value": label})
        if len(templates) > 1:
            ops.append({"op": "add", "path": _annotation(path, PODSET_GROUP), "value": "ranks"})
    return ops
