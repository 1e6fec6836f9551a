"""Machine-readable report: {"summary": {...}, "findings": [...]}."""

from __future__ import annotations

import json

from trainops.report import Report


def render(report: Report) -> str:
    payload = {
        "summary": report.summary(),
        "findings": [finding.to_dict() for finding in report.findings],
    }
    return json.dumps(payload, indent=2) + "\n"
