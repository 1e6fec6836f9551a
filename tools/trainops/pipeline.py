"""`trainops validate`: render -> schema check -> policy checks -> one Report.

Each target's result is cached under a key made of its inputs' content key
and everything else that decides the outcome (schemas, Kubernetes version,
options), so an unchanged overlay is neither rendered nor parsed again.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date
from functools import cached_property
from pathlib import Path
from typing import Any

from trainops.cache import Cache, FileHasher, code_fingerprint, digest
from trainops.errors import InputError
from trainops.model import ERROR, INFO, WARNING, Document, Finding, Target
from trainops.policy.engine import Context, PolicySettings, evaluate
from trainops.policy.settings import load_pack, load_settings
from trainops.render.discover import display_path
from trainops.render.engine import Plan, Renderer, RenderResult
from trainops.schema.check import check_document
from trainops.schema.registry import SchemaRegistry, minor_version

VALID, INVALID, SKIPPED = "valid", "invalid", "skipped"


@dataclass
class ResourceResult:
    resource: str
    api_version: str
    kind: str
    name: str
    namespace: str
    location: str
    status: str


@dataclass
class TargetReport:
    target: Target
    resources: list[ResourceResult]
    findings: list[Finding]

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "resources": [asdict(r) for r in self.resources],
                "findings": [f.to_cache() for f in self.findings],
            }
        ).encode()

    @classmethod
    def from_json(cls, target: Target, data: bytes) -> TargetReport:
        entry = json.loads(data)
        return cls(
            target,
            [ResourceResult(**r) for r in entry["resources"]],
            [Finding.from_cache(f) for f in entry["findings"]],
        )


@dataclass
class Report:
    targets: list[TargetReport] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for t in self.targets for f in t.findings]

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def resource_count(self) -> int:
        return sum(len(t.resources) for t in self.targets)

    @property
    def exit_code(self) -> int:
        return 1 if self.count(ERROR) else 0

    def summary(self) -> dict[str, int]:
        return {
            "targets": len(self.targets),
            "resources": self.resource_count,
            "errors": self.count(ERROR),
            "warnings": self.count(WARNING),
            "info": self.count(INFO),
        }


@dataclass(frozen=True)
class ValidateOptions:
    kubernetes_version: str
    schema_locations: tuple[str, ...]
    strict: bool = True
    ignore_missing_schemas: bool = False
    skip: tuple[str, ...] = ()  # kinds or apiVersion/kind to skip, as in kubeconform
    policy_pack: Path | None = None  # None: schema checks only
    policy_config: Path | None = None
    cel: bool = True  # evaluate CRDs' CEL rules
    api_checks: bool = True  # built-in API validation and operator webhook checks

    def skips(self, doc: Document) -> bool:
        return doc.kind in self.skip or f"{doc.api_version}/{doc.kind}" in self.skip


@dataclass
class ClusterContext:
    """The cluster a target belongs to: its profile and, unless the target is the
    cluster's platform overlay itself, the platform's plan (for cross-references)."""

    profile: Any | None = None
    platform: Plan | None = None


class Validation:
    """Validates targets; one instance per command invocation."""

    def __init__(self, renderer: Renderer, options: ValidateOptions, cache: Cache | None = None):
        self.renderer = renderer
        self.options = options
        self.cache = cache or Cache(None)

    @cached_property
    def registry(self) -> SchemaRegistry:
        return SchemaRegistry(
            list(self.options.schema_locations),
            self.options.kubernetes_version,
            self.options.strict,
        )

    @cached_property
    def policy_settings(self) -> PolicySettings | None:
        if self.options.policy_pack is None:
            return None
        load_pack(self.options.policy_pack)
        return load_settings(self.options.policy_config)

    @cached_property
    def fingerprint(self) -> str:
        """Everything besides the inputs that decides a target's findings."""
        import kubernetes_validate

        hasher = FileHasher()
        parts = [
            code_fingerprint(),
            getattr(kubernetes_validate, "__version__", ""),
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

    def run(self, targets: list[Target]) -> Report:
        plans = self.renderer.plan(targets)
        clusters = self._cluster_contexts(plans)
        keys = [
            digest(
                plan.key,
                cluster.platform.key if cluster.platform else "",
                self.fingerprint,
            )
            for plan, cluster in zip(plans, clusters, strict=True)
        ]
        reports: list[TargetReport | None] = []
        for plan, key in zip(plans, keys, strict=True):
            cached = self.cache.get("validate", key)
            reports.append(TargetReport.from_json(plan.target, cached) if cached else None)
        missing = [i for i, report in enumerate(reports) if report is None]
        if missing:
            self._validate_missing(plans, clusters, keys, reports, missing)
        result = [r for r in reports if r is not None]
        if self.policy_settings is not None and self.policy_settings.problems:
            config = self.options.policy_config
            target = Target("file", display_path(config) if config else "policies")
            result.append(TargetReport(target, [], list(self.policy_settings.problems)))
        return Report(result)

    def _cluster_contexts(self, plans: list[Plan]) -> list[ClusterContext]:
        """Profile and platform plan for every target inside a cluster overlay."""
        from trainops.profile.model import load_profile

        contexts: list[ClusterContext] = []
        profiles: dict[Path, Any] = {}
        platforms: dict[Path, Plan] = {}
        own = {Path(p.target.path).resolve(): p for p in plans if p.target.kind == "kustomization"}
        needed: list[Path] = []
        for plan in plans:
            directory = _cluster_dir(plan.target)
            if directory is None:
                contexts.append(ClusterContext())
                continue
            if directory not in profiles:
                profiles[directory] = load_profile(directory / "cluster.yaml")
            if directory != Path(plan.target.path).resolve() and directory not in own:
                needed.append(directory)
            contexts.append(ClusterContext(profiles[directory]))
        extra = self.renderer.plan(
            [Target("kustomization", display_path(d)) for d in dict.fromkeys(needed)]
        )
        platforms.update(own)
        platforms.update({Path(p.target.path).resolve(): p for p in extra})
        for plan, context in zip(plans, contexts, strict=True):
            directory = _cluster_dir(plan.target)
            if directory is not None and directory != Path(plan.target.path).resolve():
                context.platform = platforms[directory]
        return contexts

    def _validate_missing(
        self,
        plans: list[Plan],
        clusters: list[ClusterContext],
        keys: list[str],
        reports: list[TargetReport | None],
        missing: list[int],
    ) -> None:
        first_error: InputError | None = None
        platform_docs: dict[str, list[Document]] = {}
        with ThreadPoolExecutor(max_workers=self.renderer.jobs) as pool:
            futures = {i: pool.submit(self.renderer.render_plan, plans[i]) for i in missing}
            by_key = {plans[i].key: futures[i] for i in missing}
            for i in missing:
                try:
                    result = futures[i].result()
                    platform = self._platform_documents(clusters[i], platform_docs, by_key)
                except InputError as exc:
                    first_error = first_error or exc
                    continue
                if first_error is None:
                    report = self.check(result, platform, clusters[i].profile)
                    reports[i] = report
                    self.cache.put("validate", keys[i], report.to_json())
        if first_error is not None:
            raise first_error

    def _platform_documents(
        self, cluster: ClusterContext, memo: dict[str, list[Document]], rendering: dict
    ) -> list[Document]:
        """The platform's documents without its CRDs (rules never need those)."""
        plan = cluster.platform
        if plan is None or self.policy_settings is None:
            return []
        if plan.key not in memo:
            memo.clear()  # targets arrive grouped by cluster: keep one platform in memory
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
    ) -> TargetReport:
        resources: list[ResourceResult] = []
        findings = list(result.findings)
        for doc in result.documents:
            if self.options.skips(doc):
                status = SKIPPED
            else:
                status, found = check_document(
                    doc,
                    self.registry,
                    self.options.ignore_missing_schemas,
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
            )
            findings.extend(evaluate(context, self.policy_settings))
        return TargetReport(result.target, resources, findings)


def _cluster_dir(target: Target) -> Path | None:
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
