"""SARIF 2.1.0 for code-scanning viewers (GitHub code scanning, IDEs).

Each result sits on the file and line to fix (the base, patch or kustomization a
rendered field came from, or the plain file), with the resource and field as its
logical location and, for a field generated from a cluster profile, the cluster.yaml
key as a related location. Paths are relative to the working directory, declared as
`%SRCROOT%`. `partialFingerprints` identify a result by rule, resource, field and
target rather than by line, so a viewer keeps one alert open while lines move.
Each rule carries its documentation link (docs/policies.md of the repository in
`[tool.trainops]`), its category as tags and its default level.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trainops import __version__
from trainops.model import ERROR, WARNING, Finding
from trainops.render.discover import kustomization_file
from trainops.report import Report
from trainops.rules import DOCTOR, RuleInfo, catalog

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
FINGERPRINT = "trainopsFinding/v1"
_LEVELS = {ERROR: "error", WARNING: "warning"}


def render(report: Report) -> str:
    invocation = report.invocation
    web = web_url(invocation.repo_url) if invocation else ""
    rules = sorted((r for r in catalog().values() if r.category != DOCTOR), key=lambda r: r.id)
    index = {rule.id: i for i, rule in enumerate(rules)}
    run: dict = {
        "tool": {
            "driver": {
                "name": "trainops",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_rule(rule, web) for rule in rules],
                **({"informationUri": web} if web else {}),
            }
        },
        "results": [_result(f, index) for f in report.findings],
        "columnKind": "unicodeCodePoints",
    }
    if invocation is not None:
        run["originalUriBaseIds"] = {SRCROOT: {"uri": _directory_uri(invocation.directory)}}
        run["invocations"] = [
            {
                "executionSuccessful": True,
                "exitCode": report.exit_code,
                "commandLine": invocation.command_line,
                "workingDirectory": {"uri": _directory_uri(invocation.directory)},
            }
        ]
    payload = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(payload, indent=2) + "\n"


def web_url(repo_url: str) -> str:
    """The browsable address of a Git remote (https or scp-like ssh)."""
    url = repo_url.strip().removesuffix("/").removesuffix(".git")
    if url.startswith("git@") and ":" in url:
        host, _, path = url.removeprefix("git@").partition(":")
        url = f"https://{host}/{path}"
    return url if url.startswith(("https://", "http://")) else ""


def _rule(rule: RuleInfo, web: str) -> dict:
    entry: dict = {
        "id": rule.id,
        "name": "".join(part.capitalize() for part in rule.id.split("-")),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.why},
        "help": {
            "text": f"{rule.why}\n\nFix: {rule.fix}",
            "markdown": f"**{rule.title}**\n\n{rule.why}\n\n**Fix:** {rule.fix}",
        },
        "defaultConfiguration": {"level": _LEVELS.get(rule.severity, "note")},
        "properties": {"tags": ["kubernetes", rule.category, *rule.kinds]},
    }
    if web:
        entry["helpUri"] = f"{web}/blob/main/docs/policies.md#{rule.id}"
    return entry


def _result(finding: Finding, index: dict[str, int]) -> dict:
    physical: dict = {"artifactLocation": _artifact_location(_artifact(finding))}
    if finding.line:
        physical["region"] = {"startLine": finding.line}
    location: dict = {"physicalLocation": physical}
    qualified = " ".join(part for part in (finding.resource, finding.path) if part)
    if qualified:
        location["logicalLocations"] = [{"fullyQualifiedName": qualified, "kind": "object"}]
    message = finding.message + (f" Fix: {finding.fix}" if finding.fix else "")
    if finding.profile_key:
        message += f" Generated from {finding.profile_location}."
    result: dict = {
        "ruleId": finding.rule,
        "level": _LEVELS.get(finding.severity, "note"),
        "message": {"text": message},
        "locations": [location],
        "partialFingerprints": {FINGERPRINT: _fingerprint(finding)},
        "properties": {"target": finding.source},
    }
    if finding.rule in index:
        result["ruleIndex"] = index[finding.rule]
    if finding.profile_key and finding.profile_file:
        related: dict = {"artifactLocation": _artifact_location(finding.profile_file)}
        if finding.profile_line:
            related["region"] = {"startLine": finding.profile_line}
        result["relatedLocations"] = [
            {
                "id": 1,
                "physicalLocation": related,
                "message": {"text": f"cluster.yaml key {finding.profile_key}"},
            }
        ]
    return result


def _fingerprint(finding: Finding) -> str:
    identity = "\0".join((finding.rule, finding.source, finding.resource, finding.path))
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def _artifact(finding: Finding) -> str:
    if finding.file:
        return Path(finding.file).as_posix()
    directory = Path(finding.source)
    kfile = kustomization_file(directory) if directory.is_dir() else None
    return (kfile or directory).as_posix()


def _artifact_location(path: str) -> dict:
    """Relative to %SRCROOT% (the working directory), or a file URI when outside it."""
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": Path(path).as_posix(), "uriBaseId": SRCROOT}


def _directory_uri(directory: str) -> str:
    return Path(directory).resolve().as_uri().rstrip("/") + "/"
