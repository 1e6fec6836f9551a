"""Fixtures of the frameworks' launch arguments: the deepspeed launcher's --launcher backends
against its sizing flags (in the baseline MPIJob's launcher, whose hostfile lists two
workers), and the Megatron-LM options ModelParallelConfig, validate_args and initialize
refuse. Each pair differs in the one flag the rule checks."""

from __future__ import annotations

from collections.abc import Callable

from tests.policies.areas.frameworks import _megatron
from tests.policies.fixtures import Docs, edit, job, pods_of

HOSTFILE = ("deepspeed", "--hostfile", "/etc/mpi/hostfile")


def _deepspeed_launcher(*flags: str) -> Callable[[], Docs]:
    """The MPIJob's launcher runs `deepspeed --hostfile <the operator's> FLAGS train.py`."""

    def change(docs: Docs) -> None:
        launcher = pods_of(job(docs, "MPIJob"))[0]["containers"][0]
        launcher["command"] = [*HOSTFILE, *flags, "train.py"]
        launcher["args"] = ["--deepspeed_config", "ds.json"]

    return edit(change)


def _workers(replicas: int, *flags: str) -> Callable[[], Docs]:
    build = _deepspeed_launcher(*flags)

    def changed() -> Docs:
        docs = build()
        job(docs, "MPIJob")["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
        return docs

    return changed


OPENMPI = ("--launcher", "openmpi")

FIXTURES = {
    "deepspeed-launcher-backend": (
        _deepspeed_launcher(*OPENMPI, "--num_gpus", "8"),
        _deepspeed_launcher(*OPENMPI),
    ),
    "megatron-model-parallel-config": (
        _megatron(defer_embedding_wgrad_compute="", pipeline_model_parallel_size="1"),
        _megatron(defer_embedding_wgrad_compute=""),
    ),
}

MORE = {
    "deepspeed-launcher-backend": [
        (
            _deepspeed_launcher("--launcher", "MPICH", "--num_nodes=2"),
            _deepspeed_launcher("--launcher", "MPICH"),
        ),
        (
            _deepspeed_launcher(*OPENMPI, "--force_multi", "--include", "worker-0@worker-1"),
            _deepspeed_launcher(*OPENMPI, "--force_multi"),
        ),
        (
            _deepspeed_launcher(*OPENMPI, "--include", "worker-0@worker-1"),
            _deepspeed_launcher("--launcher", "pdsh", "--include", "worker-0@worker-1"),
        ),
        (
            _deepspeed_launcher("--launcher", "mpirun"),
            _deepspeed_launcher("--launcher", "OpenMPI"),
        ),
        # One worker in the hostfile: the launcher starts the ranks locally, no backend.
        (_workers(2, *OPENMPI, "--num_gpus", "8"), _workers(1, *OPENMPI, "--num_gpus", "8")),
        # --num_nodes 1 leaves one host: no backend either.
        (
            _deepspeed_launcher(*OPENMPI, "--num_nodes", "2"),
            _deepspeed_launcher(*OPENMPI, "--num_nodes", "1"),
        ),
        # Without ssh every pod launches its own ranks: the backend is never used.
        (
            _deepspeed_launcher(*OPENMPI, "--num_gpus", "8"),
            _deepspeed_launcher(*OPENMPI, "--num_gpus", "8", "--no_ssh", "--node_rank", "0"),
        ),
        (
            _deepspeed_launcher("--no_ssh", "--node_rank", "0", "--elastic_training"),
            _deepspeed_launcher(
                "--no_ssh", "--node_rank", "0", "--elastic_training", "--master_addr", "rank0"
            ),
        ),
        (
            _deepspeed_launcher("--elastic_training", "--master_addr", "rank0", "--no_local_rank"),
            _deepspeed_launcher("--elastic_training", "--master_addr", "rank0"),
        ),
        # A templated backend is not known offline.
        (
            _deepspeed_launcher("--launcher", "mpirun"),
            _deepspeed_launcher("--launcher", "$(DS_LAUNCHER)"),
        ),
    ],
    "megatron-model-parallel-config": [
        (
            _megatron(defer_embedding_wgrad_compute="", no_gradient_accumulation_fusion=""),
            _megatron(defer_embedding_wgrad_compute=""),
        ),
        (
            _megatron(defer_embedding_wgrad_compute="", wgrad_deferral_limit="-1"),
            _megatron(defer_embedding_wgrad_compute="", wgrad_deferral_limit="2"),
        ),
        (
            _megatron(
                overlap_p2p_communication_warmup_flush="",
                num_layers_per_virtual_pipeline_stage="4",
                no_overlap_p2p_communication="",
            ),
            _megatron(
                overlap_p2p_communication_warmup_flush="",
                num_layers_per_virtual_pipeline_stage="4",
            ),
        ),
        (
            _megatron(overlap_p2p_communication_warmup_flush=""),
            _megatron(
                overlap_p2p_communication_warmup_flush="",
                num_virtual_stages_per_pipeline_rank="2",
            ),
        ),
        (
            _megatron(
                drop=("--sequence-parallel",), expert_model_parallel_size="4", num_experts="8"
            ),
            _megatron(expert_model_parallel_size="4", num_experts="8"),
        ),
        # A templated pipeline size is not known offline.
        (
            _megatron(defer_embedding_wgrad_compute="", pipeline_model_parallel_size="1"),
            _megatron(defer_embedding_wgrad_compute="", pipeline_model_parallel_size="$(PP)"),
        ),
        # Arguments read from a checkpoint: not judged from the command line.
        (
            _megatron(overlap_p2p_communication_warmup_flush=""),
            _megatron(
                overlap_p2p_communication_warmup_flush="", use_checkpoint_args="", load="/ckpt"
            ),
        ),
    ],
}
