"""Launcher command lines other than torchrun's against the job's shape: `accelerate launch`
(and the config file it reads), horovodrun, the DeepSpeed launcher and Open MPI's mpirun,
and what the MPI operators expect of the containers they start ranks in.

Facts from accelerate v1.13.0 (`commands/launch.py`, `utils/launch.py`) and v1.14.0 (the
config file: `commands/config/config_args.py`, the FSDP plugin's checks in
`utils/dataclasses.py`), Horovod v0.28.1 (`horovod/runner`: horovodrun), DeepSpeed
v0.19.5 (`launcher/runner.py`), Open MPI v4.1.8 (`orte/orted/orted_submit.c`), the
Training Operator v1.9.2 MPIJob controller (`pkg/controller.v1/mpi`) and the MPI
Operator v0.8.0 API (`pkg/apis/kubeflow/v2beta1`); each rule's why names its source.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, env_of, gpu_count, is_int, mapping

from . import commandline, common, launch

LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")
MIXED_PRECISION = ("no", "fp16", "bf16", "fp8")
# The DeepSpeed multi-node launchers accelerate hands over to that need no ssh.
SSHLESS_DEEPSPEED = ("standard", "nossh")
DEEPSPEED_HOSTFILE = "/job/hostfile"  # runner.py DLTS_HOSTFILE
# Images whose Dockerfile sets no USER: their processes run as root unless the pod says
# otherwise.
ROOT_IMAGES = (
    "nvcr.io/nvidia/pytorch",
    "nvcr.io/nvidia/tensorflow",
    "nvcr.io/nvidia/nemo",
    "pytorch/pytorch",
    "horovod/horovod",
    "deepspeed/deepspeed",
)
HOSTFILE_FLAGS = (
    "--hostfile",
    "-hostfile",
    "--machinefile",
    "-machinefile",
    "-H",
    "--host",
    "-host",
)
# A worker that only waits for the launcher (kubectl exec or SSH).
_IDLE = re.compile(r"\b(sleep|sshd|tail|pause)\b")
_TRAINS = re.compile(r"^(python[0-9.]*|torchrun|accelerate|deepspeed|mpirun|mpiexec|horovodrun)$")


def _literal_int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _subcommand(words: list[str], program: str, sub: str | None) -> list[str] | None:
    """The words after `program [sub]` (or `python -m program`), None when not run."""
    for index, word in enumerate(words):
        if commandline.program(word) == program:
            rest = words[index + 1 :]
        elif word == "-m" and index + 1 < len(words) and words[index + 1] == program:
            rest = words[index + 2 :]
        else:
            continue
        if sub is None:
            return rest
        if rest[:1] == [sub]:
            return rest[1:]
    return None


def _pods_running(pod: PodTemplate, ctx: Context, program: str, sub: str | None) -> int | None:
    """How many pods of `pod`'s job run `program` (None when a count is not a number)."""
    total = 0
    for other in ctx.pods(pod.doc):
        if any(
            _subcommand(commandline.words(c), program, sub) is not None for c in other.containers
        ):
            if other.replicas is None:
                return None
            total += other.replicas
    return total


def _flag(words: list[str], name: str) -> str | None:
    """accelerate and DeepSpeed spell flags with underscores; accept hyphens too."""
    value, _ = commandline.flag(words, name, name.replace("_", "-"))
    return value


def _has(words: list[str], name: str) -> bool:
    return commandline.has_flag(words, name, name.replace("_", "-"))


@pod_rule(
    id="accelerate-shape",
    severity=WARNING,
    title="accelerate launch is sized for the job's pods and GPUs",
    why="accelerate launch builds torchrun's arguments itself (accelerate v1.13.0 "
    "utils/launch.py) and ignores the PET_* variables an operator sets: --num_machines "
    "defaults to 1, so in a job of several pods each pod trains alone; --num_processes is the "
    "total over all machines, each pod starts num_processes // num_machines; a literal "
    "--machine_rank gives every pod of a shared template the same rank; without a reachable "
    "--main_process_ip the pods rendezvous with themselves. --mixed_precision accepts no, "
    "fp16, bf16 or fp8.",
    fix="Pass --num_machines <pods> --num_processes <pods x GPUs per pod> --machine_rank "
    "$(RANK or the pod index) --main_process_ip $(MASTER_ADDR) --main_process_port "
    "$(MASTER_PORT), or run the script under torchrun, which reads the operator's variables.",
    applies=common.trains,
)
def accelerate_shape(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.runtime is not None:
        return  # a TrainJob: the Trainer's plugin passes the shape
    for index, container in enumerate(pod.containers):
        words = _subcommand(commandline.words(container), "accelerate", "launch")
        if words is None:
            continue
        at = commandline_at(pod, index, container)
        precision = _flag(words, "--mixed_precision")
        if precision is not None and "$" not in precision and precision not in MIXED_PRECISION:
            yield Violation(
                f"--mixed_precision {precision}: accelerate accepts {', '.join(MIXED_PRECISION)}",
                at,
            )
        pods = _pods_running(pod, ctx, "accelerate", "launch")
        if pods is None or pods < 2:
            continue
        config = _local_config(pod, ctx, index)
        yield from _accelerate_multinode(pod, container, words, pods, at, config)


def _setting(
    words: list[str], name: str, config: AccelerateConfig | None
) -> tuple[str | None, str]:
    """A launch setting from the command line, else from the config file accelerate reads,
    and how to name it ('--name value', or 'name: value in <ConfigMap>')."""
    value = _flag(words, f"--{name}")
    if value is not None or config is None or config.config.get(name) is None:
        return value, f"--{name} {value}"
    value = str(config.config[name])
    return value, f"{name}: {value} in {config.where}"


def _accelerate_multinode(
    pod: PodTemplate,
    container: dict[str, Any],
    words: list[str],
    pods: int,
    at: tuple,
    config: AccelerateConfig | None = None,
) -> Iterator[Violation]:
    configured = _has(words, "--config_file") or config is not None
    machines_text, said = _setting(words, "num_machines", config)
    machines = _literal_int(machines_text)
    if machines_text is None:
        if not configured:
            yield Violation(
                f"{pods} pods run accelerate launch without --num_machines (default 1): "
                "each pod trains its own copy",
                at,
                severity=WARNING,
            )
        elif config is not None:
            yield Violation(
                f"{pods} pods run accelerate launch and neither --num_machines nor "
                f"{config.where} sets num_machines (default 1): each pod trains its own copy",
                at,
                severity=WARNING,
            )
        return
    if machines is not None and machines != pods:
        yield Violation(f"{said}, but {pods} pods run accelerate launch", at)
    if machines is not None and machines < 2:
        return
    rank, said = _setting(words, "machine_rank", config)
    backend = _setting(words, "rdzv_backend", config)[0] or "static"
    if not said.startswith("--") and backend != "static":
        rank = None  # torchrun's dynamic rendezvous assigns the node ranks itself
    if _literal_int(rank) is not None and (pod.replicas or 1) > 1:
        yield Violation(
            f"{said}, in a template {pod.replicas} pods share: every one claims that rank",
            at,
        )
    address, said = _setting(words, "main_process_ip", config)
    if address is None and (not configured or config is not None):
        yield Violation(
            "--num_machines > 1 without --main_process_ip: no pod knows where rank 0 is", at
        )
    elif address is not None and address.split(":")[0] in LOOPBACK:
        yield Violation(f"{said} points every pod at itself", at)
    total = _literal_int(_setting(words, "num_processes", config)[0])
    if total is not None and machines and pod.gpus:
        per_pod = total // machines
        if per_pod != pod.gpus:
            yield Violation(
                f"--num_processes {total} over {machines} machines starts {per_pod} processes "
                f"per pod for {pod.gpus} GPUs (num_processes is the total, not per machine)",
                at,
            )


ACCELERATE_MODES = ("--cpu", "--multi_gpu", "--tpu", "--use_deepspeed", "--use_fsdp")


@pod_rule(
    id="accelerate-launch-flags",
    severity=ERROR,
    source="https://github.com/huggingface/accelerate/blob/v1.13.0/src/accelerate/commands/launch.py#L1197-L1206",
    title="accelerate launch gets one distributed mode and the processes it needs",
    why="accelerate launch's _validate_launch_command raises ValueError when more than one "
    "of --cpu, --multi_gpu, --tpu, --use_deepspeed and --use_fsdp is given, when "
    "--multi_gpu comes with --num_processes below 2, and when --use_parallelism_config "
    "comes without --use_fsdp and --fsdp_version 2. The launcher exits before any process "
    "starts.",
    fix="Pick one mode (--use_deepspeed or --use_fsdp already imply several GPUs), give "
    "--multi_gpu at least two processes, and use the parallelism config with FSDP2.",
    applies=common.trains,
)
def accelerate_launch_flags(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        words = _subcommand(commandline.words(container), "accelerate", "launch")
        if words is None:
            continue
        at = commandline_at(pod, index, container)
        own = _accelerate_own(words)  # the script's own flags come after it
        modes = [mode for mode in ACCELERATE_MODES if _has(own, mode)]
        if len(modes) > 1:
            yield Violation(f"{' and '.join(modes)} together: accelerate raises ValueError", at)
        processes = _literal_int(_flag(own, "--num_processes"))
        if _has(own, "--multi_gpu") and processes is not None and processes < 2:
            yield Violation(f"--multi_gpu with --num_processes {processes}: at least 2", at)
        if _has(own, "--use_parallelism_config") and (
            not _has(own, "--use_fsdp") or _flag(own, "--fsdp_version") != "2"
        ):
            yield Violation("--use_parallelism_config without --use_fsdp --fsdp_version 2", at)


def commandline_at(pod: PodTemplate, index: int, container: dict[str, Any]) -> tuple:
    """Where a container's launch command is written: its args when it has them."""
    key = "args" if container.get("args") else "command"
    return (*pod.container_path(index), key)


@pod_rule(
    id="deepspeed-multinode-launcher",
    severity=WARNING,
    title="The DeepSpeed launcher reaches every node without ssh",
    why="The deepspeed launcher (v0.19.5 launcher/runner.py) reads the nodes from a hostfile "
    "(default /job/hostfile): without one it trains 'with local resources only' on "
    "127.0.0.1, so each pod of a multi-pod job trains alone, and --num_nodes > 1 raises. With "
    "a hostfile it checks passwordless ssh and starts the ranks over pdsh (or mpirun): pods "
    "of a PyTorchJob, JobSet or Indexed Job run no sshd. --no_ssh makes each pod start its "
    "own ranks and needs --node_rank; --num_gpus/--num_nodes cannot be combined with "
    "--include/--exclude. accelerate launch --use_deepspeed on several machines defaults to "
    "the pdsh launcher too.",
    fix="In pods that each start their own ranks, launch with torchrun (DeepSpeed reads its "
    "variables), or pass deepspeed --no_ssh --node_rank $(RANK) --hostfile <mounted file> "
    "--master_addr $(MASTER_ADDR); with accelerate add --deepspeed_multinode_launcher "
    "standard. Use the pdsh/MPI launchers only from an MPIJob launcher.",
    applies=common.trains,
)
def deepspeed_launcher(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.runtime is not None or common.is_mpi_launcher(pod):
        return  # one launcher that reaches the workers through the operator's hostfile
    for index, container in enumerate(pod.containers):
        words = commandline.words(container)
        at = commandline_at(pod, index, container)
        deepspeed = _subcommand(words, "deepspeed", None)
        if deepspeed is not None:
            yield from _deepspeed(pod, ctx, container, deepspeed, at)
            continue
        accelerate = _subcommand(words, "accelerate", "launch")
        if accelerate is None or not _has(accelerate, "--use_deepspeed"):
            continue
        machines = _literal_int(_flag(accelerate, "--num_machines"))
        launcher = _flag(accelerate, "--deepspeed_multinode_launcher") or "pdsh"
        if machines is not None and machines > 1 and launcher not in SSHLESS_DEEPSPEED:
            yield Violation(
                f"accelerate --use_deepspeed on {machines} machines with the {launcher} "
                "launcher: it reaches the other pods over ssh",
                at,
            )


def _deepspeed(
    pod: PodTemplate, ctx: Context, container: dict[str, Any], words: list[str], at: tuple
) -> Iterator[Violation]:
    nodes = _literal_int(_flag(words, "--num_nodes"))
    filtered = _has(words, "--include") or _has(words, "--exclude")
    if filtered and (_has(words, "--num_nodes") or _has(words, "--num_gpus")):
        yield Violation("--num_nodes/--num_gpus together with --include/--exclude", at)
    hostfile = _flag(words, "--hostfile") or (
        DEEPSPEED_HOSTFILE if common.mount_for(container, DEEPSPEED_HOSTFILE) else None
    )
    no_ssh = _has(words, "--no_ssh")
    if hostfile is None:
        if nodes is not None and nodes > 1:
            yield Violation(f"--num_nodes {nodes} without a hostfile: the launcher raises", at)
        pods = _pods_running(pod, ctx, "deepspeed", None)
        if pods is not None and pods > 1:
            yield Violation(
                f"{pods} pods run the deepspeed launcher without a hostfile: each trains "
                "alone with its local GPUs",
                at,
            )
        return
    if not no_ssh:
        launcher = _flag(words, "--launcher") or "pdsh"
        yield Violation(
            f"deepspeed with hostfile {hostfile} starts ranks over ssh ({launcher}); "
            "these pods run no sshd",
            at,
        )
        return
    rank = _flag(words, "--node_rank")
    if rank is None:
        yield Violation("--no_ssh without --node_rank: the launcher asserts it is set", at)
    elif _literal_int(rank) is not None and (pod.replicas or 1) > 1:
        yield Violation(f"--node_rank {rank} in a template {pod.replicas} pods share", at)


@pod_rule(
    id="deepspeed-launcher-gpus",
    severity=ERROR,
    source="https://github.com/deepspeedai/DeepSpeed/blob/v0.19.5/deepspeed/launcher/runner.py#L462-L533",
    title="The DeepSpeed launcher starts one rank per GPU the container has",
    why="Without a hostfile the deepspeed launcher counts the local accelerators and raises "
    "'Unable to proceed, no GPU resources available' when there are none; --num_gpus N "
    "makes it start ranks on devices 0..N-1 whatever the container holds, so with more "
    "than the container's GPUs the extra ranks fail on an invalid device (and with fewer, "
    "GPUs sit idle).",
    fix="Request the GPUs in the container's limits and leave --num_gpus out (or equal to "
    "those GPUs).",
    when={
        "error": "no GPU in the container, or --num_gpus above its GPUs",
        "warning": "--num_gpus below the container's GPUs",
    },
    applies=common.trains,
)
def deepspeed_launcher_gpus(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if common.is_mpi_launcher(pod):
        return  # its ranks run in the workers
    for index, container in enumerate(pod.containers):
        words = _subcommand(commandline.words(container), "deepspeed", None)
        if words is None:
            continue
        at = commandline_at(pod, index, container)
        gpus = gpu_count(container)
        if _has(words, "--hostfile") or common.mount_for(container, DEEPSPEED_HOSTFILE):
            continue
        if not launch.sees_gpus(pod, container) and "DS_ACCELERATOR" not in env_of(container):
            yield Violation(
                "the deepspeed launcher in a container with no GPU: it raises 'no GPU "
                "resources available'",
                at,
            )
            continue
        wanted = _literal_int(_flag(words, "--num_gpus"))
        if wanted is not None and gpus and wanted != gpus:
            yield Violation(
                f"--num_gpus {wanted} but the container has {gpus} GPUs",
                at,
                severity=ERROR if wanted > gpus else WARNING,
            )


def _mpirun(container: dict[str, Any]) -> list[str] | None:
    words = commandline.words(container)
    for name in ("mpirun", "mpiexec", "orterun"):
        found = _subcommand(words, name, None)
        if found is not None:
            return found
    return None


def _implementation(pod: PodTemplate, ctx: Context) -> str:
    job = common.mpi_job(pod, ctx)
    return job.implementation if job is not None else "OpenMPI"


def _uid(pod: PodTemplate, container: dict[str, Any]) -> Any:
    own = mapping(container.get("securityContext"))
    return own.get("runAsUser", mapping(pod.spec.get("securityContext")).get("runAsUser"))


def _non_root(pod: PodTemplate, container: dict[str, Any]) -> bool:
    own = mapping(container.get("securityContext")).get("runAsNonRoot")
    return (
        own if own is not None else mapping(pod.spec.get("securityContext")).get("runAsNonRoot")
    ) is True


@pod_rule(
    id="mpirun-as-root",
    severity=ERROR,
    source="https://docs.open-mpi.org/en/v5.0.x/man-openmpi/man1/mpirun.1.html",
    when={
        "error": "the launcher runs as uid 0 (runAsUser: 0)",
        "warning": "no runAsUser, in an image known to run as root",
    },
    title="Open MPI's mpirun may run as the launcher's user",
    why="Open MPI's mpirun refuses to start as root unless given --allow-run-as-root or both "
    "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (orte/orted/"
    "orted_submit.c); the launcher exits at once and the job fails. The MPI Operator's own "
    "examples pass the flag for their root images.",
    fix="Run the launcher as a non-root user (runAsUser, with sshAuthMountPath in its home), "
    "or add --allow-run-as-root to mpirun.",
    applies=common.trains,
)
def mpirun_as_root(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        words = _mpirun(container)
        if words is None or "--allow-run-as-root" in words or "-allow-run-as-root" in words:
            continue
        if _implementation(pod, ctx) != "OpenMPI":
            continue
        env = env_of(container)
        if (
            env.get("OMPI_ALLOW_RUN_AS_ROOT") == "1"
            and env.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1"
        ):
            continue
        uid = _uid(pod, container)
        at = commandline_at(pod, index, container)
        if uid == 0:
            yield Violation("mpirun runs as root (runAsUser: 0) without --allow-run-as-root", at)
        elif uid is None and not _non_root(pod, container) and _root_image(container):
            yield Violation(
                f"mpirun in {container.get('image')}, which runs as root, without "
                "--allow-run-as-root",
                at,
                severity=WARNING,
            )


def _root_image(container: dict[str, Any]) -> bool:
    image = str(container.get("image", "")).split("@")[0].rsplit(":", 1)[0]
    image = image.removeprefix("docker.io/").removeprefix("library/")
    return image in ROOT_IMAGES


@pod_rule(
    id="mpirun-hostfile",
    severity=WARNING,
    title="mpirun names the operator's hostfile",
    why="The MPI operators tell Open MPI where their hostfile is with "
    "OMPI_MCA_orte_default_hostfile, an ORTE parameter. Open MPI 5 replaced ORTE with PRRTE "
    "and ignores it without a word: mpirun finds no hostfile, starts every rank on the "
    "launcher and the workers idle while the job reports success (mpi-operator#842, "
    "trainer#4028). A hostfile named on the command line works with Open MPI 4 and 5.",
    fix="Add --hostfile /etc/mpi/hostfile to mpirun (where both operators mount it).",
    applies=common.is_mpi_launcher,
)
def mpirun_hostfile(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if _implementation(pod, ctx) != "OpenMPI":
        return
    for index, container in enumerate(pod.containers):
        words = _mpirun(container)
        if words is None or commandline.has_flag(words, *HOSTFILE_FLAGS):
            continue
        if "PRTE_MCA_prte_default_hostfile" in env_of(container):
            continue
        yield Violation(
            "mpirun names no hostfile: with Open MPI 5 the operator's "
            "OMPI_MCA_orte_default_hostfile is ignored and every rank runs on the launcher",
            commandline_at(pod, index, container),
        )


def _trains_itself(container: dict[str, Any]) -> bool:
    words = commandline.words(container)
    if not words or _IDLE.search(" ".join(words)):
        return False
    return any(_TRAINS.match(commandline.program(w)) for w in words[:3])


@pod_rule(
    id="mpi-worker-command",
    severity=ERROR,
    source="https://github.com/kubeflow/mpi-operator/blob/v0.8.0/pkg/controller/mpi_job_controller.go#L1502-L1505",
    title="MPI workers wait for the launcher instead of training on their own",
    why="mpirun on the launcher starts every rank in the workers: the Training Operator's "
    "MPIJob v1 through kubectl exec into a worker that only sleeps (it replaces an empty "
    "command with sleep 365d), the MPI Operator v2beta1 and Trainer v2 MPI runtimes over "
    "ssh into a worker that runs sshd. A worker whose command runs the training itself "
    "trains alone or exits, and the launcher cannot start ranks in it.",
    fix="Leave the worker's command empty (v1), or run sshd in it (/usr/sbin/sshd -De, "
    "v2beta1 and Trainer MPI runtimes); the training command belongs to the launcher's "
    "mpirun.",
    applies=common.trains,
)
def mpi_worker_command(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    roles = common.mpi_roles(pod)
    if roles is None or pod.role != roles[1]:
        return
    for index, container in enumerate(pod.containers[:1]):
        if _trains_itself(container):
            yield Violation(
                f"the {pod.role} container runs {' '.join(commandline.words(container)[:3])} "
                "itself; mpirun on the launcher starts the ranks in it",
                commandline_at(pod, index, container),
            )


@resource_rule(
    id="mpi-main-container",
    severity=ERROR,
    source=(
        "https://github.com/kubeflow/trainer/blob/v1.9.0/pkg/controller.v1/mpi/mpijob_controller.go#L1084-L1088",
        "https://github.com/kubeflow/trainer/blob/v1.9.0/pkg/controller.v1/mpi/mpijob_controller.go#L1228-L1236",
    ),
    title="An MPIJob v1's first container is the one that runs MPI",
    why="The Training Operator's MPIJob v1 controller edits containers[0] of the launcher "
    "(hostfile, kubectl-exec agent) and the workers, and starts ranks with 'kubectl exec "
    "POD' without --container unless spec.mainContainer names one (v1.9.2 "
    "pkg/controller.v1/mpi): with a sidecar listed first, mpirun lacks its agent and ranks "
    "start in the sidecar, without MPI and without GPUs.",
    fix="List the MPI container first in the launcher and worker templates, or set "
    "spec.mainContainer to its name.",
    kinds=("MPIJob",),
)
def mpi_main_container(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not doc.api_version.endswith("/v1"):
        return
    main = mapping(doc.obj.get("spec")).get("mainContainer")
    for pod in ctx.pods(doc):
        containers = pod.containers
        if len(containers) < 2:
            continue
        if isinstance(main, str) and main:
            if not any(c.get("name") == main for c in containers):
                yield Violation(
                    f"spec.mainContainer {main!r} is not a container of the {pod.role}",
                    ("spec", "mainContainer"),
                )
            continue
        works = [c for c in containers if _mpirun(c) is not None or gpu_count(c) > 0]
        if works and containers[0] not in works:
            yield Violation(
                f"the {pod.role}'s first container {containers[0].get('name')!r} is not the "
                f"MPI one ({works[0].get('name')!r}) and spec.mainContainer is unset",
                (*pod.path, "containers", 0, "name"),
            )


@resource_rule(
    id="mpi-launcher-start-policy",
    severity=WARNING,
    title="An MPIJob launcher that cannot retry waits for its workers",
    why="With launcherCreationPolicy AtStartup (the MPI Operator's default) the launcher "
    "starts with the workers and its mpirun connects to pods that may still be pulling "
    "their image (v0.8.0 pkg/apis/kubeflow/v2beta1/types.go). A launcher that may not "
    "retry (restartPolicy Never and backoffLimit 0) then fails the whole job on a slow "
    "worker.",
    fix="Set spec.launcherCreationPolicy: WaitForWorkersReady, or let the launcher retry.",
    kinds=("MPIJob",),
)
def mpi_launcher_start_policy(doc: Document, ctx: Context) -> Iterator[Violation]:
    if not doc.api_version.endswith("/v2beta1"):
        return
    spec = mapping(doc.obj.get("spec"))
    if spec.get("launcherCreationPolicy", "AtStartup") != "AtStartup":
        return
    launcher = mapping(mapping(spec.get("mpiReplicaSpecs")).get("Launcher"))
    backoff = mapping(spec.get("runPolicy")).get("backoffLimit")
    if launcher.get("restartPolicy") == "Never" and is_int(backoff) and backoff == 0:
        yield Violation(
            "the launcher never retries (restartPolicy Never, backoffLimit 0) and starts "
            "before the workers are ready",
            ("spec", "mpiReplicaSpecs", "Launcher", "restartPolicy"),
        )


DEEPSPEED_RUNNER = "https://github.com/deepspeedai/DeepSpeed/blob/v0.19.5/deepspeed/launcher/"
# The backends runner.py knows (constants.py; it lower-cases --launcher first).
DEEPSPEED_LAUNCHERS = ("pdsh", "openmpi", "mpich", "impi", "slurm", "mvapich")
# Those that start every slot of the hostfile and refuse to be narrowed.
DEEPSPEED_MPI_LAUNCHERS = ("openmpi", "mpich", "impi", "mvapich")


def _deepspeed_hosts(pod: PodTemplate, ctx: Context) -> int | None:
    """Hosts of the operator's hostfile the launcher pod reads (None: not an MPI launcher,
    or a count that is not a number)."""
    job = common.mpi_job(pod, ctx)
    if job is None or job.ranks is None or job.ranks.replicas is None:
        return None
    return job.ranks.replicas + (1 if job.launcher_computes is True else 0)


@pod_rule(
    id="deepspeed-launcher-backend",
    severity=ERROR,
    source=(
        DEEPSPEED_RUNNER + "runner.py#L443-L444",
        DEEPSPEED_RUNNER + "runner.py#L535-L536",
        DEEPSPEED_RUNNER + "runner.py#L521-L545",
        DEEPSPEED_RUNNER + "runner.py#L578-L592",
        DEEPSPEED_RUNNER + "multinode_runner.py#L143-L148",
        DEEPSPEED_RUNNER + "multinode_runner.py#L203-L209",
        DEEPSPEED_RUNNER + "multinode_runner.py#L275-L281",
        DEEPSPEED_RUNNER + "multinode_runner.py#L439-L444",
    ),
    when={
        "error": "the launch is multi-node for certain (an MPI launcher pod whose hostfile "
        "lists two or more hosts, or --force_multi): the launcher raises; "
        "--elastic_training without --master_addr or with --no_local_rank (asserted)",
        "warning": "--include/--exclude with an MPI backend where the hosts that remain are "
        "not known offline: it raises when more than one remains",
    },
    title="The deepspeed launcher's backend and elastic mode accept the other flags given",
    why="With a hostfile of several hosts (or --force_multi) and without --no_ssh, the "
    "deepspeed launcher hands the ranks to the --launcher backend. The openmpi, mpich, impi "
    "and mvapich backends start every slot of the hostfile and raise ValueError on "
    "--num_nodes or --num_gpus ('does not support limiting num nodes/gpus') and on "
    "--include/--exclude ('does not support worker include/exclusion'); a --launcher other "
    "than pdsh, openmpi, mpich, impi, slurm or mvapich raises NotImplementedError. "
    "--elastic_training asserts a --master_addr and no --no_local_rank. The launcher exits "
    "before any rank starts.",
    fix="With an MPI backend drop --num_nodes/--num_gpus/--include/--exclude and size the "
    "job with the hostfile (the operator's slotsPerWorker and worker replicas); spell "
    "--launcher as one of pdsh, openmpi, mpich, impi, slurm, mvapich; give --master_addr "
    "to --elastic_training.",
    applies=common.trains,
)
def deepspeed_launcher_backend(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        words = _subcommand(commandline.words(container), "deepspeed", None)
        if words is None:
            continue
        words = _deepspeed_own(words)
        at = commandline_at(pod, index, container)
        if _has(words, "--elastic_training"):
            if not _flag(words, "--master_addr"):
                yield Violation(
                    "--elastic_training without --master_addr: the launcher asserts it is given",
                    at,
                )
            if _has(words, "--no_local_rank"):
                yield Violation(
                    "--elastic_training with --no_local_rank: the launcher asserts they are not "
                    "combined",
                    at,
                )
        launcher = _flag(words, "--launcher")
        if launcher is None or "$" in launcher or "{" in launcher or _has(words, "--no_ssh"):
            continue
        if not (_has(words, "--hostfile") or common.mount_for(container, DEEPSPEED_HOSTFILE)):
            continue  # local resources only: the backend is never used
        backend = launcher.lower()
        nodes_text, gpus_text = _flag(words, "--num_nodes"), _flag(words, "--num_gpus")
        if any(v is not None and "$" in v for v in (nodes_text, gpus_text)):
            continue
        nodes = _signed_int(nodes_text)
        hosts = _deepspeed_hosts(pod, ctx)
        if nodes is not None and nodes > 0 and hosts is not None:
            hosts = min(hosts, nodes)
        multi = _has(words, "--force_multi") or (hosts is not None and hosts > 1)
        if backend not in DEEPSPEED_LAUNCHERS:
            if multi:
                yield Violation(
                    f"--launcher {launcher}: the deepspeed launcher knows "
                    f"{', '.join(DEEPSPEED_LAUNCHERS)} and raises NotImplementedError",
                    at,
                )
            continue
        if backend not in DEEPSPEED_MPI_LAUNCHERS:
            continue
        limits = [
            name
            for name, value in (("--num_nodes", nodes_text), ("--num_gpus", gpus_text))
            if value is not None and _signed_int(value) != -1
        ]
        if limits and multi:
            yield Violation(
                f"{' and '.join(limits)} with --launcher {launcher}: the backend raises "
                "'does not support limiting num nodes/gpus'",
                at,
            )
        filters = [name for name in ("--include", "--exclude") if _has(words, name)]
        if filters and not limits and (multi or hosts is None or hosts > 1):
            yield Violation(
                f"{' and '.join(filters)} with --launcher {launcher}: the backend raises "
                "'does not support worker include/exclusion' when more than one host remains",
                at,
                severity=ERROR if _has(words, "--force_multi") else WARNING,
            )


def _signed_int(value: str | None) -> int | None:
    if value is None:
        return None
    text = value[1:] if value.startswith("-") else value
    return int(value) if text.isdigit() else None


def _deepspeed_own(words: list[str]) -> list[str]:
    """The deepspeed launcher's own flags: the words before the user script (the first
    word naming a .py file; all words when there is none)."""
    script = next(
        (i for i, w in enumerate(words) if w.endswith(".py") and not w.startswith("-")), None
    )
    return words if script is None else words[:script]


# -- accelerate's config file (accelerate launch --config_file, or the default path) ----------

ACCELERATE_TAG = "https://github.com/huggingface/accelerate/blob/v1.14.0/src/accelerate/"
ACCELERATE_CONFIG_ARGS = ACCELERATE_TAG + "commands/config/config_args.py"
ACCELERATE_LAUNCH = ACCELERATE_TAG + "commands/launch.py"
ACCELERATE_UTILS_LAUNCH = ACCELERATE_TAG + "utils/launch.py"
ACCELERATE_DATACLASSES = ACCELERATE_TAG + "utils/dataclasses.py"
# ClusterConfig's fields (config_args.py): from_yaml_file/from_json_file raise on any other
# key, after process_config has rewritten the old fp16 and dynamo_backend keys.
ACCELERATE_CONFIG_KEYS = frozenset(
    "compute_environment distributed_type mixed_precision use_cpu debug num_processes "
    "machine_rank num_machines gpu_ids main_process_ip main_process_port rdzv_backend "
    "same_network main_training_function enable_cpu_affinity fp8_config deepspeed_config "
    "fsdp_config parallelism_config megatron_lm_config mpirun_config downcast_bf16 tpu_name "
    "tpu_zone tpu_use_cluster tpu_use_sudo command_file commands tpu_vm tpu_env "
    "dynamo_config fp16 dynamo_backend".split()
)
COMPUTE_ENVIRONMENTS = ("LOCAL_MACHINE", "AMAZON_SAGEMAKER")
DISTRIBUTED_TYPES = (
    "NO MULTI_CPU MULTI_GPU MULTI_NPU MULTI_MLU MULTI_SDAA MULTI_MUSA MULTI_XPU DEEPSPEED "
    "FSDP XLA MEGATRON_LM MULTI_HPU MULTI_NEURON"
).split()
MULTI_DEVICE = {t for t in DISTRIBUTED_TYPES if t.startswith("MULTI_") and t != "MULTI_CPU"}
# utils/constants.py, and the torch enums accelerate indexes with them (digits allowed).
FSDP_SHARDING_STRATEGY = (
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2",
)
FSDP_AUTO_WRAP_POLICY = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
FSDP_BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
FSDP_STATE_DICT_TYPE = ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")
TRUTH_VALUES = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")
DEFAULT_CONFIG = "huggingface/accelerate/default_config.yaml"


def _accelerate_own(words: list[str]) -> list[str]:
    """accelerate launch's own flags: the words before the training script (a .py file, or
    the module after -m/--module); the script's flags come after it."""
    script = next(
        (
            i
            for i, w in enumerate(words)
            if not w.startswith("-")
            and (w.endswith(".py") or (i > 0 and words[i - 1] in ("-m", "--module")))
        ),
        len(words),
    )
    return words[:script]


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("$" in value or "{{" in value)


def _default_config_path(container: dict[str, Any]) -> str | None:
    """Where accelerate looks for its default config (config_args.py: $HF_HOME/accelerate,
    else $XDG_CACHE_HOME/huggingface/accelerate, else ~/.cache/huggingface/accelerate)."""
    env = env_of(container)
    for name, suffix in (
        ("HF_HOME", "accelerate/default_config.yaml"),
        ("XDG_CACHE_HOME", DEFAULT_CONFIG),
    ):
        if name in env:
            value = env[name]
            if value is None or _templated(value) or not value.startswith("/"):
                return None
            return f"{value.rstrip('/')}/{suffix}"
    home = env.get("HOME", "/root")
    if home is None or _templated(home) or not home.startswith("/"):
        return None
    return f"{home.rstrip('/')}/.cache/{DEFAULT_CONFIG}"


@dataclass(frozen=True)
class AccelerateConfig:
    """The config file an `accelerate launch` reads, when a ConfigMap of the render holds it."""

    index: int
    container: dict[str, Any]
    own: list[str]  # accelerate launch's own words
    path: str
    where: str
    config: dict[str, Any] | None  # None: the ConfigMap has no such file
    explicit: bool  # named with --config_file (else the default path)


def _parse_config(path: str, text: str) -> Any:
    import json

    import yaml

    try:
        return json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None


def accelerate_configs(pod: PodTemplate, ctx: Context) -> list[AccelerateConfig]:

    def compute() -> list[AccelerateConfig]:
        found = []
        for index, container in enumerate(pod.containers):
            words = _subcommand(commandline.words(container), "accelerate", "launch")
            if words is None:
                continue
            own = _accelerate_own(words)
            path = _flag(own, "--config_file")
            explicit = path is not None
            if path is None:
                if _has(own, "--cpu") or not any(w.startswith("-") for w in own):
                    continue  # not read with --cpu; without any flag its dicts are not applied
                path = _default_config_path(container)
            if path is None or _templated(path) or not path.startswith("/"):
                continue
            file = common.configmap_file(pod, ctx, container, path)
            if file is None:
                continue
            text, where = file
            if text is None:
                if explicit:
                    found.append(AccelerateConfig(index, container, own, path, where, None, True))
                continue
            config = _parse_config(path, text)
            if isinstance(config, dict):
                found.append(AccelerateConfig(index, container, own, path, where, config, explicit))
        return found

    return pod.memo("accelerate-configs", compute)


def _local_config(pod: PodTemplate, ctx: Context, index: int) -> AccelerateConfig | None:
    """The parsed LOCAL_MACHINE config container `index`'s accelerate launch reads."""
    for found in accelerate_configs(pod, ctx):
        if found.index == index and found.config is not None:
            environment = found.config.get("compute_environment", "LOCAL_MACHINE")
            return found if environment == "LOCAL_MACHINE" else None
    return None


def _fsdp_settings(found: AccelerateConfig) -> dict[str, Any]:
    """fsdp_config as accelerate copies it onto its arguments (each key prefixed fsdp_),
    less the keys the command line gives itself."""
    fsdp = found.config.get("fsdp_config") if found.config else None
    settings = {}
    for key, value in fsdp.items() if isinstance(fsdp, dict) else ():
        name = str(key) if str(key).startswith("fsdp") else f"fsdp_{key}"
        if not _has(found.own, f"--{name}"):
            settings[name] = value
    for flag in ("--fsdp_version", "--fsdp_state_dict_type", "--fsdp_auto_wrap_policy"):
        value = _flag(found.own, flag)
        if value is not None:
            settings[flag[2:]] = value
    return settings


def _enum_problem(name: str, value: Any, known: tuple[str, ...], digits: range) -> str | None:
    if value is None or _templated(value) or isinstance(value, bool):
        return None
    text = str(value)
    if text.isdigit():
        return None if int(text) in digits else f"{name} {text} is not one of {', '.join(known)}"
    if text.upper() in known:
        return None
    return f"{name} {text!r} is not one of {', '.join(known)}"


def _fsdp_problems(found: AccelerateConfig) -> Iterator[str]:
    settings = _fsdp_settings(found)
    version = str(settings.get("fsdp_version", "1"))
    policy = settings.get("fsdp_auto_wrap_policy")
    if (
        isinstance(policy, str)
        and not _templated(policy)
        and policy.upper() not in FSDP_AUTO_WRAP_POLICY
    ):
        yield f"fsdp_auto_wrap_policy {policy!r} is not one of {', '.join(FSDP_AUTO_WRAP_POLICY)}"
    state = settings.get("fsdp_state_dict_type")
    problem = _enum_problem("fsdp_state_dict_type", state, FSDP_STATE_DICT_TYPE, range(1, 4))
    if problem:
        yield problem
    elif version == "2" and str(state).upper() in ("LOCAL_STATE_DICT", "2"):
        yield "fsdp_state_dict_type LOCAL_STATE_DICT with fsdp_version 2: FSDP2 does not support it"
    prefetch = settings.get("fsdp_backward_prefetch")
    problem = _enum_problem("fsdp_backward_prefetch", prefetch, FSDP_BACKWARD_PREFETCH, range(1, 3))
    if problem:
        yield problem
    reshard = settings.get("fsdp_reshard_after_forward")
    if (
        version == "2"
        and reshard is not None
        and not _templated(reshard)
        and str(reshard).lower() not in TRUTH_VALUES
    ):
        yield (
            f"fsdp_reshard_after_forward {reshard!r} with fsdp_version 2: FSDP2 takes a "
            "boolean (FULL_SHARD/SHARD_GRAD_OP are FSDP1 strategies)"
        )
    if version == "1":
        problem = _enum_problem(
            "fsdp_sharding_strategy",
            settings.get("fsdp_sharding_strategy"),
            FSDP_SHARDING_STRATEGY,
            range(1, 6),
        )
        if problem:
            yield problem
    sync = settings.get("fsdp_sync_module_states", "true")
    loading = settings.get("fsdp_cpu_ram_efficient_loading", "true")
    if sync is False and loading and not _templated(loading):
        yield (
            "fsdp_cpu_ram_efficient_loading with fsdp_sync_module_states false: accelerate "
            "launch raises that it needs sync_module_states"
        )


def _uses_fsdp(found: AccelerateConfig, distributed: Any) -> bool:
    if _has(found.own, "--use_fsdp"):
        return True
    modes = (*ACCELERATE_MODES, "--use_megatron_lm", "--tpu_use_cluster")
    return distributed == "FSDP" and not any(_has(found.own, mode) for mode in modes)


def _accelerate_config_problems(found: AccelerateConfig) -> Iterator[str]:
    config = found.config
    environment = config.get("compute_environment", "LOCAL_MACHINE")
    if isinstance(environment, str) and environment not in COMPUTE_ENVIRONMENTS:
        yield f"compute_environment {environment!r} is not one of {', '.join(COMPUTE_ENVIRONMENTS)}"
        return
    if environment != "LOCAL_MACHINE":
        return  # a SageMaker config (other keys), or a value the enum never sees
    distributed = config.get("distributed_type")
    if "distributed_type" not in config:
        yield "no distributed_type: accelerate raises that the config must name one"
        return
    if not isinstance(distributed, str):
        return  # YAML's unquoted NO is false: accelerate compares it, never converts it
    if distributed not in DISTRIBUTED_TYPES:
        yield f"distributed_type {distributed!r} is not one of {', '.join(DISTRIBUTED_TYPES)}"
        return
    unknown = sorted(str(k) for k in config if str(k) not in ACCELERATE_CONFIG_KEYS)
    if unknown:
        yield f"unknown keys {', '.join(unknown)}: accelerate raises on keys ClusterConfig lacks"
    precision = config.get("mixed_precision")
    if precision is not None and not _has(found.own, "--mixed_precision"):
        if isinstance(precision, bool):
            yield (
                f"mixed_precision {str(precision).lower()} (YAML reads an unquoted no as a "
                "boolean): accelerate calls .lower() on it and fails; quote it: 'no'"
            )
        elif isinstance(precision, str) and precision.lower() not in MIXED_PRECISION:
            yield f"mixed_precision {precision!r} is not one of {', '.join(MIXED_PRECISION)}"
    processes = config.get("num_processes", 1 if distributed == "NO" else -1)
    if processes == -1 and not _has(found.own, "--num_processes"):
        yield (
            f"distributed_type {distributed} without num_processes and no --num_processes: "
            "accelerate raises 'You need to manually pass in --num_processes'"
        )
    yield from _gpu_ids_problem(found, distributed)
    if _uses_fsdp(found, distributed):
        yield from _fsdp_problems(found)


def _gpu_ids_problem(found: AccelerateConfig, distributed: Any) -> Iterator[str]:
    modes = (*ACCELERATE_MODES, "--use_megatron_lm", "--tpu_use_cluster")
    multi = _has(found.own, "--multi_gpu") or (
        distributed in MULTI_DEVICE and not any(_has(found.own, mode) for mode in modes)
    )
    ids = _flag(found.own, "--gpu_ids")
    ids = found.config.get("gpu_ids") if ids is None else ids
    machines = _flag(found.own, "--num_machines")
    machines = found.config.get("num_machines", 1) if machines is None else machines
    if not multi or not isinstance(ids, str) or _templated(ids) or ids == "all":
        return
    if len(ids.split(",")) < 2 and str(machines).isdigit() and int(str(machines)) <= 1:
        yield (
            f"gpu_ids {ids!r} names fewer than two GPUs for multi-GPU training: accelerate "
            "raises (use 'all' or two or more ids)"
        )


@pod_rule(
    id="accelerate-config-file",
    severity=ERROR,
    source=(
        ACCELERATE_CONFIG_ARGS + "#L43-L51",
        ACCELERATE_CONFIG_ARGS + "#L103-L110",
        ACCELERATE_CONFIG_ARGS + "#L148-L173",
        ACCELERATE_LAUNCH + "#L1212-L1213",
        ACCELERATE_LAUNCH + "#L1252-L1256",
        ACCELERATE_LAUNCH + "#L1281-L1300",
        ACCELERATE_UTILS_LAUNCH + "#L278-L282",
        ACCELERATE_UTILS_LAUNCH + "#L304-L307",
        ACCELERATE_DATACLASSES + "#L1836-L1870",
        ACCELERATE_DATACLASSES + "#L1886-L1905",
        ACCELERATE_DATACLASSES + "#L2029-L2054",
    ),
    title="The accelerate config file a launch reads is one accelerate accepts",
    why="accelerate launch reads the file named by --config_file (FileNotFoundError when it "
    "is not there) or, unless --cpu, the default config under $HF_HOME/accelerate. "
    "load_config_from_file raises ValueError when distributed_type is missing, when "
    "compute_environment or distributed_type is not one of its enums, and on any key "
    "ClusterConfig does not define; the launcher raises when a distributed config gives no "
    "num_processes and the command line none either, when gpu_ids names one GPU for "
    "multi-GPU training, and on a mixed_precision other than no/fp16/bf16/fp8 (an unquoted "
    "YAML no is the boolean false, on which it calls .lower()). The fsdp_config keys become "
    "FSDP_* variables that FullyShardedDataParallelPlugin validates in every rank: an "
    "auto_wrap_policy, state_dict_type, backward_prefetch or sharding_strategy it does not "
    "know, LOCAL_STATE_DICT or a non-boolean reshard_after_forward with fsdp_version 2, and "
    "cpu_ram_efficient_loading with sync_module_states false all raise before training.",
    fix="Write the config with `accelerate config` (or its keys exactly), quote 'no', give "
    "num_processes (the total over all machines), and under fsdp_version 2 use "
    "fsdp_reshard_after_forward: true/false and SHARDED_STATE_DICT or FULL_STATE_DICT.",
    applies=common.trains,
)
def accelerate_config_file(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for found in accelerate_configs(pod, ctx):
        at = commandline_at(pod, found.index, found.container)
        if found.config is None:
            yield Violation(
                f"--config_file {found.path} is not in {found.where}: accelerate raises "
                "FileNotFoundError",
                at,
            )
            continue
        for problem in _accelerate_config_problems(found):
            yield Violation(f"{found.where}: {problem}", at)


# -- horovodrun -------------------------------------------------------------------------------

HOROVOD_TAG = "https://github.com/horovod/horovod/blob/v0.28.1/horovod/runner/"
# horovodrun's options that take no value (launch.py parse_args: store_true, the override
# bool actions, -cb and -v); every other option takes one (--blacklist-cooldown-range two).
HOROVOD_SWITCHES = frozenset(
    "-v --version -cb --check-build --disable-cache --verbose --hierarchical-allreduce "
    "--no-hierarchical-allreduce --hierarchical-allgather --no-hierarchical-allgather "
    "--torus-allreduce --no-torus-allreduce --autotune --no-autotune --timeline-mark-cycles "
    "--no-timeline-mark-cycles --no-stall-check --stall-check --mpi-threads-disable "
    "--no-mpi-threads-disable --tcp --log-with-timestamp --log-without-timestamp "
    "-prefix-timestamp --prefix-output-with-timestamp --log-hide-timestamp "
    "--no-log-hide-timestamp --gloo --mpi --jsrun -h --help".split()
)
HOROVOD_NP = ("-np", "--num-proc")
HOROVOD_HOST_PATTERN = re.compile(r"^[\w.-]+:[0-9]+$")  # hosts.py parse_hosts_and_slots
# Settings validate_config_args refuses below 0, by command-line flag and config-file place.
HOROVOD_NONNEGATIVE = {
    "--fusion-threshold-mb": ("params", "fusion_threshold_mb"),
    "--cycle-time-ms": ("params", "cycle_time_ms"),
    "--cache-capacity": ("params", "cache_capacity"),
    "--autotune-warmup-samples": ("autotune", "warmup_samples"),
    "--autotune-steps-per-sample": ("autotune", "steps_per_sample"),
    "--autotune-bayes-opt-max-samples": ("autotune", "bayes_opt_max_samples"),
    "--stall-check-warning-time-seconds": ("stall_check", "warning_time_seconds"),
    "--stall-check-shutdown-time-seconds": ("stall_check", "shutdown_time_seconds"),
    "--num-nccl-streams": ("library_options", "num_nccl_streams"),
    "--thread-affinity": ("library_options", "thread_affinity"),
    "--gloo-timeout-seconds": ("library_options", "gloo_timeout_seconds"),
}
HOROVOD_NOISE = ("--autotune-gaussian-process-noise", ("autotune", "gaussian_process_noise"))


def horovodrun_own(words: list[str]) -> list[str]:
    """horovodrun's own words: its options and their values, up to the training command
    (argparse REMAINDER: the first word that is neither an option nor an option's value)."""
    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith("-"):
            break
        if "=" in word or word in HOROVOD_SWITCHES:
            index += 1
        elif word == "--blacklist-cooldown-range":
            index += 3
        else:
            index += 2
    return words[: min(index, len(words))]


def _horovod_value(own: list[str], *names: str) -> str | None:
    value, _ = commandline.flag(own, *names)
    return value


def _number_text(value: Any) -> float | None:
    try:
        return None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def _horovod_hosts(own: list[str]) -> tuple[list[str] | None, str | None]:
    """The -H entries (None when not given literally) and the first malformed one."""
    hosts = _horovod_value(own, "-H", "--hosts")
    if hosts is None or _templated(hosts):
        return None, None
    entries = hosts.split(",")
    bad = next((e for e in entries if not HOROVOD_HOST_PATTERN.match(e.strip())), None)
    return entries, bad


def _horovod_config(
    pod: PodTemplate, ctx: Context, container: dict[str, Any], own: list[str]
) -> Iterator[str]:
    """What horovodrun refuses in the --config-file it is given, when a ConfigMap holds it."""

    path = _horovod_value(own, "--config-file")
    if path is None or _templated(path) or not path.startswith("/"):
        return
    file = common.configmap_file(pod, ctx, container, path)
    if file is None:
        return
    text, where = file
    if text is None:
        yield f"--config-file {path} is not in {where}: horovodrun cannot open it"
        return
    config = _parse_config(path, text)
    if not isinstance(config, dict):
        return
    controller = config.get("controller")
    given = _has(own, "--gloo") or _has(own, "--mpi")
    known = ("gloo", "mpi")
    if isinstance(controller, str) and controller and not given and controller.lower() not in known:
        yield f"{where}: controller {controller!r}: horovodrun supports gloo or mpi"
    for flag, (section, key) in (*HOROVOD_NONNEGATIVE.items(), HOROVOD_NOISE):
        if _has(own, flag):
            continue
        value = _number_text(mapping(config.get(section)).get(key))
        if value is None:
            continue
        if value < 0 or (flag == HOROVOD_NOISE[0] and value > 1):
            bound = "in [0, 1]" if flag == HOROVOD_NOISE[0] else ">= 0"
            yield f"{where}: {section}.{key} {value:g} must be {bound}"


def _gives_np(word: str) -> bool:
    name = word.split("=", 1)[0]
    return name == "-np" or (len(name) >= 7 and "--num-proc".startswith(name))


def _horovod_problems(own: list[str]) -> Iterator[str]:
    if not any(_gives_np(word) for word in own):
        yield "no -np/--num-proc: horovodrun's parser requires it and exits"
    sources = [n for n in ("-H", "--hostfile", "--host-discovery-script") if _has(own, n)]
    if _has(own, "--hosts") and "-H" not in sources:
        sources.insert(0, "--hosts")
    if _has(own, "-hostfile") and "--hostfile" not in sources:
        sources.append("-hostfile")
    if len(sources) > 1:
        yield f"{' and '.join(sources)} together: horovodrun takes one of them"
    controllers = [n for n in ("--gloo", "--mpi", "--jsrun") if n in own]
    if len(controllers) > 1:
        yield f"{' and '.join(controllers)} together: horovodrun takes one controller"
    for flag in (*HOROVOD_NONNEGATIVE, HOROVOD_NOISE[0]):
        value = _number_text(_horovod_value(own, flag))
        if value is not None and (value < 0 or (flag == HOROVOD_NOISE[0] and value > 1)):
            yield f"{flag} {value:g} must be {'in [0, 1]' if flag == HOROVOD_NOISE[0] else '>= 0'}"
    entries, bad = _horovod_hosts(own)
    if bad is not None:
        yield (
            f"-H entry {bad!r} has no :slots: horovodrun raises 'Invalid host input' "
            "(write host:slots, e.g. worker-0:8)"
        )
        return
    np_text = _horovod_value(own, *HOROVOD_NP)
    processes = int(np_text) if np_text is not None and np_text.isdigit() else None
    elastic = _has(own, "--min-np") or _has(own, "--min-num-proc")
    elastic = elastic or _has(own, "--host-discovery-script")
    if elastic and not _has(own, "--host-discovery-script"):
        hosts = None if entries is None else len({e.split(":")[0].strip() for e in entries})
        located = any(_has(own, n) for n in ("-H", "--hosts", "--hostfile", "-hostfile"))
        if not located:
            hosts = 1  # horovodrun runs on localhost:<np>
        if hosts is not None and hosts < 2:
            yield (
                f"elastic mode (--min-np) on {hosts} host: horovodrun raises 'Cannot run in "
                "fault tolerance mode with fewer than 2 hosts'"
            )
    if elastic or entries is None or processes is None:
        return
    slots = sum(int(e.split(":")[1]) for e in entries)
    if processes > slots and not any("oversubscribe" in w for w in own):
        yield (
            f"-np {processes} but -H offers {slots} slots: horovodrun (and mpirun) refuse "
            "more processes than slots"
        )


@pod_rule(
    id="horovodrun-args",
    severity=ERROR,
    source=(
        HOROVOD_TAG + "launch.py#L294-L296",
        HOROVOD_TAG + "launch.py#L545-L576",
        HOROVOD_TAG + "launch.py#L581-L586",
        HOROVOD_TAG + "launch.py#L689-L699",
        HOROVOD_TAG + "launch.py#L815-L822",
        HOROVOD_TAG + "common/util/hosts.py#L71-L84",
        HOROVOD_TAG + "common/util/hosts.py#L132-L135",
        HOROVOD_TAG + "gloo_run.py#L262-L263",
        HOROVOD_TAG + "common/util/config_parser.py#L66-L75",
        HOROVOD_TAG + "common/util/config_parser.py#L126-L149",
    ),
    when={
        "error": "horovodrun's parser or host parsing refuses the command line or its "
        "--config-file: it exits before any rank starts",
        "warning": "several pods each run horovodrun on localhost (no -H, --hostfile or "
        "discovery script): each trains alone",
    },
    title="horovodrun gets -np, hosts with slots and settings it accepts",
    why="horovodrun's parser requires -np/--num-proc and takes only one of -H, --hostfile "
    "and --host-discovery-script and one of --gloo, --mpi and --jsrun. Every -H entry must "
    "be host:slots (parse_hosts_and_slots raises 'Invalid host input' on a bare host name), "
    "and a static run asks for no more processes than the slots listed ('Requested more "
    "processes than there are available slots'; mpirun refuses too). Elastic mode (--min-np "
    "without a discovery script) needs two or more hosts, and without -H it runs on "
    "localhost alone. A --config-file must exist, name controller gloo or mpi, and give no "
    "negative knob (validate_config_args). Without -H or a hostfile horovodrun starts all "
    "-np processes on localhost, so in each pod of a multi-pod job the ranks train alone.",
    fix="Pass -np <total ranks> -H host-0:<GPUs>,host-1:<GPUs> (or --hostfile with 'host "
    "slots=N' lines, or --host-discovery-script for elastic runs), and run horovodrun once, "
    "from an MPIJob launcher.",
    applies=common.trains,
)
def horovodrun_args(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        words = _subcommand(commandline.words(container), "horovodrun", None)
        if words is None:
            continue
        own = horovodrun_own(words)
        if any(w in own for w in ("-h", "--help", "-v", "--version", "-cb", "--check-build")):
            continue
        at = commandline_at(pod, index, container)
        for problem in _horovod_problems(own):
            yield Violation(problem, at)
        for problem in _horovod_config(pod, ctx, container, own):
            yield Violation(problem, at)
        located = any(
            _has(own, n)
            for n in ("-H", "--hosts", "--hostfile", "-hostfile", "--host-discovery-script")
        )
        if located or common.is_mpi_launcher(pod):
            continue
        pods = _pods_running(pod, ctx, "horovodrun", None)
        if pods is not None and pods > 1:
            yield Violation(
                f"{pods} pods run horovodrun without -H, --hostfile or a discovery script: "
                "each starts its -np ranks on localhost and trains alone",
                at,
                severity=WARNING,
            )
