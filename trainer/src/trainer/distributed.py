"""Process group setup from whatever launched this process.

torchrun (and the operator's PyTorchJob env) set RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT. mpirun sets its own variables (OMPI_COMM_WORLD_*, or
PMI_* for MPICH-style launchers) and nothing for the rendezvous: ranks then meet in a
file store on the shared checkpoint volume, keyed by the MPI job id, unless
MASTER_ADDR/MASTER_PORT were forwarded. A process started alone is a world of one.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import ConfigError

# Variables an MPI launcher sets that identify one mpirun invocation.
_MPI_JOB_IDS = (
    "TRAINER_RDZV_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_ess_jobid",
    "PMI_KVSNAME",
)


@dataclass(frozen=True)
class LaunchEnv:
    """Who started us and where this process sits in the job."""

    launcher: str  # torchrun | mpirun | single
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str | None = None
    master_port: int | None = None
    job_id: str | None = None  # mpirun: identifies the invocation for the file store


@dataclass(frozen=True)
class Topology:
    """The initialised job: ranks, device and backend."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str
    backend: str
    device: str  # "cpu" or "cuda:N"
    local_world_size: int = 1  # ranks on this node

    @property
    def is_rank_zero(self) -> bool:
        return self.rank == 0


def _int_var(env: Mapping[str, str], name: str) -> int:
    value = env[name]
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None


def _first(env: Mapping[str, str], *names: str) -> str | None:
    return next((name for name in names if env.get(name, "") != ""), None)


def detect(env: Mapping[str, str] | None = None) -> LaunchEnv:
    """Read the launcher's variables; never hard-codes the world size."""
    env = os.environ if env is None else env
    master_addr = env.get("MASTER_ADDR") or None
    master_port = _int_var(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world = _int_var(env, "RANK"), _int_var(env, "WORLD_SIZE")
        local_rank = _int_var(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
        local_world = _int_var(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else 1
        launcher = "torchrun"
        job_id = None
    elif rank_var := _first(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        size_var = "OMPI_COMM_WORLD_SIZE" if rank_var.startswith("OMPI") else "PMI_SIZE"
        if size_var not in env:
            raise ConfigError(
                f"{rank_var} is set but {size_var} is not: incomplete MPI environment"
            )
        rank, world = _int_var(env, rank_var), _int_var(env, size_var)
        local_var = _first(env, "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
        local_rank = _int_var(env, local_var) if local_var else 0
        local_size_var = _first(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
        local_world = _int_var(env, local_size_var) if local_size_var else 1
        launcher = "mpirun"
        id_var = _first(env, *_MPI_JOB_IDS)
        job_id = env[id_var] if id_var else None
    else:
        return LaunchEnv("single", 0, 1, 0, 1)
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank {rank} does not fit a world of {world} processes")
    if not 0 <= local_rank < max(local_world, local_rank + 1):
        raise ConfigError(f"local rank {local_rank} is negative")
    return LaunchEnv(
        launcher, rank, world, local_rank, local_world, master_addr, master_port, job_id
    )


def _device(requested: str, local_rank: int) -> str:
    import torch

    if requested == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise ConfigError(
                f"local rank {local_rank} has no GPU: this node has {count}; "
                "nproc-per-node must not exceed the GPUs per pod"
            )
        return f"cuda:{local_rank}"
    if requested == "cuda":
        raise ConfigError("--device cuda but CUDA is not available")
    return "cpu"


def _store(launch: LaunchEnv, rendezvous_dir: Path | None, timeout: datetime.timedelta):
    import torch.distributed as dist

    if launch.launcher == "single":
        return dist.HashStore()
    if launch.launcher == "torchrun":
        if not (launch.master_addr and launch.master_port):
            raise ConfigError("RANK/WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT are not")
        return None  # env:// also joins torchrun's agent store
    if launch.master_addr and launch.master_port:
        return dist.TCPStore(
            launch.master_addr,
            launch.master_port,
            launch.world_size,
            is_master=launch.rank == 0,
            timeout=timeout,
        )
    if rendezvous_dir is None or launch.job_id is None:
        raise ConfigError(
            "mpirun ranks need a rendezvous: forward MASTER_ADDR and MASTER_PORT with -x, "
            "or give a shared --checkpoint-dir (the MPI job id names the rendezvous file)"
        )
    path = rendezvous_dir / ".rendezvous" / launch.job_id.replace("/", "_").replace("@", "_")
    path.parent.mkdir(parents=True, exist_ok=True)
    return dist.FileStore(str(path), launch.world_size)


def initialize(device: str, timeout_seconds: float, rendezvous_dir: Path | None) -> Topology:
    """Create the default process group: NCCL on GPUs, gloo on CPU."""
    import torch
    import torch.distributed as dist

    launch = detect()
    device = _device(device, launch.local_rank)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(device)
    timeout = datetime.timedelta(seconds=timeout_seconds)
    store = _store(launch, rendezvous_dir, timeout)
    kwargs = {"device_id": torch.device(device)} if backend == "nccl" else {}
    if store is None:
        dist.init_process_group(backend, timeout=timeout, **kwargs)
    else:
        dist.init_process_group(
            backend,
            store=store,
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=timeout,
            **kwargs,
        )
    return Topology(
        launch.rank,
        launch.world_size,
        launch.local_rank,
        launch.launcher,
        backend,
        device,
        launch.local_world_size,
    )


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
