"""Plain data passed between the render, check and report steps.

A `Document` is one Kubernetes object together with where it came from; a
`Finding` is one problem found in it, whether by the schema check or a policy
rule. Reporters only ever see these two types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)


class computed_once:  # lower case: a decorator, as functools.cached_property is
    """functools.cached_property without the lock Python 3.11 takes on every first read.

    The value is stored in the instance's __dict__, where later reads find it without
    calling the descriptor. Two threads reading at once may both compute it: only for
    values computed from the instance alone. The lock cost about a microsecond a read,
    paid for every Document and pod template (several reads each) of every render.
    """

    def __init__(self, compute: Callable[[Any], Any]):
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.compute(instance)
        return value


@dataclass(frozen=True)
class Target:
    """One thing to render: a kustomization directory, a plain YAML file or stdin."""

    kind: str  # "kustomization" | "helm" (a chart directory) | "file" | "stdin"
    path: str  # as shown to the user (relative to the working directory when possible)

    @property
    def is_run(self) -> bool:
        """A run: a target below a `runs/` directory (what the runs ApplicationSets sync)."""
        return "runs" in self.path.replace("\\", "/").split("/")


@dataclass(frozen=True)
class Origin:
    """Where kustomize says a rendered object came from (its build annotations).

    Paths are relative to the rendered kustomization's directory. `path` is the
    file the object was read from (None for generated objects, and for remote
    resources, which name their `repo`); `transformations` are the kustomization
    files whose transformers (patches, images...) changed it, in the order applied,
    with each transformer's kind.
    """

    path: str | None = None
    repo: str | None = None
    transformations: tuple[tuple[str, str], ...] = ()


@dataclass
class Document:
    """One object of a render, with its origin.

    `source` is the target it came from (an overlay directory or a YAML file).
    For plain YAML input `file` and `line` say where the document starts and
    `text` keeps its YAML so findings can point at the offending line.
    The identity fields are read once: a Document's object is never modified.
    """

    obj: dict[str, Any]
    source: str
    file: str | None = None
    line: int | None = None
    text: str | None = field(default=None, repr=False)
    origin: Origin | None = field(default=None, repr=False)

    @computed_once
    def api_version(self) -> str:
        value = self.obj.get("apiVersion")
        return value if isinstance(value, str) else ""

    @computed_once
    def kind(self) -> str:
        value = self.obj.get("kind")
        return value if isinstance(value, str) else ""

    @computed_once
    def metadata(self) -> dict[str, Any]:
        meta = self.obj.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @computed_once
    def name(self) -> str:
        name = self.metadata.get("name") or self.metadata.get("generateName") or ""
        return str(name)

    @computed_once
    def namespace(self) -> str:
        namespace = self.metadata.get("namespace")
        return namespace if isinstance(namespace, str) else ""

    @computed_once
    def resource_id(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def location(self) -> str:
        """`file:line` for plain YAML input, otherwise the overlay."""
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.source


@dataclass(frozen=True)
class Finding:
    """One problem, in the shape every reporter understands.

    `source` is the target (overlay or file) the problem was found in; `file` and
    `line` the place to fix it: the plain file, or for a rendered object the base,
    patch or kustomization that produced the field. When that file is generated
    from a cluster profile, `profile_key` names the cluster.yaml key to change
    instead, at `profile_file`:`profile_line`.
    """

    rule: str
    severity: str
    source: str
    resource: str
    path: str
    message: str
    fix: str = ""
    file: str | None = None
    line: int | None = None
    profile_key: str | None = None
    profile_file: str | None = None
    profile_line: int | None = None

    @property
    def location(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or self.source

    @property
    def outside_target(self) -> bool:
        """Whether the file to fix lies outside the target it was rendered for (a base
        shared by several overlays): reports then say which target it was."""
        if not self.file or self.file == self.source:
            return False
        return not PurePath(self.file).is_relative_to(self.source)

    @property
    def profile_location(self) -> str:
        """`cluster.yaml:LINE (key)` when a profile key generated the field, else ''."""
        if not self.profile_key:
            return ""
        where = f"{self.profile_file}:{self.profile_line}" if self.profile_line else "cluster.yaml"
        return f"{where} ({self.profile_key})"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "rule": self.rule,
            "severity": self.severity,
            "source": self.location,
            "target": self.source,
            "file": self.file,
            "line": self.line,
            "resource": self.resource,
            "path": self.path,
            "message": self.message,
            "fix": self.fix,
        }
        if self.profile_key:
            data["profile"] = {
                "key": self.profile_key,
                "file": self.profile_file,
                "line": self.profile_line,
            }
        return data

    def to_cache(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_cache(cls, data: dict[str, Any]) -> Finding:
        """A finding read back from the cache; TypeError when the entry is not one."""
        finding = cls(**data)
        texts = (finding.rule, finding.source, finding.resource, finding.path, finding.message)
        if (
            not all(isinstance(t, str) for t in (*texts, finding.fix))
            or finding.severity not in SEVERITIES
            or not isinstance(finding.file, str | None)
            or not (finding.line is None or type(finding.line) is int)
        ):
            raise TypeError("not a cached finding")
        return finding


def json_path(parts: list[str | int] | tuple[str | int, ...]) -> str:
    """Render a path as `spec.containers[0].env` (empty string for the root)."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
