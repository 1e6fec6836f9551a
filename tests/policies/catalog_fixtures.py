"""Fixtures for the rules written from the failure-mode catalog (policies/catalog/): per rule
a render that breaks it and one that keeps it, built from tests/policies/fixtures.py's
baselines so that each differs from a correct render in the one thing the rule checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from tests.policies import areas
from tests.policies.fixtures import (
    NAMESPACE,
    Docs,
    baseline,
    baseline_v2,
    edit,
    edit_v2,
    first,
    indexed_job,
    job,
    jobset,
    named,
    platform,
    pods_of,
    set_env,
    storage_class,
    v2_launcher,
    v2_worker,
    volcano_job,
)

Pair = tuple[Callable[[], Docs], Callable[[], Docs]]


def _docs(*builders: Callable[[], Any]) -> Callable[[], Docs]:
    return lambda: [copy.deepcopy(b()) for b in builders]


def _indexed(args: list[str], pods: int = 4) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = indexed_job(pods)
        container = doc["spec"]["template"]["spec"]["containers"][0]
        container["command"], container["args"] = args[:1], args[1:]
        return [*platform(), doc]

    return build


# -- launchers ------------------------------------------------------------------------------

ACCELERATE_GOOD = [
    "accelerate",
    "launch",
    "--num_machines=4",
    "--num_processes=32",
    "--machine_rank=$(JOB_COMPLETION_INDEX)",
    "--main_process_ip=ddp-0.ddp",
    "--mixed_precision=bf16",
    "train.py",
]


def _accelerate(**changes: str | None) -> list[str]:
    words = [w for w in ACCELERATE_GOOD if w.split("=")[0].lstrip("-") not in changes]
    extra = [f"--{k}={v}" for k, v in changes.items() if v is not None]
    return [*words[:2], *extra, *words[2:]]


DEEPSPEED_GOOD = [
    "deepspeed",
    "--no_ssh",
    "--node_rank=$(JOB_COMPLETION_INDEX)",
    "--hostfile=/etc/ds/hostfile",
    "--master_addr=ddp-0.ddp",
    "train.py",
]


def _mpirun_as(uid: int | None, flag: bool) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        launcher = v2_launcher(docs)
        named(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][
            "securityContext"
        ] = {} if uid is None else {"runAsUser": uid}
        if flag:
            launcher["command"].insert(1, "--allow-run-as-root")

    return change


def _root_image_launcher(docs: Docs) -> None:
    """A launcher in an image that runs as root, with no runAsUser in the pod."""
    _mpirun_as(None, flag=False)(docs)
    v2_launcher(docs)["image"] = "nvcr.io/nvidia/pytorch:25.01-py3"


def _no_hostfile(docs: Docs) -> None:
    command = v2_launcher(docs)["command"]
    at = command.index("--hostfile")
    del command[at : at + 2]


def _worker_command(words: list[str]) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        worker = v2_worker(docs)["containers"][0]
        worker["command"] = words

    return change


def _sidecar_first(main_container: str | None) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        mpijob = job(docs, "MPIJob")
        sidecar = {"name": "logs", "image": "registry.example.com/fluent-bit:3.1.0"}
        worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        worker["containers"].insert(0, sidecar)
        if main_container is not None:
            mpijob["spec"]["mainContainer"] = main_container

    return change


def _launcher_start(policy: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        spec = named(docs, "MPIJob")["spec"]
        spec["launcherCreationPolicy"] = policy
        spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Never"
        spec["runPolicy"]["backoffLimit"] = 0

    return change


# -- environment ----------------------------------------------------------------------------


def _env(name: str, value: str, which: str = "PyTorchJob") -> Callable[[Docs], None]:
    return lambda docs: set_env(job(docs, which), name, value)


def _duplicate(docs: Docs) -> None:
    env = first(job(docs))["env"]
    env.append({"name": "NCCL_IB_GID_INDEX", "value": "5"})


def _hydra_bootstrap(docs: Docs) -> None:
    launcher = job(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["containers"][0]["env"].append({"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "ssh"})


def _gloo(value: str) -> Callable[[Docs], None]:
    return _env("GLOO_SOCKET_IFNAME", value)


# -- operators ------------------------------------------------------------------------------


def _elastic(**fields: Any) -> Callable[[Docs], None]:
    return lambda docs: job(docs, elastic=True)["spec"]["elasticPolicy"].update(fields)


def _scheduler_name(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        doc = job(docs)
        doc["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": 4}
        for spec in pods_of(doc):
            spec["schedulerName"] = name

    return change


def _runtime_patch(job_name: str, container: str, env: bool = False) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        patched: dict[str, Any] = {"name": container}
        if env:
            patched["env"] = [{"name": "EXTRA", "value": "1"}]
        else:
            patched["resources"] = {"limits": {"cpu": "90"}}
        pod_patch = {"spec": {"template": {"spec": {"containers": [patched]}}}}
        named(docs, "TrainJob", "llama-v2")["spec"]["runtimePatches"] = [
            {
                "manager": "example.com/tuner",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {"replicatedJobs": [{"name": job_name, "template": pod_patch}]}
                    }
                },
            }
        ]

    return change


def _ancestor_on_pod(docs: Docs) -> None:
    runtime = named(docs, "ClusterTrainingRuntime", "torch-distributed-roce")
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    labels = node["metadata"].pop("labels")
    node["spec"]["template"]["metadata"]["labels"].update(labels)


def _jobset_failure(policy: dict[str, Any] | None) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = jobset()
        if policy is None:
            del doc["spec"]["failurePolicy"]
        else:
            doc["spec"]["failurePolicy"] = policy
        return [*platform(), doc]

    return build


def _volcano(plugins: dict[str, list[str]], **spec: Any) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = volcano_job(plugins)
        doc["spec"].update(spec)
        return [*platform(), doc]

    return build


def _volcano_tasks(master: str, worker: str, plugins: dict[str, list[str]]) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = volcano_job(plugins)
        doc["spec"]["tasks"][0]["name"], doc["spec"]["tasks"][1]["name"] = master, worker
        return [*platform(), doc]

    return build


def _volcano_non_root(ssh_args: list[str]) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = volcano_job({"svc": [], "ssh": ssh_args})
        for task in doc["spec"]["tasks"]:
            task["template"]["spec"]["securityContext"] = {"runAsUser": 1000}
        return [*platform(), doc]

    return build


# -- scheduling -----------------------------------------------------------------------------


def kueue_config(*frameworks: str) -> dict[str, Any]:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "integrations": {"frameworks": list(frameworks)},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
        "data": {"controller_manager_config.yaml": json.dumps(config)},
    }


def _add(*documents: dict[str, Any]) -> Callable[[Docs], None]:
    return lambda docs: docs.extend(copy.deepcopy(list(documents)))


def _queue_label_on_template(docs: Docs) -> None:
    doc = job(docs)
    del doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "training"


def cluster_queue(selector: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": "cpu", "resources": [{"name": "cpu", "nominalQuota": "1k"}]}],
            }
        ]
    }
    if selector is not None:
        spec["namespaceSelector"] = selector
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training"},
        "spec": spec,
    }


def namespace(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": labels},
    }


def priority_class(kind: str, name: str) -> dict[str, Any]:
    group = "scheduling.k8s.io/v1" if kind == "PriorityClass" else "kueue.x-k8s.io/v1beta2"
    return {"apiVersion": group, "kind": kind, "metadata": {"name": name}, "value": 1000}


def _priority(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(priority_class("PriorityClass", "training-high"))
        for spec in pods_of(job(docs)):
            spec["priorityClassName"] = name

    return change


def volcano_queue(gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {"weight": 1, "capability": {"nvidia.com/gpu": gpus}},
    }


def _volcano_queue(gpus: int) -> Callable[[], Docs]:
    def build() -> Docs:
        doc = volcano_job({"svc": []})
        doc["spec"]["queue"] = "research"
        return [*platform(), volcano_queue(gpus), doc]

    return build


def _volcano_trainjob(gpus: int, patched: bool = False) -> Callable[[], Docs]:
    """A 4-node TrainJob of 8 GPUs a node whose runtime (or, patched, the TrainJob) names
    Volcano queue research, of `gpus` GPUs."""

    def build() -> Docs:
        docs = copy.deepcopy(baseline_v2())
        runtime = named(docs, "ClusterTrainingRuntime", "torch-distributed-roce")
        runtime["spec"]["podGroupPolicy"] = {"volcano": {}}
        annotations = {"scheduling.volcano.sh/queue-name": "research"}
        job = named(docs, "TrainJob", "llama-v2")
        if patched:
            default = {"scheduling.volcano.sh/queue-name": "default"}
            runtime["spec"]["template"]["metadata"] = {"annotations": default}
            template = {"metadata": {"annotations": annotations}}
            job["spec"]["runtimePatches"] = [
                {"manager": "trainops", "trainingRuntimeSpec": {"template": template}}
            ]
        else:
            runtime["spec"]["template"]["metadata"] = {"annotations": annotations}
        return [*docs, volcano_queue(gpus)]

    return build


# -- cluster configuration ------------------------------------------------------------------


def device_plugin_config(replicas: int, rename: bool = False) -> dict[str, Any]:
    config = {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "renameByDefault": rename,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
            }
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "time-slicing", "namespace": "gpu-operator"},
        "data": {"any": json.dumps(config)},
    }


def _sharing(replicas: int, rename: bool = False) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(device_plugin_config(replicas, rename))
        policy = next(d for d in docs if d["kind"] == "ClusterPolicy")
        policy["spec"]["devicePlugin"] = {"config": {"name": "time-slicing", "default": "any"}}

    return change


def _driver(version: str, image: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        policy = next(d for d in docs if d["kind"] == "ClusterPolicy")
        policy["spec"]["driver"]["version"] = version
        for spec in pods_of(job(docs)):
            spec["containers"][0]["image"] = image

    return change


def sriov_policy(resource: str, link: str = "eth", rdma: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": "SriovNetworkNodePolicy",
        "metadata": {"name": f"policy-{resource}", "namespace": "sriov-network-operator"},
        "spec": {
            "resourceName": resource,
            "nodeSelector": {"feature.node.kubernetes.io/network-sriov.capable": "true"},
            "numVfs": 8,
            "nicSelector": {"pfNames": ["ens1f0"]},
            "linkType": link,
            "isRdma": rdma,
        },
    }


def sriov_network(kind: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "sriovnetwork.openshift.io/v1",
        "kind": kind,
        "metadata": {"name": "rail0", "namespace": "sriov-network-operator"},
        "spec": {"resourceName": resource, "networkNamespace": NAMESPACE, "ipam": "{}"},
    }


def _attach_sriov_network(network_namespace: str) -> Callable[[Docs], None]:
    """The PyTorchJob's pods also attach rail0, a network the SR-IOV operator writes."""

    def change(docs: Docs) -> None:
        network = sriov_network("SriovNetwork", "rail_rdma")
        network["spec"]["networkNamespace"] = network_namespace
        docs.append(network)
        for replica in job(docs)["spec"]["pytorchReplicaSpecs"].values():
            annotations = replica["template"]["metadata"]["annotations"]
            annotations["k8s.v1.cni.cncf.io/networks"] = "training-net,rail0"

    return change


def nic_cluster_policy(*names: str) -> dict[str, Any]:
    config = {"configList": [{"resourceName": n, "rdmaHcaMax": 63} for n in names]}
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {
            "rdmaSharedDevicePlugin": {
                "image": "k8s-rdma-shared-dev-plugin",
                "repository": "ghcr.io/mellanox",
                "version": "v1.5.3",
                "config": json.dumps(config),
            }
        },
    }


def _rdma_shared(request: str, *defined: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(nic_cluster_policy(*defined))
        for spec in pods_of(job(docs)):
            limits = spec["containers"][0]["resources"]["limits"]
            limits.pop("nvidia.com/roce_vf")
            limits[request] = 1

    return change


def _range(cidr: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        config = json.loads(docs[0]["spec"]["config"])
        config["plugins"][0]["ipam"]["range"] = cidr
        docs[0]["spec"]["config"] = json.dumps(config)

    return change


def _reclaim(policy: str | None) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        cls = storage_class("cephfs", "cephfs.csi.ceph.com")
        if policy is not None:
            cls["reclaimPolicy"] = policy
        docs.append(cls)

    return change


def _namespace_level(level: str) -> Callable[[Docs], None]:
    return lambda docs: docs.append(namespace(**{"pod-security.kubernetes.io/enforce": level}))


def _without_master_and_ipc_lock(docs: Docs) -> None:
    """The elastic job alone, non-root without added capabilities: baseline and restricted
    pods (restricted also wants runAsNonRoot, no escalation, drop ALL, seccomp)."""
    elastic = job(docs, elastic=True)
    docs[:] = [d for d in docs if d["kind"] not in ("PyTorchJob", "MPIJob")] + [elastic]
    for spec in pods_of(elastic):
        spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        spec["containers"][0]["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }


def _restricted(with_master: bool) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        _without_master_and_ipc_lock(docs)
        if with_master:
            elastic = docs[-1]
            del elastic["spec"]["elasticPolicy"]
            elastic["spec"]["pytorchReplicaSpecs"]["Master"] = copy.deepcopy(
                elastic["spec"]["pytorchReplicaSpecs"]["Worker"]
            )
            elastic["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 1
        docs.append(namespace(**{"pod-security.kubernetes.io/enforce": "restricted"}))

    return change


# -- Dynamic Resource Allocation -------------------------------------------------------------


def _claim(name: str, device_class: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 8}}
                ]
            }
        },
    }


def _dra_claims(pod_claims: list[dict], container_claim: str, extra: Docs = ()) -> Callable:
    """The baseline's PyTorchJob with its GPUs from DRA claims instead of device plugins."""

    def change(docs: Docs) -> None:
        job = next(d for d in docs if d["kind"] == "PyTorchJob")
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            pod = spec["template"]["spec"]
            pod["resourceClaims"] = copy.deepcopy(pod_claims)
            for container in pod["containers"]:
                container["resources"]["claims"] = [{"name": container_claim}]
        docs.extend(copy.deepcopy(list(extra)))

    return edit(change)


def _then(build: Callable[[], Docs], request: str) -> Docs:
    docs = build()
    _claim_request(request)(docs)
    return docs


def _template(name: str, count: int | None) -> dict[str, Any]:
    claim = _claim(name)
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    if count is None:
        del exactly["count"]
    else:
        exactly["count"] = count
    return {**claim, "kind": "ResourceClaimTemplate", "spec": {"spec": claim["spec"]}}


def _claim_request(request: str) -> Callable:
    def change(docs: Docs) -> None:
        job = next(d for d in docs if d["kind"] == "PyTorchJob")
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            for container in spec["template"]["spec"]["containers"]:
                container["resources"]["claims"][0]["request"] = request

    return change


_PER_POD = [{"name": "gpus", "resourceClaimTemplateName": "node-gpus"}]
_SHARED = [{"name": "gpus", "resourceClaimName": "node-gpus"}]

# rule id -> (failing render, passing render)
FIXTURES: dict[str, Pair] = {
    "dra-claim-reference": (_dra_claims(_PER_POD, "gpu"), _dra_claims(_PER_POD, "gpus")),
    "dra-shared-claim-replicas": (
        _dra_claims(_SHARED, "gpus", [_claim("node-gpus")]),
        _dra_claims(_PER_POD, "gpus"),
    ),
    "dra-request-count": (
        _dra_claims(_PER_POD, "gpus", [_template("node-gpus", 0)]),
        _dra_claims(_PER_POD, "gpus", [_template("node-gpus", 8)]),
    ),
    "dra-container-claim-request": (
        lambda: _then(_dra_claims(_PER_POD, "gpus", [_template("node-gpus", 8)]), "gpus"),
        lambda: _then(_dra_claims(_PER_POD, "gpus", [_template("node-gpus", 8)]), "gpu"),
    ),
    "accelerate-shape": (
        _indexed(_accelerate(num_processes="8")),
        _indexed(ACCELERATE_GOOD),
    ),
    "deepspeed-multinode-launcher": (
        _indexed(["deepspeed", "train.py"]),
        _indexed(DEEPSPEED_GOOD),
    ),
    "mpirun-as-root": (
        edit_v2(_mpirun_as(0, flag=False)),
        edit_v2(_mpirun_as(0, flag=True)),
    ),
    "mpirun-hostfile": (edit_v2(_no_hostfile), baseline_v2),
    "mpi-worker-command": (
        edit_v2(_worker_command(["python", "-m", "trainer"])),
        edit_v2(_worker_command(["/usr/sbin/sshd", "-De"])),
    ),
    "mpi-main-container": (edit(_sidecar_first(None)), edit(_sidecar_first("worker"))),
    "mpi-launcher-start-policy": (
        edit_v2(_launcher_start("AtStartup")),
        edit_v2(_launcher_start("WaitForWorkersReady")),
    ),
    "operator-env-overridden": (edit(_env("WORLD_SIZE", "32")), baseline),
    "env-duplicate": (edit(_duplicate), baseline),
    "nvidia-driver-capabilities": (
        edit(_env("NVIDIA_DRIVER_CAPABILITIES", "utility")),
        edit(_env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")),
    ),
    "pytorch-cuda-alloc-conf": (
        edit(_env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:true")),
        edit(_env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,max_split_size_mb:512")),
    ),
    "debug-env-left-on": (
        edit(_env("CUDA_LAUNCH_BLOCKING", "1")),
        edit(_env("CUDA_LAUNCH_BLOCKING", "0")),
    ),
    "gloo-socket-ifname": (edit(_gloo("=net1")), edit(_gloo("net1"))),
    "nccl-fast-path-disabled": (
        edit(_env("NCCL_P2P_DISABLE", "1")),
        edit(_env("NCCL_P2P_DISABLE", "0")),
    ),
    "pytorchjob-rdzv-conf-empty": (
        edit(_elastic(rdzvConf=[])),
        edit(_elastic(rdzvConf=[{"key": "join_timeout", "value": "900"}])),
    ),
    "elastic-metrics-under-gitops": (
        edit(_elastic(metrics=[{"type": "Resource", "resource": {"name": "cpu"}}])),
        baseline,
    ),
    "gang-scheduler-name": (
        edit(_scheduler_name("default-scheduler")),
        edit(_scheduler_name("volcano")),
    ),
    "trainjob-runtime-patch-targets": (
        edit_v2(_runtime_patch("trainer", "node")),
        edit_v2(_runtime_patch("node", "node")),
    ),
    "runtime-ancestor-label": (edit_v2(_ancestor_on_pod), baseline_v2),
    "job-restart-budget": (_jobset_failure(None), _jobset_failure({"maxRestarts": 10})),
    "volcano-job-policies": (
        _volcano(
            {"svc": []}, policies=[{"event": "PodFailed", "exitCode": 137, "action": "RestartJob"}]
        ),
        _volcano(
            {"svc": []}, policies=[{"event": "PodFailed", "action": "RestartJob"}], maxRetry=20
        ),
    ),
    "volcano-mpi-plugin": (
        _volcano_tasks("mpimaster", "mpiworker", {"mpi": []}),
        _volcano_tasks(
            "mpimaster", "mpiworker", {"mpi": ["--master=mpimaster", "--worker=mpiworker"]}
        ),
    ),
    "kueue-framework-disabled": (
        edit(_add(kueue_config("batch/job", "jobset.x-k8s.io/jobset"))),
        edit(_add(kueue_config("batch/job", "kubeflow.org/pytorchjob"))),
    ),
    "queue-label-placement": (edit(_queue_label_on_template), baseline),
    "kueue-namespace-selector": (
        edit(_add(cluster_queue({"matchLabels": {"team": "research"}}), namespace(team="vision"))),
        edit(
            _add(cluster_queue({"matchLabels": {"team": "research"}}), namespace(team="research"))
        ),
    ),
    "priority-class-exists": (edit(_priority("training-hihg")), edit(_priority("training-high"))),
    "volcano-queue-capability": (_volcano_queue(16), _volcano_queue(32)),
    "gpu-sharing-training": (edit(_sharing(4)), edit(_sharing(4, rename=True))),
    "cuda-driver-compatible": (
        edit(_driver("570.133.20", "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime")),
        edit(_driver("580.95.05", "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime")),
    ),
    "sriov-network-policy": (
        _docs(
            lambda: sriov_policy("rail_rdma", link="ib"),
            lambda: sriov_network("SriovNetwork", "rail_rdma"),
        ),
        _docs(
            lambda: sriov_policy("rail_rdma", link="ib"),
            lambda: sriov_network("SriovIBNetwork", "rail_rdma"),
        ),
    ),
    "rdma-shared-resource-defined": (
        edit(_rdma_shared("rdma/shared_b", "shared_a")),
        edit(_rdma_shared("rdma/shared_a", "shared_a")),
    ),
    "nad-ipam-capacity": (edit(_range("10.40.0.0/29")), edit(_range("10.40.0.0/24"))),
    "checkpoint-claim-reclaim": (edit(_reclaim(None)), edit(_reclaim("Retain"))),
    "pod-security-level": (
        edit(_namespace_level("baseline")),
        edit(_namespace_level("privileged")),
    ),
}

# More cases a rule must get right, beyond its main pair.
MORE: dict[str, list[Pair]] = {
    "accelerate-shape": [
        (_indexed(_accelerate(num_machines=None)), _indexed(ACCELERATE_GOOD)),
        (_indexed(_accelerate(machine_rank="0")), _indexed(ACCELERATE_GOOD)),
        (_indexed(_accelerate(main_process_ip="localhost")), _indexed(ACCELERATE_GOOD)),
        (_indexed(_accelerate(num_machines="2")), _indexed(ACCELERATE_GOOD)),
        (
            _indexed(_accelerate(mixed_precision="bfloat16"), pods=1),
            _indexed(ACCELERATE_GOOD, pods=1),
        ),
    ],
    "deepspeed-multinode-launcher": [
        (
            _indexed(["deepspeed", "--hostfile=/etc/ds/hostfile", "train.py"]),
            _indexed(DEEPSPEED_GOOD),
        ),
        (
            _indexed(["deepspeed", "--num_nodes=4", "train.py"], pods=1),
            _indexed(["deepspeed", "train.py"], pods=1),
        ),
        (
            _indexed([*ACCELERATE_GOOD[:2], "--use_deepspeed", *ACCELERATE_GOOD[2:]]),
            _indexed(
                [
                    *ACCELERATE_GOOD[:2],
                    "--use_deepspeed",
                    "--deepspeed_multinode_launcher=standard",
                    *ACCELERATE_GOOD[2:],
                ]
            ),
        ),
    ],
    "mpirun-as-root": [
        (edit_v2(_root_image_launcher), edit_v2(_mpirun_as(1000, flag=False))),
    ],
    "operator-env-overridden": [(edit(_hydra_bootstrap), baseline)],
    "pytorch-cuda-alloc-conf": [
        (edit(_env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments=True")), baseline),
        (edit(_env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size:512")), baseline),
        (edit(_env("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:1.5")), baseline),
        (
            edit(_env("PYTORCH_CUDA_ALLOC_CONF", "backend:cudamallocasync")),
            edit(_env("PYTORCH_CUDA_ALLOC_CONF", "roundup_power2_divisions:[256:1,512:2,>:4]")),
        ),
    ],
    "gloo-socket-ifname": [(edit(_gloo("ib0")), edit(_gloo("eth0,net1")))],
    "nccl-fast-path-disabled": [(edit(_env("NCCL_NET", "Socket")), edit(_env("NCCL_NET", "IB")))],
    "trainjob-runtime-patch-targets": [
        (edit_v2(_runtime_patch("node", "pytorch")), edit_v2(_runtime_patch("node", "node"))),
        (
            edit_v2(_runtime_patch("node", "node", env=True)),
            edit_v2(_runtime_patch("node", "node")),
        ),
    ],
    "job-restart-budget": [
        (
            _jobset_failure({"maxRestarts": 0}),
            _jobset_failure(
                {"maxRestarts": 0, "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]}
            ),
        ),
        (
            _volcano({"svc": []}, policies=[{"event": "PodEvicted", "action": "RestartJob"}]),
            _volcano(
                {"svc": []}, policies=[{"event": "PodEvicted", "action": "RestartJob"}], maxRetry=50
            ),
        ),
    ],
    "volcano-queue-capability": [
        (_volcano_trainjob(16), _volcano_trainjob(32)),
        (_volcano_trainjob(16, patched=True), _volcano_trainjob(32, patched=True)),
    ],
    "volcano-job-policies": [
        (
            _volcano({"svc": []}, policies=[{"exitCode": 0, "action": "RestartJob"}]),
            _volcano({"svc": []}),
        ),
        (
            _volcano(
                {"svc": []},
                policies=[
                    {"event": "PodEvicted", "action": "RestartJob"},
                    {"event": "PodEvicted", "action": "AbortJob"},
                ],
            ),
            _volcano(
                {"svc": []},
                policies=[
                    {"event": "PodEvicted", "action": "RestartJob"},
                    {"event": "PodFailed", "action": "AbortJob"},
                ],
            ),
        ),
    ],
    "volcano-mpi-plugin": [
        (_volcano_non_root([]), _volcano_non_root(["--ssh-key-file-path=/home/trainer/.ssh"])),
        # Go's FlagSet takes a flag's value from the next argument as well.
        (
            _volcano_tasks("mpimaster", "mpiworker", {"mpi": ["--master", "mpimaster"]}),
            _volcano_tasks(
                "mpimaster",
                "mpiworker",
                {"mpi": ["--master", "mpimaster", "--worker", "mpiworker"]},
            ),
        ),
    ],
    "kueue-namespace-selector": [
        (edit(_add(cluster_queue(None))), edit(_add(cluster_queue({})))),
    ],
    "sriov-network-policy": [
        (
            _docs(
                lambda: sriov_policy("rail_rdma"),
                lambda: sriov_network("SriovNetwork", "rail_rmda"),
            ),
            _docs(
                lambda: sriov_policy("rail_rdma"),
                lambda: sriov_network("SriovNetwork", "rail_rdma"),
            ),
        ),
    ],
    "multus-network-missing": [
        (
            edit(_attach_sriov_network("sriov-network-operator")),
            edit(_attach_sriov_network(NAMESPACE)),
        ),
    ],
    "pod-security-level": [
        (edit(_restricted(with_master=True)), edit(_restricted(with_master=False))),
    ],
    "dra-claim-reference": [
        (
            _dra_claims([{"name": "gpus"}], "gpus"),
            _dra_claims([{"name": "gpus", "resourceClaimName": "one"}], "gpus"),
        ),
        (
            _dra_claims(
                [{"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}],
                "gpus",
            ),
            _dra_claims(_PER_POD, "gpus"),
        ),
    ],
    "dra-shared-claim-replicas": [
        # a claim not in the render is still shared by every pod that names it
        (_dra_claims(_SHARED, "gpus"), _dra_claims(_PER_POD, "gpus")),
    ],
}


def _merge_areas() -> None:
    twice = sorted(areas.FIXTURES.keys() & FIXTURES.keys())
    if twice:
        raise AssertionError(f"tests/policies/areas declares again: {', '.join(twice)}")
    FIXTURES.update(areas.FIXTURES)
    for rule, pairs in areas.MORE.items():
        MORE[rule] = [*MORE.get(rule, []), *pairs]


_merge_areas()
