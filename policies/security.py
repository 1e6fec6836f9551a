"""Supply chain and security: pinned images and bases, no host access, no secrets in Git.

Every rule here is registered with `security=True`: a resource cannot exempt itself
from it with an annotation (only the platform's policies/config.yaml can, or an
annotation under a path that file lists), so a run's pull request cannot switch off
the check that stands between it and a GPU node's root.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, render_rule, resource_rule, sets_any
from trainops.policy.pods import (
    GPU_RESOURCES,
    PodTemplate,
    dicts,
    mapping,
    resources,
)
from trainops.policy.posture import POSTURE, THREAT_MODEL, tenant_workload

from . import common

# Device resources of fabrics that register memory for the NIC without an "rdma" name.
FABRIC_DEVICES = frozenset({"vpc.amazonaws.com/efa"})

# A whole value that a template tool or a reader replaces: $VAR, ${VAR}, {{ .x }}, <token>.
PLACEHOLDER = re.compile(r"^(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|<[^<>]+>)$")
FLOATING_TAGS = {"latest", "main", "master", "nightly", "edge", "dev", "stable"}
SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)$", re.I
)
SECRET_VALUE = re.compile(
    r"^(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|xox[bpas]-[\w-]{10,}"
    r"|sk-[A-Za-z0-9_-]{20,}|glpat-[\w-]{20,})$"
)


def _tag(image: str) -> tuple[str, str]:
    if "@sha256:" in image:
        return image, "digest"
    repository, colon, tag = image.rpartition(":")
    # A colon before the last slash is a registry's port, not a tag.
    return (repository, tag) if colon and "/" not in tag else (image, "")


# Images an operator injects into the pods it creates, by the operator's image, with the
# flag that pins each and its unpinned default (Training Operator v1.9.0, pkg/config).
INJECTED_IMAGES = {
    "kubeflow/training-operator": (
        ("--pytorch-init-container-image", "alpine:3.10", "every PyTorchJob Worker"),
        ("--mpi-kubectl-delivery-image", "kubeflow/kubectl-delivery:latest", "MPIJob launchers"),
    ),
}


def _injected(
    injects: tuple[tuple[str, str, str], ...], container: dict
) -> Iterator[tuple[str, str, str]]:
    """(flag, image, into) of each image the operator in `container` injects unpinned
    (`injects`: its entry in INJECTED_IMAGES)."""
    args = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    for flag, default, into in injects:
        given = next((a.split("=", 1)[1] for a in args if a.startswith(flag + "=")), default)
        tag = _tag(given)[1]
        if not tag or tag in FLOATING_TAGS or given == default:
            yield flag, given, into


@pod_rule(
    id="image-pinned",
    severity=WARNING,
    title="Images are pinned to a release tag or a digest",
    why="An image without a tag, or with a moving tag (latest, main, snapshot...), changes under "
    "a running job: restarts mid-run pull different code than the first pods, and nothing in "
    "Git says which.",
    fix="Use a release tag or, better, a digest (image@sha256:...); in kustomize, set it with "
    "images: [{name, newTag | digest}]. Images an operator injects into its jobs' pods are "
    "pinned with the operator's flags.",
    security=True,
)
def image_pinned(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for key in ("initContainers", "containers"):
        for index, container in enumerate(pod.spec.get(key) or []):
            image = container.get("image")
            if not isinstance(image, str) or not image:
                continue
            repository, tag = _tag(image)
            if not tag:
                yield Violation(
                    f"image {image} has no tag (means latest)", (*pod.path, key, index, "image")
                )
            elif tag in FLOATING_TAGS or tag.startswith(("snapshot", "latest")):
                yield Violation(
                    f"image {image} uses the moving tag {tag!r}", (*pod.path, key, index, "image")
                )
            if key != "containers":
                continue
            injects = INJECTED_IMAGES.get(repository.removeprefix("docker.io/"))
            if injects is None:
                continue
            for flag, injected, into in _injected(injects, container):
                yield Violation(
                    f"the operator injects {injected} into {into} (unpinned, from Docker Hub): "
                    f"pin it with {flag}=<image>:<release tag or digest>",
                    (*pod.path, key, index, "args"),
                )


@render_rule(
    id="remote-base-pinned",
    severity=WARNING,
    title="Remote kustomize bases are pinned to a tag or commit",
    why="A remote base without ?ref= (or with a branch) renders whatever upstream pushed last: "
    "Argo CD can apply operator or CRD changes nobody reviewed.",
    fix="Add ?ref=<release tag or commit> to the URL (and a copy to the offline mirror).",
    security=True,
)
def remote_base_pinned(ctx: Context) -> Iterator[tuple[Document | None, Violation]]:
    if ctx.inputs is None:
        return
    for use in ctx.inputs.remotes:
        ref = use.ref
        if ref is None or not ref.pinned:
            what = f"ref {ref.ref!r} is a branch" if ref and ref.ref else "it has no ?ref="
            yield None, Violation(f"remote base {use.url}: {what}", (use.field, use.index))


def _host_rule(field: str):
    def check(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
        if pod.spec.get(field) is True:
            yield Violation(f"{field}: true", (*pod.path, field))

    return check


pod_rule(
    id="host-network",
    title="Pods use the pod network, not the node's",
    why="hostNetwork gives a pod every interface and port of the node; for training it also "
    "bypasses Multus, so the training network contract no longer applies.",
    fix="Use a Multus secondary network for the fabric; exempt node agents that need the "
    "host network in policies/config.yaml, with a reason and an expiry.",
    applies=sets_any("hostNetwork"),
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)(_host_rule("hostNetwork"))
pod_rule(
    id="host-pid",
    title="Pods do not share the node's process namespace",
    why="hostPID lets a container see and signal every process on the node.",
    fix="Remove hostPID; exempt node agents that need it in policies/config.yaml, with a "
    "reason and an expiry.",
    applies=sets_any("hostPID"),
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)(_host_rule("hostPID"))


@pod_rule(
    id="privileged-container",
    title="No privileged containers",
    why="A privileged container has every capability and all host devices. RDMA needs only "
    "IPC_LOCK and a device-plugin resource, not privilege.",
    fix="Drop privileged; add the specific capability (IPC_LOCK for RDMA). Exempt node agents "
    "that need privilege in policies/config.yaml, with a reason and an expiry.",
    applies=sets_any("securityContext"),
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)
def privileged(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for key, index, container in pod.all_containers:
        if mapping(container.get("securityContext")).get("privileged") is True:
            yield Violation(
                f"container {container.get('name')} is privileged",
                (*pod.path, key, index, "securityContext", "privileged"),
            )


@pod_rule(
    id="secret-literal",
    severity=WARNING,
    title="Tokens come from Secrets, not literal env values",
    why="A token written into a manifest is in Git history for good, visible to everyone who "
    "can read the repository or the pod spec.",
    fix="Store it in a Secret and reference it with valueFrom.secretKeyRef; rotate the leaked "
    "token.",
    applies=sets_any("env"),
    security=True,
)
def secret_literal(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        for position, entry in enumerate(container.get("env") or []):
            if not isinstance(entry, dict) or not isinstance(entry.get("value"), str):
                continue
            name, value = str(entry.get("name", "")), entry["value"]
            if PLACEHOLDER.match(value.strip()):
                continue  # filled in by envsubst/Helm at deploy time: not in Git
            if (SECRET_NAME.search(name) and value.strip()) or SECRET_VALUE.match(value.strip()):
                yield Violation(
                    f"{name} holds a literal secret value",
                    (*pod.container_path(index), "env", position, "value"),
                )


@pod_rule(
    id="resources-set",
    severity=WARNING,
    title="Containers state their CPU, memory and GPU needs",
    why="Without requests the scheduler packs training pods onto busy nodes (data loading and "
    "NCCL proxies starve); GPUs and other extended resources must be set as limits.",
    fix="Set cpu and memory requests (and limits), and GPUs in limits (requests equal to "
    "limits if given).",
    when={
        "warning": "a container sets no cpu or memory: the scheduler packs it blindly",
        "error": "a GPU is requested without a limit, or with a request other than its limit: "
        "the API server refuses extended resources that can be overcommitted",
    },
    source="https://github.com/kubernetes/kubernetes/blob/v1.34.0/pkg/apis/core/validation/validation.go",
)
def resources_set(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    for index, container in enumerate(pod.containers):
        requests, limits = resources(container, "requests"), resources(container, "limits")
        missing = [r for r in ("cpu", "memory") if r not in requests and r not in limits]
        if not missing and GPU_RESOURCES.isdisjoint(requests):
            continue
        at = (*pod.container_path(index), "resources")
        if missing:
            yield Violation(f"container {container.get('name')} sets no {' or '.join(missing)}", at)
        for gpu in GPU_RESOURCES:
            if gpu in requests and gpu not in limits:
                yield Violation(
                    f"{gpu} is requested but not limited: extended resources are set as limits",
                    at,
                    severity=ERROR,
                )
            elif gpu in requests and str(requests[gpu]) != str(limits[gpu]):
                yield Violation(
                    f"{gpu} request {requests[gpu]} differs from its limit {limits[gpu]}",
                    at,
                    severity=ERROR,
                )


@resource_rule(
    id="appproject-wildcards",
    severity=WARNING,
    title="AppProjects list their sources, destinations and kinds",
    why="A wildcard source, destination or cluster-scoped kind lets anyone who can change an "
    "Application deploy anything anywhere the project reaches.",
    fix="List the repositories, cluster/namespace pairs and cluster-scoped kinds the project "
    "needs (argocd/projects.yaml is generated that way).",
    kinds=("AppProject",),
    security=True,
)
def appproject_wildcards(doc: Document, ctx: Context) -> Iterator[Violation]:
    spec = doc.obj.get("spec") or {}
    for index, repo in enumerate(spec.get("sourceRepos") or []):
        if "*" in str(repo):
            yield Violation(f"sourceRepos contains {repo!r}", ("spec", "sourceRepos", index))
    for index, destination in enumerate(spec.get("destinations") or []):
        for key in ("server", "name", "namespace"):
            if "*" in str(destination.get(key, "")):
                yield Violation(
                    f"destination {key} is {destination[key]!r}",
                    ("spec", "destinations", index, key),
                )
    for index, kind in enumerate(spec.get("clusterResourceWhitelist") or []):
        if "*" in (str(kind.get("group", "")), str(kind.get("kind", ""))):
            yield Violation(
                "clusterResourceWhitelist allows every kind of a group",
                ("spec", "clusterResourceWhitelist", index),
            )


# hostPath directories training pods may mount: shared memory, RDMA and hugepage devices.
DEVICE_HOST_PATHS = ("/dev/shm", "/dev/infiniband", "/dev/hugepages")
# Never a checkpoint directory: the node's system, kubelet and runtime state.
SYSTEM_HOST_PATHS = (
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
    "/run", "/sbin", "/sys", "/usr", "/var/lib/kubelet", "/var/lib/containerd",
    "/var/lib/docker", "/var/log", "/var/run",
)  # fmt: skip
# Trainer v2 runtimes are the platform's: a TrainJob runs on one but cannot change its pods'
# service account.
PLATFORM_RUNTIMES = ("ClusterTrainingRuntime", "TrainingRuntime")
# Capabilities a pod may add: IPC_LOCK, and only where the pod uses RDMA.
RDMA_CAPABILITY = "IPC_LOCK"


def _below(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _checkpoint_volumes(pod: PodTemplate) -> set[str]:
    """Names of the volumes holding a container's checkpoint directory."""
    names = set()
    for container in pod.containers:
        for directory, _ in common.checkpoint_dirs(container):
            mount = common.mount_for(container, directory)
            if mount is not None:
                names.add(str(mount.get("name")))
    return names


@pod_rule(
    id="host-path",
    title="hostPath volumes only for shared memory, RDMA devices or a node-local checkpoint",
    why="A hostPath volume hands the container a directory of the node: `/` or /etc gives "
    "root on the node to whoever controls the image or the command, /var/run exposes the "
    "container runtime. Training needs at most /dev/shm, RDMA or hugepage devices, or a "
    "node-local directory for checkpoints.",
    fix="Use a memory-backed emptyDir for /dev/shm, the device plugin's resource for RDMA, "
    "the shared checkpoint claim for checkpoints; exempt node agents in policies/config.yaml.",
    applies=sets_any("volumes"),
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)
def host_path(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    checkpoints = None
    for index, volume in enumerate(dicts(pod.spec.get("volumes"))):
        source = volume.get("hostPath")
        if source is None:
            continue
        raw = mapping(source).get("path")
        path = posixpath.normpath("/" + str(raw).lstrip("/")) if raw else "/"
        at = (*pod.path, "volumes", index, "hostPath")
        if _below(path, DEVICE_HOST_PATHS):
            continue
        if checkpoints is None:
            checkpoints = _checkpoint_volumes(pod)
        if (
            volume.get("name") in checkpoints
            and path != "/"
            and not _below(path, SYSTEM_HOST_PATHS)
        ):
            continue
        yield Violation(f"volume {volume.get('name')} mounts the node's {path}", at)


@pod_rule(
    id="capabilities",
    title="Containers add no capability but IPC_LOCK, and that only for RDMA",
    why="Added capabilities are pieces of root: SYS_ADMIN alone mounts filesystems and escapes "
    "the container, NET_ADMIN rewires the node's network. RDMA needs IPC_LOCK to pin memory "
    "for the NIC; nothing in training needs more.",
    fix="Remove the capability; keep IPC_LOCK only on containers of pods that use RDMA (an "
    "RDMA network or device resource).",
    applies=sets_any("securityContext"),
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)
def capabilities(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    rdma = None
    for key, index, container in pod.all_containers:
        added = mapping(mapping(container.get("securityContext")).get("capabilities")).get("add")
        for position, raw in enumerate(added if isinstance(added, list) else []):
            name = str(raw).upper().removeprefix("CAP_")
            at = (*pod.path, key, index, "securityContext", "capabilities", "add", position)
            if name != RDMA_CAPABILITY:
                yield Violation(f"container {container.get('name')} adds {raw}", at)
                continue
            if rdma is None:
                rdma = _may_use_rdma(pod, ctx)
            if not rdma:
                yield Violation(
                    f"container {container.get('name')} adds IPC_LOCK but the pod uses no RDMA",
                    at,
                )


@pod_rule(
    id="host-ports",
    title="Containers open no port on the node",
    why="A hostPort binds the node's address: it can collide with other pods and node "
    "services, and exposes the container outside the cluster network policy.",
    fix="Use a Service (or the pod's own address, as torchrun's rendezvous does); drop hostPort.",
    applies=sets_any("ports"),
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)
def host_ports(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for key, index, container in pod.all_containers:
        ports = container.get("ports")
        if not isinstance(ports, list):
            continue
        for position, port in enumerate(ports):
            if isinstance(port, dict) and port.get("hostPort") not in (None, 0):
                yield Violation(
                    f"container {container.get('name')} binds hostPort {port.get('hostPort')}",
                    (*pod.path, key, index, "ports", position, "hostPort"),
                )


def _may_use_rdma(pod: PodTemplate, ctx: Context) -> bool:
    """An RDMA network or device, or a secondary network with a device of its own: an
    SR-IOV VF (e.g. the Network Operator's nvidia.com/mlnxnics on an InfiniBand network)
    is RDMA-capable whatever its resource is called. Devices a pod claims through Dynamic
    Resource Allocation and EFA adapters pin memory for the NIC as well."""
    if common.on_rdma_fabric(pod, ctx) or any(common.rdma_resources(c) for c in pod.containers):
        return True
    if pod.spec.get("resourceClaims") or any(
        resources(c, "limits").keys() & FABRIC_DEVICES for c in pod.containers
    ):
        return True  # devices from a DRA claim (a NIC's RDMA device) or AWS EFA
    if not pod.annotations.get(multus.ANNOTATION):
        return False
    return any(
        "/" in str(name) and str(name) not in GPU_RESOURCES
        for c in pod.containers
        for name in resources(c, "limits")
    )


@pod_rule(
    id="training-service-account",
    title="Training pods keep the namespace's default service account, without its token",
    why="A run picking a service account borrows whatever that account may do in the API "
    "(an operator's account can create pods anywhere); turning token automount on puts that "
    "credential in every rank's filesystem, where the training code and its dependencies can "
    "read it. The default account of the training namespace holds no permissions.",
    fix="Remove serviceAccountName and automountServiceAccountToken: true from the job; if "
    "training needs API access, the platform grants an account in policies/config.yaml.",
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)
def training_service_account(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.doc.kind in PLATFORM_RUNTIMES:
        return  # the platform's own runtimes: what a run cannot change
    if not (common.training_pod(pod) or tenant_workload(pod.doc, ctx)):
        return  # a platform component's own account: what it is for
    for key in ("serviceAccountName", "serviceAccount"):
        account = pod.spec.get(key)
        if account not in (None, "", "default"):
            yield Violation(f"the pod runs as service account {account!r}", (*pod.path, key))
    if pod.spec.get("automountServiceAccountToken") is True:
        yield Violation(
            "service-account token automount is turned on",
            (*pod.path, "automountServiceAccountToken"),
        )
    for index, volume in enumerate(dicts(pod.spec.get("volumes"))):
        sources = dicts(mapping(volume.get("projected")).get("sources"))
        for position, source in enumerate(sources):
            if "serviceAccountToken" in source:
                yield Violation(
                    f"projected volume {volume.get('name')} mounts a service-account token "
                    "(what automount would)",
                    (*pod.path, "volumes", index, "projected", "sources", position),
                )


def _privileged_reason(pod: PodTemplate) -> str | None:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.spec.get(field) is True:
            return f"{field}: true"
    if any(mapping(v).get("hostPath") is not None for v in dicts(pod.spec.get("volumes"))):
        return "a hostPath volume"
    if "securityContext" not in pod.container_fields:
        return None
    for _, _, container in pod.all_containers:
        security = mapping(container.get("securityContext"))
        if security.get("privileged") is True:
            return f"container {container.get('name')} is privileged"
        added = mapping(security.get("capabilities")).get("add")
        extra = (
            [c for c in added if str(c).upper().removeprefix("CAP_") != RDMA_CAPABILITY]
            if isinstance(added, list)
            else []
        )
        if extra:
            return f"container {container.get('name')} adds {extra[0]}"
    return None


@pod_rule(
    id="privileged-image-digest",
    title="Pods with host access run images pinned by digest",
    why="A tag can be moved to other content at any time: on a pod with host access "
    "(privileged, host namespaces, hostPath, added capabilities) whoever can push that tag "
    "gets the node.",
    fix="Pin the image by digest (image@sha256:...; kustomize images: [{name, digest}]).",
    applies=sets_any("hostNetwork", "hostPID", "hostIPC", "volumes", "securityContext"),
    severity=WARNING,
    when=POSTURE,
    source=THREAT_MODEL,
    by_posture=True,
    security=True,
)
def privileged_image_digest(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    reason = _privileged_reason(pod)
    if reason is None:
        return
    for key, index, container in pod.all_containers:
        image = container.get("image")
        if isinstance(image, str) and "@sha256:" not in image:
            yield Violation(
                f"image {image} is not pinned by digest on a pod with host access ({reason})",
                (*pod.path, key, index, "image"),
            )
