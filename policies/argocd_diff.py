"""Argo CD Applications' ignoreDifferences and source paths as Argo CD v3.5.1 reads them.

From the code: each jqPathExpressions entry is parsed as `del(<expression>)` when the diff
normaliser is built, and one that does not parse fails the whole comparison of the
Application (`NewIgnoreNormalizer`, `StateDiffs`: ComparisonError, sync status Unknown); each
jsonPointers entry becomes a JSON-patch remove whose failure to apply is skipped without a
word, and an entry matches an object only on its exact API group (a glob, no version), kind
(a glob, case-sensitive), name and namespace (compared verbatim). The repo-server refuses a
source path that is absolute or leaves the repository (`path.Path`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, resource_rule
from trainops.policy.pods import dicts

from .argocd_apps import APP_KINDS, _app_spec

ARGO = "https://github.com/argoproj/argo-cd/blob/v3.5.1"
NORMALIZER = ARGO + "/util/argo/normalizers/diff_normalizer.go"
JSON_PATCH = "https://github.com/evanphx/json-patch/blob/v5.9.11/patch.go#L342-L349"
_TEMPLATED = re.compile(r"\{\{|\$\{|\$\(")
_GLOB = re.compile(r"[*?\[\]{}]")

# Built-in kinds outside the core group: an entry naming one without its group (group ""
# is the core group, which has no such kind) matches nothing.
_GROUPS = {
    "Deployment": "apps",
    "StatefulSet": "apps",
    "DaemonSet": "apps",
    "ReplicaSet": "apps",
    "Job": "batch",
    "CronJob": "batch",
    "HorizontalPodAutoscaler": "autoscaling",
    "Ingress": "networking.k8s.io",
    "NetworkPolicy": "networking.k8s.io",
    "Role": "rbac.authorization.k8s.io",
    "RoleBinding": "rbac.authorization.k8s.io",
    "ClusterRole": "rbac.authorization.k8s.io",
    "ClusterRoleBinding": "rbac.authorization.k8s.io",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io",
    "ValidatingWebhookConfiguration": "admissionregistration.k8s.io",
    "CustomResourceDefinition": "apiextensions.k8s.io",
    "APIService": "apiregistration.k8s.io",
    "PriorityClass": "scheduling.k8s.io",
    "StorageClass": "storage.k8s.io",
    "PodDisruptionBudget": "policy",
}
_CORE = (
    "Pod",
    "Service",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "Namespace",
    "Endpoints",
)
_KNOWN = {kind.lower(): kind for kind in (*_GROUPS, *_CORE)}


def _templated(value: Any) -> bool:
    return isinstance(value, str) and bool(_TEMPLATED.search(value))


def _ignores(doc: Document) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    spec, base = _app_spec(doc)
    items = spec.get("ignoreDifferences")
    if not isinstance(items, list):
        return
    for index, item in enumerate(items):
        if isinstance(item, dict):
            yield (*base, "ignoreDifferences", index), item


def _strings(item: dict[str, Any], key: str) -> Iterator[tuple[int, str]]:
    values = item.get(key)
    if not isinstance(values, list):
        return
    for index, value in enumerate(values):
        if isinstance(value, str) and not _templated(value):
            yield index, value


def _jq_problem(expression: str) -> str | None:
    """Why gojq cannot parse `del(<expression>)`, for the cases that are certain."""
    text = expression.strip()
    if not text:
        return "is empty: del() does not parse"
    if text.startswith("/"):
        return "is a JSON pointer, not a jq path (.spec.replicas): it does not parse"
    if "\\(" in text:
        return None  # string interpolation nests code in strings: leave it to jq
    closing = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    quoted = escaped = False
    for char in text:
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == "#":
            return None  # a comment: leave it to jq
        elif char in "([{":
            stack.append(char)
        elif char in closing and (not stack or stack.pop() != closing[char]):
            return f"has an unmatched {char!r}: it does not parse"
    if quoted:
        return "has an unterminated string: it does not parse"
    if stack:
        return f"has an unclosed {stack[-1]!r}: it does not parse"
    return None


@resource_rule(
    id="argocd-ignore-differences-jq",
    severity=ERROR,
    title="ignoreDifferences' jqPathExpressions are jq paths that parse",
    why="Argo CD parses each jqPathExpressions entry as del(<expression>) when it builds the "
    "diff normaliser; one that does not parse (a JSON pointer such as /spec/replicas, an "
    "unclosed bracket) fails the normaliser, and with it the comparison of the whole "
    "Application: a ComparisonError, sync status Unknown, no resource of it diffed.",
    fix="Write jq paths (.spec.replicas, .spec.template.spec.containers[] | "
    'select(.name == "x") | .image), or move JSON pointers to jsonPointers.',
    kinds=APP_KINDS,
    source=(
        NORMALIZER + "#L161-L165",
        ARGO + "/util/argo/diff/diff.go#L306-L309",
        ARGO + "/controller/state.go#L918-L924",
    ),
)
def ignore_differences_jq(doc: Document, ctx: Context) -> Iterator[Violation]:
    for at, item in _ignores(doc):
        for index, expression in _strings(item, "jqPathExpressions"):
            problem = _jq_problem(expression)
            if problem:
                yield Violation(
                    f"jqPathExpressions {expression!r} {problem}; Argo CD cannot compare "
                    "the Application at all",
                    (*at, "jqPathExpressions", index),
                )


_INDEX = re.compile(r"\[\s*(\d*|\*)\s*\]")


def _pointer_problem(pointer: str) -> str | None:
    if not pointer.startswith("/"):
        hint = (
            " (it looks like a jq path: put it in jqPathExpressions)"
            if pointer.startswith(".")
            else ""
        )
        return f"does not start with '/'{hint}"
    segments = pointer.split("/")[1:]
    if _INDEX.search(pointer):
        return "indexes a list with [..]; a JSON pointer writes /containers/0"
    if "*" in segments:
        return "has a '*' segment; JSON pointers have no wildcards (use jqPathExpressions)"
    for index, segment in enumerate(segments[:-2]):
        if segment in ("annotations", "labels") and index > 0 and segments[index - 1] == "metadata":
            what = "an annotation" if segment == "annotations" else "a label"
            return f"goes below {what} key; a '/' inside the key is written ~1 (example.com~1key)"
    return None


@resource_rule(
    id="argocd-ignore-differences-pointer",
    severity=WARNING,
    title="ignoreDifferences' jsonPointers are RFC 6901 pointers to the field",
    why="Argo CD turns each jsonPointers entry into a JSON-patch remove and skips, without a "
    "word, a remove that does not apply. A pointer that does not start with '/', uses jq "
    "syntax ([0], *), or writes an annotation key's '/' unescaped never removes the field: "
    "the difference it was meant to hide still shows and self-heal keeps reverting it.",
    fix="Write RFC 6901 pointers (/spec/replicas, /spec/template/spec/containers/0/image, "
    "/metadata/annotations/example.com~1key), or use jqPathExpressions for lists.",
    kinds=APP_KINDS,
    source=(NORMALIZER + "#L143-L159", NORMALIZER + "#L209-L221", JSON_PATCH),
)
def ignore_differences_pointer(doc: Document, ctx: Context) -> Iterator[Violation]:
    for at, item in _ignores(doc):
        for index, pointer in _strings(item, "jsonPointers"):
            problem = _pointer_problem(pointer)
            if problem:
                yield Violation(
                    f"jsonPointers {pointer!r} {problem}: Argo CD silently ignores it",
                    (*at, "jsonPointers", index),
                )


def _target_problem(item: dict[str, Any]) -> tuple[str, str] | None:
    group, kind = item.get("group", ""), item.get("kind", "")
    if (
        not isinstance(group, str)
        or not isinstance(kind, str)
        or _templated(group)
        or _templated(kind)
    ):
        return None
    if "/" in group:
        return "group", f"group {group!r} carries a version; API groups never contain '/'"
    if group in ("core", "v1"):
        return "group", f'group {group!r} is not a group: the core group is ""'
    if kind and not _GLOB.search(kind):
        proper = _KNOWN.get(kind.lower())
        if proper and proper != kind and group in ("", _GROUPS.get(proper, "")):
            return "kind", f"kind {kind!r} is matched case-sensitively: the kind is {proper}"
        wanted = _GROUPS.get(kind)
        if wanted and group == "":
            return "group", f"kind {kind} is in group {wanted!r}, but the entry sets no group"
    for key in ("name", "namespace"):
        value = item.get(key)
        if isinstance(value, str) and not _templated(value) and "*" in value:
            return key, f"{key} {value!r} is compared verbatim, not as a glob"
    return None


@resource_rule(
    id="argocd-ignore-differences-target",
    severity=WARNING,
    title="ignoreDifferences entries name objects that exist: group without version, exact kind",
    why="Argo CD applies an ignoreDifferences entry to an object only when its group and kind "
    "glob-match the object's API group (no version) and kind (case-sensitive), and its name "
    "and namespace equal the object's verbatim. An entry with group apps/v1, group core, a "
    "lower-case kind, no group for a Deployment or a '*' in its name matches nothing: "
    "the differences it was meant to hide still show and self-heal keeps reverting them.",
    fix='Set group to the API group alone (apps, batch, "" for core kinds), kind as the '
    "API spells it, and name to one object's name (or leave it out for all).",
    kinds=APP_KINDS,
    source=NORMALIZER + "#L189-L199",
)
def ignore_differences_target(doc: Document, ctx: Context) -> Iterator[Violation]:
    for at, item in _ignores(doc):
        found = _target_problem(item)
        if found:
            key, problem = found
            yield Violation(f"{problem}: the entry matches no object", (*at, key))


def _sources(spec: dict[str, Any], base: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], dict]]:
    if isinstance(spec.get("source"), dict):
        yield (*base, "source"), spec["source"]
    for index, source in enumerate(dicts(spec.get("sources"))):
        yield (*base, "sources", index), source


@resource_rule(
    id="argocd-source-path",
    severity=ERROR,
    title="An Application's source path is relative and inside its repository",
    why="The repo-server resolves source.path inside the checked-out repository and refuses "
    'an absolute path ("app path is absolute") or one that leaves it through .. ("app '
    'path outside root"): manifest generation fails, the Application shows a '
    "ComparisonError and never syncs.",
    fix="Write the path relative to the repository's root (overlays/prod/runs/llama), "
    "without a leading '/' or '..'.",
    kinds=APP_KINDS,
    source=(
        ARGO + "/util/app/path/path.go#L17-L24",
        ARGO + "/reposerver/repository/repository.go#L540-L543",
    ),
)
def source_path(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec, base = _app_spec(doc)
    for at, source in _sources(spec, base):
        path = source.get("path")
        if source.get("chart") or not isinstance(path, str) or not path:
            continue
        literal = path
        found = _TEMPLATED.search(path)
        if found:  # only the directories before the first placeholder are certain
            literal = path[: found.start()].rpartition("/")[0]
        if path.startswith("/"):
            problem = "is absolute"
        else:
            clean = posixpath.normpath(literal) if literal else "."
            if clean != ".." and not clean.startswith("../"):
                continue
            problem = "leaves the repository through '..'"
        yield Violation(
            f"source path {path!r} {problem}: the repo-server refuses to generate manifests",
            (*at, "path"),
        )
