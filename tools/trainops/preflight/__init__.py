"""`trainops preflight`: does a live cluster provide what an overlay expects?

The overlay's platform render says which namespaces, networks, claims, queues and
custom resources must exist (`platform`); its profile says which nodes, GPUs, RDMA
devices, topology labels and addresses training needs, and every GPU node must be
able to write checkpoints (`fabric`); where the hosts carry the GPU driver, every GPU
node must provide what GPUDirect needs of them (`fabric.check_host_gpudirect`). Each
check reads the API server (read-only) and passes, warns or fails with a fix.
"""

from __future__ import annotations

from trainops.kube import Cluster
from trainops.model import Document
from trainops.preflight import fabric, platform
from trainops.preflight.platform import FAIL, PASS, WARN, Check
from trainops.profile.model import ClusterProfile

__all__ = ["FAIL", "PASS", "WARN", "Check", "run_checks"]


def run_checks(cluster: Cluster, profile: ClusterProfile, docs: list[Document]) -> list[Check]:
    return [
        *platform.check_namespaces(cluster, docs),
        *platform.check_multus(cluster),
        *platform.check_crds(cluster, docs),
        *platform.check_networks(cluster, docs),
        *platform.check_claims(cluster, docs),
        *platform.check_nodes(cluster, profile),
        *fabric.check_topology(cluster, profile),
        *fabric.check_rdma_resource(cluster, profile),
        *fabric.check_addresses(cluster, profile, docs),
        *fabric.check_checkpoint_writes(cluster, profile),
        *fabric.check_ufm_secret(cluster, profile),
        *fabric.check_host_gpudirect(cluster, profile),
        *platform.check_queues(cluster, docs),
        *platform.check_gpu_operator(cluster, docs),
    ]
