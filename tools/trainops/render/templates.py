"""Unrendered templates among plain manifests: envsubst references and Helm/Go actions.

A plain file meant for `envsubst < FILE | kubectl apply -f -` or for Helm is not the
object the cluster will see: checked as written, every placeholder is a false finding
(replicas "expected integer, got string $NODES") or the file is not even YAML.

What counts as a placeholder, in the documents as read (keys and string values):
- `{{ ... }}`, a Helm/Go template action, anywhere, except where a controller reads Go
  templates at run time: an Argo CD ApplicationSet, an Argo Workflows kind, a
  Prometheus Operator PrometheusRule (alert labels and annotations), the data of a
  ConfigMap or Secret;
- an envsubst reference `$NAME` or `${NAME}` (and the `${NAME:-default}`, `${NAME-x}`,
  `${NAME:=x}`, `${NAME:?x}`, `${NAME:+x}` forms of the shell, which GNU envsubst leaves
  as they are), except in what a shell or Kubernetes expands when the container runs
  (anything under `command`, `args` or `lifecycle`, so `exec.command` of probes too, and
  `env[].value`), the data of a ConfigMap or Secret (scripts, configuration files), the
  kinds above and a CRD's schemas (prose). Kubernetes' own `$(NAME)` is never one.
A file whose YAML cannot be read at or after its first `{{` is a template too.

`envsubst` renders a text as GNU envsubst does without a SHELL-FORMAT: `$NAME` and
`${NAME}` become the variable's value, or nothing when it is unset; nothing else changes
(gettext-runtime 0.21's envsubst, checked by tests/test_templates.py when installed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainops.model import WARNING
from trainops.rules import RuleInfo, register

RULE = "template-placeholders"
SHOWN = 5  # placeholders named in the finding; the rest are counted

register(
    RuleInfo(
        id=RULE,
        severity=WARNING,
        title="Plain manifests are rendered, not templates",
        why="A file with envsubst references ($NODES, ${IMAGE}) or Helm/Go actions "
        "({{ .Values.x }}) in its fields is not what the cluster receives: checked as "
        "written, every placeholder would be a false error, and what the rendered file "
        "holds is not checked at all.",
        fix="Validate the rendered output (`envsubst < FILE | trainops validate -`, "
        "`helm template CHART | trainops validate -`), or pass --env to render envsubst "
        "references from the environment first.",
    )
)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# envsubst's own forms (rendered by `envsubst`) and the shell's ${NAME<op>...} forms.
_ENVSUBST = re.compile(rf"\$(?:\{{({_NAME})\}}|({_NAME}))")
_REFERENCE = re.compile(rf"\$(?:\{{{_NAME}(?:[:]?[-=?+][^}}]*)?\}}|{_NAME})")
_ACTION = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_SHELL_KEYS = frozenset({"command", "args", "lifecycle"})
_DATA_KINDS = frozenset({"ConfigMap", "Secret"})
_DATA_KEYS = frozenset({"data", "binaryData", "stringData"})
# Kinds whose controllers expand {{ }} (and $ in their templates) themselves.
_TEMPLATING_KINDS = frozenset(
    {
        ("argoproj.io", "ApplicationSet"),
        ("argoproj.io", "Workflow"),
        ("argoproj.io", "WorkflowTemplate"),
        ("argoproj.io", "ClusterWorkflowTemplate"),
        ("argoproj.io", "CronWorkflow"),
        ("monitoring.coreos.com", "PrometheusRule"),
    }
)


@dataclass(frozen=True)
class Placeholders:
    """The placeholders of one file: their texts (sorted, unique) and where the first is."""

    found: tuple[str, ...]
    line: int | None  # 1-based, in the file
    unparsed: bool = False  # the YAML could not be read (a Helm template)

    def describe(self) -> str:
        shown = ", ".join(self.found[:SHOWN])
        more = len(self.found) - SHOWN
        return f"{shown} and {more} more" if more > 0 else shown


def envsubst(text: str, environ: Mapping[str, str]) -> str:
    """`text` as GNU envsubst writes it: `$NAME`, `${NAME}` replaced, unset ones emptied."""
    if "$" not in text:
        return text
    return _ENVSUBST.sub(lambda m: environ.get(m.group(1) or m.group(2), ""), text)


def in_documents(objects: list[Any], text: str, first_lines: list[int]) -> Placeholders | None:
    """The placeholders in the fields of `objects` (None when there are none).

    `text` is the whole file and `first_lines` the 1-based line each object starts on,
    used to name the line of the first placeholder.
    """
    if "$" not in text and "{{" not in text:
        return None
    found: set[str] = set()
    for obj in objects:
        found.update(_in_object(obj))
    if not found:
        return None
    return Placeholders(tuple(sorted(found)), _first_line(text, found, min(first_lines or [1])))


def in_unreadable(text: str, error_line: int | None) -> Placeholders | None:
    """The Helm/Go actions of a file whose YAML failed at `error_line` (1-based), when
    that failure is at or after the first `{{`: the template, not YAML, is at fault."""
    start = text.find("{{")
    if start < 0:
        return None
    first = text.count("\n", 0, start) + 1
    if error_line is not None and error_line < first:
        return None
    found = {" ".join(m.group().split()) for m in _ACTION.finditer(text)}
    return Placeholders(tuple(sorted(found or {"{{"})), first, unparsed=True)


def _in_object(obj: Any) -> Iterator[str]:
    if not isinstance(obj, dict):
        return
    kind = obj.get("kind")
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    if (group, kind) in _TEMPLATING_KINDS:
        return
    data_kind = kind in _DATA_KINDS and group == ""
    crd = kind == "CustomResourceDefinition"
    pending: list[tuple[Any, tuple[Any, ...]]] = [(obj, ())]
    while pending:
        value, path = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                child = (*path, key)
                if not _exempt(child, data_kind, crd):
                    yield from _in_string(str(key), dollars=not _shell_expanded(child))
                    pending.append((item, child))
        elif isinstance(value, list):
            pending.extend((item, (*path, index)) for index, item in enumerate(value))
        elif isinstance(value, str):
            yield from _in_string(value, dollars=not _shell_expanded(path))


def _exempt(path: tuple[Any, ...], data_kind: bool, crd: bool) -> bool:
    """Subtrees read by something else than the API server's decoding: payloads."""
    if data_kind and len(path) == 1 and path[0] in _DATA_KEYS:
        return True
    return crd and len(path) >= 4 and path[:2] == ("spec", "versions") and path[3] == "schema"


def _shell_expanded(path: tuple[Any, ...]) -> bool:
    """Whether a shell or Kubernetes expands `$` in the value at `path` at run time."""
    if _SHELL_KEYS.intersection(p for p in path if isinstance(p, str)):
        return True
    return len(path) >= 3 and path[-1] == "value" and path[-3] == "env"


def _in_string(text: str, dollars: bool) -> Iterator[str]:
    if "{{" in text:
        for match in _ACTION.finditer(text):
            yield " ".join(match.group().split())
    if dollars and "$" in text:
        yield from (match.group() for match in _REFERENCE.finditer(text))


def _first_line(text: str, found: set[str], fallback: int) -> int:
    positions = [text.find(item) for item in found]
    known = [p for p in positions if p >= 0]
    return text.count("\n", 0, min(known)) + 1 if known else fallback
