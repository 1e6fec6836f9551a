"""Storage semantics: claims their storage class can provide, and writes to read-only places."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
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
