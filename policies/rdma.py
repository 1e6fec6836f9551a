"""RDMA: the device, the capability, and GPUDirect that the node can actually do."""

from __future__ import annotations

from collections.abc import Iterator

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, env_of, gpu_count

from . import common

INJECTOR = (
    "https://github.com/k8snetworkplumbingwg/network-resources-injector/blob/"
    "e563db6365cd88b66ee6c2848c4d5d0736d967d3/pkg/webhook/webhook.go#L379-L384"
)
# The SR-IOV operator deploys the injector only with SriovOperatorConfig enableInjector: true
# (off in its chart's defaults: admissionControllers.enabled: false).
OPERATOR_CONFIG = (
    "https://github.com/k8snetworkplumbingwg/sriov-network-operator/blob/"
    "1f5be4c57b77ca53af1dca655226556d31bf07b4/controllers/sriovoperatorconfig_controller.go#L110"
)
# Networks the SR-IOV operator turns into NADs that carry their policy's resourceName.
SRIOV_NETWORK_KINDS = ("SriovNetwork", "SriovIBNetwork", "OVSNetwork")


@pod_rule(
    id="rdma-resource-missing",
    severity=ERROR,
    source=(
        "https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/transport/net_ib.cc#L749",
        # A plugin with no device is disabled; NCCL_NET naming only disabled plugins fails.
        "https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/plugin/net.cc#L140-L144",
        "https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/plugin/net.cc#L254-L279",
        INJECTOR,
        OPERATOR_CONFIG,
    ),
    title="Pods on an RDMA fabric request an RDMA device",
    why="The Multus annotation gives the pod an interface; the RDMA verbs device comes only "
    "from a device-plugin resource (rdma/..., an SR-IOV VF). Without it NCCL finds no IB "
    "device and falls back to sockets over the pod network, or, where NCCL_NET=IB leaves it "
    'no other transport, fails to start ("Failed to initialize any NET plugin"). The '
    "network-resources-injector adds the request of a "
    "network whose NAD names its resource (k8s.v1.cni.cncf.io/resourceName) to the pod's "
    "first container at admission, but only where it runs: the SR-IOV operator deploys it "
    "with SriovOperatorConfig enableInjector: true, which its chart leaves off.",
    fix="Request the fabric's RDMA resource (the NAD's k8s.v1.cni.cncf.io/resourceName, or the "
    "profile's rdmaResource) in the training container's limits.",
    applies=common.gpu_pod,
    when={
        "error": "the container sets NCCL_NET=IB and nothing adds the request: NCCL's init fails",
        "warning": "otherwise: NCCL runs on sockets (nothing adds the request: no network "
        "names a resource, the render's SriovOperatorConfig does not enable the injector, or "
        "the GPU container is not the first one, which the injector patches), or the render "
        "does not say whether the network-resources-injector runs",
    },
)
def resource_missing(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial or not common.on_rdma_fabric(pod, ctx):
        return
    for index, container in enumerate(pod.containers):
        if gpu_count(container) and not common.rdma_resources(container):
            wanted = _wanted_resource(pod, ctx)
            injected = _injector(ctx) if wanted and _network_resource(pod, ctx) else False
            if injected and index == 0:
                continue
            message = "the container is on an RDMA fabric but requests no RDMA device" + (
                f" ({wanted})" if wanted else ""
            )
            if injected is None and index == 0:
                yield Violation(
                    message + ", unless the network-resources-injector adds it at admission "
                    "(SR-IOV operator: SriovOperatorConfig enableInjector: true)",
                    (*pod.container_path(index), "resources"),
                    severity=WARNING,
                )
                continue
            if injected:
                message += " (the injector adds it to the first container only)"
            if str(env_of(container).get("NCCL_NET", "")).lower() == "ib":
                yield Violation(
                    message + ": with NCCL_NET=IB NCCL has no transport left and fails to start",
                    (*pod.container_path(index), "resources"),
                )
                continue
            yield Violation(
                message + ": NCCL falls back to sockets over the pod network",
                (*pod.container_path(index), "resources"),
                severity=WARNING,
            )


def _network_resource(pod: PodTemplate, ctx: Context) -> str:
    """The resource an attached network names: its NAD's annotation, or the SR-IOV
    operator network (the NAD it generates is not in the render) it comes from."""
    for attachment, nad in common.attached_nads(pod, ctx):
        if nad is not None:
            annotations = nad.metadata.get("annotations") or {}
            if annotations.get(multus.RESOURCE_ANNOTATION):
                return str(annotations[multus.RESOURCE_ANNOTATION])
            continue
        for kind in SRIOV_NETWORK_KINDS:
            network = ctx.find(kind, attachment.name)
            if network is not None and (network.obj.get("spec") or {}).get("resourceName"):
                return str(network.obj["spec"]["resourceName"])
    return ""


def _injector(ctx: Context) -> bool | None:
    """Whether the network-resources-injector runs: the render's SriovOperatorConfig says
    (None: the render does not hold one)."""
    configs = ctx.of_kind("SriovOperatorConfig")
    if not configs:
        return None
    return any((c.obj.get("spec") or {}).get("enableInjector") is True for c in configs)


def _wanted_resource(pod: PodTemplate, ctx: Context) -> str:
    found = _network_resource(pod, ctx)
    if found:
        return found
    return ctx.profile.rdmaResource if ctx.profile is not None else ""


@pod_rule(
    id="rdma-ipc-lock",
    severity=WARNING,
    title="RDMA containers can lock memory the way they run",
    why="RDMA registers (pins) memory with the NIC, which needs CAP_IPC_LOCK in effect or a "
    "locked-memory limit (RLIMIT_MEMLOCK) big enough. A capability added in the pod spec is "
    "in effect only for root: a non-root process gets no ambient capabilities "
    "(kubernetes#56374), so IPC_LOCK does nothing for it and, because Pod Security's "
    "baseline forbids it, only widens what the namespace must allow. Whether memory "
    "registration works without the capability depends on the memlock limit the node's "
    "container runtime gives containers (the manifest does not show it; an unlimited one "
    "is the usual RDMA node setup), so the finding is a risk, not a certain failure.",
    fix="Non-root (the trainer image, uid 1000): drop IPC_LOCK and have the node's container "
    "runtime give containers an unlimited memlock limit (containerd: LimitMEMLOCK=infinity; "
    "CRI-O: default_ulimits memlock=-1:-1). Root: add securityContext.capabilities.add: "
    "[IPC_LOCK].",
    applies=common.requests_rdma,
)
def ipc_lock(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        found = common.rdma_resources(container)
        if not found:
            continue
        named_rdma = any(common.RDMA_ONLY.search(name) for name in found)
        if not named_rdma and not common.on_rdma_fabric(pod, ctx):
            continue  # an SR-IOV netdevice VF: no memory registration
        security = container.get("securityContext") or {}
        caps = (security.get("capabilities") or {}).get("add") or []
        has_lock = "IPC_LOCK" in caps or "CAP_IPC_LOCK" in caps
        at = (*pod.container_path(index), "securityContext")
        if security.get("privileged"):
            continue
        user = _user(pod, container)
        if has_lock and user is not None and user != 0:
            yield Violation(
                "the container adds IPC_LOCK but runs as "
                + ("a non-root user" if user < 0 else f"uid {user}")
                + ": the capability never "
                "reaches a non-root process, memory locking depends on the runtime's "
                "memlock limit",
                at,
            )
        elif not has_lock and user in (0, None):
            yield Violation(
                "the container requests an RDMA device and may run as root without IPC_LOCK"
                if user is None
                else "the container requests an RDMA device and runs as root without IPC_LOCK",
                at,
                fix="Run as non-root (runAsUser, with the runtime's memlock limit unlimited), "
                "or add securityContext.capabilities.add: [IPC_LOCK] for a root process.",
            )


def _user(pod: PodTemplate, container: dict) -> int | None:
    """The uid the container runs as when the manifests say (runAsNonRoot: some non-root
    uid, reported as -1); None when the image decides."""
    pod_security = pod.spec.get("securityContext") or {}
    security = container.get("securityContext") or {}
    uid = security.get("runAsUser", pod_security.get("runAsUser"))
    if isinstance(uid, int) and not isinstance(uid, bool):
        return uid
    if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True:
        return -1
    return None


def _gpudirect_ready(policy: Document) -> bool:
    driver = (policy.obj.get("spec") or {}).get("driver") or {}
    rdma = driver.get("rdma") or {}
    return (
        bool(rdma.get("enabled"))
        or driver.get("kernelModuleType") == "open"
        or bool(driver.get("useOpenKernelModules"))
    )


@pod_rule(
    id="gpudirect-clusterpolicy",
    severity=WARNING,
    title="Pods expecting GPUDirect RDMA run where the ClusterPolicy provides it",
    why="GPUDirect RDMA needs either DMA-BUF (the GPU Operator's open kernel modules, on "
    "nodes with Linux 5.12 or later and images with CUDA 11.7 or later) or the legacy "
    "nvidia-peermem module (driver.rdma.enabled). Without either, NCCL silently stages every "
    "transfer through host memory.",
    fix="Set driver.kernelModuleType: open (DMA-BUF) or driver.rdma.enabled: true in the "
    "ClusterPolicy, or stop expecting GPUDirect in the pods.",
    applies=common.has_env,
)
def gpudirect(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    policies = ctx.of_kind("ClusterPolicy")
    if not policies or any(_gpudirect_ready(p) for p in policies):
        return
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        expects = env.get("TRAINER_EXPECT_GDR") == "1" or env.get("NCCL_NET_GDR_LEVEL") not in (
            None,
            "LOC",
            "0",
        )
        if expects:
            yield Violation(
                f"the container expects GPUDirect RDMA but ClusterPolicy {policies[0].name} "
                "enables neither DMA-BUF nor peermem",
                pod.container_path(index),
            )


@resource_rule(
    id="clusterpolicy-host-mofed",
    severity=WARNING,
    title="useHostMofed comes with rdma.enabled",
    why="driver.rdma.useHostMofed only matters when driver.rdma.enabled is true; alone it does "
    "nothing and GPUDirect RDMA (nvidia-peermem) stays off: NCCL stages transfers through "
    "host memory (slower), unless DMA-BUF provides GPUDirect.",
    fix="Set driver.rdma.enabled: true with useHostMofed, or use DMA-BUF (kernelModuleType: "
    "open) and drop both.",
    kinds=("ClusterPolicy",),
)
def host_mofed(doc: Document, ctx: Context) -> Iterator[Violation]:
    rdma = (((doc.obj.get("spec") or {}).get("driver") or {}).get("rdma")) or {}
    if rdma.get("useHostMofed") and not rdma.get("enabled"):
        yield Violation(
            "driver.rdma.useHostMofed is true but driver.rdma.enabled is not",
            ("spec", "driver", "rdma"),
        )
