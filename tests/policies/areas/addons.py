"""Fixtures of the add-on rules (policies/mesh.py: Istio; policies/csi.py: GCS FUSE, FSx for
Lustre and NFS CSI drivers): per rule a render that breaks it and one that keeps it, each the
baseline with one thing changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.policies.fixtures import NAMESPACE, Docs, edit, job, pods_of, set_env, storage_class

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]


def _templates(docs: Docs) -> list[dict[str, Any]]:
    doc = job(docs)
    field = next(k for k in doc["spec"] if k.endswith("ReplicaSpecs"))
    return [r["template"] for r in doc["spec"][field].values()]


def _annotate(**annotations: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for template in _templates(docs):
            template["metadata"]["annotations"].update(annotations)

    return change


def _label(**labels: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for template in _templates(docs):
            template["metadata"]["labels"].update(labels)

    return change


def _namespace(**labels: str) -> Callable[[Docs], None]:
    return lambda docs: docs.append(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels}}
    )


def _all(*changes: Callable[[Docs], None]) -> Callable[[], Docs]:
    def change(docs: Docs) -> None:
        for one in changes:
            one(docs)

    return edit(change)


# -- GCS FUSE ---------------------------------------------------------------------------

GCSFUSE = "gcsfuse.csi.storage.gke.io"


def _gcs_volume(**attributes: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["volumes"].append(
                {
                    "name": "data",
                    "csi": {
                        "driver": GCSFUSE,
                        "readOnly": True,
                        "volumeAttributes": {"bucketName": "datasets", **attributes},
                    },
                }
            )
            spec["containers"][0]["volumeMounts"].append({"name": "data", "mountPath": "/data"})

    return change


def _gcs_claim(docs: Docs) -> None:
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "datasets"},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "capacity": {"storage": "5Ti"},
                "storageClassName": "",
                "claimRef": {"namespace": NAMESPACE, "name": "datasets"},
                "csi": {"driver": GCSFUSE, "volumeHandle": "datasets"},
            },
        }
    )
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "datasets", "namespace": NAMESPACE},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": "datasets",
                "resources": {"requests": {"storage": "5Ti"}},
            },
        }
    )
    for spec in pods_of(job(docs)):
        spec["volumes"].append(
            {"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}}
        )
        spec["containers"][0]["volumeMounts"].append({"name": "data", "mountPath": "/data"})


def _gcs_pv(**attributes: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": "datasets"},
                "spec": {
                    "accessModes": ["ReadOnlyMany"],
                    "capacity": {"storage": "5Ti"},
                    "csi": {
                        "driver": GCSFUSE,
                        "volumeHandle": "datasets",
                        "volumeAttributes": attributes,
                    },
                },
            }
        )

    return change


ON = _annotate(**{"gke-gcsfuse/volumes": "true"})

# -- FSx for Lustre ---------------------------------------------------------------------

FSX = "fsx.csi.aws.com"
SUBNET = {"subnetId": "subnet-0123456789abcdef0", "securityGroupIds": "sg-0123456789abcdef0"}


def _fsx_class(options: tuple[str, ...] = (), **parameters: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        sc = storage_class("fsx", FSX)
        sc["parameters"] = {**SUBNET, **parameters}
        if options:
            sc["mountOptions"] = list(options)
        docs.append(sc)

    return change


PERSISTENT = {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": "250"}


def _checkpoints_on(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
        claim["spec"]["storageClassName"] = name

    return change


def _claim(mode: str) -> Callable[[Docs], None]:
    return lambda docs: docs.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "scratch", "namespace": NAMESPACE},
            "spec": {
                "accessModes": [mode],
                "storageClassName": "fsx",
                "resources": {"requests": {"storage": "1200Gi"}},
            },
        }
    )


def _fsx_pv(**attributes: str) -> Callable[[Docs], None]:
    return lambda docs: docs.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "fsx-datasets"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "capacity": {"storage": "1200Gi"},
                "csi": {
                    "driver": FSX,
                    "volumeHandle": "fs-0123456789abcdef0",
                    "volumeAttributes": attributes,
                },
            },
        }
    )


def _hf_home(docs: Docs) -> None:
    set_env(job(docs), "HF_HOME", "/checkpoints/hf")


# -- NFS --------------------------------------------------------------------------------


def _nfs_class(**parameters: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        sc = storage_class("nfs", "nfs.csi.k8s.io")
        sc["parameters"] = {"server": "nfs.example.com", "share": "/exports", **parameters}
        docs.append(sc)

    return change


# -- Istio ------------------------------------------------------------------------------

INJECTING = _namespace(**{"istio-injection": "enabled"})


def _peer_authentication(
    mode: str, namespace: str = NAMESPACE, name: str = "default", **selector: str
) -> Callable[[Docs], None]:
    spec: dict[str, Any] = {"mtls": {"mode": mode}}
    if selector:
        spec["selector"] = {"matchLabels": selector}
    return lambda docs: docs.append(
        {
            "apiVersion": "security.istio.io/v1",
            "kind": "PeerAuthentication",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def _init_container(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["initContainers"] = [
            {
                "name": "fetch-model",
                "image": "registry.example.com/fetch:1.0.0",
                "command": ["fetch", "s3://models/llama", "/checkpoints/llama/base"],
            }
        ]


def _juicefs_class(options: tuple[str, ...] = (), **parameters: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        sc = storage_class("juicefs", "csi.juicefs.com")
        sc["parameters"] = {
            "csi.storage.k8s.io/provisioner-secret-name": "juicefs-secret",
            "csi.storage.k8s.io/provisioner-secret-namespace": "kube-system",
            **parameters,
        }
        if options:
            sc["mountOptions"] = list(options)
        docs.append(sc)

    return change


def _azure_class(provisioner: str, **parameters: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        sc = storage_class("azure", provisioner)
        sc["parameters"] = parameters
        docs.append(sc)

    return change


def _log_shipper(native: bool) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        shipper = {"name": "logs", "image": "cr.fluentbit.io/fluent/fluent-bit:3.1.9"}
        for spec in pods_of(job(docs)):
            if native:
                spec["initContainers"] = [{**shipper, "restartPolicy": "Always"}]
            else:
                spec["containers"].append(shipper)

    return change


FIXTURES: dict[str, Pair] = {
    "gcsfuse-sidecar-annotation": (edit(_gcs_volume()), _all(_gcs_volume(), ON)),
    "gcsfuse-sidecar-resources": (
        _all(_gcs_volume(), ON, _annotate(**{"gke-gcsfuse/memory-limit": "4 GB"})),
        _all(_gcs_volume(), ON, _annotate(**{"gke-gcsfuse/memory-limit": "4Gi"})),
    ),
    "gcsfuse-volume-attributes": (
        _all(_gcs_volume(fileCacheCapacity="100 GiB"), ON),
        _all(_gcs_volume(fileCacheCapacity="100Gi"), ON),
    ),
    "gcsfuse-pv-attributes": (
        edit(_gcs_pv(fileCacheForRangeRead="yes")),
        edit(_gcs_pv(fileCacheForRangeRead="true")),
    ),
    "fsx-storage-class": (
        edit(_fsx_class(deploymentType="PERSISTENT_2", perUnitStorageThroughput="200")),
        edit(_fsx_class(**PERSISTENT)),
    ),
    "fsx-access-mode": (
        _all(_fsx_class(**PERSISTENT), _claim("ReadOnlyMany")),
        _all(_fsx_class(**PERSISTENT), _claim("ReadWriteMany")),
    ),
    "fsx-static-volume": (
        edit(_fsx_pv(mountname="abcdefgh")),
        edit(_fsx_pv(dnsname="fs-0123.fsx.us-east-1.amazonaws.com", mountname="abcdefgh")),
    ),
    "fsx-scratch-checkpoints": (
        _all(_fsx_class(deploymentType="SCRATCH_2"), _checkpoints_on("fsx")),
        _all(_fsx_class(**PERSISTENT), _checkpoints_on("fsx")),
    ),
    "lustre-flock": (
        _all(_fsx_class(**PERSISTENT), _checkpoints_on("fsx"), _hf_home),
        _all(_fsx_class(("flock",), **PERSISTENT), _checkpoints_on("fsx"), _hf_home),
    ),
    "nfs-csi-parameters": (
        edit(_nfs_class(mountOptions="nfsvers=4.1")),
        edit(_nfs_class(subDir="${pvc.metadata.name}")),
    ),
    "juicefs-mount-settings": (
        edit(_juicefs_class(**{"juicefs/mount-memory-limit": "32 Gi"})),
        edit(_juicefs_class(**{"juicefs/mount-memory-limit": "32Gi"})),
    ),
    "azure-csi-parameters": (
        edit(_azure_class("blob.csi.azure.com", protocol="fuse2", mountOptions="-o allow_other")),
        edit(_azure_class("blob.csi.azure.com", protocol="fuse2", skuName="Premium_LRS")),
    ),
    "job-sidecar-container": (edit(_log_shipper(native=False)), edit(_log_shipper(native=True))),
    "istio-inject-value": (
        _all(INJECTING, _label(**{"sidecar.istio.io/inject": "False"})),
        _all(INJECTING, _label(**{"sidecar.istio.io/inject": "false"})),
    ),
    "istio-namespace-injection-label": (
        edit(_namespace(**{"istio-injection": "true"})),
        edit(_namespace(**{"istio-injection": "enabled"})),
    ),
    "istio-annotation-invalid": (
        _all(
            INJECTING, _annotate(**{"traffic.sidecar.istio.io/excludeInboundPorts": "29500-29510"})
        ),
        _all(
            INJECTING, _annotate(**{"traffic.sidecar.istio.io/excludeInboundPorts": "29500,29400"})
        ),
    ),
    "istio-sidecar-job-completion": (
        _all(INJECTING, _annotate(**{"sidecar.istio.io/nativeSidecar": "false"})),
        _all(INJECTING, _annotate(**{"sidecar.istio.io/nativeSidecar": "true"})),
    ),
    "istio-init-container-network": (
        _all(INJECTING, _init_container, _annotate(**{"sidecar.istio.io/nativeSidecar": "false"})),
        _all(INJECTING, _init_container, _annotate(**{"sidecar.istio.io/nativeSidecar": "true"})),
    ),
    "istio-proxy-start-order": (
        _all(INJECTING, _annotate(**{"sidecar.istio.io/nativeSidecar": "false"})),
        _all(
            INJECTING,
            _annotate(
                **{
                    "sidecar.istio.io/nativeSidecar": "false",
                    "proxy.istio.io/config": "holdApplicationUntilProxyStarts: true",
                }
            ),
        ),
    ),
    "istio-strict-mtls-training": (
        _all(INJECTING, _peer_authentication("STRICT")),
        _all(INJECTING, _peer_authentication("PERMISSIVE")),
    ),
}

MORE: dict[str, list[Pair]] = {
    "juicefs-mount-settings": [
        (
            edit(_juicefs_class(("buffer-size=8192",), **{"juicefs/mount-memory-limit": "4Gi"})),
            edit(_juicefs_class(("buffer-size=8192",), **{"juicefs/mount-memory-limit": "16Gi"})),
        ),
        (
            edit(_juicefs_class(**{"juicefs/mount-delete-delay": "1 hour"})),
            edit(_juicefs_class(**{"juicefs/mount-delete-delay": "1h"})),
        ),
    ],
    "azure-csi-parameters": [
        (  # NodeStageVolume matches fsGroupChangePolicy exactly
            edit(_azure_class("blob.csi.azure.com", fsGroupChangePolicy="onRootMismatch")),
            edit(_azure_class("blob.csi.azure.com", fsGroupChangePolicy="OnRootMismatch")),
        ),
        (  # strconv.ParseUint(value, 8, 32)
            edit(_azure_class("blob.csi.azure.com", mountPermissions="0o775")),
            edit(_azure_class("blob.csi.azure.com", mountPermissions="0775")),
        ),
        (
            edit(_azure_class("disk.csi.azure.com", skuName="PremiumV2_LRS", iops="5000")),
            edit(
                _azure_class(
                    "disk.csi.azure.com", skuName="PremiumV2_LRS", DiskIOPSReadWrite="5000"
                )
            ),
        ),
        (
            edit(_azure_class("blob.csi.azure.com", protocol="blobfuse2")),
            edit(_azure_class("blob.csi.azure.com", protocol="nfs")),
        ),
    ],
    "gcsfuse-sidecar-annotation": [
        (edit(_gcs_claim), _all(_gcs_claim, ON)),
        (
            _all(_gcs_volume(), _annotate(**{"gke-gcsfuse/volumes": "yes"})),
            _all(_gcs_volume(), _annotate(**{"gke-gcsfuse/volumes": "True"})),
        ),
        # A shared node mount needs no sidecar.
        (edit(_gcs_volume()), edit(_gcs_volume(sharedMount="true"))),
    ],
    "fsx-storage-class": [
        (
            edit(
                _fsx_class(
                    deploymentType="PERSISTENT_2", perUnitStorageThroughput="250", storageType="HDD"
                )
            ),
            edit(
                _fsx_class(
                    deploymentType="PERSISTENT_1",
                    perUnitStorageThroughput="40",
                    storageType="HDD",
                    driveCacheType="READ",
                )
            ),
        ),
        (
            edit(_fsx_class(**PERSISTENT, dataCompressionType="ZSTD")),
            edit(_fsx_class(**PERSISTENT, dataCompressionType="LZ4")),
        ),
        (
            edit(_fsx_class(deploymentType="SCRATCH_2", perUnitStorageThroughput="200")),
            edit(_fsx_class(deploymentType="SCRATCH_2")),
        ),
        (
            edit(_fsx_class(deploymentType="PERSISTENT_1")),
            edit(_fsx_class(deploymentType="PERSISTENT_1", perUnitStorageThroughput="200")),
        ),
        (
            edit(_fsx_class(deploymentType="PERSISTENT2")),
            edit(_fsx_class(deploymentType="PERSISTENT_2", perUnitStorageThroughput="125")),
        ),
    ],
    "istio-inject-value": [
        # The annotation opts in only where the namespace already injects.
        (
            _all(_namespace(team="ml"), _annotate(**{"sidecar.istio.io/inject": "true"})),
            _all(_namespace(team="ml"), _label(**{"sidecar.istio.io/inject": "true"})),
        ),
    ],
    "istio-namespace-injection-label": [
        (
            edit(_namespace(**{"istio-injection": "enabled", "istio.io/rev": "canary"})),
            edit(_namespace(**{"istio.io/rev": "canary"})),
        ),
    ],
    "istio-strict-mtls-training": [
        # Mesh-wide STRICT, and the namespace's own policy that relaxes it.
        (
            _all(INJECTING, _peer_authentication("STRICT", namespace="istio-system")),
            _all(
                INJECTING,
                _peer_authentication("STRICT", namespace="istio-system"),
                _peer_authentication("PERMISSIVE"),
            ),
        ),
    ],
    "istio-sidecar-job-completion": [
        # The render does not show the namespace: reported (as a warning) all the same.
        (
            edit(_annotate(**{"sidecar.istio.io/nativeSidecar": "false"})),
            edit(_annotate(**{"sidecar.istio.io/nativeSidecar": "true"})),
        ),
        # Not injected: the pod opts out.
        (
            _all(INJECTING, _annotate(**{"sidecar.istio.io/nativeSidecar": "false"})),
            _all(
                INJECTING,
                _annotate(**{"sidecar.istio.io/nativeSidecar": "false"}),
                _label(**{"sidecar.istio.io/inject": "false"}),
            ),
        ),
    ],
}
