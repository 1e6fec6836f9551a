"""Fixtures of the provisioner rules (policies/provisioners.py: Rancher local-path-provisioner
and the AWS EFS CSI driver): per rule a render that breaks it and one that keeps it, each the
baseline with one thing changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import NAMESPACE, Docs, edit, storage_class

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]

LOCAL_PATH = "rancher.io/local-path"
EFS = "efs.csi.aws.com"
NODE_PATHS = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/lp"]}]}


def _all(*changes: Callable[[Docs], None]) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        for one in changes:
            one(docs)

    return edit(change)


def _config(config: Any, raw: str | None = None) -> Callable[[Docs], None]:
    return lambda docs: docs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "local-path-config", "namespace": "local-path-storage"},
            "data": {
                "config.json": raw if raw is not None else json.dumps(config),
                "helperPod.yaml": "apiVersion: v1\nkind: Pod\n",
            },
        }
    )


def _class(
    name: str = "local-path", annotations: dict[str, str] | None = None, **parameters: str
) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        sc = storage_class(name, LOCAL_PATH)
        if parameters:
            sc["parameters"] = dict(parameters)
        if annotations:
            sc["metadata"]["annotations"] = dict(annotations)
        docs.append(sc)

    return change


def _claim(mode: str, klass: str = "local-path", **annotations: str) -> Callable[[Docs], None]:
    return lambda docs: docs.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "scratch", "namespace": NAMESPACE, "annotations": annotations},
            "spec": {
                "accessModes": [mode],
                "storageClassName": klass,
                "resources": {"requests": {"storage": "100Gi"}},
            },
        }
    )


PATTERN = "{{ .PVC.Namespace }}/{{ .PVC.Name }}"
EFS_OK = {"provisioningMode": "efs-ap", "fileSystemId": "fs-0123456789abcdef0"}


def _efs(**parameters: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        sc = storage_class("efs", EFS)
        if parameters:
            sc["parameters"] = dict(parameters)
        docs.append(sc)

    return change


FIXTURES: dict[str, Pair] = {
    "local-path-config": (
        edit(_config({"nodePathMap": [{"node": "gpu-1", "paths": ["opt/lp"]}]})),
        edit(_config({"nodePathMap": [{"node": "gpu-1", "paths": ["/opt/lp"]}]})),
    ),
    "local-path-storage-class": (
        edit(_class(pathPattern=PATTERN)),
        edit(_class(pathPattern=PATTERN + "/data")),
    ),
    "local-path-claim": (
        _all(_config(NODE_PATHS), _class(), _claim("ReadWriteMany")),
        _all(_config(NODE_PATHS), _class(), _claim("ReadWriteOnce")),
    ),
    "efs-storage-class": (
        edit(_efs(fileSystemId="fs-0123456789abcdef0")),
        edit(_efs(**EFS_OK)),
    ),
    "efs-access-mode": (
        _all(_efs(**EFS_OK), _claim("ReadOnlyMany", "efs")),
        _all(_efs(**EFS_OK), _claim("ReadWriteMany", "efs")),
    ),
}

MORE: dict[str, list[Pair]] = {
    "local-path-config": [
        (
            edit(_config(None, raw='{"nodePathMap": [],}')),
            edit(_config(None, raw='{"sharedFileSystemPath": "/mnt/shared"}')),
        ),
        (
            edit(_config({**NODE_PATHS, "sharedFileSystemPath": "/mnt/shared"})),
            edit(_config(NODE_PATHS)),
        ),
        (
            edit(_config({"nodePathMap": [{"node": "a", "paths": ["/opt/lp", "/opt/lp/"]}]})),
            edit(_config({"nodePathMap": [{"node": "a", "paths": ["/opt/lp", "/opt/lp2"]}]})),
        ),
        (
            edit(_config({"storageClassConfigs": {"fast": {}}})),
            edit(_config({"storageClassConfigs": {"fast": NODE_PATHS}})),
        ),
        (
            edit(_config({"nodePathMap": [{"node": "a", "paths": ["/"]}]})),
            edit(_config({"nodePathMap": [{"node": "a", "paths": ["/data"]}]})),
        ),
    ],
    "local-path-storage-class": [
        (
            edit(_class(pathPattern="{{ .PVC.namespace }}/{{ .PVC.Name }}/")),
            edit(_class(pathPattern="{{ .PVC.Namespace }}/{{- .PVC.Name }}/")),
        ),
        (
            edit(_class(pathPattern="{{ .PVC.Namespace }}/ {{ .PVC.Name }}/")),
            edit(_class(pathPattern="{{ .PVC.Namespace }}/ {{- .PVC.Name -}} /x")),
        ),
        (
            edit(_class(pathPattern="{{ .PVName }}")),
            edit(_class(pathPattern="{{ .PVName }}", allowUnsafePathPattern="true")),
        ),
        (
            edit(_class(pathPattern="{{ .PVC.Namespace }}_{{ .PVC.Name }}/x")),
            # A literal namespace may be right: the rule cannot be sure.
            edit(_class(pathPattern="training/{{ .PVC.Name }}/x")),
        ),
        (
            _all(_config({"storageClassConfigs": {"fast": NODE_PATHS}}), _class("slow")),
            _all(_config({"storageClassConfigs": {"fast": NODE_PATHS}}), _class("fast")),
        ),
        (
            _all(_config(NODE_PATHS), _class(nodePath="/opt/lp/")),
            _all(_config(NODE_PATHS), _class(nodePath="/opt/lp")),
        ),
        (
            edit(_class(annotations={"defaultVolumeType": ""})),
            edit(_class(annotations={"defaultVolumeType": "hostPath"})),
        ),
    ],
    "local-path-claim": [
        (
            _all(_config(NODE_PATHS), _class(), _claim("ReadOnlyMany")),
            _all(_config({"sharedFileSystemPath": "/mnt/nfs"}), _class(), _claim("ReadWriteMany")),
        ),
        (
            # Without the config in the render: a warning (the default config uses node paths).
            _all(_class(), _claim("ReadWriteMany")),
            _all(_class(), _claim("ReadWriteOncePod")),
        ),
        (
            _all(_class(), _claim("ReadWriteOnce", volumeType="hostpath-dir")),
            _all(_class(), _claim("ReadWriteOnce", volumeType="Local")),
        ),
    ],
    "efs-storage-class": [
        (
            edit(_efs(**EFS_OK, gidRangeStart="1000")),
            edit(_efs(**EFS_OK, gidRangeStart="1000", gidRangeEnd="2000")),
        ),
        (
            edit(_efs(**EFS_OK, subPathPattern="${.PVC.Namespace}/${.PVC.Name}")),
            edit(_efs(**EFS_OK, subPathPattern="${.PVC.namespace}/${.PVC.name}")),
        ),
        (
            edit(_efs(**EFS_OK, reuseAccessPoint="yes")),
            edit(_efs(**EFS_OK, reuseAccessPoint="true")),
        ),
        (
            edit(_efs(**EFS_OK, basePath="/a/b/c/d", subPathPattern="e/${.PVC.namespace}/f")),
            edit(_efs(**EFS_OK, basePath="/a/b", subPathPattern="${.PVC.namespace}/d")),
        ),
        (
            edit(_efs(provisioningMode="efs", fileSystemId="fs-0123456789abcdef0")),
            # A class for statically provisioned volumes has no parameters.
            edit(_efs()),
        ),
        (
            edit(_efs(**EFS_OK, uid="-1")),
            edit(_efs(**EFS_OK, uid="1000", gid="1000")),
        ),
    ],
}
