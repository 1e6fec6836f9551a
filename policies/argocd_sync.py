"""Argo CD sync annotations as Argo CD v3.5.1 (its gitops-engine) reads them: hook types and
delete policies, sync waves, sync and compare options, and the order a sync applies and
waits for objects in.

From the code: an object whose `argocd.argoproj.io/hook` names no known type is still a
hook, but runs in no phase, so it is never applied (`hook.IsHook`, `syncPhases`); unknown
delete policies and non-integer waves are dropped without a word (`DeletePolicies`,
`syncwaves.Wave`); options are compared as exact strings, so `Prune=False` protects
nothing; a sync applies one (phase, wave) at a time and waits until everything of it is
healthy, so a workload that needs an object of a later wave, or a WaitForFirstConsumer
claim no pod of its wave mounts, waits for ever; hooks are deleted and created again at
every sync unless their delete policy says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import EVERY_KIND, Context, PodTemplate, Violation, pod_rule, resource_rule
from trainops.policy.pods import TRAINING_KINDS, dicts, gpu_count, mapping

ENGINE = "https://github.com/argoproj/argo-cd/blob/v3.5.1/gitops-engine/pkg"
CONTROLLER = "https://github.com/argoproj/argo-cd/blob/v3.5.1/controller"

HOOK = "argocd.argoproj.io/hook"
DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"
HELM_DELETE_POLICY = "helm.sh/hook-delete-policy"
WAVE = "argocd.argoproj.io/sync-wave"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
COMPARE_OPTIONS = "argocd.argoproj.io/compare-options"
HELM_HOOK = "helm.sh/hook"
HELM_WEIGHT = "helm.sh/hook-weight"
HELM_RESOURCE_POLICY = "helm.sh/resource-policy"

SYNC_PHASES = ("PreSync", "Sync", "PostSync", "SyncFail")
# common.NewHookType, plus the deletion hooks controller/hook.go runs.
HOOK_TYPES = frozenset({*SYNC_PHASES, "Skip", "PreDelete", "PostDelete"})
HELM_TYPES = {
    "pre-install": "PreSync",
    "pre-upgrade": "PreSync",
    "post-install": "PostSync",
    "post-upgrade": "PostSync",
}
DELETE_POLICIES = frozenset({"HookSucceeded", "HookFailed", "BeforeHookCreation"})
HELM_DELETE_POLICIES = {
    "before-hook-creation": "BeforeHookCreation",
    "hook-succeeded": "HookSucceeded",
    "hook-failed": "HookFailed",
}
_INTEGER = re.compile(r"^[+-]?\d+$")  # what strconv.Atoi accepts

# Sync options an object's annotation may carry (gitops-engine common/types.go and the
# controller's Prune/Delete handling), with the values Argo CD acts on.
RESOURCE_OPTIONS: dict[str, frozenset[str]] = {
    "SkipDryRunOnMissingResource": frozenset({"true"}),
    "Validate": frozenset({"false", "true"}),
    "PruneLast": frozenset({"true"}),
    "Replace": frozenset({"true", "false"}),
    "Force": frozenset({"true"}),
    "ServerSideApply": frozenset({"true", "false"}),
    "ClientSideApplyMigration": frozenset({"true", "false"}),
    "Prune": frozenset({"false", "confirm", "true"}),
    "Delete": frozenset({"false", "confirm", "true"}),
}
# Options of an Application's spec.syncPolicy.syncOptions (controller/sync.go), beyond those.
APP_OPTIONS: dict[str, frozenset[str]] = {
    **RESOURCE_OPTIONS,
    "CreateNamespace": frozenset({"true", "false"}),
    "PrunePropagationPolicy": frozenset({"foreground", "background", "orphan"}),
    "RespectIgnoreDifferences": frozenset({"true", "false"}),
    "FailOnSharedResource": frozenset({"true", "false"}),
    "ApplyOutOfSyncOnly": frozenset({"true", "false"}),
}
COMPARE = frozenset(
    {
        "IgnoreExtraneous",
        "ServerSideDiff=true",
        "ServerSideDiff=false",
        "IncludeMutationWebhook=true",
        "IncludeMutationWebhook=false",
    }
)
# Kinds whose health Argo CD computes itself (gitops-engine pkg/health): a sync waits for them.
BUILT_IN_HEALTH = frozenset({"Pod", "Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"})


def _annotations(doc: Document) -> dict[str, Any]:
    return mapping(doc.metadata.get("annotations"))


def _csv(value: Any) -> list[str]:
    """resource.GetAnnotationCSVs: split on commas, trim, drop empties and repeats."""
    return list(dict.fromkeys(v.strip() for v in str(value).split(",") if v.strip()))


def _sets(*keys: str):
    def predicate(doc: Document) -> bool:
        annotations = doc.metadata.get("annotations")
        return isinstance(annotations, dict) and any(k in annotations for k in keys)

    return predicate


def hook_types(doc: Document) -> list[str] | None:
    """The hook types Argo CD reads, or None for an object that is not a hook: those of its
    own annotation, else (none known there) those of Helm's (`hook.Types`)."""
    annotations = _annotations(doc)
    helm = HELM_HOOK in annotations and str(annotations[HELM_HOOK]) != "crd-install"
    if HOOK not in annotations and not helm:
        return None
    types = [t for t in _csv(annotations.get(HOOK, "")) if t in HOOK_TYPES]
    if not types and helm:
        values = _csv(annotations[HELM_HOOK])
        types = [HELM_TYPES[v] for v in values if v in HELM_TYPES]
        types += ["PreDelete" for v in values if v == "pre-delete"]
        types += ["PostDelete" for v in values if v == "post-delete"]
    return types


def delete_policies(doc: Document) -> list[str]:
    annotations = _annotations(doc)
    found = [p for p in _csv(annotations.get(DELETE_POLICY, "")) if p in DELETE_POLICIES]
    found += [
        HELM_DELETE_POLICIES[p]
        for p in _csv(annotations.get(HELM_DELETE_POLICY, ""))
        if p in HELM_DELETE_POLICIES
    ]
    return found or ["BeforeHookCreation"]


def wave(doc: Document) -> int:
    """syncwaves.Wave: the sync-wave annotation if it is an integer, else the Helm hook
    weight if that is one, else 0."""
    annotations = _annotations(doc)
    for key in (WAVE, HELM_WEIGHT):
        text = annotations.get(key)
        if text is not None and _INTEGER.match(str(text)):
            return int(str(text))
    return 0


def steps(doc: Document) -> list[tuple[int, int]]:
    """The (phase, wave) steps a sync applies `doc` in; empty for an object never applied
    during a sync (Skip, deletion hooks, unknown hook types)."""
    types = hook_types(doc)
    if types is None:
        phases = ["Sync"]
    else:
        phases = [t for t in types if t in ("PreSync", "Sync", "PostSync")]
    return [(("PreSync", "Sync", "PostSync").index(p), wave(doc)) for p in phases]


@resource_rule(
    id="argocd-hook-type",
    severity=ERROR,
    title="Hook annotations name hook types Argo CD knows",
    why="Argo CD treats every object with an argocd.argoproj.io/hook annotation as a hook, "
    "but runs a hook only in the phases its value names, compared exactly: PreSync, Sync, "
    "PostSync, SyncFail, Skip (and PreDelete, PostDelete on deletion). A value like presync, "
    "pre-sync or PostSynch makes a hook of no phase: the object is never applied, and the "
    "Job or resource it was meant to be never exists.",
    fix="Write the hook type exactly as Argo CD spells it (PreSync, Sync, PostSync, SyncFail, "
    "PreDelete, PostDelete, Skip), comma-separated for several.",
    kinds=EVERY_KIND,
    applies=_sets(HOOK),
    source=(
        ENGINE + "/sync/hook/hook.go#L26-L58",
        ENGINE + "/sync/sync_phase.go#L10-L27",
        ENGINE + "/sync/common/types.go#L114-L131",
        CONTROLLER + "/hook.go#L26-L41",
    ),
    when={
        "error": "no entry of the annotation is a hook type: the object is never applied",
        "warning": "some entries are not hook types (or a helm.sh/hook annotation gives the "
        "phases instead): the object skips those phases",
    },
)
def hook_type(doc: Document, ctx: Context) -> Iterator[Violation]:
    value = _annotations(doc).get(HOOK)
    entries = _csv(value) if value is not None else []
    unknown = [e for e in entries if e not in HOOK_TYPES]
    if value is None or (entries and not unknown):
        return
    path = ("metadata", "annotations", HOOK)
    if len(unknown) == len(entries) and not hook_types(doc):
        yield Violation(
            f"hook {value!r} names no hook type Argo CD knows: the object is a hook of no "
            "phase and is never applied",
            path,
        )
    else:
        yield Violation(
            f"hook {value!r}: Argo CD ignores {', '.join(unknown)} (hook types are case-sensitive)",
            path,
            severity=WARNING,
        )


@resource_rule(
    id="argocd-hook-delete-policy",
    severity=WARNING,
    title="Hook delete policies are ones Argo CD knows, on hooks",
    why="Argo CD keeps only the delete policies it knows (HookSucceeded, HookFailed, "
    "BeforeHookCreation, or Helm's hook-succeeded, hook-failed, before-hook-creation) and "
    "defaults to BeforeHookCreation when none is left: a misspelt HookSucceeded leaves every "
    "finished hook Job (and its pods) in place until the next sync. On an object that is not "
    "a hook the annotation does nothing.",
    fix="Spell the policy as Argo CD does (HookSucceeded, HookFailed, BeforeHookCreation), "
    "and put it on an object that has argocd.argoproj.io/hook.",
    kinds=EVERY_KIND,
    applies=_sets(DELETE_POLICY, HELM_DELETE_POLICY),
    source=(ENGINE + "/sync/hook/helm/delete_policy.go#L19-L42",),
)
def hook_delete_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    annotations = _annotations(doc)
    kept = {DELETE_POLICY: DELETE_POLICIES, HELM_DELETE_POLICY: HELM_DELETE_POLICIES}
    named = [(key, _csv(annotations[key])) for key in kept if key in annotations]
    everything_unknown = all(p not in kept[key] for key, values in named for p in values)
    for key, values in named:
        path = ("metadata", "annotations", key)
        unknown = [p for p in values if p not in kept[key]]
        if unknown:
            yield Violation(
                f"{key} {annotations[key]!r}: Argo CD ignores {', '.join(unknown)}"
                + (
                    " and deletes the hook only before it creates it again (BeforeHookCreation)"
                    if everything_unknown
                    else ""
                ),
                path,
            )
        if hook_types(doc) is None:
            yield Violation(
                f"{key} on an object that is not a hook: Argo CD never reads it",
                path,
            )


@resource_rule(
    id="argocd-sync-wave",
    severity=WARNING,
    title="Sync waves are integers",
    why="Argo CD reads argocd.argoproj.io/sync-wave (and helm.sh/hook-weight) with "
    "strconv.Atoi; anything else (1.5, ' -1', 'first', -1 written as a YAML list) is "
    "silently wave 0, so the object syncs together with everything unordered instead of "
    "before or after it.",
    fix='Write the wave as a quoted integer: argocd.argoproj.io/sync-wave: "-1".',
    kinds=EVERY_KIND,
    applies=_sets(WAVE, HELM_WEIGHT),
    source=ENGINE + "/sync/syncwaves/waves.go#L12-L21",
)
def sync_wave(doc: Document, ctx: Context) -> Iterator[Violation]:
    annotations = _annotations(doc)
    for key in (WAVE, HELM_WEIGHT):
        if key in annotations and not _INTEGER.match(str(annotations[key])):
            yield Violation(
                f"{key}: {annotations[key]!r} is not an integer: Argo CD uses wave {wave(doc)}",
                ("metadata", "annotations", key),
            )


def _option_problems(options: list[str], known: dict[str, frozenset[str]]) -> Iterator[str]:
    for option in options:
        key, equals, value = option.partition("=")
        if key not in known or not equals:
            close = [k for k in known if k.lower() == key.lower()]
            hint = f" (did you mean {close[0]}?)" if close and close[0] != key else ""
            yield f"{option!r} is not a sync option Argo CD knows{hint}: it is ignored"
        elif value not in known[key]:
            yield (
                f"{option!r}: Argo CD compares the value exactly and does not act on "
                f"{value!r} (it knows {', '.join(sorted(known[key]))})"
            )


def _unprotected(options: list[str]) -> list[str]:
    """Prune=/Delete= options whose value was meant to protect the object and does not."""
    found = []
    for option in options:
        key, _, value = option.partition("=")
        if (
            key in ("Prune", "Delete")
            and value.lower() in ("false", "confirm", "no", "off")
            and value not in ("false", "confirm")
        ):
            found.append(option)
    return found


def _app_sync_options(doc: Document) -> tuple[tuple[Any, ...], list[str]] | None:
    spec = mapping(doc.obj.get("spec"))
    base: tuple[Any, ...] = ("spec",)
    if doc.kind == "ApplicationSet":
        spec, base = (
            mapping(mapping(spec.get("template")).get("spec")),
            ("spec", "template", "spec"),
        )
    options = mapping(spec.get("syncPolicy")).get("syncOptions")
    if not isinstance(options, list):
        return None
    return (*base, "syncPolicy", "syncOptions"), [str(o).strip() for o in options]


def _sync_options_apply(doc: Document) -> bool:
    return _sets(SYNC_OPTIONS)(doc) or doc.kind in ("Application", "ApplicationSet")


@resource_rule(
    id="argocd-sync-options",
    severity=WARNING,
    title="Sync options are ones Argo CD knows, spelt as it compares them",
    why="Argo CD looks sync options up as exact strings (HasOption, GetAnnotationOptionValue): "
    "an unknown or misspelt option (SkipDryRunOnMissingResources=true, CreateNamespace=True, "
    "ServerSideApply=yes) is ignored without a word, and Prune=False or Delete=False does "
    "not protect anything: only the lower-case false (or confirm) does, so the claim is "
    "pruned when it leaves Git, or deleted with its Application, and its data with it.",
    fix="Use the options exactly as Argo CD documents them (Prune=false, Delete=false, "
    "ServerSideApply=true, SkipDryRunOnMissingResource=true, CreateNamespace=true).",
    kinds=EVERY_KIND,
    applies=_sync_options_apply,
    source=(
        ENGINE + "/sync/sync_context.go#L322-L342",
        CONTROLLER + "/appcontroller.go#L1252-L1261",
        ENGINE + "/sync/resource/annotations.go",
    ),
    when={
        "error": "a Prune= or Delete= option meant to keep a PersistentVolumeClaim (or a "
        "Namespace) does not: the object and its data are deleted on prune or app deletion",
        "warning": "any other unknown option or value, which Argo CD ignores",
    },
)
def sync_options(doc: Document, ctx: Context) -> Iterator[Violation]:
    annotations = _annotations(doc)
    if SYNC_OPTIONS in annotations:
        options = _csv(annotations[SYNC_OPTIONS])
        path = ("metadata", "annotations", SYNC_OPTIONS)
        unprotected = _unprotected(options)
        for problem in _option_problems(options, RESOURCE_OPTIONS):
            keeps = any(repr(o) in problem for o in unprotected)
            data = doc.kind in ("PersistentVolumeClaim", "Namespace") and keeps
            yield Violation(
                problem
                + (
                    f": {doc.kind} {doc.name} is not protected and is deleted on "
                    "prune or with its Application"
                    if data
                    else ""
                ),
                path,
                severity=ERROR if data else None,
            )
    found = _app_sync_options(doc) if doc.kind in ("Application", "ApplicationSet") else None
    if found is not None:
        path, options = found
        for problem in _option_problems(options, APP_OPTIONS):
            yield Violation(problem, path)


@resource_rule(
    id="argocd-helm-resource-policy",
    severity=WARNING,
    title="helm.sh/resource-policy is the lower-case keep Argo CD compares",
    why="Helm lower-cases and trims helm.sh/resource-policy before it compares it with keep, "
    "but Argo CD's application controller keeps an object on cascading deletion only when "
    "one comma-separated value is exactly keep (HasAnnotationOption): Keep or KEEP, which "
    "Helm honours, is ignored by Argo CD, and the claim is deleted with its Application, "
    "its volume with it.",
    fix="Write helm.sh/resource-policy: keep (lower case), or use "
    "argocd.argoproj.io/sync-options: Delete=false.",
    kinds=EVERY_KIND,
    applies=_sets(HELM_RESOURCE_POLICY),
    source=(CONTROLLER + "/appcontroller.go#L1251-L1261",),
    when={
        "error": "a PersistentVolumeClaim or Namespace meant to be kept is deleted with its "
        "Application (its data with it)",
        "warning": "any other object, or a value that is not keep in any case",
    },
)
def helm_resource_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    values = _csv(_annotations(doc)[HELM_RESOURCE_POLICY])
    if "keep" in values:
        return
    meant = any(v.lower() == "keep" for v in values)
    data = meant and doc.kind in ("PersistentVolumeClaim", "Namespace")
    yield Violation(
        f"helm.sh/resource-policy {', '.join(values) or '(empty)'!r} is not keep as Argo CD "
        "compares it (exact, lower case)"
        + (f": {doc.kind} {doc.name} is deleted with its Application" if data else ""),
        ("metadata", "annotations", HELM_RESOURCE_POLICY),
        severity=ERROR if data else None,
    )


@resource_rule(
    id="argocd-compare-options",
    severity=WARNING,
    title="Compare options are ones Argo CD knows",
    why="argocd.argoproj.io/compare-options is read as exact strings (IgnoreExtraneous, "
    "ServerSideDiff=true|false, IncludeMutationWebhook=true); any other spelling is "
    "ignored, so the object still counts as out of sync (or the diff mode stays as it was).",
    fix="Use IgnoreExtraneous, ServerSideDiff=true / ServerSideDiff=false or "
    "IncludeMutationWebhook=true exactly.",
    kinds=EVERY_KIND,
    applies=_sets(COMPARE_OPTIONS),
)
def compare_options(doc: Document, ctx: Context) -> Iterator[Violation]:
    for option in _csv(_annotations(doc).get(COMPARE_OPTIONS, "")):
        if option not in COMPARE:
            yield Violation(
                f"compare option {option!r} is not one Argo CD knows: it is ignored",
                ("metadata", "annotations", COMPARE_OPTIONS),
            )


def _sync_hook(doc: Document) -> bool:
    types = hook_types(doc)
    return bool(types) and any(t in SYNC_PHASES for t in types)


@resource_rule(
    id="argocd-hook-claim",
    severity=ERROR,
    title="Claims are not sync hooks that Argo CD deletes",
    why="A sync hook is deleted by its delete policy: BeforeHookCreation (the default) deletes "
    "it at the start of every later sync and creates it again, HookSucceeded right after its "
    "phase. A PersistentVolumeClaim declared as a hook therefore loses its volume, and with "
    "a Delete reclaim policy every checkpoint or dataset on it, at the next sync.",
    fix="Make the claim an ordinary resource (drop argocd.argoproj.io/hook) and order it with "
    'argocd.argoproj.io/sync-wave: "-1"; protect it with sync-options Prune=false,Delete=false.',
    kinds=("PersistentVolumeClaim",),
    applies=_sets(HOOK, HELM_HOOK),
    source=(
        ENGINE + "/sync/hook/delete_policy.go#L11-L26",
        ENGINE + "/sync/sync_task.go#L121-L148",
        ENGINE + "/sync/sync_context.go#L1651-L1660",
    ),
)
def hook_claim(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not _sync_hook(doc):
        return
    policies = delete_policies(doc)
    deleting = [p for p in policies if p in ("BeforeHookCreation", "HookSucceeded")]
    if deleting:
        when = "at the next sync" if "BeforeHookCreation" in deleting else "when its phase succeeds"
        yield Violation(
            f"claim {doc.name} is an Argo CD hook with delete policy {', '.join(policies)}: "
            f"Argo CD deletes it {when}, and its volume with it",
            ("metadata", "annotations"),
        )


def _training(doc: Document, ctx: Context) -> bool:
    if doc.kind in TRAINING_KINDS or doc.kind in ("JobSet", "LeaderWorkerSet"):
        return True
    return doc.kind == "Job" and any(
        gpu_count(c) > 0 for pod in ctx.pods(doc) for _, _, c in pod.all_containers
    )


@resource_rule(
    id="argocd-training-hook",
    severity=WARNING,
    title="Training jobs are ordinary resources, not sync hooks",
    why="Argo CD runs a hook at every sync operation and, with the default BeforeHookCreation "
    "policy, first deletes the previous one: a training job declared as a hook is deleted and "
    "started from scratch by the next sync of its Application (any Git change, a manual "
    "sync), losing the work since its last checkpoint; HookSucceeded deletes a finished run "
    "with its logs, and the sync waits for the whole run to finish.",
    fix="Drop argocd.argoproj.io/hook from the job and let Argo CD sync it as a resource "
    "(order it with sync waves).",
    kinds=tuple(sorted({*TRAINING_KINDS, "JobSet", "LeaderWorkerSet", "Job"})),
    applies=_sets(HOOK, HELM_HOOK),
)
def training_hook(doc: Document, ctx: Context) -> Iterator[Violation]:
    if _sync_hook(doc) and _training(doc, ctx):
        yield Violation(
            f"{doc.kind} {doc.name} is an Argo CD hook ({', '.join(hook_types(doc) or [])}, "
            f"delete policy {', '.join(delete_policies(doc))}): every sync deletes and "
            "restarts it",
            ("metadata", "annotations"),
        )


def _references(pod: PodTemplate) -> Iterator[tuple[str, str, tuple[Any, ...]]]:
    """The namespaced objects a pod cannot start without: (kind, name, path)."""
    spec = pod.spec
    for index, volume in enumerate(dicts(spec.get("volumes"))):
        at = (*pod.path, "volumes", index)
        claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
        if claim:
            yield "PersistentVolumeClaim", str(claim), at
        config = mapping(volume.get("configMap"))
        if config.get("name") and config.get("optional") is not True:
            yield "ConfigMap", str(config["name"]), at
        secret = mapping(volume.get("secret"))
        if secret.get("secretName") and secret.get("optional") is not True:
            yield "Secret", str(secret["secretName"]), at
        for source in dicts(mapping(volume.get("projected")).get("sources")):
            for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
                ref = mapping(source.get(key))
                if ref.get("name") and ref.get("optional") is not True:
                    yield kind, str(ref["name"]), at
    for key, index, container in pod.all_containers:
        at = (*pod.path, key, index)
        for entry in dicts(container.get("envFrom")):
            for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                ref = mapping(entry.get(field))
                if ref.get("name") and ref.get("optional") is not True:
                    yield kind, str(ref["name"]), (*at, "envFrom")
        for entry in dicts(container.get("env")):
            source = mapping(entry.get("valueFrom"))
            for kind, field in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                ref = mapping(source.get(field))
                if ref.get("name") and ref.get("optional") is not True:
                    yield kind, str(ref["name"]), (*at, "env")
    account = spec.get("serviceAccountName")
    if account and account != "default":
        yield "ServiceAccount", str(account), (*pod.path, "serviceAccountName")


_PHASE_NAMES = ("PreSync", "Sync", "PostSync")


def _step_name(step: tuple[int, int]) -> str:
    return f"{_PHASE_NAMES[step[0]]} wave {step[1]}"


@pod_rule(
    id="argocd-wave-order",
    severity=ERROR,
    title="Workloads sync no earlier than the objects their pods need",
    why="A sync applies one phase and wave at a time and waits until everything in it is "
    "healthy before the next. A Job, Pod or Deployment in an earlier wave (or a PreSync hook) "
    "than the claim, ConfigMap, Secret or ServiceAccount its pods need cannot start its pods, "
    "so it never becomes healthy, the later wave is never applied and the sync hangs.",
    fix="Put what the pods need in an earlier wave than the workload (claims, ConfigMaps, "
    'Secrets and ServiceAccounts at argocd.argoproj.io/sync-wave: "-1"), or in the same one.',
    source=(
        ENGINE + "/sync/sync_context.go#L540-L596",
        ENGINE + "/sync/sync_context.go#L659-L664",
        ENGINE + "/health/health_job.go#L30-L80",
    ),
    when={
        "error": "the workload is a kind whose health Argo CD computes itself (Pod, Job, "
        "Deployment, StatefulSet, DaemonSet, ReplicaSet)",
        "warning": "a custom kind, which Argo CD waits for only when argocd-cm gives it a "
        "health check (trainops' argocd/health does for training jobs)",
    },
)
def wave_order(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    doc = pod.doc
    own = steps(doc)
    if not own:
        return
    first = min(own)
    namespace = doc.namespace or "default"
    seen: set[tuple[str, str]] = set()
    for kind, name, path in _references(pod):
        if (kind, name) in seen:
            continue
        seen.add((kind, name))
        needed = ctx.find(kind, name, namespace)
        if needed is None or needed is doc:
            continue
        later = steps(needed)
        if later and min(later) > first:
            yield Violation(
                f"{doc.kind} {doc.name} syncs in {_step_name(first)} but its pods need "
                f"{kind} {name}, which syncs in {_step_name(min(later))}: the sync waits for "
                "pods that cannot start",
                path,
                severity=ERROR if doc.kind in BUILT_IN_HEALTH else WARNING,
            )


def _claim_consumers(ctx: Context) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """Per (namespace, claim), the sync steps of the pods that mount it."""
    found: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for doc in ctx.documents:
        for pod in ctx.pods(doc):
            for volume in dicts(pod.spec.get("volumes")):
                claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
                if claim:
                    key = (doc.namespace or "default", str(claim))
                    found.setdefault(key, []).extend(steps(doc))
    return found


def _last_step(ctx: Context) -> tuple[int, int] | None:
    every = [step for doc in ctx.documents for step in steps(doc)]
    return max(every) if every else None


@resource_rule(
    id="argocd-wffc-claim-wave",
    severity=ERROR,
    title="A WaitForFirstConsumer claim syncs with a pod that mounts it",
    why="Argo CD reports a Pending claim as Progressing and waits for it before the next wave. "
    "A claim of a WaitForFirstConsumer storage class stays Pending until a pod that mounts it "
    "is scheduled, so a claim in an earlier wave than every pod of the sync that mounts it "
    "(or mounted by none of them, with later waves to come) is never bound and the sync "
    "hangs at its wave.",
    fix="Sync the claim in the same wave as the first workload that mounts it, or use a "
    "storage class with volumeBindingMode: Immediate for claims synced ahead of their pods.",
    kinds=("PersistentVolumeClaim",),
    render_needs=("StorageClass",),
    source=(
        ENGINE + "/health/health_pvc.go",
        ENGINE + "/sync/sync_context.go#L540-L596",
    ),
)
def wffc_claim_wave(doc: Document, ctx: Context) -> Iterator[Violation]:
    own = steps(doc)
    if not own or _sync_hook(doc):
        return
    spec = mapping(doc.obj.get("spec"))
    if spec.get("volumeName"):
        return  # bound to a named volume: no consumer needed
    name = spec.get("storageClassName")
    storage_class = ctx.find("StorageClass", str(name)) if name else None
    if (
        storage_class is None
        or storage_class.obj.get("volumeBindingMode") != "WaitForFirstConsumer"
    ):
        return
    last = ctx.memo(("argocd-last-step",), lambda: _last_step(ctx))
    step = min(own)
    if last is None or last <= step:
        return  # nothing syncs after the claim: the sync does not wait on it
    consumers = ctx.memo(("argocd-claim-consumers",), lambda: _claim_consumers(ctx))
    mounted = consumers.get((doc.namespace or "default", doc.name), [])
    if any(s <= step for s in mounted):
        return
    what = (
        f"the first pod mounting it syncs in {_step_name(min(mounted))}"
        if mounted
        else "no pod of this sync mounts it"
    )
    yield Violation(
        f"claim {doc.name} (StorageClass {name}, WaitForFirstConsumer) syncs in "
        f"{_step_name(step)} and {what}: it stays Pending and the sync waits for it",
        ("metadata", "annotations"),
    )


@resource_rule(
    id="argocd-hook-generate-name",
    severity=WARNING,
    title="Hooks with generateName are deleted when they are done",
    why="Argo CD names a generateName hook after the revision, phase and start time of each "
    "sync, so BeforeHookCreation (the default delete policy), which deletes an existing hook "
    "of the same name, never finds one: every sync leaves another finished Job and its pods "
    "behind.",
    fix="Give the hook argocd.argoproj.io/hook-delete-policy: HookSucceeded (or a fixed "
    "metadata.name).",
    kinds=EVERY_KIND,
    applies=_sets(HOOK, HELM_HOOK),
    source=ENGINE + "/sync/sync_context.go#L981-L996",
)
def hook_generate_name(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.metadata.get("name") or not doc.metadata.get("generateName") or not _sync_hook(doc):
        return
    if set(delete_policies(doc)) == {"BeforeHookCreation"}:
        yield Violation(
            f"hook with generateName {doc.metadata['generateName']!r} and only "
            "BeforeHookCreation: each sync creates another one and none is deleted",
            ("metadata", "generateName"),
        )


def _live_metadata(doc: Document) -> bool:
    metadata = doc.metadata
    return any(metadata.get(k) for k in ("resourceVersion", "uid", "ownerReferences"))


@resource_rule(
    id="argocd-live-metadata",
    severity=ERROR,
    title="Manifests in Git carry no metadata of a live object",
    why="A manifest exported from a cluster (kubectl get -o yaml) keeps the fields the API "
    "server wrote: with metadata.resourceVersion the create is refused ('resourceVersion "
    "should not be set on objects to be created') and a stale one makes every later apply "
    "a conflict; a uid is another object's and cannot be applied to the new one; "
    "ownerReferences to an owner that no longer exists make the garbage collector delete "
    "the object, and self-heal creates it again.",
    fix="Drop metadata.resourceVersion, uid, ownerReferences (and creationTimestamp, "
    "managedFields, status) from the manifest.",
    kinds=EVERY_KIND,
    applies=_live_metadata,
    source="https://github.com/kubernetes/apiserver/blob/v0.35.0/pkg/storage/etcd3/store.go",
    when={
        "error": "metadata.resourceVersion: the API server refuses to create the object",
        "warning": "metadata.uid or ownerReferences, which fail or loop on a later sync",
    },
)
def live_metadata(doc: Document, ctx: Context) -> Iterator[Violation]:
    metadata = doc.metadata
    if metadata.get("resourceVersion"):
        yield Violation(
            f"metadata.resourceVersion {metadata['resourceVersion']!r} is set: the API server "
            "refuses to create the object, and a stale one conflicts on every apply",
            ("metadata", "resourceVersion"),
        )
    if metadata.get("uid"):
        yield Violation(
            f"metadata.uid {metadata['uid']!r} is a live object's: an object created from this "
            "manifest gets another uid, and applying this one to it fails",
            ("metadata", "uid"),
            severity=WARNING,
        )
    if metadata.get("ownerReferences"):
        owners = ", ".join(
            f"{o.get('kind')} {o.get('name')}" for o in dicts(metadata.get("ownerReferences"))
        )
        yield Violation(
            f"ownerReferences ({owners}) point at live objects by uid: without them the "
            "garbage collector deletes this object",
            ("metadata", "ownerReferences"),
            severity=WARNING,
        )
