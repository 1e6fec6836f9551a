"""Supply chain and security: pinned images and bases, no host access, no secrets in Git."""

from __future__ import annotations

import re
from collections.abc import Iterator

from trainops.model import ERROR, WARNING, Document
from trainops.policy.engine import Context, Violation, pod_rule, render_rule, resource_rule
from trainops.policy.pods import GPU_RESOURCES, PodTemplate, resources

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
    last = image.rsplit("/", 1)[-1]
    return (image.rsplit(":", 1)[0], image.rsplit(":", 1)[1]) if ":" in last else (image, "")


# Images an operator injects into the pods it creates, by the operator's image, with the
# flag that pins each and its unpinned default (Training Operator v1.9.0, pkg/config).
INJECTED_IMAGES = {
    "kubeflow/training-operator": (
        ("--pytorch-init-container-image", "alpine:3.10", "every PyTorchJob Worker"),
        ("--mpi-kubectl-delivery-image", "kubeflow/kubectl-delivery:latest", "MPIJob launchers"),
    ),
}


def _injected(container: dict) -> Iterator[tuple[str, str, str]]:
    """(flag, image, into) of each image the operator in `container` injects unpinned."""
    repository = _tag(str(container.get("image", "")))[0].removeprefix("docker.io/")
    args = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    for flag, default, into in INJECTED_IMAGES.get(repository, ()):
        given = next((a.split("=", 1)[1] for a in args if a.startswith(flag + "=")), default)
        tag = _tag(given)[1]
        if not tag or tag in FLOATING_TAGS or given == default:
            yield flag, given, into


@pod_rule(
    id="image-pinned",
    severity=ERROR,
    title="Images are pinned to a release tag or a digest",
    why="An image without a tag, or with a moving tag (latest, main, snapshot...), changes under "
    "a running job: restarts mid-run pull different code than the first pods, and nothing in "
    "Git says which.",
    fix="Use a release tag or, better, a digest (image@sha256:...); in kustomize, set it with "
    "images: [{name, newTag | digest}]. Images an operator injects into its jobs' pods are "
    "pinned with the operator's flags.",
)
def image_pinned(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for key in ("initContainers", "containers"):
        for index, container in enumerate(pod.spec.get(key) or []):
            image = container.get("image")
            if not isinstance(image, str) or not image:
                continue
            _, tag = _tag(image)
            at = (*pod.path, key, index, "image")
            if not tag:
                yield Violation(f"image {image} has no tag (means latest)", at)
            elif tag in FLOATING_TAGS or tag.startswith(("snapshot", "latest")):
                yield Violation(f"image {image} uses the moving tag {tag!r}", at)
    for index, container in enumerate(pod.containers):
        for flag, image, into in _injected(container):
            yield Violation(
                f"the operator injects {image} into {into} (unpinned, from Docker Hub): "
                f"pin it with {flag}=<image>:<release tag or digest>",
                (*pod.container_path(index), "args"),
            )


@render_rule(
    id="remote-base-pinned",
    severity=ERROR,
    title="Remote kustomize bases are pinned to a tag or commit",
    why="A remote base without ?ref= (or with a branch) renders whatever upstream pushed last: "
    "Argo CD can apply operator or CRD changes nobody reviewed.",
    fix="Add ?ref=<release tag or commit> to the URL (and a copy to the offline mirror).",
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
    severity=ERROR,
    title="Pods use the pod network, not the node's",
    why="hostNetwork gives a pod every interface and port of the node; for training it also "
    "bypasses Multus, so the training network contract no longer applies.",
    fix="Use a Multus secondary network for the fabric; exempt node agents that need the "
    "host network, with a reason and an expiry.",
)(_host_rule("hostNetwork"))
pod_rule(
    id="host-pid",
    severity=ERROR,
    title="Pods do not share the node's process namespace",
    why="hostPID lets a container see and signal every process on the node.",
    fix="Remove hostPID; exempt node agents that need it, with a reason and an expiry.",
)(_host_rule("hostPID"))


@pod_rule(
    id="privileged-container",
    severity=ERROR,
    title="No privileged containers",
    why="A privileged container has every capability and all host devices. RDMA needs only "
    "IPC_LOCK and a device-plugin resource, not privilege.",
    fix="Drop privileged; add the specific capability (IPC_LOCK for RDMA). Exempt node agents "
    "that need privilege, with a reason and an expiry.",
)
def privileged(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for key in ("initContainers", "containers"):
        for index, container in enumerate(pod.spec.get(key) or []):
            if (container.get("securityContext") or {}).get("privileged") is True:
                yield Violation(
                    f"container {container.get('name')} is privileged",
                    (*pod.path, key, index, "securityContext", "privileged"),
                )


@pod_rule(
    id="secret-literal",
    severity=ERROR,
    title="Tokens come from Secrets, not literal env values",
    why="A token written into a manifest is in Git history for good, visible to everyone who "
    "can read the repository or the pod spec.",
    fix="Store it in a Secret and reference it with valueFrom.secretKeyRef; rotate the leaked "
    "token.",
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
)
def resources_set(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    for index, container in enumerate(pod.containers):
        at = (*pod.container_path(index), "resources")
        requests, limits = resources(container, "requests"), resources(container, "limits")
        missing = [r for r in ("cpu", "memory") if r not in requests and r not in limits]
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
    severity=ERROR,
    title="AppProjects list their sources, destinations and kinds",
    why="A wildcard source, destination or cluster-scoped kind lets anyone who can change an "
    "Application deploy anything anywhere the project reaches.",
    fix="List the repositories, cluster/namespace pairs and cluster-scoped kinds the project "
    "needs (argocd/projects.yaml is generated that way).",
    kinds=("AppProject",),
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
