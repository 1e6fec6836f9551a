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

JSON Schema cannot carry `x-kubernetes-validations` (CEL rules), nor the
defaults the API server applies before evaluating them, nor how list items
are matched between an old and a new object. Those go to a sidecar file per
served version (`GROUP/KIND_VERSION.validations.json`), written only for
versions that have rules; `trainops.admission.cel` compiles and runs them.
"""

from __future__ import annotations

import json
from typing import Any

from trainops.admission.names import dns1035_label, dns1123_subdomain

JSON_SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"
FILE_TEMPLATE = "{group}/{kind}_{version}{strict}.json"
VALIDATIONS_TEMPLATE = "{group}/{kind}_{version}.validations.json"
# Schema path steps that are not property names: a list's items, a map's values.
ITEMS, VALUES = "[]", "{}"
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
_RULE_KEYS = ("rule", "message", "messageExpression", "fieldPath", "reason", "optionalOldSelf")


class NotACRD(ValueError):
    pass


def served_schemas(crd: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(group, kind, version, openAPIV3Schema) for every served version of a CRD."""
    if crd.get("kind") != "CustomResourceDefinition":
        raise NotACRD(f"kind is {crd.get('kind')!r}, not CustomResourceDefinition")
    spec = crd.get("spec") or {}
    if not isinstance(spec, dict) or not isinstance(spec.get("names") or {}, dict):
        raise NotACRD("spec and spec.names must be objects")
    group = spec.get("group")
    kind = (spec.get("names") or {}).get("kind")
    if not group or not kind:
        raise NotACRD("spec.group or spec.names.kind is missing")
    _check_name("spec.group", group, _group_problems)
    _check_name("spec.names.kind", kind, lambda k: dns1035_label(k.lower()))
    shared = (spec.get("validation") or {}).get("openAPIV3Schema")  # apiextensions v1beta1
    out = []
    versions = spec.get("versions") or [{"name": spec.get("version"), "served": True}]
    for version in versions:
        if not isinstance(version, dict):
            raise NotACRD("spec.versions[] must be objects")
        if not version.get("served", True) or not version.get("name"):
            continue
        _check_name("spec.versions[].name", version["name"], dns1035_label)
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or shared
        if schema is None:
            schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        out.append((group, kind, version["name"], schema))
    return out


def _group_problems(group: str) -> tuple[str, ...]:
    dotless = () if "." in group else ("should be a domain with at least one dot",)
    return dotless + dns1123_subdomain(group)


def _check_name(field: str, value: object, problems) -> None:
    """The API server's own checks of the names that become file names (apiextensions-
    apiserver pkg/apis/apiextensions/validation/validation.go: the group a DNS subdomain
    with a dot, the version a DNS-1035 label, the kind one in any case): a CRD it would
    refuse never names a path, so `../x` or `a/b` cannot leave the output directory."""
    found = problems(value) if isinstance(value, str) else ("must be a string",)
    if found:
        raise NotACRD(f"{field} {str(value)[:100]!r}: {'; '.join(found)}")


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
    # The API server fills in a property's schema default while it decodes a custom
    # resource, before validation: a required property with a default is never missing
    # (apiextensions-apiserver structuraldefaulting; KubeRay's workerGroupSpecs[].maxReplicas).
    required, properties = out.get("required"), out.get("properties")
    if isinstance(required, list) and isinstance(properties, dict):
        defaulted = {
            name for name, sub in properties.items() if isinstance(sub, dict) and "default" in sub
        }
        if defaulted & set(required):
            kept = [name for name in required if name not in defaulted]
            if kept:
                out["required"] = kept
            else:
                del out["required"]

    if node.get("nullable"):
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def schema_files(crd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Relative file name -> content, for every file the import writes: both schema
    variants of every served version, and its CEL rules' sidecar where it has rules."""
    files = validation_files(crd)
    for group, kind, version, schema in served_schemas(crd):
        for strict, suffix in ((False, ""), (True, "-strict")):
            name = FILE_TEMPLATE.format(
                group=group, kind=kind.lower(), version=version, strict=suffix
            )
            files[name] = convert(schema, strict)
    return files


def validation_files(crd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Relative file name -> CEL rules, defaults and list keys, per served version with rules."""
    name = str((crd.get("metadata") or {}).get("name") or "")
    files = {}
    for group, kind, version, schema in served_schemas(crd):
        rules: list[dict[str, Any]] = []
        lists: dict[str, dict[str, Any]] = {}
        _collect(schema, [], rules, lists)
        if not rules:
            continue
        file = VALIDATIONS_TEMPLATE.format(group=group, kind=kind.lower(), version=version)
        files[file] = {
            "crd": name or f"{kind.lower()}s.{group}",
            "rules": rules,
            "defaults": _defaults(schema, (), {tuple(r["path"]) for r in rules}) or {},
            "lists": lists,
        }
    return files


def _collect(
    node: dict[str, Any],
    path: list[str],
    rules: list[dict[str, Any]],
    lists: dict[str, dict[str, Any]],
) -> None:
    """Every CEL rule with the schema path of the node it is attached to."""
    for rule in node.get("x-kubernetes-validations") or []:
        if isinstance(rule, dict) and isinstance(rule.get("rule"), str):
            kept = {k: rule[k] for k in _RULE_KEYS if k in rule}
            rules.append({"path": list(path), "type": _type_name(node), **kept})
    if node.get("x-kubernetes-list-type") == "map":
        keys = node.get("x-kubernetes-list-map-keys") or []
        lists["/".join(path)] = {"type": "map", "keys": list(keys)}
    elif node.get("x-kubernetes-list-type") == "set":
        lists["/".join(path)] = {"type": "set"}
    for child, sub in _children(node):
        _collect(sub, [*path, child], rules, lists)


def _defaults(
    node: dict[str, Any], path: tuple[str, ...], ruled: set[tuple[str, ...]]
) -> dict[str, Any] | None:
    """The schema reduced to the `default`s a rule can see (at or below a node with
    rules) and the nodes on the way to them."""
    out: dict[str, Any] = {}
    if "default" in node:
        out["default"] = node["default"]
    if node.get("nullable"):
        out["nullable"] = True
    for child, sub in _children(node):
        below = (*path, child)
        if not any(r[: len(below)] == below or below[: len(r)] == r for r in ruled):
            continue
        kept = _defaults(sub, below, ruled)
        if kept:
            out.setdefault("children", {})[child] = kept
    return out if ("default" in out or "children" in out) else None


def _children(node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    children = [
        (name, sub) for name, sub in (node.get("properties") or {}).items() if isinstance(sub, dict)
    ]
    if isinstance(node.get("items"), dict):
        children.append((ITEMS, node["items"]))
    if isinstance(node.get("additionalProperties"), dict):
        children.append((VALUES, node["additionalProperties"]))
    return children


def _type_name(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer-or-string"
    kind = node.get("type")
    return kind if isinstance(kind, str) else "object"


def serialise(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
