"""`trainops diff` reports: text for terminals, JSON for tools, Markdown for pull requests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trainops.diff.compare import MISSING, FieldChange, ResourceDiff

SIGNS = {"added": "+", "removed": "-", "modified": "~"}


@dataclass
class DiffReport:
    base: str
    head: str
    diffs: list[ResourceDiff]

    def summary(self) -> dict[str, int]:
        counts = {"added": 0, "removed": 0, "modified": 0}
        for diff in self.diffs:
            counts[diff.change] += 1
        counts["warnings"] = sum(len(d.warnings) for d in self.diffs)
        return counts


def _value(value: Any) -> str:
    if value is MISSING:
        return "(none)"
    return json.dumps(value, sort_keys=True)


def _headline(report: DiffReport) -> str:
    s = report.summary()
    if not report.diffs:
        return f"no changes to synced resources between {report.base} and {report.head}"
    return (
        f"{report.base} -> {report.head}: {s['modified']} modified, {s['added']} added, "
        f"{s['removed']} removed; {s['warnings']} warning(s)"
    )


def _field_line(change: FieldChange) -> str:
    if change.kind == "added":
        return f"+ {change.path}: {_value(change.new)}"
    if change.kind == "removed":
        return f"- {change.path}: {_value(change.old)}"
    return f"~ {change.path}: {_value(change.old)} -> {_value(change.new)}"


def text(report: DiffReport) -> str:
    lines = [_headline(report)]
    app = None
    for diff in report.diffs:
        if diff.key.app != app:
            app = diff.key.app
            lines.append(f"\n{app}")
        lines.append(f"  {SIGNS[diff.change]} {diff.key.resource}")
        lines.extend(f"      {_field_line(change)}" for change in diff.fields)
        lines.extend(f"      warning: {warning}" for warning in diff.warnings)
    return "\n".join(lines) + "\n"


def to_json(report: DiffReport) -> str:
    def field(change: FieldChange) -> dict:
        entry: dict[str, Any] = {"path": change.path, "change": change.kind}
        if change.old is not MISSING:
            entry["old"] = change.old
        if change.new is not MISSING:
            entry["new"] = change.new
        return entry

    data = {
        "base": report.base,
        "head": report.head,
        "summary": report.summary(),
        "resources": [
            {
                "app": d.key.app,
                "resource": d.key.resource,
                "kind": d.key.kind,
                "namespace": d.key.namespace,
                "name": d.key.name,
                "change": d.change,
                "fields": [field(c) for c in d.fields],
                "warnings": d.warnings,
            }
            for d in report.diffs
        ],
    }
    return json.dumps(data, indent=2) + "\n"


def _cell(value: Any) -> str:
    shown = _value(value).replace("|", "\\|")
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return f"`{shown}`"


def markdown(report: DiffReport) -> str:
    lines = [f"### trainops diff: `{report.base}` → `{report.head}`", "", _headline(report)]
    warned = [(d, w) for d in report.diffs for w in d.warnings]
    if warned:
        lines += ["", "> [!WARNING]"]
        lines += [f"> **{d.key.resource}** ({d.key.app}): {w}  " for d, w in warned]
    for diff in report.diffs:
        title = (
            f"{SIGNS[diff.change]} <code>{diff.key.resource}</code> in <code>{diff.key.app}</code>"
        )
        lines += ["", "<details>", f"<summary>{title}</summary>", ""]
        if diff.fields:
            lines += ["| field | before | after |", "|---|---|---|"]
            lines += [f"| `{c.path}` | {_cell(c.old)} | {_cell(c.new)} |" for c in diff.fields]
        else:
            lines.append(f"{diff.key.kind} {diff.change}.")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


FORMATS = {"text": text, "json": to_json, "markdown": markdown}
