"""GitHub Actions workflow commands: one annotation per finding, on the file and line
to fix, shown in the run's summary and on the pull request's diff.

Errors are `::error`, warnings `::warning`, info `::notice`; the summary sentence
follows as a plain log line. Values are escaped as the runner requires (`%`, CR and
LF everywhere; `:` and `,` in properties too).
"""

from __future__ import annotations

from trainops.model import ERROR, WARNING, Finding
from trainops.output.escape import printable
from trainops.report import Report, summary_line

_COMMANDS = {ERROR: "error", WARNING: "warning"}


def render(report: Report) -> str:
    lines = [_annotation(finding) for finding in report.findings]
    lines.append(summary_line(report))
    return "\n".join(lines) + "\n"


def _annotation(finding: Finding) -> str:
    properties = {"file": finding.file or finding.source}
    if finding.line:
        properties["line"] = str(finding.line)
    properties["title"] = f"trainops {finding.rule}"
    subject = " ".join(part for part in (finding.resource, finding.path) if part)
    message = printable(f"{subject}: {finding.message}" if subject else finding.message)
    if finding.profile_key:
        message += "\nGenerated from " + printable(finding.profile_location) + "."
    if finding.fix:
        message += "\nFix: " + printable(finding.fix)
    if finding.outside_target:
        message += "\nRendered in " + printable(finding.source) + "."
    joined = ",".join(f"{key}={_property(value)}" for key, value in properties.items())
    command = _COMMANDS.get(finding.severity, "notice")
    return f"::{command} {joined}::{_data(message)}"


def _data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(value: str) -> str:
    return _data(printable(value)).replace(":", "%3A").replace(",", "%2C")
