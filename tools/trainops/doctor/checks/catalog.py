"""Messages the catalog explains: a line printed from a catalogued NCCL, plugin, PyTorch or
CUDA message raises the finding the catalog gives it, with the catalog's meaning and fix.

It runs after the checks that read a failure in depth (it is secondary): they know more
than one line can say, so the catalog speaks only where they found nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainops.doctor import catalog
from trainops.doctor import events as ev
from trainops.doctor.catalog import Entry
from trainops.doctor.events import Event
from trainops.doctor.findings import Context, Found, check, who
from trainops.model import ERROR, INFO
from trainops.rules import catalog as rule_catalog

FAMILIES = catalog.register_families()


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
    for event in ctx.of(ev.CATALOGUED):
        entry = event.fields["entry"]
        if entry.reported:
            groups.setdefault(entry, []).append(event)
    rules = rule_catalog()
    for entry, events in groups.items():
        family = rules.get(entry.finding)
        fix = entry.fix or (family.fix if family else "")
        yield Found(
            f"{entry.meaning.rstrip('.')} ({who(events)}; {entry.component} prints this "
            f"at {entry.source})",
            events,
            fix=fix,
            severity=entry.severity,
            rule=entry.finding,
            explains=entry.severity == ERROR,
        )
