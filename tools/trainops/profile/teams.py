"""The teams of a cluster profile: who shares the cluster, with which quota and priorities.

`teams:` in cluster.yaml is a list of mappings; this module parses and checks it
against the rest of the profile (GPU counts, spare nodes, priorities). Quotas
are in GPUs and must be whole nodes: every training pod takes a whole node.
`trainops.profile.tenancy` turns the result into namespaces and queues.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Priorities when the profile names none: Kueue WorkloadPriorityClasses or, on Volcano,
# PriorityClasses. Higher values preempt lower ones.
DEFAULT_PRIORITIES = {"urgent": 10000, "standard": 1000, "best-effort": 100}
TEAM_KEYS = ("name", "gpus", "borrowingLimit", "lendingLimit", "priorities", "weight")
_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
MAX_TEAM_NAME = 30  # the namespace, queue and Argo CD project are named after it
# Namespaces a team may not take: the platform's, the add-ons' and Kubernetes' own.
RESERVED_NAMESPACES = (
    "default",
    "training",
    "kubeflow",
    "kubeflow-system",
    "mpi-operator",
    "jobset-system",
    "gpu-operator",
    "kueue-system",
    "volcano-system",
    "nvidia-network-operator",
    "sriov-network-operator",
    "argocd",
)


@dataclass(frozen=True)
class Team:
    """One tenant: its namespace, LocalQueue (or Volcano Queue) and Argo CD project are
    all named `name`."""

    name: str
    gpus: int
    borrowingLimit: int | None = None  # GPUs it may borrow from the cohort; None: any
    lendingLimit: int | None = None  # GPUs of its quota others may borrow; None: all
    priorities: tuple[str, ...] = ()  # allowed priority names, lowest value first
    weight: int = 1  # fair-sharing weight (Kueue) or queue weight (Volcano)

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def queue(self) -> str:
        return self.name

    @property
    def default_priority(self) -> str:
        """A run that names no priority gets the lowest its team may use."""
        return self.priorities[0]


Fail = Callable[[str, str], Exception]


@dataclass
class TeamsContext:
    gpus_per_node: int
    usable_gpus: int
    priorities: dict[str, int] = field(default_factory=dict)


def parse_teams(raw: Any, ctx: TeamsContext, fail: Fail) -> list[Team]:
    if raw in (None, []):
        return []
    if not isinstance(raw, list):
        raise fail("teams", "must be a list of teams ({name: ..., gpus: ...})")
    teams: list[Team] = []
    for index, entry in enumerate(raw):
        where = f"teams[{index}]"
        if not isinstance(entry, dict):
            raise fail(where, "must be a mapping with name and gpus")
        unknown = [k for k in entry if k not in TEAM_KEYS]
        if unknown:
            raise fail(f"{where}.{unknown[0]}", f"unknown key (team keys: {', '.join(TEAM_KEYS)})")
        teams.append(_team(entry, where, ctx, fail))
    names = [t.name for t in teams]
    for name in names:
        if names.count(name) > 1:
            raise fail("teams", f"team {name!r} is listed twice")
    total = sum(t.gpus for t in teams)
    if total > ctx.usable_gpus:
        raise fail(
            "teams",
            f"the teams' quotas add up to {total} GPUs but the cluster has {ctx.usable_gpus} "
            "outside its spare nodes: lower a quota (teams may still borrow idle GPUs) or "
            "add nodes",
        )
    return teams


def _team(entry: dict[str, Any], where: str, ctx: TeamsContext, fail: Fail) -> Team:
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_TEAM_NAME:
        raise fail(
            f"{where}.name",
            f"{name!r} must be a DNS label of at most {MAX_TEAM_NAME} characters (it names "
            "the team's namespace, queue and Argo CD project)",
        )
    if name in RESERVED_NAMESPACES or name.startswith("kube-"):
        raise fail(f"{where}.name", f"{name!r} is a platform namespace: pick another team name")
    values: dict[str, int | None] = {}
    for key in ("gpus", "borrowingLimit", "lendingLimit", "weight"):
        value = entry.get(key)
        if value is None:
            if key == "gpus":
                raise fail(f"{where}.gpus", "is required (the team's GPU quota)")
            values[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail(f"{where}.{key}", f"must be a whole number, not {value!r}")
        if key != "weight" and value % ctx.gpus_per_node:
            raise fail(
                f"{where}.{key}",
                f"{value} GPUs is not a whole number of {ctx.gpus_per_node}-GPU nodes (each "
                "training pod takes a whole node)",
            )
        values[key] = value
    gpus = int(values["gpus"] or 0)
    lending = values["lendingLimit"]
    if lending is not None and lending > gpus:
        raise fail(f"{where}.lendingLimit", f"cannot lend more than its quota of {gpus} GPUs")
    if values["weight"] == 0:
        raise fail(f"{where}.weight", "must be at least 1")
    return Team(
        name=name,
        gpus=gpus,
        borrowingLimit=values["borrowingLimit"],
        lendingLimit=lending,
        priorities=_priorities(entry.get("priorities"), where, ctx, fail),
        weight=int(values["weight"] or 1),
    )


def _priorities(raw: Any, where: str, ctx: TeamsContext, fail: Fail) -> tuple[str, ...]:
    known = ctx.priorities
    if raw is None:
        chosen = list(known)
    elif isinstance(raw, list) and raw and all(isinstance(p, str) for p in raw):
        chosen = raw
    else:
        raise fail(f"{where}.priorities", "must be a non-empty list of priority names")
    for name in chosen:
        if name not in known:
            raise fail(
                f"{where}.priorities",
                f"{name!r} is not one of the cluster's priorities ({', '.join(known)})",
            )
    return tuple(sorted(dict.fromkeys(chosen), key=lambda p: known[p]))


def parse_priorities(raw: Any, fail: Fail) -> dict[str, int]:
    if raw in (None, {}):
        return dict(DEFAULT_PRIORITIES)
    if not isinstance(raw, dict):
        raise fail("priorities", "must be a map of priority name to value")
    out: dict[str, int] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not _NAME.match(name) or len(name) > 63:
            raise fail(f"priorities.{name}", "priority names are DNS labels")
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(f"priorities.{name}", f"must be an integer, not {value!r}")
        # PriorityClass values above one billion are reserved for system-critical pods.
        if not -(2**31) <= value <= 10**9:
            raise fail(f"priorities.{name}", "must be between -2147483648 and 1000000000")
        out[name] = value
    values = list(out.values())
    if len(set(values)) != len(values):
        raise fail("priorities", "two priorities share a value: give each its own")
    return out
