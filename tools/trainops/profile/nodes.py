"""What one GPU node offers pods, and what a training pod requests by default.

A pod whose CPU or memory request exceeds every node's allocatable never schedules: the
scheduler's NodeResourcesFit filter reports "Insufficient cpu" / "Insufficient memory"
(kubernetes v1.35.0 `pkg/scheduler/framework/plugins/noderesources/fit.go`, fitsRequest)
and the whole gang waits. The profile's `nodeAllocatable` says what the nodes offer
(`kubectl get node NODE -o jsonpath='{.status.allocatable}'`); without it, the sizes
below stand in, and the per-pod defaults leave room for the node agents.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainops import quantity

GIB = 2**30

# Per GPU: (vCPUs, memory GiB) of the smallest common node type carrying that GPU (the
# nvidia.com/gpu.product value GPU feature discovery writes), from the providers' specs.
CAPACITY_PER_GPU: dict[str, tuple[int, int]] = {
    "NVIDIA-A100-SXM4-40GB": (12, 85),  # GCP a2-highgpu-8g: 96 vCPU, 680 GB
    "NVIDIA-A100-SXM4-80GB": (12, 144),  # AWS p4de.24xlarge: 96 vCPU, 1152 GiB
    "NVIDIA-H100-80GB-HBM3": (12, 234),  # Azure ND H100 v5: 96 vCPU; GCP a3-highgpu-8g: 1872 GB
    "NVIDIA-H200": (12, 231),  # Azure ND H200 v5: 96 vCPU, 1850 GiB
    "NVIDIA-B200": (24, 256),  # AWS p6-b200.48xlarge: 192 vCPU, 2048 GiB
    "NVIDIA-L4": (4, 16),  # GCP g2-standard-4, AWS g6.xlarge: 4 vCPU, 16 GiB
}
# Any other product: the smallest of the 8-GPU types above.
OTHER_CAPACITY_PER_GPU = (12, 85)
# The kubelet's reservations (kube-reserved, system-reserved, the 100Mi hard eviction
# threshold) as GKE and AKS size them; EKS reserves less on these nodes.
_CPU_RESERVED = ((1, Fraction(6, 100)), (1, Fraction(1, 100)), (2, Fraction(5, 1000)))
_CPU_RESERVED_ABOVE = Fraction(25, 10000)
_MEMORY_RESERVED = ((4, Fraction(25, 100)), (4, Fraction(20, 100)), (8, Fraction(10, 100)))
_MEMORY_RESERVED_MIDDLE = (112, Fraction(6, 100))
_MEMORY_RESERVED_ABOVE = Fraction(2, 100)
_EVICTION = 100 * 2**20
# What a training pod leaves of a node's allocatable to the node agents (the device
# plugin, DCGM exporter, Multus, the fabric's and monitoring's DaemonSets).
AGENTS_SHARE = Fraction(1, 10)


@dataclass(frozen=True)
class NodeSize:
    """Allocatable CPU (cores) and memory (bytes) of one GPU node."""

    cpu: Fraction
    memory: int
    declared: bool  # from the profile's nodeAllocatable, not a stand-in

    def shown(self) -> str:
        return f"{float(self.cpu):g} CPUs and {self.memory / GIB:.0f}Gi"


def _tiers(amount: Fraction, tiers, above: Fraction) -> Fraction:
    reserved, left = Fraction(0), amount
    for size, share in tiers:
        step = min(left, Fraction(size))
        reserved += step * share
        left -= step
    return reserved + left * above


def stand_in(gpu_product: str, gpus_per_node: int) -> NodeSize:
    """The allocatable of the smallest common node of `gpu_product`, capacity less what the
    kubelet reserves."""
    cpus, gib = CAPACITY_PER_GPU.get(gpu_product, OTHER_CAPACITY_PER_GPU)
    cpu = Fraction(cpus * gpus_per_node)
    memory = Fraction(gib * gpus_per_node)
    middle, share = _MEMORY_RESERVED_MIDDLE
    memory_reserved = _tiers(memory, (*_MEMORY_RESERVED, (middle, share)), _MEMORY_RESERVED_ABOVE)
    return NodeSize(
        cpu=cpu - _tiers(cpu, _CPU_RESERVED, _CPU_RESERVED_ABOVE),
        memory=int((memory - memory_reserved) * GIB) - _EVICTION,
        declared=False,
    )


def parse_allocatable(raw: dict[str, Any], fail) -> NodeSize | None:
    """The profile's nodeAllocatable {cpu, memory}, as the kubelet reports them."""
    if not raw:
        return None
    unknown = sorted(set(raw) - {"cpu", "memory"})
    if unknown:
        raise fail(f"nodeAllocatable.{unknown[0]}", "unknown key (known: cpu, memory)")
    missing = [key for key in ("cpu", "memory") if raw.get(key) in (None, "")]
    if missing:
        raise fail(f"nodeAllocatable.{missing[0]}", "is required with nodeAllocatable")
    cpu = quantity.parse(raw["cpu"])
    memory = quantity.parse(raw["memory"])
    if cpu is None or cpu <= 0:
        raise fail("nodeAllocatable.cpu", f"{raw['cpu']!r} is not a CPU amount like 190 or 95500m")
    if memory is None or memory < GIB:
        raise fail("nodeAllocatable.memory", f"{raw['memory']!r} is not a size like 1900Gi")
    return NodeSize(cpu=cpu, memory=int(memory), declared=True)


def pod_defaults(node: NodeSize) -> tuple[int, str]:
    """(cpuPerPod, memoryPerPod) a training pod requests by default: the node's allocatable
    less the agents' share, in whole cores and GiB."""
    keep = 1 - AGENTS_SHARE
    cpu = max(1, int(node.cpu * keep))
    memory = max(1, int(node.memory * keep) // GIB)
    return cpu, f"{memory}Gi"
