"""Launch consistency: torchrun's counts, rendezvous endpoints and argument lists.

The rules read what each pod template's containers start (`commandline`) and
compare it with the shape of the workload around them: how many pods the job
runs at once, which hostnames its pods get, which variables its operator sets.
They apply to every kind that holds pod templates (PyTorchJob, Job, JobSet,
Volcano Job, LeaderWorkerSet, Deployment...).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule
from trainops.policy.pods import PodTemplate, env_of, gpu_count, is_int, mapping

from . import commandline, common

_FLAG_VALUE = re.compile(r"^(--?[A-Za-z][\w.-]*) +\S")
# Open MPI's parameter options take a name and a value; the value may itself be a
# command line (plm_rsh_args "-p 2222 -o ...") and is one argument on purpose.
_NAME_VALUE_OPTIONS = ("--mca", "-mca", "--gmca", "-gmca", "--prtemca", "--pmixmca")
NNODES = ("--nnodes",)
NPROC = ("--nproc-per-node", "--nproc_per_node")
NODE_RANK = ("--node-rank", "--node_rank")
ENDPOINTS = ("--rdzv-endpoint", "--rdzv_endpoint", "--master-addr", "--master_addr")
RDZV_BACKEND = ("--rdzv-backend", "--rdzv_backend")
RDZV_ID = ("--rdzv-id", "--rdzv_id")
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]")
_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# Kinds whose pod templates are Jobs: a template's pods come from completions/parallelism.
JOB_TEMPLATE_KINDS = ("Job", "CronJob", "JobSet", "TrainingRuntime", "ClusterTrainingRuntime")
KUBEFLOW_RENDEZVOUS = ("PyTorchJob",)  # the operator sets the rendezvous variables itself
TORCHRUN_DOCS = "https://docs.pytorch.org/docs/2.9/elastic/run.html"
# Training Operator v1.9.0: every replica (Master + Worker) is a node of the rendezvous,
# PET_NNODES is their total, MASTER_ADDR/RANK exist only with a Master replica.
PYTORCHJOB_ENV = (
    "https://github.com/kubeflow/trainer/blob/v1.9.0/pkg/controller.v1/pytorch/envvar.go"
)


@dataclass(frozen=True)
class Group:
    """The pods one torchrun rendezvous gathers: how many, and how to say it."""

    nodes: int | None  # None: a count that is not a number
    low: int | None = None  # elastic range
    high: int | None = None
    what: str = ""


def _torchrun_pods(pods: list[PodTemplate]) -> list[PodTemplate]:
    return [p for p in pods if any(commandline.runs_torchrun(c) for c in p.containers)]


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        if isinstance(obj, dict):
            obj = obj.get(step)
        elif isinstance(obj, list) and isinstance(step, int) and step < len(obj):
            obj = obj[step]
        else:
            return None
    return obj


def job_spec(pod: PodTemplate) -> dict[str, Any]:
    """The batch/v1 Job spec a pod template belongs to (Job, CronJob, JobSet), or {}."""
    volcano = pod.doc.api_version.startswith("batch.volcano.sh/")
    if pod.doc.kind not in JOB_TEMPLATE_KINDS or pod.runtime is not None or volcano:
        return {}
    return mapping(_at(pod.doc.obj, pod.path[:-2]))


def _completions(spec: dict[str, Any]) -> int | None:
    value = spec.get("completions", spec.get("parallelism", 1))
    return value if is_int(value) else None


def group(pod: PodTemplate, ctx: Context) -> Group:
    """The rendezvous this pod's torchrun joins."""
    doc = pod.doc
    if pod.runtime is not None:
        return Group(None)  # a TrainJob: the torch plugin passes the node count itself
    spec = mapping(doc.obj.get("spec"))
    if doc.kind == "PyTorchJob":
        elastic = spec.get("elasticPolicy")
        if isinstance(elastic, dict):
            low = elastic.get("minReplicas", elastic.get("maxReplicas"))
            high = elastic.get("maxReplicas", low)
            if is_int(low) and is_int(high):
                return Group(_worker_replicas(doc), low, high, f"elasticPolicy allows {low}:{high}")
            return Group(None)
        # Every replica joins the rendezvous (the operator's PET_NNODES is their total),
        # whether its torchrun is on the command line or the image's entry point.
        total = _worker_replicas(doc)
        return Group(total, what=f"the job runs {total} pods with torchrun")
    if doc.kind == "LeaderWorkerSet":
        size = mapping(spec.get("leaderWorkerTemplate")).get("size", 1)
        return Group(size if is_int(size) else None, what=f"the group has {size} pods")
    total = 0
    for other in _torchrun_pods(ctx.pods(doc)):
        count = _completions(job_spec(other)) if job_spec(other) else other.replicas
        if count is None:
            return Group(None)
        copies = _replicated_job_copies(other)
        if copies is None:
            return Group(None)
        total += count * copies
    return Group(total, what=f"the job runs {total} pods with torchrun")


def _worker_replicas(doc: Document) -> int | None:
    worker = _replicas(doc, "Worker")
    master = _replicas(doc, "Master")
    return worker + master if worker is not None and master is not None else None


def _replicated_job_copies(pod: PodTemplate) -> int | None:
    """How many copies of a JobSet's replicated job hold this template (1 elsewhere)."""
    if pod.doc.kind not in ("JobSet", "TrainingRuntime", "ClusterTrainingRuntime"):
        return 1
    copies = mapping(_at(pod.doc.obj, pod.path[:-5])).get("replicas", 1)
    return copies if is_int(copies) else None


def _words(pod: PodTemplate) -> Iterator[tuple[int, dict[str, Any], list[str]]]:
    for index, container in enumerate(pod.containers):
        if commandline.runs_torchrun(container):
            yield index, container, commandline.words(container)


def _resolve(value: str, container: dict[str, Any]) -> str:
    """`value` with $(VAR) replaced by the container's literal env values it can see."""
    env = env_of(container)
    return _VARIABLE.sub(lambda m: env.get(m.group(1)) or m.group(0), value)


def _host(value: str) -> str:
    value = value.strip()
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _unresolved(value: str) -> bool:
    return "$" in value or "{{" in value


@pod_rule(
    id="torchrun-nnodes",
    severity=ERROR,
    source=(TORCHRUN_DOCS, PYTORCHJOB_ENV + "#L116-L121"),
    title="torchrun --nnodes agrees with the pods the job runs",
    why="torchrun's rendezvous waits until --nnodes nodes have joined. A hard-coded --nnodes "
    "that differs from the number of pods the job runs at once (PyTorchJob replicas, Indexed "
    "Job completions, JobSet replicas x completions, LeaderWorkerSet size, Volcano task "
    "replicas) makes it wait forever for nodes that never come, or start without some of "
    "them; an Indexed Job whose parallelism is below its completions never has all ranks "
    "running at once.",
    fix="Make --nnodes the number of pods (or let the operator pass it: PET_NNODES in a "
    "PyTorchJob or TrainJob), and parallelism equal to completions.",
    applies=common.runs_torchrun,
)
def nnodes(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial or not any(True for _ in _words(pod)):
        return
    spec = job_spec(pod)
    completions, parallelism = spec.get("completions"), spec.get("parallelism", 1)
    if is_int(completions) and is_int(parallelism) and parallelism < completions:
        yield Violation(
            f"parallelism {parallelism} is below completions {completions}: only "
            f"{parallelism} of the {completions} ranks run at once and rendezvous never "
            "completes",
            (*pod.path[:-2], "parallelism"),
        )
    expected = group(pod, ctx)
    for index, container, words in _words(pod):
        value, _ = commandline.flag(words, *NNODES)
        if value is None:
            continue
        value = _resolve(value, container)
        if _unresolved(value):
            continue
        at = pod.container_path(index)
        if expected.low is not None:
            # The range, its upper end, or the pods there are (a fixed size that works).
            allowed = (f"{expected.low}:{expected.high}", str(expected.high), str(expected.nodes))
            if value not in allowed:
                yield Violation(f"--nnodes={value} but {expected.what}", at)
        elif expected.nodes is not None and value != str(expected.nodes):
            yield Violation(f"--nnodes={value} but {expected.what}", at)


@pod_rule(
    id="torchrun-nproc-per-node",
    severity=WARNING,
    when={
        "error": "more processes than GPUs: two ranks on one GPU make NCCL fail its init "
        "(Duplicate GPU detected), a device index past the GPUs fails in CUDA",
        "warning": "fewer processes than GPUs: the rest sit idle",
    },
    source="https://github.com/NVIDIA/nccl/blob/v2.27.7-1/src/init.cc#L737",
    title="Processes per node match the GPUs each pod gets",
    why="With more processes than GPUs, ranks share a GPU (or crash on CUDA device ordinals, "
    "depending on how the script picks its device); with fewer, GPUs sit idle for the whole "
    "run.",
    fix="Set --nproc-per-node (and a PyTorchJob's spec.nprocPerNode) to the GPUs in the "
    "container's limits, or to 'gpu'.",
    applies=common.gpu_pod,
)
def nproc_per_node(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    spec = mapping(pod.doc.obj.get("spec"))
    declared = None
    if pod.doc.kind == "PyTorchJob":
        declared = spec.get("nprocPerNode") or mapping(spec.get("elasticPolicy")).get(
            "nProcPerNode"
        )
    for index, container in enumerate(pod.containers):
        gpus = gpu_count(container)
        if not gpus:
            continue
        value = None
        if commandline.runs_torchrun(container):
            value, _ = commandline.flag(commandline.words(container), *NPROC)
        for source, given in (("--nproc-per-node", value), ("nprocPerNode", declared)):
            if given is None or str(given) in ("gpu", "auto") or _unresolved(str(given)):
                continue
            if str(given) != str(gpus):
                more = str(given).isdigit() and int(str(given)) > gpus
                yield Violation(
                    f"{source}={given} but the container gets {gpus} GPUs",
                    pod.container_path(index),
                    severity=ERROR if more else None,
                )


@pod_rule(
    id="torchrun-multinode-args",
    severity=ERROR,
    source=TORCHRUN_DOCS,
    title="A multi-pod job's torchrun does not run each pod on its own",
    why="--standalone starts a private rendezvous on localhost in every pod; an endpoint or "
    "MASTER_ADDR of localhost points every pod at itself; a literal --node-rank in a template "
    "that several pods share gives them all the same rank under the static rendezvous. In "
    "each case the pods never form one group: they hang in rendezvous or train alone.",
    fix="Drop --standalone and literal ranks; point the rendezvous at the first pod's "
    "hostname ($(MASTER_ADDR) in a PyTorchJob, <jobset>-<job>-0-0.<subdomain> in a JobSet) "
    "and take the rank from the pod ($(JOB_COMPLETION_INDEX), $(LWS_WORKER_INDEX)).",
    applies=common.torch_rendezvous,
)
def multinode_args(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    size = group(pod, ctx)
    several = (size.nodes or 0) > 1 or (size.high or 0) > 1 or (pod.replicas or 0) > 1
    if not several:
        return
    for index, container, words in _words(pod):
        at = pod.container_path(index)
        if commandline.has_flag(words, "--standalone"):
            yield Violation("--standalone in a job of several pods: each pod trains alone", at)
        endpoint, _ = commandline.flag(words, *ENDPOINTS)
        if endpoint is not None and _host(_resolve(endpoint, container)) in LOOPBACK:
            yield Violation(
                f"rendezvous at {_resolve(endpoint, container)}: every pod connects to itself",
                at,
            )
        backend, _ = commandline.flag(words, *RDZV_BACKEND)
        rank, _ = commandline.flag(words, *NODE_RANK)
        static = backend in (None, "static")
        if static and rank is not None and rank.isdigit() and (pod.replicas or 0) > 1:
            yield Violation(
                f"--node-rank={rank} in a template of {pod.replicas} pods: they all claim "
                "the same rank",
                at,
            )
    if pod.doc.kind in KUBEFLOW_RENDEZVOUS:
        return  # the operator's MASTER_ADDR comes after the template's and wins
    for index, container in enumerate(pod.containers):
        address = env_of(container).get("MASTER_ADDR")
        if address is not None and _host(address) in LOOPBACK:
            yield Violation(
                f"MASTER_ADDR={address} in a job of several pods: every pod connects to itself",
                pod.container_path(index),
            )


@pod_rule(
    id="rendezvous-host-resolves",
    severity=ERROR,
    when={
        "error": "the hostname cannot resolve: a subdomain, replicated job or DNS setting "
        "that the pods do not get",
        "warning": "an Indexed Job's hostname needs a headless Service this render does not "
        "define (it may be applied apart)",
    },
    source="https://github.com/kubernetes-sigs/jobset/blob/f22e565ac3cc3265c7c45ef67ecffdc689af5d77/pkg/controllers/jobset_controller.go#L1090-L1097",
    title="Rendezvous hostnames are ones the pods really get",
    why="A pod of an Indexed Job is reachable as <job>-<index>.<subdomain> only when its "
    "template sets spec.subdomain and a headless Service of that name exists; a JobSet's pods "
    "as <jobset>-<replicated job>-<job index>-<pod index>.<subdomain> only with DNS hostnames "
    "enabled (the default) and the right names. A rendezvous address that does not resolve "
    "leaves every rank retrying until the timeout.",
    fix="Use the hostname the controller gives rank 0's pod, set spec.subdomain (and a "
    "headless Service) for Indexed Jobs, and keep JobSet network.enableDNSHostnames on.",
    applies=common.torch_rendezvous,
)
def host_resolves(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.doc.kind not in ("Job", "JobSet"):
        return
    for index, container in enumerate(pod.containers):
        for address in _addresses(container):
            if _unresolved(address):
                continue
            host = _host(address).lower()
            at = pod.container_path(index)
            if pod.doc.kind == "Job":
                yield from _job_host(pod, host, at, ctx)
            else:
                yield from _jobset_host(pod, host, at)


def _addresses(container: dict[str, Any]) -> list[str]:
    found = []
    if commandline.runs_torchrun(container):
        value, _ = commandline.flag(commandline.words(container), *ENDPOINTS)
        if value is not None:
            found.append(_resolve(value, container))
    env = env_of(container)
    for name in ("MASTER_ADDR", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT"):
        if env.get(name):
            found.append(_resolve(env[name], container))
    return list(dict.fromkeys(found))


def _job_host(pod: PodTemplate, host: str, at: tuple, ctx: Context) -> Iterator[Violation]:
    match = re.fullmatch(rf"{re.escape(pod.doc.name)}-\d+\.([a-z0-9-]+)(\..*)?", host)
    if match is None:
        return
    wanted = match.group(1)
    subdomain = pod.spec.get("subdomain")
    if subdomain != wanted:
        detail = f"spec.subdomain is {subdomain!r}" if subdomain else "no spec.subdomain"
        yield Violation(f"{host} resolves only with spec.subdomain {wanted!r} ({detail})", at)
    elif ctx.find("Service", wanted, pod.doc.namespace or None) is None:
        yield Violation(
            f"{host} needs a headless Service {wanted!r}, which this render does not define",
            at,
            severity=WARNING,
        )


def _jobset_host(pod: PodTemplate, host: str, at: tuple) -> Iterator[Violation]:
    name = pod.doc.name
    if not host.startswith(f"{name}-"):
        return
    spec = mapping(pod.doc.obj.get("spec"))
    network = mapping(spec.get("network"))
    match = re.fullmatch(rf"{re.escape(name)}-([a-z0-9-]+)-\d+-\d+\.([a-z0-9-]+)(\..*)?", host)
    if match is None:
        return
    job, subdomain = match.group(1), match.group(2)
    jobs = [mapping(j).get("name") for j in spec.get("replicatedJobs") or []]
    if network.get("enableDNSHostnames") is False:
        yield Violation(
            f"{host}: network.enableDNSHostnames is false, so the pods get no DNS records", at
        )
    if job not in jobs:
        yield Violation(f"{host} names replicated job {job!r}; the JobSet has {jobs}", at)
    wanted = network.get("subdomain") or name
    if subdomain != wanted:
        yield Violation(f"{host} uses subdomain {subdomain!r}; the JobSet's is {wanted!r}", at)


def _replicas(doc: Document, role: str) -> int | None:
    """Replicas of `role` (0 when the job has none; None when the count is not an integer,
    which the schema check reports)."""
    specs = mapping(mapping(doc.obj.get("spec")).get("pytorchReplicaSpecs"))
    if role not in specs:
        return 0
    count = mapping(specs[role]).get("replicas", 1)
    return count if is_int(count) else None


@resource_rule(
    id="rendezvous-endpoint",
    severity=ERROR,
    source=PYTORCHJOB_ENV + "#L66-L74",
    title="Rendezvous endpoints name pods and variables the job has",
    why="Only jobs with a Master get MASTER_ADDR/MASTER_PORT and a <job>-master-0 Service; an "
    "elastic Worker-only job gets PET_RDZV_ENDPOINT instead. An endpoint naming something "
    "that does not exist leaves every worker waiting in rendezvous.",
    fix="In Worker-only jobs drop --rdzv_endpoint and let torchrun read PET_RDZV_ENDPOINT; use "
    "$(MASTER_ADDR) only with a Master replica.",
    kinds=("PyTorchJob",),
)
def rendezvous(doc: Document, ctx: Context) -> Iterator[Violation]:
    has_master = _replicas(doc, "Master") != 0
    for pod in ctx.pods(doc):
        for index, container in enumerate(pod.containers):
            words = commandline.words(container)
            value, _ = commandline.flag(words, *ENDPOINTS)
            if value is None:
                continue
            at = pod.container_path(index)
            if "$(MASTER_ADDR)" in value and not has_master:
                yield Violation(
                    f"{value}: the operator injects MASTER_ADDR only when the job has a Master", at
                )
            host = value.split(":", 1)[0]
            if host.endswith("-master-0") and not has_master:
                yield Violation(f"{value}: the job has no Master replica, so no {host}", at)
            elif host.endswith("-master-0") and host != f"{doc.name}-master-0":
                yield Violation(f"{value} names another job's master (this job is {doc.name})", at)


@pod_rule(
    id="elastic-rdzv-id",
    severity=WARNING,
    title="Jobs sharing an etcd rendezvous set their own rendezvous id",
    why="torchrun's default rendezvous id is the literal 'none'. With the etcd backends the "
    "rendezvous state lives on a server other jobs may use too, keyed by that id: jobs that keep "
    "the default join each other's groups or fail with RendezvousClosedError (pytorch#82160). "
    "The c10d backend keeps its state in the job's own store, so it needs no id.",
    fix="Set spec.elasticPolicy.rdzvId (or --rdzv-id) to something unique per job (its name).",
    applies=common.torch_rendezvous,
)
def rdzv_id(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    elastic = mapping(pod.doc.obj.get("spec")).get("elasticPolicy")
    if pod.doc.kind == "PyTorchJob" and isinstance(elastic, dict):
        first = ctx.pods(pod.doc)[0] is pod  # the job has one policy: report it once
        shared = str(elastic.get("rdzvBackend", "")).startswith("etcd")
        if first and shared and not elastic.get("rdzvId"):
            yield Violation(
                f"elasticPolicy uses rdzvBackend {elastic['rdzvBackend']} without rdzvId "
                "(torchrun uses 'none')",
                ("spec", "elasticPolicy"),
            )
        return
    for index, _, words in _words(pod):
        backend, _ = commandline.flag(words, *RDZV_BACKEND)
        shared = backend is not None and backend.startswith("etcd")
        if shared and not commandline.has_flag(words, *RDZV_ID):
            yield Violation(
                f"--rdzv-backend={backend} without --rdzv-id (torchrun uses 'none')",
                pod.container_path(index),
            )


@pod_rule(
    id="argument-packs-flag-and-value",
    severity=WARNING,
    title="Each flag and its value are separate argument elements",
    why="Kubernetes passes each list element as one argv entry without a shell: '-x "
    "NCCL_DEBUG=INFO' reaches mpirun as a single unknown option, '--nnodes 2' as a flag "
    "named '--nnodes 2'.",
    fix="Split the element: [-x, NCCL_DEBUG=INFO], or write --flag=value.",
    applies=common.has_command,
)
def packed_argument(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        script = commandline.shell_script(container)
        for key in ("command", "args"):
            words = container.get(key)
            if not isinstance(words, list):
                continue
            offset = 0 if key == "command" else len(container.get("command") or [])
            for position, word in enumerate(words):
                if script is not None and offset + position == script[0]:
                    continue
                if position >= 2 and words[position - 2] in _NAME_VALUE_OPTIONS:
                    continue
                if isinstance(word, str) and _FLAG_VALUE.match(word):
                    yield Violation(
                        f"{word!r} is one argument: split the flag from its value",
                        (*pod.container_path(index), key, position),
                    )


@pod_rule(
    id="shell-without-exec",
    severity=WARNING,
    title="A shell that starts torchrun or mpirun hands over with exec",
    why="Without exec the shell stays PID 1 and does not forward SIGTERM: torchrun never gets "
    "the signal, the trainer never writes its emergency checkpoint, and the pod is killed "
    "at the end of the grace period.",
    fix="Start the launcher with exec: sh -c 'exec trainer-launch ...' (or 'exec torchrun ...').",
    applies=common.has_command,
)
def shell_without_exec(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container in enumerate(pod.containers):
        script = commandline.shell_script(container)
        if script is None:
            continue
        text = script[1]
        for launcher in ("torchrun", "trainer-launch", "mpirun", "python -m torch.distributed.run"):
            if launcher in text and f"exec {launcher}" not in text:
                yield Violation(
                    f"the shell starts {launcher} without exec", pod.container_path(index)
                )
                break


def _restarts_follow_exit_codes(pod: PodTemplate) -> bool:
    """The operator decides restarts from this pod's exit code: a PyTorchJob replica with
    restartPolicy ExitCode, or a Trainer v2 job whose pod failure policy reads exit codes
    (the runtimes' ExitCode emulation)."""
    if pod.doc.kind == "PyTorchJob":
        replicas = mapping(mapping(pod.doc.obj.get("spec")).get("pytorchReplicaSpecs"))
        return mapping(replicas.get(pod.role)).get("restartPolicy") == "ExitCode"
    source = pod.runtime or pod.doc
    if source.kind not in common.RUNTIME_KINDS or common.mpi_runtime(source):
        return False  # mpirun's exit code is the launcher's: not wrapped by design
    job = mapping(_at(source.obj, pod.path[:-2]))  # the pod spec's Job spec in the runtime
    rules = mapping(job.get("podFailurePolicy")).get("rules")
    return any(isinstance(r, dict) and "onExitCodes" in r for r in rules or [])


def _decisive_container(pod: PodTemplate) -> int | None:
    """The container whose exit code the operator reads (PyTorchJob: `pytorch`;
    Trainer v2: the trainer node's `node`), by index."""
    wanted = "pytorch" if pod.doc.kind == "PyTorchJob" else "node"
    for index, container in enumerate(pod.containers):
        if container.get("name") == wanted:
            return index
    return 0 if pod.containers else None


@pod_rule(
    id="exitcode-policy-launcher",
    severity=WARNING,
    title="Restarts by exit code need a command whose exit code says what happened",
    why="Under restartPolicy ExitCode (and the Trainer v2 runtimes' pod failure policy) "
    "1-127 fails the job for good and 128-255 restarts it. Plain torchrun exits 1 whenever "
    "a worker fails or it is stopped; a bare `python train.py`, `accelerate launch` or "
    "`deepspeed` exits 1 for every uncaught exception, a CUDA or NCCL error included. "
    "Preemptions and GPU faults then end the job, and which rank's code wins is a race.",
    fix="Start the command under trainer-launch, which classifies how each worker ended: "
    "trainer-launch -- python train.py (or trainops new-run --command), or use "
    "restartPolicy OnFailure.",
    kinds=("PyTorchJob", "TrainJob", *common.RUNTIME_KINDS),
)
def exitcode_policy_launcher(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    if pod.partial or not _restarts_follow_exit_codes(pod):
        return
    index = _decisive_container(pod)
    if index is None:
        return
    container = pod.containers[index]
    words = commandline.words(container)
    if not words or commandline.runs(container, ("trainer-launch", "trainer.launch")):
        return  # no command: the image's entry point (the trainer image's is trainer-launch)
    where = "restarts on exit codes" if pod.doc.kind == "PyTorchJob" else "fails by exit code"
    if commandline.runs_torchrun(container):
        problem = "but torchrun exits 1 for every failure"
    else:
        shown = " ".join(words[:3]) + (" ..." if len(words) > 3 else "")
        problem = (
            f"but runs {shown!r} unwrapped: it exits 1 for any exception, a CUDA error "
            "included (never retried)"
        )
    at = (*pod.container_path(index), "command" if "command" in container else "args")
    yield Violation(f"{pod.role} {where}, {problem}", at)


TORCHRUN_SOURCE = "https://github.com/pytorch/pytorch/blob/v2.9.0/torch/distributed/run.py"
# What torchrun's --nproc-per-node takes besides a number (determine_local_world_size),
# and the rendezvous backends torch registers.
NPROC_WORDS = ("cpu", "gpu", "auto", "xpu", "hpu", "npu", "mtia", "privateuseone")
RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")


def sees_gpus(pod: PodTemplate, container: dict[str, Any]) -> bool:
    """The container may see GPUs: it asks for some (whole GPUs, MIG slices, shares, DRA
    claims) or gets them from a runtime class, NVIDIA_VISIBLE_DEVICES or privilege."""
    asked = {
        str(name)
        for section in ("limits", "requests")
        for name in mapping(mapping(container.get("resources")).get(section))
    }
    return bool(
        gpu_count(container)
        or any("gpu" in name or "mig-" in name for name in asked)
        or pod.spec.get("resourceClaims")
        or pod.spec.get("runtimeClassName")
        or "NVIDIA_VISIBLE_DEVICES" in env_of(container)
        or mapping(container.get("securityContext")).get("privileged") is True
    )


@pod_rule(
    id="torchrun-flag-values",
    severity=ERROR,
    source=TORCHRUN_SOURCE,
    title="torchrun's flags have values it accepts",
    why="torchrun's config_from_args refuses --nproc-per-node values other than a number, "
    "cpu, gpu, auto or an accelerator's name, and --nproc-per-node gpu where CUDA sees no "
    "GPU ('Cuda is not available'); it asserts 0 < MIN <= MAX for --nnodes MIN:MAX, and a "
    "--rdzv-backend other than static, c10d, etcd or etcd-v2 is not registered. torchrun "
    "exits before it starts a worker.",
    fix="Give --nproc-per-node a number or gpu (in a container that requests GPUs), "
    "--nnodes N or MIN:MAX with MIN <= MAX, and --rdzv-backend c10d.",
    applies=common.runs_torchrun,
)
def torchrun_flag_values(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    for index, container, words in _words(pod):
        at = pod.container_path(index)
        nproc, _ = commandline.flag(words, *NPROC)
        if nproc is not None and not _unresolved(nproc) and not nproc.isdigit():
            if nproc not in NPROC_WORDS:
                yield Violation(f"--nproc-per-node={nproc}: torchrun raises ValueError", at)
            elif nproc == "gpu" and not sees_gpus(pod, container):
                yield Violation(
                    "--nproc-per-node=gpu in a container that gets no GPU: torchrun raises "
                    "'Cuda is not available'",
                    at,
                )
        nnodes, _ = commandline.flag(words, *NNODES)
        if nnodes is not None and not _unresolved(nnodes):
            low, _, high = nnodes.partition(":")
            high = high or low
            if low.isdigit() and high.isdigit() and not 0 < int(low) <= int(high):
                yield Violation(f"--nnodes={nnodes}: torchrun asserts 0 < MIN <= MAX", at)
        backend, _ = commandline.flag(words, *RDZV_BACKEND)
        if backend is not None and not _unresolved(backend) and backend not in RDZV_BACKENDS:
            yield Violation(f"--rdzv-backend={backend} is not a registered rendezvous backend", at)
