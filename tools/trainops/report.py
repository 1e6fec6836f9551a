"""What `trainops validate` found: per-target results, the whole report, its summary.

Reporters (output/) and the CLI read these types only; they never see the
pipeline that produced them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from trainops.model import ERROR, INFO, SEVERITIES, WARNING, Finding, Target

# The rule id of findings that an exemption silenced (registered by the policy engine).
EXEMPTION_IN_EFFECT = "exemption-in-effect"

VALID, INVALID, SKIPPED = "valid", "invalid", "skipped"


@dataclass
class ResourceResult:
    resource: str
    api_version: str
    kind: str
    name: str
    namespace: str
    location: str
    status: str


@dataclass
class TargetReport:
    target: Target
    resources: list[ResourceResult]
    findings: list[Finding]

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "resources": [vars(r) for r in self.resources],
                "findings": [f.to_cache() for f in self.findings],
            }
        ).encode()

    @classmethod
    def from_json(cls, target: Target, data: bytes) -> TargetReport:
        entry = json.loads(data)
        return cls(
            target,
            [ResourceResult(**r) for r in entry["resources"]],
            [Finding.from_cache(f) for f in entry["findings"]],
        )


@dataclass(frozen=True)
class Invocation:
    """How the run was started, for reports that record it (SARIF)."""

    command_line: str
    directory: str  # the working directory; report paths are relative to it
    repo_url: str  # the repository's address, from [tool.trainops]


@dataclass
class Report:
    targets: list[TargetReport] = field(default_factory=list)
    fail_on: str = ERROR  # the lowest severity that makes the exit code 1
    invocation: Invocation | None = None

    @property
    def findings(self) -> list[Finding]:
        return [f for t in self.targets for f in t.findings]

    def count(self, severity: str) -> int:
        return sum(1 for t in self.targets for f in t.findings if f.severity == severity)

    @property
    def resource_count(self) -> int:
        return sum(len(t.resources) for t in self.targets)

    def fails(self, finding: Finding) -> bool:
        """Whether this finding makes the run fail (its severity reaches `fail_on`)."""
        return SEVERITIES.index(finding.severity) <= SEVERITIES.index(self.fail_on)

    @property
    def exit_code(self) -> int:
        return 1 if any(self.fails(f) for t in self.targets for f in t.findings) else 0

    @property
    def exemptions(self) -> list[Finding]:
        """Findings an exemption silenced (reported as info, never hidden)."""
        return [f for f in self.findings if f.rule == EXEMPTION_IN_EFFECT]

    def summary(self) -> dict[str, int]:
        return {
            "targets": len(self.targets),
            "resources": self.resource_count,
            "errors": self.count(ERROR),
            "warnings": self.count(WARNING),
            "info": self.count(INFO),
            "exemptions": len(self.exemptions),
        }


def summary_line(report: Report) -> str:
    """One sentence with every count, the same wherever trainops prints it."""
    summary = report.summary()
    exempted = summary["exemptions"]
    return (
        f"{_count(summary['targets'], 'target')}, {_count(summary['resources'], 'resource')}"
        + (f" ({_count(exempted, 'exemption')} in effect)" if exempted else "")
        + f": {_count(summary['errors'], 'error')}, {_count(summary['warnings'], 'warning')}, "
        f"{summary['info']} info"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def keep_rules(report: Report, select: list[str], ignore: list[str]) -> None:
    """Keep only findings of `select` (when given), minus those of `ignore`."""
    for target in report.targets:
        target.findings = [
            f for f in target.findings if (not select or f.rule in select) and f.rule not in ignore
        ]
