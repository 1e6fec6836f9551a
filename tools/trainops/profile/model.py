"""The cluster profile (`overlays/<cluster>/cluster.yaml`): one description per GPU cluster.

Everything that must agree across an overlay (the NetworkAttachmentDefinition,
the NCCL environment, RDMA resources, GPU counts, placement, queue quotas)
is derived from these fields. This module parses and checks a profile and
fills in the defaults; `trainops.profile.overlay` turns it into files.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trainops.errors import InputError
from trainops.profile import observability_settings
from trainops.profile.nodes import NodeSize, parse_allocatable, pod_defaults, stand_in
from trainops.profile.teams import Team, TeamsContext, parse_priorities, parse_teams
from trainops.profile.topology import Level, parse_levels
from trainops.yamlio import load_yaml_mapping, locate

API_VERSION = "trainops.dev/v1alpha1"
KIND = "ClusterProfile"
FABRICS = ("tcp", "roce", "ib")
NETWORKS = {
    "tcp": ("macvlan", "host-device"),
    "roce": ("sriov-roce", "macvlan", "host-device"),
    "ib": ("ib-sriov", "host-device"),
}
# Networks whose pods get VFs (named unlike the host's PFs) from the device plugin.
SRIOV_NETWORKS = ("sriov-roce", "ib-sriov")
NIC_NETWORKS = ("macvlan", "host-device")
_PKEY = re.compile(r"0[xX][0-9a-fA-F]{1,4}")  # the networks whose host interface `nic` names
SCHEDULERS = ("default", "kueue", "volcano")
GPUDIRECT = ("dmabuf", "peermem", "none")
PLACEMENTS = ("pack", "spread")
MPI_OPERATORS = ("training-operator", "mpi-operator", "none")
# The label the GPU Operator's feature discovery puts on every node with an NVIDIA GPU.
GPU_NODES = {"nvidia.com/gpu.present": "true"}
TRAINERS = ("v1", "v2", "both")
# Who installs the RDMA stack: the overlay (one of the operators) or the hosts.
RDMA_PROVIDERS = ("network-operator", "sriov-network-operator", "preinstalled")
# Where the RDMA (MOFED) driver comes from: the distribution's kernel, a MOFED installed
# on the hosts, or the Network Operator's driver container.
OFED_SOURCES = ("inbox", "host", "driver-container")
# Parts a cluster may come with (a managed or pre-built cluster): the overlay leaves them out.
INSTALLED = ("multus", "whereabouts", "gpu-driver", "network-operator", "sriov-network-operator")
# Whether the Prometheus Operator's CRDs (PodMonitor, PrometheusRule) exist on the cluster.
MONITORING = ("prometheus-operator", "none")
_DURATION = re.compile(r"([0-9]+(ms|s|m|h))+\Z")
_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")  # \Z: no trailing newline
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi)?$")
_IMAGE = re.compile(r"^[^\s@:]+(:[^\s@:/]+)?(@sha256:[0-9a-f]{64})?$")
_NCCL_NAME = re.compile(r"NCCL_[A-Z0-9_]+\Z")


@dataclass
class ClusterProfile:
    """A cluster as the platform team describes it; field docs are the reference."""

    name: str
    fabric: str
    gpusPerNode: int
    nodes: int
    image: str
    network: str = ""
    nic: str = ""
    ipRange: str = ""
    hca: list[str] = field(default_factory=list)
    gidIndex: int | None = None
    rdmaResource: str = ""
    rdmaPerPod: int = 1
    pkey: str = ""
    pfNames: list[str] = field(default_factory=list)
    nicDeviceId: str = ""
    gpudirect: str = ""
    gpuProduct: str = ""
    topologyKey: str = "kubernetes.io/hostname"
    placement: str = "pack"
    topology: list[Level] = field(default_factory=list)
    storageClass: str = ""
    checkpointSize: str = "1Ti"
    scheduler: str = "default"
    queue: str = "training"
    nodeAllocatable: dict[str, Any] = field(default_factory=dict)
    cpuPerPod: int = 0
    memoryPerPod: str = ""
    shmSize: str = ""
    nccl: dict[str, str] = field(default_factory=dict)
    trainer: str = "v1"
    # default: mpi-operator with Kueue (it queues only v2beta1), training-operator with
    # trainer v1 or both, else none
    mpiOperator: str = ""
    alerts: dict[str, Any] = field(default_factory=dict)
    preflight: dict[str, Any] = field(default_factory=dict)
    gpuHealth: dict[str, Any] = field(default_factory=dict)
    spareNodes: int = 0
    teams: list[Team] = field(default_factory=list)
    priorities: dict[str, int] = field(default_factory=dict)
    podsReadyTimeout: str = "15m"
    requeueBackoffSeconds: int = 60
    requeueBackoffMaxSeconds: int = 3600
    rdmaProvider: str = "preinstalled"
    ofed: str = ""
    registries: list[str] = field(default_factory=list)
    installed: list[str] = field(default_factory=list)
    monitoring: str = "prometheus-operator"
    failureRates: dict[str, float] = field(default_factory=dict)

    @property
    def rdma(self) -> bool:
        return self.fabric in ("roce", "ib")

    @property
    def mpi_v2(self) -> bool:
        """MPIJobs are the MPI Operator's kubeflow.org/v2beta1 ones."""
        return self.mpiOperator == "mpi-operator"

    @property
    def sriov(self) -> bool:
        """Pods get SR-IOV virtual functions: one per network attachment."""
        return self.network in SRIOV_NETWORKS

    @property
    def uses_mpi(self) -> bool:
        return self.mpiOperator != "none"

    @property
    def trainer_v1(self) -> bool:
        """The Training Operator serves PyTorchJob (and its other v1 kinds)."""
        return self.trainer in ("v1", "both")

    @property
    def trainer_v2(self) -> bool:
        """Kubeflow Trainer v2 serves TrainJob on ClusterTrainingRuntimes."""
        return self.trainer in ("v2", "both")

    @property
    def usable_nodes(self) -> int:
        """Nodes the quotas hand out: the spares stay free to replace failed nodes."""
        return self.nodes - self.spareNodes

    @property
    def tiered(self) -> bool:
        """Queues and priorities are generated: the cluster has teams (or priorities)."""
        return bool(self.teams) and self.scheduler != "default"

    def team(self, name: str) -> Team | None:
        return next((t for t in self.teams if t.name == name), None)

    @property
    def node(self) -> NodeSize:
        """What one GPU node offers pods: nodeAllocatable, else a stand-in for gpuProduct."""

        def fail(key: str, message: str) -> ValueError:
            return ValueError(f"{key}: {message}")  # parse_profile checked it already

        declared = parse_allocatable(self.nodeAllocatable, fail)
        return declared or stand_in(self.gpuProduct, self.gpusPerNode)

    @property
    def gpu_node_selector(self) -> dict[str, str]:
        """The nodeSelector of pods that need this cluster's GPUs: the product, else any GPU."""
        if self.gpuProduct:
            return {"nvidia.com/gpu.product": self.gpuProduct}
        return dict(GPU_NODES)

    @property
    def image_name(self) -> str:
        return _split_image(self.image)[0]

    @property
    def image_tag(self) -> str:
        return _split_image(self.image)[1]

    @property
    def image_digest(self) -> str:
        return _split_image(self.image)[2]


# What each key means, for `trainops new-cluster --help` and docs/overlays.md.
FIELD_DOCS = {
    "fabric": "training network: tcp (sockets), roce or ib (RDMA)",
    "network": "NetworkAttachmentDefinition type (default: macvlan for tcp, sriov-roce for "
    "roce, ib-sriov for ib; host-device also possible)",
    "nic": "host interface for macvlan (master) or host-device (device)",
    "ipRange": "whereabouts IPAM range (CIDR) of the training network; it must hold an "
    "address per attachment of every pod the quotas admit (usable nodes x rdmaPerPod on "
    "SR-IOV networks; default: a /24, or twice that many addresses on larger clusters)",
    "hca": "RDMA devices NCCL may use, matched exactly (NCCL_IB_HCA); only for shared "
    "devices (host-device, macvlan networks): a pod on an SR-IOV network sees only its own "
    "VFs, whose names differ from the host's",
    "gidIndex": "RoCE GID index (NCCL_IB_GID_INDEX; RoCEv2 over IPv4 is usually 3)",
    "rdmaResource": "device-plugin resource of the RDMA device or VF each pod requests",
    "rdmaPerPod": "how many of rdmaResource each pod requests; on SR-IOV networks one VF per "
    "rail, each attached as its own interface (net1, net2, ...)",
    "pkey": "InfiniBand partition key of the ib-sriov network; only ib-kubernetes applies it "
    "(ib-sriov-cni alone ignores it)",
    "pfNames": "host interfaces (physical functions) of the RDMA NICs whose VFs the SR-IOV "
    "network uses, one per rail (default: every NIC of vendor 15b3, front-end and storage "
    "NICs included)",
    "nicDeviceId": "PCI device ID of those NICs' physical functions, e.g. 1021 for "
    "ConnectX-7 (sriov-network-operator only; default: any)",
    "gpudirect": "GPUDirect RDMA: dmabuf (open kernel modules), peermem (legacy, host "
    "MOFED) or none",
    "rdmaProvider": "who installs the RDMA stack: network-operator (NicClusterPolicy), "
    "sriov-network-operator (VFs and their device plugin) or preinstalled (the hosts)",
    "ofed": "RDMA driver: inbox (the kernel's), host (MOFED on the hosts) or driver-container "
    "(the Network Operator's); default host with peermem, else inbox",
    "gpusPerNode": "GPUs per node; each pod takes a whole node",
    "nodes": "GPU nodes available to training (sizes queues and defaults)",
    "spareNodes": "nodes kept out of every quota, free to replace a failed node at once "
    "(`trainops plan` says how many a run needs)",
    "gpuProduct": "value of the nvidia.com/gpu.product node label training pods require",
    "topologyKey": "node label naming the network locality domain (rack)",
    "placement": "pack (default): keep a job's pods in one locality domain (topologyKey); "
    "spread: balance them across domains",
    "topology": "network levels, outermost first: [{label: NODE-LABEL, nodes: NODES-PER-DOMAIN}] "
    "(the node level kubernetes.io/hostname is added); becomes Kueue's Topology or Volcano's "
    "HyperNode tiers, and runs may require or prefer one domain of a level",
    "storageClass": "ReadWriteMany storage class for checkpoints",
    "checkpointSize": "size of the shared checkpoint volume",
    "scheduler": "default, kueue (queueing, quota) or volcano (gang scheduling)",
    "queue": "Kueue LocalQueue or Volcano Queue name",
    "podsReadyTimeout": "Kueue waitForPodsReady: time for an admitted job's pods to all run "
    "before it is evicted and requeued (all-or-nothing)",
    "requeueBackoffSeconds": "first wait before an evicted job is requeued (doubles each time)",
    "requeueBackoffMaxSeconds": "longest wait between requeues",
    "priorities": "run priorities, name: value (default urgent 10000, standard 1000, "
    "best-effort 100); higher preempts lower",
    "teams": "tenants: [{name, gpus, borrowingLimit, lendingLimit, priorities, weight}]; each "
    "gets a namespace, a queue in the cluster's cohort and an Argo CD project (quotas in GPUs, "
    "whole nodes)",
    "image": "trainer image, pinned by tag or digest",
    "registries": "image prefixes runs may pull from: ghcr.io/acme/ (anything below it), or "
    "ghcr.io/acme and registry.example.com, which end where their names do, or one image "
    "by tag or digest, ghcr.io/acme/trainer:1.4, which matches only itself (default: the "
    "trainer image's repository owner)",
    "nodeAllocatable": "CPU and memory one GPU node offers pods, as `kubectl get node NODE "
    "-o jsonpath='{.status.allocatable}'` shows them: {cpu: 190, memory: 1900Gi}; training "
    "pods must fit it (default: the smallest common node type of the GPU product, "
    "docs/overlays.md#node-sizes)",
    "cpuPerPod": "CPU cores each training pod requests (default: 90% of nodeAllocatable's)",
    "memoryPerPod": "memory each training pod requests (default: 90% of nodeAllocatable's)",
    "shmSize": "size of /dev/shm (memory-backed) in each pod (default: 8Gi per GPU)",
    "installed": "parts the cluster already runs, which the overlay then leaves out: multus, "
    "whereabouts, gpu-driver (drivers on the hosts: the GPU Operator's driver container off, "
    "so the hosts also load nvidia-peermem for gpudirect peermem, or run the open kernel "
    "modules for dmabuf; `trainops preflight` checks), "
    "network-operator or sriov-network-operator (the rdmaProvider's operator; its "
    "configuration stays in the overlay)",
    "monitoring": "prometheus-operator (default: its CRDs exist, the overlay adds the DCGM "
    "PodMonitor and the alerting rules) or none (both left out; dashboard and GPU health "
    "check stay)",
    "failureRates": "failures per 1000 GPU-hours by class, for `trainops plan` (default: the "
    "Llama 3 fleet data, docs/runbook.md#planning)",
    "nccl": "extra NCCL_* variables for this cluster (name: value)",
    "trainer": "Kubeflow training API: v1 (Training Operator, PyTorchJob), v2 (Trainer v2, "
    "TrainJob on ClusterTrainingRuntimes) or both",
    "mpiOperator": "who serves MPIJob: training-operator (kubeflow.org/v1), mpi-operator "
    "(MPI Operator v2, kubeflow.org/v2beta1) or none (default: mpi-operator with Kueue, "
    "which queues only v2beta1 MPIJobs; training-operator where trainer includes v1; else "
    "none)",
    **observability_settings.SECTION_DOCS,
}

FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "fabric": str,
    "network": str,
    "nic": str,
    "ipRange": str,
    "hca": list,
    "gidIndex": int,
    "rdmaResource": str,
    "rdmaPerPod": int,
    "pkey": str,
    "pfNames": list,
    "nicDeviceId": str,
    "gpudirect": str,
    "gpusPerNode": int,
    "nodes": int,
    "gpuProduct": str,
    "topologyKey": str,
    "placement": str,
    "storageClass": str,
    "checkpointSize": str,
    "scheduler": str,
    "queue": str,
    "image": str,
    "nodeAllocatable": dict,
    "cpuPerPod": int,
    "memoryPerPod": str,
    "shmSize": str,
    "nccl": dict,
    "trainer": str,
    "mpiOperator": str,
    "alerts": dict,
    "preflight": dict,
    "gpuHealth": dict,
    "spareNodes": int,
    "teams": list,
    "priorities": dict,
    "podsReadyTimeout": str,
    "requeueBackoffSeconds": int,
    "requeueBackoffMaxSeconds": int,
    "rdmaProvider": str,
    "ofed": str,
    "registries": list,
    "installed": list,
    "monitoring": str,
    "failureRates": dict,
    "topology": list,
}
REQUIRED = ("fabric", "gpusPerNode", "nodes", "image", "storageClass")


def _split_image(image: str) -> tuple[str, str, str]:
    digest = ""
    if "@" in image:
        image, digest = image.split("@", 1)
    name, tag = image, ""
    if ":" in image.rsplit("/", 1)[-1]:
        name, tag = image.rsplit(":", 1)
    return name, tag, digest


def quantity_bytes(value: str) -> int:
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(value)
    units = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
    return int(match.group(1)) * units[match.group(2)]


class ProfileError(InputError):
    """A profile problem, reported with the file, line and key."""


def load_profile(path: Path) -> ClusterProfile:
    text = path.read_text()
    data = load_yaml_mapping(text, str(path))
    return parse_profile(data, path.parent.name, str(path), text)


def parse_profile(
    data: dict[str, Any], name: str, where: str = "cluster.yaml", text: str | None = None
) -> ClusterProfile:
    """Check types, unknown keys and combinations; return the profile with defaults."""

    def fail(key: str, message: str) -> ProfileError:
        line = None
        if text is not None:
            found = locate(text, (), key.split(".")[0])
            line = found + 1 if found is not None else None
        return ProfileError(f"{key}: {message}", where, line)

    if data.get("apiVersion", API_VERSION) != API_VERSION or data.get("kind", KIND) != KIND:
        raise fail("apiVersion", f"expected apiVersion {API_VERSION} and kind {KIND}")
    values = {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
    for key in values:
        if key not in FIELD_TYPES:
            known = ", ".join(sorted(FIELD_TYPES))
            raise fail(key, f"unknown key (known keys: {known})")
    for key in REQUIRED:
        if values.get(key) in (None, ""):
            raise fail(key, "is required")
    for key, value in values.items():
        expected = FIELD_TYPES[key]
        if value is None:
            continue
        if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise fail(key, f"must be an integer, not {value!r}")
        if expected is not int and not isinstance(value, expected):
            raise fail(key, f"must be a {expected.__name__}, not {value!r}")
    if not _NAME.match(name) or len(name) > 40:
        raise fail("name", f"cluster name {name!r} must be a DNS label of at most 40 characters")
    structured = {k: values.pop(k, None) for k in ("teams", "topology", "priorities")}
    profile = ClusterProfile(name=name, **{k: v for k, v in values.items() if v is not None})
    _check(profile, fail)
    _fill_defaults(profile)
    _structured(profile, structured, fail)
    return profile


def _structured(p: ClusterProfile, raw: dict[str, Any], fail) -> None:
    """The nested keys, checked against the scalar ones they depend on."""
    p.topology = parse_levels(raw["topology"], p.nodes, fail)
    if p.topology and p.topologyKey not in [lvl.label for lvl in p.topology]:
        raise fail(
            "topologyKey",
            f"{p.topologyKey!r} is not one of the topology levels: pack and spread work on "
            "one of them",
        )
    if raw["priorities"] is not None and p.scheduler == "default":
        raise fail("priorities", "need a scheduler that orders and preempts: kueue or volcano")
    p.priorities = parse_priorities(raw["priorities"], fail)
    context = TeamsContext(p.gpusPerNode, p.usable_nodes * p.gpusPerNode, p.priorities)
    p.teams = parse_teams(raw["teams"], context, fail)
    if p.teams and p.scheduler == "default":
        raise fail(
            "teams",
            "teams need quotas, which the default scheduler does not enforce: use "
            "scheduler kueue or volcano",
        )


def _check(p: ClusterProfile, fail) -> None:
    if p.fabric not in FABRICS:
        raise fail("fabric", f"must be one of {', '.join(FABRICS)}, not {p.fabric!r}")
    if p.network and p.network not in NETWORKS[p.fabric]:
        allowed = ", ".join(NETWORKS[p.fabric])
        raise fail("network", f"{p.network!r} does not carry {p.fabric}: use {allowed}")
    network = p.network or NETWORKS[p.fabric][0]
    if network in NIC_NETWORKS and not p.nic:
        raise fail("nic", f"is required for a {network} network (the host interface to use)")
    if p.rdma:
        if network in SRIOV_NETWORKS and p.hca:
            raise fail(
                "hca",
                f"a pod on the {network} network sees only its own VFs, not these host "
                "devices (NCCL would find none of them): leave hca out, NCCL uses every VF "
                "of the pod (set rdmaPerPod to the number of rails)",
            )
        if network not in SRIOV_NETWORKS and not p.hca:
            raise fail("hca", f"is required for the {p.fabric} fabric (NCCL_IB_HCA devices)")
        if not p.rdmaResource:
            raise fail("rdmaResource", f"is required for the {p.fabric} fabric")
    else:
        for key in ("hca", "rdmaResource", "gidIndex"):
            if getattr(p, key):
                raise fail(key, "only applies to RDMA fabrics (roce, ib), not tcp")
        if p.gpudirect not in ("", "none"):
            raise fail("gpudirect", "GPUDirect RDMA needs an RDMA fabric (roce, ib)")
    if p.pkey and network != "ib-sriov":
        raise fail("pkey", "only applies to the ib-sriov network")
    if p.pkey and (not _PKEY.fullmatch(p.pkey) or int(p.pkey, 16) & 0x7FFF == 0):
        # A P_Key is 16 bits, the top one full membership; 0x0000 and 0x8000 name no
        # partition (InfiniBand Architecture Specification, 10.9.1.2).
        raise fail(
            "pkey",
            f"{p.pkey!r} is not a partition key: write its 16 bits in hexadecimal, such as "
            "0x8001 (0x0000 and 0x8000 are invalid)",
        )
    _check_nic_selection(p, network, fail)
    if p.gidIndex is not None and p.fabric != "roce":
        raise fail("gidIndex", "only applies to RoCE")
    if p.gidIndex is not None and not 0 <= p.gidIndex <= 255:
        raise fail("gidIndex", "must be between 0 and 255")
    for device in p.hca:
        if not isinstance(device, str) or not re.match(r"^[A-Za-z0-9_]+(:\d+)?$", device):
            raise fail("hca", f"{device!r} is not a device name like mlx5_0 or mlx5_0:1")
    if p.gpudirect and p.gpudirect not in GPUDIRECT:
        raise fail("gpudirect", f"must be one of {', '.join(GPUDIRECT)}")
    if p.scheduler not in SCHEDULERS:
        raise fail("scheduler", f"must be one of {', '.join(SCHEDULERS)}, not {p.scheduler!r}")
    if p.trainer not in TRAINERS:
        raise fail("trainer", f"must be one of {', '.join(TRAINERS)}, not {p.trainer!r}")
    if p.mpiOperator and p.mpiOperator not in MPI_OPERATORS:
        raise fail("mpiOperator", f"must be one of {', '.join(MPI_OPERATORS)}")
    if p.mpiOperator == "training-operator" and p.trainer == "v2":
        raise fail(
            "mpiOperator",
            "training-operator needs the Training Operator, which trainer: v2 does not "
            "install: use mpi-operator or none, or trainer: both",
        )
    if p.mpiOperator == "training-operator" and p.scheduler == "kueue":
        raise fail(
            "mpiOperator",
            "Kueue does not manage the Training Operator's MPIJob (kubeflow.org/v1): such "
            "jobs would bypass the queue's quota. Use mpi-operator (v2beta1, which Kueue "
            "queues) or none",
        )
    if p.placement not in PLACEMENTS:
        raise fail("placement", f"must be one of {', '.join(PLACEMENTS)}")
    if not 1 <= p.gpusPerNode <= 16:
        raise fail("gpusPerNode", "must be between 1 and 16")
    if not 1 <= p.nodes <= 10000:
        raise fail("nodes", "must be between 1 and 10000")
    if p.rdmaPerPod < 1:
        raise fail("rdmaPerPod", "must be at least 1")
    if not 0 <= p.spareNodes < p.nodes:
        raise fail("spareNodes", f"must be between 0 and nodes - 1 ({p.nodes - 1})")
    if not _DURATION.match(p.podsReadyTimeout):
        raise fail("podsReadyTimeout", f"{p.podsReadyTimeout!r} is not a duration like 15m or 1h")
    if not 0 < p.requeueBackoffSeconds <= p.requeueBackoffMaxSeconds:
        raise fail(
            "requeueBackoffSeconds",
            "must be positive and at most requeueBackoffMaxSeconds",
        )
    _check_fabric(p, network, fail)
    for prefix in p.registries:
        if not isinstance(prefix, str) or not re.match(
            r"^[a-z0-9][-a-z0-9.:]*(/[^\s/]+)*/?$", prefix
        ):
            raise fail("registries", f"{prefix!r} is not an image prefix like ghcr.io/acme/")
    _check_installed(p, fail)
    for name, rate in p.failureRates.items():
        if isinstance(rate, bool) or not isinstance(rate, int | float) or rate < 0:
            raise fail(f"failureRates.{name}", "must be a non-negative number per 1000 GPU-hours")
    if not _NAME.match(p.queue):
        raise fail("queue", f"{p.queue!r} is not a valid object name")
    if not _IMAGE.match(p.image):
        raise fail("image", f"{p.image!r} is not an image reference")
    _, tag, digest = _split_image(p.image)
    if not digest and (not tag or tag == "latest"):
        raise fail("image", "pin the trainer image to a release tag or a digest, not latest")
    if p.ipRange:
        _check_address_range(p, network, fail)
    for key in ("checkpointSize", "memoryPerPod", "shmSize"):
        value = getattr(p, key)
        if value and not _QUANTITY.match(value):
            raise fail(key, f"{value!r} is not a size like 64Gi")
    memory = _check_pod_size(p, fail)
    shm = p.shmSize or f"{8 * p.gpusPerNode}Gi"
    if quantity_bytes(shm) >= quantity_bytes(memory):
        # A memory-backed emptyDir is charged to the container's memory limit.
        raise fail(
            "shmSize",
            f"{shm} must stay below memoryPerPod ({memory}): /dev/shm "
            "counts against the pod's memory limit",
        )
    observability_settings.parse(p.alerts, p.preflight, p.gpuHealth, p.fabric, p.nodes, fail)
    for key, value in p.nccl.items():
        if not _NCCL_NAME.match(str(key)):
            raise fail(f"nccl.{key}", "NCCL variables are named NCCL_*")
        if not isinstance(value, str | int):
            raise fail(f"nccl.{key}", "must be a string or a number")


def _check_nic_selection(p: ClusterProfile, network: str, fail: Any) -> None:
    """pfNames and nicDeviceId narrow which NICs get VFs; refused where nothing reads them."""
    for key in ("pfNames", "nicDeviceId"):
        if not getattr(p, key):
            continue
        if network not in SRIOV_NETWORKS:
            raise fail(key, "only applies to SR-IOV networks (sriov-roce, ib-sriov)")
        if p.rdmaProvider == "preinstalled":
            raise fail(
                key,
                "nothing applies it with rdmaProvider preinstalled (the hosts made the VFs): "
                "use network-operator or sriov-network-operator, or leave it out",
            )
    for name in p.pfNames:
        # An interface name: at most 15 bytes (IFNAMSIZ), no "/" or blank.
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", name):
            raise fail("pfNames", f"{name!r} is not an interface name like ibp12s0 or ens1f0")
    if len(set(p.pfNames)) != len(p.pfNames):
        raise fail("pfNames", "names an interface twice")
    if p.nicDeviceId:
        if not re.fullmatch(r"[0-9a-f]{4}", p.nicDeviceId):
            raise fail("nicDeviceId", f"{p.nicDeviceId!r} is not a PCI device ID like 1021")
        if p.rdmaProvider != "sriov-network-operator":
            raise fail(
                "nicDeviceId",
                "only sriov-network-operator selects physical functions by device ID (the "
                "Network Operator's SR-IOV device plugin sees the VFs, whose ID differs): "
                "use pfNames",
            )


def attachments_per_pod(p: ClusterProfile, network: str) -> int:
    """Addresses a training pod takes from the range: one per attachment, and on SR-IOV
    networks a pod attaches the network once per VF (rail)."""
    return p.rdmaPerPod if network in SRIOV_NETWORKS else 1


def addresses_at_full_use(p: ClusterProfile, network: str) -> int:
    """Addresses the training pods hold when the quotas are fully used: one pod per node
    (a pod takes every GPU of its node), on every node the quotas hand out."""
    return p.usable_nodes * attachments_per_pod(p, network)


def range_capacity(cidr: str) -> int:
    """Addresses whereabouts hands out from a range: all but the network and broadcast
    addresses of an IPv4 range (pkg/allocate, v0.9.4)."""
    net = ipaddress.ip_network(cidr, strict=False)
    return max(0, net.num_addresses - 2) if net.version == 4 else net.num_addresses


def _check_address_range(p: ClusterProfile, network: str, fail) -> None:
    try:
        ipaddress.ip_network(p.ipRange)
    except ValueError:
        raise fail("ipRange", f"{p.ipRange!r} is not a CIDR range") from None
    needed = addresses_at_full_use(p, network)
    holds = range_capacity(p.ipRange)
    if holds < needed:
        per_pod = attachments_per_pod(p, network)
        raise fail(
            "ipRange",
            f"{p.ipRange} holds {holds} addresses, and jobs on the {p.usable_nodes} nodes the "
            f"quotas hand out take {needed} ({per_pod} per pod): the pods past the last "
            f"address never start (whereabouts: 'Could not allocate IP in range'); use a "
            f"/{default_prefix(needed)} or larger",
        )


def default_prefix(needed: int) -> int:
    """The IPv4 prefix of the default range: a /24, or the smallest that holds twice the
    addresses the cluster's pods take at full use. The headroom is for addresses
    whereabouts has not reclaimed yet: a pod on a failed node is deleted without its CNI
    DEL, and its address stays allocated until the ip-reconciler runs."""
    prefix = 24
    while prefix > 8 and (1 << (32 - prefix)) - 2 < 2 * needed:
        prefix -= 1
    return prefix


def _check_installed(p: ClusterProfile, fail) -> None:
    for part in p.installed:
        if part not in INSTALLED:
            raise fail("installed", f"{part!r} is not one of {', '.join(INSTALLED)}")
    for operator in ("network-operator", "sriov-network-operator"):
        if operator in p.installed and p.rdmaProvider != operator:
            raise fail(
                "installed",
                f"{operator}: the overlay installs it only with rdmaProvider {operator} "
                f"(this profile's is {p.rdmaProvider}), so there is nothing to leave out",
            )
    if len(set(p.installed)) != len(p.installed):
        raise fail("installed", "names a part twice")
    if p.monitoring not in MONITORING:
        raise fail("monitoring", f"must be one of {', '.join(MONITORING)}, not {p.monitoring!r}")
    if p.monitoring == "none" and p.alerts:
        raise fail(
            "alerts",
            "set thresholds of alerting rules that monitoring: none leaves out (no "
            "PrometheusRule without the Prometheus Operator)",
        )


def _check_pod_size(p: ClusterProfile, fail) -> str:
    """A training pod fits a node's allocatable; returns the memory it requests."""
    node = parse_allocatable(p.nodeAllocatable, fail) or p.node
    cpu_default, memory_default = pod_defaults(node)
    if p.cpuPerPod < 0:
        raise fail("cpuPerPod", "must be positive")
    memory = p.memoryPerPod or memory_default
    if node.declared:
        # kube-scheduler NodeResourcesFit (fit.go fitsRequest): no node, no schedule.
        if (p.cpuPerPod or cpu_default) > node.cpu:
            raise fail(
                "cpuPerPod",
                f"{p.cpuPerPod} CPUs are more than a node offers ({node.shown()}, "
                "nodeAllocatable): the pods would stay Pending (Insufficient cpu)",
            )
        if quantity_bytes(memory) > node.memory:
            raise fail(
                "memoryPerPod",
                f"{memory} is more than a node offers ({node.shown()}, nodeAllocatable): "
                "the pods would stay Pending (Insufficient memory)",
            )
    return memory


def _check_fabric(p: ClusterProfile, network: str, fail) -> None:
    """The RDMA provider and driver agree with each other and with the GPUDirect mode."""
    if p.rdmaProvider not in RDMA_PROVIDERS:
        raise fail("rdmaProvider", f"must be one of {', '.join(RDMA_PROVIDERS)}")
    if p.ofed and p.ofed not in OFED_SOURCES:
        raise fail("ofed", f"must be one of {', '.join(OFED_SOURCES)}")
    if not p.rdma:
        for key in ("ofed",):
            if getattr(p, key):
                raise fail(key, "only applies to RDMA fabrics (roce, ib), not tcp")
        if p.rdmaProvider != "preinstalled":
            raise fail("rdmaProvider", "only applies to RDMA fabrics (roce, ib), not tcp")
        return
    if p.rdmaProvider == "sriov-network-operator" and network not in SRIOV_NETWORKS:
        raise fail(
            "rdmaProvider",
            f"the SR-IOV network operator creates VFs for SR-IOV networks, not {network}: "
            "use network-operator (its RDMA shared device plugin) or preinstalled",
        )
    ofed = p.ofed or ("host" if p.gpudirect == "peermem" else "inbox")
    if ofed == "driver-container" and p.rdmaProvider != "network-operator":
        raise fail("ofed", "the MOFED driver container comes with rdmaProvider network-operator")
    if p.gpudirect == "peermem" and ofed == "inbox":
        raise fail(
            "ofed",
            "gpudirect peermem loads nvidia-peermem, which needs MOFED (host or "
            "driver-container), not the inbox driver; or use gpudirect dmabuf",
        )
    if p.gpudirect == "peermem" and "gpu-driver" in p.installed and ofed == "driver-container":
        # The operator builds nvidia-peermem in its driver container against the MOFED
        # container's sources and its sidecar reloads it whenever that MOFED reloads
        # (gpu-operator v25.10.1 controllers/object_controls.go#L3447-L3461,
        # assets/state-driver/0500_daemonset.yaml#L150-L155); with the hosts' driver that
        # container does not run, and the hosts (inbox RDMA) have no MOFED to build it for.
        raise fail(
            "installed",
            "gpu-driver with gpudirect peermem and ofed driver-container: nothing builds "
            "nvidia-peermem against the Network Operator's MOFED or reloads it after that "
            "container restarts (the GPU Operator's driver container does, and it is off); "
            "use ofed host (MOFED and nvidia-peermem on the hosts), gpudirect dmabuf, or let "
            "the GPU Operator install the driver",
        )
    if p.rdmaProvider != "preinstalled" and not re.match(
        r"^[a-z0-9][-a-z0-9.]*/[-\w.]+$", p.rdmaResource
    ):
        raise fail(
            "rdmaResource",
            f"{p.rdmaResource!r}: the device plugin advertises PREFIX/NAME, e.g. "
            "nvidia.com/roce_vf",
        )


def _fill_defaults(p: ClusterProfile) -> None:
    p.network = p.network or NETWORKS[p.fabric][0]
    if not p.ipRange:
        base = {"tcp": "192.168.100.0", "roce": "192.168.200.0"}.get(p.fabric, "192.168.30.0")
        prefix = default_prefix(addresses_at_full_use(p, p.network))
        if prefix <= 16:
            base = "10.0.0.0"  # more than 192.168.0.0/16 holds
        p.ipRange = str(ipaddress.ip_network(f"{base}/{prefix}", strict=False))
    if not p.gpudirect:
        p.gpudirect = "dmabuf" if p.rdma else "none"
    cpu, memory = pod_defaults(p.node)
    p.cpuPerPod = p.cpuPerPod or cpu
    p.memoryPerPod = p.memoryPerPod or memory
    p.shmSize = p.shmSize or f"{8 * p.gpusPerNode}Gi"
    p.nccl = {str(k): str(v) for k, v in p.nccl.items()}
    if p.rdma and not p.ofed:
        p.ofed = "host" if p.gpudirect == "peermem" else "inbox"
    if not p.registries:
        # The trainer image's repository owner: ghcr.io/acme/trainer -> ghcr.io/acme/
        p.registries = [p.image_name.rsplit("/", 1)[0] + "/" if "/" in p.image_name else ""]
    p.failureRates = {str(k): float(v) for k, v in p.failureRates.items()}
    if not p.mpiOperator:
        if p.scheduler == "kueue":
            p.mpiOperator = "mpi-operator"
        else:
            p.mpiOperator = "training-operator" if p.trainer_v1 else "none"


def profile_keys() -> list[str]:
    return [f.name for f in fields(ClusterProfile) if f.name != "name"]
