"""Names, label keys and values, annotations: apimachinery's validation functions.

Facts from k8s.io/apimachinery `pkg/util/validation/validation.go` (IsDNS1123Label,
IsDNS1123Subdomain, IsDNS1035Label, IsQualifiedName, IsValidLabelValue) and
`pkg/api/validation/objectmeta.go` (ValidateObjectMeta, ValidateAnnotations);
each function returns the API server's messages, empty when the value is valid.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

from trainops.admission.field import API, Path, Problem, invalid, too_long

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
QUALIFIED_NAME_MAX = 63
ANNOTATIONS_MAX_BYTES = 256 * 1024

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
)
DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name', or "
    "'abc-123')"
)
QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', or "
    "'my_value', or '12345')"
)


def max_length(limit: int) -> str:
    return f"must be no more than {limit} characters"


# What the API server appends to metadata.generateName (5 random characters), and how much
# of the prefix it keeps: apiserver v0.35.0 pkg/storage/names/generate.go
# (SimpleNameGenerator: maxNameLength 63, randomLength 5, the base cut to 58).
GENERATED_SUFFIX = "xxxxx"
GENERATED_PREFIX_MAX = 63 - len(GENERATED_SUFFIX)


def generated_name(prefix: str) -> str:
    """The name the API server gives an object with only `generateName: prefix`."""
    return prefix[:GENERATED_PREFIX_MAX] + GENERATED_SUFFIX


def object_name(metadata: dict[str, Any]) -> str:
    """The name the object will have: metadata.name, or the one the API server generates
    from generateName before it validates and admits the object (Store.create sets it
    ahead of BeforeCreate, the CRD's CEL rules and the validating webhooks)."""
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    prefix = metadata.get("generateName")
    return generated_name(prefix) if isinstance(prefix, str) and prefix else ""


def _mask_trailing_dash(name: str) -> str:
    """apimachinery's maskTrailingDash (pkg/api/validation/generic.go), as the prefix check
    of a generateName applies it."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


@lru_cache(maxsize=8192)  # names and labels repeat across a render
def dns1123_label(value: str) -> tuple[str, ...]:
    errors = [max_length(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _DNS1123_LABEL.fullmatch(value):
        errors.append(DNS1123_LABEL_MSG)
    return tuple(errors)


@lru_cache(maxsize=8192)  # names and labels repeat across a render
def dns1123_subdomain(value: str) -> tuple[str, ...]:
    errors = [max_length(DNS1123_SUBDOMAIN_MAX)] if len(value) > DNS1123_SUBDOMAIN_MAX else []
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(DNS1123_SUBDOMAIN_MSG)
    return tuple(errors)


@lru_cache(maxsize=8192)  # names and labels repeat across a render
def dns1035_label(value: str) -> tuple[str, ...]:
    errors = [max_length(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _DNS1035_LABEL.fullmatch(value):
        errors.append(DNS1035_LABEL_MSG)
    return tuple(errors)


@lru_cache(maxsize=8192)  # names and labels repeat across a render
def qualified_name(value: str) -> tuple[str, ...]:
    """`[prefix/]name`: the prefix a DNS subdomain, the name at most 63 characters."""
    parts = value.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ("prefix part must be non-empty",)
    else:
        return (
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character, with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    errors = [f"prefix part {e}" for e in dns1123_subdomain(prefix)] if prefix else []
    if not name:
        errors.append("name part must be non-empty")
    else:
        if len(name) > QUALIFIED_NAME_MAX:
            errors.append("name part " + max_length(QUALIFIED_NAME_MAX))
        if not _QUALIFIED_NAME.fullmatch(name):
            errors.append("name part " + QUALIFIED_NAME_MSG)
    return tuple(errors)


@lru_cache(maxsize=8192)  # names and labels repeat across a render
def label_value(value: str) -> tuple[str, ...]:
    errors = [max_length(LABEL_VALUE_MAX)] if len(value) > LABEL_VALUE_MAX else []
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(LABEL_VALUE_MSG)
    return tuple(errors)


NameCheck = Callable[[str], tuple[str, ...]]


def object_meta(
    meta: Any, name_check: NameCheck, at: Path = ("metadata",), rule: str = API
) -> Iterator[Problem]:
    """ValidateObjectMeta: name (or generateName) by the kind's rule, labels, annotations."""
    if not isinstance(meta, dict):
        return
    name = meta.get("name")
    if isinstance(name, str) and name:
        for error in name_check(name):
            yield Problem(rule, (*at, "name"), invalid(name, error))
    elif isinstance(meta.get("generateName"), str) and meta["generateName"]:
        # ValidateObjectMetaAccessor (apimachinery v0.35.0 objectmeta.go): generateName is
        # checked as a prefix (trailing '-' masked), and the name the API server generated
        # from it first (at most 58 characters of it plus 5) as a name. So a long prefix is
        # no error as long as the prefix itself fits the kind's rule.
        prefix = meta["generateName"]
        errors = name_check(_mask_trailing_dash(prefix))
        for error in errors:
            yield Problem(rule, (*at, "generateName"), invalid(prefix, error))
        if not errors:
            generated = generated_name(prefix)
            for error in name_check(generated):
                yield Problem(rule, (*at, "generateName"), invalid(generated, error))
    yield from labels(meta.get("labels"), (*at, "labels"), rule)
    yield from annotations(meta.get("annotations"), (*at, "annotations"), rule)


def labels(value: Any, at: Path, rule: str = API) -> Iterator[Problem]:
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        key = str(key)
        for error in qualified_name(key):
            yield Problem(rule, (*at, key), invalid(key, error))
        if isinstance(item, str):
            for error in label_value(item):
                yield Problem(rule, (*at, key), invalid(item, error))


def annotations(value: Any, at: Path, rule: str = API) -> Iterator[Problem]:
    if not isinstance(value, dict):
        return
    total = 0
    for key, item in value.items():
        key = str(key)
        for error in qualified_name(key.lower()):
            yield Problem(rule, (*at, key), invalid(key, error))
        total += len(key.encode()) + (len(item.encode()) if isinstance(item, str) else 0)
    if total > ANNOTATIONS_MAX_BYTES:
        yield Problem(rule, at, too_long(ANNOTATIONS_MAX_BYTES))
