"""CSI drivers training storage uses, checked as each driver's own code checks them.

From each driver's code at a pinned release: the GCS FUSE CSI driver (v1.24.4) mounts a
bucket only into a pod whose `gke-gcsfuse/volumes` annotation made its webhook inject the
gcsfuse sidecar, refuses pods whose sidecar annotations do not parse, and fails the mount on
volume attributes of the wrong type; the AWS FSx for Lustre CSI driver (v1.9.0) needs a
subnet for every file system it creates, passes the deployment type and per-unit throughput
to the FSx API (which accepts only the values of each deployment type), offers only
ReadWriteOnce and ReadWriteMany, and mounts a static volume only with its DNS name; the NFS
CSI driver (v4.13.4) refuses every StorageClass parameter it does not know. A volume is
followed from the pod through its claim to the PersistentVolume or StorageClass of the
render.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, needs, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, env_of, mapping

from . import common
from .checkpoints import CHECKPOINT_PATHS

GCSFUSE = "gcsfuse.csi.storage.gke.io"
FSX = "fsx.csi.aws.com"
NFS = "nfs.csi.k8s.io"

GCSFUSE_TAG = "https://github.com/GoogleCloudPlatform/gcs-fuse-csi-driver/blob/v1.24.4/"
GCSFUSE_WEBHOOK = GCSFUSE_TAG + "pkg/webhook/mutatingwebhook.go#L245-L253"
GCSFUSE_NODE = GCSFUSE_TAG + "pkg/csi_driver/node.go#L425-L434"
GCSFUSE_CONFIG = GCSFUSE_TAG + "pkg/webhook/config.go#L144-L169"
GCSFUSE_ATTRIBUTES = GCSFUSE_TAG + "pkg/csi_driver/utils.go#L259-L366"
FSX_TAG = "https://github.com/kubernetes-sigs/aws-fsx-csi-driver/blob/v1.9.0/"
FSX_CONTROLLER = FSX_TAG + "pkg/driver/controller.go#L186-L280"
FSX_SUBNET = FSX_TAG + "pkg/cloud/cloud.go#L158-L161"
FSX_CAPABILITIES = FSX_TAG + "pkg/driver/controller.go#L36-L45"
FSX_NODE = FSX_TAG + "pkg/driver/node.go#L108-L117"
FSX_API = (
    "https://github.com/aws/aws-sdk-go-v2/blob/ed8be3da9f250d3ee2952ac9c2936ddfce2556f8/"
    "service/fsx/types/types.go"
)
NFS_CONTROLLER = (
    "https://github.com/kubernetes-csi/csi-driver-nfs/blob/v4.13.4/"
    "pkg/nfs/controllerserver.go#L135-L156"
)
NFS_VOLUME = (
    "https://github.com/kubernetes-csi/csi-driver-nfs/blob/v4.13.4/pkg/nfs/utils.go#L46-L56"
)

# A Kubernetes resource quantity (apimachinery's resource.ParseQuantity grammar).
QUANTITY = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
GO_BOOLS = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
INTEGER = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class Backing:
    """What a pod volume is on: the CSI driver, its volume attributes and mount options, and
    the document (PersistentVolume or StorageClass) they come from (None: inline)."""

    driver: str
    attributes: dict[str, Any]
    mount_options: tuple[str, ...]
    parameters: dict[str, Any]
    source: Document | None


def backing(volume: dict[str, Any], pod: PodTemplate, ctx: Context) -> Backing | None:
    """The CSI backing of one pod volume, when the render shows it."""
    inline = mapping(volume.get("csi"))
    if inline.get("driver"):
        return Backing(str(inline["driver"]), mapping(inline.get("volumeAttributes")), (), {}, None)
    claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
    if not claim:
        return None
    namespace = common.pod_namespace(pod)
    pvc = ctx.find("PersistentVolumeClaim", str(claim), namespace)
    pv = _bound_volume(pvc, str(claim), namespace, ctx)
    if pv is not None:
        spec = mapping(pv.obj.get("spec"))
        csi = mapping(spec.get("csi"))
        if csi.get("driver"):
            options = tuple(str(o) for o in spec.get("mountOptions") or [])
            return Backing(
                str(csi["driver"]), mapping(csi.get("volumeAttributes")), options, {}, pv
            )
        return None
    storage_class = _storage_class(pvc, ctx) if pvc is not None else None
    if storage_class is None or not storage_class.obj.get("provisioner"):
        return None
    obj = storage_class.obj
    options = tuple(str(o) for o in obj.get("mountOptions") or [])
    parameters = mapping(obj.get("parameters"))
    return Backing(str(obj["provisioner"]), {}, options, parameters, storage_class)


def _bound_volume(
    pvc: Document | None, claim: str, namespace: str | None, ctx: Context
) -> Document | None:
    name = mapping(pvc.obj.get("spec")).get("volumeName") if pvc is not None else None
    if name:
        return ctx.find("PersistentVolume", str(name))
    by_claim = ctx.memo("pv-by-claim-ref", lambda: _volumes_by_claim(ctx))
    return by_claim.get((namespace or "default", claim))


def _volumes_by_claim(ctx: Context) -> dict[tuple[str, str], Document]:
    found: dict[tuple[str, str], Document] = {}
    for pv in ctx.of_kind("PersistentVolume"):
        ref = mapping(mapping(pv.obj.get("spec")).get("claimRef"))
        if ref.get("name"):
            found.setdefault((str(ref.get("namespace") or "default"), str(ref["name"])), pv)
    return found


def _storage_class(pvc: Document, ctx: Context) -> Document | None:
    name = mapping(pvc.obj.get("spec")).get("storageClassName")
    if isinstance(name, str) and name:
        return ctx.find("StorageClass", name)
    return None


@needs("volumes")
def has_volumes(pod: PodTemplate) -> bool:
    """Pods with volumes (the GCS FUSE rules follow each to its driver)."""
    return bool(pod.volumes())


# -- GCS FUSE ---------------------------------------------------------------------------


def _gcsfuse_volumes(pod: PodTemplate, ctx: Context) -> list[tuple[int, dict, Backing]]:
    def compute() -> list[tuple[int, dict, Backing]]:
        out = []
        for index, volume in enumerate(pod.spec.get("volumes") or []):
            if not isinstance(volume, dict):
                continue
            found = backing(volume, pod, ctx)
            if found is not None and found.driver == GCSFUSE:
                out.append((index, volume, found))
        return out

    return pod.memo("gcsfuse-volumes", compute)


@pod_rule(
    id="gcsfuse-sidecar-annotation",
    severity=ERROR,
    title="Pods that mount a GCS FUSE volume ask for the gcsfuse sidecar",
    why="The GCS FUSE CSI driver mounts a bucket through a sidecar its webhook injects only "
    'into pods annotated gke-gcsfuse/volumes: "true"; without it NodePublishVolume fails '
    "with 'failed to find the sidecar container in Pod spec' and the pod stays in "
    "ContainerCreating. A value other than True, true, False or false makes the webhook "
    "refuse the pod.",
    fix='Annotate the pod template (not the Job) with gke-gcsfuse/volumes: "true".',
    applies=has_volumes,
    source=(GCSFUSE_NODE, GCSFUSE_WEBHOOK),
)
def gcsfuse_sidecar_annotation(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    volumes = _gcsfuse_volumes(pod, ctx)
    # A shared node mount (volume attribute sharedMount) needs no sidecar.
    standard = [v for v in volumes if str(v[2].attributes.get("sharedMount")) != "true"]
    if not standard:
        return
    value = pod.annotations.get("gke-gcsfuse/volumes")
    path = (*pod.path[:-1], "metadata", "annotations", "gke-gcsfuse/volumes")
    if value is None:
        index, volume, _ = standard[0]
        yield Violation(
            f"volume {volume.get('name')} is a GCS FUSE volume but the pod template has no "
            "gke-gcsfuse/volumes annotation: the sidecar is not injected and the mount fails",
            (*pod.path, "volumes", index),
        )
    elif str(value) not in ("True", "true", "False", "false"):
        yield Violation(
            f"gke-gcsfuse/volumes: {value!r}: the webhook accepts only True, true, False or "
            "false and refuses the pod",
            path,
        )
    elif str(value).lower() == "false":
        yield Violation(
            "gke-gcsfuse/volumes is false while the pod mounts a GCS FUSE volume: no sidecar, "
            "so the mount fails",
            path,
        )


GCSFUSE_RESOURCES = tuple(
    f"gke-gcsfuse/{prefix}{resource}-{kind}"
    for prefix in ("", "metadata-prefetch-")
    for resource in ("cpu", "memory", "ephemeral-storage")
    for kind in ("limit", "request")
)


@needs(*GCSFUSE_RESOURCES)
def sets_gcsfuse_resources(pod: PodTemplate) -> bool:
    return any(key in pod.annotations for key in GCSFUSE_RESOURCES)


@pod_rule(
    id="gcsfuse-sidecar-resources",
    severity=ERROR,
    title="The gcsfuse sidecar's resource annotations are quantities",
    why="The GCS FUSE webhook reads gke-gcsfuse/cpu-limit, memory-limit, "
    "ephemeral-storage-limit (and their -request forms) as Kubernetes quantities; a value that "
    "does not parse makes it refuse the pod, so a Job's pods are never created.",
    fix='Write a quantity ("2", "500m", "4Gi"), or "0" for no limit.',
    applies=sets_gcsfuse_resources,
    source=GCSFUSE_CONFIG,
)
def gcsfuse_sidecar_resources(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if str(pod.annotations.get("gke-gcsfuse/volumes", "")).lower() != "true":
        return
    for key in GCSFUSE_RESOURCES:
        value = pod.annotations.get(key)
        if value is not None and not QUANTITY.match(str(value).strip()):
            yield Violation(
                f"{key}: {value!r} is not a quantity: the gcsfuse webhook refuses the pod",
                (*pod.path[:-1], "metadata", "annotations", key),
            )


GCSFUSE_QUANTITIES = ("fileCacheCapacity", "metadataStatCacheCapacity", "metadataTypeCacheCapacity")
GCSFUSE_BOOLS = (
    "fileCacheForRangeRead",
    "skipCSIBucketAccessCheck",
    "disableMetrics",
    "hostNetworkPodKSA",
    "enableCloudProfilerForSidecar",
)
GCSFUSE_INTS = ("metadataCacheTTLSeconds", "metadataCacheTtlSeconds", "multiNICIndex")


def gcsfuse_attribute_problems(attributes: dict[str, Any], inline: bool) -> list[tuple[str, str]]:
    """(attribute, why the driver refuses it) for GCS FUSE volume attributes."""
    out = []
    for key, value in attributes.items():
        text = str(value)
        if key in GCSFUSE_QUANTITIES and not QUANTITY.match(text.strip()):
            out.append((key, f"{text!r} is not a quantity"))
        elif key in GCSFUSE_BOOLS and text not in GO_BOOLS:
            out.append((key, f"{text!r} is not a boolean"))
        elif key in GCSFUSE_INTS and not INTEGER.match(text):
            out.append((key, f"{text!r} is not an integer"))
    if inline and not attributes.get("bucketName"):
        out.append(("bucketName", "an inline (ephemeral) GCS FUSE volume must name its bucket"))
    return out


@pod_rule(
    id="gcsfuse-volume-attributes",
    severity=ERROR,
    title="GCS FUSE volume attributes have the types the driver parses",
    why="The GCS FUSE CSI driver turns volume attributes into gcsfuse flags: cache capacities "
    "must be quantities, fileCacheForRangeRead and skipCSIBucketAccessCheck booleans, "
    "metadataCacheTTLSeconds an integer, and an inline volume needs bucketName; otherwise "
    "NodePublishVolume fails and the pod never starts.",
    fix='Write fileCacheCapacity: 100Gi, fileCacheForRangeRead: "true", '
    'metadataCacheTTLSeconds: "-1", and bucketName for an inline volume.',
    applies=has_volumes,
    source=GCSFUSE_ATTRIBUTES,
)
def gcsfuse_volume_attributes(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, volume, found in _gcsfuse_volumes(pod, ctx):
        if found.source is not None:
            continue  # a PersistentVolume's attributes are checked on the PersistentVolume
        for key, why in gcsfuse_attribute_problems(found.attributes, inline=True):
            yield Violation(
                f"GCS FUSE volume {volume.get('name')}: {key} {why}: the mount fails",
                (*pod.path, "volumes", index, "csi", "volumeAttributes"),
            )


@resource_rule(
    id="gcsfuse-pv-attributes",
    severity=ERROR,
    title="GCS FUSE PersistentVolumes have attributes the driver parses",
    why="The driver parses a GCS FUSE PersistentVolume's volumeAttributes at every mount: a "
    "cache capacity that is not a quantity, a boolean or integer attribute of another type "
    "fails NodePublishVolume for every pod that mounts the volume.",
    fix='Write fileCacheCapacity: 100Gi, fileCacheForRangeRead: "true", '
    'metadataCacheTTLSeconds: "-1".',
    kinds=("PersistentVolume",),
    source=GCSFUSE_ATTRIBUTES,
)
def gcsfuse_pv_attributes(doc: Document, ctx: Context) -> Iterator[Violation]:
    csi = mapping(mapping(doc.obj.get("spec")).get("csi"))
    if csi.get("driver") != GCSFUSE:
        return
    for key, why in gcsfuse_attribute_problems(mapping(csi.get("volumeAttributes")), False):
        yield Violation(
            f"{key} {why}: every mount of this volume fails",
            ("spec", "csi", "volumeAttributes", key),
        )


# -- FSx for Lustre ---------------------------------------------------------------------

FSX_DEPLOYMENTS = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
FSX_THROUGHPUT = {
    ("PERSISTENT_1", "SSD"): {50, 100, 200},
    ("PERSISTENT_1", "HDD"): {12, 40},
    ("PERSISTENT_2", "SSD"): {125, 250, 500, 1000},
}
FSX_ENUMS = {
    "dataCompressionType": ("NONE", "LZ4"),
    "autoImportPolicy": ("NONE", "NEW", "NEW_CHANGED", "NEW_CHANGED_DELETED"),
    "driveCacheType": ("NONE", "READ"),
}
FSX_INTEGERS = ("automaticBackupRetentionDays", "perUnitStorageThroughput", "metadataIops")
FSX_BOOLS = ("copyTagsToBackups", "efaEnabled")


def _fsx_problems(parameters: dict[str, Any]) -> Iterator[tuple[str, str]]:
    if not parameters:
        return  # a class only static PersistentVolumes bind to
    if not parameters.get("subnetId"):
        yield "subnetId", "no subnetId: the driver cannot create the file system"
    for key in FSX_INTEGERS:
        if key in parameters and not INTEGER.match(str(parameters[key])):
            yield key, f"{key}: {parameters[key]!r} is not a number"
    for key in FSX_BOOLS:
        if key in parameters and str(parameters[key]) not in GO_BOOLS:
            yield key, f"{key}: {parameters[key]!r} is not a boolean"
    deployment = str(parameters.get("deploymentType", "SCRATCH_1"))
    if deployment not in FSX_DEPLOYMENTS:
        yield (
            "deploymentType",
            (f"deploymentType {deployment!r} is none of {', '.join(FSX_DEPLOYMENTS)}"),
        )
        return
    if deployment == "PERSISTENT_2":
        for key in ("s3ImportPath", "s3ExportPath", "autoImportPolicy"):
            if key in parameters:
                yield (
                    key,
                    f"{key} on PERSISTENT_2, which links S3 only by data repository association",
                )
    for key, values in FSX_ENUMS.items():
        if key in parameters and str(parameters[key]) not in values:
            yield key, f"{key} {parameters[key]!r} is none of {', '.join(values)}"
    storage = str(parameters.get("storageType", "SSD"))
    if storage == "HDD" and deployment != "PERSISTENT_1":
        yield "storageType", f"storageType HDD on {deployment}: only PERSISTENT_1 offers HDD"
    if storage == "HDD" and not parameters.get("driveCacheType"):
        yield "driveCacheType", "storageType HDD needs driveCacheType (NONE or READ)"
    throughput = parameters.get("perUnitStorageThroughput")
    if deployment.startswith("SCRATCH"):
        if throughput is not None:
            yield (
                "perUnitStorageThroughput",
                (f"perUnitStorageThroughput on a {deployment} file system, which takes none"),
            )
        return
    allowed = FSX_THROUGHPUT.get((deployment, storage))
    if throughput is None:
        yield (
            "perUnitStorageThroughput",
            (f"{deployment} needs perUnitStorageThroughput and the class sets none"),
        )
    elif (
        allowed is not None
        and INTEGER.match(str(throughput))
        and int(str(throughput)) not in allowed
    ):
        values = ", ".join(str(v) for v in sorted(allowed))
        yield (
            "perUnitStorageThroughput",
            (
                f"perUnitStorageThroughput {throughput} is not one of {values} ({deployment} "
                f"{storage})"
            ),
        )


@resource_rule(
    id="fsx-storage-class",
    severity=ERROR,
    title="FSx for Lustre storage classes describe a file system FSx can create",
    why="The FSx CSI driver creates a file system per claim from its StorageClass: without "
    "subnetId it fails, numeric and boolean parameters that do not parse fail it, and FSx "
    "refuses a deployment type it does not know, perUnitStorageThroughput on a SCRATCH "
    "deployment, a PERSISTENT deployment without it, and values outside those of the "
    "deployment (PERSISTENT_1 SSD 50/100/200, HDD 12/40; PERSISTENT_2 125/250/500/1000). "
    "Every claim of the class stays Pending and the job waits for its volume forever.",
    fix="Give subnetId and securityGroupIds; for PERSISTENT_1/PERSISTENT_2 a "
    "perUnitStorageThroughput the deployment offers; for SCRATCH none.",
    kinds=("StorageClass",),
    source=(FSX_CONTROLLER, FSX_SUBNET, FSX_API),
)
def fsx_storage_class(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.obj.get("provisioner") != FSX:
        return
    for key, why in _fsx_problems(mapping(doc.obj.get("parameters"))):
        yield Violation(f"{why}: claims of this class are never provisioned", ("parameters", key))


FSX_MODES = {"ReadWriteOnce", "ReadWriteMany"}


@resource_rule(
    id="fsx-access-mode",
    severity=ERROR,
    title="FSx for Lustre volumes use the access modes the driver offers",
    why="The FSx CSI driver supports only single-node writer (ReadWriteOnce) and multi-node "
    "multi-writer (ReadWriteMany): a ReadOnlyMany claim of an FSx class fails CreateVolume "
    "with 'Volume capabilities not supported' and stays Pending, and an FSx PersistentVolume "
    "with it is never mounted.",
    fix="Use ReadWriteMany (and mount read-only in the pod where it must not be written).",
    kinds=("PersistentVolumeClaim", "PersistentVolume"),
    source=FSX_CAPABILITIES,
)
def fsx_access_mode(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "PersistentVolume":
        if mapping(spec.get("csi")).get("driver") != FSX:
            return
    else:
        storage_class = _storage_class(doc, ctx)
        if storage_class is None or storage_class.obj.get("provisioner") != FSX:
            return
        if spec.get("volumeName"):
            return  # bound to a PersistentVolume, checked there
    for mode in sorted({str(m) for m in spec.get("accessModes") or []} - FSX_MODES):
        if mode == "ReadWriteOncePod":
            continue  # mapped onto single-node writer by the provisioner
        yield Violation(
            f"{mode}: the FSx for Lustre driver offers only ReadWriteOnce and ReadWriteMany",
            ("spec", "accessModes"),
        )


@resource_rule(
    id="fsx-static-volume",
    severity=ERROR,
    title="Static FSx for Lustre volumes name the file system to mount",
    why="The FSx CSI driver mounts <dnsname>@tcp:/<mountname> from a PersistentVolume's "
    "volumeAttributes: without dnsname NodePublishVolume fails; without mountname it mounts "
    "/fsx, the mount name of old SCRATCH_1 file systems only, and the mount of any other fails.",
    fix="Copy DNSName and LustreConfiguration.MountName of the file system into "
    "volumeAttributes dnsname and mountname.",
    kinds=("PersistentVolume",),
    source=FSX_NODE,
    when={
        "error": "volumeAttributes has no dnsname",
        "warning": "it has no mountname (only the first SCRATCH_1 file systems mount as fsx)",
    },
)
def fsx_static_volume(doc: Document, ctx: Context) -> Iterator[Violation]:
    csi = mapping(mapping(doc.obj.get("spec")).get("csi"))
    if csi.get("driver") != FSX:
        return
    attributes = mapping(csi.get("volumeAttributes"))
    if not attributes.get("dnsname"):
        yield Violation(
            "no volumeAttributes.dnsname: the driver refuses to mount the volume",
            ("spec", "csi"),
        )
    elif not attributes.get("mountname"):
        yield Violation(
            "no volumeAttributes.mountname: the driver mounts /fsx, which only the earliest "
            "SCRATCH_1 file systems are named",
            ("spec", "csi"),
            severity=WARNING,
        )


def _fsx_deployment(found: Backing) -> str:
    return str(found.parameters.get("deploymentType", "SCRATCH_1"))


@pod_rule(
    id="fsx-scratch-checkpoints",
    severity=WARNING,
    title="Checkpoints are not kept on a scratch FSx for Lustre file system",
    why="SCRATCH_1 and SCRATCH_2 file systems (the driver's default deployment type) do not "
    "replicate data: when a file server fails its files are lost, and with them the "
    "checkpoints a job needs to resume.",
    fix="Write checkpoints to a PERSISTENT_2 (or PERSISTENT_1) class, or copy them to S3 "
    "(s3ExportPath / a data repository association).",
    applies=common.mounts_claims,
)
def fsx_scratch_checkpoints(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        directories = [d for d, _ in common.checkpoint_dirs(container)]
        for position, mount in enumerate(container.get("volumeMounts") or []):
            path = str(mapping(mount).get("mountPath", "")).rstrip("/")
            holds = path in CHECKPOINT_PATHS or any(
                d == path or d.startswith(path + "/") for d in directories
            )
            volume = pod.volume(str(mapping(mount).get("name")))
            found = backing(volume, pod, ctx) if holds and path and volume else None
            if found is None or found.driver != FSX or found.source is None:
                continue
            if found.source.kind == "StorageClass" and _fsx_deployment(found).startswith("SCRATCH"):
                yield Violation(
                    f"checkpoints at {path} are on StorageClass {found.source.name} "
                    f"({_fsx_deployment(found)}), whose data is lost when a file server fails",
                    (*pod.container_path(index), "volumeMounts", position),
                )


LOCKING_CACHES = (
    "HF_HOME",
    "HF_DATASETS_CACHE",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
)


@pod_rule(
    id="lustre-flock",
    severity=WARNING,
    title="Lustre mounts that hold lock-taking caches are mounted with flock",
    why="Hugging Face's hub and datasets caches take file locks (the filelock package, "
    "flock(2)); a Lustre client mounted without the flock option answers flock with ENOSYS "
    "where the file system runs with noflock, and the first download or dataset load fails.",
    fix="Add mountOptions: [flock] to the FSx StorageClass or PersistentVolume, or keep the "
    "caches on a local or NFS volume.",
    applies=common.mounts_claims,
)
def lustre_flock(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        for name in LOCKING_CACHES:
            directory = env.get(name)
            mount = common.mount_for(container, directory) if directory else None
            volume = pod.volume(str(mount.get("name"))) if mount else None
            found = backing(volume, pod, ctx) if volume else None
            if found is None or found.driver != FSX or found.source is None:
                continue
            if not {"flock", "localflock"} & set(found.mount_options):
                yield Violation(
                    f"{name}={directory} is on {found.source.kind} {found.source.name} "
                    "(FSx for Lustre) without the flock mount option",
                    (*pod.container_path(index), "env"),
                )
                break


# -- NFS --------------------------------------------------------------------------------

NFS_PARAMETERS = {"server", "share", "subdir", "ondelete", "mountpermissions"}


@resource_rule(
    id="nfs-csi-parameters",
    severity=ERROR,
    title="NFS CSI storage classes use only the parameters the driver knows",
    why="The NFS CSI driver refuses CreateVolume for any StorageClass parameter other than "
    "server, share, subDir, onDelete and mountPermissions (mountOptions belongs at the "
    "class's top level), for a mountPermissions that is not octal, for an onDelete other "
    "than delete, retain or archive, and without server: the claims stay Pending.",
    fix="Move mount options to the StorageClass's mountOptions and keep to server, share, "
    "subDir, onDelete and mountPermissions.",
    kinds=("StorageClass",),
    source=(NFS_CONTROLLER, NFS_VOLUME),
)
def nfs_csi_parameters(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.obj.get("provisioner") != NFS:
        return
    parameters = mapping(doc.obj.get("parameters"))
    if not parameters:
        return  # a class only static PersistentVolumes bind to
    for key, value in parameters.items():
        lowered = str(key).lower()
        if lowered.startswith("csi.storage.k8s.io/"):
            continue  # read and removed by the external provisioner
        if lowered not in NFS_PARAMETERS:
            yield Violation(
                f"parameter {key} is not one the NFS CSI driver knows: it refuses the claim",
                ("parameters", key),
            )
        elif lowered == "mountpermissions" and value not in ("", None):
            if not re.fullmatch(r"[0-7]+", str(value)):
                yield Violation(f"mountPermissions {value!r} is not octal", ("parameters", key))
        elif lowered == "ondelete" and str(value).lower() not in (
            "",
            "delete",
            "retain",
            "archive",
        ):
            yield Violation(
                f"onDelete {value!r} is none of delete, retain, archive", ("parameters", key)
            )
    if not any(str(k).lower() == "server" and v for k, v in parameters.items()):
        yield Violation("no server parameter: the driver cannot create a volume", ("parameters",))


# -- JuiceFS ----------------------------------------------------------------------------

JUICEFS = "csi.juicefs.com"
JUICEFS_TAG = "https://github.com/juicedata/juicefs-csi-driver/blob/v0.32.4/"
JUICEFS_RESOURCES = JUICEFS_TAG + "pkg/config/setting.go#L1095-L1145"
JUICEFS_OPTIONS = JUICEFS_TAG + "pkg/config/setting.go#L559-L590"
JUICEFS_DELAY = JUICEFS_TAG + "pkg/config/setting.go#L341-L347"
JUICEFS_DEFAULTS = JUICEFS_TAG + "pkg/common/common.go#L78-L81"
JUICEFS_QUANTITIES = (
    "juicefs/mount-cpu-limit",
    "juicefs/mount-memory-limit",
    "juicefs/mount-cpu-request",
    "juicefs/mount-memory-request",
)
# The mount pod's memory limit when juicefs/mount-memory-limit is not set.
JUICEFS_DEFAULT_MEMORY = 5 * 2**30
_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "m": 10**-3,
}
GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$|^0$")


def _bytes(quantity: str) -> float | None:
    match = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPEm]?)", quantity.strip())
    if not match:
        return None
    try:
        return float(match.group(1)) * _SUFFIX[match.group(2)]
    except ValueError:
        return None


def _juicefs_mebibytes(value: str) -> float | None:
    """A size as JuiceFS's ParseToBytes reads it (a bare number is MiB), in bytes."""
    shifts = {"k": 10, "m": 20, "g": 30, "t": 40, "p": 50, "e": 60}
    unit = "m"
    if value and not value[-1].isdigit():
        unit, value = value[-1].lower(), value[:-1]
    try:
        return float(value) * 2 ** shifts[unit] if unit in shifts else None
    except ValueError:
        return None


def _juicefs_problems(
    settings: dict[str, Any], options: tuple[str, ...]
) -> Iterator[tuple[str, str]]:
    """(problem, severity): a buffer-size over the default limit is a warning, since the
    driver's global mount pod patch may raise the limit outside the render."""
    for key in JUICEFS_QUANTITIES:
        value = settings.get(key)
        if value not in (None, "") and not QUANTITY.match(str(value)):
            yield f"{key}: {value!r} is not a quantity", ERROR
    delay = settings.get("juicefs/mount-delete-delay")
    if delay not in (None, "") and not GO_DURATION.match(str(delay)):
        yield f"juicefs/mount-delete-delay: {delay!r} is not a duration (e.g. 1h, 30m)", ERROR
    limit_text = str(settings.get("juicefs/mount-memory-limit") or "")
    limit = _bytes(limit_text) if limit_text else JUICEFS_DEFAULT_MEMORY
    for option in options:
        parts = option.strip().split("=")
        if len(parts) > 2:
            yield f"mount option {option!r} has more than one '='", ERROR
        elif len(parts) == 2 and parts[0].strip() == "buffer-size" and limit and limit > 0:
            size = _juicefs_mebibytes(parts[1].strip())
            if size is not None and size > limit:
                shown = limit_text or "5Gi (the default)"
                yield (
                    f"buffer-size={parts[1].strip()} (MiB) is more than the mount pod's memory "
                    f"limit {shown}",
                    ERROR if limit_text else WARNING,
                )


@resource_rule(
    id="juicefs-mount-settings",
    severity=ERROR,
    title="JuiceFS volumes give their mount pod settings the driver can parse",
    why="The JuiceFS CSI driver builds a mount pod from the volume's attributes (a "
    "StorageClass's parameters become them): juicefs/mount-cpu-limit, mount-memory-limit and "
    "their requests must be quantities, mount-delete-delay a duration, each mount option at "
    "most one key=value, and buffer-size (MiB) no more than the mount pod's memory limit "
    "(5Gi unless set); otherwise NodePublishVolume fails and every pod mounting the volume "
    "stays in ContainerCreating.",
    fix='Write quantities ("8", "32Gi"), raise juicefs/mount-memory-limit above '
    "buffer-size, and give the delay as 1h or 30m.",
    kinds=("StorageClass", "PersistentVolume"),
    source=(JUICEFS_RESOURCES, JUICEFS_OPTIONS, JUICEFS_DELAY, JUICEFS_DEFAULTS),
    when={
        "error": "a setting does not parse, or buffer-size exceeds the memory limit the volume "
        "sets",
        "warning": "buffer-size exceeds the driver's default 5Gi limit (a mount pod patch of "
        "the driver's configuration may raise it)",
    },
)
def juicefs_mount_settings(doc: Document, ctx: Context) -> Iterator[Violation]:
    if doc.kind == "StorageClass":
        if doc.obj.get("provisioner") != JUICEFS:
            return
        settings, base = mapping(doc.obj.get("parameters")), ("parameters",)
        options = tuple(str(o) for o in doc.obj.get("mountOptions") or [])
    else:
        spec = mapping(doc.obj.get("spec"))
        csi = mapping(spec.get("csi"))
        if csi.get("driver") != JUICEFS:
            return
        settings, base = mapping(csi.get("volumeAttributes")), ("spec", "csi", "volumeAttributes")
        options = tuple(str(o) for o in spec.get("mountOptions") or [])
        inline = settings.get("mountOptions")
        if isinstance(inline, str) and inline:
            options += tuple(inline.split(","))
    for problem, severity in _juicefs_problems(settings, options):
        yield Violation(f"{problem}: the JuiceFS mount fails", base, severity=severity)


# -- Azure Blob and Disk ----------------------------------------------------------------

BLOB = "blob.csi.azure.com"
DISK = "disk.csi.azure.com"
BLOB_SOURCE = (
    "https://github.com/kubernetes-sigs/blob-csi-driver/blob/v1.27.9/"
    "pkg/blob/controllerserver.go#L112-L274"
)
DISK_SOURCE = (
    "https://github.com/kubernetes-sigs/azuredisk-csi-driver/blob/v1.34.5/"
    "pkg/azureutils/azure_disk_utils.go#L578-L693"
)
AZURE_PARAMETERS = {
    BLOB: frozenset(
        "accesstier allowblobpublicaccess allowsharedkeyaccess azurestorageaadendpoint "
        "azurestorageauthtype azurestorageidentityclientid azurestorageidentityobjectid "
        "azurestorageidentityresourceid blobstorageaccounttype clientid containername "
        "containernameprefix enableblobversioning fsgroupchangepolicy getlatestaccountkey "
        "ishnsenabled location matchtags mountpermissions mountwithworkloadidentitytoken "
        "msiendpoint networkendpointtype privatednszoneresourcegroup protocol "
        "publicnetworkaccess requireinfraencryption resourcegroup secretname secretnamespace "
        "server skuname softdeleteblobs softdeletecontainers storageaccount storageaccounttype "
        "storageendpointsuffix storeaccountkey subnetname subscriptionid tags tagvaluedelimiter "
        "tenantid usedataplaneapi vnetlinkname vnetname vnetresourcegroup".split()
    ),
    DISK: frozenset(
        "attachdiskinitialdelay cachingmode diskaccessid diskencryptionsetid diskencryptiontype "
        "diskiopsreadwrite diskmbpsreadwrite diskname enableasyncattach enablebursting "
        "enableperformanceplus fstype kind location logicalsectorsize maxshares "
        "networkaccesspolicy perfprofile publicnetworkaccess resourcegroup skuname "
        "storageaccounttype subscriptionid tags tagvaluedelimiter useragent "
        "writeacceleratorenabled zoned".split()
    ),
}
BLOB_PROTOCOLS = ("fuse", "fuse2", "nfs", "aznfs", "nfsv3")
# NodeStageVolume (pkg/blob/nodeserver.go): fsGroupChangePolicy matched exactly,
# mountPermissions parsed by strconv.ParseUint(value, 8, 32).
BLOB_STAGE_SOURCE = (
    "https://github.com/kubernetes-sigs/blob-csi-driver/blob/v1.27.9/"
    "pkg/blob/nodeserver.go#L357-L379"
)
BLOB_FSGROUP_POLICIES = ("None", "Always", "OnRootMismatch")


def _blob_stage_problem(key: str, value: Any) -> str | None:
    text = str(value)
    if key == "fsgroupchangepolicy" and text and text not in BLOB_FSGROUP_POLICIES:
        return f"fsGroupChangePolicy {text!r} is none of None, Always, OnRootMismatch (exact)"
    octal = bool(text) and all(c in "01234567" for c in text)
    if key == "mountpermissions" and text and (not octal or int(text, 8) >= 2**32):
        return f"mountPermissions {text!r} is not an octal number like 0777 (no 0o prefix)"
    return None


@resource_rule(
    id="azure-csi-parameters",
    severity=ERROR,
    title="Azure Blob and Disk storage classes use only the parameters their driver knows",
    why="The Azure Blob and Azure Disk CSI drivers refuse CreateVolume for any StorageClass "
    "parameter they do not know ('invalid parameter ... in storage class'; keys are compared "
    "in lower case), and Blob refuses a protocol other than fuse, fuse2, nfs or aznfs: the "
    "claims stay Pending and the job waits for its volume forever. Blob's NodeStageVolume "
    "also refuses an fsGroupChangePolicy other than None, Always or OnRootMismatch (exact "
    "case) and a mountPermissions that is not octal: the pods stay in ContainerCreating.",
    fix="Keep to the driver's documented parameters; mount options go in the StorageClass's "
    "mountOptions, not its parameters.",
    kinds=("StorageClass",),
    source=(BLOB_SOURCE, BLOB_STAGE_SOURCE, DISK_SOURCE),
)
def azure_csi_parameters(doc: Document, ctx: Context) -> Iterator[Violation]:
    provisioner = doc.obj.get("provisioner")
    known = AZURE_PARAMETERS.get(str(provisioner))
    if known is None:
        return
    for key, value in mapping(doc.obj.get("parameters")).items():
        lowered = str(key).lower()
        if lowered.startswith("csi.storage.k8s.io/") or lowered.startswith("device-setting/"):
            continue
        if lowered not in known:
            yield Violation(
                f"parameter {key} is not one {provisioner} knows: it refuses every claim",
                ("parameters", key),
            )
        elif (
            provisioner == BLOB
            and lowered == "protocol"
            and str(value) not in ("", *BLOB_PROTOCOLS)
        ):
            yield Violation(
                f"protocol {value!r} is none of fuse, fuse2, nfs, aznfs", ("parameters", key)
            )
        elif provisioner == BLOB and (problem := _blob_stage_problem(lowered, value)):
            yield Violation(f"{problem}: the driver cannot mount the volume", ("parameters", key))
