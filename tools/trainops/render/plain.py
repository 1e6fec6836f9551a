"""Reads a plain manifest (a file, stdin, helm's output) into documents, as kubectl would.

Two things set a plain file apart from the objects it describes:
- a template (envsubst references, Helm/Go actions; `templates`) is reported once, as
  `template-placeholders`, and its documents are not passed on to the checks: checked
  as written they would only give false findings, and the rendered objects are unknown;
- a key written twice in one mapping is read as kubectl reads it, the last value
  winning, and reported as `yaml-duplicate-key` at its second writing; the rest of the
  file is checked with the last value.

What each tool does with a repeated key (sources in the rule):
- kubectl decodes manifests with k8s.io/apimachinery's YAMLOrJSONDecoder, which calls
  sigs.k8s.io/yaml's non-strict Unmarshal: go-yaml v2 sets the key again, so the last
  value is applied and the first silently lost; kubectl's client-side checks then see
  only the JSON that conversion produced;
- Argo CD reads a plain directory the same way (`splitYAMLOrJSON`, the same decoder),
  and renders a kustomize application by running `kustomize build`;
- kustomize refuses a resource with a repeated key: writing its output, kyaml decodes
  each resource with go-yaml v3, whose decoder reports `mapping key "k" already defined
  at line N`. A strategic-merge patch with a repeated key is not refused (kustomize
  5.5.0, as kubectl 1.32 embeds it, applied the patch's first value).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.kubeyaml.load import load_document
from trainops.model import ERROR, WARNING, Document, Finding, json_path
from trainops.render import templates
from trainops.render.discover import display_path, kustomization_file, repository_root
from trainops.rules import RuleInfo, register
from trainops.yamlio import RepeatedKeyAt, load_documents, load_yaml_mapping

DUPLICATE_KEY = "yaml-duplicate-key"
JSON_PATCH_FILE = "json-patch-file"

_KUBECTL = (
    "https://github.com/kubernetes/apimachinery/blob/v0.35.0/pkg/util/yaml/decoder.go#L125-L132",
    "https://github.com/kubernetes-sigs/yaml/blob/v1.4.0/yaml.go#L142-L147",
    "https://github.com/kubernetes-sigs/yaml/blob/v1.4.0/goyaml.v2/decode.go#L685-L691",
    "https://github.com/kubernetes/cli-runtime/blob/v0.35.0/pkg/resource/visitor.go#L590-L606",
)
_ARGOCD = (
    "https://github.com/argoproj/argo-cd/blob/v3.5.1/reposerver/repository/repository.go#L2083-L2084",
    "https://github.com/argoproj/argo-cd/blob/v3.5.1/util/kustomize/kustomize.go#L388",
)
_KUSTOMIZE = (
    "https://github.com/kubernetes-sigs/kustomize/blob/kustomize/v5.8.1/api/krusty/duplicatekeys_test.go",
    "https://github.com/kubernetes-sigs/kustomize/blob/kustomize/v5.8.1/api/resmap/reswrangler.go#L285-L293",
    "https://github.com/kubernetes-sigs/kustomize/blob/kyaml/v0.21.1/kyaml/yaml/rnode.go#L974-L999",
    "https://github.com/go-yaml/yaml/blob/v3.0.1/decode.go#L766-L777",
)

register(
    RuleInfo(
        id=DUPLICATE_KEY,
        severity=WARNING,
        title="No key is written twice in one mapping",
        why="YAML forbids a repeated key, and the tools disagree on it: kubectl and Argo CD "
        "(plain directories) keep the last value and silently drop the first, so a change "
        "made to the first one does nothing; kustomize refuses to build a kustomization "
        "whose resource repeats a key ('mapping key ... already defined').",
        fix="Remove one of the two entries, keeping the value you mean.",
        when=(
            (WARNING, "in a plain file: kubectl and Argo CD apply the last value"),
            (ERROR, "in a file a kustomization lists in `resources`: kustomize build fails"),
        ),
        sources=_KUBECTL + _ARGOCD + _KUSTOMIZE,
    )
)

register(
    RuleInfo(
        id=JSON_PATCH_FILE,
        severity=WARNING,
        title="A directory checked as plain manifests holds Kubernetes objects",
        why="A JSON 6902 patch (a list of op/path operations) is what a kustomization's "
        "`patches` entry reads; it is not an object. Outside a kustomization nothing in it "
        "can be checked, and kubectl apply -f and an Argo CD directory source, which "
        "decode every YAML file of the directory as objects, refuse it.",
        fix="Validate the directory of the kustomization that lists the patch, or keep "
        "patches out of directories that are applied as they are.",
        sources=_KUBECTL + _ARGOCD,
    )
)


@dataclass
class PlainRead:
    """The documents to check of one plain text, and the findings reading it gave."""

    documents: list[Document]
    findings: list[Finding] = field(default_factory=list)


def read_plain(
    text: str, where: str, file: str | None, kustomize_use: tuple[str, str] | None = None
) -> PlainRead:
    """Documents and findings of a plain YAML stream (`file` None: helm's output).

    `kustomize_use` is (kustomization, field) when a kustomization reads the file.
    """
    repeated: list[RepeatedKeyAt] = []
    try:
        documents = load_documents(text, source=where, file=file, keep_text=True, repeated=repeated)
    except InputError as error:
        if file is not None and _is_json_patch(text):
            return PlainRead([], [_json_patch_finding(where, file)])
        found = templates.in_unreadable(text, error.line) if file is not None else None
        if found is None:
            raise
        return PlainRead([], [_template_finding(found, where, file, 0)])
    if file is not None:
        found = templates.in_documents(
            [d.obj for d in documents], text, [d.line or 1 for d in documents]
        )
        if found is not None:
            return PlainRead([], [_template_finding(found, where, file, len(documents))])
    findings = [_duplicate_finding(r, where, file, kustomize_use) for r in repeated]
    return PlainRead(documents, findings)


_PATCH_OPS = frozenset(("add", "remove", "replace", "move", "copy", "test"))


def _is_json_patch(text: str) -> bool:
    """A file that is one JSON 6902 patch: a list of operations, each with an op and a path
    (what a kustomization's `patches` entry names with `path:`)."""
    try:
        obj = load_document(text)
    except (InputError, ValueError, TypeError):
        return False
    return (
        isinstance(obj, list)
        and bool(obj)
        and all(
            isinstance(item, dict) and item.get("op") in _PATCH_OPS and "path" in item
            for item in obj
        )
    )


def _json_patch_finding(where: str, file: str) -> Finding:
    return Finding(
        rule=JSON_PATCH_FILE,
        severity=WARNING,
        source=where,
        resource="",
        path="",
        message="a JSON 6902 patch, not a Kubernetes object: it was not checked; kubectl "
        "apply -f and an Argo CD directory source refuse it, and kustomize reads it only "
        "through a kustomization's `patches`",
        fix="Keep patch files beside the kustomization that lists them and validate that "
        "directory (or the kustomization), or move the patch out of directories applied "
        "as they are.",
    )


def _template_finding(found: templates.Placeholders, where: str, file: str, count: int) -> Finding:
    if count:
        checked = f"its {count} document{' was' if count == 1 else 's were'} not checked"
    else:
        checked = "nothing in it was checked"
    if found.unparsed:
        state = "a Helm/Go template, not YAML until rendered"
    else:
        state = "an unrendered template"
    return Finding(
        rule=templates.RULE,
        severity=WARNING,
        source=where,
        resource="",
        path="",
        message=f"{state}: {len(found.found)} placeholder{'s' if len(found.found) != 1 else ''} "
        f"({found.describe()}); {checked} (schema, API and policy checks): the objects "
        "the cluster receives are only known once the file is rendered",
        fix="Validate the rendered output (`envsubst < FILE | trainops validate -`, "
        "`helm template CHART | trainops validate -`), or pass --env to render the "
        "envsubst references from the environment first.",
        file=file,
        line=found.line,
    )


def _duplicate_finding(
    repeated: RepeatedKeyAt, where: str, file: str | None, use: tuple[str, str] | None
) -> Finding:
    first = f" (first on line {repeated.first_line})" if repeated.first_line else ""
    message = (
        f"key '{repeated.key}' is written again{first}: kubectl apply and Argo CD (a plain "
        "directory) keep this last value and silently drop the first"
    )
    severity = WARNING
    if use is not None and use[1] == "resources":
        severity = ERROR
        message += (
            f"; {use[0]} lists this file in resources, and kustomize refuses to build it "
            f'(mapping key "{repeated.key}" already defined), so Argo CD cannot render '
            "that application"
        )
    elif use is not None:
        message += (
            f"; {use[0]} uses it as a patch ({use[1]}), which kustomize builds without "
            "complaint, applying one of the two values"
        )
    else:
        message += "; kustomize would refuse to build it as a resource of a kustomization"
    return Finding(
        rule=DUPLICATE_KEY,
        severity=severity,
        source=where,
        resource=repeated.resource,
        path=json_path(repeated.path),
        message=message,
        fix="Remove one of the two entries, keeping the value you mean.",
        file=file,
        line=repeated.line if file else None,
    )


_RESOURCE_FIELDS = ("resources",)
_PATCH_LISTS = ("patchesStrategicMerge",)
_PATCH_ENTRIES = ("patches", "patchesJson6902")


class KustomizeUses:
    """Which kustomization, at or above a file's directory, reads the file, and how.

    kustomize's load restrictor keeps a kustomization to files below its directory, so
    the kustomizations that can read a file are those of its directory and the ones
    above it, up to the repository's root. Each directory's answer is kept.
    """

    def __init__(self) -> None:
        self._named: dict[Path, dict[Path, tuple[str, str]]] = {}
        self._roots: dict[Path, Path] = {}

    def of(self, path: str | os.PathLike[str]) -> tuple[str, str] | None:
        try:
            target = Path(path).resolve()
        except (OSError, RuntimeError):
            return None
        if target.parent not in self._roots:
            self._roots[target.parent] = repository_root(target.parent)
        root = self._roots[target.parent]
        for directory in target.parents:
            use = self._files_named(directory).get(target)
            if use is not None:
                return use
            if directory == root or not directory.is_relative_to(root):
                return None
        return None

    def _files_named(self, directory: Path) -> dict[Path, tuple[str, str]]:
        if directory not in self._named:
            self._named[directory] = _files_named(directory)
        return self._named[directory]


def _files_named(directory: Path) -> dict[Path, tuple[str, str]]:
    kfile = kustomization_file(directory)
    if kfile is None:
        return {}
    try:
        spec = load_yaml_mapping(kfile.read_text(errors="replace"), str(kfile))
    except (InputError, OSError):
        return {}
    shown = display_path(kfile)
    named: dict[Path, tuple[str, str]] = {}

    def add(entry: Any, field_name: str) -> None:
        if isinstance(entry, str) and "\n" not in entry and "://" not in entry:
            with contextlib.suppress(OSError, RuntimeError):  # a link loop: never read
                named.setdefault((directory / entry).resolve(), (shown, field_name))

    for field_name in (*_RESOURCE_FIELDS, *_PATCH_LISTS):
        entries = spec.get(field_name)
        for entry in entries if isinstance(entries, list) else []:
            add(entry, field_name)
    for field_name in _PATCH_ENTRIES:
        entries = spec.get(field_name)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict):
                add(entry.get("path"), field_name)
    return named
