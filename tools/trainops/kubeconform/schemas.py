"""Schema locations as kubeconform resolves them, with its on-disk cache.

A location is a template (`{{ .ResourceKind }}` and friends, see
trainops.schema.registry), a folder or URL laid out like kubernetes-json-schema, or
`default`. kubeconform's `default` is an HTTPS URL; here it is served from the core
schemas bundled with trainops, offline, and reported under that URL. Locations are
tried in order; one with no schema for a kind (missing file, HTTP failure) passes to
the next. With `-cache DIR` every schema fetched over HTTP, and every default schema
used, is stored in DIR under the SHA-256 of its URL, kubeconform's own cache layout,
and read from there first: the two tools can share a cache, and a filled cache
works without network. Schemas without `$schema` are draft 4, as in kubeconform.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs

from trainops.schema import bundle
from trainops.schema.registry import bundled_versions

DEFAULT_URL = (
    "https://raw.githubusercontent.com/yannh/kubernetes-json-schema/master/"
    "{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/"
    "{{ .ResourceKind }}{{ .KindSuffix }}.json"
)
_LAYOUT = (
    "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/"
    "{{ .ResourceKind }}{{ .KindSuffix }}.json"
)
_BUNDLED_DEFINITIONS = "https://kubernetes.io/api/_definitions.json"
_TEMPLATE_PART = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.DOTALL)
_FIELD = re.compile(r"\{\{-?\s*\.(\w+)\s*-?\}\}")
_FIELDS = (
    "NormalizedKubernetesVersion",
    "StrictSuffix",
    "ResourceKind",
    "ResourceAPIVersion",
    "Group",
    "KindSuffix",
)


class SetupError(Exception):
    """A location or cache kubeconform refuses before validating anything."""


@dataclass
class Schema:
    validator: Any
    url: str  # what kubeconform would name it in messages


class Registry:
    def __init__(self, locations: list[str], version: str, strict: bool, cache: str):
        self.version = version  # "master" or x.y.z, as given
        self.strict = strict
        self.cache = Path(cache) if cache else None
        self.locations = [_template_of(location) for location in locations or ["default"]]
        for _, template in self.locations:
            _check_template(template)
        if cache:
            _check_cache(cache)
        self._schemas: dict[tuple[str, str], Schema | None] = {}

    @property
    def bundled_version(self) -> str:
        """The bundled minor serving the requested version: itself, else the nearest."""
        versions = bundled_versions()
        if self.version == "master":
            return versions[-1]
        wanted = int(self.version.split(".")[1])
        return min(versions, key=lambda v: abs(int(v.split(".")[1]) - wanted))

    def lookup(self, api_version: str, kind: str) -> Schema | None:
        key = (api_version, kind)
        if key not in self._schemas:
            self._schemas[key] = self._find(api_version, kind)
        return self._schemas[key]

    def _find(self, api_version: str, kind: str) -> Schema | None:
        for is_default, template in self.locations:
            url = self._render(template, api_version, kind)
            found = self._bundled(api_version, kind, url) if is_default else self._load(url)
            if found is not None:
                return found
        return None

    def _render(self, template: str, api_version: str, kind: str) -> str:
        group_parts = api_version.split("/")
        suffix = "-" + group_parts[0].split(".")[0].lower()
        if len(group_parts) > 1:
            suffix += "-" + group_parts[1].lower()
        values = {
            "NormalizedKubernetesVersion": (
                self.version if self.version == "master" else "v" + self.version
            ),
            "StrictSuffix": "-strict" if self.strict else "",
            "ResourceKind": kind.lower(),
            "ResourceAPIVersion": group_parts[-1],
            "Group": group_parts[0],
            "KindSuffix": suffix,
        }
        return _FIELD.sub(lambda match: values[match.group(1)], template)

    def _bundled(self, api_version: str, kind: str, url: str) -> Schema | None:
        schemas = bundle.load(self.bundled_version, self.strict)
        schema = schemas.get(url.rsplit("/", 1)[-1])
        if schema is None:
            return None
        definitions = schemas["_definitions.json"]
        if self.cache is not None:
            self._store(url, json.dumps(_self_contained(schema, definitions)).encode())
        registry = jsonschema_rs.Registry([(_BUNDLED_DEFINITIONS, definitions)])
        validator = jsonschema_rs.Draft202012Validator(schema, registry=registry)
        return Schema(validator, url)

    def _load(self, location: str) -> Schema | None:
        remote = location.startswith(("http://", "https://"))
        text = self._fetch(location) if remote else _read_file(location)
        if text is None:
            return None
        try:
            schema = json.loads(text)
        except ValueError:
            return None  # kubeconform passes a response that is not JSON to the next location
        url = location if remote else Path(os.path.abspath(location)).as_uri()
        try:
            validator = _compiler(schema)(schema, base_uri=url, retriever=self._retrieve)
        except Exception:  # jsonschema-rs reports schemas it cannot compile with several types
            return None
        return Schema(validator, url)

    def _retrieve(self, uri: str) -> Any:
        if uri.startswith("file://"):
            text = _read_file(urllib.request.url2pathname(urllib.parse.urlparse(uri).path))
        else:
            text = self._fetch(uri)
        if text is None:
            raise ValueError(f"cannot load {uri}")
        return json.loads(text)

    def _fetch(self, url: str) -> bytes | None:
        if self.cache is not None:
            cached = self.cache / hashlib.sha256(url.encode()).hexdigest()
            if cached.is_file():
                return cached.read_bytes()
        try:
            with urllib.request.urlopen(url, timeout=15) as response:
                body = response.read()
        except Exception:  # any network failure: no schema at this location
            return None
        if self.cache is not None:
            self._store(url, body)
        return body

    def _store(self, url: str, body: bytes) -> None:
        path = self.cache / hashlib.sha256(url.encode()).hexdigest()
        if not path.exists():
            path.write_bytes(body)


def _template_of(location: str) -> tuple[bool, str]:
    if location == "default":
        return True, DEFAULT_URL
    if not location.endswith("json"):
        return False, location + _LAYOUT
    return False, location


def _check_template(template: str) -> None:
    """Refuse what Go's text/template would refuse for kubeconform's fields."""
    if template.count("{{") != template.count("}}"):
        raise SetupError(
            "failed initialising schema location registry: template: tpl:1: unclosed action"
        )
    for action in _TEMPLATE_PART.findall(template):
        if not action.startswith(".") or action[1:] not in _FIELDS:
            raise SetupError(
                "failed initialising schema location registry: template: tpl:1: executing "
                f'"tpl" at <{action}>: can\'t evaluate field {action.lstrip(".")}'
            )


def _check_cache(cache: str) -> None:
    if not os.path.exists(cache):
        raise SetupError(
            f"failed opening cache folder {cache}: stat {cache}: no such file or directory"
        )
    if not os.path.isdir(cache):
        raise SetupError(f"cache folder {cache} is not a directory")


def _read_file(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _compiler(schema: Any) -> Any:
    declared = schema.get("$schema", "") if isinstance(schema, dict) else ""
    return jsonschema_rs.validator_for if declared else jsonschema_rs.Draft4Validator


def _self_contained(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """The schema with every definition it reaches inside it, as a standalone schema is.

    Bundled schemas point into _definitions.json (`/api/_definitions.json#/$defs/X`),
    whose own entries point at each other (`#/$defs/X`); both become `#/definitions/X`.
    """
    prefixes = ("/api/_definitions.json#/$defs/", "#/$defs/")
    pool = definitions.get("$defs", {})
    needed: dict[str, Any] = {}
    pending: list[Any] = [schema]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith(prefixes):
                name = ref.split("/$defs/", 1)[1]
                if name not in needed and name in pool:
                    needed[name] = pool[name]
                    pending.append(pool[name])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    text = json.dumps({**schema, "definitions": needed})
    for prefix in prefixes:
        text = text.replace(f'"{prefix}', '"#/definitions/')
    return json.loads(text)
