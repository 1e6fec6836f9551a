"""Generates a cluster's overlay from its profile.

An overlay is the platform kustomization (operators, the training network,
checkpoint volume, queues, Trainer v2 runtimes) plus the cluster's job
templates under `training/` (the NCCL preflight among them), all tuned by one
kustomize Component (`training/cluster/`) that carries the fabric, scheduler,
NCCL environment, GPU and RDMA resources and placement, and the Helm values of
the cluster's add-ons under `addons/` (the GPU Operator's, whose chart owns the
ClusterPolicy). Output is a mapping of relative path to file text; writing is
the caller's job, so generation can be diffed and checked without touching the
tree.
"""

from __future__ import annotations

import json
from typing import Any

from trainops.profile import (
    admission,
    fabric,
    host_driver,
    observability,
    schedulers,
    tenancy,
)
from trainops.profile.generated import generated_file
from trainops.profile.model import ClusterProfile
from trainops.profile.topology import (
    HOSTNAME,
    PODSET_GROUP,
    PREFERRED,
    kueue_topology,
    volcano_tier,
)
from trainops.yamlio import dump

BASE = "../../base"  # from overlays/<cluster>/
# The label each operator puts on a job's pods, naming the job.
V1_JOB_LABEL = "training.kubeflow.org/job-name"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
# JobSet labels its pods with its uid too; the Training and MPI Operators do not.
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
CHECKPOINT_MOUNT = "/checkpoints"
GPU_RESOURCE = "nvidia.com/gpu"


def generate(profile: ClusterProfile) -> dict[str, str]:
    files: dict[str, str] = {"kustomization.yaml": _platform_kustomization(profile)}
    files["platform/network.yaml"] = _network_patch(profile)
    files["platform/storage.yaml"] = _storage_patch(profile)
    files["addons/gpu-operator.yaml"] = _gpu_operator_values(profile)
    files["platform/admission.yaml"] = _admission(profile)
    if profile.scheduler != "default":
        files["platform/queue.yaml"] = _queue_patch(profile)
        files["platform/priorities.yaml"] = _doc(
            profile,
            *tenancy.priority_documents(profile),
            comment="# Run priorities: higher values preempt lower ones.\n",
        )
        files[f"addons/{profile.scheduler}.yaml"] = _scheduler_values(profile)
    if profile.teams:
        files["platform/teams.yaml"] = _teams(profile)
    if profile.topology and profile.scheduler == "kueue":
        files["platform/topology.yaml"] = _topology(profile)
    if fabric.documents(profile):
        files["platform/fabric.yaml"] = _fabric(profile)
    if fabric.resource_prefix_patch(profile):
        files["platform/sriov-operator.yaml"] = _doc(profile, fabric.resource_prefix_patch(profile))
    files["training/cluster/kustomization.yaml"] = _cluster_component(profile)
    if profile.trainer_v1:
        files["training/cluster/torchrun.yaml"] = _torchrun_patch(profile, ("Master", "Worker"))
        files["training/cluster/torchrun-elastic.yaml"] = _torchrun_patch(profile, ("Worker",))
    if profile.uses_mpi:
        files["training/cluster/mpijob.yaml"] = _mpijob_patch(profile)
        files["training/cluster/mpi-forward.yaml"] = _mpi_forward(profile, V1_JOB_LABEL)
    if profile.trainer_v2:
        files["training/cluster/runtime-torch.yaml"] = _runtime_patch(profile, "node")
        if profile.uses_mpi:
            files["training/cluster/runtime-mpi.yaml"] = _runtime_patch(profile, "node", "launcher")
            files["training/cluster/runtime-mpi-forward.yaml"] = _mpi_forward(
                profile, JOBSET_LABEL, RUNTIME_LAUNCHER_COMMAND
            )
        files["training/runtimes/kustomization.yaml"] = _runtimes_kustomization(profile)
    for template, base in templates(profile).items():
        if f"training/{template}" == observability.PREFLIGHT:
            continue  # observability.generate writes it, sized by the profile
        files[f"training/{template}/kustomization.yaml"] = _template_kustomization(
            profile, template, base
        )
    files.update(observability.generate(profile))
    return files


def templates(p: ClusterProfile) -> dict[str, str]:
    """The cluster's templates under training/ and the base each one builds on."""
    out = {}
    if p.trainer_v1:
        out["pytorchjob"] = "pytorchjob"
        out["elastic"] = "elastic"
        out["torchtitan"] = "torchtitan"
    if p.uses_mpi:
        out["mpijob"] = "mpijob-v2beta1" if p.mpi_v2 else "mpijob"
    if p.trainer_v2:
        out["trainjob"] = "trainjob"
        if p.uses_mpi:
            out["trainjob-mpi"] = "trainjob-mpi"
    # The fabric acceptance test: nccl-tests under MPI where the cluster has it.
    out["preflight"] = observability.preflight_base(p)
    return out


def runtime_names(p: ClusterProfile) -> dict[str, str]:
    """The cluster's ClusterTrainingRuntimes by shape: named after the fabric, so a
    TrainJob written for another cluster's fabric finds no runtime here."""
    if not p.trainer_v2:
        return {}
    names = {"torch-runtime": f"torch-distributed-{p.fabric}"}
    if p.uses_mpi:
        names["mpi-runtime"] = f"mpi-distributed-{p.fabric}"
    return names


def _doc(profile: ClusterProfile, *documents: Any, comment: str = "") -> str:
    return generated_file(profile.name, *documents, comment=comment)


def cluster_env(profile: ClusterProfile) -> list[tuple[str, str]]:
    """NCCL and trainer variables this cluster adds to the fabric's defaults."""
    env: list[tuple[str, str]] = []
    if profile.rdma and not profile.sriov:
        # "=" makes NCCL match the names exactly: mlx5_1 would also match mlx5_10..19.
        # Pods on SR-IOV networks get none: they see only their own VFs, named unlike
        # the host's devices, and NCCL uses all of them.
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
    "trainer": "kubeflow-system",
    "jobset": "jobset-system",
    "network-operator": fabric.NETWORK_OPERATOR_NAMESPACE,
    "sriov-network-operator": fabric.SRIOV_NAMESPACE,
    "whereabouts": "kube-system",
}


# The service account each base/operators directory's job controller runs as (its
# Deployment's serviceAccountName in the pinned install).
OPERATOR_CONTROLLERS = {
    "training-operator": "training-operator",
    "training-operator-without-mpijob": "training-operator",
    "mpi-operator": "mpi-operator",
    "trainer": "kubeflow-trainer-controller-manager",
    "jobset": "jobset-controller-manager",
}


def job_controllers(p: ClusterProfile) -> list[str]:
    """The users the cluster's operators create pods and jobs as."""
    return [
        f"system:serviceaccount:{OPERATOR_NAMESPACES[name]}:{OPERATOR_CONTROLLERS[name]}"
        for name in operators(p)
        if name in OPERATOR_CONTROLLERS
    ]


def operators(p: ClusterProfile) -> list[str]:
    """The directories under base/operators this cluster installs (not those it has)."""
    names = []
    if p.trainer_v1:
        # One owner per CRD name: without the Training Operator's MPIJob where it
        # does not serve MPIJob (the MPI Operator does, or nobody).
        full = p.mpiOperator == "training-operator"
        names.append("training-operator" if full else "training-operator-without-mpijob")
    if p.mpi_v2:
        names.append("mpi-operator")
    if p.trainer_v2:
        names += ["trainer", "jobset"]
    return [name for name in (*names, "multus", *fabric.operators(p)) if name not in p.installed]


def platform_namespaces(p: ClusterProfile) -> list[str]:
    """Namespaces the cluster's platform Application writes to."""
    found = ["training", *(OPERATOR_NAMESPACES[name] for name in operators(p))]
    return list(dict.fromkeys(found))


def _platform_kustomization(p: ClusterProfile) -> str:
    resources = [
        *(f"{BASE}/operators/{name}" for name in operators(p)),
        f"{BASE}/networks/{p.network}",
        f"{BASE}/training/platform",
    ]
    if p.scheduler != "default":
        resources.append(f"{BASE}/training/queues/{p.scheduler}")
        resources.append("platform/priorities.yaml")
    if p.teams:
        resources.append("platform/teams.yaml")
    if p.topology and p.scheduler == "kueue":
        resources.append("platform/topology.yaml")
    resources.append("platform/admission.yaml")
    if fabric.documents(p):
        resources.append("platform/fabric.yaml")
    if p.trainer_v2:
        resources.append("training/runtimes")
    resources.append(observability.DIRECTORY)
    components = [f"{BASE}/components/scheduler/{p.scheduler}"]
    patches: list[dict[str, Any]] = [
        {"path": "platform/network.yaml"},
        {"path": "platform/storage.yaml"},
        _tenant_label(),
    ]
    if fabric.resource_prefix_patch(p):
        patches.append({"path": "platform/sriov-operator.yaml"})
    if p.monitoring != "prometheus-operator":
        patches.append(_without_trainer_monitor())
    elif p.teams:
        patches.append(_trainer_monitor_namespaces(p))
    if p.scheduler != "default":
        patches.append({"path": "platform/queue.yaml"})
        if p.topology and p.scheduler == "kueue":
            patches.append(_flavor_topology(p))
        patches.extend(_queue_renames(p))
        if p.queue != "training":
            # The platform's scheduler Component sets the default queue on the jobs and
            # runtimes it holds again: name the cluster's after it.
            patches.extend(_queue_patches(p))
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        "components": components,
        "patches": patches,
    }
    comment = (
        f"# Platform of cluster {p.name}: what Argo CD's {p.name}-platform Application\n"
        "# syncs. Job templates are under training/ (the NCCL preflight too, run on\n"
        "# demand), runs under runs/, the add-ons' Helm values under addons/.\n"
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
    config: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "training-net",
        "type": "ib-sriov",
        "pkey": p.pkey,
        "link_state": "enable",
        "rdmaIsolation": True,
    }
    if p.pkey:
        # ib-kubernetes adds the VF's GUID to the partition; without this flag ib-sriov-cni
        # does not wait for it and the pod's VF may join before its GUID is set.
        config["ibKubernetesEnabled"] = True
    config["ipam"] = ipam
    return config


def _network_document(p: ClusterProfile) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "training-net", "namespace": "training"}
    if p.network in ("sriov-roce", "ib-sriov"):
        metadata["annotations"] = {"k8s.v1.cni.cncf.io/resourceName": p.rdmaResource}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": metadata,
        "spec": {"config": json.dumps(network_config(p), indent=2)},
    }


def _network_patch(p: ClusterProfile) -> str:
    return _doc(p, _network_document(p))


def _storage_document(p: ClusterProfile, full: bool = False) -> dict[str, Any]:
    """The checkpoint claim: the patch of base/training/platform's, or (`full`) a copy of
    it for another namespace."""
    metadata: dict[str, Any] = {"name": "checkpoints", "namespace": "training"}
    spec: dict[str, Any] = {
        "storageClassName": p.storageClass,
        "resources": {"requests": {"storage": p.checkpointSize}},
    }
    if full:
        metadata["annotations"] = {
            "argocd.argoproj.io/sync-wave": "-1",
            # Checkpoints outlive any sync: never prune or delete them from Git.
            "argocd.argoproj.io/sync-options": "Prune=false,Delete=false",
        }
        spec = {"accessModes": ["ReadWriteMany"], **spec}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": spec,
    }


def _storage_patch(p: ClusterProfile) -> str:
    return _doc(p, _storage_document(p))


def _queue_patch(p: ClusterProfile) -> str:
    return _doc(p, tenancy.platform_queue(p), comment=tenancy.platform_queue_comment(p))


def _without_trainer_monitor() -> dict[str, Any]:
    """No Prometheus Operator: the trainer's PodMonitor (base/training/platform) goes, since
    its kind has no CRD there and Argo CD would keep the sync failing on it."""
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "trainer", "namespace": "training"},
        "$patch": "delete",
    }
    return {"patch": dump(doc).rstrip("\n")}


def _trainer_monitor_namespaces(p: ClusterProfile) -> dict[str, Any]:
    """Teams' runs are scraped too: without a namespaceSelector the Prometheus Operator
    looks for a PodMonitor's pods in its own namespace (training) only."""
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "trainer", "namespace": "training"},
        "spec": {
            "namespaceSelector": {"matchNames": ["training", *(t.namespace for t in p.teams)]}
        },
    }
    return {"patch": dump(doc).rstrip("\n")}


def _tenant_label() -> dict[str, Any]:
    """The platform's namespace takes runs too: the admission policy binds to it."""
    ops = [
        {
            "op": "add",
            "path": "/metadata/labels/" + tenancy.TENANT_LABEL.replace("/", "~1"),
            "value": "training",
        }
    ]
    return {"target": {"kind": "Namespace", "name": "training"}, "patch": dump(ops).rstrip("\n")}


def _admission(p: ClusterProfile) -> str:
    comment = (
        "# The admission gate for runs (trainops.profile.admission): what `trainops\n"
        "# validate` refuses in a run, the API server refuses at `kubectl apply` too.\n"
    )
    docs = [
        *admission.documents(p, job_controllers(p)),
        tenancy.params(p, "training", None),
        tenancy.jobs_apart("training"),
    ]
    return _doc(p, *docs, comment=comment)


def _teams(p: ClusterProfile) -> str:
    network = _network_document(p)
    claim = _storage_document(p, full=True)
    docs = [doc for team in p.teams for doc in tenancy.team_documents(p, team, network, claim)]
    names = ", ".join(t.name for t in p.teams)
    comment = f"# The teams sharing cluster {p.name} ({names}): namespace, queue, claim, network.\n"
    return _doc(p, *docs, comment=comment)


def _fabric(p: ClusterProfile) -> str:
    comment = (
        f"# The RDMA fabric's configuration for the {p.rdmaProvider} (trainops.profile.fabric):\n"
        f"# the device plugin advertises {p.rdmaResource}, which every training pod requests.\n"
    )
    return _doc(p, *fabric.documents(p), comment=comment)


def _topology(p: ClusterProfile) -> str:
    comment = "# The fabric's levels for Kueue's topology-aware scheduling.\n"
    return _doc(p, kueue_topology(p.name, p.topology), comment=comment)


def _flavor_topology(p: ClusterProfile) -> dict[str, Any]:
    ops = [{"op": "add", "path": "/spec/topologyName", "value": p.name}]
    return {
        "target": {"kind": "ResourceFlavor", "name": "gpu"},
        "patch": dump(ops).rstrip("\n"),
    }


def _scheduler_values(p: ClusterProfile) -> str:
    if p.scheduler == "kueue":
        values = schedulers.kueue_values(p)
        chart = f"kueue chart {schedulers.KUEUE_CHART}"
    else:
        values = schedulers.volcano_values(p)
        chart = f"volcano chart {schedulers.VOLCANO_CHART}"
    comment = (
        f"# Helm values of Argo CD's {p.name}-{p.scheduler} Application ({chart}):\n"
        "# its configuration, generated from the profile (trainops.profile.schedulers).\n"
    )
    return _doc(p, values, comment=comment)


# nvidia-ctk-installer's environment for the toolkit's
# accept-nvidia-visible-devices-envvar-when-unprivileged option (container-toolkit v1.18.1,
# cmd/nvidia-ctk-installer/toolkit/toolkit.go).
TOOLKIT_ENVVAR_WHEN_UNPRIVILEGED = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"

# Tolerated by the GPU Operator's operands: training nodes carry this taint.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def gpu_operator_values(p: ClusterProfile) -> dict[str, Any]:
    """Helm values of the cluster's gpu-operator add-on (chart v25.10.1), which owns the
    ClusterPolicy: the chart copies each of these into the ClusterPolicy's spec."""
    if p.gpudirect == "peermem":
        # Legacy GPUDirect: nvidia-peermem against MOFED, the hosts' (useHostMofed) or the
        # Network Operator's driver container, which the GPU driver waits for. useHostMofed
        # has no effect unless rdma.enabled is true.
        driver = {"enabled": True, "kernelModuleType": "auto"}
        driver["rdma"] = {"enabled": True, "useHostMofed": p.ofed == "host"}
    else:
        # DMA-BUF GPUDirect needs the open kernel modules (driver >= 535, kernel >= 5.12).
        driver = {"enabled": True, "kernelModuleType": "open"}
        driver["rdma"] = {"enabled": False, "useHostMofed": False}
    if "gpu-driver" in p.installed:
        # The hosts carry the driver: the operator must not start its driver container
        # against it. driver.rdma is read only while the operator transforms that
        # container's DaemonSet (its nvidia-peermem sidecar, GPU_DIRECT_RDMA_ENABLED), which
        # it deletes when driver.enabled is false, and the operator-validator never waits
        # for nvidia_peermem: rdma.enabled would be ignored, so it says false and the hosts
        # load nvidia_peermem themselves (`trainops preflight` checks it). The operator's
        # lines: host_driver.SOURCES, e.g.
        # https://github.com/NVIDIA/gpu-operator/blob/v25.10.1/controllers/object_controls.go#L4437-L4444
        driver["enabled"] = False
        driver["rdma"] = {"enabled": False, "useHostMofed": False}
    return {
        # Required by the ClusterPolicy CRD up to v25.10.x.
        "operator": {"defaultRuntime": "containerd"},
        "daemonsets": {
            "priorityClassName": "system-node-critical",
            "tolerations": [GPU_TOLERATION],
        },
        "driver": driver,
        # The container runtime exposes whatever NVIDIA_VISIBLE_DEVICES lists to an
        # unprivileged container unless the toolkit is told not to (its default is to
        # accept it): a pod could see every GPU of its node without requesting one.
        # Requested GPUs arrive as CDI devices (the device plugin's cdi-annotations and
        # cdi-cri strategies under cdi.enabled), which the variable does not gate; the
        # operator's own operands that set it are privileged.
        "cdi": {"enabled": True},
        "toolkit": {"env": [{"name": TOOLKIT_ENVVAR_WHEN_UNPRIVILEGED, "value": "false"}]},
        # A ServiceMonitor needs the Prometheus Operator's CRD: without it the
        # ClusterPolicy never gets ready. Enable it where that operator runs.
        # The platform's PodMonitor (base/monitoring) scrapes it instead; the counters
        # add ECC and throttling for the alerts.
        "dcgmExporter": {
            "serviceMonitor": {"enabled": False},
            "config": observability.dcgm_exporter_config(),
        },
        "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}},
    }


def _gpu_operator_values(p: ClusterProfile) -> str:
    comment = (
        f"# Helm values of Argo CD's {p.name}-gpu-operator Application (the GPU\n"
        "# Operator chart, which renders and owns the ClusterPolicy).\n"
    )
    duty = host_driver.host_duty(p)
    if duty is not None:
        comment += (
            f"# The hosts carry the GPU driver (installed: gpu-driver): the operator runs no\n"
            f"# driver container, so gpudirect {p.gpudirect} needs the hosts to have\n"
            f"# {duty.provides} (nothing in the operator provides or checks it);\n"
            "# `trainops preflight` checks it (--emit-gpudirect-probe).\n"
        )
    return _doc(p, gpu_operator_values(p), comment=comment)


def _cluster_component(p: ClusterProfile) -> str:
    image: dict[str, Any] = {"name": "trainer", "newName": p.image_name}
    if p.image_digest:
        image["digest"] = p.image_digest
    else:
        image["newTag"] = p.image_tag
    patches: list[dict[str, Any]] = []
    if p.trainer_v1:
        patches.append(_patch_file("torchrun.yaml", "PyTorchJob", "master-worker"))
        patches.append(_patch_file("torchrun-elastic.yaml", "PyTorchJob", "worker"))
    if p.uses_mpi:
        patches.append({"path": "mpijob.yaml", "target": {"kind": "MPIJob"}})
        patches.append({"path": "mpi-forward.yaml", "target": {"kind": "MPIJob"}})
    if p.trainer_v2:
        patches.append(_patch_file("runtime-torch.yaml", RUNTIME, "torch-runtime"))
        if p.uses_mpi:
            patches.append(_patch_file("runtime-mpi.yaml", RUNTIME, "mpi-runtime"))
            patches.append(_patch_file("runtime-mpi-forward.yaml", RUNTIME, "mpi-runtime"))
        patches.extend(_trainjob_patches(p))
    if p.queue != "training":
        patches.extend(_queue_patches(p))
    patches.extend(_priority_patches(p))
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


RUNTIME = "ClusterTrainingRuntime"
# The MPI runtime's launcher is replicatedJobs[1], after the nodes it depends on.
RUNTIME_LAUNCHER_COMMAND = (
    "/spec/template/spec/replicatedJobs/1/template/spec/template/spec/containers/0/command/1"
)
MPIJOB_LAUNCHER_COMMAND = "/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/command/1"


def _patch_file(path: str, kind: str, shape: str) -> dict[str, Any]:
    return {"path": path, "target": {"kind": kind, "labelSelector": f"trainops.dev/shape={shape}"}}


def _inline(kind: str, shape: str | None, ops: list[dict[str, Any]]) -> dict[str, Any]:
    target: dict[str, Any] = {"kind": kind}
    if shape:
        target["labelSelector"] = f"trainops.dev/shape={shape}"
    return {"target": target, "patch": dump(ops).rstrip("\n")}


def _trainjob_patches(p: ClusterProfile) -> list[dict[str, Any]]:
    """TrainJob templates name this cluster's runtimes; torchrun starts a process per GPU."""
    names = runtime_names(p)
    torch = [
        {"op": "replace", "path": "/spec/runtimeRef/name", "value": names["torch-runtime"]},
        {"op": "replace", "path": "/spec/trainer/numProcPerNode", "value": p.gpusPerNode},
    ]
    patches = [_inline("TrainJob", "trainjob", torch)]
    if "mpi-runtime" in names:
        mpi = [{"op": "replace", "path": "/spec/runtimeRef/name", "value": names["mpi-runtime"]}]
        patches.append(_inline("TrainJob", "trainjob-mpi", mpi))
    return patches


def _queue_patches(p: ClusterProfile) -> list[dict[str, Any]]:
    """Point the jobs (and, with Volcano, the runtimes' PodGroups) at the cluster's queue."""
    if p.scheduler == "kueue":
        label = "/metadata/labels/kueue.x-k8s.io~1queue-name"
        ops = [{"op": "replace", "path": label, "value": p.queue}]
        patches = [{"target": {"group": "kubeflow.org"}, "patch": dump(ops).rstrip("\n")}]
        if p.trainer_v2:
            patches.append(_inline("TrainJob", None, ops))
        return patches
    ops = [{"op": "replace", "path": "/spec/runPolicy/schedulingPolicy/queue", "value": p.queue}]
    patches = [{"target": {"group": "kubeflow.org"}, "patch": dump(ops).rstrip("\n")}]
    if p.trainer_v2:
        annotation = "/spec/template/metadata/annotations/scheduling.volcano.sh~1queue-name"
        queue = [{"op": "replace", "path": annotation, "value": p.queue}]
        patches.append(_inline(RUNTIME, None, queue))
    return patches


def _priority_patches(p: ClusterProfile) -> list[dict[str, Any]]:
    """Jobs carry the cluster's default priority; a run may name another."""
    if p.scheduler == "default":
        return []
    name = tenancy.default_priority(p)
    if p.scheduler == "kueue":
        label = "/metadata/labels/" + tenancy.PRIORITY_LABEL.replace("/", "~1")
        ops = [{"op": "add", "path": label, "value": name}]
        patches = [{"target": {"group": "kubeflow.org"}, "patch": dump(ops).rstrip("\n")}]
        if p.trainer_v2:
            patches.append(_inline("TrainJob", None, ops))
        return patches
    # Volcano: the operators give the job's PodGroup this PriorityClass.
    ops = [
        {
            "op": "add",
            "path": "/spec/runPolicy/schedulingPolicy/priorityClass",
            "value": name,
        }
    ]
    return [{"target": {"group": "kubeflow.org"}, "patch": dump(ops).rstrip("\n")}]


def _pod_patch(
    p: ClusterProfile, container: str, job_label: str = V1_JOB_LABEL, grouped: bool = False
) -> dict[str, Any]:
    limits: dict[str, Any] = {
        "cpu": str(p.cpuPerPod),
        "memory": p.memoryPerPod,
        GPU_RESOURCE: p.gpusPerNode,
    }
    if p.rdma:
        limits[p.rdmaResource] = p.rdmaPerPod
    container_patch: dict[str, Any] = {"name": container, "env": _container_env(p, job_label)}
    container_patch["resources"] = {
        "requests": {"cpu": str(p.cpuPerPod), "memory": p.memoryPerPod},
        "limits": limits,
    }
    # The run sees its own directory of the shared volume, not the other runs'.
    container_patch["volumeMounts"] = [
        {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT, "subPathExpr": "$(TRAINER_JOB_NAME)"}
    ]
    spec: dict[str, Any] = {"nodeSelector": p.gpu_node_selector}
    spec.update(_placement(p, job_label))
    spec["containers"] = [container_patch]
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": p.shmSize}}]
    template: dict[str, Any] = {"spec": spec}
    annotations = {}
    if p.sriov and p.rdmaPerPod > 1:
        annotations[MULTUS_NETWORKS] = _attachments(p)
    if p.scheduler == "kueue" and p.topology and p.placement == "pack":
        # Kueue places the pod set in one domain of the pack level when it fits, else
        # in as few as it can (the next level up, and so on).
        annotations[PREFERRED] = p.topologyKey
        if grouped:
            annotations[PODSET_GROUP] = "ranks"
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"template": template}


MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"


def _attachments(p: ClusterProfile) -> str:
    """One attachment per VF: Multus configures one device of the network's resource per
    attachment, so a pod that requests N VFs attaches the network N times (net1..netN,
    one rail each; NCCL's socket interface stays net1)."""
    return ",".join(["training-net"] * p.rdmaPerPod)


def _container_env(p: ClusterProfile, job_label: str) -> list[dict[str, Any]]:
    """The cluster's variables, and who the job is for the trainer (its checkpoints
    record it and it refuses another job's): name and uid from the operator's labels."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in cluster_env(p)]
    env.append(_from_label("TRAINER_JOB_NAME", job_label))
    if job_label == JOBSET_LABEL:
        env.append(_from_label("TRAINER_JOB_UID", JOBSET_UID_LABEL))
    env.append({"name": "TRAINER_CHECKPOINT_DIR", "value": CHECKPOINT_MOUNT})
    return env


def _from_label(name: str, label: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}


def _placement(p: ClusterProfile, job_label: str) -> dict[str, Any]:
    """Keep a job's pods close (pack) or balanced (spread) over the topology key."""
    this_job = {
        "labelSelector": {"matchExpressions": [{"key": job_label, "operator": "Exists"}]},
        # Only pods of the same job count: the key's value comes from the new pod.
        "matchLabelKeys": [job_label],
    }
    if p.placement == "pack" and p.topologyKey == HOSTNAME:
        return {}  # every pod takes a whole node: one node holds one pod of the job
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
            "pytorchReplicaSpecs": {
                r: _pod_patch(p, "pytorch", grouped=len(replicas) > 1) for r in replicas
            },
        },
    }
    return _doc(p, doc)


def _mpijob_patch(p: ClusterProfile) -> str:
    launcher: dict[str, Any] = {"name": "launcher", "env": _container_env(p, V1_JOB_LABEL)}
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


def _runtime_patch(p: ClusterProfile, node: str, launcher: str | None = None) -> str:
    """The cluster's settings on a runtime's replicated jobs: the nodes get the pod
    settings of every template, an MPI launcher the variables it forwards."""
    jobs = [{"name": node, "template": {"spec": _pod_patch(p, "node", JOBSET_LABEL)}}]
    spec: dict[str, Any] = {}
    if launcher is not None:
        spec["mlPolicy"] = {"mpi": {"numProcPerNode": p.gpusPerNode}}
        container = {"name": "node", "env": _container_env(p, JOBSET_LABEL)}
        pod = {"template": {"spec": {"containers": [container]}}}
        jobs.append({"name": launcher, "template": {"spec": pod}})
    spec["template"] = {"spec": {"replicatedJobs": jobs}}
    if (
        p.scheduler == "volcano"
        and p.topology
        and p.placement == "pack"
        and p.topologyKey != HOSTNAME
    ):
        # Volcano places the TrainJob's PodGroup inside one HyperNode of the pack level's
        # tier when it can (soft), through the Trainer's PodGroup policy.
        tier = volcano_tier(p.topology, p.topologyKey)
        spec["podGroupPolicy"] = {
            "volcano": {"networkTopology": {"mode": "soft", "highestTierAllowed": tier}}
        }
    doc = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": RUNTIME,
        "metadata": {"name": "any"},
        "spec": spec,
    }
    return _doc(p, doc)


def _runtimes_kustomization(p: ClusterProfile) -> str:
    resources = [f"../../{BASE}/training/runtimes/torch"]
    if p.uses_mpi:
        resources.append(f"../../{BASE}/training/runtimes/mpi")
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        "components": ["../cluster"],
        "nameSuffix": f"-{p.fabric}",
    }
    names = ", ".join(runtime_names(p).values())
    comment = (
        f"# Cluster {p.name}'s ClusterTrainingRuntimes ({names}):\n"
        "# the platform's half of every TrainJob, synced with the platform.\n"
    )
    return _doc(p, doc, comment=comment)


def _mpi_forward(p: ClusterProfile, job_label: str, path: str = MPIJOB_LAUNCHER_COMMAND) -> str:
    ops = []
    # The template's mpirun already forwards TRAINER_CHECKPOINT_DIR.
    names = [
        e["name"] for e in _container_env(p, job_label) if e["name"] != "TRAINER_CHECKPOINT_DIR"
    ]
    for name in reversed(names):
        ops.append({"op": "add", "path": path, "value": name})
        ops.append({"op": "add", "path": path, "value": "-x"})
    comment = "# Insert `-x NAME` after `mpirun` for each variable the cluster and the job add.\n"
    return _doc(p, ops, comment=comment)


def mpijob_api_version(p: ClusterProfile) -> str:
    return "kubeflow.org/v2beta1" if p.mpi_v2 else "kubeflow.org/v1"


def _template_kustomization(p: ClusterProfile, template: str, base: str) -> str:
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
