"""The cache is never wrong, and never a reason to fail.

Classes: "stale PASS from the cache" (files read through generator and transformer
configs, inline or in files, components, symlinks, bases two levels up, and files under
venv/, .venv/ or node_modules/ that a field names were not in the key) and "a corrupt
cache entry" (a traceback on every later run). The property test mutates, one at a time,
every file under a realistic set of overlays and asserts that the cached render always
equals the `--no-cache` one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.hostile.harness import assert_handled, run_cli, write

MARK = "MARK"
# A realistic tree: a base two levels up with a generated ConfigMap, a component with a
# patch, an overlay with file and inline generators and transformers, a replacement, a
# patch through a symlink, and a run under the overlay building on the base.
TREE = {
    "base/app/kustomization.yaml": (
        "resources:\n- deploy.yaml\nconfigMapGenerator:\n- name: app\n  files:\n"
        "  - conf/app.properties\n  envs:\n  - conf/app.env\ncommonAnnotations: {base: MARK}\n"
    ),
    "base/app/deploy.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n  labels: {m: MARK}\n"
        "spec:\n  selector: {matchLabels: {app: a}}\n  template:\n    metadata:\n"
        "      labels: {app: a}\n    spec:\n      containers:\n      - name: c\n"
        "        image: registry.example.com/app:1.0\n"
    ),
    "base/app/conf/app.properties": "key=MARK\n",
    "base/app/conf/app.env": "ENV_KEY=MARK\n",
    "components/labels/kustomization.yaml": (
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
        "labels:\n- pairs: {component: MARK}\npatches:\n- path: patch.yaml\n"
    ),
    "components/labels/patch.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n"
        "  annotations: {from-component: MARK}\n"
    ),
    "overlays/x/kustomization.yaml": (
        "resources:\n- ../../base/app\ncomponents:\n- ../../components/labels\n"
        "generators:\n- gen.yaml\n- |-\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n"
        "  metadata: {name: inline}\n  literals: [k=MARK]\n"
        "transformers:\n- t.yaml\n- |-\n  apiVersion: builtin\n  kind: AnnotationsTransformer\n"
        "  metadata: {name: inline}\n  annotations: {inline: MARK}\n  fieldSpecs:\n"
        "  - path: metadata/annotations\n    create: true\n"
        "patches:\n- path: linked.yaml\nreplacements:\n- path: repl.yaml\n"
    ),
    "overlays/x/gen.yaml": (
        "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: generated}\n"
        "files:\n- data/a.txt\nliterals:\n- gen=MARK\n"
    ),
    "overlays/x/data/a.txt": "MARK\n",
    "overlays/x/t.yaml": (
        "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t}\n"
        "path: patches/p.yaml\ntarget: {kind: Deployment}\n"
    ),
    "overlays/x/patches/p.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n"
        "  annotations: {from-transformer: MARK}\n"
    ),
    "overlays/x/patches/p2.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n"
        "  annotations: {through-symlink: MARK}\n"
    ),
    "overlays/x/repl.yaml": (
        "source: {kind: ConfigMap, name: inline, fieldPath: metadata.name}\n"
        "targets:\n- select: {kind: Deployment}\n  fieldPaths: [metadata.annotations.MARK]\n"
        "  options: {create: true}\n"
    ),
    "overlays/x/runs/r1/kustomization.yaml": (
        "resources:\n- ../../../../base/app\n- node_modules/cm.yaml\nnameSuffix: -MARK\n"
        "patches:\n- path: run.yaml\n- path: .venv/p.yaml\n"
        "configMapGenerator:\n- name: v\n  files:\n  - key=venv/v.txt\n"
    ),
    # Inputs in directories the trees hashed leave out: named by a field, they count.
    "overlays/x/runs/r1/node_modules/cm.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: modules\ndata: {k: MARK}\n"
    ),
    "overlays/x/runs/r1/.venv/p.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n"
        "  annotations: {from-venv: MARK}\n"
    ),
    "overlays/x/runs/r1/venv/v.txt": "MARK\n",
    "overlays/x/runs/r1/run.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n"
        "  annotations: {run: MARK}\n"
    ),
}
LINKS = {"overlays/x/linked.yaml": "patches/p2.yaml"}
# Files whose change is not a value: the transformer config gets another patch file.
EDITS = {"overlays/x/t.yaml": ("patches/p.yaml", "patches/p2.yaml")}
TARGETS = ("overlays/x", "overlays/x/runs/r1")


def _tree(root: Path) -> Path:
    for relative, text in TREE.items():
        write(root / relative, text)
    for relative, target in LINKS.items():
        os.symlink(target, root / relative)
    (root / ".git").mkdir()  # the repository root paths stay inside
    return root


def _render(root: Path, cache: Path | None) -> tuple[int, str]:
    args = ("render", *TARGETS) if cache is not None else ("render", "--no-cache", *TARGETS)
    outcome = run_cli(*args, cwd=root, cache=cache)
    assert_handled(outcome)
    return outcome.code, outcome.out


@pytest.mark.parametrize("relative", [*TREE, *LINKS])
def test_cached_render_equals_uncached_after_any_one_change(tmp_path: Path, relative: str):
    root = _tree(tmp_path / "repo")
    cache = tmp_path / "cache"
    before = _render(root, cache)
    assert before == _render(root, None)
    path = root / relative
    if relative in LINKS:
        path.unlink()
        os.symlink("patches/p.yaml", path)  # the link now leads to another patch
    else:
        old, new = EDITS.get(relative, (MARK, "CHANGED"))
        path.write_text(path.read_text().replace(old, new))
    cached, uncached = _render(root, cache), _render(root, None)
    assert cached == uncached
    assert cached != before, f"changing {relative} changed nothing: the test would prove nothing"


# -- corrupt entries ----------------------------------------------------------------------


def _corrupt(entry: Path, how: str, valid: bytes, decoy: Path) -> None:
    """Break `entry`; `valid` is its old content, `decoy` a valid entry of another target."""
    entry.unlink()
    if how == "truncated":
        entry.write_bytes(valid[: len(valid) // 2])
    elif how == "empty":
        entry.write_bytes(b"")
    elif how == "binary":
        entry.write_bytes(os.urandom(512))
    elif how == "json-list":
        entry.write_text("[1, 2, 3]")
    elif how == "json-wrong-types":
        entry.write_text(json.dumps({"text": 5, "findings": [{"rule": 1}], "resources": 7}))
    elif how == "finding-bad-severity":
        finding = dict(rule="x", severity="fatal", source="s", resource="r", path="", message="m")
        entry.write_text(json.dumps({"text": "", "resources": [], "findings": [finding]}))
    elif how == "directory":
        entry.mkdir()
    elif how == "symlink-dev-zero":
        os.symlink("/dev/zero", entry)
    elif how == "symlink-other-entry":
        os.symlink(decoy, entry)
    elif how == "fifo":
        os.mkfifo(entry)
    elif how == "huge-sparse":
        with open(entry, "wb") as handle:
            handle.truncate(300 << 20)


CORRUPTIONS = [
    "truncated",
    "empty",
    "binary",
    "json-list",
    "json-wrong-types",
    "finding-bad-severity",
    "directory",
    "symlink-dev-zero",
    "symlink-other-entry",
    "fifo",
    "huge-sparse",
]
REPLACED = {"truncated", "empty", "binary", "json-list", "json-wrong-types", "finding-bad-severity"}


@pytest.fixture
def broken_overlay(tmp_path: Path) -> Path:
    """Two overlays whose validation finds an error (so a cached result has content)."""
    root = tmp_path / "repo"
    for name in ("a", "b"):
        write(root / name / "kustomization.yaml", "resources:\n- cm.yaml\n")
        write(
            root / name / "cm.yaml",
            f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata: {{k: v}}\n"
            "replicas: 3\n",
        )
    (root / ".git").mkdir()
    return root


@pytest.mark.parametrize("namespace", ["render", "validate"])
@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corrupt_entry_is_a_miss_and_is_replaced(
    tmp_path: Path, broken_overlay: Path, namespace: str, how: str
):
    cache = tmp_path / "cache"
    command = ("render",) if namespace == "render" else ("validate", "--format", "json")
    uncached = run_cli(*command, "--no-cache", "a", cwd=broken_overlay)
    run_cli(*command, "a", "b", cwd=broken_overlay, cache=cache)
    first = run_cli(*command, "a", cwd=broken_overlay, cache=cache)
    assert (first.code, first.out) == (uncached.code, uncached.out)
    entries = sorted(p for p in cache.rglob("*") if p.is_file() and namespace in p.parts)
    assert len(entries) == 2, entries
    contents = {entry: entry.read_bytes() for entry in entries}
    for index, entry in enumerate(entries):  # whichever is a's, both are broken
        decoy = write(cache / f"decoy-{index}", contents[entries[1 - index]])
        _corrupt(entry, how, contents[entry], decoy)
    again = run_cli(*command, "a", cwd=broken_overlay, cache=cache)
    assert_handled(again)
    assert (again.code, again.out) == (uncached.code, uncached.out)
    if how in REPLACED:
        repaired = [p for p in entries if p.read_bytes() in contents.values()]
        assert repaired, "the unreadable entry was not replaced"


def test_an_entry_is_kept_when_another_writer_creates_the_cache_at_the_same_moment(
    tmp_path: Path, monkeypatch
):
    """Two targets of one run finishing together both create the cache root; the one that
    loses that race still stores its entry (a lost entry made a later run render again)."""
    from trainops.cache import Cache

    root = tmp_path / "cache"
    real_mkdir = Path.mkdir

    def mkdir_after_the_other_writer(self: Path, *args, **kwargs) -> None:
        if self == root and not root.exists():
            real_mkdir(root)  # the other writer got there first
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir_after_the_other_writer)
    Cache(root).put("render", "ab" * 32, b"rendered")
    monkeypatch.undo()
    assert Cache(root).get("render", "ab" * 32) == b"rendered"
