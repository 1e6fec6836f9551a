"""Doctor reports: a per-rank table and the findings, as text or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from trainops.doctor.analysis import DoctorFinding, RankRecord


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns, the first row being the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def rank_table(recs: list[RankRecord]) -> list[str]:
    header = ("rank", "nranks", "host", "init", "transport", "gdr", "interface", "warn", "timeouts")
    rows = [header]
    for r in recs:
        init = "complete" if r.init_complete else ("STARTED" if r.init_start else "-")
        rows.append(
            (
                "?" if r.rank is None else str(r.rank),
                str(r.nranks or "?"),
                r.host or "-",
                init,
                r.transport or "?",
                _yes_no(r.gdr),
                r.interfaces[0] if r.interfaces else "-",
                str(len(r.warnings)),
                str(len(r.timeouts)),
            )
        )
    return table(rows)


def finding_lines(findings: list[DoctorFinding]) -> list[str]:
    if not findings:
        return ["no problems found"]
    lines = []
    for f in findings:
        lines.append(f"{f.severity}: {f.message} [{f.rule}]")
        lines.append(f"    fix: {f.fix}")
    return lines


def text(recs: list[RankRecord], findings: list[DoctorFinding], header: list[str] = ()) -> str:
    lines = [*header, *rank_table(recs), "", *finding_lines(findings)]
    return "\n".join(lines) + "\n"


def to_json(
    recs: list[RankRecord], findings: list[DoctorFinding], extra: dict | None = None
) -> str:
    data = {
        **(extra or {}),
        "ranks": [r.to_dict() for r in recs],
        "findings": [asdict(f) for f in findings],
    }
    return json.dumps(data, indent=2) + "\n"
