"""Renders targets into Documents: kustomize in parallel, cached by input content.

Plain files, stdin and helm's output are read by `plain` (templates, repeated keys);
with `envsubst` set, plain files and stdin are first rendered from the environment as
GNU envsubst renders them (`templates.envsubst`). A kustomization is built by the real
kustomize. When it lists remote
resources, the build runs on a staged copy whose kustomizations point at the
mirror instead; remotes the mirror lacks are left out and reported as
warnings, so an offline CI still validates everything else. Sibling
kustomizations announced together (`Renderer.expect`: an overlay's runs, its
templates) share kustomize processes where their outputs cannot differ for it
(render/batch.py).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from trainops.cache import Cache, FileHasher, code_fingerprint, digest
from trainops.errors import InputError
from trainops.model import ERROR, WARNING, Document, Finding, Target
from trainops.render import batch, helm, kustomize, templates
from trainops.render.discover import MANIFEST_SUFFIXES, argocd_override, display_path
from trainops.render.inputs import InputGraph, RemoteUse, collect_inputs
from trainops.render.origin import strip_origins
from trainops.render.plain import KustomizeUses, read_plain
from trainops.yamlio import (
    MAX_FILE_BYTES,
    decode,
    load_documents,
    load_yaml_mapping,
    locate,
    read_text,
)


@dataclass
class Plan:
    """What a target will read, and the content key of all of it."""

    target: Target
    key: str
    inputs: InputGraph | None = None  # kustomizations: the files the build reads
    text: str | None = None  # files and stdin: their content (rendered, with envsubst)
    # files: the kustomization that reads the file and the field naming it
    kustomize_use: tuple[str, str] | None = None
    # Argo CD parameter override files beside it (`argocd_overrides`): part of the key.
    overrides: tuple[str, ...] = ()


@dataclass
class RenderResult:
    target: Target
    documents: list[Document]
    key: str  # hash of everything the render read: equal keys, equal output
    text: str  # the rendered YAML stream
    findings: list[Finding] = field(default_factory=list)
    inputs: InputGraph | None = None


@dataclass
class RenderOptions:
    mirror: Path | None = None
    allow_network: bool = False
    jobs: int = 0  # 0: one per CPU
    max_file_bytes: int = MAX_FILE_BYTES
    envsubst: bool = False  # render plain files and stdin from the environment first


class Renderer:
    def __init__(self, options: RenderOptions, cache: Cache | None = None):
        self.options = options
        self.cache = cache or Cache(None)
        self.hash_file = FileHasher()
        self._mirror = options.mirror.resolve() if options.mirror else None
        self.jobs = options.jobs or os.cpu_count() or 1
        self._shared: dict[str, _SharedBuild] = {}  # plan key -> its shared build
        self._shared_lock = threading.Lock()
        self._kustomize_uses = KustomizeUses()
        self._overrides = ArgoCDOverrides()

    def render(self, targets: list[Target]) -> list[RenderResult]:
        """Render every target; raise the first InputError (in target order)."""
        plans = self.plan(targets)
        self.expect(plans)
        return run_parallel(self.render_plan, plans, self.jobs)

    def expect(self, plans: list[Plan]) -> None:
        """Announce the plans about to be rendered, in the order they will be.

        Kustomizations missing from the cache that may share a kustomize process
        (batch.shareable) are grouped with their siblings (same parent directory,
        sortOptions and OpenAPI schema), at most batch.MAX_SLOTS to a group and at least `jobs`
        groups where there are enough, interleaved so that threads rendering
        consecutive plans build different groups. A group is built when the first
        of its plans is rendered.
        """
        siblings: dict[tuple[Path, str, str], dict[str, InputGraph]] = {}
        seen: set[str] = set()
        with self._shared_lock:
            for plan in plans:
                graph = plan.inputs
                if graph is None or plan.key in self._shared or plan.key in seen:
                    continue
                seen.add(plan.key)
                if self.cache.has("render", plan.key) or not batch.shareable(graph):
                    continue
                sort = json.dumps(kustomize.sort_options(graph.root), sort_keys=True)
                schema = self._schema_identity(graph)
                siblings.setdefault((graph.root.parent, sort, schema), {})[plan.key] = graph
            for members in siblings.values():
                keys = list(members)
                count = max(math.ceil(len(keys) / batch.MAX_SLOTS), min(self.jobs, len(keys) // 2))
                for number in range(count):
                    group = {key: members[key] for key in keys[number::count]}
                    if len(group) > 1:
                        build = _SharedBuild(group, self.options.allow_network)
                        self._shared.update(dict.fromkeys(group, build))

    def _schema_identity(self, graph: InputGraph) -> str:
        if graph.schema is None:
            return ""
        kind, value = graph.schema
        return f"file:{self.hash_file(Path(value))}" if kind == "path" else f"{kind}:{value}"

    def _shared_text(self, key: str) -> str | None:
        """The output of plan `key` from its shared build; None: build it alone."""
        with self._shared_lock:
            build = self._shared.pop(key, None)
        return build.text_of(key) if build is not None else None

    def plan(self, targets: list[Target]) -> list[Plan]:
        """Collect inputs and content keys, without rendering anything."""
        stdin_text = None
        if any(t.kind == "stdin" for t in targets):
            stdin_text = decode(sys.stdin.buffer.read(), "stdin")
        plan = partial(self._plan_one, stdin_text=stdin_text)
        # Planning a kustomization is Python work on paths and small files under the GIL:
        # threads made it slower (473 unchanged targets: 2.9 s on two, 1.7 s on one). A
        # chart is rendered while planning, by a helm process: those run side by side.
        if any(t.kind == "helm" for t in targets):
            return run_parallel(plan, targets, self.jobs)
        return [plan(target) for target in targets]

    def _plan_one(self, target: Target, stdin_text: str | None) -> Plan:
        overrides = self._overrides.of(target)
        if target.kind == "kustomization":
            graph = collect_inputs(Path(target.path), self._mirror)
            key = digest(self._key(graph, target.is_run), *overrides)
            return Plan(target, key, inputs=graph, overrides=overrides)
        use = None
        if target.kind == "stdin":
            text = stdin_text or ""
        elif target.kind == "helm":
            text = helm.template(Path(target.path), target.path)
        else:
            text = read_text(target.path, self.options.max_file_bytes)
            use = self._kustomize_uses.of(target.path)
        if self.options.envsubst and target.kind != "helm":
            text = templates.envsubst(text, os.environ)
        key = digest(code_fingerprint(), "file", text, *(use or ()), *overrides)
        return Plan(target, key, text=text, kustomize_use=use, overrides=overrides)

    def render_plan(self, plan: Plan) -> RenderResult:
        target = plan.target
        if plan.inputs is None:
            where = "stdin" if target.kind == "stdin" else target.path
            text = plan.text or ""
            # helm's output lines mean nothing to the user: findings name the chart.
            file = None if target.kind == "helm" else where
            read = read_plain(text, where, file, plan.kustomize_use)
            findings = [*read.findings, *argocd_overrides(target, plan.overrides)]
            return RenderResult(target, read.documents, plan.key, text, findings)
        cached = _cached_render(self.cache.get("render", plan.key))
        if cached is not None:
            text, findings = cached
        else:
            shared = self._shared_text(plan.key)
            if shared is not None:
                text, findings = shared, []
            else:
                text, findings = self._build(plan.inputs, target)
            if self.cache.enabled:
                entry = {"text": text, "findings": [f.to_cache() for f in findings]}
                self.cache.put("render", plan.key, json.dumps(entry).encode())
        documents = load_documents(text, source=target.path, keep_text=True)
        strip_origins(documents)
        # Not in the cached render: kustomize never reads these files (the key has them).
        findings = [*findings, *argocd_overrides(target, plan.overrides)]
        return RenderResult(target, documents, plan.key, text, findings, plan.inputs)

    def _key(self, graph: InputGraph, run: bool) -> str:
        # `run`: a missing remote is an error in a run, a warning elsewhere.
        parts = [
            code_fingerprint(),
            kustomize.tool_fingerprint(),
            str(self.options.allow_network),
            str(run),
        ]
        for path in sorted(graph.files):
            parts += [os.path.relpath(path, graph.root), self.hash_file(path)]
        for path, link in sorted(graph.links.items()):
            parts += [os.path.relpath(path, graph.root), "->", link]
        for use in graph.remotes:
            parts += [use.url, "mirrored" if use.local else "missing"]
        return digest(*parts)

    def _build(self, graph: InputGraph, target: Target) -> tuple[str, list[Finding]]:
        shown = target.path
        # A run's pull request must not ship what validate cannot see (docs/security.md).
        severity = ERROR if target.is_run else WARNING
        if not graph.remotes or self.options.allow_network:
            text = kustomize.build(
                graph.root, shown, self.options.allow_network, _relative_to(graph.root)
            )
            return text, []
        missing = [use for use in graph.remotes if use.local is None]
        findings = [self._missing_remote(use, shown, severity) for use in missing]
        try:
            return self._build_staged(graph, shown), findings
        except InputError as exc:
            if not missing:
                raise
            findings.append(
                Finding(
                    rule="remote-resource",
                    severity=severity,
                    source=shown,
                    resource="",
                    path="",
                    message=f"not rendered offline: without its remote resources {exc.message}",
                    fix="Provide the remote resources in the mirror (--remote-mirror) "
                    "or render with --allow-network.",
                )
            )
            return "", findings

    def _missing_remote(self, use: RemoteUse, shown: str, severity: str) -> Finding:
        names = use.ref.mirror_names() if use.ref else []
        where = f"{self._mirror}/{names[0]}/{use.ref.path}" if (names and self._mirror) else ""
        if not use.ref or not use.ref.ref:
            fix = "Pin the URL with ?ref=TAG, then add a copy to the mirror."
        elif self._mirror is None:
            fix = "Pass --remote-mirror DIR (or set TRAINOPS_REMOTE_MIRROR) holding a copy."
        else:
            fix = f"Add a copy of the pinned upstream at {where}."
        text = use.kustomization.read_text(errors="replace")
        line = locate(text, (use.field, use.index))
        return Finding(
            rule="remote-resource",
            severity=severity,
            source=shown,
            resource="",
            path=f"{use.field}[{use.index}]",
            message=f"remote resource {use.url} has no offline copy: it was left out of the "
            "render and not validated",
            fix=fix,
            file=display_path(use.kustomization),
            line=line + 1 if line is not None else None,
        )

    def _build_staged(self, graph: InputGraph, shown: str) -> str:
        mirror = self._mirror
        local = [p for p in graph.files if mirror is None or not p.is_relative_to(mirror)]
        root = Path(os.path.commonpath([graph.root, *local]))
        uses_by_file: dict[Path, list[RemoteUse]] = defaultdict(list)
        for use in graph.remotes:
            uses_by_file[use.kustomization.resolve()].append(use)
        with tempfile.TemporaryDirectory(prefix="trainops-stage-") as tmp:
            stage = Path(tmp)
            for path in local:
                dest = stage / path.relative_to(root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
            for kfile, uses in uses_by_file.items():
                if mirror is not None and kfile.is_relative_to(mirror):
                    continue
                staged = stage / kfile.relative_to(root)
                spec = load_yaml_mapping(kfile.read_text(), str(kfile))
                for use in sorted(uses, key=lambda u: u.index, reverse=True):
                    entries = spec[use.field]
                    if use.local is None:
                        del entries[use.index]
                    elif use.local.is_dir():
                        entries[use.index] = os.path.relpath(use.local, staged.parent)
                    else:
                        copy_name = f".mirror-{use.index}-{use.local.name}"
                        shutil.copyfile(use.local, staged.parent / copy_name)
                        entries[use.index] = copy_name
                staged.write_text(json.dumps(spec, indent=1))

            def origin_path(path: str) -> str:
                if Path(path).is_relative_to(stage):
                    path = str(root / Path(path).relative_to(stage))
                return os.path.relpath(path, graph.root)

            try:
                return kustomize.build(
                    stage / graph.root.relative_to(root), shown, origin_paths=origin_path
                )
            except InputError as exc:
                exc.message = exc.message.replace(str(stage), str(root))
                raise


class _SharedBuild:
    """Kustomizations built in one kustomize process, on the first request for one."""

    def __init__(self, graphs: dict[str, InputGraph], allow_network: bool):
        self._graphs = graphs
        self._allow_network = allow_network
        self._texts: dict[str, str | None] | None = None
        self._lock = threading.Lock()

    def text_of(self, key: str) -> str | None:
        with self._lock:
            if self._texts is None:
                keys = list(self._graphs)
                texts = batch.build_together(list(self._graphs.values()), self._allow_network)
                self._texts = dict(zip(keys, texts, strict=True))
                self._graphs = {}
            return self._texts.pop(key, None)


def _directory_of(target: Target) -> str:
    return target.path if target.kind == "kustomization" else os.path.dirname(target.path)


class ArgoCDOverrides:
    """The Argo CD parameter override files beside a target, each directory read once:
    a kustomization's own, and a plain file's directory's (an Argo CD directory source),
    given with the directory's first manifest file only, so reported once."""

    def __init__(self) -> None:
        self._directories: dict[str, tuple[str | None, tuple[str, ...]]] = {}

    def of(self, target: Target) -> tuple[str, ...]:
        if target.kind not in ("kustomization", "file"):
            return ()
        first, names = self._read(_directory_of(target) or ".")
        if target.kind == "file" and first != os.path.basename(target.path):
            return ()
        return names

    def _read(self, directory: str) -> tuple[str | None, tuple[str, ...]]:
        known = self._directories.get(directory)
        if known is None:
            try:
                entries = [entry.name for entry in os.scandir(directory)]
            except OSError:
                entries = []
            manifests = [n for n in entries if n.endswith(MANIFEST_SUFFIXES) and n[:1] != "."]
            names = tuple(sorted(n for n in entries if argocd_override(n)))
            known = self._directories[directory] = (min(manifests, default=None), names)
        return known


def argocd_overrides(target: Target, names: tuple[str, ...]) -> list[Finding]:
    """A finding per Argo CD parameter override file `names` beside `target`."""
    severity = ERROR if target.is_run else WARNING
    return [
        Finding(
            rule="argocd-source-override",
            severity=severity,
            source=target.path,
            resource="",
            path="",
            message=f"{name}: Argo CD merges it into the Application's source (patches, "
            "names, images, labels, even another source type), so what it syncs is not "
            "this render",
            fix="Delete the file and put what it changes in the kustomization, where "
            "validate sees it.",
            file=display_path(Path(_directory_of(target)) / name),
        )
        for name in names
    ]


def _relative_to(root: Path):
    """Origin paths relative to the rendered kustomization, as the cache keeps them."""
    return lambda path: os.path.relpath(path, root)


def _cached_render(data: bytes | None) -> tuple[str, list[Finding]] | None:
    """A cached render, or None (a miss, rebuilt and replaced) when it cannot be read."""
    if data is None:
        return None
    try:
        entry = json.loads(data)
        text = entry["text"]
        findings = [Finding.from_cache(f) for f in entry["findings"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return (text, findings) if isinstance(text, str) else None


def run_parallel(function, items, jobs):
    """map() on a thread pool that re-raises the first InputError in item order."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(function, item) for item in items]
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result())
            except InputError as exc:
                outcomes.append(exc)
    for outcome in outcomes:
        if isinstance(outcome, InputError):
            raise outcome
    return outcomes
