"""Finds and compiles the JSON schema for an (apiVersion, kind).

Schema locations follow kubeconform's conventions so the same flags work with
both engines: a location ending in `.json` is a template using
`{{.NormalizedKubernetesVersion}}`, `{{.StrictSuffix}}`, `{{.ResourceKind}}`,
`{{.ResourceAPIVersion}}`, `{{.Group}}` and `{{.KindSuffix}}`; any other
location is a directory or URL laid out like kubernetes-json-schema. The
location `default` means the core Kubernetes schemas shipped with trainops
(trainops.schema.bundle, from kubernetes-validate), read offline, for the chosen
minor version.
Locations are tried in order; the first schema found wins.

A CRD schema found in a local directory may have a sidecar of CEL rules next
to it (`KIND_VERSION.validations.json`, written by `trainops schemas import`);
`rules()` compiles it once per kind and keeps it for the whole run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema_rs

from trainops.errors import InputError
from trainops.model import computed_once
from trainops.schema import bundle

if TYPE_CHECKING:  # compiled CEL is loaded only for kinds that have rules
    from trainops.admission.cel import RuleSet

DEFAULT_KUBERNETES_VERSION = "1.35"
CRD_SCHEMA_TEMPLATE = "{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}{{.StrictSuffix}}.json"
_CORE = "default:"  # where bundled core schemas are looked up (trainops.schema.bundle)
_CORE_DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_TEMPLATE_VAR = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(\.\d+)?$")


def bundled_versions() -> list[str]:
    return bundle.versions()


def minor_version(version: str) -> str:
    match = _VERSION.match(version.strip())
    if not match:
        raise InputError(f"kubernetes version '{version}' is not of the form 1.35 or 1.35.2")
    return f"{match.group(1)}.{match.group(2)}"


@dataclass
class CompiledSchema:
    validator: Any
    schema: dict[str, Any]
    definitions: dict[str, Any] | None  # the $defs document core schemas refer to
    location: str
    core: bool


class SchemaRegistry:
    def __init__(self, locations: list[str], kubernetes_version: str, strict: bool):
        self.locations = locations
        self.strict = strict
        self.version = minor_version(kubernetes_version)
        self._compiled: dict[tuple[str, str], CompiledSchema | None] = {}
        self._rules: dict[tuple[str, str], RuleSet | None] = {}
        self._fetched: dict[str, dict[str, Any] | None] = {}
        if "default" in locations and self.version not in bundled_versions():
            available = bundled_versions()
            raise InputError(
                f"no bundled schemas for Kubernetes {self.version}: "
                f"choose one of {available[0]}..{available[-1]}"
            )

    @computed_once
    def core_definitions(self) -> dict[str, Any]:
        return bundle.load(self.version, self.strict)["_definitions.json"]

    @computed_once
    def _core_registry(self) -> Any:
        return jsonschema_rs.Registry([(_CORE_DEFINITIONS_URI, self.core_definitions)])

    @computed_once
    def object_meta(self) -> Any:
        """Validator for top-level metadata, which CRD schemas leave open."""
        ref = {"$ref": f"{_CORE_DEFINITIONS_URI}#/$defs/{_OBJECT_META}"}
        return jsonschema_rs.Draft202012Validator(ref, registry=self._core_registry)

    @computed_once
    def core_groups(self) -> frozenset[str]:
        """The API groups Kubernetes itself serves at this version ("" is the core group)."""
        groups = set()
        for schema in bundle.load(self.version, self.strict).values():
            for gvk in (
                schema.get("x-kubernetes-group-version-kind") or ()
                if isinstance(schema, dict)
                else ()
            ):
                if isinstance(gvk, dict):
                    groups.add(str(gvk.get("group", "")))
        return frozenset(groups)

    def lookup(self, api_version: str, kind: str) -> CompiledSchema | None:
        key = (api_version, kind)
        if key not in self._compiled:
            self._compiled[key] = self._find(api_version, kind)
        return self._compiled[key]

    def rules(self, api_version: str, kind: str) -> RuleSet | None:
        """The compiled CEL rules of a custom resource kind, or None when it has none."""
        key = (api_version, kind)
        if key not in self._rules:
            compiled = self.lookup(api_version, kind)
            found = None
            if compiled is not None and not compiled.core and "://" not in compiled.location:
                from trainops.admission.cel import RuleSet

                try:
                    found = RuleSet.load(Path(validations_path(compiled.location)))
                except (OSError, ValueError) as exc:
                    raise InputError(
                        f"CEL rules cannot be read: {exc}", validations_path(compiled.location)
                    ) from None
            self._rules[key] = found
        return self._rules[key]

    def _find(self, api_version: str, kind: str) -> CompiledSchema | None:
        for location in self.locations:
            core = location == "default"
            template = self._template(location)
            path = render_template(template, api_version, kind, self.version, self.strict)
            if core:
                schema = bundle.load(self.version, self.strict).get(path.removeprefix(_CORE))
                # File names keep only a group's first label: scheduling.x-k8s.io's
                # PodGroup is named as scheduling.k8s.io's would be.
                if schema is not None and not _serves(schema, api_version, kind):
                    schema = None
            else:
                schema = self._load(path)
            if schema is None:
                continue
            try:
                if core:
                    validator = jsonschema_rs.Draft202012Validator(
                        schema, registry=self._core_registry
                    )
                else:
                    validator = _compile_crd_schema(schema)
            except Exception as exc:  # jsonschema-rs reports invalid schemas with several types
                raise InputError(f"schema cannot be compiled: {exc}", path) from None
            definitions = self.core_definitions if core else None
            return CompiledSchema(validator, schema, definitions, path, core)
        return None

    def _template(self, location: str) -> str:
        if location == "default":
            return _CORE + "{{.ResourceKind}}{{.KindSuffix}}.json"
        if location.endswith(".json"):
            return location
        return location.rstrip("/") + (
            "/{{.NormalizedKubernetesVersion}}-standalone{{.StrictSuffix}}/"
            "{{.ResourceKind}}{{.KindSuffix}}.json"
        )

    def _load(self, path: str) -> dict[str, Any] | None:
        if path in self._fetched:
            return self._fetched[path]
        schema = None
        if path.startswith(("http://", "https://")):
            import urllib.request

            try:
                with urllib.request.urlopen(path, timeout=15) as response:
                    schema = json.loads(response.read())
            except Exception:  # any network or decoding failure means "not found here"
                schema = None
        else:
            file = Path(path)
            if file.is_file():
                try:
                    schema = json.loads(file.read_bytes())
                except json.JSONDecodeError as exc:
                    raise InputError(
                        f"schema is not valid JSON: {exc.msg}", path, exc.lineno
                    ) from None
        self._fetched[path] = schema
        return schema


def _compile_crd_schema(schema: dict[str, Any]) -> Any:
    """A validator for a CRD's schema. A `pattern` written for Go's regexp that the
    ECMA-262 engine here cannot compile (e.g. `\\0`) is left out, not the whole schema:
    the API server compiled it, so the CRD is valid, and every other keyword still
    checks."""
    try:
        return jsonschema_rs.validator_for(schema)
    except Exception:
        return jsonschema_rs.validator_for(_without_foreign_patterns(schema))


def _without_foreign_patterns(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_foreign_patterns(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "pattern" and isinstance(value, str) and not _compiles(value):
            continue  # a keyword here; a property named "pattern" maps to a schema
        out[key] = _without_foreign_patterns(value)
    return out


def _compiles(pattern: str) -> bool:
    try:
        jsonschema_rs.validator_for({"type": "string", "pattern": pattern})
    except Exception:
        return False
    return True


def render_template(template: str, api_version: str, kind: str, version: str, strict: bool) -> str:
    group, _, resource_version = api_version.rpartition("/")
    values = {
        "NormalizedKubernetesVersion": f"v{version}.0" if version != "master" else "master",
        "StrictSuffix": "-strict" if strict else "",
        "ResourceKind": kind.lower(),
        "ResourceAPIVersion": resource_version,
        "Group": group,
        "KindSuffix": "-" + (f"{group.split('.')[0]}-" if group else "") + resource_version,
    }

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise InputError(f"unknown variable .{name} in schema location '{template}'")
        return values[name].lower() if name == "KindSuffix" else values[name]

    return _TEMPLATE_VAR.sub(substitute, template)


def validations_path(schema_path: str) -> str:
    """Where the CEL rules of the CRD schema at `schema_path` are kept."""
    stem = schema_path.removesuffix(".json").removesuffix("-strict")
    return stem + ".validations.json"


def crd_location(schema_dir: Path) -> str:
    return str(schema_dir / CRD_SCHEMA_TEMPLATE)


class InputSchemas:
    """A registry that checks custom resources against the CRDs of the same input first.

    A render that carries a CRD (an operator's install, a chart's crds/) is applied with
    it, so that CRD, not a copy imported earlier, says what its objects may hold. Other
    kinds, CEL rules and core schemas come from `parent`. CRDs that cannot be read are
    left to the schema check of the CRD itself.
    """

    def __init__(self, parent: SchemaRegistry, crds: list[dict[str, Any]]):
        from trainops.schema.crd import served_schemas

        self.parent = parent
        self._local: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        for crd in crds:
            try:
                served = served_schemas(crd)
            except Exception:  # a malformed CRD: its own check reports it
                continue
            name = str((crd.get("metadata") or {}).get("name") or "")
            for group, kind, version, schema in served:
                if isinstance(schema, dict) and isinstance(kind, str):
                    self._local[(f"{group}/{version}", kind)] = (name, schema)
        self._compiled: dict[tuple[str, str], CompiledSchema | None] = {}

    def __bool__(self) -> bool:
        return bool(self._local)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parent, name)

    def lookup(self, api_version: str, kind: str) -> CompiledSchema | None:
        key = (api_version, kind)
        if key not in self._local:
            return self.parent.lookup(api_version, kind)
        if key not in self._compiled:
            from trainops.schema.crd import convert

            name, schema = self._local[key]
            try:
                converted = convert(schema, self.parent.strict)
                validator = jsonschema_rs.validator_for(converted)
            except Exception:  # a schema jsonschema cannot compile: use the imported one
                self._compiled[key] = self.parent.lookup(api_version, kind)
            else:
                # "input://": a location with no CEL sidecar to read (see rules()).
                location = f"input://{name or kind}"
                self._compiled[key] = CompiledSchema(validator, converted, None, location, False)
        return self._compiled[key]


def _serves(schema: dict[str, Any], api_version: str, kind: str) -> bool:
    """The core schema is the one Kubernetes serves for this group and kind."""
    group = api_version.rpartition("/")[0]
    gvks = schema.get("x-kubernetes-group-version-kind")
    return isinstance(gvks, list) and any(
        isinstance(g, dict) and g.get("group", "") == group and g.get("kind") == kind for g in gvks
    )
