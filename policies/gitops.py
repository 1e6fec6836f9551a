"""GitOps lifecycle: what Argo CD does to runs, big CRDs, resources whose CRD is late,
objects a controller scales, unnamed objects and ApplicationSet templates."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy import EVERY_KIND, Context, Violation, render_rule, resource_rule
from trainops.policy.pods import REPLICA_FIELDS, mapping
from trainops.profile.projects import RUN_KINDS

SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
ANNOTATION_LIMIT = 262144  # bytes kubectl's last-applied-configuration annotation may hold


def _sync_options(doc: Document) -> set[str]:
    annotations = doc.metadata.get("annotations") or {}
    return {o.strip() for o in str(annotations.get(SYNC_OPTIONS, "")).split(",") if o.strip()}


@resource_rule(
    id="run-kind-synced",
    security=True,
    severity=ERROR,
    title="A run holds only the job kinds its Argo CD project syncs",
    why="Runs sync under projects (trainops-runs, a team's) whose whitelist holds the job "
    "kinds alone and no cluster-scoped kind. Argo CD checks every object of a sync against "
    "it before applying any: one other object (a ConfigMap, a policy, a Role) fails it with "
    '"resource GROUP:KIND is not permitted in project", and nothing of the run is applied. '
    "Nor can a run change the platform's objects: validate checks a run against the "
    "platform's policies, parameters and namespaces, not a run's copies of them.",
    fix="Keep only the job (and its data-preparation Job) in the run; anything else the run "
    "needs belongs to the platform (overlays/<cluster>/, through cluster.yaml).",
    kinds=EVERY_KIND,
    source=(
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/controller/sync.go#L657-L659",
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/gitops-engine/pkg/sync/sync_context.go#L1090-L1093",
    ),
)
def run_kind_synced(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not ctx.is_run:
        return
    group = doc.api_version.rpartition("/")[0]
    if (group, doc.kind) not in RUN_KINDS:
        allowed = ", ".join(kind for _, kind in RUN_KINDS)
        yield Violation(
            f"{doc.kind} ({group or 'core'}) in a run: its Argo CD project syncs only "
            f"{allowed}, so the sync fails and nothing of the run is applied",
            ("kind",),
        )


ARGO = "https://github.com/argoproj/argo-cd/blob/v3.5.1"


@render_rule(
    id="run-application-name-unique",
    severity=ERROR,
    title="A run's Argo CD Application name is no other directory's",
    why="The ApplicationSets name a run's Application from its path: <cluster>-<run> for "
    "the platform's runs, <cluster>-<team>-<run> for a team's, <cluster>-platform and "
    "<cluster>-<addon> for the cluster's own. Two directories that come to the same name "
    "(platform run vision-x and team vision's run x, cluster a's run b-x and cluster a-b's "
    "run x, a run named platform) get one Application: within one ApplicationSet the "
    "controller refuses the second as a duplicate name, across two the one that did not "
    'create it cannot take it over ("already owned by another ApplicationSet '
    'controller"). One of the two directories is never synced, and which one depends '
    "on what was created first.",
    fix="Rename the run directory (its job with it) to a name no other directory's "
    "Application has: `trainops new-run` refuses a name that is taken.",
    source=(
        ARGO + "/applicationset/controllers/applicationset_controller.go#L543-L550",
        ARGO + "/applicationset/controllers/applicationset_controller.go#L734-L745",
        "https://github.com/kubernetes-sigs/controller-runtime/blob/v0.24.1/"
        "pkg/controller/controllerutil/controllerutil.go#L97-L100",
    ),
)
def run_application_name_unique(ctx: Context) -> Iterator[tuple[Document | None, Violation]]:
    conflict = ctx.name_conflict
    if conflict is None:
        return
    job = next(
        (d for d in ctx.documents if (d.api_version.rpartition("/")[0], d.kind) in RUN_KINDS),
        None,
    )
    message = (
        f"run {run_name(ctx)}: its Argo CD Application would be named {conflict.name}, as "
        f"that of {', '.join(conflict.others)} is: only one of them is ever synced"
    )
    yield job, Violation(message, ("metadata", "name") if job else ())


# Sync options and hooks that let Argo CD delete or overwrite a live object whatever
# Application it belongs to: in a run, that object may be another run's job.
RUN_REFUSED_OPTIONS = ("Replace=true", "Force=true")
HOOK_ANNOTATIONS = ("argocd.argoproj.io/hook", "argocd.argoproj.io/hook-delete-policy")


def run_name(ctx: Context) -> str | None:
    """The run directory's name: overlays/<cluster>/[teams/<team>/]runs/<run>[/file]."""
    parts = ctx.target.path.replace("\\", "/").split("/")
    index = len(parts) - 1 - parts[::-1].index("runs") if "runs" in parts else None
    if index is None or index + 1 >= len(parts):
        return None
    return parts[index + 1]


@resource_rule(
    id="run-job-own-name",
    security=True,
    severity=ERROR,
    title="A run's jobs are its own: named after the run, synced as plain resources",
    why="A run's checkpoint directory is its job's name (subPathExpr $(TRAINER_JOB_NAME), "
    "from the controller's job label), and two Applications may manage one object. A job "
    "named after another run, of any kind, reads, deletes or plants that run's "
    "checkpoints; one of the same kind and name, or a hook (deleted and recreated by name "
    "on every sync) or Replace/Force sync option, makes Argo CD overwrite or delete that "
    "run's live job.",
    fix="Name the job after the run directory (new-run does: the job is <run>, its data "
    "preparation <run>-prepare) and drop argocd.argoproj.io/hook* and the Replace=true or "
    "Force=true sync options from the run.",
    kinds=EVERY_KIND,
    source=(
        "docs/security.md#what-a-run-can-and-cannot-do",
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/gitops-engine/pkg/sync/sync_context.go#L1090-L1093",
    ),
)
def run_job_own_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    run = run_name(ctx) if ctx.is_run else None
    if run is None:
        return
    group = doc.api_version.rpartition("/")[0]
    allowed = (run, f"{run}-prepare")
    if (group, doc.kind) in RUN_KINDS and run.endswith("-prepare"):
        yield Violation(
            f"run {run}: a run's name does not end in -prepare, the name of run "
            f"{run.removesuffix('-prepare')}'s data-preparation Job",
            ("metadata", "name"),
        )
    elif (group, doc.kind) in RUN_KINDS and doc.name not in allowed:
        yield Violation(
            f"{doc.kind} {doc.name} in run {run}: a run's job is named {run} (its data "
            f"preparation {run}-prepare); another name is another run's checkpoint "
            "directory and live job",
            ("metadata", "name"),
        )
    annotations = mapping(doc.metadata.get("annotations"))
    for key in HOOK_ANNOTATIONS:
        if key in annotations:
            yield Violation(
                f"{key} in a run: Argo CD deletes and recreates a hook by name on each sync, "
                "another run's job included",
                ("metadata", "annotations", key),
            )
    for option in sorted(_sync_options(doc)):
        if option.startswith(RUN_REFUSED_OPTIONS):
            yield Violation(
                f"sync option {option} in a run: Argo CD would replace or delete the live "
                "object, whoever's it is",
                ("metadata", "annotations", SYNC_OPTIONS),
            )


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
        )


@resource_rule(
    id="crd-server-side-apply",
    severity=WARNING,
    title="CRDs too big for client-side apply are applied server-side",
    why="Client-side apply stores the whole object in an annotation limited to 262144 bytes; "
    "the training operator's CRDs are about 600 KB, so a plain sync fails on them. An "
    "Application that sets ServerSideApply=true for all its resources (trainops' "
    "ApplicationSets do) syncs them fine, and the CRD alone does not say which one syncs it.",
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
    render_needs=("CustomResourceDefinition",),
)
def skip_dry_run(doc: Document, ctx: Context) -> Iterator[Violation]:
    group = doc.api_version.rpartition("/")[0]
    if not group or doc.kind == "CustomResourceDefinition":
        return
    crd = ctx.crd(group, doc.kind)
    if crd is not None and "SkipDryRunOnMissingResource=true" not in _sync_options(doc):
        yield Violation(f"its CRD {crd.name} is in the same sync", ("metadata", "annotations"))


HOOK = "argocd.argoproj.io/hook"
# Kinds whose spec.replicas an autoscaler may own (scaleTargetRef kinds).
SCALABLE_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "LeaderWorkerSet")


@resource_rule(
    id="hpa-replicas-in-git",
    severity=WARNING,
    title="Objects an autoscaler scales leave spec.replicas out of Git",
    why="A HorizontalPodAutoscaler (or the one a KEDA ScaledObject creates) writes "
    "spec.replicas of its target. When Git sets it too, every sync (and every self-heal) "
    "resets the autoscaler's choice and the pods are scaled back and forth (argo-cd#5105).",
    fix="Remove spec.replicas from the target's manifest (the autoscaler's minReplicas applies), "
    "or tell Argo CD to ignore /spec/replicas of that object.",
    kinds=("HorizontalPodAutoscaler", "ScaledObject"),
)
def hpa_replicas(doc: Document, ctx: Context) -> Iterator[Violation]:
    target = mapping(mapping(doc.obj.get("spec")).get("scaleTargetRef"))
    # A ScaledObject's target kind defaults to Deployment (KEDA's scaleTargetRef).
    default = "Deployment" if doc.kind == "ScaledObject" else None
    kind, name = target.get("kind", default), target.get("name")
    if kind not in SCALABLE_KINDS or not isinstance(name, str):
        return
    scaled = ctx.find(str(kind), name, doc.namespace or None)
    if scaled is None or "replicas" not in mapping(scaled.obj.get("spec")):
        return
    replicas = mapping(scaled.obj.get("spec"))["replicas"]
    yield Violation(
        f"{kind} {name} sets spec.replicas: {replicas} in Git while this autoscaler scales it",
        ("spec", "scaleTargetRef"),
    )


def _unnamed(doc: Document) -> bool:
    return not doc.metadata.get("name")


@resource_rule(
    id="argocd-generate-name",
    severity=WARNING,
    title="Objects Argo CD syncs have a fixed name",
    why="Argo CD tracks and applies objects by name: one with only generateName cannot be "
    "applied (kubectl apply needs a name) unless it is a hook, so its sync fails "
    "(argo-cd#1639). Fine for `kubectl create`, not for GitOps.",
    fix="Give the object metadata.name, or make it an Argo CD hook "
    "(argocd.argoproj.io/hook: Sync, with a hook-delete-policy).",
    kinds=EVERY_KIND,
    applies=_unnamed,
    source=(
        "https://github.com/kubernetes/kubectl/blob/v0.35.0/pkg/cmd/apply/apply.go#L566",
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/gitops-engine/pkg/sync/sync_context.go#L987",
    ),
    when={
        "error": "in a run, which Argo CD syncs: kubectl apply refuses an object without a name",
        "warning": "elsewhere (an object that may be meant for kubectl create)",
    },
)
def generate_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    metadata = doc.metadata
    if metadata.get("name") or not metadata.get("generateName"):
        return
    if HOOK in mapping(metadata.get("annotations")):
        return
    yield Violation(
        f"generateName {metadata['generateName']!r} without a name",
        ("metadata", "generateName"),
        severity=ERROR if ctx.is_run else None,
    )


_PLACEHOLDER = re.compile(r"\{\{-?\s*([^{}]*?)\s*-?\}\}")
_FAST_PARAMETER = re.compile(r"^[A-Za-z_][\w-]*(\.[\w-]+|\[\d+\])*$")


@resource_rule(
    id="appset-template-syntax",
    severity=ERROR,
    title="ApplicationSet templates use the syntax their goTemplate setting selects",
    why="With goTemplate: true, parameters are Go template fields ({{.path.basename}}) and "
    "the git generator's path is a map ({{.path.path}}); without it, they are plain names "
    "({{path.basename}}). The other syntax renders as literal braces, a template error or "
    "'map[...]' in the Application's name or source path, and the Applications are invalid "
    "or point nowhere (argo-cd#20145).",
    fix="Match the placeholders to goTemplate: {{.path.basename}} / {{.path.path}} with "
    "goTemplate: true, {{path.basename}} / {{path}} without.",
    kinds=("ApplicationSet",),
    source=(
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/applicationset/utils/utils.go#L412",
        "https://github.com/argoproj/argo-cd/blob/v3.5.1/applicationset/utils/utils.go#L436",
    ),
)
def appset_template_syntax(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    go = spec.get("goTemplate") is True
    for path, text in _strings(spec.get("template"), ("spec", "template")):
        for match in _PLACEHOLDER.finditer(text):
            inner = match.group(1)
            if go and inner in (".path", "path"):
                yield Violation(
                    f"{match.group(0)} with goTemplate is the git generator's path map; "
                    "use {{.path.path}}",
                    path,
                )
            elif go and _FAST_PARAMETER.match(inner):
                yield Violation(
                    f"{match.group(0)} is fasttemplate syntax but goTemplate is on: "
                    f"write {{{{.{inner}}}}}",
                    path,
                )
            elif not go and inner.startswith("."):
                yield Violation(
                    f"{match.group(0)} is Go template syntax but goTemplate is off: it stays "
                    "literal",
                    path,
                )


def _strings(value: object, path: tuple) -> Iterator[tuple[tuple, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, index))
