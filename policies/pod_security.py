"""Pod Security admission: the level a namespace enforces against the pods its jobs make.

The checks of `staging/src/k8s.io/pod-security-admission/policy` (Kubernetes v1.34), for
the namespaces this render labels `pod-security.kubernetes.io/enforce`. Admission sees
pods, not the custom resources that make them: a PyTorchJob, JobSet or TrainJob whose
pods break the level is accepted and its pods are refused when the operator creates them.
The Training Operator adds init containers of its own (init-pytorch to a PyTorchJob's
workers, kubectl-delivery to an MPIJob v1 launcher) without a securityContext, so such
pods never pass restricted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR
from trainops.policy import Context, Violation, pod_rule
from trainops.policy.pods import POD_KINDS, PodTemplate, dicts, is_int, mapping

ENFORCE = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPABILITIES = frozenset(
    (
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    )
)
RESTRICTED_VOLUMES = frozenset(
    (
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    )
)
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
BUILT_IN = (
    POD_KINDS
    - {"PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"}
    - {
        "JobSet",
        "LeaderWorkerSet",
        "TrainJob",
        "TrainingRuntime",
        "ClusterTrainingRuntime",
    }
)


def _injected(pod: PodTemplate) -> list[str]:
    """Init containers the operator adds to this template's pods."""
    spec = mapping(pod.doc.obj.get("spec"))
    masters = "Master" in mapping(spec.get("pytorchReplicaSpecs"))
    if pod.doc.kind == "PyTorchJob" and pod.role == "Worker" and masters:
        return ["init-pytorch"]
    if pod.doc.kind == "MPIJob" and pod.doc.api_version.endswith("/v1") and pod.role == "Launcher":
        return ["kubectl-delivery"]
    return []


def _containers(pod: PodTemplate) -> list[tuple[str, dict[str, Any]]]:
    return [
        (key, container)
        for key in ("initContainers", "containers", "ephemeralContainers")
        for container in dicts(pod.spec.get(key))
    ]


def _level(pod: PodTemplate, ctx: Context) -> str | None:
    if pod.doc.kind == "ClusterTrainingRuntime":
        return None  # its pods run in the namespace of each TrainJob
    namespace = ctx.find("Namespace", pod.doc.namespace or "default")
    if namespace is None:
        return None
    level = mapping(namespace.metadata.get("labels")).get(ENFORCE)
    return level if level in LEVELS else None


def baseline(pod: PodTemplate) -> Iterator[str]:
    spec = pod.spec
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field) is True:
            yield f"{field}: true"
    for volume in pod.volumes():
        if "hostPath" in volume:
            yield f"hostPath volume {volume.get('name')}"
    pod_context = mapping(spec.get("securityContext"))
    if mapping(pod_context.get("seccompProfile")).get("type") == "Unconfined":
        yield "seccompProfile Unconfined"
    for _, container in _containers(pod):
        name = container.get("name")
        context = mapping(container.get("securityContext"))
        if context.get("privileged") is True:
            yield f"container {name} is privileged"
        added = {str(c) for c in mapping(context.get("capabilities")).get("add") or []}
        extra = sorted(added - BASELINE_CAPABILITIES)
        if extra:
            yield f"container {name} adds capabilities {', '.join(extra)}"
        if any(is_int(p.get("hostPort")) and p["hostPort"] for p in dicts(container.get("ports"))):
            yield f"container {name} uses a hostPort"
        if mapping(context.get("seccompProfile")).get("type") == "Unconfined":
            yield f"container {name} has seccompProfile Unconfined"
        if context.get("procMount") not in (None, "Default"):
            yield f"container {name} has procMount {context.get('procMount')}"
        selinux = mapping(context.get("seLinuxOptions"))
        if (
            selinux.get("type", "") not in SELINUX_TYPES
            or selinux.get("user")
            or selinux.get("role")
        ):
            yield f"container {name} sets SELinux options baseline forbids"


def restricted(pod: PodTemplate) -> Iterator[str]:
    spec = pod.spec
    pod_context = mapping(spec.get("securityContext"))
    for volume in pod.volumes():
        kinds = [k for k in volume if k != "name"]
        if kinds and kinds[0] not in RESTRICTED_VOLUMES:
            yield f"volume {volume.get('name')} is of type {kinds[0]}"
    pod_non_root = pod_context.get("runAsNonRoot")
    pod_seccomp = mapping(pod_context.get("seccompProfile")).get("type")
    if pod_context.get("runAsUser") == 0:
        yield "runAsUser: 0"
    containers = [*_containers(pod), *(("initContainers", {"name": n}) for n in _injected(pod))]
    for _, container in containers:
        name = container.get("name")
        context = mapping(container.get("securityContext"))
        if context.get("allowPrivilegeEscalation") is not False:
            yield f"container {name} does not set allowPrivilegeEscalation: false"
        non_root = context.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            yield f"container {name} does not set runAsNonRoot: true"
        if context.get("runAsUser") == 0:
            yield f"container {name} runs as uid 0"
        if mapping(context.get("seccompProfile")).get("type", pod_seccomp) not in (
            "RuntimeDefault",
            "Localhost",
        ):
            yield f"container {name} has no RuntimeDefault or Localhost seccomp profile"
        capabilities = mapping(context.get("capabilities"))
        if "ALL" not in [str(c) for c in capabilities.get("drop") or []]:
            yield f"container {name} does not drop ALL capabilities"
        added = {str(c) for c in capabilities.get("add") or []} - {"NET_BIND_SERVICE"}
        if added:
            yield f"container {name} adds {', '.join(sorted(added))}"


@pod_rule(
    id="pod-security-level",
    security=True,
    severity=ERROR,
    source=(
        "https://github.com/kubernetes/kubernetes/blob/v1.34.0/staging/src/k8s.io/pod-security-admission/policy/check_hostNamespaces.go",
        "https://github.com/kubernetes/kubernetes/blob/v1.34.0/staging/src/k8s.io/pod-security-admission/policy/check_capabilities_baseline.go",
    ),
    title="Pods meet the Pod Security level their namespace enforces",
    why="Pod Security admission refuses pods that break the level a namespace enforces "
    "(pod-security.kubernetes.io/enforce): baseline forbids host namespaces, hostPath, "
    "privileged containers and added capabilities beyond a short list (IPC_LOCK for RDMA is "
    "not on it); restricted also requires runAsNonRoot, allowPrivilegeEscalation: false, "
    "dropping ALL capabilities and a RuntimeDefault seccomp profile. A Deployment or Job "
    "fails at apply; a training job's pods are refused only when its operator creates them, "
    "so the job waits with events and nothing else. The Training Operator's own init "
    "containers (init-pytorch, kubectl-delivery) never pass restricted.",
    fix="Make the pod template meet the level (for RDMA run non-root without IPC_LOCK, with "
    "an unlimited memlock limit from the runtime), or run the jobs in a namespace whose level "
    "allows them; a PyTorchJob without a Master gets no init-pytorch.",
    render_needs=("Namespace",),  # the level is a label of the pod's Namespace
)
def pod_security_level(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    level = _level(pod, ctx)
    if level is None or level == "privileged" or pod.partial:
        return
    problems = list(baseline(pod))
    if level == "restricted":
        problems += list(restricted(pod))
    if not problems:
        return
    when = (
        "refused at apply"
        if pod.doc.kind in BUILT_IN
        else f"accepted, but its {pod.role} pods are refused when the operator creates them"
    )
    shown = "; ".join(problems[:4]) + (
        f"; and {len(problems) - 4} more" if len(problems) > 4 else ""
    )
    yield Violation(
        f"namespace {pod.doc.namespace or 'default'} enforces {level}: {shown} ({when})",
        pod.path,
    )
