"""The doctor's findings and how its checks are declared.

A check is a function from one attempt's evidence (`Context`) to `Found` items, declared
with `@check(id, severity, title, why, fix)`: the declaration goes into the rule catalog
(`trainops.rules`, category "doctor") so every id the doctor prints is documented in one
place. A check that `explains` a failure names its cause; a `secondary` check (symptoms
that usually follow another failure, such as a closed socket) runs only when no other
check explained the attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trainops.doctor.events import Event
from trainops.doctor.evidence import RankRecord
from trainops.doctor.expectation import Expectation
from trainops.doctor.limits import Pattern
from trainops.model import ERROR, INFO, WARNING
from trainops.profile.model import NETWORKS, NIC_NETWORKS, SRIOV_NETWORKS
from trainops.rules import DOCTOR, RuleInfo, register

CATEGORY = DOCTOR
MAX_EVIDENCE = 5


@dataclass
class DoctorFinding:
    rule: str
    severity: str
    message: str
    fix: str
    ranks: list[int] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    attempt: int | None = None


@dataclass
class Found:
    """What a check reports; the rule's defaults fill what it leaves out."""

    message: str
    events: Iterable[Event] = ()
    fix: str | None = None
    severity: str | None = None
    ranks: Iterable[int] = ()
    rule: str | None = None  # a finding of another id than the check's (the catalog's families)
    explains: bool | None = None  # whether it names the cause; default: the check's


@dataclass
class Context:
    """One attempt: its events in order, its per-process records, what the cluster promises."""

    attempt: int
    events: list[Event]
    records: list[RankRecord]
    expectation: Expectation
    failed: bool = False
    _by_kind: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for position, event in enumerate(self.events):
            self._by_kind.setdefault(event.kind, []).append(position)

    def of(self, *kinds: str) -> list[Event]:
        """Events of those kinds, in log order (an index, not a scan per check)."""
        positions = sorted(p for kind in kinds for p in self._by_kind.get(kind, ()))
        return [self.events[p] for p in positions]

    def key(self, name: str) -> str:
        """A profile key and its current value, for fixes when the overlay is known."""
        value = self.expectation.profile.get(name)
        shown = f" (now {value})" if value not in (None, "", []) else ""
        return f"`{name}`{shown} in {self.expectation.overlay}/cluster.yaml"

    def interface_keys(self) -> str:
        """The profile keys that decide the pods' training interface, for fixes: `nic` only
        on the networks that take it (macvlan, host-device); on SR-IOV networks the pod's
        interface is the VF it requests, net1."""
        network = self._network()
        where = f"{self.expectation.overlay}/cluster.yaml"
        if network in NIC_NETWORKS:
            return f"`network` ({network}) and {self.key('nic')}"
        return (
            f"`network` ({network}) in {where}: the pod's interface is net1, the virtual "
            f"function it requests as {self.key('rdmaResource')}"
        )

    def device_keys(self) -> str:
        """The profile keys that decide which RDMA devices a pod sees, for fixes: `hca` only
        on shared devices; a pod on an SR-IOV network sees only the VF it requests."""
        network = self._network()
        if network in SRIOV_NETWORKS:
            return (
                f"{self.key('rdmaResource')} (on {network} each pod sees only the virtual "
                "functions it requests, so `hca` does not apply)"
            )
        return f"{self.key('rdmaResource')} and {self.key('hca')}"

    def _network(self) -> str:
        profile = self.expectation.profile
        return str(profile.get("network") or NETWORKS[str(profile.get("fabric"))][0])

    def where_set(self, fix: str | None) -> str | None:
        """A fix that names NCCL variables, with where this cluster's profile sets them: the
        overlay's pods get NCCL's settings from cluster.yaml, not from a hand-edited env."""
        if not fix or not self.expectation.overlay:
            return fix
        named = list(dict.fromkeys(_NCCL_VARIABLE.findall(fix)))
        if not named:
            return fix
        keys = {name: self.key(key) for name, key in PROFILE_VARIABLES.items()}
        keys["NCCL_SOCKET_IFNAME"] = self.interface_keys()
        if self._network() in SRIOV_NETWORKS:
            del keys["NCCL_IB_HCA"]
        where = [f"{name} comes from {keys[name]}" for name in named if name in keys]
        others = [n for n in named if n not in keys and not n.startswith("NCCL_DEBUG")]
        if others:
            where.append(
                f"{', '.join(others)} go{'es' if len(others) == 1 else ''} in the `nccl` map "
                f"of {self.expectation.overlay}/cluster.yaml"
            )
        return f"{fix} In this cluster {'; '.join(where)}." if where else fix


@dataclass(frozen=True)
class Check:
    info: RuleInfo
    run: Callable[[Context], Iterable[Found]]
    explains: bool
    secondary: bool


CHECKS: list[Check] = []

# The NCCL variables a profile key sets (profile/overlay.py's cluster_env).
PROFILE_VARIABLES = {
    "NCCL_IB_HCA": "hca",
    "NCCL_IB_GID_INDEX": "gidIndex",
    "NCCL_IB_DISABLE": "fabric",
}
_NCCL_VARIABLE = Pattern(r"\bNCCL_[A-Z0-9_]+[A-Z0-9]")


def check(
    rule_id: str,
    severity: str,
    title: str,
    why: str,
    fix: str,
    explains: bool = True,
    secondary: bool = False,
):
    info = register(RuleInfo(rule_id, severity, title, why, fix, category=CATEGORY))

    def decorate(function: Callable[[Context], Iterable[Found]]):
        CHECKS.append(Check(info, function, explains, secondary))
        return function

    return decorate


def ranks_text(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7, 8': runs of three or more become ranges."""
    ranks = sorted(set(ranks))
    parts, start = [], 0
    for index in range(len(ranks) + 1):
        if index < len(ranks) and (index == start or ranks[index] == ranks[index - 1] + 1):
            continue
        run = ranks[start:index]
        parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
        start = index
    return ", ".join(parts)


def who(events: Iterable[Event]) -> str:
    """'ranks 0-3', 'host-a:41, host-b:7', or where in the logs, for a message."""
    events = list(events)
    ranks = sorted({e.rank for e in events if e.rank is not None})
    if ranks:
        return ("rank " if len(ranks) == 1 else "ranks ") + ranks_text(ranks)
    processes = sorted({e.process.label for e in events if e.process and e.process.host})
    if processes:
        return ", ".join(processes[:4]) + (" and others" if len(processes) > 4 else "")
    return "the log" if not events else events[0].where


def evidence(events: Iterable[Event]) -> list[str]:
    """The first few distinct lines behind a finding."""
    shown, seen = [], set()
    for event in events:
        if event.text not in seen:
            seen.add(event.text)
            shown.append(event.evidence())
        if len(shown) == MAX_EVIDENCE:
            break
    return shown


def materialise(item: Check, found: Found, ctx: Context) -> DoctorFinding:
    events = list(found.events)
    ranks = set(found.ranks) | {e.rank for e in events if e.rank is not None}
    return DoctorFinding(
        rule=found.rule or item.info.id,
        severity=found.severity or item.info.severity,
        message=found.message,
        fix=ctx.where_set(found.fix or item.info.fix),
        ranks=sorted(ranks),
        evidence=evidence(events),
        attempt=ctx.attempt,
    )


SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}
