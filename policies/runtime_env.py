"""Environment variables beyond NCCL's own names: what the operators append after the
template's, what the kubelet does with duplicates, and the values CUDA, the NVIDIA
container runtime, PyTorch's allocator and Gloo accept.

Facts: Training Operator v1.9.2 `pkg/controller.v1/pytorch/{envvar,master,elastic}.go`
and `pkg/controller.v1/mpi/mpijob_controller.go`; kubelet `makeEnvironmentVariables`
(a map keyed by name, so the last duplicate wins); PyTorch c10 `AllocatorConfig` and
`CUDAAllocatorConfig` (keys, `key:value` pairs, booleans spelled True/False); the NVIDIA
container toolkit's driver capabilities; Gloo's `GLOO_SOCKET_IFNAME` (exact names).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops import multus
from trainops.model import WARNING
from trainops.policy import Context, Violation, pod_rule
from trainops.policy.pods import PodTemplate, dicts, env_index, env_of, gpu_count, mapping

from . import common

# Variables the Training Operator appends to every container of a PyTorchJob's pods
# (kept after the template's: the kubelet then uses the operator's value).
PYTORCHJOB_ALWAYS = ("PET_NNODES", "PET_NPROC_PER_NODE")
PYTORCHJOB_WITH_MASTER = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "PET_NODE_RANK",
)
PYTORCHJOB_ELASTIC = ("PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND")
ELASTIC_OPTIONAL = {
    "maxRestarts": "PET_MAX_RESTARTS",
    "rdzvId": "PET_RDZV_ID",
    "rdzvConf": "PET_RDZV_CONF",
}
# The MPIJob v1 launcher: the kubectl-exec agent and the hostfile (always), GPU
# visibility (a launcher without GPU limits), Hydra's bootstrap (only when unset: the
# template's value wins and replaces kubectl exec by ssh).
MPI_V1_LAUNCHER = ("OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_default_hostfile")
MPI_V1_HIDDEN_GPUS = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
HYDRA_BOOTSTRAP = ("I_MPI_HYDRA_BOOTSTRAP", "I_MPI_HYDRA_BOOTSTRAP_EXEC")

DRIVER_CAPABILITIES = ("compute", "compat32", "graphics", "utility", "video", "display", "ngx")
ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
# key -> kind of value (c10 AllocatorConfig and CUDAAllocatorConfig, torch 2.4 - 2.13).
ALLOC_KEYS = {
    "max_split_size_mb": "size",
    "max_non_split_rounding_mb": "size",
    "garbage_collection_threshold": "fraction",
    "roundup_power2_divisions": "divisions",
    "expandable_segments": "bool",
    "backend": "backend",
    "release_lock_on_cudamalloc": "bool",
    "release_lock_on_hipmalloc": "bool",
    "pinned_use_cuda_host_register": "bool",
    "pinned_use_hip_host_register": "bool",
    "pinned_num_register_threads": "power2",
    "pinned_use_background_threads": "bool",
    "pinned_reserve_segment_size_mb": "size",
    "graph_capture_record_stream_reuse": "bool",
}
_TOKEN = re.compile(r"[,:\[\]]|[^,:\[\]\s]+")
# Debug switches that slow every step when left on.
DEBUG_SWITCHES = {
    "CUDA_LAUNCH_BLOCKING": ("1",),
    "TORCH_DISTRIBUTED_DEBUG": ("DETAIL",),
}


def _append(names: tuple[str, ...], why: str) -> dict[str, str]:
    return dict.fromkeys(names, why)


def _operator_env(pod: PodTemplate) -> dict[str, str]:
    """Variables the operator appends to this pod's containers -> what it sets them to."""
    spec = mapping(pod.doc.obj.get("spec"))
    if pod.doc.kind == "PyTorchJob":
        replicas = mapping(spec.get("pytorchReplicaSpecs"))
        found = _append(PYTORCHJOB_ALWAYS, "the operator's node count and processes per node")
        if "Master" in replicas:
            found |= _append(PYTORCHJOB_WITH_MASTER, "the master's address and this pod's rank")
        elastic = spec.get("elasticPolicy")
        if isinstance(elastic, dict):
            found |= _append(PYTORCHJOB_ELASTIC, "elasticPolicy's rendezvous")
            for key, name in ELASTIC_OPTIONAL.items():
                if elastic.get(key) is not None:
                    found[name] = f"elasticPolicy.{key}"
        return found
    if pod.doc.kind == "MPIJob" and pod.doc.api_version.endswith("/v1") and pod.role == "Launcher":
        found = _append(MPI_V1_LAUNCHER, "the operator's kubectl-exec agent and hostfile")
        if not pod.uses_gpus:
            found |= _append(MPI_V1_HIDDEN_GPUS, "empty: a launcher without GPU limits sees none")
        return found
    return {}


@pod_rule(
    id="operator-env-overridden",
    severity=WARNING,
    title="The template leaves the operator's variables to the operator",
    why="The Training Operator appends its own MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK "
    "and PET_* variables to every container of a PyTorchJob, and its hostfile and "
    "kubectl-exec agent to an MPIJob v1 launcher, after the template's env (v1.9.2 "
    "envvar.go, mpijob_controller.go); the kubelet keeps the last of duplicate names, so a "
    "hand-written value never reaches the program while the manifest says otherwise. Hydra's "
    "I_MPI_HYDRA_BOOTSTRAP is the exception: the operator keeps the template's, which "
    "replaces its kubectl-exec bootstrap with ssh into workers that run no sshd.",
    fix="Drop the variable and let the operator set it (spec.nprocPerNode, the replica counts "
    "and elasticPolicy say what it sets); for Hydra leave the bootstrap to the operator.",
    applies=common.has_env,
)
def operator_env_overridden(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    owned = _operator_env(pod)
    hydra = pod.doc.kind == "MPIJob" and pod.doc.api_version.endswith("/v1")
    if not owned:
        return
    for index, container in enumerate(pod.containers):
        for position, entry in enumerate(dicts(container.get("env"))):
            name = str(entry.get("name"))
            at = (*pod.container_path(index), "env", position, "name")
            if name in owned:
                yield Violation(
                    f"{name} is set by the operator after the template ({owned[name]}); "
                    "this value is replaced",
                    at,
                )
            elif hydra and pod.role == "Launcher" and name in HYDRA_BOOTSTRAP:
                yield Violation(
                    f"{name} replaces the operator's kubectl-exec bootstrap; MPIJob v1 "
                    "workers run no sshd",
                    at,
                )


@pod_rule(
    id="env-duplicate",
    severity=WARNING,
    title="A container defines each variable once",
    why="The kubelet builds a container's environment as a map keyed by name: of two entries "
    "with one name the last wins. A base and an overlay that both add a variable leave the "
    "value reviewers read first without effect.",
    fix="Keep one entry per name (patch the base's entry instead of adding another).",
    applies=common.has_env,
)
def env_duplicate(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        seen: dict[str, Any] = {}
        for position, entry in enumerate(dicts(container.get("env"))):
            name = entry.get("name")
            if name in seen:
                yield Violation(
                    f"{name} is defined twice; the later value "
                    f"{_shown(entry)} replaces {_shown(seen[name])}",
                    (*pod.container_path(index), "env", position, "name"),
                )
            seen[name] = entry


def _shown(entry: dict[str, Any]) -> str:
    value = entry.get("value")
    return repr(value) if "valueFrom" not in entry else "valueFrom"


@pod_rule(
    id="nvidia-driver-capabilities",
    severity=WARNING,
    title="GPU containers keep the compute driver capability",
    why="The NVIDIA container runtime mounts only the driver libraries of the capabilities "
    "NVIDIA_DRIVER_CAPABILITIES lists (compute, utility, graphics, video, ...); a GPU "
    "container whose list lacks compute (and all) gets no libcuda and CUDA finds no device.",
    fix="Drop NVIDIA_DRIVER_CAPABILITIES (the default includes compute and utility) or list "
    "compute,utility.",
    applies=common.gpu_pod,
)
def driver_capabilities(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        value = env_of(container).get("NVIDIA_DRIVER_CAPABILITIES")
        if not gpu_count(container) or not isinstance(value, str) or not value.strip():
            continue
        listed = {item.strip().lower() for item in value.split(",") if item.strip()}
        if "$" in value or listed & {"all", "compute"}:
            continue
        yield Violation(
            f"NVIDIA_DRIVER_CAPABILITIES={value} has no compute: CUDA finds no device",
            _env_value_at(pod, index, container, "NVIDIA_DRIVER_CAPABILITIES"),
        )


def _env_value_at(pod: PodTemplate, index: int, container: dict, name: str) -> tuple:
    return (*pod.container_path(index), "env", env_index(container, name), "value")


@pod_rule(
    id="pytorch-cuda-alloc-conf",
    severity=WARNING,
    title="PYTORCH_CUDA_ALLOC_CONF parses",
    why="PyTorch's CUDA caching allocator parses PYTORCH_CUDA_ALLOC_CONF (PYTORCH_ALLOC_CONF "
    "in newer releases) at the first GPU allocation: comma-separated key:value pairs of known "
    "keys, booleans spelled True or False. Anything else (key=value, expandable_segments:true, "
    "a misspelt key) raises in every rank at the first tensor on the GPU.",
    fix="Write key:value pairs with known keys, e.g. expandable_segments:True,"
    "max_split_size_mb:512.",
    applies=common.has_env,
)
def alloc_conf(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        for name in ALLOC_CONF:
            value = env.get(name)
            if not isinstance(value, str) or not value.strip() or "$" in value:
                continue
            problem = alloc_conf_problem(value)
            if problem is not None:
                yield Violation(
                    f"{name}={value}: {problem}", _env_value_at(pod, index, container, name)
                )


def alloc_conf_problem(value: str) -> str | None:
    """What the allocator rejects in `value`, or None."""
    tokens = _TOKEN.findall(value)
    position = 0
    while position < len(tokens):
        key = tokens[position]
        kind = ALLOC_KEYS.get(key)
        if kind is None:
            hint = " (pairs are key:value)" if "=" in key else ""
            return f"unrecognized option {key!r}{hint}"
        if tokens[position + 1 : position + 2] != [":"]:
            return f"{key} needs ':' and a value"
        position += 2
        if tokens[position : position + 1] == ["["]:
            end = tokens.index("]", position) if "]" in tokens[position:] else len(tokens)
            if end == len(tokens):
                return f"{key}: '[' without ']'"
            position = end + 1
        elif position < len(tokens):
            problem = _alloc_value(key, kind, tokens[position])
            if problem is not None:
                return problem
            position += 1
        else:
            return f"{key} has no value"
        if position < len(tokens):
            if tokens[position] != ",":
                return f"expected ',' after {key}'s value, got {tokens[position]!r}"
            position += 1
    return None


def _alloc_value(key: str, kind: str, value: str) -> str | None:
    if kind == "bool" and value not in ("True", "False"):
        return f"{key}:{value}: the allocator accepts only True or False"
    if kind == "backend" and value not in ("native", "cudaMallocAsync", "hipMallocAsync"):
        return f"backend:{value}: options are native and cudaMallocAsync"
    if kind in ("size", "power2", "divisions") and not value.isdigit():
        return f"{key}:{value} is not a number"
    if kind == "power2" and int(value) & (int(value) - 1):
        return f"{key}:{value} is not a power of 2"
    if kind == "fraction":
        try:
            number = float(value)
        except ValueError:
            return f"{key}:{value} is not a number"
        if not 0 < number < 1:
            return f"{key}:{value} must be in (0.0, 1.0)"
    return None


@pod_rule(
    id="debug-env-left-on",
    severity=WARNING,
    title="Training pods run without debugging switches that slow every step",
    why="CUDA_LAUNCH_BLOCKING=1 makes every kernel launch synchronous (no overlap of compute "
    "with NCCL or data loading); TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every collective with "
    "a shape check of its own. Both are for debugging and cost a large share of throughput "
    "on a long run.",
    fix="Remove the variable once the problem is found (or set it only on a debug run).",
    applies=common.gpu_trainer,
)
def debug_env(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        for name, values in DEBUG_SWITCHES.items():
            value = env.get(name)
            if isinstance(value, str) and value.strip() in values:
                yield Violation(
                    f"{name}={value} slows every step",
                    _env_value_at(pod, index, container, name),
                )


@pod_rule(
    id="gloo-socket-ifname",
    severity=WARNING,
    title="GLOO_SOCKET_IFNAME names interfaces the pod has, exactly",
    why="Gloo (PyTorch's CPU backend, used for barriers and object collectives too) creates "
    "one device per name in GLOO_SOCKET_IFNAME, a comma list of exact interface names: no "
    "NCCL-style '=' or '^' and no prefixes. A name the pod does not have fails "
    "init_process_group ('Unable to find address for').",
    fix="List exact interfaces of the pod (net1, or eth0); keep NCCL's syntax for "
    "NCCL_SOCKET_IFNAME only.",
    applies=common.has_env,
)
def gloo_ifname(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial:
        return
    if pod.spec.get("hostNetwork") is True:
        return  # the node's interfaces, which the manifests do not list
    ranks = common.rank_pod(pod, ctx)
    available = multus.interfaces(ranks.annotations, pod.doc.namespace or "default")
    for index, container in enumerate(pod.containers):
        value = env_of(container).get("GLOO_SOCKET_IFNAME")
        if not isinstance(value, str) or not value.strip() or "$" in value:
            continue
        at = _env_value_at(pod, index, container, "GLOO_SOCKET_IFNAME")
        for name in (item.strip() for item in value.split(",") if item.strip()):
            if name[0] in "=^":
                yield Violation(
                    f"GLOO_SOCKET_IFNAME={value}: Gloo takes exact names, {name!r} is not one",
                    at,
                )
            elif name not in available:
                yield Violation(
                    f"GLOO_SOCKET_IFNAME names {name}, which the pod does not have "
                    f"({', '.join(available)})",
                    at,
                )


@pod_rule(
    id="nccl-fast-path-disabled",
    severity=WARNING,
    title="NCCL keeps its fast paths on GPU pods",
    why="NCCL_P2P_DISABLE=1 stops NVLink and PCIe peer-to-peer between the GPUs of a pod and "
    "NCCL_SHM_DISABLE=1 its shared-memory transport: intra-node traffic then goes through "
    "host memory or the network. NCCL_NET=Socket selects the TCP plugin even where RDMA "
    "devices are reserved. Each is a workaround that silently costs most of the bandwidth.",
    fix="Remove the variable; if a GPU pair really cannot do peer-to-peer (`trainops doctor` "
    "reports p2p-unsupported), fix the node (ACS, IOMMU) rather than the job.",
    applies=common.gpu_pod,
)
def nccl_fast_path(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        gpus = gpu_count(container)
        for name in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
            if gpus > 1 and str(env.get(name, "")).strip() == "1":
                yield Violation(
                    f"{name}=1 on a {gpus}-GPU container: intra-node traffic leaves NVLink/PCIe",
                    _env_value_at(pod, index, container, name),
                )
        net = env.get("NCCL_NET")
        if (
            isinstance(net, str)
            and net.strip().lower() == "socket"
            and common.rdma_resources(container)
        ):
            yield Violation(
                "NCCL_NET=Socket with RDMA devices reserved: NCCL uses TCP sockets",
                _env_value_at(pod, index, container, "NCCL_NET"),
            )
