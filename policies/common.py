"""Facts about pods that several rules share (no rules here)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trainops import multus
from trainops.model import Document
from trainops.policy import Context, needs
from trainops.policy.pods import (
    GPU_RESOURCES,
    TRAINING_KINDS,
    PodTemplate,
    argv,
    dicts,
    env_of,
    is_int,
    mapping,
    resources,
)
from trainops.policy.trainjob import TRAINER_STEP_LABEL

from . import commandline

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RDMA_RESOURCE = re.compile(r"(^rdma/)|(rdma|roce|infiniband|_vf$|/ib[_-]|sriov)", re.IGNORECASE)
# Resource names that say RDMA outright; a plain SR-IOV VF may be an Ethernet netdevice.
RDMA_ONLY = re.compile(r"(^rdma/)|(rdma|roce|infiniband|/ib[_-]|hca)", re.IGNORECASE)
CHECKPOINT_FLAGS = (
    "--checkpoint-dir",
    "--checkpoint_dir",
    "--output_dir",
    "--output-dir",
    "--save_dir",
    "--save-dir",
    "--ckpt-dir",
    "--ckpt_dir",
)


# `applies` predicates. Each must hold wherever the rules that name it can report: it
# reads only fields those rules need for any finding, and is computed once per document
# or pod (`pod.memo`), so a plain Deployment meets few rules beyond the security ones.


def env_names(pod: PodTemplate) -> frozenset[str]:
    """Names of the variables any container of the pod sets (literal or valueFrom)."""
    if "env" not in pod.container_fields:
        return frozenset()
    return pod.memo(
        "env-names", lambda: frozenset(name for c in pod.containers for name in env_of(c))
    )


@needs("env")
def has_env(pod: PodTemplate) -> bool:
    """Pods with an env list in some container (rules that read variables)."""
    return "env" in pod.container_fields and pod.memo(
        "has-env", lambda: any(c.get("env") for c in pod.containers)
    )


@needs("command", "args")
def has_command(pod: PodTemplate) -> bool:
    """Pods with a command or args in some container (rules that read command lines)."""
    return not pod.container_fields.isdisjoint(("command", "args")) and pod.memo(
        "has-command", lambda: any(c.get("command") or c.get("args") for c in pod.containers)
    )


@needs("command", "args", "env")
def has_command_or_env(pod: PodTemplate) -> bool:
    """Pods whose containers set a command, args or variables."""
    return has_command(pod) or has_env(pod)


@needs("volumeMounts")
def mounts_volumes(pod: PodTemplate) -> bool:
    """Pods with a volume mount in some container (checkpoint and /dev/shm volumes)."""
    return "volumeMounts" in pod.container_fields and pod.memo(
        "mounts", lambda: any(c.get("volumeMounts") for c in pod.containers)
    )


@needs("volumes")
def mounts_claims(pod: PodTemplate) -> bool:
    """Pods with a PersistentVolumeClaim volume."""
    return bool(pod.spec.get("volumes")) and pod.memo(
        "claims",
        lambda: any(
            isinstance(mapping(v).get("persistentVolumeClaim"), dict)
            for v in pod.spec.get("volumes") or []
        ),
    )


# Resources every pod may ask for and none of them a device.
PLAIN_RESOURCES = frozenset(("cpu", "memory", "ephemeral-storage"))


@needs("resources")
def requests_rdma(pod: PodTemplate) -> bool:
    """Pods with a container that requests an RDMA or SR-IOV device (`rdma_resources`)."""
    if pod.resource_names <= PLAIN_RESOURCES:
        return False
    return pod.memo(
        "rdma",
        lambda: any(is_rdma_resource(name) for name in pod.resource_names),
    )


@needs(multus.ANNOTATION)
def attaches_networks(pod: PodTemplate) -> bool:
    """Pods whose template names Multus networks."""
    value = pod.annotations.get(multus.ANNOTATION)
    return isinstance(value, str) and bool(value.strip())


@needs("command", "args")
def runs_torchrun(pod: PodTemplate) -> bool:
    """Pods with a container that starts torchrun (or trainer-launch)."""
    return has_command(pod) and pod.memo(
        "torchrun", lambda: any(commandline.runs_torchrun(c) for c in pod.containers)
    )


RENDEZVOUS_ENV = frozenset(("MASTER_ADDR", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT"))


@needs("command", "args", "env", kinds=("PyTorchJob",))
def torch_rendezvous(pod: PodTemplate) -> bool:
    """Pods that take part in a torch rendezvous: a PyTorchJob's, or any that starts
    torchrun or names a rendezvous address in its environment."""
    return (
        pod.doc.kind == "PyTorchJob"
        or runs_torchrun(pod)
        or not RENDEZVOUS_ENV.isdisjoint(env_names(pod))
    )


def queued(doc: Document) -> bool:
    """Documents labelled with a Kueue queue (kueue.x-k8s.io/queue-name)."""
    return bool(mapping(doc.metadata.get("labels")).get(KUEUE_LABEL))


@needs(KUEUE_LABEL)
def queued_pod(pod: PodTemplate) -> bool:
    """Pods of a document labelled with a Kueue queue."""
    return queued(pod.doc)


@needs(*GPU_RESOURCES)
def gpu_pod(pod: PodTemplate) -> bool:
    """Pods that request GPUs (the `applies` predicate of GPU-only pod rules)."""
    return pod.uses_gpus


@needs(*GPU_RESOURCES, kinds=TRAINING_KINDS)
def training_pod(pod: PodTemplate) -> bool:
    """Pods of a training job kind, or any pod holding GPUs."""
    return pod.training or pod.uses_gpus


# (launcher role, role whose pods run the ranks) of each kind with an MPI launcher.
MPI_ROLES = {
    "MPIJob": ("Launcher", "Worker"),
    "ClusterTrainingRuntime": ("launcher", "node"),
    "TrainingRuntime": ("launcher", "node"),
}
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
ROOT_SSH = "/root/.ssh"  # where the MPI Operator and Trainer v2 mount SSH keys by default


def replicated_jobs(runtime: Document) -> list[dict[str, Any]]:
    """A (Cluster)TrainingRuntime's replicated jobs."""
    template = mapping(mapping(runtime.obj.get("spec")).get("template"))
    return dicts(mapping(template.get("spec")).get("replicatedJobs"))


def trainer_step(runtime: Document) -> str:
    """The replicated job a TrainJob's trainer settings go to: the one labelled as the
    trainer ancestor step (else the one named node)."""
    for job in replicated_jobs(runtime):
        labels = mapping(mapping(mapping(job.get("template")).get("metadata")).get("labels"))
        if labels.get(TRAINER_STEP_LABEL) == "trainer":
            return str(job.get("name"))
    return "node"


def mpi_runtime(doc: Document) -> bool:
    """A Trainer v2 runtime whose ML policy is MPI (mpirun on a launcher job)."""
    policy = (doc.obj.get("spec") or {}).get("mlPolicy")
    return isinstance(policy, dict) and isinstance(policy.get("mpi"), dict)


def mpi_roles(pod: PodTemplate) -> tuple[str, str] | None:
    """(launcher role, rank role) when the pod belongs to an MPI job: an MPIJob, a Trainer
    v2 MPI runtime, or a TrainJob resolved against one."""
    source = pod.runtime or pod.doc
    roles = MPI_ROLES.get(source.kind)
    if roles is None or (source.kind != "MPIJob" and not mpi_runtime(source)):
        return None
    return roles


@needs(kinds=(*MPI_ROLES, "TrainJob"))
def is_mpi_launcher(pod: PodTemplate) -> bool:
    roles = mpi_roles(pod)
    return roles is not None and pod.role == roles[0]


@needs("command", "args", kinds=TRAINING_KINDS)
def trains(pod: PodTemplate) -> bool:
    """Pods that run a training job's ranks: a training kind's, or any pod whose command
    starts a distributed launcher (torchrun, mpirun, deepspeed, accelerate...)."""
    return pod.training or (
        has_command(pod)
        and pod.memo(
            "launches",
            lambda: any(commandline.runs(c, commandline.LAUNCHERS) for c in pod.containers),
        )
    )


@needs(*GPU_RESOURCES)
def gpu_trainer(pod: PodTemplate) -> bool:
    """GPU pods that train (the `applies` predicate of checkpoint and grace-period rules)."""
    return pod.uses_gpus and trains(pod)


def rank_pod(pod: PodTemplate, ctx: Context) -> PodTemplate:
    """Where this pod's settings take effect: an MPI launcher's ranks run in the Workers
    (MPIJob) or the nodes (a Trainer v2 MPI runtime)."""
    roles = mpi_roles(pod)
    if roles is not None and pod.role == roles[0]:
        ranks = roles[1]
        for other in ctx.pods(pod.doc):
            if other.role == ranks:
                return other
    return pod


@dataclass(frozen=True)
class MpiJob:
    """An MPI launch as its operator will run it, seen from its launcher pod."""

    api: str  # "v1" (kubectl exec), "v2beta1" (MPI Operator, SSH), "trainer" (Trainer v2, SSH)
    implementation: str  # OpenMPI | Intel | MPICH
    ranks: PodTemplate | None  # the pods the ranks run in (Workers, or a runtime's nodes)
    ranks_role: str
    launcher_computes: bool  # the launcher is in the hostfile too
    compute_field: tuple[Any, ...]  # runLauncherAsWorker / runLauncherAsNode
    slots: Any  # ranks per worker pod as the hostfile will say
    slots_field: tuple[Any, ...]
    ssh_path: str | None  # where the operator mounts the SSH keys (None: no SSH)
    ssh_path_field: tuple[Any, ...]

    @property
    def over_ssh(self) -> bool:
        return self.api != "v1"


def mpi_job(pod: PodTemplate, ctx: Context) -> MpiJob | None:
    """The MPI launch whose launcher `pod` is (None for any other pod)."""
    roles = mpi_roles(pod)
    if roles is None or pod.role != roles[0]:
        return None
    ranks = next((p for p in ctx.pods(pod.doc) if p.role == roles[1]), None)
    source = pod.runtime or pod.doc
    spec = mapping(source.obj.get("spec"))
    if source.kind == "MPIJob":
        slots = spec.get("slotsPerWorker", 1)
        slots_field = ("spec", "slotsPerWorker")
        if not source.api_version.endswith("/v2beta1"):
            # v1: a launcher that requests GPUs is put in the hostfile.
            return MpiJob(
                "v1", "OpenMPI", ranks, roles[1], pod.uses_gpus, (), slots, slots_field, None, ()
            )
        return MpiJob(
            "v2beta1",
            str(spec.get("mpiImplementation") or "OpenMPI"),
            ranks,
            roles[1],
            spec.get("runLauncherAsWorker") is True,
            ("spec", "runLauncherAsWorker"),
            slots,
            slots_field,
            str(spec.get("sshAuthMountPath") or ROOT_SSH),
            ("spec", "sshAuthMountPath"),
        )
    policy = mapping(mapping(spec.get("mlPolicy")).get("mpi"))
    slots = policy.get("numProcPerNode", 1)
    trainer = mapping(mapping(pod.doc.obj.get("spec")).get("trainer"))
    if pod.doc.kind == "TrainJob" and "numProcPerNode" in trainer:
        slots = trainer["numProcPerNode"]
    elif slots == 1 and ranks is not None and ranks.gpus > 1:
        slots = ranks.gpus  # the MPI plugin's default: one slot per GPU
    field = ("spec", "mlPolicy", "mpi")
    return MpiJob(
        "trainer",
        str(policy.get("mpiImplementation") or "OpenMPI"),
        ranks,
        roles[1],
        policy.get("runLauncherAsNode") is True,
        (*field, "runLauncherAsNode"),
        slots,
        (*field, "numProcPerNode"),
        str(policy.get("sshAuthMountPath") or ROOT_SSH),
        (*field, "sshAuthMountPath"),
    )


def mpirun_exports(words: list[str]) -> dict[str, str | None]:
    """What Open MPI's mpirun exports with -x: name -> value given inline (None: the
    launcher's own value)."""
    out: dict[str, str | None] = {}
    for index, word in enumerate(words):
        item = None
        if word in ("-x", "--x") and index + 1 < len(words):
            item = words[index + 1]
        elif word.startswith(("-x ", "-x=")):
            item = word[3:].strip()
        if item:
            name, sep, value = item.partition("=")
            out[name] = value if sep else None
    return out


def rank_env(pod: PodTemplate, container: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """The environment of the processes that run in `container`. Ranks of an MPI job
    started over SSH (MPI Operator, Trainer v2 MPI runtime) run in the workers but get
    the launcher's environment: what -x exports (Open MPI) or all of it (Hydra)."""
    roles = mpi_roles(pod)
    if roles is None or pod.role != roles[1]:
        return env_of(container)
    launcher = next((p for p in ctx.pods(pod.doc) if p.role == roles[0]), None)
    job = mpi_job(launcher, ctx) if launcher is not None else None
    if job is None or not job.over_ssh or not launcher.containers:
        return env_of(container)
    own = env_of(launcher.containers[0])
    if job.implementation != "OpenMPI":
        return own
    exports = mpirun_exports(argv(launcher.containers[0]))
    return {name: own.get(name) if value is None else value for name, value in exports.items()}


def run_as_users(pod: PodTemplate) -> set[int]:
    """The uids the pod's containers run as, where the manifests say (pod or container)."""
    pod_uid = mapping(pod.spec.get("securityContext")).get("runAsUser")
    out = set()
    for container in pod.containers:
        uid = mapping(container.get("securityContext")).get("runAsUser", pod_uid)
        if is_int(uid):
            out.add(uid)
    return out


def pod_namespace(pod: PodTemplate) -> str | None:
    """The namespace the pod runs in; None for a ClusterTrainingRuntime, whose pods run in
    the namespace of each TrainJob that names it."""
    if pod.doc.kind == "ClusterTrainingRuntime":
        return None
    return pod.doc.namespace or "default"


def multi_node(pod: PodTemplate, ctx: Context) -> bool:
    total = sum(p.replicas or 1 for p in ctx.pods(pod.doc))
    return total > 1


def attached_nads(pod: PodTemplate, ctx: Context) -> list[tuple[multus.Attachment, Any]]:
    value = pod.annotations.get(multus.ANNOTATION)
    if not isinstance(value, str) or not value.strip():
        return []
    try:
        found = multus.attachments(value, pod_namespace(pod) or "")
    except multus.AnnotationError:
        return []
    out = []
    for attachment in found:
        # An unqualified name in a cluster-wide runtime: a NAD of that name in any namespace.
        namespace = attachment.namespace or None
        nad = ctx.find("NetworkAttachmentDefinition", attachment.name, namespace)
        out.append((attachment, nad))
    return out


def is_rdma_resource(name: str) -> bool:
    """An RDMA or SR-IOV device resource (a GPU is neither)."""
    return bool(RDMA_RESOURCE.search(name)) and not name.startswith("nvidia.com/gpu")


def rdma_resources(container: dict[str, Any]) -> list[str]:
    names = set(resources(container, "limits")) | set(resources(container, "requests"))
    return sorted(n for n in names if is_rdma_resource(n))


def nad_is_rdma(nad: Any) -> bool:
    if nad is None:
        return False
    annotations = nad.metadata.get("annotations") or {}
    if multus.RESOURCE_ANNOTATION in annotations:
        return True
    cni, _ = multus.config(nad.obj)
    return bool(cni) and bool(set(multus.types(cni)) & multus.RDMA_TYPES)


def on_rdma_fabric(pod: PodTemplate, ctx: Context) -> bool:
    """The pod is meant to use RDMA: an RDMA network, an RDMA profile or NCCL_IB_HCA."""
    if any(nad_is_rdma(nad) for _, nad in attached_nads(pod, ctx)):
        return True
    if ctx.profile is not None and ctx.profile.rdma and pod.uses_gpus:
        return True
    # Asking NCCL for its IB transport (an HCA list, or IB explicitly enabled) means RDMA.
    return any(
        "NCCL_IB_HCA" in env or env.get("NCCL_IB_DISABLE") == "0"
        for env in (env_of(c) for c in pod.containers)
    )


def checkpoint_dirs(container: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """(directory, path relative to the container) the trainer writes checkpoints to."""
    out = []
    for index, entry in enumerate(container.get("env") or []):
        named = isinstance(entry, dict) and entry.get("name") == "TRAINER_CHECKPOINT_DIR"
        if named and isinstance(entry.get("value"), str):
            out.append((entry["value"], ("env", index, "value")))
    words = argv(container)
    for index, word in enumerate(words):
        flag, sep, value = word.partition("=")
        if flag in CHECKPOINT_FLAGS:
            target = value if sep else (words[index + 1] if index + 1 < len(words) else "")
            if target:
                out.append((target, ("args",)))
    return out


def mount_for(container: dict[str, Any], directory: str) -> dict[str, Any] | None:
    """The volume mount holding `directory` (the longest matching mountPath)."""
    best = None
    for mount in container.get("volumeMounts") or []:
        path = str(mount.get("mountPath", "")).rstrip("/")
        holds = bool(path) and (directory == path or directory.startswith(path + "/"))
        if holds and (best is None or len(path) > len(str(best["mountPath"]).rstrip("/"))):
            best = mount
    return best


def configmap_file(pod: PodTemplate, ctx: Context, container: dict[str, Any], path: str):
    """(text, 'name/key') of the ConfigMap file at `path` in the container when the
    ConfigMap is rendered; text is None when the ConfigMap has no such file."""
    best = None
    for mount in container.get("volumeMounts") or []:
        mount_path = str(mapping(mount).get("mountPath", "")).rstrip("/")
        longer = best is None or len(mount_path) > len(best[0])
        if mount_path and path.startswith(mount_path + "/") and longer:
            best = (mount_path, mapping(mount))
    if best is None:
        return None
    mount_path, mount = best
    relative = path[len(mount_path) + 1 :]
    if mount.get("subPath"):
        return None
    volume = mapping(pod.volume(str(mount.get("name"))))
    source = mapping(volume.get("configMap"))
    if not source.get("name"):
        return None
    found = ctx.find("ConfigMap", str(source["name"]), pod.doc.namespace or None)
    if found is None:
        return None
    key: str | None = relative
    items = source.get("items")
    if isinstance(items, list):
        key = next((str(i.get("key")) for i in dicts(items) if i.get("path") == relative), None)
    where = f"ConfigMap {source['name']}" + (f" key {key}" if key else f" (no item {relative})")
    if key is not None and key in mapping(found.obj.get("binaryData")):
        return None  # a binary config (base64 or compressed): not read here
    text = mapping(found.obj.get("data")).get(key) if key is not None else None
    return (text if isinstance(text, str) else None), where
