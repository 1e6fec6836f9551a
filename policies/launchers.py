"""Launcher command lines other than torchrun's against the job's shape: `accelerate launch`,
the DeepSpeed launcher and Open MPI's mpirun, and what the MPI operators expect of the
containers they start ranks in.

Facts from accelerate v1.13.0 (`commands/launch.py`, `utils/launch.py`), DeepSpeed
v0.19.5 (`launcher/runner.py`), Open MPI v4.1.8 (`orte/orted/orted_submit.c`), the
Training Operator v1.9.2 MPIJob controller (`pkg/controller.v1/mpi`) and the MPI
Operator v0.8.0 API (`pkg/apis/kubeflow/v2beta1`); each rule's why names its source.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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
        yield from _accelerate_multinode(pod, container, words, pods, at)


def _accelerate_multinode(
    pod: PodTemplate, container: dict[str, Any], words: list[str], pods: int, at: tuple
) -> Iterator[Violation]:
    configured = _has(words, "--config_file")
    machines_text = _flag(words, "--num_machines")
    machines = _literal_int(machines_text)
    if machines_text is None:
        if not configured:
            yield Violation(
                f"{pods} pods run accelerate launch without --num_machines (default 1): "
                "each pod trains its own copy",
                at,
                severity=WARNING,
            )
        return
    if machines is not None and machines != pods:
        yield Violation(f"--num_machines {machines}, but {pods} pods run accelerate launch", at)
    if machines is not None and machines < 2:
        return
    rank = _flag(words, "--machine_rank")
    if _literal_int(rank) is not None and (pod.replicas or 1) > 1:
        yield Violation(
            f"--machine_rank {rank} in a template {pod.replicas} pods share: every one "
            "claims that rank",
            at,
        )
    address = _flag(words, "--main_process_ip")
    if address is None and not configured:
        yield Violation(
            "--num_machines > 1 without --main_process_ip: no pod knows where rank 0 is", at
        )
    elif address is not None and address.split(":")[0] in LOOPBACK:
        yield Violation(f"--main_process_ip {address} points every pod at itself", at)
    total = _literal_int(_flag(words, "--num_processes"))
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
        script = next(
            (
                i
                for i, w in enumerate(words)
                if not w.startswith("-")
                and (w.endswith(".py") or (i > 0 and words[i - 1] in ("-m", "--module")))
            ),
            len(words),
        )
        own = words[:script]  # the script's own flags come after it
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
