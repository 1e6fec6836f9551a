"""`trainops validate` as four steps: plan -> render -> check -> report.

- plan: every target's inputs and content key, its cluster (profile and the platform
  overlay its rules need), and the cache key of its result, before anything renders;
- render: kustomize builds (content-keyed cache, remote bases from the mirror);
- check: schema, API and policy checks of one target, a pure function of its render,
  its platform's documents and its profile;
- report: a `Report` (trainops.report) that reporters turn into text, JSON, JUnit...

Unchanged targets come from the cache without rendering. The others are validated in
this process, renders in parallel threads, when the work is small; when it is big and
more than one job is allowed, groups of targets (a cluster's platform with its runs
and templates, or a batch of plain files) go to a pool of processes, each rendering
and checking its group, so that Python's checks use every core too.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Protocol

from trainops.appsets import (
    NameConflict,
    argocd_appsets,
    generated_applications,
    name_conflicts,
)
from trainops.cache import Cache, FileHasher, code_fingerprint, digest
from trainops.errors import InputError
from trainops.model import WARNING, Document, Target, computed_once
from trainops.policy import Context
from trainops.policy.engine import evaluate
from trainops.policy.settings import PolicySettings, load_pack, load_settings
from trainops.render.discover import display_path
from trainops.render.engine import Plan, Renderer, RenderOptions, RenderResult
from trainops.render.origin import Placer
from trainops.report import SKIPPED, Report, ResourceResult, TargetReport
from trainops.schema.check import check_document
from trainops.schema.registry import InputSchemas, SchemaRegistry, minor_version
from trainops.yamlio import kept_objects_set_aside

# Work units (a kustomization, or 256 KiB of plain YAML) below which starting worker
# processes costs more than it saves.
PARALLEL_MIN_UNITS = 64
FILE_UNIT_BYTES = 256 * 1024
# Renders each render thread may have done ahead of the checks: enough to keep the
# threads busy, few enough that memory holds a handful of renders, not the repository.
RENDER_AHEAD = 2


@dataclass(frozen=True)
class ValidateOptions:
    kubernetes_version: str
    schema_locations: tuple[str, ...]
    strict: bool = True
    # What a custom resource kind without a schema gets: error, warning or skip.
    missing_schemas: str = WARNING
    skip: tuple[str, ...] = ()  # kinds or apiVersion/kind to skip, as in kubeconform
    policy_pack: Path | None = None  # None: schema checks only
    policy_config: Path | None = None
    cel: bool = True  # evaluate CRDs' CEL rules
    api_checks: bool = True  # built-in API validation and operator webhook checks

    def skips(self, doc: Document) -> bool:
        if not self.skip:
            return False
        return doc.kind in self.skip or f"{doc.api_version}/{doc.kind}" in self.skip


@dataclass
class Job:
    """One target to validate, planned: what it renders, its cluster, its result's key.

    `platform` is the plan of the cluster's platform overlay when the target is a run
    or template inside a cluster (its rules look the platform's objects up);
    `name_conflict`, for a run, the other directories whose Argo CD Application would
    have the run's Application's name (worked out from the whole tree, so part of the key).
    """

    plan: Plan
    profile: Any | None
    platform: Plan | None
    key: str
    name_conflict: NameConflict | None = None


class Progress(Protocol):
    """Told the number of targets, then how many more have been validated."""

    def start(self, total: int) -> None: ...

    def advance(self, count: int) -> None: ...


class Validation:
    """Validates targets; one instance per command invocation (and per worker process)."""

    def __init__(self, renderer: Renderer, options: ValidateOptions, cache: Cache | None = None):
        self.renderer = renderer
        self.options = options
        self.cache = cache or Cache(None)

    @computed_once
    def registry(self) -> SchemaRegistry:
        return SchemaRegistry(
            list(self.options.schema_locations),
            self.options.kubernetes_version,
            self.options.strict,
        )

    @computed_once
    def policy_settings(self) -> PolicySettings | None:
        if self.options.policy_pack is None:
            return None
        load_pack(self.options.policy_pack)
        return load_settings(self.options.policy_config)

    @computed_once
    def fingerprint(self) -> str:
        """Everything besides the inputs that decides a target's findings."""
        hasher = FileHasher()
        parts = [
            code_fingerprint(),
            minor_version(self.options.kubernetes_version),
            repr(self.options),
            date.today().isoformat(),  # exemptions expire by date
        ]
        for location in self.options.schema_locations:
            static = Path(location.split("{{", 1)[0])
            folder = static if static.is_dir() else static.parent
            if location != "default" and folder.is_dir() and "://" not in location:
                for path in sorted(p for p in folder.rglob("*.json") if p.is_file()):
                    parts += [str(path.relative_to(folder)), hasher(path)]
        pack = self.options.policy_pack
        if pack is not None:
            for path in sorted(pack.glob("*.py")):
                parts += [path.name, hasher(path)]
        config = self.options.policy_config
        if config is not None and config.is_file():
            parts += [hasher(config)]
        return digest(*parts)

    def run(self, targets: list[Target], progress: Progress | None = None) -> Report:
        jobs = self.plan(targets)
        if progress is not None:
            progress.start(len(jobs))
        reports: list[TargetReport | None] = []
        for job in jobs:
            cached = self.cache.get("validate", job.key)
            reports.append(_from_cache(job.plan.target, cached) if cached else None)
        missing = [i for i, report in enumerate(reports) if report is None]
        if progress is not None and len(missing) < len(jobs):
            progress.advance(len(jobs) - len(missing))
        if missing:
            todo = [jobs[i] for i in missing]
            if self.worth_processes(todo):
                done = self._validate_in_processes(todo, progress)
            else:
                done = self.validate_jobs(todo, progress)
            for i, report in zip(missing, done, strict=True):
                reports[i] = report
        result = [r for r in reports if r is not None]
        if self.policy_settings is not None and self.policy_settings.problems:
            config = self.options.policy_config
            target = Target("file", display_path(config) if config else "policies")
            result.append(TargetReport(target, [], list(self.policy_settings.problems)))
        return Report(result)

    # -- plan ---------------------------------------------------------------------------

    def plan(self, targets: list[Target]) -> list[Job]:
        """Inputs, cluster and cache key of every target; nothing is rendered."""
        from trainops.profile.model import load_profile

        plans = self.renderer.plan(targets)
        own = {Path(p.target.path).resolve(): p for p in plans if p.target.kind == "kustomization"}
        clusters = [cluster_dir(plan.target) for plan in plans]
        needed = [
            directory
            for plan, directory in zip(plans, clusters, strict=True)
            if directory is not None
            and directory != Path(plan.target.path).resolve()
            and directory not in own
        ]
        extra = self.renderer.plan(
            [Target("kustomization", display_path(d)) for d in dict.fromkeys(needed)]
        )
        platforms = {**own, **{Path(p.target.path).resolve(): p for p in extra}}
        profiles = {d: load_profile(d / "cluster.yaml") for d in dict.fromkeys(clusters) if d}
        conflicts = self._name_conflicts(plans, clusters)
        jobs = []
        for plan, directory in zip(plans, clusters, strict=True):
            platform = None
            if directory is not None and directory != Path(plan.target.path).resolve():
                platform = platforms[directory]
            # The target's path is part of the key: two files with the same content
            # must each be reported under their own name.
            conflict = conflicts.get(Path(plan.target.path).resolve())
            key = digest(
                plan.key,
                plan.target.kind,
                plan.target.path,
                platform.key if platform else "",
                repr(conflict) if conflict else "",
                self.fingerprint,
            )
            jobs.append(Job(plan, profiles.get(directory), platform, key, conflict))
        return jobs

    def _name_conflicts(
        self, plans: list[Plan], clusters: list[Path | None]
    ) -> dict[Path, NameConflict]:
        """For each run among `plans`, the Applications of its repository (what the
        ApplicationSets of its argocd/ make of the tree) named as its own is."""
        found: dict[Path, NameConflict] = {}
        by_root: dict[Path, dict[str, NameConflict]] = {}
        for plan, cluster in zip(plans, clusters, strict=True):
            if self.policy_settings is None or cluster is None or not plan.target.is_run:
                continue
            if cluster.parent.name != "overlays":
                continue
            root = cluster.parent.parent
            if root not in by_root:
                by_root[root] = self._tree_conflicts(root)
            directory = Path(plan.target.path).resolve()
            conflict = by_root[root].get(str(directory.relative_to(root)))
            if conflict is not None:
                found[directory] = conflict
        return found

    def _tree_conflicts(self, root: Path) -> dict[str, NameConflict]:
        """Application names shared by directories of the tree at `root`."""
        appsets = argocd_appsets(root, self.renderer)
        return name_conflicts(generated_applications(root, appsets)) if appsets else {}

    # -- render and check -----------------------------------------------------------------

    def validate_jobs(
        self, jobs: list[Job], progress: Progress | None = None
    ) -> list[TargetReport]:
        """Render (threads) and check (this process) each job; cache each result.

        Renders run at most `RENDER_AHEAD` per thread ahead of the checks, and each is
        let go once checked (a platform's once its last run is), so memory holds a few
        renders at a time, not the whole repository. Raises the first InputError in
        job order, after every render has finished.
        """
        self.renderer.expect([job.plan for job in jobs])
        first_error: InputError | None = None
        reports: list[TargetReport] = []
        platforms: dict[str, list[Document]] = {}
        last_use = {job.platform.key: i for i, job in enumerate(jobs) if job.platform}
        ahead = RENDER_AHEAD * self.renderer.jobs
        with (
            ThreadPoolExecutor(max_workers=self.renderer.jobs) as pool,
            kept_objects_set_aside() as set_aside,
        ):
            pending: deque[Future[RenderResult]] = deque()
            rendering: dict[str, Future[RenderResult]] = {}  # platforms still needed
            submitted = 0
            for index, job in enumerate(jobs):
                while submitted < min(len(jobs), index + ahead):
                    later = jobs[submitted]
                    future = pool.submit(self.renderer.render_plan, later.plan)
                    pending.append(future)
                    if last_use.get(later.plan.key, -1) > submitted:
                        rendering[later.plan.key] = future
                    submitted += 1
                future = pending.popleft()
                try:
                    result = future.result()
                    platform = self._platform_documents(job.platform, platforms, rendering)
                except InputError as exc:
                    first_error = first_error or exc
                    continue
                finally:
                    if job.platform and last_use[job.platform.key] == index:
                        rendering.pop(job.platform.key, None)
                if first_error is None:
                    report = self.check(result, platform, job.profile, job.name_conflict)
                    reports.append(report)
                    set_aside()
                    if self.cache.enabled:
                        self.cache.put("validate", job.key, report.to_json())
                    if progress is not None:
                        progress.advance(1)
        if first_error is not None:
            raise first_error
        return reports

    def _platform_documents(
        self, plan: Plan | None, memo: dict[str, list[Document]], rendering: dict
    ) -> list[Document]:
        """The platform's documents without its CRDs (rules never need those)."""
        if plan is None or self.policy_settings is None:
            return []
        if plan.key not in memo:
            memo.clear()  # jobs arrive grouped by cluster: keep one platform in memory
            if plan.key in rendering:  # being rendered as a target already
                result = rendering[plan.key].result()
            else:
                result = self.renderer.render_plan(plan)
            memo[plan.key] = [
                doc for doc in result.documents if doc.kind != "CustomResourceDefinition"
            ]
        return memo[plan.key]

    def check(
        self,
        result: RenderResult,
        platform: list[Document] | None = None,
        profile: Any | None = None,
        name_conflict: NameConflict | None = None,
    ) -> TargetReport:
        """Every finding of one rendered target: schema, API and policy checks."""
        resources: list[ResourceResult] = []
        findings = list(result.findings)
        crds = [d.obj for d in result.documents if d.kind == "CustomResourceDefinition"]
        registry = (InputSchemas(self.registry, crds) or self.registry) if crds else self.registry
        for doc in result.documents:
            if self.options.skips(doc):
                status = SKIPPED
            else:
                status, found = check_document(
                    doc,
                    registry,
                    self.options.missing_schemas,
                    self.options.cel,
                    self.options.api_checks,
                )
                findings.extend(found)
            resources.append(
                ResourceResult(
                    resource=doc.resource_id,
                    api_version=doc.api_version,
                    kind=doc.kind,
                    name=doc.name,
                    namespace=doc.namespace,
                    location=doc.location,
                    status=status,
                )
            )
        if self.policy_settings is not None:
            context = Context(
                target=result.target,
                documents=[d for d in result.documents if not self.options.skips(d)],
                platform=platform or [],
                profile=profile,
                inputs=result.inputs,
                name_conflict=name_conflict,
            )
            findings.extend(evaluate(context, self.policy_settings))
        if result.inputs is not None:  # a kustomize render: the files behind each field
            findings = Placer(result.inputs.root).place_all(findings, result.documents)
        return TargetReport(result.target, resources, findings)

    # -- processes --------------------------------------------------------------------------

    def worth_processes(self, jobs: list[Job]) -> bool:
        """Whether `jobs` are enough work to pay for starting worker processes."""
        if self.renderer.jobs < 2 or len(jobs) < 2:
            return False
        units = sum(
            1 if job.plan.inputs is not None else len(job.plan.text or "") / FILE_UNIT_BYTES
            for job in jobs
        )
        return units >= PARALLEL_MIN_UNITS

    def _validate_in_processes(
        self, jobs: list[Job], progress: Progress | None
    ) -> list[TargetReport]:
        """Validate groups of jobs in worker processes; results in job order. The groups
        of a worker that dies (killed, out of memory) are validated here instead."""
        groups = _groups(jobs, self.renderer.jobs)
        position = {id(job): i for i, job in enumerate(jobs)}
        reports: list[TargetReport | None] = [None] * len(jobs)
        errors: dict[int, InputError] = {}
        orphaned: list[list[Job]] = []
        settings = (self.renderer.options, self.cache.root, self.options)
        context = multiprocessing.get_context("spawn")
        workers = min(self.renderer.jobs, len(groups))
        with ProcessPoolExecutor(workers, context, _start_worker, settings) as pool:
            futures = {pool.submit(_validate_group, group): group for group in groups}
            for future in as_completed(futures):
                group = futures[future]
                try:
                    done = future.result()
                except InputError as exc:
                    errors[min(position[id(job)] for job in group)] = exc
                    continue
                except BrokenProcessPool:
                    orphaned.append(group)
                    continue
                for job, report in zip(group, done, strict=True):
                    reports[position[id(job)]] = report
                if progress is not None:
                    progress.advance(len(group))
        for group in sorted(orphaned, key=lambda g: min(position[id(job)] for job in g)):
            try:
                done = self.validate_jobs(group, progress)
            except InputError as exc:
                errors[min(position[id(job)] for job in group)] = exc
                continue
            for job, report in zip(group, done, strict=True):
                reports[position[id(job)]] = report
        if errors:
            raise errors[min(errors)]
        return [r for r in reports if r is not None]


def _groups(jobs: list[Job], workers: int) -> list[list[Job]]:
    """Jobs in groups for the workers: a cluster's targets together (they share one
    platform render); other targets in batches, several per worker to balance the load."""
    clusters: dict[str, list[Job]] = {}
    loose: list[Job] = []
    for job in jobs:
        if job.platform is not None:
            clusters.setdefault(job.platform.key, []).append(job)
        elif job.plan.inputs is not None and job.profile is not None:
            clusters.setdefault(job.plan.key, []).append(job)  # a platform overlay itself
        else:
            loose.append(job)
    size = max(1, len(loose) // (workers * 4))
    batches = [loose[i : i + size] for i in range(0, len(loose), size)]
    return sorted([*clusters.values(), *batches], key=len, reverse=True)


_WORKER: Validation | None = None


def _start_worker(
    render_options: RenderOptions, cache_root: Path | None, options: ValidateOptions
) -> None:
    global _WORKER
    single = RenderOptions(**{**render_options.__dict__, "jobs": 1})
    cache = Cache(cache_root)
    _WORKER = Validation(Renderer(single, cache), options, cache)


def _validate_group(jobs: list[Job]) -> list[TargetReport]:
    assert _WORKER is not None
    return _WORKER.validate_jobs(jobs)


def _from_cache(target: Target, data: bytes) -> TargetReport | None:
    """A cached result, or None (a miss) when the entry cannot be read."""
    try:
        return TargetReport.from_json(target, data)
    except (ValueError, TypeError, KeyError):
        return None


def cluster_dir(target: Target) -> Path | None:
    """The nearest enclosing directory with a cluster.yaml (the cluster overlay)."""
    if target.kind != "kustomization":
        return None
    directory = Path(target.path).resolve()
    for candidate in (directory, *directory.parents):
        if (candidate / "cluster.yaml").is_file():
            return candidate
        if (candidate / ".git").exists() or (candidate / "pyproject.toml").is_file():
            return None
    return None
