"""Human-readable report: one line per finding, its fix below, a summary last."""

from __future__ import annotations

import click

from trainops.model import ERROR, WARNING
from trainops.pipeline import Report

_COLOURS = {ERROR: "red", WARNING: "yellow"}


def render(report: Report, colour: bool = False) -> str:
    lines = []
    for finding in report.findings:
        severity = finding.severity
        if colour:
            severity = click.style(severity, fg=_COLOURS.get(severity, "cyan"), bold=True)
        subject = " ".join(part for part in (finding.resource, finding.path) if part)
        subject = f"{subject}: " if subject else ""
        lines.append(f"{finding.location}: {severity}: {subject}{finding.message} [{finding.rule}]")
        if finding.fix:
            lines.append(f"    fix: {finding.fix}")
    summary = report.summary()
    lines.append(
        f"{summary['targets']} target{_s(summary['targets'])}, "
        f"{summary['resources']} resource{_s(summary['resources'])}: "
        f"{summary['errors']} error{_s(summary['errors'])}, "
        f"{summary['warnings']} warning{_s(summary['warnings'])}, {summary['info']} info"
    )
    return "\n".join(lines) + "\n"


def _s(count: int) -> str:
    return "" if count == 1 else "s"
