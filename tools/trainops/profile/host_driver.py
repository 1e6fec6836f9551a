"""What GPUDirect RDMA asks of hosts that carry the GPU driver (`installed: [gpu-driver]`).

With the driver preinstalled the overlay turns the GPU Operator's driver container off
(`driver.enabled: false`). Everything the operator does for GPUDirect happens in that
container's DaemonSet, so none of it happens then, and nothing in the operator notices:

- `driver.rdma` (nvidia-peermem) and `driver.kernelModuleType` (the open modules DMA-BUF
  needs) are read only while transforming the driver DaemonSet: the nvidia-peermem-ctr
  sidecar that loads and reloads nvidia_peermem (TransformDriver, transformPeerMemoryContainer,
  transformDriverContainer; the sidecar in assets/state-driver), and the driver DaemonSet is
  deleted, not created, when `driver.enabled` is false (isStateEnabled "state-driver";
  DaemonSet()).
- The operator-validator does not wait for nvidia_peermem either: its init containers
  validate the driver (nvidia-smi, on the host when preinstalled), GDS, GDRCopy, the
  toolkit, CUDA and the device plugin; its only RDMA check (MOFED, mlx5_core) runs only with
  GPU_DIRECT_RDMA_ENABLED, which the operator sets only on the driver DaemonSet's
  containers. So the ClusterPolicy becomes ready and every operand starts; GPUDirect is
  just not there, and pods that insist on it (TRAINER_EXPECT_GDR) stop at their first
  collective.

The hosts must therefore load nvidia_peermem themselves (peermem), or run the open kernel
modules (dmabuf). `trainops preflight` checks it on the live nodes with a probe
DaemonSet (`gpudirect_probe`); `model.py` refuses the combination no host can provide.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainops.profile.model import ClusterProfile

# The pinned GPU Operator (the chart's version, addons/gpu-operator.yaml).
OPERATOR = "https://github.com/NVIDIA/gpu-operator/blob/v25.10.1"
SOURCES = {
    "driver-state-enabled": f"{OPERATOR}/controllers/state_manager.go#L987-L988",
    "disabled-daemonset-deleted": f"{OPERATOR}/controllers/object_controls.go#L4437-L4444",
    "peermem-sidecar": f"{OPERATOR}/assets/state-driver/0500_daemonset.yaml#L150-L189",
    "peermem-removed-without-rdma": f"{OPERATOR}/controllers/object_controls.go#L2792-L2801",
    "peermem-built-against-mofed": f"{OPERATOR}/controllers/object_controls.go#L3447-L3461",
    "kernel-module-type": f"{OPERATOR}/controllers/object_controls.go#L3428-L3433",
    "validator-init-containers": (
        f"{OPERATOR}/assets/state-operator-validation/0500_daemonset.yaml#L28-L167"
    ),
    "validator-mofed-only-with-rdma-env": f"{OPERATOR}/cmd/nvidia-validator/main.go#L1065-L1070",
    "rdma-env-only-on-driver": f"{OPERATOR}/controllers/object_controls.go#L2753-L2775",
    "rdma-read-in-transform-driver": f"{OPERATOR}/controllers/object_controls.go#L1005-L1029",
    "validator-host-driver": f"{OPERATOR}/cmd/nvidia-validator/main.go#L783-L788",
}


@dataclass(frozen=True)
class HostDuty:
    """What the hosts must provide, how a probe pod sees it, and how to provide it."""

    check: str  # the preflight check's name
    provides: str  # what a node that passes has
    readiness: str  # shell test, true on a node that provides it
    fix: str


PEERMEM = HostDuty(
    check="gpudirect on the hosts",
    provides="nvidia_peermem loaded",
    # Modules are global: /sys/module shows the host's, in any container.
    readiness="test -d /sys/module/nvidia_peermem",
    fix="The hosts carry the GPU driver (installed: gpu-driver), so the GPU Operator runs no "
    "nvidia-peermem container and nothing else loads it: on each GPU node `modprobe "
    "nvidia-peermem` (the driver's module, built against the hosts' MOFED) and make it "
    "persistent (echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf); or use "
    "gpudirect: dmabuf with the open kernel modules.",
)
DMABUF = HostDuty(
    check="gpudirect on the hosts",
    provides="the open GPU kernel modules",
    # The NVRM line reads "NVIDIA UNIX Open Kernel Module for <arch>" only for the open ones.
    readiness="grep -q 'Open Kernel Module' /proc/driver/nvidia/version",
    fix="The hosts carry the GPU driver (installed: gpu-driver), so driver.kernelModuleType "
    "does nothing: DMA-BUF needs the hosts to run the open GPU kernel modules (the driver "
    "installed with -m=kernel-open, or the distribution's nvidia-open package) on Linux 5.12 "
    "or later; or use gpudirect: peermem with nvidia-peermem loaded on the hosts.",
)


def host_duty(p: ClusterProfile) -> HostDuty | None:
    """What GPUDirect needs the hosts to provide, where they carry the driver; else None
    (the GPU Operator's driver container provides it, or the profile wants no GPUDirect)."""
    if "gpu-driver" not in p.installed:
        return None
    return {"peermem": PEERMEM, "dmabuf": DMABUF}.get(p.gpudirect)
