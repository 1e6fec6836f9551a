"""Kubeflow Trainer v2: TrainJobs that fit the runtime they name, and runtimes that fit the
cluster. The pod rules of the other modules already see a TrainJob's effective pods (the
engine resolves it against its runtime); these rules check what only exists in v2: the
runtime reference, numNodes, numProcPerNode, resourcesPerNode, the variables the
Trainer's plugins own, and a runtime's place on the cluster's training network."""

from __future__ import annotations

from collections.abc import Iterator

from trainops import multus
from trainops.model import ERROR, WARNING, Document
from trainops.policy import Context, Violation, pod_rule, resource_rule, trainjob
from trainops.policy.pods import PodTemplate, dicts, gpu_count, is_int, mapping, resources

from . import common

# What v2.3.0's plugins set themselves; its webhook rejects a TrainJob whose trainer.env
# sets one (torch: plugins/torch/torch.go, MPI: plugins/mpi/mpi.go, constants.go).
TORCH_RESERVED = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
MPI_RESERVED = (
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
)
TRAINER = ("spec", "trainer")


def _trainer(doc: Document) -> dict:
    return mapping(mapping(doc.obj.get("spec")).get("trainer"))


def _policy(runtime: Document) -> dict:
    return mapping(mapping(runtime.obj.get("spec")).get("mlPolicy"))


def _node_pod(doc: Document, ctx: Context) -> PodTemplate | None:
    """The pod a TrainJob's (or runtime's) training processes run in: the trainer step's,
    or an MPI runtime's nodes."""
    runtime = doc if doc.kind in common.RUNTIME_KINDS else ctx.runtime_for(doc)
    if runtime is None:
        return None
    role = "node" if "mpi" in _policy(runtime) else common.trainer_step(runtime)
    return next((p for p in ctx.pods(doc) if p.role == role), None)


@resource_rule(
    id="trainjob-runtime-missing",
    severity=ERROR,
    source=(
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/core/clustertrainingruntime.go#L67-L69",
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/core/trainingruntime.go#L97-L99",
    ),
    title="A TrainJob's runtime exists",
    why="The Trainer looks the runtime up when the TrainJob is created; one that names a "
    "runtime the cluster does not have fails at once (TrainingRuntimeNotSupported) and "
    "nothing runs. Runtimes are the platform's: a run names one of its cluster's.",
    fix="Name a runtime the cluster's platform render defines (this repository: "
    "torch-distributed-<fabric>, mpi-distributed-<fabric>), or add the runtime there.",
    kinds=("TrainJob",),
)
def runtime_missing(doc: Document, ctx: Context) -> Iterator[Violation]:
    ref = trainjob.runtime_ref(doc)
    if ref is None or ref[0] not in trainjob.RUNTIME_KINDS:
        return  # the schema check reports a missing or odd reference
    visible = ctx.has_platform or bool(ctx.of_kind(*trainjob.RUNTIME_KINDS))
    if visible and ctx.runtime_for(doc) is None:
        where = "this render or its cluster's platform" if ctx.has_platform else "this render"
        yield Violation(f"{ref[0]} {ref[1]} is in neither {where}", ("spec", "runtimeRef", "name"))


@resource_rule(
    id="trainjob-num-nodes",
    severity=WARNING,
    source="https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/mpi/mpi.go#L88-L92",
    when={
        "warning": "numNodes unset on a runtime of 1 node, or above the cluster profile's "
        "GPU nodes",
        "error": "numNodes of 2 or more on an MPI runtime that runs the launcher as a node "
        "without both a launcher and a node job (the webhook rejects it)",
    },
    title="A TrainJob's node count fits its runtime and its cluster",
    why="numNodes is the TrainJob's node count; without it the runtime's mlPolicy.numNodes "
    "applies, often 1, and a multi-node run silently trains on one node. More nodes than "
    "the cluster has never schedule. An MPI runtime that runs the launcher as a node needs "
    "both a launcher and a node job for more than one node (the webhook rejects it).",
    fix="Set spec.trainer.numNodes to the nodes the run needs, at most the cluster's.",
    kinds=("TrainJob",),
)
def num_nodes(doc: Document, ctx: Context) -> Iterator[Violation]:
    runtime = ctx.runtime_for(doc)
    nodes = _trainer(doc).get("numNodes")
    if nodes is None and runtime is not None:
        default = _policy(runtime).get("numNodes", 1)
        if default == 1:
            yield Violation(
                f"numNodes is unset: {runtime.kind} {runtime.name} runs it on 1 node",
                TRAINER,
                severity=WARNING,
            )
        return
    if not is_int(nodes):
        return
    if ctx.profile is not None and nodes > ctx.profile.nodes:
        yield Violation(
            f"numNodes {nodes} but cluster {ctx.profile.name} has {ctx.profile.nodes} GPU nodes",
            (*TRAINER, "numNodes"),
        )
    if runtime is None or nodes < 2:
        return
    mpi = mapping(_policy(runtime).get("mpi"))
    if mpi.get("runLauncherAsNode") is True:
        jobs = {str(job.get("name")) for job in common.replicated_jobs(runtime)}
        if not {"launcher", "node"} <= jobs:
            yield Violation(
                f"numNodes {nodes} on {runtime.name}, which runs the launcher as a node but "
                "lacks a launcher or a node job",
                (*TRAINER, "numNodes"),
                severity=ERROR,
            )


@resource_rule(
    id="trainjob-procs-per-node",
    severity=WARNING,
    title="A TrainJob's processes per node match the GPUs each node gets",
    why="numProcPerNode becomes PET_NPROC_PER_NODE (torch) or the hostfile's slots (MPI). "
    "More processes than GPUs make ranks fail on CUDA device ordinals; fewer leave GPUs "
    "idle for the whole run.",
    fix="Set spec.trainer.numProcPerNode to the GPUs per node of the runtime (or leave it "
    "unset: the plugins default to one per GPU).",
    kinds=("TrainJob",),
)
def procs_per_node(doc: Document, ctx: Context) -> Iterator[Violation]:
    procs = _trainer(doc).get("numProcPerNode")
    if not is_int(procs):
        return
    pod = _node_pod(doc, ctx)
    if pod is None or not pod.gpus:
        return
    at = (*TRAINER, "numProcPerNode")
    if procs > pod.gpus:
        yield Violation(f"numProcPerNode {procs} but each node gets {pod.gpus} GPUs", at)
    elif procs < pod.gpus:
        yield Violation(
            f"numProcPerNode {procs} leaves {pod.gpus - procs} of each node's {pod.gpus} GPUs idle",
            at,
            severity=WARNING,
        )


@resource_rule(
    id="trainjob-resources-without-gpus",
    severity=ERROR,
    source="https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/torch/torch.go#L126-L134",
    title="resourcesPerNode on a GPU torch runtime states the GPUs",
    why="Trainer v2.3.0 merges resourcesPerNode into the runtime's resources, so the pods "
    "keep the runtime's GPUs, but the torch plugin counts GPUs in resourcesPerNode alone: "
    "with none there and numProcPerNode unset it sets PET_NPROC_PER_NODE to the CPU count, "
    "dozens of ranks on a few GPUs that fail on CUDA device ordinals.",
    fix="Repeat the GPU request in resourcesPerNode (limits nvidia.com/gpu: N), or set "
    "numProcPerNode to the GPUs per node.",
    kinds=("TrainJob",),
)
def resources_without_gpus(doc: Document, ctx: Context) -> Iterator[Violation]:
    trainer = _trainer(doc)
    stated = trainer.get("resourcesPerNode")
    runtime = ctx.runtime_for(doc)
    if not isinstance(stated, dict) or runtime is None or "numProcPerNode" in trainer:
        return
    if "torch" not in _policy(runtime) or gpu_count({"resources": stated}):
        return
    base = _node_pod(runtime, ctx)
    gpus = base.gpus if base is not None else 0
    if gpus:
        limits, requests = (resources({"resources": stated}, s) for s in ("limits", "requests"))
        cpus = requests.get("cpu") or limits.get("cpu") or "at least 1"
        yield Violation(
            f"resourcesPerNode names no GPU: the torch plugin starts one process per CPU "
            f"({cpus}) on nodes that keep {runtime.name}'s {gpus} GPUs",
            (*TRAINER, "resourcesPerNode"),
        )


@resource_rule(
    id="trainjob-reserved-env",
    severity=ERROR,
    source=(
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/torch/torch.go#L65-L76",
        "https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/mpi/mpi.go#L95-L105",
    ),
    title="A TrainJob leaves the plugins' variables to the plugins",
    why="The torch plugin sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, "
    "PET_MASTER_ADDR and PET_MASTER_PORT, the MPI plugin the Open MPI hostfile, slots, "
    "rsh and host-name variables; the Trainer's webhook rejects a TrainJob that sets any "
    "of them in trainer.env, so the run is never created.",
    fix="Drop the variable: set numNodes / numProcPerNode instead, and leave rendezvous and "
    "hostfile to the Trainer.",
    kinds=("TrainJob",),
)
def reserved_env(doc: Document, ctx: Context) -> Iterator[Violation]:
    runtime = ctx.runtime_for(doc)
    policy = _policy(runtime) if runtime is not None else {}
    reserved = MPI_RESERVED if "mpi" in policy else TORCH_RESERVED if "torch" in policy else ()
    for index, entry in enumerate(dicts(_trainer(doc).get("env"))):
        if entry.get("name") in reserved:
            yield Violation(
                f"{entry['name']} belongs to the Trainer's {next(iter(policy))} plugin: "
                "the webhook rejects the TrainJob",
                (*TRAINER, "env", index, "name"),
            )


@resource_rule(
    id="trainjob-image-on-mpi-runtime",
    severity=WARNING,
    title="A TrainJob on an MPI runtime does not change the image of the launcher alone",
    why="The Trainer sets trainer.image on the trainer job's container only, which in an MPI "
    "runtime is the launcher (unless it runs as a node); the ranks run in the node pods, "
    "which keep the runtime's image: launcher and ranks then run different code.",
    fix="Change the image in the runtime (the cluster profile's image), or use a runtime "
    "whose nodes run the image you need.",
    kinds=("TrainJob",),
)
def image_on_mpi_runtime(doc: Document, ctx: Context) -> Iterator[Violation]:
    runtime = ctx.runtime_for(doc)
    if runtime is None or "image" not in _trainer(doc):
        return
    mpi = mapping(_policy(runtime).get("mpi"))
    if "mpi" in _policy(runtime) and mpi.get("runLauncherAsNode") is not True:
        yield Violation(
            f"trainer.image reaches the launcher only; the nodes of {runtime.name} keep the "
            "runtime's image",
            (*TRAINER, "image"),
        )


@pod_rule(
    id="runtime-fabric-network",
    severity=WARNING,
    title="A training runtime's GPU pods attach the cluster's training network",
    why="A runtime is the platform's half of every TrainJob on it: if its GPU pods attach no "
    "NetworkAttachmentDefinition of the cluster (no k8s.v1.cni.cncf.io/networks, or one "
    "naming another network), every run on it has only eth0 and NCCL's traffic goes over "
    "the pod network, or fails on NCCL_SOCKET_IFNAME=net1.",
    fix="Annotate the runtime's pod templates with the cluster's training network "
    "(k8s.v1.cni.cncf.io/networks: training-net); for a TrainJob, do not patch it away.",
    kinds=(*common.RUNTIME_KINDS, "TrainJob"),
    applies=common.gpu_pod,
)
def runtime_fabric_network(pod: PodTemplate, ctx: Context) -> Iterator[Violation]:
    networks = ctx.memo(
        "training-networks", lambda: {d.name for d in ctx.of_kind("NetworkAttachmentDefinition")}
    )
    if not networks:
        return  # no cluster networks in view: nothing to attach to
    attached = [nad for _, nad in common.attached_nads(pod, ctx) if nad is not None]
    if attached:
        return
    value = pod.annotations.get(multus.ANNOTATION)
    at = (*pod.path[:-1], "metadata", "annotations")
    if value:
        at = (*at, multus.ANNOTATION)
    names = ", ".join(sorted(networks))
    yield Violation(
        f"the {pod.role} pods attach none of the cluster's networks ({names}): NCCL gets only eth0",
        at,
    )
