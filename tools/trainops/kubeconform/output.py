"""kubeconform's output formats: text, json, tap, junit and pretty.

Each writer gets the results in order and prints what kubeconform prints for them;
JUnit is valid against the JUnit 4 schema kubeconform's own suite checks it with.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET

from trainops.kubeconform.checks import EMPTY, ERROR, INVALID, SKIPPED, VALID, Result

_COUNTED = (VALID, INVALID, ERROR, SKIPPED)


def render(results: list[Result], output: str, summary: bool, stdin: bool, verbose: bool) -> str:
    if output == "json":
        return _json(results, summary, verbose)
    if output == "tap":
        return _tap(results)
    if output == "junit":
        return _junit(results)
    return _text(results, summary, stdin, verbose, pretty=output == "pretty")


def _counts(results: list[Result]) -> dict[str, int]:
    return {status: sum(1 for r in results if r.status == status) for status in _COUNTED}


def _text(results: list[Result], summary: bool, stdin: bool, verbose: bool, pretty: bool) -> str:
    lines = [_pretty_line(r, verbose) if pretty else _text_line(r, verbose) for r in results]
    out = "".join(line + "\n" for line in lines if line is not None)
    if summary:
        counts = _counts(results)
        resources = sum(counts.values())
        files = len({r.resource.path for r in results})
        found = "parsing stdin" if stdin else f"in {files} file{'s' if files > 1 else ''}"
        out += (
            f"Summary: {resources} resource{'s' if resources > 1 else ''} found {found} - "
            f"Valid: {counts[VALID]}, Invalid: {counts[INVALID]}, Errors: {counts[ERROR]}, "
            f"Skipped: {counts[SKIPPED]}\n"
        )
    return out


def _text_line(result: Result, verbose: bool) -> str | None:
    r = result.resource
    if result.status == INVALID:
        return f"{r.path} - {r.kind} {r.name} is invalid: {result.message}"
    if result.status == ERROR:
        if r.kind and r.name:
            return f"{r.path} - {r.kind} {r.name} failed validation: {result.message}"
        return f"{r.path} - failed validation: {result.message}"
    if verbose and result.status == VALID:
        return f"{r.path} - {r.kind} {r.name} is valid"
    if verbose and result.status == SKIPPED:
        return f"{r.path} - {r.name} {r.kind} skipped"  # kubeconform's order, name first
    return None


def _pretty_line(result: Result, verbose: bool) -> str | None:
    red, green, yellow, reset = "\033[31m", "\033[32m", "\033[33m", "\033[0m"
    r = result.resource
    if result.status == VALID and verbose:
        return f"{green}\u2714{reset} {r.path}: {green}{r.kind} {r.name} is valid{reset}"
    if result.status == INVALID:
        what = f"{r.kind} {r.name} is invalid: {result.message}"
        return f"{red}\u2716{reset} {r.path}: {red}{what}{reset}"
    if result.status == ERROR:
        what = f"{r.kind} failed validation:" if r.kind and r.name else "failed validation:"
        return f"{red}\u2716{reset} {r.path}: {red}{what} {r.name} {result.message}{reset}"
    if result.status == SKIPPED and verbose:
        what = " ".join(part for part in (r.kind, r.name) if part)
        return f"{yellow}-{reset} {r.path}: {yellow}{what + ' ' if what else ''}skipped{reset}"
    return None


def _json(results: list[Result], summary: bool, verbose: bool) -> str:
    names = {VALID: "statusValid", INVALID: "statusInvalid", ERROR: "statusError"}
    names[SKIPPED] = "statusSkipped"
    shown = []
    for result in results:
        if not verbose and result.status in (VALID, SKIPPED, EMPTY):
            continue
        r = result.resource
        entry = {
            "filename": r.path,
            "kind": r.kind,
            "name": r.name,
            "version": r.version,
            "status": names.get(result.status, ""),
            "msg": result.message,
        }
        if result.errors:
            entry["validationErrors"] = [{"path": p, "msg": m} for p, m in result.errors]
        shown.append(entry)
    payload: dict = {"resources": shown}
    if summary:
        counts = _counts(results)
        payload["summary"] = {
            "valid": counts[VALID],
            "invalid": counts[INVALID],
            "errors": counts[ERROR],
            "skipped": counts[SKIPPED],
        }
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    # Go's encoder escapes these three for HTML safety.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + "\n"


def _qualified(result: Result) -> str:
    r = result.resource
    return f"{r.version}/{r.kind}/{r.namespace}/{r.name}"


def _tap(results: list[Result]) -> str:
    lines = ["TAP version 13"] if results else []
    for index, result in enumerate(results, start=1):
        path = result.resource.path
        if result.status == VALID:
            lines.append(f"ok {index} - {path} ({_qualified(result)})")
        elif result.status == INVALID:
            lines.append(f"not ok {index} - {path} ({_qualified(result)}): {result.message}")
        elif result.status == EMPTY:
            lines.append(f"ok {index} - {path} (empty)")
        elif result.status == ERROR:
            lines.append(f"not ok {index} - {path}: {result.message}")
        else:
            lines.append(f"ok {index} - {path} ({_qualified(result)}) # skip")
    lines.append(f"1..{len(results)}")
    return "".join(line + "\n" for line in lines)


def _junit(results: list[Result]) -> str:
    started = time.perf_counter()
    suites: dict[str, ET.Element] = {}
    counts = {VALID: 0, INVALID: 0, ERROR: 0, SKIPPED: 0}
    for result in results:
        if result.status == EMPTY:
            continue
        r = result.resource
        suite = suites.get(r.path)
        if suite is None:
            suite = ET.Element("testsuite", name=r.path, id=str(len(suites) + 1))
            for attribute in ("tests", "failures", "errors", "disabled", "skipped"):
                suite.set(attribute, "0")
            suites[r.path] = suite
        name = f"{r.namespace}/{r.name}" if r.namespace else r.name
        case = ET.SubElement(
            suite, "testcase", name=name, classname=f"{r.kind}@{r.version}", time="0"
        )
        counts[result.status] += 1
        _bump(suite, "tests")
        if result.status == INVALID:
            ET.SubElement(case, "failure", message=result.message, type="")
            _bump(suite, "failures")
        elif result.status == ERROR:
            ET.SubElement(case, "error", message=result.message, type="")
            _bump(suite, "errors")
        elif result.status == SKIPPED:
            ET.SubElement(case, "skipped")  # the schema gives <skipped> no attributes
            _bump(suite, "skipped")
    root = ET.Element(
        "testsuites",
        name="kubeconform",
        time=repr(time.perf_counter() - started),
        tests=str(sum(counts.values())),
        failures=str(counts[INVALID]),
        disabled=str(counts[SKIPPED]),
        errors=str(counts[ERROR]),
    )
    root.extend(suites.values())
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def _bump(element: ET.Element, attribute: str) -> None:
    element.set(attribute, str(int(element.get(attribute, "0")) + 1))
