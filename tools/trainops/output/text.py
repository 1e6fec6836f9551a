"""Human-readable report: errors and warnings with their fixes, then one summary line.

Info findings (what is right, or only worth knowing, exemptions in effect among them)
are counted in the summary and shown with `--show-info`; `--quiet` prints the summary
line alone. Like kubeconform and kube-linter, a clean run prints one line.
"""

from __future__ import annotations

import click

from trainops.model import ERROR, INFO, WARNING
from trainops.output.escape import printable
from trainops.report import Report, summary_line

_COLOURS = {ERROR: "red", WARNING: "yellow"}


def render(
    report: Report, colour: bool = False, show_info: bool = False, quiet: bool = False
) -> str:
    lines = []
    for finding in [] if quiet else report.findings:
        if finding.severity == INFO and not show_info:
            continue
        severity = finding.severity
        if colour:
            severity = click.style(severity, fg=_COLOURS.get(severity, "cyan"), bold=True)
        subject = " ".join(part for part in (finding.resource, finding.path) if part)
        subject = f"{subject}: " if subject else ""
        via = f" (via {finding.source})" if finding.outside_target else ""
        lines.append(
            printable(f"{finding.location}: ")
            + severity
            + printable(f": {subject}{finding.message} [{finding.rule}]{via}")
        )
        if finding.profile_key:
            lines.append(printable(f"    generated from: {finding.profile_location}"))
        if finding.fix:
            lines.append(printable(f"    fix: {finding.fix}"))
    hidden = report.count(INFO) if not show_info and not quiet else 0
    lines.append(summary_line(report) + (" (shown with --show-info)" if hidden else ""))
    return "\n".join(lines) + "\n"
