"""Fixtures for every policy rule: a correct render, and per rule a variant that breaks it.

`baseline()` is a RoCE cluster's render done right: network, checkpoint
volume, queue, ClusterPolicy, a PyTorchJob, an elastic job and an MPIJob.
Each entry of FIXTURES turns it into a failing render for one rule (and, where
the baseline cannot show it, into a passing one that exercises the rule).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from trainops.profile import tenancy

Docs = list[dict[str, Any]]

NAMESPACE = "training"
NCCL = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_SOCKET_IFNAME": "=net1",
    "NCCL_NET_GDR_LEVEL": "PHB",
}


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def container(name: str = "pytorch") -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.example.com/trainer:1.2.0",
        "command": ["/bin/sh", "-c", 'exec trainer-launch --module trainer "$@"', "trainer"],
        "args": ["--model", "gpt"],
        "env": _env(
            {
                **NCCL,
                "TRAINER_CHECKPOINT_DIR": "/checkpoints/llama",
                "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "240",
            }
        ),
        "resources": {
            "requests": {"cpu": "96", "memory": "1Ti"},
            "limits": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": 8, "nvidia.com/roce_vf": 1},
        },
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "volumeMounts": [
            # The run's own directory of the shared claim, as the templates mount it.
            {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": "llama"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }


def pod(container_name: str = "pytorch") -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {"app.kubernetes.io/part-of": "trainops"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": "training-net"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 300,
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "affinity": {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "topologyKey": "topology.kubernetes.io/rack",
                                "labelSelector": {
                                    "matchExpressions": [
                                        {
                                            "key": "training.kubeflow.org/job-name",
                                            "operator": "Exists",
                                        }
                                    ]
                                },
                                "matchLabelKeys": ["training.kubeflow.org/job-name"],
                            },
                        }
                    ]
                }
            },
            "containers": [container(container_name)],
            "volumes": [
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}},
            ],
        },
    }


def meta(name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": labels or {}}


def pytorchjob() -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta("llama", **{"kueue.x-k8s.io/queue-name": "training"}),
        "spec": {
            "nprocPerNode": "8",
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "ExitCode", "template": pod()},
                "Worker": {"replicas": 3, "restartPolicy": "ExitCode", "template": pod()},
            },
        },
    }


def elastic_job() -> dict[str, Any]:
    job = pytorchjob()
    job["metadata"]["name"] = "llama-elastic"
    job["spec"]["elasticPolicy"] = {
        "rdzvBackend": "c10d",
        "rdzvId": "llama-elastic",
        "minReplicas": 2,
        "maxReplicas": 4,
        "maxRestarts": 10,
    }
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    return job


def mpijob() -> dict[str, Any]:
    launcher = container("launcher")
    launcher["resources"] = {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    launcher.pop("securityContext")
    launcher.pop("volumeMounts")
    forward = [w for name in [*NCCL, "TRAINER_CHECKPOINT_DIR"] for w in ("-x", name)]
    launcher["command"] = [
        "mpirun",
        "--hostfile",
        "/etc/mpi/hostfile",
        "--bind-to",
        "none",
        *forward,
        "python",
        "-m",
        "trainer",
    ]
    launcher["args"] = ["--model", "cnn"]
    worker_pod = pod("worker")
    worker_pod["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", "sleep infinity"]
    worker_pod["spec"]["containers"][0].pop("args")
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": meta("cnn-mpi"),
        "spec": {
            "slotsPerWorker": 8,
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 6},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": 2, "template": worker_pod},
            },
        },
    }


def nad(name: str = "training-net", cidr: str = "10.40.0.0/16", ipam: str = "whereabouts") -> dict:
    config = {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "sriov",
                "ipam": {"type": ipam, "range" if ipam == "whereabouts" else "subnet": cidr},
            },
            {"type": "rdma"},
        ],
    }
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "nvidia.com/roce_vf"},
        },
        "spec": {"config": json.dumps(config)},
    }


def platform() -> Docs:
    return [
        nad(),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": NAMESPACE},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "cephfs",
                "resources": {"requests": {"storage": "10Ti"}},
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "training", "namespace": NAMESPACE},
            "spec": {"clusterQueue": "training"},
        },
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "gpu-cluster-policy"},
            "spec": {"driver": {"kernelModuleType": "open", "rdma": {"enabled": False}}},
        },
    ]


def baseline() -> Docs:
    return [*platform(), pytorchjob(), elastic_job(), mpijob()]


# -- helpers to break one thing --------------------------------------------------------------


def job(docs: Docs, kind: str = "PyTorchJob", elastic: bool = False) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and ("elasticPolicy" in doc.get("spec", {})) == elastic:
            return doc
    raise KeyError(kind)


def pods_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    field = next(k for k in doc["spec"] if k.endswith("ReplicaSpecs"))
    return [r["template"]["spec"] for r in doc["spec"][field].values()]


def first(doc: dict[str, Any]) -> dict[str, Any]:
    """The first container of every pod template (the training container)."""
    return pods_of(doc)[0]["containers"][0]


def set_env(doc: dict[str, Any], name: str, value: str | None) -> None:
    for spec in pods_of(doc):
        for c in spec["containers"]:
            c["env"] = [e for e in c.get("env", []) if e["name"] != name]
            if value is not None:
                c["env"].append({"name": name, "value": value})


def edit(function: Callable[[Docs], None]) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = copy.deepcopy(baseline())
        function(docs)
        return docs

    return build


def only(*documents: Callable[[], dict]) -> Callable[[], Docs]:
    return lambda: [d() for d in documents]


def _no_shm(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "dshm"]
        spec["containers"][0]["volumeMounts"] = [
            m for m in spec["containers"][0]["volumeMounts"] if m["name"] != "dshm"
        ]


def _disk_shm(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        for v in spec["volumes"]:
            if v["name"] == "dshm":
                v["emptyDir"] = {}


def _host_ipc_instead(docs: Docs) -> None:
    _no_shm(docs)
    for spec in pods_of(job(docs)):
        spec["hostIPC"] = True


def _host_ipc_daemon(docs: Docs) -> None:
    daemon = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "hostIPC": True,
                    "containers": [
                        {
                            "name": "a",
                            "image": "agent:1.0",
                            "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}},
                        }
                    ],
                },
            },
        },
    }
    docs.append(daemon)


def _remove_nad(docs: Docs) -> None:
    for doc in docs:
        if doc["kind"] == "NetworkAttachmentDefinition":
            doc["metadata"]["name"] = "other-net"
            doc["spec"]["config"] = doc["spec"]["config"].replace("training-net", "other-net")


def _broken_nad(docs: Docs) -> None:
    docs[0]["spec"]["config"] = '{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1"'


def _nad_no_ipam(docs: Docs) -> None:
    docs[0]["spec"]["config"] = json.dumps(
        {"cniVersion": "1.0.0", "name": "training-net", "type": "macvlan", "master": "eth1"}
    )


def _second_nad(cidr: str, ipam: str = "whereabouts") -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(nad("storage-net", cidr, ipam))

    return change


def _host_local(docs: Docs) -> None:
    docs[0] = nad(ipam="host-local")


def _ifname(value: str) -> Callable[[Docs], None]:
    return lambda docs: set_env(job(docs), "NCCL_SOCKET_IFNAME", value)


def _env_var(name: str, value: str | None, kind: str = "PyTorchJob") -> Callable[[Docs], None]:
    return lambda docs: set_env(job(docs, kind), name, value)


def _every_job_env(name: str, value: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for doc in docs:
            if doc["kind"] in ("PyTorchJob", "MPIJob"):
                set_env(doc, name, value)

    return change


def _no_rdma_resource(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        del spec["containers"][0]["resources"]["limits"]["nvidia.com/roce_vf"]


def _no_ipc_lock(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        del spec["containers"][0]["securityContext"]


def _peermem_off(docs: Docs) -> None:
    docs[3]["spec"]["driver"] = {"kernelModuleType": "proprietary", "rdma": {"enabled": False}}


def _host_mofed_alone(docs: Docs) -> None:
    docs[3]["spec"]["driver"]["rdma"] = {"useHostMofed": True}


def _no_checkpoints(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "checkpoints"]
        c = spec["containers"][0]
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "checkpoints"]
        c["env"] = [e for e in c["env"] if e["name"] != "TRAINER_CHECKPOINT_DIR"]


def _checkpoints_on_empty_dir(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        for v in spec["volumes"]:
            if v["name"] == "checkpoints":
                v.pop("persistentVolumeClaim")
                v["emptyDir"] = {}


def _rwo(docs: Docs) -> None:
    docs[1]["spec"]["accessModes"] = ["ReadWriteOnce"]


def _dir_outside_mounts(docs: Docs) -> None:
    set_env(job(docs), "TRAINER_CHECKPOINT_DIR", "/workspace/checkpoints")


def _whole_checkpoint_claim(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        for mount in spec["containers"][0]["volumeMounts"]:
            mount.pop("subPath", None)


def _grace(seconds: int | None) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            if seconds is None:
                spec.pop("terminationGracePeriodSeconds")
            else:
                spec["terminationGracePeriodSeconds"] = seconds

    return change


def _torchrun_args(*extra: str, elastic: bool = False) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs, elastic=elastic)):
            spec["containers"][0]["command"] = ["torchrun", *extra, "-m", "trainer"]

    return change


def _nproc(value: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        job(docs)["spec"]["nprocPerNode"] = value

    return change


def _no_rdzv_id(docs: Docs) -> None:
    del job(docs, elastic=True)["spec"]["elasticPolicy"]["rdzvId"]


def _packed(docs: Docs) -> None:
    first(job(docs, "MPIJob"))["command"].insert(1, "-x NCCL_DEBUG=INFO")


def _mca_value(docs: Docs) -> None:
    # An MCA parameter's value is one argument even when it reads like flags.
    command = first(job(docs, "MPIJob"))["command"]
    command[1:1] = ["--mca", "plm_rsh_args", "-p 2222 -o ConnectionAttempts=10"]


def _shell_without_exec(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["containers"][0]["command"][2] = 'trainer-launch --module trainer "$@"'


def _plain_torchrun(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["containers"][0]["command"][2] = 'exec torchrun --module trainer "$@"'


def _plain_torchrun_on_failure(docs: Docs) -> None:
    _plain_torchrun(docs)
    for replica in job(docs)["spec"]["pytorchReplicaSpecs"].values():
        replica["restartPolicy"] = "OnFailure"


def _name(value: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        job(docs)["metadata"]["name"] = value

    return change


def _elastic_bounds(docs: Docs) -> None:
    job(docs, elastic=True)["spec"]["elasticPolicy"]["minReplicas"] = 5


def _launcher_gpu(docs: Docs) -> None:
    launcher = job(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Launcher"]
    launcher["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1


def _slots(docs: Docs) -> None:
    job(docs, "MPIJob")["spec"]["slotsPerWorker"] = 4


def _np(docs: Docs) -> None:
    first(job(docs, "MPIJob"))["args"] = ["-np", "8", "--model", "cnn"]


def _no_gpu_selector(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        del spec["nodeSelector"]


def _spread_other_job(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        term = spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        term["podAffinityTerm"].pop("matchLabelKeys")
        term["podAffinityTerm"]["labelSelector"] = {
            "matchLabels": {"training.kubeflow.org/job-name": "train"}
        }


def _no_placement(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        del spec["affinity"]


def _min_available(value: int) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        job(docs)["spec"]["runPolicy"]["schedulingPolicy"] = {
            "queue": "training",
            "minAvailable": value,
        }

    return change


def _missing_queue(docs: Docs) -> None:
    job(docs)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "gpu-queue"


def _never_restart(docs: Docs) -> None:
    job(docs)["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"


def _image(value: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["containers"][0]["image"] = value

    return change


def _host_field(field: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec[field] = True

    return change


def _privileged(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["containers"][0]["securityContext"] = {"privileged": True}


def _host_path(path: str, mount: str = "/data") -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["volumes"].append({"name": "host", "hostPath": {"path": path}})
            spec["containers"][0]["volumeMounts"].append({"name": "host", "mountPath": mount})

    return change


def _node_local_checkpoints(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        for volume in spec["volumes"]:
            if volume["name"] == "checkpoints":
                volume.pop("persistentVolumeClaim")
                volume["hostPath"] = {"path": "/mnt/nvme/checkpoints", "type": "DirectoryOrCreate"}


def _add_capability(name: str, kind: str = "PyTorchJob") -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs, kind)):
            context = spec["containers"][0].setdefault("securityContext", {})
            context.setdefault("capabilities", {}).setdefault("add", []).append(name)

    return change


def _host_port(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["containers"][0]["ports"] = [{"containerPort": 9400, "hostPort": 9400}]


def _service_account(name: str | None, automount: bool | None = None) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            if name is not None:
                spec["serviceAccountName"] = name
            if automount is not None:
                spec["automountServiceAccountToken"] = automount

    return change


def _privileged_image(image: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        _privileged(docs)
        _image(image)(docs)

    return change


def _literal_token(docs: Docs) -> None:
    set_env(job(docs), "HF_TOKEN", "hf_" + "a" * 34)


def _no_resources(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}


def appproject(wildcard: bool) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {"name": "p", "namespace": "argocd"},
        "spec": {
            "sourceRepos": ["*" if wildcard else "https://github.com/example-org/trainops.git"],
            "destinations": [{"name": "prod", "namespace": "training"}],
        },
    }


def _ttl(docs: Docs) -> None:
    job(docs)["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 3600


def big_crd(server_side: bool) -> dict[str, Any]:
    annotations = {"argocd.argoproj.io/sync-options": "ServerSideApply=true"} if server_side else {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "annotations": annotations},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "description": "x" * 300_000}},
                }
            ],
        },
    }


def widget(skip_dry_run: bool) -> dict[str, Any]:
    annotations = (
        {"argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"}
        if skip_dry_run
        else {}
    )
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": NAMESPACE, "annotations": annotations},
    }


def _empty_class(docs: Docs) -> None:
    docs[1]["spec"]["storageClassName"] = ""


def _service(selector: dict[str, str]) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "metrics", "namespace": NAMESPACE},
                "spec": {"selector": selector, "ports": [{"name": "metrics", "port": 9400}]},
            }
        )

    return change


def _without_subdomain(doc: dict[str, Any]) -> dict[str, Any]:
    del doc["spec"]["template"]["spec"]["subdomain"]
    return doc


def _generate_name(doc: dict[str, Any], hook: bool) -> dict[str, Any]:
    doc["metadata"]["generateName"] = doc["metadata"].pop("name") + "-"
    if hook:
        doc["metadata"]["annotations"] = {"argocd.argoproj.io/hook": "Sync"}
    return doc


def _bad_exemption(docs: Docs) -> None:
    job(docs)["metadata"]["annotations"] = {"trainops.dev/exempt-no-such-rule": "because"}


def _etcd_without_id(docs: Docs) -> None:
    elastic = job(docs, elastic=True)["spec"]["elasticPolicy"]
    elastic.update(rdzvBackend="etcd", rdzvHost="etcd.training", rdzvPort=2379)
    del elastic["rdzvId"]


def _one_gpu(docs: Docs) -> None:
    _no_shm(docs)
    job(docs)["spec"]["nprocPerNode"] = "1"
    for spec in pods_of(job(docs)):
        spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1


def indexed_job(pods: int = 4, **changes: Any) -> dict[str, Any]:
    """An Indexed Job of `pods` pods running torchrun, rank 0 reached through its subdomain."""
    template = pod("trainer")
    spec = template["spec"]
    spec.update(subdomain="ddp", restartPolicy="Never")
    spec["containers"][0]["command"] = ["torchrun"]
    spec["containers"][0]["args"] = [
        f"--nnodes={pods}",
        "--nproc-per-node=8",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        "--master-addr=ddp-0.ddp",
        "--master-port=29500",
        "-m",
        "trainer",
    ]
    job_spec = {
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": 0,
        "template": template,
        **changes,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ddp", "namespace": NAMESPACE},
        "spec": job_spec,
    }


def headless(name: str = "ddp") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"clusterIP": "None", "selector": {"job-name": name}},
    }


def jobset(host: str = "llm-workers-0-0.llm", **network: Any) -> dict[str, Any]:
    template = pod("trainer")
    template["spec"]["containers"][0]["command"] = ["torchrun"]
    template["spec"]["containers"][0]["args"] = [
        "--nnodes=4",
        "--nproc-per-node=8",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        f"--master-addr={host}",
        "-m",
        "trainer",
    ]
    spec: dict[str, Any] = {
        "failurePolicy": {"maxRestarts": 10},
        "replicatedJobs": [
            {
                "name": "workers",
                "replicas": 1,
                "template": {"spec": {"parallelism": 4, "completions": 4, "template": template}},
            }
        ],
    }
    if network:
        spec["network"] = network
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": NAMESPACE},
        "spec": spec,
    }


def _jobset_container(docs: Docs) -> dict[str, Any]:
    js = next(d for d in docs if d["kind"] == "JobSet")
    return js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]


def with_jobset(change: Callable[[dict[str, Any]], None] | None = None) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = [*platform(), jobset()]
        if change is not None:
            change(_jobset_container(docs))
        return docs

    return build


def _arg(index: int, value: str) -> Callable[[dict[str, Any]], None]:
    def change(container: dict[str, Any]) -> None:
        container["args"][index] = value

    return change


def _env_entries(*entries: tuple[str, str]) -> Callable[[dict[str, Any]], None]:
    def change(container: dict[str, Any]) -> None:
        container["env"] = [*container["env"], *({"name": n, "value": v} for n, v in entries)]

    return change


def deployment(replicas: int | None = 2, gpus: int = 0, **strategy: Any) -> dict[str, Any]:
    resources = {"cpu": "1", "memory": "2Gi", **({"nvidia.com/gpu": gpus} if gpus else {})}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "serve"}},
        "template": {
            "metadata": {"labels": {"app": "serve"}},
            "spec": {
                "containers": [
                    {
                        "name": "serve",
                        "image": "registry.example.com/serve:2.1.0",
                        "resources": {"requests": resources, "limits": resources},
                    }
                ]
            },
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    if strategy:
        spec["strategy"] = strategy
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": NAMESPACE},
        "spec": spec,
    }


def hpa() -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "serve", "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve"},
            "minReplicas": 1,
            "maxReplicas": 4,
        },
    }


def storage_class(name: str, provisioner: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
    }


def _checkpoint_class(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(storage_class("gp3", "ebs.csi.aws.com"))
        docs.append(storage_class("cephfs", "cephfs.csi.ceph.com"))
        docs[1]["spec"]["storageClassName"] = name

    return change


def _read_only_checkpoints(docs: Docs) -> None:
    for spec in pods_of(job(docs)):
        spec["containers"][0]["volumeMounts"][0]["readOnly"] = True


def _hf_home(path: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = True
            spec["containers"][0]["volumeMounts"].append({"name": "tmp", "mountPath": "/tmp"})
            spec["volumes"].append({"name": "tmp", "emptyDir": {}})
        set_env(job(docs), "HF_HOME", path)

    return change


def cluster_queue(covered: tuple[str, ...], gpus: str = "64") -> dict[str, Any]:
    quota = {"cpu": "1024", "memory": "16Ti", "nvidia.com/gpu": gpus, "nvidia.com/roce_vf": "16"}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": list(covered),
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [{"name": r, "nominalQuota": quota[r]} for r in covered],
                        }
                    ],
                }
            ]
        },
    }


ALL_COVERED = ("cpu", "memory", "nvidia.com/gpu", "nvidia.com/roce_vf")


def _with(*documents: dict[str, Any]) -> Callable[[Docs], None]:
    return lambda docs: docs.extend(copy.deepcopy(list(documents)))


def appset(go: bool, path: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "generators": [
            {
                "git": {
                    "repoURL": "https://github.com/example-org/trainops.git",
                    "revision": "main",
                    "directories": [{"path": "overlays/*/runs/*"}],
                }
            }
        ],
        "template": {
            "metadata": {"name": "{{.path.basename}}" if go else "{{path.basename}}"},
            "spec": {
                "project": "runs",
                "source": {"repoURL": "https://github.com/example-org/trainops.git", "path": path},
                "destination": {"name": "prod", "namespace": NAMESPACE},
            },
        },
    }
    if go:
        spec["goTemplate"] = True
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "runs", "namespace": "argocd"},
        "spec": spec,
    }


def _second_network(request: int) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(nad("storage-net", "10.50.0.0/16"))
        for spec in pods_of(job(docs)):
            spec["containers"][0]["resources"]["limits"]["nvidia.com/roce_vf"] = request
        for replica in job(docs)["spec"]["pytorchReplicaSpecs"].values():
            annotations = replica["template"]["metadata"]["annotations"]
            annotations["k8s.v1.cni.cncf.io/networks"] = "training-net,storage-net"

    return change


def _nad_without_resource(docs: Docs) -> None:
    del docs[0]["metadata"]["annotations"]


def volcano_job(plugins: dict[str, list[str]]) -> dict[str, Any]:
    def task(name: str, replicas: int) -> dict[str, Any]:
        template = pod("trainer")
        del template["metadata"]["annotations"]
        container = template["spec"]["containers"][0]
        container["command"] = ["/bin/sh", "-c", "exec mpirun --hostfile /etc/volcano/worker.host"]
        container["resources"]["limits"].pop("nvidia.com/roce_vf")
        container.pop("securityContext")
        return {"name": name, "replicas": replicas, "template": template}

    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vc", "namespace": NAMESPACE},
        "spec": {
            "minAvailable": 3,
            "schedulerName": "volcano",
            "plugins": plugins,
            "tasks": [task("launcher", 1), task("worker", 2)],
        },
    }


# rule id -> (failing render, passing render)
FIXTURES: dict[str, tuple[Callable[[], Docs], Callable[[], Docs]]] = {
    "dev-shm-missing": (edit(_no_shm), edit(_one_gpu)),
    "dev-shm-not-memory": (edit(_disk_shm), baseline),
    "host-ipc": (edit(_host_ipc_daemon), baseline),
    "nccl-not-a-variable": (edit(_env_var("NCCL_TIMEOUT", "1800")), baseline),
    "nccl-unknown-variable": (edit(_env_var("NCCL_SOCKET_IFNAMES", "net1")), baseline),
    "nccl-deprecated-variable": (edit(_env_var("NCCL_MIN_NCHANNELS", "4")), baseline),
    "nccl-removed-variable": (edit(_env_var("NCCL_TREE_THRESHOLD", "0")), baseline),
    "nccl-invalid-value": (
        edit(_env_var("NCCL_P2P_LEVEL", "nvl")),
        edit(_env_var("NCCL_P2P_LEVEL", "5")),
    ),
    "nccl-ib-hca-prefix": (edit(_env_var("NCCL_IB_HCA", "mlx5_1")), baseline),
    "nccl-socket-ifname": (edit(_ifname("net2")), baseline),
    "nccl-ib-disabled-with-rdma": (edit(_env_var("NCCL_IB_DISABLE", "1")), baseline),
    "nccl-debug-info": (baseline, edit(_every_job_env("NCCL_DEBUG", "WARN"))),
    "nccl-transport-evidence": (
        edit(
            lambda d: (_env_var("NCCL_DEBUG", None)(d), set_env(job(d), "NCCL_DEBUG_SUBSYS", None))
        ),
        baseline,
    ),
    "multus-network-missing": (edit(_remove_nad), baseline),
    "nad-config-invalid": (edit(_broken_nad), baseline),
    "nad-host-local-ipam": (edit(_host_local), baseline),
    "nad-ipam-overlap": (edit(_second_nad("10.40.128.0/17")), edit(_second_nad("10.50.0.0/16"))),
    "rdma-resource-missing": (edit(_no_rdma_resource), baseline),
    "rdma-ipc-lock": (edit(_no_ipc_lock), baseline),
    "gpudirect-clusterpolicy": (edit(_peermem_off), baseline),
    "clusterpolicy-host-mofed": (edit(_host_mofed_alone), baseline),
    "checkpoint-missing": (edit(_no_checkpoints), baseline),
    "checkpoint-volume-ephemeral": (edit(_checkpoints_on_empty_dir), baseline),
    "pvc-shared-rwo": (edit(_rwo), baseline),
    "pvc-empty-storage-class": (edit(_empty_class), baseline),
    "service-selects-pods": (
        edit(_service({"job-name": "llama"})),
        edit(_service({"training.kubeflow.org/job-name": "llama"})),
    ),
    "checkpoint-dir-not-mounted": (edit(_dir_outside_mounts), baseline),
    "checkpoint-mount-per-job": (edit(_whole_checkpoint_claim), baseline),
    "grace-period-short": (edit(_grace(None)), baseline),
    "torchrun-nnodes": (edit(_torchrun_args("--nnodes=2")), edit(_torchrun_args("--nnodes=4"))),
    "torchrun-nproc-per-node": (edit(_nproc("4")), baseline),
    "rendezvous-endpoint": (
        edit(_torchrun_args("--rdzv-endpoint=$(MASTER_ADDR):29500", elastic=True)),
        edit(_torchrun_args("--rdzv-endpoint=llama-master-0:29500")),
    ),
    "elastic-rdzv-id": (edit(_etcd_without_id), edit(_no_rdzv_id)),
    "argument-packs-flag-and-value": (edit(_packed), baseline),
    "shell-without-exec": (edit(_shell_without_exec), baseline),
    "exitcode-policy-launcher": (edit(_plain_torchrun), edit(_plain_torchrun_on_failure)),
    "job-name-length": (edit(_name("l" * 56)), edit(_name("l" * 50))),
    "elastic-policy": (edit(_elastic_bounds), baseline),
    "mpi-slots": (edit(_slots), baseline),
    "gpu-node-placement": (edit(_no_gpu_selector), baseline),
    "placement-selects-own-pods": (edit(_spread_other_job), baseline),
    "placement-missing": (edit(_no_placement), baseline),
    "gang-min-available": (edit(_min_available(3)), edit(_min_available(4))),
    "queue-exists": (edit(_missing_queue), baseline),
    "restart-budget": (edit(_never_restart), baseline),
    "image-pinned": (
        edit(_image("registry.example.com/trainer:latest")),
        edit(_image("registry.example.com/trainer@sha256:" + "0" * 64)),
    ),
    "host-network": (edit(_host_field("hostNetwork")), baseline),
    "host-pid": (edit(_host_field("hostPID")), baseline),
    "privileged-container": (edit(_privileged), baseline),
    "host-path": (edit(_host_path("/")), edit(_node_local_checkpoints)),
    "capabilities": (edit(_add_capability("SYS_ADMIN")), baseline),
    "host-ports": (edit(_host_port), baseline),
    "training-service-account": (
        edit(_service_account("training-operator")),
        edit(_service_account("default", automount=False)),
    ),
    "privileged-image-digest": (
        edit(_privileged_image("registry.example.com/trainer:1.2.0")),
        edit(_privileged_image("registry.example.com/trainer@sha256:" + "0" * 64)),
    ),
    "secret-literal": (edit(_literal_token), baseline),
    "resources-set": (edit(_no_resources), baseline),
    "appproject-wildcards": (only(lambda: appproject(True)), only(lambda: appproject(False))),
    "run-ttl": (edit(_ttl), baseline),
    "crd-server-side-apply": (only(lambda: big_crd(False)), only(lambda: big_crd(True))),
    "argocd-skip-dry-run": (
        only(lambda: big_crd(True), lambda: widget(False)),
        only(lambda: big_crd(True), lambda: widget(True)),
    ),
    "policy-exemption": (edit(_bad_exemption), baseline),
    "torchrun-multinode-args": (
        with_jobset(_arg(2, "--node-rank=0")),
        with_jobset(_arg(2, "--node-rank=$(JOB_COMPLETION_INDEX)")),
    ),
    "rendezvous-host-resolves": (
        only(lambda: _without_subdomain(indexed_job()), headless),
        only(indexed_job, headless),
    ),
    "env-reference-undefined": (
        only(lambda: indexed_job(completionMode="NonIndexed"), headless),
        only(indexed_job, headless),
    ),
    "args-shell-variable": (
        with_jobset(_arg(2, "--node-rank=${JOB_COMPLETION_INDEX}")),
        with_jobset(),
    ),
    "gpu-visibility-env": (
        with_jobset(_env_entries(("CUDA_VISIBLE_DEVICES", "0"))),
        with_jobset(_env_entries(("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"))),
    ),
    "resource-quantity-empty": (
        with_jobset(lambda c: c["resources"]["limits"].update({"nvidia.com/roce_vf": None})),
        with_jobset(),
    ),
    "kueue-quota-fits": (
        edit(_with(cluster_queue(ALL_COVERED, gpus="16"))),
        edit(_with(cluster_queue(ALL_COVERED))),
    ),
    "pvc-access-mode-unsupported": (
        edit(_checkpoint_class("gp3")),
        edit(_checkpoint_class("cephfs")),
    ),
    "read-only-write-path": (edit(_read_only_checkpoints), edit(_hf_home("/tmp/hf"))),
    "hpa-replicas-in-git": (only(lambda: deployment(2), hpa), only(lambda: deployment(None), hpa)),
    "argocd-generate-name": (
        only(lambda: _generate_name(indexed_job(), hook=False), headless),
        only(lambda: _generate_name(indexed_job(), hook=True), headless),
    ),
    "appset-template-syntax": (
        only(lambda: appset(True, "{{.path}}")),
        only(lambda: appset(True, "{{.path.path}}")),
    ),
    "nad-sriov-resource-name": (edit(_nad_without_resource), baseline),
    "network-device-count": (edit(_second_network(1)), edit(_second_network(2))),
    "volcano-plugin-files": (
        only(lambda: volcano_job({"ssh": []})),
        only(lambda: volcano_job({"ssh": [], "svc": []})),
    ),
    "rollout-needs-spare-capacity": (
        only(lambda: deployment(1, gpus=8)),
        only(lambda: deployment(1, gpus=8, type="Recreate")),
    ),
}
# remote-base-pinned needs a kustomization on disk; tests/policies/test_rules.py builds one.
# profile-drift needs a cluster overlay on disk: tests/hostile/test_edits.py edits one.
# run-kind-synced needs a run directory: tests/test_tenancy.py puts copies in a team's run.
# run-application-name-unique needs a tree of runs: tests/test_tenancy.py names one after another.
RENDER_FIXTURES = {
    "remote-base-pinned",
    "profile-drift",
    "run-kind-synced",
    "run-job-own-name",
    "run-application-name-unique",
}


# -- MPI Operator v2 (MPIJob v2beta1) and Kubeflow Trainer v2 --------------------------------
# A second clean render: the same platform with an MPIJob v2beta1, the cluster's torch and
# MPI ClusterTrainingRuntimes and a TrainJob on each. MPI rules have a failing and a passing
# fixture on it (V2BETA1_FIXTURES; tests/policies/test_v2_kinds.py runs them).

JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
TRAINER_STEP = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def _launcher_container(name: str) -> dict[str, Any]:
    launcher = container(name)
    launcher["resources"] = {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    launcher.pop("securityContext")
    launcher.pop("volumeMounts")
    forward = [w for name in [*NCCL, "TRAINER_CHECKPOINT_DIR"] for w in ("-x", name)]
    launcher["command"] = [
        "mpirun",
        "--hostfile",
        "/etc/mpi/hostfile",
        "--bind-to",
        "none",
        *forward,
        "python",
        "-m",
        "trainer",
    ]
    launcher["args"] = ["--model", "cnn"]
    return launcher


def _sshd_pod(container_name: str, job_label: str) -> dict[str, Any]:
    worker = pod(container_name)
    worker["spec"]["securityContext"] = {
        "runAsUser": 1000,
        "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch",
    }
    main = worker["spec"]["containers"][0]
    main.pop("securityContext")  # IPC_LOCK never reaches uid 1000
    main["command"] = ["/usr/sbin/sshd", "-De", "-f", "/home/trainer/.sshd_config"]
    main.pop("args")
    term = worker["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    term[0]["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["key"] = job_label
    term[0]["podAffinityTerm"]["matchLabelKeys"] = [job_label]
    return worker


def mpijob_v2() -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": meta("moe-mpi", **{"kueue.x-k8s.io/queue-name": "training"}),
        "spec": {
            "slotsPerWorker": 8,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runLauncherAsWorker": False,
            "sshAuthMountPath": "/home/trainer/.ssh",
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 6},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "securityContext": {"runAsUser": 1000},
                            "containers": [_launcher_container("launcher")],
                        }
                    },
                },
                "Worker": {
                    "replicas": 2,
                    "template": _sshd_pod("worker", "training.kubeflow.org/job-name"),
                },
            },
        },
    }


def _runtime(name: str, policy: dict[str, Any], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "trainops"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, **policy},
            "template": {"spec": {"failurePolicy": {"maxRestarts": 6}, "replicatedJobs": jobs}},
        },
    }


def torch_runtime() -> dict[str, Any]:
    node = pod("node")
    term = node["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    term[0]["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["key"] = JOBSET_LABEL
    term[0]["podAffinityTerm"]["matchLabelKeys"] = [JOBSET_LABEL]
    job = {
        "name": "node",
        "template": {"metadata": {"labels": TRAINER_STEP}, "spec": {"template": node}},
    }
    return _runtime("torch-distributed-roce", {"torch": {}}, [job])


def mpi_runtime() -> dict[str, Any]:
    policy = {
        "mpi": {
            "numProcPerNode": 8,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/home/trainer/.ssh",
            "runLauncherAsNode": False,
        }
    }
    nodes = {"name": "node", "template": {"spec": {"template": _sshd_pod("node", JOBSET_LABEL)}}}
    launcher_pod = {
        "spec": {
            "securityContext": {"runAsUser": 1000},
            "containers": [_launcher_container("node")],
        }
    }
    launcher = {
        "name": "launcher",
        "dependsOn": [{"name": "node", "status": "Ready"}],
        "template": {"metadata": {"labels": TRAINER_STEP}, "spec": {"template": launcher_pod}},
    }
    return _runtime("mpi-distributed-roce", policy, [nodes, launcher])


def trainjob(name: str, runtime: str, **trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": meta(name, **{"kueue.x-k8s.io/queue-name": "training"}),
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"numNodes": 4, "args": ["--model", "gpt"], **trainer},
        },
    }


def baseline_v2() -> Docs:
    return [
        *platform(),
        mpijob_v2(),
        torch_runtime(),
        mpi_runtime(),
        trainjob("llama-v2", "torch-distributed-roce", numProcPerNode=8),
        trainjob("llama-mpi", "mpi-distributed-roce"),
    ]


def edit_v2(function: Callable[[Docs], None]) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = copy.deepcopy(baseline_v2())
        function(docs)
        return docs

    return build


def named(docs: Docs, kind: str, name: str | None = None) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"]))


def v2_launcher(docs: Docs) -> dict[str, Any]:
    spec = named(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    return spec["containers"][0]


def v2_worker(docs: Docs) -> dict[str, Any]:
    return named(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]


def runtime_jobs(docs: Docs, name: str) -> dict[str, dict[str, Any]]:
    runtime = named(docs, "ClusterTrainingRuntime", name)
    return {
        job["name"]: job["template"]["spec"]["template"]["spec"]
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }


def _worker_only_var(docs: Docs) -> None:
    v2_worker(docs)["containers"][0]["env"].append({"name": "NCCL_IB_TIMEOUT", "value": "22"})


def _launcher_var_not_forwarded(docs: Docs) -> None:
    v2_launcher(docs)["env"].append({"name": "NCCL_IB_TIMEOUT", "value": "22"})


def _hydra_without_x(docs: Docs) -> None:
    _launcher_var_not_forwarded(docs)
    named(docs, "MPIJob")["spec"]["mpiImplementation"] = "Intel"
    v2_launcher(docs)["command"] = ["mpirun", "python", "-m", "trainer"]


def _v2_launcher_gpu(docs: Docs) -> None:
    v2_launcher(docs)["resources"]["limits"]["nvidia.com/gpu"] = 1


def _v2_launcher_worker_with_gpus(docs: Docs) -> None:
    named(docs, "MPIJob")["spec"]["runLauncherAsWorker"] = True
    v2_launcher(docs)["resources"] = copy.deepcopy(v2_worker(docs)["containers"][0]["resources"])


def _v2_launcher_worker_without_gpus(docs: Docs) -> None:
    named(docs, "MPIJob")["spec"]["runLauncherAsWorker"] = True


def _v2_slots(docs: Docs) -> None:
    named(docs, "MPIJob")["spec"]["slotsPerWorker"] = 4


def _v2_np(value: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        v2_launcher(docs)["args"] = ["-np", value, "--model", "cnn"]

    return change


def _v2_np_with_launcher(docs: Docs) -> None:
    _v2_launcher_worker_with_gpus(docs)
    _v2_np("24")(docs)  # (2 workers + the launcher) x 8 slots


def _ssh_under_root(docs: Docs) -> None:
    named(docs, "MPIJob")["spec"]["sshAuthMountPath"] = "/root/.ssh"


def _ssh_default_as_root(docs: Docs) -> None:
    _ssh_under_root(docs)
    v2_worker(docs)["securityContext"]["runAsUser"] = 0
    named(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"][
        "securityContext"
    ]["runAsUser"] = 0


def _implementation(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        named(docs, "MPIJob")["spec"]["mpiImplementation"] = name

    return change


def _genv_under_openmpi(docs: Docs) -> None:
    v2_launcher(docs)["command"][1:1] = ["-genv", "NCCL_IB_TIMEOUT", "22"]


def _hydra_command(docs: Docs) -> None:
    _implementation("MPICH")(docs)
    v2_launcher(docs)["command"] = ["mpirun", "-genvall", "python", "-m", "trainer"]


def _v1_launcher_only_var(docs: Docs) -> None:
    launcher = job(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["containers"][0]["env"].append({"name": "NCCL_IB_TIMEOUT", "value": "22"})


def _v1_worker_only_var(docs: Docs) -> None:
    """MPIJob v1: ranks inherit the Workers' environment (kubectl exec): no -x needed."""
    worker = job(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["env"].append({"name": "NCCL_IB_TIMEOUT", "value": "22"})


def _runtime_node_var(docs: Docs) -> None:
    nodes = runtime_jobs(docs, "mpi-distributed-roce")["node"]
    nodes["containers"][0]["env"].append({"name": "NCCL_IB_TIMEOUT", "value": "22"})


def _operators(training_flags: list[str] | None, mpi: bool) -> Callable[[], Docs]:
    def deployment(name: str, image: str, args: list[str]) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "kubeflow"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": name, "image": image, "args": args}]},
                },
            },
        }

    def build() -> Docs:
        docs = []
        if training_flags is not None:
            docs.append(
                deployment(
                    "training-operator", "kubeflow/training-operator:v1-5170a36", training_flags
                )
            )
        if mpi:
            docs.append(
                deployment("mpi-operator", "mpioperator/mpi-operator:0.8.0", ["-alsologtostderr"])
            )
        return docs

    return build


WITHOUT_MPIJOB = [f"--enable-scheme={k}" for k in ("pytorchjob", "tfjob", "jaxjob")]


def _mpijob_crd(*versions: str) -> Callable[[], Docs]:
    def build() -> Docs:
        return [
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "mpijobs.kubeflow.org"},
                "spec": {
                    "group": "kubeflow.org",
                    "names": {"kind": "MPIJob", "plural": "mpijobs"},
                    "scope": "Namespaced",
                    "versions": [
                        {"name": v, "served": True, "storage": i == 0}
                        for i, v in enumerate(versions)
                    ],
                },
            }
        ]

    return build


def _both(*builders: Callable[[], Docs]) -> Callable[[], Docs]:
    return lambda: [doc for build in builders for doc in build()]


def _missing_runtime(docs: Docs) -> None:
    named(docs, "TrainJob", "llama-v2")["spec"]["runtimeRef"]["name"] = "torch-distributed"


def _no_num_nodes(docs: Docs) -> None:
    del named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]["numNodes"]


def _procs(value: int) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]["numProcPerNode"] = value

    return change


def _resources_per_node(gpus: int | None) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        trainer = named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]
        del trainer["numProcPerNode"]
        limits: dict[str, Any] = {"cpu": "96", "memory": "1Ti"}
        if gpus:
            limits["nvidia.com/gpu"] = gpus
        trainer["resourcesPerNode"] = {"limits": limits}

    return change


def _reserved_env(docs: Docs) -> None:
    trainer = named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]
    trainer["env"] = [{"name": "PET_NNODES", "value": "4"}]


def _ordinary_env(docs: Docs) -> None:
    trainer = named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]
    trainer["env"] = [{"name": "NCCL_IB_TIMEOUT", "value": "22"}]


def _trainer_image(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        named(docs, "TrainJob", name)["spec"]["trainer"]["image"] = "registry.example.com/t:2.0"

    return change


def _runtime_off_network(docs: Docs) -> None:
    node = named(docs, "ClusterTrainingRuntime", "torch-distributed-roce")
    template = node["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    del template["metadata"]["annotations"]


def _trainjob_queue(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        labels = named(docs, "TrainJob", "llama-v2")["metadata"]["labels"]
        labels["kueue.x-k8s.io/queue-name"] = name

    return change


def _volcano_runtime_queue(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "training"},
                "spec": {"capability": {"nvidia.com/gpu": "64"}},
            }
        )
        runtime = named(docs, "ClusterTrainingRuntime", "torch-distributed-roce")
        runtime["spec"]["podGroupPolicy"] = {"volcano": {}}
        runtime["spec"]["template"]["metadata"] = {
            "annotations": {"scheduling.volcano.sh/queue-name": name}
        }

    return change


def _runtime_launcher_as_node(with_gpus: bool) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        runtime = named(docs, "ClusterTrainingRuntime", "mpi-distributed-roce")
        runtime["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = True
        if with_gpus:
            jobs = runtime_jobs(docs, "mpi-distributed-roce")
            resources = copy.deepcopy(jobs["node"]["containers"][0]["resources"])
            jobs["launcher"]["containers"][0]["resources"] = resources

    return change


def _runtime_ssh_under_root(docs: Docs) -> None:
    runtime = named(docs, "ClusterTrainingRuntime", "mpi-distributed-roce")
    runtime["spec"]["mlPolicy"]["mpi"]["sshAuthMountPath"] = "/root/.ssh"


# rule id -> (failing, passing) on MPIJob v2beta1 (for the MPI rules that also cover v1).
V2BETA1_FIXTURES: dict[str, tuple[Callable[[], Docs], Callable[[], Docs]]] = {
    "mpi-forwards-nccl": (edit_v2(_worker_only_var), edit_v2(_hydra_without_x)),
    "mpi-launcher-gpus": (edit_v2(_v2_launcher_gpu), edit_v2(_v2_launcher_worker_with_gpus)),
    "mpi-slots": (edit_v2(_v2_np("24")), edit_v2(_v2_np_with_launcher)),
}
# More pairs for rules whose behaviour differs by API or implementation.
MORE_FIXTURES: dict[str, list[tuple[Callable[[], Docs], Callable[[], Docs]]]] = {
    "mpi-forwards-nccl": [
        (edit_v2(_launcher_var_not_forwarded), baseline_v2),
        (edit(_v1_launcher_only_var), edit(_v1_worker_only_var)),
        (edit_v2(_runtime_node_var), baseline_v2),
    ],
    "mpi-slots": [(edit_v2(_v2_slots), baseline_v2)],
    "mpi-ssh-auth-path": [
        (edit_v2(_ssh_under_root), edit_v2(_ssh_default_as_root)),
        (edit_v2(_runtime_ssh_under_root), baseline_v2),
    ],
    "mpi-implementation-command": [(edit_v2(_implementation("MPICH")), edit_v2(_hydra_command))],
    "mpijob-crd-owners": [
        (_both(_operators([], True), _mpijob_crd("v2beta1")), _operators([], False)),
        (
            _both(_operators(None, True), _mpijob_crd("v1")),
            _both(_operators(None, True), _mpijob_crd("v2beta1")),
        ),
        (_both(_mpijob_crd("v1"), _mpijob_crd("v2beta1")), _mpijob_crd("v2beta1")),
    ],
    "mpi-launcher-as-worker": [
        (edit_v2(_runtime_launcher_as_node(False)), edit_v2(_runtime_launcher_as_node(True)))
    ],
    "queue-exists": [
        (edit_v2(_trainjob_queue("gpu-queue")), edit_v2(_trainjob_queue("training"))),
        (edit_v2(_volcano_runtime_queue("gpu")), edit_v2(_volcano_runtime_queue("training"))),
    ],
    "trainjob-procs-per-node": [(edit_v2(_procs(16)), baseline_v2)],
    "trainjob-reserved-env": [(edit_v2(_reserved_env), edit_v2(_ordinary_env))],
}

FIXTURES.update(
    {
        # MPIJob v1: the ranks inherit the Workers' environment, so only a launcher-only
        # variable needs -x; and a launcher that requests GPUs is a worker (in the hostfile).
        "mpi-forwards-nccl": (edit(_v1_launcher_only_var), baseline),
        "mpi-launcher-gpus": (edit_v2(_v2_launcher_gpu), edit(_launcher_gpu)),
        "mpi-launcher-as-worker": (
            edit_v2(_v2_launcher_worker_without_gpus),
            edit_v2(_v2_launcher_worker_with_gpus),
        ),
        "mpi-ssh-auth-path": (edit_v2(_ssh_under_root), baseline_v2),
        "mpi-implementation-command": (edit_v2(_genv_under_openmpi), baseline_v2),
        "mpijob-crd-owners": (
            _operators([], True),
            _operators(WITHOUT_MPIJOB, True),
        ),
        "trainjob-runtime-missing": (edit_v2(_missing_runtime), baseline_v2),
        "trainjob-num-nodes": (edit_v2(_no_num_nodes), baseline_v2),
        "trainjob-procs-per-node": (edit_v2(_procs(4)), baseline_v2),
        "trainjob-resources-without-gpus": (
            edit_v2(_resources_per_node(None)),
            edit_v2(_resources_per_node(8)),
        ),
        "trainjob-reserved-env": (edit_v2(_reserved_env), baseline_v2),
        "trainjob-image-on-mpi-runtime": (
            edit_v2(_trainer_image("llama-mpi")),
            edit_v2(_trainer_image("llama-v2")),
        ),
        "runtime-fabric-network": (edit_v2(_runtime_off_network), baseline_v2),
    }
)


# -- issue 11: what Argo CD, Kueue, Multus and the operators really do ----------------------
# Each pre-fix shape of the repository's own content also lives, rendered, in
# tests/gitops_defects/.


def _cluster_policy_named(name: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        next(d for d in docs if d["kind"] == "ClusterPolicy")["metadata"]["name"] = name

    return change


def _addons_project() -> dict[str, Any]:
    project = appproject(False)
    project["metadata"]["name"] = "addons"
    project["spec"]["destinations"] = [{"name": "prod", "namespace": "kueue-system"}]
    project["spec"]["namespaceResourceWhitelist"] = [
        {"group": "rbac.authorization.k8s.io", "kind": "RoleBinding"}
    ]
    return project


def _kueue_appset(values: dict[str, Any] | None, preserve: bool = True) -> dict[str, Any]:
    source: dict[str, Any] = {
        "repoURL": "registry.k8s.io/kueue/charts",
        "chart": "kueue",
        "targetRevision": "0.19.2",
    }
    if values is not None:
        source["helm"] = {"releaseName": "kueue", "valuesObject": values}
    appset: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "kueue", "namespace": "argocd"},
        "spec": {
            "generators": [{"list": {"elements": [{"cluster": "prod"}]}}],
            "template": {
                "metadata": {"name": "{{.cluster}}-kueue"},
                "spec": {
                    "project": "addons",
                    "source": source,
                    "destination": {"name": "{{.cluster}}", "namespace": "kueue-system"},
                },
            },
        },
    }
    if preserve:
        appset["spec"]["syncPolicy"] = {"preserveResourcesOnDeletion": True}
    return appset


def _namespaced_kinds(listed: bool) -> Callable[[], Docs]:
    def build() -> Docs:
        project = _addons_project()
        if not listed:
            del project["spec"]["namespaceResourceWhitelist"]
        return [project]

    return build


def _queued_mpijob_v1(docs: Docs) -> None:
    job(docs, "MPIJob")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "training"


def _cluster_queue(*covered: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "training"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": list(covered),
                            "flavors": [
                                {
                                    "name": "gpu",
                                    "resources": [
                                        {"name": r, "nominalQuota": "64"} for r in covered
                                    ],
                                }
                            ],
                        }
                    ]
                },
            }
        )

    return change


def _vfs(count: int, attachments: int) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        doc = job(docs)
        field = "pytorchReplicaSpecs"
        for replica in doc["spec"][field].values():
            template = replica["template"]
            template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/roce_vf"] = count
            networks = ",".join(["training-net"] * attachments)
            template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = networks

    return change


def _idle_workers_kept(docs: Docs) -> None:
    job(docs, "MPIJob")["spec"]["runPolicy"]["cleanPodPolicy"] = "None"


def _backoff_limit(docs: Docs) -> None:
    job(docs)["spec"]["runPolicy"]["backoffLimit"] = 6


def _fs_group(policy: str | None) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["securityContext"] = {"fsGroup": 1000}
            if policy:
                spec["securityContext"]["fsGroupChangePolicy"] = policy

    return change


def multus_daemonset(memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-multus-ds", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": "multus"}},
            "template": {
                "metadata": {"labels": {"name": "multus"}},
                "spec": {
                    "containers": [
                        {
                            "name": "kube-multus",
                            "image": "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0-thick",
                            "command": ["/usr/src/multus-cni/bin/multus-daemon"],
                            "resources": {
                                "requests": {"cpu": "100m", "memory": memory},
                                "limits": {"memory": memory},
                            },
                        }
                    ]
                },
            },
        },
    }


def training_operator(args: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
        "spec": {
            "selector": {"matchLabels": {"app": "training-operator"}},
            "template": {
                "metadata": {"labels": {"app": "training-operator"}},
                "spec": {
                    "containers": [
                        {
                            "name": "training-operator",
                            "image": "kubeflow/training-operator:v1-5170a36",
                            "command": ["/manager"],
                            "args": args,
                            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                        }
                    ]
                },
            },
        },
    }


PINNED_INJECTED = [
    "--pytorch-init-container-image=docker.io/library/alpine:3.21.3",
    "--mpi-kubectl-delivery-image=docker.io/kubeflow/kubectl-delivery:v1-5170a36",
]


def _run_as(uid: int, ipc_lock: bool) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["securityContext"] = {"runAsUser": uid}
            if not ipc_lock:
                spec["containers"][0].pop("securityContext", None)

    return change


FIXTURES.update(
    {
        "argocd-single-owner": (
            edit(_cluster_policy_named("cluster-policy")),
            baseline,
        ),
        "appproject-chart-namespaces": (
            only(_addons_project, lambda: _kueue_appset({})),
            only(
                _addons_project,
                lambda: _kueue_appset({"enableVisibilityAuthReaderRoleBinding": False}),
            ),
        ),
        "appproject-namespaced-kinds": (_namespaced_kinds(False), _namespaced_kinds(True)),
        "applicationset-preserve-resources": (
            only(lambda: _kueue_appset(None, preserve=False)),
            only(lambda: _kueue_appset(None)),
        ),
        "queue-label-unmanaged-kind": (edit(_queued_mpijob_v1), baseline),
        "kueue-covers-requests": (
            edit(_cluster_queue("cpu", "memory", "nvidia.com/gpu")),
            edit(_cluster_queue("cpu", "memory", "nvidia.com/gpu", "nvidia.com/roce_vf")),
        ),
        "sriov-vfs-attached": (edit(_vfs(2, 1)), edit(_vfs(2, 2))),
        "nccl-ib-hca-exact-vf": (edit(_env_var("NCCL_IB_HCA", "=mlx5_0,mlx5_1")), baseline),
        "mpi-idle-workers-kept": (edit(_idle_workers_kept), baseline),
        "backoff-limit-exitcode": (edit(_backoff_limit), baseline),
        "shutdown-timeout-grace": (
            edit(_env_var("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)),
            baseline,
        ),
        "fsgroup-change-policy": (edit(_fs_group(None)), edit(_fs_group("OnRootMismatch"))),
        "multus-memory-limit": (
            only(lambda: multus_daemonset("50Mi")),
            only(lambda: multus_daemonset("1Gi")),
        ),
    }
)
MORE_FIXTURES.setdefault("rdma-ipc-lock", []).append(
    (edit(_run_as(1000, ipc_lock=True)), edit(_run_as(1000, ipc_lock=False)))
)
MORE_FIXTURES.setdefault("argument-packs-flag-and-value", []).append(
    (edit(_packed), edit(_mca_value))
)
MORE_FIXTURES.setdefault("image-pinned", []).append(
    (only(lambda: training_operator([])), only(lambda: training_operator(PINNED_INJECTED)))
)
MORE_FIXTURES.setdefault("shutdown-timeout-grace", []).append(
    (edit(_env_var("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "300")), baseline)
)


# -- runs of the user's own code, and their data (issue 14) ------------------------------


def _user_command(*command: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            spec["containers"][0]["command"] = list(command)
            spec["containers"][0]["args"] = ["--lr", "3e-4"]

    return change


def _trainjob_command(*command: str) -> Callable[[Docs], None]:
    """The TrainJob's own command on a torch runtime that fails the job on codes 1-127."""

    def change(docs: Docs) -> None:
        runtime = named(docs, "ClusterTrainingRuntime", "torch-distributed-roce")
        [node] = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        permanent = {"containerName": "node", "operator": "In", "values": list(range(1, 128))}
        node["template"]["spec"]["podFailurePolicy"] = {
            "rules": [{"action": "FailJob", "onExitCodes": permanent}]
        }
        named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]["command"] = list(command)

    return change


def _dataset(
    read_only: bool, init: bool = False, path: str = "/data", name: str = "dataset"
) -> Callable[[Docs], None]:
    """Every pod of the PyTorchJob mounts a claim named `name`; with `init`, an init
    container syncs the bucket into it (the seed's pattern) or, read-only, waits for it."""

    def change(docs: Docs) -> None:
        for spec in pods_of(job(docs)):
            claim = {"claimName": name, **({"readOnly": True} if read_only else {})}
            spec["volumes"].append({"name": name, "persistentVolumeClaim": claim})
            mount = {"name": name, "mountPath": path, "readOnly": read_only}
            container = spec["containers"][0]
            if init:
                command = ["aws", "s3", "sync", "s3://corpus", path]
                if read_only:
                    command = ["/bin/sh", "-c", f"until [ -e {path}/.ready ]; do sleep 10; done"]
                spec["initContainers"] = [
                    {
                        "name": "fetch-data",
                        "image": "registry.example.com/tools:1.0",
                        "command": command,
                        "volumeMounts": [mount],
                    }
                ]
                mount = {**mount, "readOnly": True}
            container["volumeMounts"].append(mount)

    return change


FIXTURES.update(
    {
        "data-prep-every-replica": (
            edit(_dataset(read_only=False, init=True)),
            edit(_dataset(read_only=True, init=True)),
        ),
        "dataset-claim-writable": (edit(_dataset(read_only=False)), edit(_dataset(True))),
    }
)
MORE_FIXTURES.setdefault("exitcode-policy-launcher", []).extend(
    [
        # The user's own command, unwrapped, decides restarts under ExitCode.
        (
            edit(_user_command("python", "train.py")),
            edit(_user_command("trainer-launch", "--", "python", "train.py")),
        ),
        (
            edit(_user_command("accelerate", "launch", "train.py")),
            edit(_user_command("trainer-launch", "--", "accelerate", "launch", "train.py")),
        ),
        # A TrainJob on a runtime whose pod failure policy reads exit codes.
        (
            edit_v2(_trainjob_command("python", "train.py")),
            edit_v2(_trainjob_command("trainer-launch", "--", "python", "train.py")),
        ),
    ]
)
MORE_FIXTURES.setdefault("dataset-claim-writable", []).append(
    # Not a dataset: an output claim of another name is the job's business.
    (edit(_dataset(read_only=False)), edit(_dataset(False, path="/outputs", name="outputs")))
)


# -- tenancy, admission policies, topology --------------------------------------------------
# A team's namespace is described by its `trainops-runs` ConfigMap (the parameters the
# cluster's admission policy reads, trainops.profile.tenancy.params).


def tenant_params(**data: str) -> dict[str, Any]:
    values = {
        "team": "vision",
        "queue": "training",
        "priorities": "best-effort,standard",
        "networks": f"training-net,{NAMESPACE}/training-net",
        "registries": "registry.example.com/",
        **data,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trainops-runs", "namespace": NAMESPACE},
        "data": values,
    }


def _tenant(labels: dict[str, str] | None = None, **data: str) -> Callable[[Docs], None]:
    """The namespace belongs to a team (params `data`); its jobs carry `labels`."""

    def change(docs: Docs) -> None:
        docs.append(tenant_params(**data))
        for doc in docs:
            if doc["kind"] in ("PyTorchJob", "MPIJob"):
                doc["metadata"]["labels"].update(labels or {})

    return change


TEAM_JOB = {
    "trainops.dev/team": "vision",
    "trainops.dev/scheduler": "kueue",
    "kueue.x-k8s.io/queue-name": "training",
    "kueue.x-k8s.io/priority-class": "standard",
}


def _attachment(value: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        _tenant(TEAM_JOB)(docs)
        for spec in job(docs)["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = value

    return change


def _job_network_policy(own: bool) -> Callable[[Docs], None]:
    """A team namespace, the job's NetworkPolicy admitting its own pods or every trainops
    pod (every job's, as their common label selects them)."""

    def change(docs: Docs) -> None:
        _tenant(TEAM_JOB)(docs)
        policy = tenancy.job_network_policy("PyTorchJob", job(docs)["metadata"]["name"], NAMESPACE)
        if not own:
            peers = {"matchLabels": {"app.kubernetes.io/part-of": "trainops"}}
            policy["spec"]["ingress"] = [{"from": [{"podSelector": peers}]}]
        docs.append(policy)

    return change


def admission_policy() -> Docs:
    """A namespace bound to a policy whose params say which team owns it."""
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "team-label"},
            "spec": {
                "failurePolicy": "Fail",
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["kubeflow.org"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["pytorchjobs"],
                        }
                    ]
                },
                "variables": [
                    {
                        "name": "labels",
                        "expression": "has(object.metadata.labels) ? object.metadata.labels : {}",
                    }
                ],
                "validations": [
                    {
                        "expression": "'trainops.dev/team' in variables.labels && "
                        "variables.labels['trainops.dev/team'] == params.data.team",
                        "messageExpression": "'jobs here belong to team ' + params.data.team",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "team-label"},
            "spec": {
                "policyName": "team-label",
                "validationActions": ["Deny"],
                "paramRef": {"name": "trainops-runs", "parameterNotFoundAction": "Deny"},
                "matchResources": {
                    "namespaceSelector": {
                        "matchExpressions": [{"key": "trainops.dev/tenant", "operator": "Exists"}]
                    }
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {"trainops.dev/tenant": "vision"}},
        },
        tenant_params(),
    ]


def _admitted(team: str | None) -> Callable[[], Docs]:
    def build() -> Docs:
        docs = [*baseline(), *admission_policy()]
        if team:  # the policy judges PyTorchJobs only
            for doc in docs:
                if doc["kind"] == "PyTorchJob":
                    doc["metadata"]["labels"]["trainops.dev/team"] = team
        return docs

    return build


def kueue_topology(capacity: dict[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {
            "name": "fixture",
            "annotations": {"trainops.dev/nodes-per-domain": json.dumps(capacity)},
        },
        "spec": {"levels": [{"nodeLabel": label} for label in capacity]},
    }


RACK = "topology.kubernetes.io/rack"


def _topology_request(label: str, rack_nodes: int) -> Callable[[Docs], None]:
    """The PyTorchJob (1 Master + 3 Workers, one pod per node) requires one domain of
    `label`; a rack holds `rack_nodes` nodes."""

    def change(docs: Docs) -> None:
        docs.append(kueue_topology({RACK: rack_nodes, "kubernetes.io/hostname": 1}))
        for spec in job(docs)["spec"]["pytorchReplicaSpecs"].values():
            annotations = spec["template"]["metadata"]["annotations"]
            annotations["kueue.x-k8s.io/podset-required-topology"] = label
            annotations["kueue.x-k8s.io/podset-group-name"] = "ranks"

    return change


FIXTURES.update(
    {
        "run-team-namespace": (edit(_tenant()), edit(_tenant(TEAM_JOB))),
        # The baseline's pods request 96 CPUs and 1Ti each.
        "pod-fits-node": (
            edit(_tenant(TEAM_JOB, nodeCpu="64", nodeMemory="2000Gi")),
            edit(_tenant(TEAM_JOB, nodeCpu="190", nodeMemory="1100Gi")),
        ),
        "run-team-queue": (
            edit(_tenant({**TEAM_JOB, "kueue.x-k8s.io/queue-name": "nlp"})),
            edit(_tenant(TEAM_JOB)),
        ),
        "run-priority-allowed": (
            edit(_tenant({**TEAM_JOB, "kueue.x-k8s.io/priority-class": "urgent"})),
            edit(_tenant(TEAM_JOB)),
        ),
        "network-attachment-approved": (
            edit(_attachment("training-net,kube-system/host-net")),
            edit(_attachment(f"training-net,{NAMESPACE}/training-net")),
        ),
        "image-registry-approved": (
            edit(_tenant(TEAM_JOB, registries="ghcr.io/acme/")),
            edit(_tenant(TEAM_JOB, registries="ghcr.io/acme/,registry.example.com/")),
        ),
        "network-policy-own-job": (
            edit(_job_network_policy(own=False)),
            edit(_job_network_policy(own=True)),
        ),
        "admission-policy": (_admitted(None), _admitted("vision")),
        "topology-level-known": (
            edit(_topology_request("example.com/block", 4)),
            edit(_topology_request(RACK, 4)),
        ),
        "topology-request-fits": (
            edit(_topology_request(RACK, 2)),
            edit(_topology_request(RACK, 4)),
        ),
    }
)


def _volcano_queue(queue: str) -> Callable[[Docs], None]:
    """A Volcano cluster: team vision's namespace, the PyTorchJob's PodGroup in `queue`."""

    def change(docs: Docs) -> None:
        labels = {"trainops.dev/team": "vision", "trainops.dev/scheduler": "volcano"}
        _tenant(labels, queue="vision")(docs)
        for doc in docs:
            if doc["kind"] in ("PyTorchJob", "MPIJob"):
                policy = {"queue": "vision", "priorityClass": "standard"}
                doc["spec"].setdefault("runPolicy", {})["schedulingPolicy"] = policy
        job(docs)["spec"]["runPolicy"]["schedulingPolicy"]["queue"] = queue

    return change


MORE_FIXTURES.setdefault("run-team-queue", []).append(
    (edit(_volcano_queue("training")), edit(_volcano_queue("vision")))
)
MORE_FIXTURES.setdefault("run-priority-allowed", []).append(
    (
        edit(
            lambda d: (
                _volcano_queue("vision")(d),
                job(d)["spec"]["runPolicy"]["schedulingPolicy"].update(priorityClass="urgent"),
            )
        ),
        edit(_volcano_queue("vision")),
    )
)


# -- further cases of pack rules, beside each rule's pair (test_rules runs them) -------------


def _projected_token(token: bool) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        source = {"serviceAccountToken": {"path": "token"}} if token else {"downwardAPI": {}}
        for spec in pods_of(job(docs)):
            spec["volumes"].append({"name": "api", "projected": {"sources": [source]}})

    return change


def _image_volume(reference: str) -> Callable[[Docs], None]:
    def change(docs: Docs) -> None:
        _tenant(TEAM_JOB, registries="ghcr.io/acme/,registry.example.com/")(docs)
        for spec in pods_of(job(docs)):
            spec["volumes"].append({"name": "weights", "image": {"reference": reference}})

    return change


def _cpu_job_account(account: str) -> Callable[[], Docs]:
    """A team's CPU-only batch Job (no training kind, no GPU) with a service account."""

    def build() -> Docs:
        docs = copy.deepcopy(baseline())
        docs.append(tenant_params())
        pod = {"containers": [{"name": "prep", "image": "registry.example.com/prep:1.0.0"}]}
        pod["serviceAccountName"] = account
        pod["restartPolicy"] = "Never"
        docs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "prep", "namespace": NAMESPACE},
                "spec": {"template": {"spec": pod}},
            }
        )
        return docs

    return build


MORE: dict[str, list[tuple[Callable[[], Docs], Callable[[], Docs]]]] = {
    # A projected token is what automount would mount.
    "training-service-account": [
        (edit(_projected_token(True)), edit(_projected_token(False))),
        # In a team's namespace every pod is a run's, GPUs or not.
        (_cpu_job_account("cnn-mpi-1121-launcher"), _cpu_job_account("default")),
    ],
    # An image volume runs nothing, but its files (a model's code, a library) do.
    "image-registry-approved": [
        (
            edit(_image_volume("docker.io/someone/weights:1")),
            edit(_image_volume("ghcr.io/acme/w:1")),
        )
    ],
}
