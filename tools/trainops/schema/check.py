"""Checks one Document against its schema and turns violations into Findings.

The common case, a valid document, costs one `is_valid` call. Only invalid
documents pay for error details, friendlier messages ("unknown field
"replica": did you mean "replicas"?") and the line of the offending field.
Then the checks schemas cannot express (CEL rules, built-in API validation,
operator webhooks: `trainops.admission`) add theirs, in the same shape.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from trainops import admission
from trainops.model import ERROR, WARNING, Document, Finding, json_path
from trainops.rules import RuleInfo, register
from trainops.schema.registry import SchemaRegistry
from trainops.yamlio import locate

RULE = "schema"
SCHEMA_MISSING = "schema-missing"
SKIP = "skip"  # what `missing` says for --ignore-missing-schemas

register(
    RuleInfo(
        id=SCHEMA_MISSING,
        severity=WARNING,
        title="Custom resources have a schema to be checked against",
        why="A kind trainops has no schema for is not checked at all: neither its fields nor "
        "its CEL rules. The API server refuses it only where its CRD is not installed, which "
        "the manifest alone cannot tell.",
        fix="Import the CRD with `trainops schemas import CRD.yaml`, or keep the CRD in the "
        "same input (its schema is then used for the objects beside it).",
        when=(
            (WARNING, "by default: the kind is reported as not checked"),
            (ERROR, "with --strict-schemas (or strict-schemas = true in [tool.trainops])"),
        ),
        sources=(
            "https://github.com/kubernetes/kubernetes/blob/v1.34.0/staging/src/k8s.io/apimachinery/pkg/api/meta/errors.go",
        ),
    )
)


@dataclass(frozen=True)
class Violation:
    """One schema violation; `path` is the list of keys and indexes to the field."""

    path: tuple[Any, ...]
    message: str
    fix: str
    line_of: str = "value"  # "value": the field itself; "key": last key in its parent


def violations(doc: Document, registry: SchemaRegistry) -> list[Violation] | None:
    """All schema violations of a document, or None when its kind has no schema."""
    compiled = registry.lookup(doc.api_version, doc.kind)
    if compiled is None:
        return None
    found: list[Violation] = []
    obj = doc.obj
    if not compiled.validator.is_valid(obj):
        if not compiled.core:
            # The API server prunes null fields of a custom resource before validating
            # it (nullable ones excepted, which the schema already allows): a `command:`
            # left empty is accepted, not an error. Mutating webhooks fill in defaults.
            obj = as_applied(doc).obj
        if compiled.core or not compiled.validator.is_valid(obj):
            roots = (compiled.schema, compiled.definitions)
            found.extend(_describe(obj, roots, compiled.validator, ()))
    metadata = doc.obj.get("metadata")
    open_metadata = not compiled.core and isinstance(metadata, dict)
    if open_metadata and not registry.object_meta.is_valid(metadata):
        roots = (registry.core_definitions,)
        found.extend(_describe(metadata, roots, registry.object_meta, ("metadata",)))
    if not isinstance(metadata, dict) or not (metadata.get("name") or metadata.get("generateName")):
        found.append(Violation(("metadata",), "missing metadata.name", "Give the object a name."))
    found.sort(key=lambda v: (json_path(list(v.path)), v.message))
    return found


def check_document(
    doc: Document,
    registry: SchemaRegistry,
    missing: str = ERROR,
    cel: bool = True,
    api_checks: bool = True,
) -> tuple[str, list[Finding]]:
    """Return ("valid" | "invalid" | "skipped", findings) for one document.

    `missing`: what a custom resource kind with no schema gets: `error`, `warning`
    (reported as not checked) or `skip`; a kind of a group Kubernetes itself serves but
    not at this version or apiVersion is always an error (the API server has no such
    resource). `cel`: evaluate its CRD's CEL rules; `api_checks`: the built-in API
    validation and the operators' webhook checks."""
    found = violations(doc, registry)
    if found is None:
        built_in = doc.api_version.rpartition("/")[0] in registry.core_groups
        if missing == SKIP and not built_in:
            return "skipped", []
        if built_in:
            finding = to_finding(
                doc,
                Violation(
                    (),
                    f"no schema for {doc.api_version} {doc.kind}: Kubernetes "
                    f"{registry.version} serves no such resource",
                    "Use an apiVersion this Kubernetes version serves (`kubectl api-resources`), "
                    "or set --kubernetes-version to the cluster's.",
                ),
            )
            return "invalid", [finding]
        finding = to_finding(
            doc,
            Violation(
                (),
                f"no schema for {doc.api_version} {doc.kind}: not checked",
                "Import its CRD with `trainops schemas import CRD.yaml` (or put the CRD in the "
                "same input), fix the apiVersion/kind, or pass --ignore-missing-schemas; "
                "--strict-schemas makes this an error.",
            ),
            rule=SCHEMA_MISSING,
            severity=missing,
        )
        return ("invalid" if missing == ERROR else "skipped"), [finding]
    findings = [to_finding(doc, v) for v in found]
    if cel or api_checks:
        applied = as_applied(doc)
        problems = admission.check(applied, registry, cel, api_checks, schema_valid=not found)
        findings.extend(
            to_finding(doc, Violation(p.path, p.message, p.fix), p.rule, p.severity)
            for p in problems
        )
    invalid = any(f.severity == ERROR for f in findings)
    return ("invalid" if invalid else "valid"), findings


def _describe(
    instance: Any, roots: tuple[Any, ...], validator: Any, prefix: tuple[str, ...]
) -> list[Violation]:
    found = []
    for error in validator.iter_errors(instance):
        path = (*prefix, *error.instance_path)
        kind = error.kind
        name = kind.name
        if name == "additionalProperties":
            allowed = _allowed_properties(roots, list(error.schema_path))
            for field in kind.unexpected:
                close = difflib.get_close_matches(field, allowed, n=1, cutoff=0.6)
                fix = (
                    f'Did you mean "{close[0]}"?'
                    if close
                    else "Remove the field: the schema does not define it."
                )
                found.append(Violation((*path, field), f'unknown field "{field}"', fix, "key"))
        elif name == "required":
            found.append(
                Violation(
                    (*path, kind.property),
                    f'missing required field "{kind.property}"',
                    f'Add "{kind.property}".',
                    "parent",
                )
            )
        elif name == "type":
            types = [t for t in kind.types if t != "null"] or list(kind.types)
            expected = " or ".join(types)
            quote = " (quote it)" if "string" in types else ""
            found.append(
                Violation(
                    path,
                    f"expected {expected}, got {_json_type(error.instance)} "
                    f"{_short(error.instance)}",
                    f"Write the value as {expected}{quote}.",
                )
            )
        elif name == "enum":
            options = ", ".join(_short(o) for o in kind.options)
            found.append(
                Violation(
                    path,
                    f"{_short(error.instance)} is not one of {options}",
                    "Use one of the listed values.",
                )
            )
        else:
            found.append(Violation(path, error.message, "Fix the value to match the schema."))
    return found


def to_finding(
    doc: Document, violation: Violation, rule: str = RULE, severity: str = ERROR
) -> Finding:
    path = violation.path
    line = None
    if doc.text is not None and doc.line is not None:
        if violation.line_of == "key" and path:
            found = locate(doc.text, tuple(path[:-1]), path[-1])
        elif violation.line_of == "parent" and path:
            found = locate(doc.text, tuple(path[:-1]))
        else:
            found = locate(doc.text, tuple(path))
        line = doc.line + found if found is not None else doc.line
    return Finding(
        rule=rule,
        severity=severity,
        source=doc.source,
        resource=doc.resource_id,
        path=json_path(list(path)),
        message=violation.message,
        fix=violation.fix,
        file=doc.file,
        line=line,
    )


def _allowed_properties(roots: tuple[Any, ...], schema_path: list[Any]) -> list[str]:
    """Property names of the schema object an additionalProperties error came from."""
    for root in roots:
        node: Any = root
        for step in schema_path[:-1]:
            if isinstance(node, dict) and step in node:
                node = node[step]
            elif isinstance(node, list) and isinstance(step, int) and step < len(node):
                node = node[step]
            else:
                node = None
                break
        if isinstance(node, dict) and isinstance(node.get("properties"), dict):
            return list(node["properties"])
    return []


def as_applied(doc: Document) -> Document:
    """The object the API server validates: null fields dropped (a custom resource's are
    pruned; a built-in kind decodes them as unset), then the defaults operators' mutating
    webhooks set. `doc` itself when neither changes it, which is the common case."""
    obj = _without_nulls(doc.obj) if _has_null(doc.obj) else doc.obj
    obj = admission.defaulted(obj)
    if obj is doc.obj:
        return doc
    return Document(obj, doc.source, doc.file, doc.line, doc.text)


def _has_null(value: Any) -> bool:
    if isinstance(value, dict):
        return any(v is None or _has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_null(item) for item in value)
    return False


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    if isinstance(value, dict | list):
        text = "{...}" if isinstance(value, dict) else "[...]"
    return text if len(text) <= 60 else text[:57] + "..."
