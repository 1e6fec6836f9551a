"""Storage semantics: claims and StorageClasses the API server accepts, claims their storage
class can provide and bind, and writes to read-only places."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule, sets_any
from trainops.policy.pods import PodTemplate, env_index, env_of, mapping

from . import commandline, common

# Filesystem access modes each block-storage provisioner can give (multi-node writers only
# with volumeMode: Block, e.g. EBS io2 Multi-Attach or Azure shared disks).
BLOCK_PROVISIONERS = {
    "ebs.csi.aws.com": {"ReadWriteOnce", "ReadWriteOncePod"},
    "kubernetes.io/aws-ebs": {"ReadWriteOnce"},
    "pd.csi.storage.gke.io": {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"},
    "kubernetes.io/gce-pd": {"ReadWriteOnce", "ReadOnlyMany"},
    "disk.csi.azure.com": {"ReadWriteOnce", "ReadWriteOncePod"},
    "kubernetes.io/azure-disk": {"ReadWriteOnce"},
    "rbd.csi.ceph.com": {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"},
    "cinder.csi.openstack.org": {"ReadWriteOnce"},
    "rancher.io/local-path": {"ReadWriteOnce", "ReadWriteOncePod"},
    "topolvm.io": {"ReadWriteOnce", "ReadWriteOncePod"},
    "dobs.csi.digitalocean.com": {"ReadWriteOnce"},
}
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
# Environment variables naming directories the program writes into (caches, temp files).
WRITTEN_DIRECTORIES = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "HF_DATASETS_CACHE",
    "TORCH_HOME",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "XDG_CACHE_HOME",
    "TMPDIR",
)
READ_ONLY_SOURCES = ("configMap", "secret", "downwardAPI", "projected")


def _storage_class(pvc: Document, ctx: Context) -> Document | None:
    name = mapping(pvc.obj.get("spec")).get("storageClassName")
    if isinstance(name, str) and name:
        return ctx.find("StorageClass", name)
    if name == "":
        return None
    return ctx.memo("default-storage-class", lambda: _default_class(ctx))


def _default_class(ctx: Context) -> Document | None:
    for storage_class in ctx.of_kind("StorageClass"):
        if str(mapping(storage_class.metadata.get("annotations")).get(DEFAULT_CLASS)) == "true":
            return storage_class
    return None


@resource_rule(
    id="pvc-access-mode-unsupported",
    severity=WARNING,
    title="Claims ask for access modes their storage class can provide",
    why="Block storage (EBS, GCE PD, Azure Disk, Ceph RBD, local paths) attaches a filesystem "
    "to one node: a ReadWriteMany claim on it is never provisioned, and EBS or Azure Disk "
    "cannot give ReadOnlyMany either. The claim stays Pending and every pod that mounts it "
    "waits with it.",
    fix="Use a file storage class (EFS, Filestore, Azure Files, CephFS, NFS, Lustre) for "
    "claims several nodes share, or ReadWriteOnce for one pod.",
    kinds=("PersistentVolumeClaim",),
)
def access_mode_unsupported(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = mapping(doc.obj.get("spec"))
    modes = {str(m) for m in spec.get("accessModes") or []}
    if spec.get("volumeMode") == "Block" or not modes - {"ReadWriteOnce", "ReadWriteOncePod"}:
        return
    storage_class = _storage_class(doc, ctx)
    if storage_class is None:
        return
    provisioner = str(storage_class.obj.get("provisioner", ""))
    allowed = BLOCK_PROVISIONERS.get(provisioner)
    for mode in sorted(modes - allowed if allowed is not None else ()):
        yield Violation(
            f"{mode} on StorageClass {storage_class.name} ({provisioner}), which provides "
            f"only {', '.join(sorted(allowed))} for a filesystem",
            ("spec", "accessModes"),
        )


def _read_only(mount: dict[str, Any], pod: PodTemplate, ctx: Context) -> str | None:
    """Why a mount cannot be written, or None when it can."""
    if mount.get("readOnly") is True:
        return f"mounted readOnly at {mount.get('mountPath')}"
    volume = pod.volume(str(mount.get("name")))
    if volume is None:
        return None
    source = next((k for k in READ_ONLY_SOURCES if k in volume), None)
    if source is not None:
        return f"a {source} volume (always read-only)"
    claim = mapping(volume.get("persistentVolumeClaim"))
    if claim.get("readOnly") is True:
        return f"claim {claim.get('claimName')} mounted readOnly"
    pvc = ctx.find("PersistentVolumeClaim", str(claim.get("claimName")), pod.doc.namespace or None)
    modes = set(mapping(pvc.obj.get("spec")).get("accessModes") or []) if pvc else set()
    if modes == {"ReadOnlyMany"}:
        return f"claim {claim.get('claimName')} is ReadOnlyMany"
    return None


@pod_rule(
    id="read-only-write-path",
    severity=ERROR,
    source="https://v1-35.docs.kubernetes.io/docs/concepts/storage/volumes/#using-subpath",
    title="What a container writes is on a writable mount",
    why="A checkpoint directory or a cache the program writes (HF_HOME, TORCH_HOME, "
    "TRITON_CACHE_DIR, TMPDIR...) on a read-only mount fails with EROFS at the first save; "
    "with readOnlyRootFilesystem, a directory outside every mount does too, and torchrun "
    "cannot even create its log directory when /tmp is not a writable mount.",
    fix="Mount a writable volume (an emptyDir for caches and /tmp, a ReadWriteMany claim for "
    "checkpoints) at the path, or point the variable at one.",
    applies=common.has_command_or_env,
)
def read_only_write_path(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        read_only_root = mapping(container.get("securityContext")).get("readOnlyRootFilesystem")
        for directory, relative, checkpoint in _written(container):
            if not directory.startswith("/"):
                continue
            mount = common.mount_for(container, directory)
            at = (*pod.container_path(index), *relative)
            if mount is not None:
                reason = _read_only(mount, pod, ctx)
                if reason is not None:
                    yield Violation(f"{directory} is on {reason}", at)
            elif read_only_root is True and not checkpoint:  # checkpoint-dir-not-mounted says it
                yield Violation(f"{directory} is on the container's read-only root filesystem", at)
        if read_only_root is True and commandline.runs(container, commandline.LAUNCHERS):
            tmp = env_of(container).get("TMPDIR") or "/tmp"
            mount = common.mount_for(container, tmp)
            if mount is None or _read_only(mount, pod, ctx) is not None:
                yield Violation(
                    f"readOnlyRootFilesystem with no writable mount at {tmp}: the launcher "
                    "cannot create its temporary files",
                    (*pod.container_path(index), "securityContext", "readOnlyRootFilesystem"),
                )


def _written(container: dict[str, Any]) -> Iterator[tuple[str, tuple[Any, ...], bool]]:
    """(directory, path in the container, whether it holds checkpoints)."""
    for directory, relative in common.checkpoint_dirs(container):
        yield directory, relative, True
    env = env_of(container)
    for name in WRITTEN_DIRECTORIES:
        value = env.get(name)
        if value:
            yield value, ("env", env_index(container, name), "value"), False


# -- what the API server refuses in claims and classes; how claims bind -----------------------

CORE_VALIDATION = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/apis/core/validation/validation.go"
)
STORAGE_VALIDATION = (
    "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/apis/storage/validation/"
    "validation.go"
)
BINDING_MODE = (
    "https://v1-35.docs.kubernetes.io/docs/concepts/storage/storage-classes/#volume-binding-mode"
)
ACCESS_MODES = frozenset({"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"})


def _claim_specs(doc: Document) -> Iterator[tuple[dict[str, Any], tuple[Any, ...]]]:
    """The claim specs a document holds: a PVC's, a StatefulSet's volumeClaimTemplates'."""
    if doc.kind == "PersistentVolumeClaim":
        yield mapping(doc.obj.get("spec")), ("spec",)
        return
    templates = mapping(doc.obj.get("spec")).get("volumeClaimTemplates")
    for index, template in enumerate(templates if isinstance(templates, list) else []):
        yield (
            mapping(mapping(template).get("spec")),
            ("spec", "volumeClaimTemplates", index, "spec"),
        )


@resource_rule(
    id="pvc-spec-invalid",
    severity=ERROR,
    title="Claims have the access modes, size and volume mode the API server requires",
    why="ValidatePersistentVolumeClaimSpec refuses a claim (or a StatefulSet's claim "
    "template) without an access mode, with ReadWriteOncePod next to another mode, with an "
    "unknown mode or volumeMode, or without a positive resources.requests.storage: the claim "
    "is never created and the pods that mount it never start.",
    fix="Give the claim one access mode (ReadWriteMany for a shared checkpoint volume), a "
    "storage request such as 10Ti, and volumeMode Filesystem or Block.",
    kinds=("PersistentVolumeClaim", "StatefulSet"),
    source=CORE_VALIDATION,
)
def pvc_spec_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    from trainops import quantity

    for spec, at in _claim_specs(doc):
        modes = spec.get("accessModes")
        modes = [str(m) for m in modes] if isinstance(modes, list) else []
        if not modes:
            yield Violation("no accessModes: at least one is required", (*at, "accessModes"))
        for mode in modes:
            if mode not in ACCESS_MODES:
                yield Violation(
                    f"access mode {mode} is not one of {', '.join(sorted(ACCESS_MODES))}",
                    (*at, "accessModes"),
                )
        if "ReadWriteOncePod" in modes and len(set(modes) & ACCESS_MODES) > 1:
            yield Violation(
                "ReadWriteOncePod may not be used with other access modes", (*at, "accessModes")
            )
        requests = mapping(mapping(spec.get("resources")).get("requests"))
        if "storage" not in requests:
            yield Violation(
                "no resources.requests.storage: the claim's size is required",
                (*at, "resources"),
            )
        else:
            size = quantity.parse(requests["storage"])
            if size is not None and size <= 0:
                yield Violation(
                    f"storage request {requests['storage']} must be greater than zero",
                    (*at, "resources", "requests", "storage"),
                )
        mode = spec.get("volumeMode")
        if mode is not None and mode not in ("Filesystem", "Block"):
            yield Violation(f"volumeMode {mode} is not Filesystem or Block", (*at, "volumeMode"))


@resource_rule(
    id="storageclass-invalid",
    severity=ERROR,
    title="StorageClasses name a provisioner, a reclaim policy and a binding mode that exist",
    why="ValidateStorageClass refuses a class without a provisioner, with a reclaimPolicy "
    "other than Delete or Retain (Recycle is not one for classes) or a volumeBindingMode "
    "other than Immediate or WaitForFirstConsumer: the class is never created and every "
    "claim naming it stays Pending.",
    fix="Set provisioner to the CSI driver's name, reclaimPolicy Retain or Delete, and "
    "volumeBindingMode Immediate or WaitForFirstConsumer.",
    kinds=("StorageClass",),
    source=STORAGE_VALIDATION,
)
def storageclass_invalid(doc: Document, ctx: Context) -> Iterator[Violation]:
    obj = doc.obj
    if not obj.get("provisioner"):
        yield Violation("no provisioner: it is required", ("provisioner",))
    policy = obj.get("reclaimPolicy")
    if policy is not None and policy not in ("Delete", "Retain"):
        yield Violation(f"reclaimPolicy {policy} is not Delete or Retain", ("reclaimPolicy",))
    mode = obj.get("volumeBindingMode")
    if mode is not None and mode not in ("Immediate", "WaitForFirstConsumer"):
        yield Violation(
            f"volumeBindingMode {mode} is not Immediate or WaitForFirstConsumer",
            ("volumeBindingMode",),
        )


@resource_rule(
    id="storageclass-one-default",
    severity=WARNING,
    title="One StorageClass is the default",
    why="When several StorageClasses carry storageclass.kubernetes.io/is-default-class: "
    '"true", a claim without storageClassName gets the most recently created of them: '
    "which storage a claim lands on depends on the order the classes were made.",
    fix="Mark exactly one StorageClass as the default; name the class in claims that need another.",
    kinds=("StorageClass",),
    source=BINDING_MODE.replace("#volume-binding-mode", "#default-storageclass"),
)
def storageclass_one_default(doc: Document, ctx: Context) -> Iterator[Violation]:
    defaults = ctx.memo("default-storage-classes", lambda: _defaults(ctx))
    if len(defaults) > 1 and doc is defaults[1]:
        yield Violation(
            f"StorageClasses {', '.join(d.name for d in defaults)} are all marked default",
            ("metadata", "annotations", DEFAULT_CLASS),
        )


def _defaults(ctx: Context) -> list[Document]:
    return [
        storage_class
        for storage_class in ctx.of_kind("StorageClass")
        if str(mapping(storage_class.metadata.get("annotations")).get(DEFAULT_CLASS)) == "true"
    ]


@resource_rule(
    id="pvc-storage-class-exists",
    severity=WARNING,
    title="Claims name a StorageClass the cluster has",
    why="A claim naming a StorageClass that does not exist is never provisioned: it waits "
    "for a PersistentVolume of that class, and the pods that mount it stay Pending. When "
    "the render (or the cluster's platform) defines the StorageClasses, a name among none "
    "of them is most likely misspelt.",
    fix="Name one of the StorageClasses the cluster defines (or leave storageClassName out "
    "for the default).",
    kinds=("PersistentVolumeClaim", "StatefulSet"),
    render_needs=("StorageClass",),
)
def pvc_storage_class_exists(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not ctx.of_kind("StorageClass"):
        return  # the render does not say which classes the cluster has
    for spec, at in _claim_specs(doc):
        name = spec.get("storageClassName")
        if isinstance(name, str) and name and ctx.find("StorageClass", name) is None:
            if spec.get("volumeName"):
                continue  # binds a pre-created volume of that class
            known = ctx.known_names("StorageClass")
            yield Violation(
                f"StorageClass {name} is not in the render (it has {known})",
                (*at, "storageClassName"),
            )


@pod_rule(
    id="pvc-wait-for-consumer-node-name",
    severity=ERROR,
    title="Pods pinned with nodeName do not mount claims that wait for a consumer",
    why="A claim of a StorageClass with volumeBindingMode WaitForFirstConsumer is provisioned "
    "when the scheduler picks a node for its first pod. A pod with spec.nodeName bypasses "
    "the scheduler, so the claim is never provisioned and the pod waits for its volume "
    "forever.",
    fix="Place the pod with a nodeSelector or node affinity (kubernetes.io/hostname) instead "
    "of nodeName, or use a class with volumeBindingMode Immediate.",
    applies=sets_any("nodeName"),
    source=BINDING_MODE,
)
def wait_for_consumer_node_name(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if not pod.spec.get("nodeName"):
        return
    for volume in pod.volumes():
        claim = mapping(volume.get("persistentVolumeClaim")).get("claimName")
        template = mapping(mapping(volume.get("ephemeral")).get("volumeClaimTemplate"))
        storage_class = None
        if claim:
            pvc = ctx.find("PersistentVolumeClaim", str(claim), pod.doc.namespace or None)
            if pvc is None or mapping(pvc.obj.get("spec")).get("volumeName"):
                continue
            storage_class = _storage_class(pvc, ctx)
        elif template:
            name = mapping(template.get("spec")).get("storageClassName")
            storage_class = (
                ctx.find("StorageClass", name)
                if isinstance(name, str) and name
                else None
                if name == ""
                else ctx.memo("default-storage-class", lambda: _default_class(ctx))
            )
        if storage_class is None:
            continue
        if storage_class.obj.get("volumeBindingMode") == "WaitForFirstConsumer":
            yield Violation(
                f"volume {volume.get('name')} comes from StorageClass {storage_class.name} "
                f"(WaitForFirstConsumer) and the pod sets nodeName {pod.spec['nodeName']}",
                (*pod.path, "nodeName"),
            )
