"""MPI launches: MPIJob kubeflow.org/v1 (Training Operator), v2beta1 (MPI Operator) and
Kubeflow Trainer v2 MPI runtimes (and the TrainJobs on them).

A launcher that gets the environment to the ranks, computes only where its operator
puts it in the hostfile, counts ranks right, and talks SSH the way its image and MPI
implementation expect; Open MPI's MCA parameters and UCX's transport and device lists
that leave the ranks a way to reach each other; and one operator per cluster owning
mpijobs.kubeflow.org.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, argv, dicts, env_of, is_int, mapping

from . import commandline, common

MPI_KINDS = ("MPIJob", *common.RUNTIME_KINDS, "TrainJob")
# Flags only Open MPI's mpirun knows, and only Hydra's (Intel MPI, MPICH).
OPENMPI_FLAGS = {
    "-x",
    "--allow-run-as-root",
    "-mca",
    "--mca",
    "--map-by",
    "--bind-to",
    "--oversubscribe",
    "-oversubscribe",
    "-npernode",
    "--npernode",
    "--report-bindings",
    "--hostfile",
}
HYDRA_FLAGS = {"-genv", "-genvlist", "-genvall", "-genvnone", "-ppn", "-perhost", "-hosts"}
ROOT_SSH = common.ROOT_SSH


def _nccl(pod: PodTemplate | None) -> set[str]:
    if pod is None:
        return set()
    return {name for c in pod.containers for name in env_of(c) if name.startswith("NCCL_")}


@pod_rule(
    id="mpi-forwards-nccl",
    severity=WARNING,
    title="Every NCCL variable reaches the MPI ranks",
    why="Where ranks start decides what environment they get. The Training Operator's MPIJob "
    "v1 starts them with kubectl exec in the Workers: they inherit the Worker container's "
    "environment, plus what mpirun -x forwards from the launcher. The MPI Operator "
    "(v2beta1) and Trainer v2 MPI runtimes start them over SSH: the Workers' environment "
    "never reaches them, only the launcher's, which Open MPI passes for each -x NAME alone "
    "and Intel MPI or MPICH (Hydra) pass whole. A variable that misses the ranks leaves "
    "NCCL on its defaults (often TCP on eth0); what that costs depends on the variable.",
    fix="Set the variable on the launcher; with Open MPI add -x NAME to mpirun. (MPIJob v1: "
    "setting it on the Workers is enough.)",
    kinds=MPI_KINDS,
    applies=common.is_mpi_launcher,
)
def forwards_nccl(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    job = common.mpi_job(pod, ctx)
    if job is None or not pod.containers:
        return
    forwarded = set(common.mpirun_exports(argv(pod.containers[0])))
    on_launcher, on_ranks = _nccl(pod), _nccl(job.ranks)
    command = (*pod.container_path(0), "command")
    if not job.over_ssh:
        for name in sorted(on_launcher - on_ranks - forwarded):
            yield Violation(
                f"{name} is set on the Launcher only and mpirun does not forward it "
                f"(no -x {name}): the ranks inherit the Workers' environment, which lacks it",
                command,
            )
        return
    for name in sorted(on_ranks - on_launcher):
        yield Violation(
            f"{name} is set on the {job.ranks_role} only: ranks start over SSH and never see "
            "that environment; set it on the launcher",
            command,
        )
    if job.implementation == "OpenMPI":
        for name in sorted(on_launcher - forwarded):
            yield Violation(
                f"mpirun does not forward {name} (no -x {name}): Open MPI passes only what "
                "-x names to ranks started over SSH",
                command,
            )


@pod_rule(
    id="mpi-launcher-gpus",
    severity=WARNING,
    title="An MPI launcher that is not a worker holds no GPUs",
    why="With the MPI Operator (runLauncherAsWorker false) the launcher only runs mpirun and "
    "the operator even hides its GPUs (NVIDIA_VISIBLE_DEVICES empty); a Trainer v2 launcher "
    "without runLauncherAsNode is not in the hostfile. GPUs it requests sit idle for the "
    "whole job. (The Training Operator's v1 launcher that requests GPUs is a worker too.)",
    fix="Remove GPU requests from the launcher and give it a little CPU and memory, or make "
    "it a worker (runLauncherAsWorker / runLauncherAsNode: true).",
    kinds=MPI_KINDS,
    applies=common.is_mpi_launcher,
)
def launcher_gpus(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    job = common.mpi_job(pod, ctx)
    if job is not None and pod.gpus and not job.launcher_computes:
        yield Violation(
            f"the launcher requests {pod.gpus} GPU(s) but is not in the hostfile", pod.path
        )


@pod_rule(
    id="mpi-slots",
    severity=WARNING,
    title="MPI ranks match GPUs: -np and slots per worker",
    why="The hostfile gives each worker pod its slots (slotsPerWorker, or the MPI runtime's "
    "numProcPerNode) and mpirun starts one rank per slot; slots should be the worker's GPU "
    "count, and an explicit -np must equal the slots of every pod in the hostfile (the "
    "launcher's too when it is a worker), or mpirun oversubscribes or leaves GPUs unused.",
    fix="Slots per worker = GPUs per worker; -np = workers x slots (plus the launcher's when "
    "it computes), or omit -np.",
    kinds=MPI_KINDS,
    applies=common.is_mpi_launcher,
)
def slots(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    job = common.mpi_job(pod, ctx)
    if job is None or job.ranks is None or not is_int(job.slots):
        return  # a non-integer count is the schema check's
    ranks = job.ranks
    if ranks.gpus and ranks.gpus != job.slots and pod.doc.kind != "TrainJob":
        # A TrainJob's own numProcPerNode is trainjob-procs-per-node's.
        yield Violation(
            f"{job.slots_field[-1]} is {job.slots} but each {job.ranks_role} has {ranks.gpus} GPUs",
            job.slots_field,
        )
    if not pod.containers or not is_int(ranks.replicas):
        return
    words = argv(pod.containers[0])
    for index, word in enumerate(words):
        value = None
        if word in ("-np", "-n", "--np", "-c") and index + 1 < len(words):
            value = words[index + 1]
        elif word.startswith(("-np=", "--np=")):
            value = word.split("=", 1)[1]
        if value is not None and value.isdigit():
            hosts = ranks.replicas + (1 if job.launcher_computes else 0)
            expected = hosts * job.slots
            if int(value) != expected:
                yield Violation(
                    f"-np {value} but the hostfile has {hosts} pod(s) x {job.slots} slots "
                    f"= {expected}",
                    (*pod.container_path(0), "args" if "args" in pod.containers[0] else "command"),
                )
            break


@pod_rule(
    id="mpi-launcher-as-worker",
    severity=WARNING,
    title="A launcher that runs ranks has the workers' GPUs",
    why="runLauncherAsWorker (MPI Operator) or runLauncherAsNode (Trainer v2) puts the "
    "launcher in the hostfile with as many slots as a worker: if the launcher requests no "
    "GPU while the workers do, the ranks placed on it find no device and the job fails (or "
    "trains on CPU).",
    fix="Give the launcher the workers' GPU (and RDMA) requests, or turn runLauncherAsWorker "
    "/ runLauncherAsNode off.",
    kinds=MPI_KINDS,
    applies=common.is_mpi_launcher,
)
def launcher_as_worker(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    job = common.mpi_job(pod, ctx)
    if job is None or job.api == "v1" or not job.launcher_computes or job.ranks is None:
        return
    if job.ranks.gpus and not pod.gpus:
        yield Violation(
            f"{job.compute_field[-1]} is true but the launcher requests no GPU while each "
            f"{job.ranks_role} has {job.ranks.gpus}",
            job.compute_field,
        )


@pod_rule(
    id="mpi-ssh-auth-path",
    severity=ERROR,
    source=(
        "https://github.com/kubeflow/mpi-operator/blob/v0.8.0/pkg/apis/kubeflow/v2beta1/default.go#L66",
        "https://github.com/openssh/openssh-portable/blob/V_9_9_P1/sshd_config",
    ),
    title="SSH keys are mounted in the home of the user the MPI containers run as",
    why="The MPI Operator and Trainer v2 mount the job's SSH keys at sshAuthMountPath "
    "(default /root/.ssh); ssh on the launcher and sshd on the workers look in the home of "
    "the user they run as. Keys under /root for a non-root user, or elsewhere for root, "
    "are never read: mpirun fails with 'Permission denied (publickey)'.",
    fix="Set sshAuthMountPath to <home of the containers' user>/.ssh (for example "
    "/home/trainer/.ssh for uid 1000 in the trainer image), or /root/.ssh for root.",
    kinds=MPI_KINDS,
    applies=common.is_mpi_launcher,
)
def ssh_auth_path(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    job = common.mpi_job(pod, ctx)
    if job is None or job.ssh_path is None:
        return
    users = {uid for p in (pod, job.ranks) if p is not None for uid in common.run_as_users(p)}
    root = job.ssh_path.rstrip("/") == ROOT_SSH or job.ssh_path.startswith("/root/")
    if 0 in users and not root:
        yield Violation(
            f"the containers run as root but the SSH keys are mounted at {job.ssh_path}, not "
            f"{ROOT_SSH}",
            job.ssh_path_field,
        )
    non_root = sorted(uid for uid in users if uid != 0)
    if non_root and root:
        yield Violation(
            f"the containers run as uid {non_root[0]} but the SSH keys are mounted at "
            f"{job.ssh_path}, under root's home",
            job.ssh_path_field,
        )


@pod_rule(
    id="mpi-implementation-command",
    severity=WARNING,
    title="The launcher's mpirun is the MPI implementation the job declares",
    why="mpiImplementation tells the operator which hostfile format and environment to "
    "write (Open MPI's, or Hydra's for Intel MPI and MPICH). Open MPI flags such as -x, "
    "--allow-run-as-root or --mca make Hydra's mpirun stop with an unknown option, and "
    "Hydra's -genv or -ppn stop Open MPI's.",
    fix="Use the flags of the declared implementation (Hydra passes the launcher's whole "
    "environment; -genv NAME VALUE adds one), or declare the implementation the image has.",
    kinds=MPI_KINDS,
    applies=common.is_mpi_launcher,
)
def implementation_command(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    job = common.mpi_job(pod, ctx)
    if job is None or job.api == "v1" or not pod.containers:
        return
    words = argv(pod.containers[0])
    if job.implementation == "OpenMPI":
        foreign, family = sorted(set(words) & HYDRA_FLAGS), "Hydra (Intel MPI, MPICH)"
    else:
        foreign, family = sorted(set(words) & OPENMPI_FLAGS), "Open MPI"
    if foreign:
        yield Violation(
            f"mpiImplementation is {job.implementation} but mpirun gets {family} flags: "
            f"{', '.join(foreign)}",
            (*pod.container_path(0), "command" if "command" in pod.containers[0] else "args"),
        )


def _image_name(container: dict) -> str:
    image = str(container.get("image", "")).split("@", 1)[0]
    name = image.rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def _mpijob_owner(doc: Document) -> bool:
    """A Training Operator Deployment or the mpijobs CRD: what `mpijob-crd-owners` reports on
    (so that a render without them is never scanned for operators)."""
    if doc.kind == "CustomResourceDefinition":
        return doc.name == "mpijobs.kubeflow.org"
    spec = doc.obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if isinstance(containers, list):
        for container in containers:
            if (
                isinstance(container, dict)
                and "training-operator" in str(container.get("image", ""))
                and _image_name(container) == "training-operator"
            ):
                return True
    return False


def _operators(ctx: Context) -> tuple[list[Document], list[Document]]:
    """(Training Operators that serve MPIJob, MPI Operators) among the render's Deployments."""

    def serves_mpijob(container: dict) -> bool:
        schemes = [
            str(a).split("=", 1)[1].lower()
            for a in container.get("args") or []
            if str(a).startswith("--enable-scheme=")
        ]
        return not schemes or "mpijob" in schemes  # no flag: every kind

    def found() -> tuple[list[Document], list[Document]]:
        training, mpi = [], []
        for doc in ctx.of_kind("Deployment"):
            template = mapping(mapping(doc.obj.get("spec")).get("template"))
            for container in dicts(mapping(template.get("spec")).get("containers")):
                name = _image_name(container)
                if name == "training-operator" and serves_mpijob(container):
                    training.append(doc)
                elif name == "mpi-operator":
                    mpi.append(doc)
        return training, mpi

    return ctx.memo("mpijob-operators", found)


@resource_rule(
    id="mpijob-crd-owners",
    severity=WARNING,
    title="One operator owns mpijobs.kubeflow.org",
    why="The Training Operator (MPIJob v1) and the MPI Operator (v2beta1) define the same CRD "
    "name, mpijobs.kubeflow.org, and a cluster holds one of them. Installing both lets two "
    "controllers reconcile every MPIJob (or leaves one without the version it serves); "
    "switching replaces the CRD, which deletes every MPIJob stored under it.",
    fix="Pick one in the cluster profile (mpiOperator: training-operator | mpi-operator): "
    "with the MPI Operator, the Training Operator runs with --enable-scheme for every kind "
    "but mpijob and without its MPIJob CRD (base/operators/training-operator-without-mpijob).",
    kinds=("Deployment", "CustomResourceDefinition"),
    applies=_mpijob_owner,
)
def crd_owners(doc: Document, ctx: Context) -> Iterator[Violation]:
    training, mpi = _operators(ctx)
    if doc.kind == "Deployment":
        if doc in training and mpi:
            yield Violation(
                f"the Training Operator serves MPIJob (no --enable-scheme leaves mpijob out) "
                f"while the MPI Operator {mpi[0].name} in this render does too",
                ("spec", "template", "spec", "containers"),
            )
        return
    if doc.name != "mpijobs.kubeflow.org":
        return
    crds = ctx.memo(
        "mpijob-crds",
        lambda: [d for d in ctx.of_kind("CustomResourceDefinition") if d.name == doc.name],
    )
    if len(crds) > 1 and doc is not crds[0]:
        yield Violation(
            f"a second definition of {doc.name} in this render: two installs bring it",
            ("metadata", "name"),
        )
    served = {
        str(v.get("name"))
        for v in dicts(mapping(doc.obj.get("spec")).get("versions"))
        if v.get("served", True)
    }
    if mpi and "v2beta1" not in served:
        yield Violation(
            f"the MPI Operator serves kubeflow.org/v2beta1 but this CRD serves "
            f"{', '.join(sorted(served)) or 'nothing'}: it is the Training Operator's",
            ("spec", "versions"),
        )
    if training and "v1" not in served:
        yield Violation(
            f"the Training Operator serves MPIJob kubeflow.org/v1 but this CRD serves "
            f"{', '.join(sorted(served)) or 'nothing'}: it is the MPI Operator's",
            ("spec", "versions"),
        )


# -- Open MPI MCA parameters -----------------------------------------------------------------

OMPI_V4 = "https://github.com/open-mpi/ompi/blob/v4.1.8/"
MCA_FLAGS = ("--mca", "-mca", "--gmca", "-gmca")


def mca_params(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Open MPI MCA parameters a container sets: name -> (value, where), from mpirun's
    --mca NAME VALUE and from OMPI_MCA_NAME variables."""
    found: dict[str, tuple[str, str]] = {
        name.removeprefix("OMPI_MCA_"): (str(value), f"env {name}")
        for name, value in env_of(container).items()
        if name.startswith("OMPI_MCA_") and value is not None
    }
    words = commandline.words(container)
    for index, word in enumerate(words[:-2]):
        if word in MCA_FLAGS:
            found[words[index + 1]] = (words[index + 2], f"{word} {words[index + 1]}")
    return found


@pod_rule(
    id="mpi-tcp-include-exclude",
    severity=ERROR,
    source=(
        OMPI_V4 + "orte/mca/oob/tcp/oob_tcp_component.c#L275-L284",
        OMPI_V4 + "opal/mca/btl/tcp/btl_tcp_component.c#L383-L395",
    ),
    when={
        "error": "oob_tcp (Open MPI 4's daemons cannot talk: mpirun fails), or btl_tcp when "
        "the btl list names tcp, or pml ob1 is chosen, so TCP is the way between nodes",
        "warning": "btl_tcp otherwise: the TCP BTL switches itself off, which only matters "
        "when no other transport (UCX) carries MPI traffic",
    },
    title="Open MPI gets either an interface include list or an exclude list, not both",
    why="btl_tcp_if_include/btl_tcp_if_exclude and oob_tcp_if_include/oob_tcp_if_exclude "
    "are mutually exclusive: with both set the TCP BTL and the TCP OOB component report "
    "'mutually exclusive' and make themselves unavailable. Without the OOB, Open MPI 4's "
    "mpirun cannot reach its daemons on the workers; without the TCP BTL, ranks on "
    "different nodes cannot reach each other unless another transport carries them.",
    fix="Keep one of the two per component: an include list naming the pods' training "
    "interface (eth0, net1) or a CIDR, or an exclude list.",
    applies=common.has_command_or_env,
)
def tcp_include_exclude(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        params = mca_params(container)
        if not params:
            continue
        for component in ("oob_tcp", "btl_tcp"):
            include = params.get(f"{component}_if_include")
            exclude = params.get(f"{component}_if_exclude")
            if include is None or exclude is None:
                continue
            severity = None
            if component == "btl_tcp":
                btl = params.get("btl", ("", ""))[0]
                named = not btl.startswith("^") and "tcp" in btl.split(",")
                ob1 = params.get("pml", ("", ""))[0] == "ob1"
                severity = None if named or ob1 else WARNING
            yield Violation(
                f"{include[1]} and {exclude[1]} together: Open MPI disables its "
                f"{component.replace('_', ' ').upper()} component",
                (*pod.container_path(index), "env" if include[1].startswith("env") else "command"),
                severity=severity,
            )


# -- UCX transports and devices --------------------------------------------------------------

UCX = "https://github.com/openucx/ucx/blob/v1.20.1/"
UCX_CONTEXT = UCX + "src/ucp/core/ucp_context.c"
# UCX_TLS names (aliases and transports) that need an RDMA device.
RDMA_TLS = frozenset(
    {
        "ib",
        "rc",
        "rc_v",
        "rc_x",
        "rc_verbs",
        "rc_mlx5",
        "ud",
        "ud_v",
        "ud_x",
        "ud_verbs",
        "ud_mlx5",
        "dc",
        "dc_x",
        "dc_mlx5",
        "gga",
        "gga_mlx5",
        "srd",
    }
)
NETWORK_TLS = frozenset({"tcp", "all"})
# RDMA device names as the kernel gives them (UCX names their ports DEVICE:PORT); ib0 and
# ibp* are IPoIB network interfaces, which UCX's tcp transport names without a port.
_RDMA_DEVICE = re.compile(
    r"^(mlx[45]_(bond_)?\d+|hfi1_\d+|bnxt_re\d+|irdma\d+|qedr\d+|rxe\d+|rocep\w+)$"
)


def _has_rdma_device(pod: PodTemplate, ctx: Context) -> bool:
    """The pod can see an RDMA device: it asks for one (device plugin, DRA), is privileged,
    mounts /dev/infiniband, or is attached to an RDMA network."""
    if common.requests_rdma(pod) or pod.spec.get("resourceClaims"):
        return True
    if any(
        str(mapping(v.get("hostPath")).get("path", "")).startswith("/dev/infiniband")
        for v in pod.volumes()
    ):
        return True
    if any(mapping(c.get("securityContext")).get("privileged") is True for c in pod.containers):
        return True
    return any(common.nad_is_rdma(nad) for _, nad in common.attached_nads(pod, ctx))


def _ucx_env(pod: PodTemplate, ctx: Context) -> Iterator[tuple[int, str, str, PodTemplate]]:
    """(container index, name, value, pod the ranks run in) of UCX_TLS/UCX_NET_DEVICES."""
    ranks = common.rank_pod(pod, ctx)
    for index, container in enumerate(pod.containers):
        env = env_of(container)
        for name in ("UCX_TLS", "UCX_NET_DEVICES"):
            value = env.get(name)
            if isinstance(value, str) and value and "$" not in value:
                yield index, name, value, ranks


@pod_rule(
    id="ucx-tls-rdma-device",
    severity=ERROR,
    source=(UCX_CONTEXT + "#L710-L731", UCX_CONTEXT + "#L1625-L1645"),
    title="UCX_TLS leaves the ranks a transport their pods have",
    why="UCX_TLS is an allow list: UCX opens only the transports it names (rc, ud, dc and ib "
    "need an RDMA device). In a pod without an RDMA device (no RDMA resource, DRA claim, "
    "RDMA network or /dev/infiniband) those transports are unavailable: with nothing else "
    "usable ucp_init fails with 'no usable transports/devices', and with only shared "
    "memory or CUDA left the ranks on other nodes cannot be reached at all.",
    fix="Give the pods an RDMA device (the RDMA resource of their network), or add tcp to "
    "UCX_TLS (or leave it unset and let UCX pick).",
    applies=common.has_env,
)
def ucx_tls(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, name, value, ranks in _ucx_env(pod, ctx):
        if name != "UCX_TLS" or value.startswith("^"):
            continue
        names = {item.strip().split(":")[0] for item in value.split(",") if item.strip()}
        if not names & RDMA_TLS or names & NETWORK_TLS:
            continue
        if _has_rdma_device(ranks, ctx):
            continue
        local_only = names - RDMA_TLS
        if local_only and not common.multi_node(pod, ctx):
            continue
        effect = (
            "ranks on different nodes have no transport between them"
            if local_only
            else "UCX fails with 'no usable transports/devices'"
        )
        yield Violation(
            f"UCX_TLS={value} names only RDMA network transports and the {ranks.role} pods "
            f"have no RDMA device: {effect}",
            (*pod.container_path(index), "env"),
        )


@pod_rule(
    id="ucx-net-devices",
    severity=ERROR,
    source=(UCX_CONTEXT + "#L1032-L1061", UCX + "src/uct/ib/base/ib_device.c#L1240-L1243"),
    when={
        "error": "every entry is an RDMA device without its port: UCX has no network device",
        "warning": "some entries are: those devices are not used",
    },
    title="UCX_NET_DEVICES names RDMA devices with their port",
    why="UCX names an RDMA device's port DEVICE:PORT (mlx5_0:1) and matches UCX_NET_DEVICES "
    "entries against those names exactly: mlx5_0 matches nothing, UCX warns that the device "
    "is not available and uses no device for it. When no entry matches, ranks on other "
    "nodes cannot be reached.",
    fix="Write the port: UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1 (or leave it unset).",
    applies=common.has_env,
)
def ucx_net_devices(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, name, value, _ in _ucx_env(pod, ctx):
        if name != "UCX_NET_DEVICES":
            continue
        entries = [item.strip() for item in value.split(",") if item.strip()]
        portless = [e for e in entries if _RDMA_DEVICE.match(e)]
        if not portless or "all" in entries:
            continue
        yield Violation(
            f"UCX_NET_DEVICES={value}: {', '.join(portless)} without a port (write "
            f"{portless[0]}:1)",
            (*pod.container_path(index), "env"),
            severity=None if len(portless) == len(entries) else WARNING,
        )
