"""Fixtures of the Argo CD rules on ignoreDifferences and source paths written from Argo CD
v3.5.1's own code (policies/argocd_diff.py): per rule a render that breaks it and one that
keeps it, each a correct Application changed in the one thing the rule checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.policies.areas.argocd import REPO_URL, application
from tests.policies.fixtures import NAMESPACE, Docs, appproject

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]


def _ignoring(**entry: Any) -> Callable[[], Docs]:
    """An Application with one ignoreDifferences entry (a Deployment's by default)."""
    body = {"group": "apps", "kind": "Deployment", **entry}
    body = {k: v for k, v in body.items() if v is not None}
    return lambda: [appproject(False), application(ignoreDifferences=[body])]


def _jq(expression: str) -> Callable[[], Docs]:
    return _ignoring(jqPathExpressions=[expression])


def _pointer(pointer: str) -> Callable[[], Docs]:
    return _ignoring(jsonPointers=[pointer])


def _path(path: str, **source: Any) -> Callable[[], Docs]:
    def build() -> Docs:
        app = application()
        app["spec"]["source"].update(path=path, **source)
        return [appproject(False), app]

    return build


def _appset_path(path: str) -> Callable[[], Docs]:
    def build() -> Docs:
        appset = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "ApplicationSet",
            "metadata": {"name": "llama", "namespace": "argocd"},
            "spec": {
                "goTemplate": True,
                "generators": [{"list": {"elements": [{"cluster": "prod"}]}}],
                "template": {
                    "metadata": {"name": "{{.cluster}}-llama"},
                    "spec": {
                        "project": "p",
                        "source": {"repoURL": REPO_URL, "path": path},
                        "destination": {"name": "prod", "namespace": NAMESPACE},
                    },
                },
                "syncPolicy": {"preserveResourcesOnDeletion": True},
            },
        }
        return [appproject(False), appset]

    return build


FIXTURES: dict[str, Pair] = {
    "argocd-ignore-differences-jq": (_jq("/spec/replicas"), _jq(".spec.replicas")),
    "argocd-ignore-differences-pointer": (_pointer(".spec.replicas"), _pointer("/spec/replicas")),
    "argocd-ignore-differences-target": (
        _ignoring(group="apps/v1", jsonPointers=["/spec/replicas"]),
        _ignoring(group="apps", jsonPointers=["/spec/replicas"]),
    ),
    "argocd-source-path": (
        _path("/overlays/prod/runs/llama"),
        _path("overlays/prod/runs/llama"),
    ),
}

MORE: dict[str, list[Pair]] = {
    "argocd-ignore-differences-jq": [
        (
            _jq('.spec.template.spec.containers[] | select(.name == "x"'),
            _jq('.spec.template.spec.containers[] | select(.name == "x") | .image'),
        ),
        (_jq(".spec.containers[0"), _jq(".spec.containers[0]")),
        (_jq(""), _jq('.metadata.annotations["example.com/key"]')),
        (_jq('.data["a(b"'), _jq('.data["a(b"]')),
        (_jq(".spec[0"), _jq('.metadata.annotations["\\(.x)"]')),
        (_jq("/spec/replicas"), _jq("{{ .jq }}")),
    ],
    "argocd-ignore-differences-pointer": [
        (_pointer("spec/replicas"), _pointer("/spec/replicas")),
        (
            _pointer("/spec/template/spec/containers[0]/image"),
            _pointer("/spec/template/spec/containers/0/image"),
        ),
        (
            _pointer("/spec/template/spec/containers/*/image"),
            _pointer("/spec/template/spec/containers/0/image"),
        ),
        (
            _pointer("/metadata/annotations/example.com/key"),
            _pointer("/metadata/annotations/example.com~1key"),
        ),
        (
            _pointer("/spec/template/metadata/labels/example.com/team"),
            _pointer("/spec/template/metadata/labels/example.com~1team"),
        ),
    ],
    "argocd-ignore-differences-target": [
        (
            _ignoring(group="core", kind="ConfigMap", jsonPointers=["/data"]),
            _ignoring(group="", kind="ConfigMap", jsonPointers=["/data"]),
        ),
        (
            _ignoring(group="v1", kind="Secret", jsonPointers=["/data"]),
            _ignoring(group=None, kind="Secret", jsonPointers=["/data"]),
        ),
        (
            _ignoring(kind="deployment", jsonPointers=["/spec/replicas"]),
            _ignoring(kind="Deployment", jsonPointers=["/spec/replicas"]),
        ),
        (
            _ignoring(group=None, kind="configmap", jsonPointers=["/data"]),
            _ignoring(group="example.com", kind="configmap", jsonPointers=["/data"]),
        ),
        (
            _ignoring(group=None, jsonPointers=["/spec/replicas"]),
            _ignoring(group="apps", jsonPointers=["/spec/replicas"]),
        ),
        (
            _ignoring(name="worker-*", jsonPointers=["/spec/replicas"]),
            _ignoring(name="worker", jsonPointers=["/spec/replicas"]),
        ),
        (
            _ignoring(group="serving.knative.dev/v1", kind="Service", jsonPointers=["/spec"]),
            _ignoring(group="serving.knative.dev", kind="Service", jsonPointers=["/spec"]),
        ),
        (
            _ignoring(group="apps/v1", kind="*", jsonPointers=["/spec"]),
            _ignoring(group="*", kind="*", jsonPointers=["/spec"]),
        ),
    ],
    "argocd-source-path": [
        (_path("../other/overlays/prod"), _path("overlays/../overlays/prod")),
        (_path(".."), _path(".")),
        (_path("overlays/../../x"), _path("overlays/prod", chart=None)),
        (_path("/charts/llama"), _path("/charts/llama", chart="llama")),
        (_appset_path("/overlays/{{.cluster}}"), _appset_path("overlays/{{.cluster}}")),
        (_appset_path("../{{.cluster}}/runs"), _appset_path("{{.cluster}}/../runs")),
    ],
}
