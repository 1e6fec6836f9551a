"""Project defaults from `[tool.trainops]` in the nearest pyproject.toml.

Precedence for every setting: command-line flag, then environment variable,
then the project table, then the built-in default.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from trainops.errors import InputError
from trainops.schema.registry import DEFAULT_KUBERNETES_VERSION

DEFAULT_REPO_URL = "https://github.com/example-org/trainops.git"
# Outside a project with [tool.trainops], the imported CRD schemas and the policy
# pack come from the source checkout next to the package (an editable install),
# else from the copies an installed wheel carries (see setup.py).
_CHECKOUT = Path(__file__).resolve().parents[2]
_BUNDLED = Path(__file__).resolve().parent / "bundled"


@dataclass(frozen=True)
class ProjectConfig:
    root: Path | None
    remote_mirror: Path | None
    schema_dir: Path | None
    kubernetes_version: str
    repo_url: str
    policy_pack: Path | None
    paths: tuple[str, ...] = ("overlays",)  # what validate and render check by default
    strict_schemas: bool = False  # a custom resource kind without a schema is an error


def find_project_root(start: Path | None = None) -> Path | None:
    """The nearest directory upwards holding a pyproject.toml with [tool.trainops]."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and "[tool.trainops]" in candidate.read_text(errors="replace"):
            return directory
    return None


def load_project_config(start: Path | None = None) -> ProjectConfig:
    root = find_project_root(start)
    table: dict[str, object] = {}
    path = None
    if root is not None:
        path = root / "pyproject.toml"
        try:
            table = tomllib.loads(path.read_text()).get("tool", {}).get("trainops", {})
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"invalid TOML: {exc}", str(path)) from None

    def path_setting(key: str, env: str) -> Path | None:
        if value := os.environ.get(env):
            return Path(value)
        value = table.get(key)
        return (root / str(value)) if (value and root is not None) else None

    schema_dir = path_setting("schema-dir", "TRAINOPS_SCHEMA_DIR")
    if schema_dir is None:
        schema_dir = _shipped("schemas", "")
    policy_pack = path_setting("policies", "TRAINOPS_POLICIES")
    if policy_pack is None:
        policy_pack = _shipped("policies", "__init__.py")
    version = os.environ.get("TRAINOPS_KUBERNETES_VERSION") or str(
        table.get("kubernetes-version") or DEFAULT_KUBERNETES_VERSION
    )
    return ProjectConfig(
        root=root,
        remote_mirror=path_setting("remote-mirror", "TRAINOPS_REMOTE_MIRROR"),
        schema_dir=schema_dir,
        kubernetes_version=version,
        repo_url=str(table.get("repo-url") or DEFAULT_REPO_URL),
        policy_pack=policy_pack,
        paths=_paths(table.get("paths"), path),
        strict_schemas=table.get("strict-schemas") is True,
    )


def _shipped(name: str, marker: str) -> Path | None:
    """The checkout's `name` directory, else the installed package's copy."""
    for root in (_CHECKOUT, _BUNDLED):
        if (root / name / marker).exists():
            return root / name
    return None


def _paths(value: object, where: Path | None) -> tuple[str, ...]:
    if value is None:
        return ("overlays",)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError("[tool.trainops] paths must be a list of directories", str(where))
    return tuple(value)
