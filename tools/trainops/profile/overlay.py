"""Generates a cluster's overlay from its profile.

An overlay is the platform kustomization (operators, ClusterPolicy, the
training network, checkpoint volume, queues, preflight) plus the cluster's
job templates under `training/`, all tuned by one kustomize Component
(`training/cluster/`) that carries the fabric, scheduler, NCCL environment,
GPU and RDMA resources and placement. Output is a mapping of relative path to
file text; writing is the caller's job, so generation can be diffed and
checked without touching the tree.
"""

from __future__ import annotations

import json
from typing import Any

from trainops.profile.model import ClusterProfile, quantity_bytes
from trainops.yamlio import dump

BASE = "../../base"  # from overlays/<cluster>/
TEMPLATES = ("pytorchjob", "elastic", "mpijob", "preflight")
HEADER = (
    "# Generated from cluster.yaml by trainops. Change the profile instead\n"
    "# (`trainops set {name} KEY=VALUE`): regeneration overwrites this file.\n"
)
GPU_RESOURCE = "nvidia.com/gpu"


def generate(profile: ClusterProfile) -> dict[str, str]:
    files: dict[str, str] = {"kustomization.yaml": _platform_kustomization(profile)}
    files["platform/network.yaml"] = _network_patch(profile)
    files["platform/storage.yaml"] = _storage_patch(profile)
    if profile.rdma:
        files["platform/namespace.yaml"] = _namespace_patch(profile)
    if profile.scheduler != "default":
        files["platform/queue.yaml"] = _queue_patch(profile)
    files["training/cluster/kustomization.yaml"] = _cluster_component(profile)
    files["training/cluster/torchrun.yaml"] = _torchrun_patch(profile, ("Master", "Worker"))
    files["training/cluster/torchrun-elastic.yaml"] = _torchrun_patch(profile, ("Worker",))
    files["training/cluster/mpijob.yaml"] = _mpijob_patch(profile)
    if cluster_env(profile):
        files["training/cluster/mpi-forward.yaml"] = _mpi_forward(profile)
    for template in TEMPLATES:
        files[f"training/{template}/kustomization.yaml"] = _template_kustomization(
            profile, template
        )
    return files


def _doc(profile: ClusterProfile, *documents: Any, comment: str = "") -> str:
    text = HEADER.format(name=profile.name) + comment
    return text + "---\n".join(dump(doc) for doc in documents)


def cluster_env(profile: ClusterProfile) -> list[tuple[str, str]]:
    """NCCL and trainer variables this cluster adds to the fabric's defaults."""
    env: list[tuple[str, str]] = []
    if profile.rdma:
        # "=" makes NCCL match the names exactly: mlx5_1 would also match mlx5_10..19.
        env.append(("NCCL_IB_HCA", "=" + ",".join(profile.hca)))
    if profile.gidIndex is not None:
        env.append(("NCCL_IB_GID_INDEX", str(profile.gidIndex)))
    if profile.gpudirect != "none":
        env.append(("NCCL_NET_GDR_LEVEL", "PHB"))
        env.append(("TRAINER_EXPECT_GDR", "1"))
    env.extend(sorted(profile.nccl.items()))
    return env


# The namespace each base/operators directory installs into.
OPERATOR_NAMESPACES = {
    "multus": "kube-system",
    "training-operator": "kubeflow",
    "training-operator-without-mpijob": "kubeflow",
    "mpi-operator": "mpi-operator",
}


def operators(p: ClusterProfile) -> list[str]:
    """The directories under base/operators this cluster installs."""
    if p.mpi_v2:
        # One owner per CRD name: mpijobs.kubeflow.org is the MPI Operator's here.
        return ["training-operator-without-mpijob", "mpi-operator", "multus"]
    return ["training-operator", "multus"]


def platform_namespaces(p: ClusterProfile) -> list[str]:
    """Namespaces the cluster's platform Application writes to."""
    found = ["training", *(OPERATOR_NAMESPACES[name] for name in operators(p))]
    return list(dict.fromkeys(found))


def _platform_kustomization(p: ClusterProfile) -> str:
    resources = [
        *(f"{BASE}/operators/{name}" for name in operators(p)),
        f"{BASE}/gpu",
        f"{BASE}/networks/{p.network}",
        f"{BASE}/training/platform",
    ]
    if p.scheduler != "default":
        resources.append(f"{BASE}/training/queues/{p.scheduler}")
    resources.append("training/preflight")
    components = [f"{BASE}/components/scheduler/{p.scheduler}"]
    if p.gpudirect == "peermem":
        components.append(f"{BASE}/components/gpudirect-peermem")
    patches: list[dict[str, Any]] = [
        {"path": "platform/network.yaml"},
        {"path": "platform/storage.yaml"},
    ]
    if p.rdma:
        patches.append({"path": "platform/namespace.yaml"})
    if p.scheduler != "default":
        patches.append({"path": "platform/queue.yaml"})
        patches.extend(_queue_renames(p))
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        "components": components,
        "patches": patches,
    }
    comment = (
        f"# Platform of cluster {p.name}: what Argo CD's {p.name}-platform Application\n"
        "# syncs. Job templates are under training/, runs under runs/.\n"
    )
    return _doc(p, doc, comment=comment)


def _queue_renames(p: ClusterProfile) -> list[dict[str, Any]]:
    if p.queue == "training":
        return []
    kinds = ["LocalQueue", "ClusterQueue"] if p.scheduler == "kueue" else ["Queue"]
    patches = []
    for kind in kinds:
        ops = [{"op": "replace", "path": "/metadata/name", "value": p.queue}]
        if kind == "LocalQueue":
            ops.append({"op": "replace", "path": "/spec/clusterQueue", "value": p.queue})
        patches.append(
            {"target": {"kind": kind, "name": "training"}, "patch": dump(ops).rstrip("\n")}
        )
    return patches


def network_config(p: ClusterProfile) -> dict[str, Any]:
    ipam = {"type": "whereabouts", "range": p.ipRange}
    if p.network == "macvlan":
        return {
            "cniVersion": "1.0.0",
            "name": "training-net",
            "type": "macvlan",
            "master": p.nic,
            "mode": "bridge",
            "ipam": ipam,
        }
    if p.network == "host-device":
        return {
            "cniVersion": "1.0.0",
            "name": "training-net",
            "type": "host-device",
            "device": p.nic,
            "ipam": ipam,
        }
    if p.network == "sriov-roce":
        return {
            "cniVersion": "1.0.0",
            "name": "training-net",
            "plugins": [
                {"type": "sriov", "spoofchk": "off", "trust": "on", "ipam": ipam},
                {"type": "rdma"},
            ],
        }
    return {
        "cniVersion": "1.0.0",
        "name": "training-net",
        "type": "ib-sriov",
        "pkey": p.pkey,
        "link_state": "enable",
        "rdmaIsolation": True,
        "ipam": ipam,
    }


def _network_patch(p: ClusterProfile) -> str:
    metadata: dict[str, Any] = {"name": "training-net", "namespace": "training"}
    if p.network in ("sriov-roce", "ib-sriov"):
        metadata["annotations"] = {"k8s.v1.cni.cncf.io/resourceName": p.rdmaResource}
    doc = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": metadata,
        "spec": {"config": json.dumps(network_config(p), indent=2)},
    }
    return _doc(p, doc)


def _storage_patch(p: ClusterProfile) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "checkpoints", "namespace": "training"},
        "spec": {
            "storageClassName": p.storageClass,
            "resources": {"requests": {"storage": p.checkpointSize}},
        },
    }
    return _doc(p, doc)


def _namespace_patch(p: ClusterProfile) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "training",
            "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
        },
    }
    comment = "# RDMA pods need IPC_LOCK, which the baseline Pod Security profile forbids.\n"
    return _doc(p, doc, comment=comment)


def _format_quantity(total_bytes: int) -> str:
    for unit, size in (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)):
        if total_bytes % size == 0:
            return f"{total_bytes // size}{unit}"
    return str(total_bytes)


def _queue_patch(p: ClusterProfile) -> str:
    gpus = str(p.gpusPerNode * p.nodes)
    if p.scheduler == "volcano":
        doc = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "training"},
            "spec": {"capability": {GPU_RESOURCE: gpus}},
        }
        return _doc(p, doc)
    memory = _format_quantity(quantity_bytes(p.memoryPerPod) * p.nodes)
    doc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [
                                {"name": "cpu", "nominalQuota": str(p.cpuPerPod * p.nodes)},
                                {"name": "memory", "nominalQuota": memory},
                                {"name": GPU_RESOURCE, "nominalQuota": gpus},
                            ],
                        }
                    ],
                }
            ]
        },
    }
    comment = f"# Quota: the whole cluster, {p.nodes} nodes x {p.gpusPerNode} GPUs.\n"
    return _doc(p, doc, comment=comment)


def _cluster_component(p: ClusterProfile) -> str:
    image: dict[str, Any] = {"name": "trainer", "newName": p.image_name}
    if p.image_digest:
        image["digest"] = p.image_digest
    else:
        image["newTag"] = p.image_tag
    patches: list[dict[str, Any]] = [
        {
            "path": "torchrun.yaml",
            "target": {"kind": "PyTorchJob", "labelSelector": "trainops.dev/shape=master-worker"},
        },
        {
            "path": "torchrun-elastic.yaml",
            "target": {"kind": "PyTorchJob", "labelSelector": "trainops.dev/shape=worker"},
        },
        {"path": "mpijob.yaml", "target": {"kind": "MPIJob"}},
    ]
    if cluster_env(p):
        patches.append({"path": "mpi-forward.yaml", "target": {"kind": "MPIJob"}})
    if p.queue != "training":
        patches.append(_queue_label_patch(p))
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "components": [
            f"../../{BASE}/components/fabric/{p.fabric}",
            f"../../{BASE}/components/scheduler/{p.scheduler}",
        ],
        "images": [image],
        "patches": patches,
    }
    comment = (
        f"# Everything cluster {p.name} changes in a job template: fabric, scheduler,\n"
        "# image, NCCL variables, GPUs and RDMA devices, /dev/shm, placement.\n"
    )
    return _doc(p, doc, comment=comment)


def _queue_label_patch(p: ClusterProfile) -> dict[str, Any]:
    if p.scheduler == "kueue":
        ops = [
            {
                "op": "replace",
                "path": "/metadata/labels/kueue.x-k8s.io~1queue-name",
                "value": p.queue,
            }
        ]
    else:
        ops = [
            {"op": "replace", "path": "/spec/runPolicy/schedulingPolicy/queue", "value": p.queue}
        ]
    return {"target": {"group": "kubeflow.org"}, "patch": dump(ops).rstrip("\n")}


def _pod_patch(p: ClusterProfile, container: str) -> dict[str, Any]:
    limits: dict[str, Any] = {
        "cpu": str(p.cpuPerPod),
        "memory": p.memoryPerPod,
        GPU_RESOURCE: p.gpusPerNode,
    }
    if p.rdma:
        limits[p.rdmaResource] = p.rdmaPerPod
    container_patch: dict[str, Any] = {"name": container}
    env = cluster_env(p)
    if env:
        container_patch["env"] = [{"name": k, "value": v} for k, v in env]
    container_patch["resources"] = {
        "requests": {"cpu": str(p.cpuPerPod), "memory": p.memoryPerPod},
        "limits": limits,
    }
    spec: dict[str, Any] = {}
    if p.gpuProduct:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": p.gpuProduct}
    spec.update(_placement(p))
    spec["containers"] = [container_patch]
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": p.shmSize}}]
    return {"template": {"spec": spec}}


def _placement(p: ClusterProfile) -> dict[str, Any]:
    """Keep a job's pods close (pack) or balanced (spread) over the topology key."""
    this_job = {
        "labelSelector": {
            "matchExpressions": [{"key": "training.kubeflow.org/job-name", "operator": "Exists"}]
        },
        # Only pods of the same job count: the key's value comes from the new pod.
        "matchLabelKeys": ["training.kubeflow.org/job-name"],
    }
    if p.placement == "pack":
        return {
            "affinity": {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {"topologyKey": p.topologyKey, **this_job},
                        }
                    ]
                }
            }
        }
    return {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": p.topologyKey,
                "whenUnsatisfiable": "ScheduleAnyway",
                **this_job,
            }
        ]
    }


def _torchrun_patch(p: ClusterProfile, replicas: tuple[str, ...]) -> str:
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "any"},
        "spec": {
            "nprocPerNode": str(p.gpusPerNode),
            "pytorchReplicaSpecs": {r: _pod_patch(p, "pytorch") for r in replicas},
        },
    }
    return _doc(p, doc)


def _mpijob_patch(p: ClusterProfile) -> str:
    launcher: dict[str, Any] = {"name": "launcher"}
    env = cluster_env(p)
    if env:
        launcher["env"] = [{"name": k, "value": v} for k, v in env]
    doc = {
        "apiVersion": mpijob_api_version(p),
        "kind": "MPIJob",
        "metadata": {"name": "any"},
        "spec": {
            "slotsPerWorker": p.gpusPerNode,
            "mpiReplicaSpecs": {
                "Launcher": {"template": {"spec": {"containers": [launcher]}}},
                "Worker": _pod_patch(p, "worker"),
            },
        },
    }
    comment = "# The launcher carries the same variables so mpirun can forward them (-x).\n"
    return _doc(p, doc, comment=comment)


def _mpi_forward(p: ClusterProfile) -> str:
    path = "/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/command/1"
    ops = []
    for name, _ in reversed(cluster_env(p)):
        ops.append({"op": "add", "path": path, "value": name})
        ops.append({"op": "add", "path": path, "value": "-x"})
    comment = "# Insert `-x NAME` after `mpirun` for each variable the cluster adds.\n"
    return _doc(p, ops, comment=comment)


def mpijob_api_version(p: ClusterProfile) -> str:
    return "kubeflow.org/v2beta1" if p.mpi_v2 else "kubeflow.org/v1"


def _template_kustomization(p: ClusterProfile, template: str) -> str:
    base = template
    if template == "mpijob" and p.mpi_v2:
        base = "mpijob-v2beta1"
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"../../{BASE}/training/{base}"],
        "components": ["../cluster"],
    }
    comment = (
        f"# Cluster {p.name}'s {template} template: the base template plus training/cluster.\n"
    )
    return _doc(p, doc, comment=comment)
