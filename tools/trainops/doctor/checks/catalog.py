"""Messages the catalog explains: a line printed from a catalogued NCCL, plugin, PyTorch or
CUDA message raises the finding the catalog gives it, with the catalog's meaning and fix.

It runs after the checks that read a failure in depth (it is secondary): they know more
than one line can say, so the catalog speaks where they found nothing. Where they did, it
adds only what is specific and they did not say (`beside_checks`): a line naming the fabric
manager, a GPU architecture or a stub driver is worth reading beside a generic CUDA error;
generic families (an internal error, a failed system call) are not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from trainops.doctor import catalog
from trainops.doctor import events as ev
from trainops.doctor.catalog import Entry
from trainops.doctor.events import Event
from trainops.doctor.findings import (
    CHECKS,
    SEVERITY_ORDER,
    Context,
    DoctorFinding,
    Found,
    check,
    materialise,
    who,
)
from trainops.model import ERROR, INFO
from trainops.rules import catalog as rule_catalog

FAMILIES = catalog.register_families()
# Families that say a call failed without saying why: beside a check's finding they add
# nothing.
GENERIC = frozenset(
    {
        "nccl-warning",
        "nccl-internal-error",
        "nccl-system-error",
        "nccl-invalid-usage",
        "nccl-remote-error",
        "ucx-peer-lost",
        "nccl-out-of-memory",
        "init-incomplete",
        "cuda-fatal",
        "collective-timeout",
        "bootstrap-connect-failed",
        "nccl-ras",
    }
)


@check(
    "nccl-warning",
    INFO,
    "NCCL warnings that need no action by themselves",
    "NCCL prints some warnings on working systems or as context for another failure; the "
    "catalog (docs/doctor-messages.md) says which, and what each means.",
    "Read the warning in context (`--format json` lists each rank's).",
    explains=False,
    secondary=True,
)
def catalogued(ctx: Context) -> Iterator[Found]:
    groups: dict[Entry, list[Event]] = {}
    said: dict[tuple[str, str], Entry] = {}
    aside: list[Event] = []
    for event in ctx.of(ev.CATALOGUED, ev.ERRNO):
        entry = _bounded(event.fields["entry"], event.fields.get("cap"))
        if entry.reported and _in_ras(event):
            aside.append(event)
        elif entry.reported:
            # Lines of one message (its first line and a later one) say the same: one finding.
            same = said.setdefault((entry.finding, entry.meaning), entry)
            groups.setdefault(same, []).append(event)
    if aside:
        yield Found(
            f"NCCL's RAS service warned on {who(aside)} "
            f"({aside[0].fields['entry'].key.split(':')[0]}); RAS runs beside the job "
            "(src/ras/) and NCCL goes on without it",
            aside,
            severity=INFO,
            rule="nccl-ras",
            explains=False,
        )
    # A caller's restatement of NCCL's result ("NCCL error in: ..., unhandled cuda error")
    # says only that a call failed; beside a line that says more it adds nothing.
    if any(e.severity == ERROR and not _restates_result(e) for e in groups):
        groups = {e: events for e, events in groups.items() if not _restates_result(e)}
    rules = rule_catalog()
    for entry, events in groups.items():
        family = rules.get(entry.finding)
        fix = entry.fix or (family.fix if family else "")
        if entry.component == "errno":
            printed = f"the line carries the C library's text '{entry.key}'"
        elif entry.component == "nccl-result":
            printed = f"NCCL's result string, returned at {entry.source}"
        else:
            printed = f"{entry.component} prints this at {entry.source}"

        yield Found(
            f"{entry.meaning.rstrip('.')} ({who(events)}; {printed})",
            events,
            fix=fix,
            severity=entry.severity,
            rule=entry.finding,
            explains=entry.severity == ERROR,
        )


def _bounded(entry: Entry, cap: str | None) -> Entry:
    """An errno's entry no more severe than the message that carries it."""
    if cap is None or SEVERITY_ORDER.get(cap, 0) <= SEVERITY_ORDER.get(entry.severity, 0):
        return entry
    return dataclasses.replace(entry, severity=cap)


def _in_ras(event: Event) -> bool:
    """A line NCCL's RAS service printed (its file:line is under src/ras/)."""
    return (event.fields.get("location") or "").startswith("ras/")


def _restates_result(entry: Entry) -> bool:
    return entry.finding in GENERIC and entry.component in ("nccl-result", "torch")


CONNECTION_FAILED = GENERIC | {"rendezvous-unreachable", "gloo-connect-failed", "store-timeout"}


def beside_checks(ctx: Context, found: list[DoctorFinding]) -> list[DoctorFinding]:
    """Catalogued errors of a specific family the checks did not report, on lines that are
    not already the evidence of a finding (the checks said what those lines mean)."""
    [item] = [c for c in CHECKS if c.run is catalogued]
    said = {f.rule for f in found}
    shown = {line for f in found for line in f.evidence}
    # An errno text still says why a line failed when the finding that read the line only
    # says that a connection failed.
    why_unsaid = {line for f in found if f.rule in CONNECTION_FAILED for line in f.evidence}
    extra = []
    for result in catalogued(ctx):
        if result.severity != ERROR or result.rule in GENERIC | said:
            continue
        errno = all(e.kind == ev.ERRNO for e in result.events)
        read = {e.evidence() for e in result.events} & shown
        if read and not (errno and read <= why_unsaid):
            continue
        extra.append(materialise(item, result, ctx))
    return extra
