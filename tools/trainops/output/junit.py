"""JUnit XML: a testsuite per overlay or file, a testcase per resource.

Findings that fail the run (errors, or warnings too with --fail-on warning)
become failures; the others go to the testcase's system-out so CI viewers show
them without failing the build. Findings about
the render itself (not a resource) get a testcase of their own.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from trainops.errors import InputError
from trainops.model import Finding
from trainops.output.escape import printable
from trainops.report import SKIPPED, Report

RENDER_CASE = "(render)"


def render(report: Report) -> str:
    root = ET.Element("testsuites", name="trainops validate")
    total_tests = total_failures = total_skipped = 0
    for target_report in report.targets:
        by_resource: dict[str, list[Finding]] = defaultdict(list)
        for finding in target_report.findings:
            by_resource[finding.resource or RENDER_CASE].append(finding)
        cases = [
            (r.resource, f"{r.api_version}/{r.kind}", r.status) for r in target_report.resources
        ]
        if RENDER_CASE in by_resource:
            cases.insert(0, (RENDER_CASE, "render", "valid"))
        suite = ET.SubElement(root, "testsuite", name=printable(target_report.target.path))
        failures = skipped = 0
        for name, classname, status in cases:
            case = ET.SubElement(
                suite, "testcase", name=printable(name), classname=printable(classname)
            )
            findings = by_resource.pop(name, [])
            errors = [f for f in findings if report.fails(f)]
            others = [f for f in findings if not report.fails(f)]
            if errors:
                failures += 1
                failure = ET.SubElement(
                    case, "failure", message=printable(errors[0].message), type=errors[0].rule
                )
                failure.text = "\n".join(_line(f) for f in errors)
            elif status == SKIPPED:
                skipped += 1
                ET.SubElement(case, "skipped", message="no schema (ignored)")
            if others:
                ET.SubElement(case, "system-out").text = "\n".join(_line(f) for f in others)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suite.set("skipped", str(skipped))
        total_tests += len(cases)
        total_failures += failures
        total_skipped += skipped
    root.set("tests", str(total_tests))
    root.set("failures", str(total_failures))
    root.set("errors", "0")
    root.set("skipped", str(total_skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _line(finding: Finding) -> str:
    where = f"{finding.location} {finding.path}".strip()
    fix = f" (fix: {finding.fix})" if finding.fix else ""
    return printable(f"{finding.severity} [{finding.rule}] {where}: {finding.message}{fix}")


def render_error(error: InputError) -> str:
    """The report of a run whose input could not be read: one suite, one error case."""
    root = ET.Element("testsuites", name="trainops validate", tests="1", failures="0")
    root.set("errors", "1")
    suite = ET.SubElement(root, "testsuite", name=printable(error.file or "input"), tests="1")
    suite.set("failures", "0")
    suite.set("errors", "1")
    case = ET.SubElement(suite, "testcase", name="(input)", classname="input")
    ET.SubElement(
        case, "error", message=printable(error.message), type="unreadable-input"
    ).text = printable(str(error))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
