"""`trainops validate`: render -> schema check -> policy checks -> one Report.

Each target's result is cached under a key made of its inputs' content key
and everything else that decides the outcome (schemas, Kubernetes version,
options), so an unchanged overlay is neither rendered nor parsed again.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from trainops import __version__
from trainops.cache import Cache, FileHasher, digest
from trainops.errors import InputError
from trainops.model import ERROR, INFO, WARNING, Document, Finding, Target
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

    def skips(self, doc: Document) -> bool:
        return doc.kind in self.skip or f"{doc.api_version}/{doc.kind}" in self.skip


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
    def fingerprint(self) -> str:
        """Everything besides the inputs that decides a target's findings."""
        import kubernetes_validate

        hasher = FileHasher()
        parts = [
            __version__,
            kubernetes_validate.__version__ if hasattr(kubernetes_validate, "__version__") else "",
            minor_version(self.options.kubernetes_version),
            repr(self.options),
        ]
        for location in self.options.schema_locations:
            static = Path(location.split("{{", 1)[0])
            folder = static if static.is_dir() else static.parent
            if location != "default" and folder.is_dir() and "://" not in location:
                for path in sorted(p for p in folder.rglob("*.json") if p.is_file()):
                    parts += [str(path.relative_to(folder)), hasher(path)]
        return digest(*parts)

    def run(self, targets: list[Target]) -> Report:
        plans = self.renderer.plan(targets)
        keys = [digest(plan.key, self.fingerprint) for plan in plans]
        reports: list[TargetReport | None] = []
        for plan, key in zip(plans, keys, strict=True):
            cached = self.cache.get("validate", key)
            reports.append(TargetReport.from_json(plan.target, cached) if cached else None)
        missing = [i for i, report in enumerate(reports) if report is None]
        if missing:
            self._validate_missing(plans, keys, reports, missing)
        return Report([r for r in reports if r is not None])

    def _validate_missing(
        self,
        plans: list[Plan],
        keys: list[str],
        reports: list[TargetReport | None],
        missing: list[int],
    ) -> None:
        first_error: InputError | None = None
        with ThreadPoolExecutor(max_workers=self.renderer.jobs) as pool:
            futures = {i: pool.submit(self.renderer.render_plan, plans[i]) for i in missing}
            for i in missing:
                try:
                    result = futures[i].result()
                except InputError as exc:
                    first_error = first_error or exc
                    continue
                if first_error is None:
                    report = self.check(result)
                    reports[i] = report
                    self.cache.put("validate", keys[i], report.to_json())
        if first_error is not None:
            raise first_error

    def check(self, result: RenderResult) -> TargetReport:
        resources: list[ResourceResult] = []
        findings = list(result.findings)
        for doc in result.documents:
            if self.options.skips(doc):
                status = SKIPPED
            else:
                status, found = check_document(
                    doc, self.registry, self.options.ignore_missing_schemas
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
        return TargetReport(result.target, resources, findings)
