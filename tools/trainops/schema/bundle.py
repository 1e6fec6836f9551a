"""The core Kubernetes schemas trainops ships: one compressed file per minor and strictness.

They are the JSON schemas of the `kubernetes-validate` package (its
kubernetes-json-schema `vX.Y.0-local[-strict]` directories, minors 1.25 to 1.37),
with the `description` keywords dropped (no check reads them) and each directory
packed into one gzip'd JSON object {file name: schema}: 1.6 MB for every minor
instead of a 108 MB dependency. `python -m trainops.schema.bundle` rebuilds them from
an installed kubernetes-validate (a development dependency); `--check` reports
drift, and a test runs it.
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from pathlib import Path
from typing import Any

BUNDLE_DIR = Path(__file__).parent / "core"
SOURCE = "kubernetes-validate"


def versions() -> list[str]:
    names = {p.name.split("-")[0].removesuffix(".json.gz") for p in BUNDLE_DIR.glob("v*.json.gz")}
    found = [name.removeprefix("v") for name in names]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def bundle_path(version: str, strict: bool) -> Path:
    return BUNDLE_DIR / f"v{version}{'-strict' if strict else ''}.json.gz"


@functools.cache
def load(version: str, strict: bool) -> dict[str, Any]:
    """{file name: schema} for one minor, as kubernetes-validate lays its files out."""
    return json.loads(gzip.decompress(bundle_path(version, strict).read_bytes()))


# -- building from kubernetes-validate --------------------------------------------------------


def _without_descriptions(node: Any, in_properties: bool = False) -> Any:
    """Drop the `description` keyword, never a property that happens to be called so."""
    if isinstance(node, dict):
        return {
            key: _without_descriptions(
                value, in_properties=key == "properties" and not in_properties
            )
            for key, value in node.items()
            if in_properties or key != "description"
        }
    if isinstance(node, list):
        return [_without_descriptions(item) for item in node]
    return node


def build(source: Path) -> dict[Path, bytes]:
    """Bundle file -> content, from kubernetes-validate's kubernetes-json-schema dir."""
    out: dict[Path, bytes] = {}
    for directory in sorted(source.glob("v*.0-local*")):
        version = directory.name.removeprefix("v").split(".0-local")[0]
        strict = directory.name.endswith("-strict")
        schemas = {
            path.name: _without_descriptions(json.loads(path.read_bytes()))
            for path in sorted(directory.glob("*.json"))
        }
        text = json.dumps(schemas, sort_keys=True, separators=(",", ":")).encode()
        out[bundle_path(version, strict)] = gzip.compress(text, compresslevel=9, mtime=0)
    return out


def _source_dir() -> Path:
    import kubernetes_validate

    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def main(argv: list[str]) -> int:
    try:
        wanted = build(_source_dir())
    except ImportError:
        print(f"{SOURCE} is not installed (pip install '.[dev]')", file=sys.stderr)
        return 2
    current = {p: p.read_bytes() for p in BUNDLE_DIR.glob("*.json.gz")}
    stale = sorted({p for p in wanted if current.get(p) != wanted[p]} | (current.keys() - wanted))
    if "--check" in argv:
        for path in stale:
            print(f"stale: {path.name}")
        return 1 if stale else 0
    BUNDLE_DIR.mkdir(exist_ok=True)
    for path in current.keys() - wanted.keys():
        path.unlink()
    for path, data in wanted.items():
        if current.get(path) != data:
            path.write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
