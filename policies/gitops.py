"""GitOps lifecycle: what Argo CD does to runs, big CRDs and resources whose CRD is late."""

from __future__ import annotations

import json
from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy.engine import EVERY_KIND, Context, Violation, resource_rule
from trainops.policy.pods import REPLICA_FIELDS

SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
ANNOTATION_LIMIT = 262144  # bytes kubectl's last-applied-configuration annotation may hold


def _sync_options(doc: Document) -> set[str]:
    annotations = doc.metadata.get("annotations") or {}
    return {o.strip() for o in str(annotations.get(SYNC_OPTIONS, "")).split(",") if o.strip()}


@resource_rule(
    id="run-ttl",
    severity=WARNING,
    title="Runs are not deleted by TTL while Argo CD self-heals them",
    why="ttlSecondsAfterFinished deletes a finished job; an automated, self-healing Argo CD "
    "Application then recreates it from Git and the run starts all over again.",
    fix="Drop ttlSecondsAfterFinished from runs (delete finished runs by removing their "
    "directory, which leaves the job) or manage that Application without self-heal.",
    kinds=(*REPLICA_FIELDS, "Job"),
)
def run_ttl(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = doc.obj.get("spec") or {}
    annotations = doc.metadata.get("annotations") or {}
    if "argocd.argoproj.io/hook" in annotations:
        return  # hooks have their own delete policy
    holder = spec if doc.kind == "Job" else (spec.get("runPolicy") or {})
    if "ttlSecondsAfterFinished" in holder:
        path = ("spec",) if doc.kind == "Job" else ("spec", "runPolicy")
        yield Violation(
            f"ttlSecondsAfterFinished: {holder['ttlSecondsAfterFinished']} (Argo CD self-heal "
            "would recreate the finished run)",
            (*path, "ttlSecondsAfterFinished"),
            severity=ERROR if ctx.is_run else None,
        )


@resource_rule(
    id="crd-server-side-apply",
    severity=ERROR,
    title="CRDs too big for client-side apply are applied server-side",
    why="Client-side apply stores the whole object in an annotation limited to 262144 bytes; "
    "the training operator's CRDs are about 600 KB, so a plain sync fails on them.",
    fix="Annotate the CRD argocd.argoproj.io/sync-options: ServerSideApply=true (or set it on "
    "the Application).",
    kinds=("CustomResourceDefinition",),
)
def crd_server_side(doc: Document, ctx: Context) -> Iterator[Violation]:
    size = len(doc.text) if doc.text is not None else len(json.dumps(doc.obj))
    if size > ANNOTATION_LIMIT and "ServerSideApply=true" not in _sync_options(doc):
        yield Violation(
            f"{doc.name} is {size // 1024} KiB, over the 256 KiB client-side apply "
            "limit, without ServerSideApply=true",
            ("metadata", "annotations"),
        )


@resource_rule(
    id="argocd-skip-dry-run",
    severity=WARNING,
    title="Custom resources synced with their CRD skip the dry run",
    why="Argo CD dry-runs every object before the sync; a custom resource whose CRD is created "
    "by the same sync fails that dry run and blocks the whole sync.",
    fix="Annotate the resource argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true.",
    kinds=EVERY_KIND,
)
def skip_dry_run(doc: Document, ctx: Context) -> Iterator[Violation]:
    group = doc.api_version.rpartition("/")[0]
    if not group or doc.kind == "CustomResourceDefinition":
        return
    crd = ctx.crd(group, doc.kind)
    if crd is not None and "SkipDryRunOnMissingResource=true" not in _sync_options(doc):
        yield Violation(f"its CRD {crd.name} is in the same sync", ("metadata", "annotations"))
