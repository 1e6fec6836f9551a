"""kubeconform's output formats (text, json, junit, tap) for the built-in engine."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from trainops.kubeconform import EMPTY, ERROR, INVALID, SKIPPED, VALID, Options, Result

_JSON_STATUS = {
    VALID: "statusValid",
    INVALID: "statusInvalid",
    ERROR: "statusError",
    SKIPPED: "statusSkipped",
    EMPTY: "statusEmpty",
}


def render(results: list[Result], options: Options) -> str:
    return {"text": _text, "json": _json, "junit": _junit, "tap": _tap}[options.output](
        results, options
    )


def _counts(results: list[Result]) -> dict[str, int]:
    return {
        status: sum(1 for r in results if r.status == status)
        for status in (VALID, INVALID, ERROR, SKIPPED)
    }


def _subject(result: Result) -> str:
    return " ".join(part for part in (result.kind, result.name) if part)


def _text(results: list[Result], options: Options) -> str:
    lines = []
    for r in results:
        subject = f"{_subject(r)} " if _subject(r) else ""
        if r.status == INVALID:
            lines.append(f"{r.filename} - {subject}is invalid: {r.msg}")
        elif r.status == ERROR:
            lines.append(f"{r.filename} - {subject}failed validation: {r.msg}")
        elif options.verbose and r.status == VALID:
            lines.append(f"{r.filename} - {subject}is valid")
        elif options.verbose and r.status == SKIPPED:
            lines.append(f"{r.filename} - {subject}skipped")
    if options.summary:
        counts = _counts(results)
        resources = sum(1 for r in results if r.status != EMPTY)
        files = len({r.filename for r in results})
        where = (
            "parsing stdin"
            if files == 1 and results and results[0].filename == "stdin"
            else f"in {files} file{'' if files == 1 else 's'}"
        )
        lines.append(
            f"Summary: {resources} resource{'' if resources == 1 else 's'} found {where} - "
            f"Valid: {counts[VALID]}, Invalid: {counts[INVALID]}, Errors: {counts[ERROR]}, "
            f"Skipped: {counts[SKIPPED]}"
        )
    return "".join(line + "\n" for line in lines)


def _json(results: list[Result], options: Options) -> str:
    shown = [
        r
        for r in results
        if r.status != EMPTY and (options.verbose or r.status not in (VALID, SKIPPED))
    ]
    payload: dict = {
        "resources": [
            {
                "filename": r.filename,
                "kind": r.kind,
                "name": r.name,
                "version": r.version,
                "status": _JSON_STATUS[r.status],
                "msg": r.msg,
                **(
                    {"validationErrors": [{"path": p, "msg": m} for p, m in r.errors]}
                    if r.errors
                    else {}
                ),
            }
            for r in shown
        ]
    }
    if options.summary:
        counts = _counts(results)
        payload["summary"] = {
            "valid": counts[VALID],
            "invalid": counts[INVALID],
            "errors": counts[ERROR],
            "skipped": counts[SKIPPED],
        }
    return json.dumps(payload, indent=2) + "\n"


def _tap(results: list[Result], options: Options) -> str:
    lines = []
    index = 0
    for r in results:
        index += 1
        subject = f" ({_subject(r)})" if _subject(r) else ""
        if r.status == VALID:
            lines.append(f"ok {index} - {r.filename}{subject}")
        elif r.status == INVALID:
            lines.append(f"not ok {index} - {r.filename}{subject}: {r.msg}")
        elif r.status == ERROR:
            lines.append(f"not ok {index} - {r.filename}: {r.msg}")
        elif r.status == SKIPPED:
            lines.append(f"ok {index} #skip - {r.filename}{subject}")
        else:
            lines.append(f"ok {index} - {r.filename} (empty)")
    lines.append(f"1..{index}")
    return "".join(line + "\n" for line in lines)


def _junit(results: list[Result], options: Options) -> str:
    counts = _counts(results)
    root = ET.Element(
        "testsuites",
        name="kubeconform",
        time="0",
        tests=str(sum(counts.values())),
        failures=str(counts[INVALID]),
        disabled=str(counts[SKIPPED]),
        errors=str(counts[ERROR]),
    )
    suites: dict[str, ET.Element] = {}
    for r in results:
        if r.status == EMPTY:
            continue
        suite = suites.get(r.filename)
        if suite is None:
            suite = ET.SubElement(
                root,
                "testsuite",
                name=r.filename,
                id=str(len(suites) + 1),
                tests="0",
                failures="0",
                errors="0",
                disabled="0",
                skipped="0",
            )
            suites[r.filename] = suite
        name = f"{r.namespace}/{r.name}" if r.namespace else r.name
        case = ET.SubElement(suite, "testcase", name=name, classname=f"{r.kind}@{r.version}")
        suite.set("tests", str(int(suite.get("tests")) + 1))
        if r.status == INVALID:
            ET.SubElement(case, "failure", message=r.msg, type="")
            suite.set("failures", str(int(suite.get("failures")) + 1))
        elif r.status == ERROR:
            ET.SubElement(case, "error", message=r.msg, type="")
            suite.set("errors", str(int(suite.get("errors")) + 1))
        elif r.status == SKIPPED:
            ET.SubElement(case, "skipped", message="")
            suite.set("skipped", str(int(suite.get("skipped")) + 1))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"
