"""Converts CustomResourceDefinitions into JSON schemas, one per served version.

CRDs carry an OpenAPI v3 "structural schema" with Kubernetes extensions that
JSON Schema does not know. The conversion keeps what validates (types, enums,
patterns, bounds, required) and maps the extensions:

- `nullable: true`                        -> the type also admits null
- `x-kubernetes-int-or-string: true`      -> integer or string
- `x-kubernetes-preserve-unknown-fields`  -> the object stays open
- `x-kubernetes-embedded-resource: true`  -> apiVersion/kind/metadata allowed
- OpenAPI 3.0 boolean `exclusiveMinimum`  -> the JSON Schema number form

Descriptions and other documentation are dropped. The strict variant closes
every object that lists properties and does not preserve unknown fields,
which is how the API server treats unknown fields under strict field
validation (kubectl's default).
"""

from __future__ import annotations

import json
from typing import Any

JSON_SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"
FILE_TEMPLATE = "{group}/{kind}_{version}{strict}.json"
_DROPPED = {
    "description",
    "example",
    "externalDocs",
    "title",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
}
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "additionalItems")


class NotACRD(ValueError):
    pass


def served_schemas(crd: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(group, kind, version, openAPIV3Schema) for every served version of a CRD."""
    if crd.get("kind") != "CustomResourceDefinition":
        raise NotACRD(f"kind is {crd.get('kind')!r}, not CustomResourceDefinition")
    spec = crd.get("spec") or {}
    group = spec.get("group")
    kind = (spec.get("names") or {}).get("kind")
    if not group or not kind:
        raise NotACRD("spec.group or spec.names.kind is missing")
    shared = (spec.get("validation") or {}).get("openAPIV3Schema")  # apiextensions v1beta1
    out = []
    versions = spec.get("versions") or [{"name": spec.get("version"), "served": True}]
    for version in versions:
        if not version.get("served", True) or not version.get("name"):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or shared
        if schema is None:
            schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        out.append((group, kind, version["name"], schema))
    return out


def convert(schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    """JSON schema (draft 2020-12) for one version's openAPIV3Schema."""
    root = dict(schema)
    if isinstance(root.get("properties"), dict):
        # The API server always accepts these at the root of a custom resource,
        # whether or not the CRD's schema lists them.
        properties = dict(root["properties"])
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
        root["properties"] = properties
    out = _convert_node(root, strict)
    out["$schema"] = JSON_SCHEMA_DRAFT
    return out


def _convert_node(node: dict[str, Any], strict: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _convert_node(sub, strict) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_convert_node(sub, strict) for sub in value]
        elif key in _SCHEMA_VALUES and isinstance(value, dict):
            out[key] = _convert_node(value, strict)
        else:
            out[key] = value

    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        if "anyOf" not in out and "oneOf" not in out:
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]

    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(bound)
        if isinstance(flag, bool):
            del out[bound]
            if flag and limit in out:
                out[bound] = out.pop(limit)

    preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    if node.get("x-kubernetes-embedded-resource"):
        properties = out.setdefault("properties", {})
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
    if strict and "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False

    if node.get("nullable"):
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def schema_files(crd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Relative file name -> JSON schema, for both variants of every served version."""
    files = {}
    for group, kind, version, schema in served_schemas(crd):
        for strict, suffix in ((False, ""), (True, "-strict")):
            name = FILE_TEMPLATE.format(
                group=group, kind=kind.lower(), version=version, strict=suffix
            )
            files[name] = convert(schema, strict)
    return files


def serialise(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
