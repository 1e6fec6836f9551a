"""One resource against its schema, reported with kubeconform's statuses and messages.

Order of decisions, as in kubeconform: empty, unreadable, skipped (`-skip` by kind or
apiVersion/kind), rejected, no schema (an error unless `-ignore-missing-schemas`),
then the schema. Violations read as santhosh-tekuri/jsonschema v6 (kubeconform's
validator) words them: "at '/spec/replicas': got string, want null or integer".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trainops.kubeconform.resources import Resource
from trainops.kubeconform.schemas import Registry

VALID, INVALID, ERROR, SKIPPED, EMPTY = "valid", "invalid", "error", "skipped", "empty"
_TYPE_ORDER = ("null", "boolean", "number", "integer", "string", "array", "object")


@dataclass
class Result:
    resource: Resource
    status: str
    message: str = ""
    errors: list[tuple[str, str]] = field(default_factory=list)  # (JSON pointer, message)


def check(
    resource: Resource,
    registry: Registry,
    skip: frozenset[str],
    reject: frozenset[str],
    ignore_missing: bool,
) -> Result:
    if resource.error:
        return Result(resource, ERROR, resource.error)
    if resource.obj is None:
        return Result(resource, EMPTY)
    signatures = {resource.kind, f"{resource.version}/{resource.kind}"}
    if signatures & skip:
        return Result(resource, SKIPPED)
    if signatures & reject:
        return Result(resource, ERROR, f"prohibited resource kind {resource.kind}")
    schema = registry.lookup(resource.version, resource.kind)
    if schema is None:
        if ignore_missing:
            return Result(resource, SKIPPED)
        return Result(resource, ERROR, f"could not find schema for {resource.kind}")
    if schema.validator.is_valid(resource.obj):
        return Result(resource, VALID)
    errors = describe(schema.validator, resource.obj)
    causes = "".join(f" - at {_quote(pointer)}: {message}" for pointer, message in errors)
    message = (
        "problem validating schema. Check JSON formatting: "
        f"jsonschema validation failed with {_quote(schema.url + '#')}{causes}"
    )
    return Result(resource, INVALID, message, errors)


def describe(validator: Any, instance: Any) -> list[tuple[str, str]]:
    """(JSON pointer, message) per violation, required properties grouped per object."""
    found: list[tuple[str, str]] = []
    missing: dict[str, list[str]] = {}
    for error in validator.iter_errors(instance):
        pointer = "".join(
            "/" + str(part).replace("~", "~0").replace("/", "~1") for part in error.instance_path
        )
        if error.kind.name == "required":
            if pointer not in missing:
                missing[pointer] = []
                found.append((pointer, ""))
            missing[pointer].append(error.kind.property)
            continue
        found.append((pointer, _message(error)))
    return [(pointer, message or _missing(missing[pointer])) for pointer, message in found]


def _missing(names: list[str]) -> str:
    if len(names) == 1:
        return f"missing property {_quote(names[0])}"
    return "missing properties " + ", ".join(_quote(name) for name in names)


def _message(error: Any) -> str:
    kind, name = error.kind, error.kind.name
    if name == "type":
        wanted = [t for t in _TYPE_ORDER if t in set(kind.types)]
        return f"got {_json_type(error.instance)}, want {' or '.join(wanted)}"
    if name == "additionalProperties":
        return f"additional properties {', '.join(_quote(p) for p in kind.unexpected)} not allowed"
    if name == "enum":
        options = list(kind.options)
        if len(options) == 1:
            return f"value must be {_display(options[0])}"
        return f"value must be one of {', '.join(_display(o) for o in options)}"
    if name == "const":
        return f"value must be {_display(kind.expected_value)}"
    if name == "pattern":
        return f"{_quote(str(error.instance))} does not match pattern {_quote(kind.pattern)}"
    limits = {
        "minLength": len,
        "maxLength": len,
        "minItems": len,
        "maxItems": len,
        "minProperties": len,
        "maxProperties": len,
    }
    if name in limits:
        return f"{name}: got {limits[name](error.instance)}, want {kind.limit}"
    if name in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        limit = getattr(kind, "limit", getattr(kind, "multiple_of", ""))
        return f"{name}: got {_number(error.instance)}, want {_number(limit)}"
    if name == "oneOfNotValid":
        return "oneOf failed, none matched"
    if name == "anyOf":
        return "anyOf failed"
    if name == "not":
        return "not failed"
    if name == "falseSchema":
        return "false schema"
    return error.message


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _display(value: Any) -> str:
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, list | dict):
        return "value"
    return json.dumps(value)


def _quote(text: str) -> str:
    """Go's %q with single quotes, as jsonschema v6 quotes names and pointers."""
    inner = json.dumps(text, ensure_ascii=False)[1:-1].replace('\\"', '"').replace("'", "\\'")
    return f"'{inner}'"
