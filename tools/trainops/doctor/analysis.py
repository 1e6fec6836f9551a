"""Sources to a diagnosis: events, per-rank records, and the findings of every check, per
attempt.

Checks that explain a failure run first; secondary checks (symptoms that usually follow
another failure, and the message catalog) run only when nothing explained the attempt. A
failed attempt that no check explains gets `failure-unrecognised`, which points at its
first error line, and so does an NCCL warning that neither a check nor the catalog knows.
"No problems found" needs evidence that the job worked (`outcome_messages`); without it
the doctor says what the logs lack (`outcome-unproven`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainops.doctor import checks  # noqa: F401 - registers the checks
from trainops.doctor import events as ev
from trainops.doctor.checks import catalog as catalogued
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
from trainops.model import ERROR, INFO, WARNING
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

# A warning, not an error: it says the logs lack evidence, not that the job failed (the
# severity contract); `trainops doctor nccl` still exits 1 on it.
UNPROVEN = register(
    RuleInfo(
        "outcome-unproven",
        WARNING,
        "The logs show the job worked",
        "A hang prints nothing, so logs without a failure line do not show a working job: the "
        "doctor needs NCCL init completing and training progressing (a step with a loss), "
        "torchrun's group finishing, NCCL destroying its communicators, or nccl-tests' "
        "bandwidth summary.",
        "If the job is still running or hung, collect its stacks (py-spy dump --pid, or "
        "TORCH_NCCL_DUMP_ON_TIMEOUT=1 for a Flight Recorder dump) and the logs of every rank; "
        "if it finished, collect the whole log (kubectl logs --tail=-1), not its first lines.",
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
    """Did this attempt fail? An NCCL warning (or an RDMA device's async event) counts only
    when NCCL also unwound an error."""
    unwound = {e.process for e in events if e.kind == ev.ERROR_TRAIL}
    for event in events:
        if event.kind in (ev.NCCL_WARN, ev.IB_ASYNC):
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
                finding = materialise(item, result, ctx)
                found.append(finding)
                explains = item.explains if result.explains is None else result.explains
                explained = explained or explains
    if explained:
        found += catalogued.beside_checks(ctx, found)
    unknown = _unknown_errors(ctx)
    if not ctx.failed and not explained and unknown:
        found.append(
            DoctorFinding(
                UNRECOGNISED.id,
                ERROR,
                f"{who(unknown[:1])} reports an error the doctor does not know: "
                f"{unknown[0].fields['message']}",
                UNRECOGNISED.fix,
                sorted({e.rank for e in unknown if e.rank is not None}),
                evidence(unknown),
                ctx.attempt,
            )
        )
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


def _unknown_errors(ctx: Context) -> list[Event]:
    """NCCL warnings the catalog does not know, and lines that report an error nobody knows."""
    known = {(e.source, e.line) for e in ctx.of(ev.CATALOGUED)}
    return [e for e in ctx.of(ev.NCCL_WARN, ev.ERROR_LINE) if (e.source, e.line) not in known]


# NCCL's troubleshooting guide (docs/troubleshooting: "PCI Access Control Services (ACS)"):
# IO virtualization (VT-d, the IOMMU) and ACS on PCIe bridges redirect peer-to-peer traffic
# to the CPU root complex, "causing a significant performance reduction or even a hang".
ONE_NODE_HANG = (
    "; every rank it lists is on one host, and a first collective between the GPUs of one "
    "node that never ends is the hang NCCL's troubleshooting guide puts down to PCI ACS or "
    "the IOMMU (VT-d) redirecting peer-to-peer traffic through the CPU root complex: check "
    "ACS on the PCIe bridges (lspci -vvv | grep ACSCtl; disable it) and the IOMMU (iommu=pt, "
    "or VT-d off in the BIOS), and confirm with NCCL_P2P_DISABLE=1"
)

ONE_NODE_FIX = (
    "Disable ACS on the node's PCIe bridges (BIOS, or setpci at boot) and set the IOMMU to "
    "passthrough (iommu=pt / intel_iommu=off); NCCL_P2P_DISABLE=1 confirms it (and works "
    "around it, slower)."
)


# NCCL's NVLink SHARP setup (src/transport/nvls.cc) logs "NVLS Bind mem ..." as it binds
# buffers to the multicast object, which waits on every GPU of the NVSwitch fabric.
NVLS_HANG = (
    "; the logs end in NCCL's NVLink SHARP (NVLS) setup (transport/nvls.cc), so init hangs "
    "binding NVLS multicast memory"
)
NVLS_FIX = (
    "Set NCCL_NVLS_ENABLE=0 to skip NVLS (it confirms the cause and works around it); check "
    "that nvidia-fabricmanager runs and is healthy on the node, and move to a newer NCCL and "
    "driver."
)


def _unproven_fix(lacking: str) -> str:
    for hint, fix in ((ONE_NODE_HANG, ONE_NODE_FIX), (NVLS_HANG, NVLS_FIX)):
        if hint in lacking:
            return f"{fix} {UNPROVEN.fix}"
    return UNPROVEN.fix


def _last_step(ctx: Context) -> str:
    """Where the logs end, when their last line is a step that is known to hang."""
    last = ctx.events[-1].text if ctx.events else ""
    return NVLS_HANG if "NCCL INFO NVLS " in last or "NCCL INFO NVLS:" in last else ""


def _one_node_hang(ctx: Context) -> str:
    listed = [e for e in ctx.of(ev.TESTS_STARTED) if "listed" in e.fields]
    hosts = {e.fields["host"] for e in listed}
    ranks = {e.fields["listed"] for e in listed}
    return ONE_NODE_HANG if len(hosts) == 1 and len(ranks) > 1 else ""


def _unproven(ctx: Context) -> str | None:
    """What the logs lack to show that this attempt worked, or None when they show it."""
    if ctx.of(ev.FINISHED):
        return None
    started = [r for r in ctx.records if r.init_start]
    complete = [r for r in started if r.init_complete]
    progress = ctx.of(ev.PROGRESS)
    if started and not complete:
        return (
            f"NCCL init started on {len(started)} process(es) and none logged its completion: "
            "init hangs, or the logs end before it completes" + _last_step(ctx)
        )
    if started and len(complete) < len(started):
        return (
            f"NCCL init completed on {len(complete)} of {len(started)} processes and the others "
            "never logged its completion"
        )
    if progress:
        return None
    if ctx.of(ev.TESTS_STARTED):
        return (
            "nccl-tests started (its banner and ranks are printed) and printed no result line: "
            "it hangs in its first collective, or the output was cut" + _one_node_hang(ctx)
        )
    if complete:
        return (
            f"NCCL init completed on {len(complete)} process(es), and no training step, exit or "
            "teardown line follows: the job hangs after init, or the logs were cut"
        )
    return (
        "no line shows the job working: no NCCL init, no training step, no successful exit"
        + _last_step(ctx)
    )


def diagnose(sources: Iterable[Source], expectation: Expectation) -> Diagnosis:
    events = parse(sources)
    if all(e.kind == ev.PROGRESS for e in events):  # no line of the stacks the doctor reads
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
        found = _attempt(ctx)
        last = attempt == attempts[-1]
        errors = any(f.severity == ERROR for f in found)
        warned = any(f.severity != INFO for f in found)
        if last and not errors and not ctx.failed and (lacking := _unproven(ctx)):
            found.append(
                DoctorFinding(
                    UNPROVEN.id,
                    UNPROVEN.severity,
                    (
                        "nothing in the logs shows the job worked"
                        + (" (the warnings above may be why)" if warned else "")
                        + f": {lacking}"
                    ),
                    _unproven_fix(lacking),
                    [],
                    evidence(ctx.events[-1:]),
                    attempt,
                )
            )
        findings += found
    findings.sort(key=lambda f: (f.attempt or 0, SEVERITY_ORDER[f.severity]))
    return Diagnosis(recs, findings, any_failed, attempts)
