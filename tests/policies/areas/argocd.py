"""Fixtures of the Argo CD rules written from Argo CD v3.5.1's own code (policies/argocd_sync.py,
policies/argocd_apps.py): per rule a render that breaks it and one that keeps it, each a
correct render changed in the one thing the rule checks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import (
    NAMESPACE,
    Docs,
    appproject,
    baseline,
    deployment,
    edit,
    indexed_job,
    job,
    platform,
    storage_class,
)

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]
REPO_URL = "https://github.com/example-org/trainops.git"
HOOK, DELETE, WAVE, OPTIONS, COMPARE, HELM_HOOK = (
    "hook",
    "delete",
    "wave",
    "options",
    "compare",
    "helm_hook",
)
KEYS = {
    HOOK: "argocd.argoproj.io/hook",
    DELETE: "argocd.argoproj.io/hook-delete-policy",
    WAVE: "argocd.argoproj.io/sync-wave",
    OPTIONS: "argocd.argoproj.io/sync-options",
    COMPARE: "argocd.argoproj.io/compare-options",
    HELM_HOOK: "helm.sh/hook",
}


def _annotate(doc: dict[str, Any], **annotations: str) -> dict[str, Any]:
    """`doc` with the annotations: keyword names are the keys' constants below."""
    doc["metadata"].setdefault("annotations", {}).update(
        {KEYS.get(k, k): v for k, v in annotations.items()}
    )
    return doc


def _config_map(**annotations: str) -> dict[str, Any]:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "prepare", "namespace": NAMESPACE},
        "data": {"run": "llama"},
    }
    return _annotate(doc, **annotations)


def _with_config_map(**annotations: str) -> Callable[[], Docs]:
    return edit(lambda docs: docs.append(_config_map(**annotations)))


def _claim(docs: Docs) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "PersistentVolumeClaim")


def _claim_annotated(**annotations: str) -> Callable[[], Docs]:
    return edit(lambda docs: _annotate(_claim(docs), **annotations))


def _job_annotated(**annotations: str) -> Callable[[], Docs]:
    return edit(lambda docs: _annotate(job(docs), **annotations))


def _indexed_waves(job_wave: str, claim_wave: str) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = platform()
        _annotate(_claim(docs), **{WAVE: claim_wave})
        return [*docs, _annotate(indexed_job(4), **{WAVE: job_wave})]

    return build


def _wffc(claim_wave: str) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = baseline()
        cephfs = storage_class("cephfs", "cephfs.csi.ceph.com")
        cephfs["volumeBindingMode"] = "WaitForFirstConsumer"
        _annotate(_claim(docs), **{WAVE: claim_wave})
        return [cephfs, *docs]

    return build


def _wffc_unmounted(claim_wave: str) -> Callable[[], Docs]:
    def build() -> Docs:
        cephfs = storage_class("cephfs", "cephfs.csi.ceph.com")
        cephfs["volumeBindingMode"] = "WaitForFirstConsumer"
        claim = _annotate(_claim(platform()), **{WAVE: claim_wave})
        return [cephfs, claim, _config_map()]

    return build


def application(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "project": "p",
        "source": {
            "repoURL": REPO_URL,
            "path": "overlays/prod/runs/llama",
            "targetRevision": "main",
        },
        "destination": {"name": "prod", "namespace": NAMESPACE},
    }
    body.update(spec)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "llama", "namespace": "argocd"},
        "spec": body,
    }


def _apps(**spec: Any) -> Callable[[], Docs]:
    return lambda: [appproject(False), application(**spec)]


def _project_windows(**window: Any) -> Callable[[], Docs]:
    def build() -> Docs:
        project = appproject(False)
        project["spec"]["syncWindows"] = [
            {
                "kind": "deny",
                "schedule": "0 22 * * *",
                "duration": "8h",
                "applications": ["*"],
                **window,
            }
        ]
        return [project]

    return build


def _appset(generators: list[dict[str, Any]], name: str = "{{.cluster}}-llama") -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "llama", "namespace": "argocd"},
        "spec": {
            "goTemplate": True,
            "generators": generators,
            "template": {
                "metadata": {"name": name},
                "spec": {
                    "project": "p",
                    "source": {"repoURL": REPO_URL, "path": "overlays/{{.cluster}}/runs/llama"},
                    "destination": {"name": "prod", "namespace": NAMESPACE},
                },
            },
            "syncPolicy": {"preserveResourcesOnDeletion": True},
        },
    }


def _clusters(*names: str) -> dict[str, Any]:
    return {"list": {"elements": [{"cluster": n} for n in names]}}


def _matrix(count: int) -> Callable[[], Docs]:
    children = [
        _clusters("prod"),
        {"list": {"elements": [{"run": "llama"}]}},
        {"list": {"elements": [{"size": "8b"}]}},
    ][:count]
    return lambda: [appproject(False), _appset([{"matrix": {"generators": children}}])]


def _merge(keys: list[str] | None) -> Callable[[], Docs]:
    merge: dict[str, Any] = {"generators": [_clusters("prod"), _clusters("prod", "dev")]}
    if keys is not None:
        merge["mergeKeys"] = keys
    return lambda: [appproject(False), _appset([{"merge": merge}])]


def _fast_list(element: dict[str, Any]) -> Callable[[], Docs]:
    """An ApplicationSet without goTemplate (fasttemplate) over one list element."""
    appset = _appset([{"list": {"elements": [element]}}], name="{{cluster}}-llama")
    appset["spec"]["goTemplate"] = False
    appset["spec"]["template"]["spec"]["source"]["path"] = "overlays/{{cluster}}/runs/llama"
    return lambda: [appproject(False), copy.deepcopy(appset)]


def _names(*clusters: str) -> Callable[[], Docs]:
    return lambda: [appproject(False), _appset([_clusters(*clusters)])]


def _copy(builder: Callable[[], Docs]) -> Callable[[], Docs]:
    return lambda: copy.deepcopy(builder())


def _options_appset(options: list[str]) -> dict[str, Any]:
    appset = _appset([_clusters("prod")])
    appset["spec"]["goTemplateOptions"] = options
    return appset


def _chart(**helm: Any) -> dict[str, Any]:
    return {
        "repoURL": REPO_URL,
        "path": "charts/serve",
        "targetRevision": "main",
        "helm": helm,
    }


def _generated_hook(**annotations: str) -> dict[str, Any]:
    """A data-preparation Job run as a PreSync hook, named by generateName."""
    hook = _config_map(**{HOOK: "PreSync"}, **annotations)
    hook["kind"] = "Job"
    hook["apiVersion"] = "batch/v1"
    del hook["metadata"]["name"], hook["data"]
    hook["metadata"]["generateName"] = "prepare-"
    hook["spec"] = {
        "backoffLimit": 2,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "prepare",
                        "image": "registry.example.com/prepare:1.0.0",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi"},
                            "limits": {"cpu": "1", "memory": "1Gi"},
                        },
                    }
                ],
            }
        },
    }
    return hook


FIXTURES: dict[str, Pair] = {
    "argocd-hook-type": (
        _with_config_map(**{HOOK: "presync"}),
        _with_config_map(**{HOOK: "PreSync", DELETE: "BeforeHookCreation"}),
    ),
    "argocd-hook-delete-policy": (
        _with_config_map(**{HOOK: "PreSync", DELETE: "HookSucceed"}),
        _with_config_map(**{HOOK: "PreSync", DELETE: "HookSucceeded"}),
    ),
    "argocd-sync-wave": (
        _with_config_map(**{WAVE: "1.5"}),
        _with_config_map(**{WAVE: "-1"}),
    ),
    "argocd-sync-options": (
        _claim_annotated(**{OPTIONS: "Prune=False,Delete=false"}),
        _claim_annotated(**{OPTIONS: "Prune=false,Delete=false"}),
    ),
    "argocd-helm-resource-policy": (
        _claim_annotated(**{"helm.sh/resource-policy": "Keep"}),
        _claim_annotated(**{"helm.sh/resource-policy": "keep"}),
    ),
    "argocd-compare-options": (
        _with_config_map(**{COMPARE: "IgnoreExtraneous=true"}),
        _with_config_map(**{COMPARE: "IgnoreExtraneous"}),
    ),
    "argocd-hook-claim": (
        _claim_annotated(**{HOOK: "PreSync"}),
        _claim_annotated(**{WAVE: "-1"}),
    ),
    "argocd-training-hook": (
        _job_annotated(**{HOOK: "Sync"}),
        _job_annotated(**{WAVE: "1"}),
    ),
    "argocd-wave-order": (_indexed_waves("-1", "0"), _indexed_waves("0", "-1")),
    "argocd-wffc-claim-wave": (_wffc("-1"), _wffc("0")),
    "argocd-project-exists": (_apps(project="q"), _apps(project="p")),
    "argocd-destination": (
        _apps(
            destination={"name": "prod", "server": "https://10.0.0.1:6443", "namespace": NAMESPACE}
        ),
        _apps(destination={"name": "prod", "namespace": NAMESPACE}),
    ),
    "argocd-app-sources": (
        _apps(sources=[{"repoURL": REPO_URL, "path": "overlays/prod/runs/llama"}]),
        lambda: [
            appproject(False),
            {
                **application(),
                "spec": {
                    **{k: v for k, v in application()["spec"].items() if k != "source"},
                    "sources": [{"repoURL": REPO_URL, "path": "overlays/prod/runs/llama"}],
                },
            },
        ],
    ),
    "appproject-source-permitted": (
        _apps(source={"repoURL": "https://github.com/example-org/experiments.git", "path": "x"}),
        _apps(source={"repoURL": "https://github.com/Example-Org/trainops", "path": "x"}),
    ),
    "appproject-destination-permitted": (
        _apps(destination={"name": "prod", "namespace": "kube-system"}),
        _apps(destination={"name": "prod", "namespace": NAMESPACE}),
    ),
    "appproject-sync-windows": (_project_windows(schedule="@daily"), _project_windows()),
    "applicationset-generators": (_matrix(3), _matrix(2)),
    "applicationset-generated-names": (_names("prod", "prod"), _names("prod", "dev")),
    "applicationset-go-template-options": (
        _copy(lambda: [appproject(False), _options_appset(["missingkey=fail"])]),
        _copy(lambda: [appproject(False), _options_appset(["missingkey=error"])]),
    ),
    "argocd-helm-values-ignored": (
        _apps(source=_chart(values="replicas: 2\n", valuesObject={"image": {"tag": "1.2"}})),
        _apps(source=_chart(valuesObject={"image": {"tag": "1.2"}, "replicas": 2})),
    ),
    "argocd-managed-namespace-metadata": (
        _apps(syncPolicy={"managedNamespaceMetadata": {"labels": {"team": "llm"}}}),
        _apps(
            syncPolicy={
                "managedNamespaceMetadata": {"labels": {"team": "llm"}},
                "syncOptions": ["CreateNamespace=true"],
            }
        ),
    ),
    "argocd-hook-generate-name": (
        _copy(lambda: [*platform(), _generated_hook()]),
        _copy(lambda: [*platform(), _generated_hook(**{DELETE: "HookSucceeded"})]),
    ),
    "appproject-create-namespace": (
        _apps(syncPolicy={"syncOptions": ["CreateNamespace=true"]}),
        _copy(
            lambda: [
                _namespace_project(),
                application(syncPolicy={"syncOptions": ["CreateNamespace=true"]}),
            ]
        ),
    ),
    "argocd-live-metadata": (
        edit(lambda docs: _claim(docs)["metadata"].update(resourceVersion="48213977")),
        edit(lambda docs: _claim(docs)["metadata"].update(labels={"app": "checkpoints"})),
    ),
    "argocd-retry-backoff": (
        _apps(syncPolicy={"retry": {"limit": 5, "backoff": {"duration": "1 minute"}}}),
        _apps(
            syncPolicy={"retry": {"limit": 5, "backoff": {"duration": "60", "maxDuration": "3m"}}}
        ),
    ),
}

MORE: dict[str, list[Pair]] = {
    "argocd-hook-type": [
        (_with_config_map(**{HOOK: ""}), _with_config_map(**{HOOK: "Skip"})),
        (_with_config_map(**{HOOK: "PreSync,Postsync"}), _with_config_map(**{HOOK: "PostDelete"})),
    ],
    "argocd-hook-delete-policy": [
        (
            _with_config_map(**{DELETE: "HookSucceeded"}),
            _with_config_map(**{HELM_HOOK: "pre-install", DELETE: "HookFailed"}),
        ),
        (
            _with_config_map(
                **{
                    HELM_HOOK: "pre-install",
                    "helm.sh/hook-delete-policy": "before-hook-creaton,hook-succeeded",
                }
            ),
            _with_config_map(
                **{
                    HELM_HOOK: "pre-install",
                    "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
                }
            ),
        ),
    ],
    "argocd-sync-options": [
        (
            _apps(syncPolicy={"syncOptions": ["CreateNamespace=True"]}),
            _apps(syncPolicy={"syncOptions": ["CreateNamespace=true", "ServerSideApply=true"]}),
        ),
        (
            _with_config_map(**{OPTIONS: "SkipDryRunOnMissingResources=true"}),
            _with_config_map(**{OPTIONS: "SkipDryRunOnMissingResource=true"}),
        ),
    ],
    "argocd-live-metadata": [
        (
            edit(
                lambda docs: _claim(docs)["metadata"].update(
                    ownerReferences=[
                        {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "0c1d-4e"}
                    ]
                )
            ),
            baseline,
        ),
    ],
    "argocd-hook-claim": [
        (
            _claim_annotated(**{HOOK: "PostSync", DELETE: "HookSucceeded"}),
            _claim_annotated(**{HOOK: "PostSync", DELETE: "HookFailed"}),
        ),
    ],
    "argocd-wave-order": [
        # A PreSync hook Job needing a claim of the Sync phase.
        (
            _copy(lambda: [*platform(), _annotate(indexed_job(4), **{HOOK: "PreSync"})]),
            _indexed_waves("0", "0"),
        ),
    ],
    "argocd-wffc-claim-wave": [
        # A claim no pod of the sync mounts, with a later wave to wait for.
        (_wffc_unmounted("-1"), _wffc_unmounted("0")),
    ],
    "appproject-source-permitted": [
        # Argo CD does not take an ssh address for the https one the project lists.
        (
            _apps(source={"repoURL": "git@github.com:example-org/trainops.git", "path": "x"}),
            _apps(source={"repoURL": REPO_URL, "path": "x"}),
        ),
    ],
    "appproject-destination-permitted": [
        # A generated cluster: the namespace alone matches no destination.
        (
            _apps(destination={"name": "{{.cluster}}", "namespace": "kube-system"}),
            _apps(destination={"name": "{{.cluster}}", "namespace": NAMESPACE}),
        ),
        (
            _copy(
                lambda: [
                    _server_project(),
                    application(
                        destination={"server": "https://10.0.0.2:6443", "namespace": NAMESPACE}
                    ),
                ]
            ),
            _copy(
                lambda: [
                    _server_project(),
                    application(
                        destination={"server": "https://10.0.0.1:6443/", "namespace": NAMESPACE}
                    ),
                ]
            ),
        ),
    ],
    "appproject-sync-windows": [
        (_project_windows(duration="1d"), _project_windows(duration="24h")),
        (
            _project_windows(schedule="0 22 * *"),
            _project_windows(schedule="*/30 1-5 * jan-mar mon"),
        ),
    ],
    "applicationset-generators": [
        (_merge(None), _merge(["cluster"])),
        (  # list.go: without goTemplate every element value is read as a string
            _fast_list({"cluster": "prod", "gpus": 8}),
            _fast_list({"cluster": "prod", "gpus": "8"}),
        ),
    ],
    "applicationset-generated-names": [(_names("prod", "Dev_1"), _names("prod", "dev-1"))],
    "hpa-replicas-in-git": [
        (
            _copy(lambda: [deployment(2), _scaled_object()]),
            _copy(lambda: [deployment(None), _scaled_object()]),
        ),
    ],
}


def _scaled_object() -> dict[str, Any]:
    """A KEDA ScaledObject scaling the Deployment serve (its kind defaults to Deployment)."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "serve", "namespace": NAMESPACE},
        "spec": {"scaleTargetRef": {"name": "serve"}, "minReplicaCount": 1, "maxReplicaCount": 4},
    }


def _namespace_project() -> dict[str, Any]:
    project = appproject(False)
    project["spec"]["clusterResourceWhitelist"] = [{"group": "", "kind": "Namespace"}]
    return project


def _server_project() -> dict[str, Any]:
    project = appproject(False)
    project["spec"]["destinations"] = [{"server": "https://10.0.0.1:6443", "namespace": "*"}]
    return project
