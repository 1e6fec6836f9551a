"""Sources to a diagnosis: events, per-rank records, and the findings of every check, per
attempt.

Checks that explain a failure run first; secondary checks (symptoms that usually follow
another failure) run only when nothing explained the attempt. A failed attempt that no
check explains gets `failure-unrecognised`, which points at its first error line: the
doctor never reports "no problems" for a job that failed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainops.doctor import checks  # noqa: F401 - registers the checks
from trainops.doctor import events as ev
from trainops.doctor.events import Event
from trainops.doctor.evidence import RankRecord, records
from trainops.doctor.expectation import Expectation
from trainops.doctor.findings import (
    CATEGORY,
    CHECKS,
    SEVERITY_ORDER,
    Context,
    DoctorFinding,
    evidence,
    materialise,
    who,
)
from trainops.doctor.parse import parse
from trainops.doctor.sources import Source
from trainops.errors import InputError
from trainops.model import ERROR
from trainops.rules import RuleInfo, register

NO_EVIDENCE = (
    "no NCCL, PyTorch distributed or GPU driver lines in the logs: run the job with "
    "NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET"
)
UNRECOGNISED = register(
    RuleInfo(
        "failure-unrecognised",
        ERROR,
        "A failed job's cause is recognised",
        "The logs show the job failed but match none of the failure modes the doctor knows.",
        "Read the log around the first error line (and the same moment on the other ranks); "
        "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV for NCCL's view.",
        category=CATEGORY,
    )
)


@dataclass
class Diagnosis:
    records: list[RankRecord]
    findings: list[DoctorFinding]
    failed: bool
    attempts: list[int]


def failed(events: list[Event]) -> bool:
    """Did this attempt fail? An NCCL warning counts only when NCCL also unwound an error."""
    unwound = {e.process for e in events if e.kind == ev.ERROR_TRAIL}
    for event in events:
        if event.kind == ev.NCCL_WARN:
            if event.process in unwound:
                return True
        elif event.kind == ev.SOCKET_CONNECT and event.fields.get("retrying"):
            continue
        elif event.kind in ev.FAILURE_KINDS and event.kind != ev.ERROR_TRAIL:
            return True
    return False


def _first_error(events: list[Event]) -> Event:
    candidates = [
        e
        for e in events
        if e.kind in ev.FAILURE_KINDS
        and e.kind != ev.ERROR_TRAIL
        and not (e.kind == ev.SOCKET_CONNECT and e.fields.get("retrying"))
    ]
    ranked = [e for e in candidates if e.rank is not None]
    if ranked:
        first_rank = min(e.rank for e in ranked)
        return next(e for e in ranked if e.rank == first_rank)
    return candidates[0]


def _attempt(ctx: Context) -> list[DoctorFinding]:
    found: list[DoctorFinding] = []
    explained = False
    for phase in (False, True):
        if phase and explained:
            break
        for item in CHECKS:
            if item.secondary != phase:
                continue
            for result in item.run(ctx):
                finding = materialise(item, result, ctx.attempt)
                found.append(finding)
                explained = explained or item.explains
    if ctx.failed and not explained:
        first = _first_error(ctx.events)
        found.append(
            DoctorFinding(
                UNRECOGNISED.id,
                ERROR,
                "the job failed and the doctor recognises no known cause; the first error is on "
                f"{who([first])}: {first.text}",
                UNRECOGNISED.fix,
                [first.rank] if first.rank is not None else [],
                evidence([first]),
                ctx.attempt,
            )
        )
    return found


def diagnose(sources: Iterable[Source], expectation: Expectation) -> Diagnosis:
    events = parse(sources)
    if not events:
        raise InputError(NO_EVIDENCE)
    recs = records(events)
    for record in recs:
        for event in record.events:
            if event.rank is None:
                event.rank = record.rank
    by_attempt: dict[int, list[Event]] = {}
    for event in events:
        by_attempt.setdefault(event.attempt, []).append(event)
    records_by_attempt: dict[int, list[RankRecord]] = {}
    for record in recs:
        records_by_attempt.setdefault(record.attempt, []).append(record)
    attempts = sorted(by_attempt)
    findings: list[DoctorFinding] = []
    any_failed = False
    for attempt in attempts:
        chosen = by_attempt[attempt]
        ctx = Context(
            attempt,
            chosen,
            records_by_attempt.get(attempt, []),
            expectation,
            failed=failed(chosen),
        )
        any_failed = any_failed or ctx.failed
        findings += _attempt(ctx)
    findings.sort(key=lambda f: (f.attempt or 0, SEVERITY_ORDER[f.severity]))
    return Diagnosis(recs, findings, any_failed, attempts)
