"""Doctor reports: a per-rank table and the findings with their evidence, as text or JSON.

Text spells the control characters of what the logs put in it (host names, quoted lines)
as escapes: a log line must not drive the terminal or forge lines of the report."""

from __future__ import annotations

import json
from dataclasses import asdict

from trainops.doctor.analysis import Diagnosis
from trainops.doctor.evidence import RankRecord
from trainops.doctor.findings import DoctorFinding
from trainops.model import ERROR, WARNING
from trainops.output.escape import printable

NO_PROBLEMS = "no problems found"


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns, the first row being the header."""
    rows = [tuple(printable(cell) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def rank_table(recs: list[RankRecord], attempts: bool = False) -> list[str]:
    """One row per run of consecutive ranks that look alike (a 128-rank job with one
    cause is a few rows, not 128): `0-7` stands for ranks 0 to 7."""
    header = ("rank", "nranks", "host", "init", "transport", "gdr", "interface", "warn", "timeouts")
    runs: list[list] = []  # [first rank, last rank, attempt, the other cells]
    for r in recs:
        init = "complete" if r.init_complete else ("STARTED" if r.init_start else "-")
        cells = (
            str(r.nranks or "?"),
            r.host or "-",
            init,
            r.transport or "?",
            _yes_no(r.gdr),
            r.interfaces[0] if r.interfaces else "-",
            str(len(r.warnings)),
            str(len(r.timeouts)),
        )
        last = runs[-1] if runs else None
        if (
            last is not None
            and r.rank is not None
            and last[1] is not None
            and r.rank == last[1] + 1
            and (last[2], last[3]) == (r.attempt, cells)
        ):
            last[1] = r.rank
        else:
            runs.append([r.rank, r.rank, r.attempt, cells])
    rows = [(("attempt",) if attempts else ()) + header]
    for first, end, attempt, cells in runs:
        rank = "?" if first is None else (str(first) if first == end else f"{first}-{end}")
        rows.append(((str(attempt),) if attempts else ()) + (rank, *cells))
    return table(rows)


def _finding_text(finding, suffix: str = "") -> list[str]:
    lines = [f"{finding.severity}: {finding.message} [{finding.rule}]{suffix}"]
    lines.append(f"    fix: {finding.fix}")
    lines += [f"    evidence: {item}" for item in finding.evidence]
    return [printable(line) for line in lines]


def finding_lines(diagnosis: Diagnosis) -> list[str]:
    several = len(diagnosis.attempts) > 1
    lines = []
    for f in diagnosis.findings:
        suffix = f" (attempt {f.attempt})" if several and f.attempt is not None else ""
        lines += _finding_text(f, suffix)
    serious = any(f.severity in (ERROR, WARNING) for f in diagnosis.findings)
    if not serious and not diagnosis.failed:
        lines.append(NO_PROBLEMS)
    return lines


def plain_findings(findings: list) -> list[str]:
    """Findings without attempts (nccl-tests runs), or `no problems found`."""
    lines = [line for f in findings for line in _finding_text(f)]
    return lines or [NO_PROBLEMS]


def text(diagnosis: Diagnosis, header: list[str] = ()) -> str:
    several = len(diagnosis.attempts) > 1
    lines = [*map(printable, header), *rank_table(diagnosis.records, several), ""]
    lines += finding_lines(diagnosis)
    return "\n".join(lines) + "\n"


def finding_dict(finding: DoctorFinding) -> dict:
    return asdict(finding)


def json_document(data: dict) -> str:
    return json.dumps(data, indent=2) + "\n"


def to_json(diagnosis: Diagnosis, extra: dict | None = None) -> str:
    data = {
        **(extra or {}),
        "failed": diagnosis.failed,
        "attempts": diagnosis.attempts,
        "ranks": [r.to_dict() for r in diagnosis.records],
        "findings": [finding_dict(f) for f in diagnosis.findings],
    }
    return json.dumps(data, indent=2) + "\n"


def error_json(message: str) -> str:
    """What `--format json` prints when the input cannot be read."""
    return json.dumps({"error": message}, indent=2) + "\n"
