"""SARIF 2.1.0 with rule metadata, for code-scanning viewers.

Findings on rendered overlays point at the overlay's kustomization file;
findings on plain YAML point at the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainops import __version__
from trainops.model import ERROR, WARNING, Finding
from trainops.render.discover import kustomization_file
from trainops.report import Report
from trainops.rules import DOCTOR, catalog

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVELS = {ERROR: "error", WARNING: "warning"}


def render(report: Report) -> str:
    rules = sorted((r for r in catalog().values() if r.category != DOCTOR), key=lambda r: r.id)
    index = {rule.id: i for i, rule in enumerate(rules)}
    results = [_result(f, index) for f in report.findings]
    payload = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "trainops",
                        "version": __version__,
                        "informationUri": "https://github.com/trainops/trainops",
                        "rules": [
                            {
                                "id": rule.id,
                                "name": rule.id,
                                "shortDescription": {"text": rule.title},
                                "fullDescription": {"text": rule.why},
                                "help": {"text": rule.fix},
                                "defaultConfiguration": {
                                    "level": _LEVELS.get(rule.severity, "note")
                                },
                            }
                            for rule in rules
                        ],
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(payload, indent=2) + "\n"


def _result(finding: Finding, index: dict[str, int]) -> dict:
    region = {"startLine": finding.line} if finding.line else None
    location: dict = {
        "physicalLocation": {"artifactLocation": {"uri": _artifact(finding)}},
    }
    if region:
        location["physicalLocation"]["region"] = region
    qualified = " ".join(part for part in (finding.resource, finding.path) if part)
    if qualified:
        location["logicalLocations"] = [{"fullyQualifiedName": qualified}]
    message = finding.message + (f" Fix: {finding.fix}" if finding.fix else "")
    result = {
        "ruleId": finding.rule,
        "level": _LEVELS.get(finding.severity, "note"),
        "message": {"text": message},
        "locations": [location],
    }
    if finding.rule in index:
        result["ruleIndex"] = index[finding.rule]
    return result


def _artifact(finding: Finding) -> str:
    if finding.file:
        return Path(finding.file).as_posix()
    directory = Path(finding.source)
    kfile = kustomization_file(directory) if directory.is_dir() else None
    return (kfile or directory).as_posix()
