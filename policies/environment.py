"""A container's environment and arguments as Kubernetes really passes them.

Kubernetes expands `$(NAME)` in env values, command and args, and nothing else:
no `$NAME`, no `${NAME}` (that is a shell's job), no variable defined later in
the env list, no variable an operator appends after the template's own. What
it does not expand reaches the program as literal text. Which variables an
operator or controller adds comes from its source (cited per entry below).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.model import WARNING
from trainops.policy import Context, Violation, pod_rule, sets_any
from trainops.policy.pods import PodTemplate, env_index, gpu_count, mapping, resources

from . import commandline, common

_REFERENCE = re.compile(r"\$(\$)?\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SHELL_VARIABLE = re.compile(
    r"(?<!\$)\$(\{[A-Za-z_][A-Za-z0-9_]*[}:#%/?+=-]|[A-Za-z_][A-Za-z0-9_]*)"
)
_SERVICE_LINK = re.compile(r"_SERVICE_(HOST|PORT)|_PORT(_|$)")
COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
# Variables a controller appends to every container of the pods it creates, by kind of the
# object holding the template; a prefix ends with "_".
INJECTED: dict[str, tuple[str, ...]] = {
    # training-operator v1.9 pkg/controller.v1/*/envvar.go
    "PyTorchJob": (
        "PYTHONUNBUFFERED",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "PET_",
    ),
    "TFJob": ("TF_CONFIG", "PYTHONUNBUFFERED"),
    "XGBoostJob": (
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "WORKER_PORT",
        "WORKER_ADDRS",
        "PYTHONUNBUFFERED",
    ),
    "PaddleJob": ("PADDLE_", "POD_IP", "PYTHONUNBUFFERED"),
    "JAXJob": ("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES", "PROCESS_ID"),
    # mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go; training-operator MPIJob v1
    "MPIJob": ("OMPI_", "I_MPI_", "HYDRA_", "K_MPI_JOB_ROLE"),
    # trainer v2.3.0 pkg/runtime/framework/plugins (torch, mpi, jax)
    "TrainJob": ("PET_", "OMPI_", "JAX_"),
    "TrainingRuntime": ("PET_", "OMPI_", "JAX_"),
    "ClusterTrainingRuntime": ("PET_", "OMPI_", "JAX_"),
    # lws v0.10.0 api/leaderworkerset/v1/leaderworkerset_types.go (and TPU variables)
    "LeaderWorkerSet": ("LWS_", "TPU_"),
}
# Volcano job plugins (pkg/controllers/job/plugins: env, svc, pytorch, mpi).
VOLCANO_INJECTED = ("VK_", "VC_", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "MPI_HOST")


def _injected(pod: PodTemplate, indexed: bool) -> tuple[str, ...]:
    kind = pod.doc.kind
    names: tuple[str, ...] = INJECTED.get(kind, ())
    if kind == "Job" and pod.doc.api_version.startswith("batch.volcano.sh/"):
        names = VOLCANO_INJECTED
    if indexed:
        names = (*names, COMPLETION_INDEX)
    return names


def _matches(name: str, names: tuple[str, ...]) -> bool:
    return any(name == n or (n.endswith("_") and name.startswith(n)) for n in names)


def _indexed(pod: PodTemplate) -> bool:
    """The pods get JOB_COMPLETION_INDEX: an Indexed Job (JobSet's default) or a JobSet."""
    if pod.doc.kind in ("JobSet", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"):
        return True
    if pod.doc.kind not in ("Job", "CronJob") or pod.doc.api_version.startswith("batch.volcano"):
        return False
    node: Any = pod.doc.obj
    for step in pod.path[:-2]:
        node = node.get(step) if isinstance(node, dict) else {}
    return mapping(node).get("completionMode") == "Indexed"


def _job_kind(pod: PodTemplate) -> bool:
    return pod.doc.kind in ("Job", "CronJob") and not pod.doc.api_version.startswith(
        "batch.volcano"
    )


@pod_rule(
    id="env-reference-undefined",
    severity=WARNING,
    title="$(VAR) references name variables Kubernetes can expand there",
    why="Kubernetes expands $(NAME) in an env value only from variables defined earlier in the "
    "list (or by envFrom), and in command and args from the container's whole env. Operators "
    "append their variables (MASTER_ADDR, JOB_COMPLETION_INDEX...) after the template's, and "
    "a NonIndexed Job has no JOB_COMPLETION_INDEX at all. Anything else stays as the literal "
    "text $(NAME): a rank or an address the program cannot parse, or worse, can. Whether "
    "that fails the run depends on the program that reads it.",
    fix="Define the variable before the entry that uses it, reference operator variables in "
    "command/args (or from the program), and use completionMode: Indexed for "
    "$(JOB_COMPLETION_INDEX).",
    applies=common.has_command_or_env,
)
def env_reference_undefined(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    indexed = _indexed(pod)
    injected = _injected(pod, indexed)
    for index, container in enumerate(pod.containers):
        at = pod.container_path(index)
        entries = [e for e in container.get("env") or [] if isinstance(e, dict)]
        names = [str(e.get("name")) for e in entries]
        open_ended = bool(container.get("envFrom"))  # its names are not in the template
        for position, entry in enumerate(entries):
            value = entry.get("value")
            for name in _references(value):
                if name in names[:position] or _SERVICE_LINK.search(name):
                    continue
                where = (*at, "env", position, "value")
                if name in names[position + 1 :]:
                    yield Violation(
                        f"{entry.get('name')} references $({name}), which is defined later in "
                        "the list: Kubernetes leaves it unexpanded",
                        where,
                    )
                elif _matches(name, injected):
                    yield Violation(
                        f"{entry.get('name')} references $({name}), which the controller "
                        "appends after the template's variables: it stays unexpanded here "
                        "(use it in command or args)",
                        where,
                        severity=WARNING,
                    )
                elif name == COMPLETION_INDEX and _job_kind(pod):
                    yield _no_index(entry.get("name"), where)
                elif not open_ended:
                    yield _undefined(name, where)
        # In a shell script an unknown $(name) is the shell's command substitution.
        shell = commandline.runs_shell(container)
        for key in ("command", "args"):
            for position, word in enumerate(container.get(key) or []):
                for name in _references(word):
                    if name in names or _matches(name, injected) or _SERVICE_LINK.search(name):
                        continue
                    where = (*at, key, position)
                    if name == COMPLETION_INDEX and _job_kind(pod):
                        yield _no_index(key, where)
                    elif not open_ended and not shell:
                        yield _undefined(name, where)


def _references(value: Any) -> list[str]:
    if not isinstance(value, str) or "$(" not in value:
        return []
    return [m.group(2) for m in _REFERENCE.finditer(value) if m.group(1) is None]


def _no_index(what: Any, where: tuple[Any, ...]) -> Violation:
    return Violation(
        f"{what} uses $(JOB_COMPLETION_INDEX), but only an Indexed Job sets it "
        "(completionMode is not Indexed)",
        where,
    )


def _undefined(name: str, where: tuple[Any, ...]) -> Violation:
    return Violation(
        f"$({name}) names no variable of the container: Kubernetes passes it as literal text",
        where,
        severity=WARNING,
    )


@pod_rule(
    id="args-shell-variable",
    severity=WARNING,
    title="Shell variables appear only where a shell expands them",
    why="Kubernetes runs command and args without a shell and expands only $(NAME), in them "
    "and in env values: '--node-rank=${JOB_COMPLETION_INDEX}', '--master_addr $MASTER_ADDR' "
    "or an env value '$HF_TOKEN' reach the program as those literal characters (nor does "
    "mpirun expand -x NAME=$VALUE: it copies the value as written). Words a shell later in "
    "the command line runs (mpirun ... bash -c '...') are that shell's to expand. What a "
    "literal placeholder does depends on the program that reads it.",
    fix="Write $(NAME) (Kubernetes expands it from the container's env), or run the command "
    "through sh -c 'exec ...' so that the shell expands it. A template meant for envsubst or "
    "Helm must be rendered before it is applied.",
    applies=common.has_command_or_env,
)
def args_shell_variable(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        for where, word in _words_and_values(container):
            match = _SHELL_VARIABLE.search(word)
            if match is not None:
                yield Violation(
                    f"{word!r}: no shell expands {match.group(0).rstrip('}:#%/?+=-')}; "
                    "the program gets it literally",
                    (*pod.container_path(index), *where),
                )


def _words_and_values(container: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """command and args elements (unless a shell or an unknown entrypoint reads them) and
    literal env values, with their paths in the container."""
    if container.get("command") and not commandline.runs_shell(container):
        words = [
            ((key, position), word)
            for key in ("command", "args")
            for position, word in enumerate(container.get(key) or [])
        ]
        for where, word in words:
            if not isinstance(word, str):
                continue
            if commandline.program(word) in commandline.SHELLS:
                break  # a shell later on the line (mpirun ... bash -c) expands the rest
            yield where, word
    for position, entry in enumerate(container.get("env") or []):
        value = entry.get("value") if isinstance(entry, dict) else None
        if isinstance(value, str) and not any(c.isspace() for c in value.strip()):
            # A setting; a value with blanks or lines is a script some shell runs later.
            yield ("env", position, "value"), value


@pod_rule(
    id="gpu-visibility-env",
    severity=WARNING,
    title="GPU visibility variables agree with the GPUs the pod holds",
    why="The NVIDIA device plugin sets NVIDIA_VISIBLE_DEVICES for containers that request "
    "GPUs; in one that requests none, NVIDIA_VISIBLE_DEVICES=all (or a list) makes the "
    "container runtime expose GPUs other pods were given. CUDA_VISIBLE_DEVICES listing fewer "
    "devices than the processes a pod starts leaves the extra ranks with 'invalid device "
    "ordinal'.",
    fix="Request GPUs (nvidia.com/gpu) instead of setting NVIDIA_VISIBLE_DEVICES, and drop "
    "CUDA_VISIBLE_DEVICES: the device plugin already limits the container to its GPUs.",
    applies=common.has_env,
)
def gpu_visibility(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        env = {e.get("name"): e.get("value") for e in container.get("env") or []}
        gpus = gpu_count(container)
        visible = env.get("NVIDIA_VISIBLE_DEVICES")
        exposes = isinstance(visible, str) and visible.strip().lower() not in ("", "void", "none")
        node_agent = pod.doc.kind == "DaemonSet"  # GPU system agents (MPS, DCGM) see all GPUs
        if exposes and not gpus and not node_agent:
            yield Violation(
                f"NVIDIA_VISIBLE_DEVICES={visible} without a GPU request exposes GPUs "
                "the device plugin gave to other pods",
                _env_at(pod, index, container, "NVIDIA_VISIBLE_DEVICES"),
            )
        cuda = env.get("CUDA_VISIBLE_DEVICES")
        if not isinstance(cuda, str) or not cuda.strip() or "$" in cuda:
            continue
        devices = len([d for d in cuda.split(",") if d.strip()])
        processes, _ = commandline.flag(
            commandline.words(container), "--nproc-per-node", "--nproc_per_node"
        )
        if processes is not None and processes.isdigit() and int(processes) > devices:
            yield Violation(
                f"CUDA_VISIBLE_DEVICES={cuda} shows {devices} device(s) to {processes} "
                "processes per node",
                _env_at(pod, index, container, "CUDA_VISIBLE_DEVICES"),
            )
        elif gpus and devices < gpus:
            yield Violation(
                f"CUDA_VISIBLE_DEVICES={cuda} hides {gpus - devices} of the container's "
                f"{gpus} GPUs",
                _env_at(pod, index, container, "CUDA_VISIBLE_DEVICES"),
                severity=WARNING,
            )


def _env_at(pod: PodTemplate, index: int, container: dict[str, Any], name: str) -> tuple:
    return (*pod.container_path(index), "env", env_index(container, name), "value")


@pod_rule(
    id="resource-quantity-empty",
    severity=WARNING,
    title="Every resource a container names has a quantity",
    why="`nvidia.com/gpu:` with nothing after it is null: the API server drops the entry "
    "(a custom resource's null fields are pruned, a built-in pod's decode as unset), so the "
    "container runs without the GPU or device it names and nothing reports it.",
    fix="Write the quantity (nvidia.com/gpu: 8), or render the template that was meant to "
    "fill it in.",
    applies=sets_any("resources"),
)
def resource_quantity_empty(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        for section in ("limits", "requests"):
            quantities = resources(container, section)
            if None not in quantities.values():
                continue
            for name, value in quantities.items():
                if value is None:
                    yield Violation(
                        f"{section}.{name} has no value: the container gets no {name}",
                        (*pod.container_path(index), "resources", section, name),
                    )
