"""How the model is spread over the ranks, in what precision, and how it is optimized.

`ddp`: DistributedDataParallel, a full replica of parameters, gradients and optimizer
state on every rank; bf16 runs the forward pass under autocast.

`fsdp`: FSDP2 (`fully_shard`) on each block, then on the root: each rank holds
1/world of the parameters, gradients and AdamW state, and gathers one block's
parameters at a time. With more than one node (WORLD_SIZE > LOCAL_WORLD_SIZE) the
mesh is 2-D, (nodes, ranks per node): HSDP, sharded within a node and replicated
across nodes, so the all-gathers stay on the node's own links. bf16 is FSDP2's
MixedPrecisionPolicy: bf16 compute, fp32 parameters and fp32 gradient reduction.
The model is initialised on the meta device everywhere but rank 0, which builds it
on the CPU from the seed (the very parameters a DDP run starts from); once sharded,
each rank receives its shard from rank 0. No GPU ever holds the whole model.

Blocks are the entries of the model's outermost `nn.ModuleList`s (the GPT's
transformer blocks); a model without one is split at its top-level children. With
activation checkpointing each block's activations are recomputed in the backward
pass (the composable `checkpoint`, which keeps parameter names, so checkpoints
load with or without it).

AdamW: no weight decay on biases, norm weights (every parameter of fewer than two
dimensions) and embeddings; the fused implementation on CUDA.
"""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from trainer.config import OptimConfig, ParallelConfig
from trainer.distributed import Topology
from trainer.errors import ConfigError
from trainer.models import training_flops_per_sample


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The units to shard and to checkpoint, in model order."""
    blocks: list[nn.Module] = []
    inside: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and not any(
            name.startswith(prefix + ".") for prefix in inside
        ):
            inside.append(name)
            blocks.extend(module)
    if blocks:
        return blocks
    return [child for child in model.children() if next(child.parameters(), None) is not None]


def mesh_shape(world_size: int, local_world_size: int) -> tuple[int, ...]:
    """(ranks,) on one node; (nodes, ranks per node) for HSDP across nodes."""
    if world_size <= local_world_size:
        return (world_size,)
    if world_size % local_world_size:
        raise ConfigError(
            f"--parallelism fsdp across nodes needs the same number of ranks on every "
            f"node: WORLD_SIZE {world_size} is not a multiple of LOCAL_WORLD_SIZE "
            f"{local_world_size}"
        )
    return (world_size // local_world_size, local_world_size)


def accumulation_steps(config: ParallelConfig, batch_size: int, world_size: int) -> int:
    """Micro-batches per rank per optimizer step that make up the global batch."""
    if config.global_batch is None:
        return 1
    per_pass = batch_size * world_size
    if config.global_batch % per_pass:
        raise ConfigError(
            f"--global-batch {config.global_batch} is not a multiple of --batch-size "
            f"{batch_size} x {world_size} ranks = {per_pass}: choose a batch size that "
            "divides global-batch / world size"
        )
    return config.global_batch // per_pass


@dataclass
class Parallel:
    """The wrapped model and what the training loop needs to drive it."""

    model: nn.Module  # what the loop calls: DDP, or the FSDP2 root
    config: ParallelConfig
    device: torch.device
    mesh_shape: tuple[int, ...] | None = None  # FSDP2: (ranks,) or (nodes, ranks per node)

    @property
    def module(self) -> nn.Module:
        """The model itself (under DDP, the module it wraps)."""
        return self.model.module if isinstance(self.model, DistributedDataParallel) else self.model

    @property
    def sharded(self) -> bool:
        return self.config.parallelism == "fsdp"

    @contextlib.contextmanager
    def micro_batch(self, last: bool) -> Iterator[None]:
        """Forward and backward of one micro-batch; gradients are reduced after the last."""
        if self.sharded:
            self.model.set_requires_gradient_sync(last)
            sync = contextlib.nullcontext()
        else:
            sync = contextlib.nullcontext() if last else self.model.no_sync()
        with sync:
            yield

    def flops_per_sample(self, sample: torch.Tensor) -> float:
        """Training FLOPs of one sample, counted on a forward pass (a collective under FSDP2)."""
        flops = training_flops_per_sample(self.module, sample)
        if self.sharded:
            # The FSDP2 root keeps its parameters gathered after a forward pass until
            # the backward pass, which this one never has.
            self.model.reshard()
        return flops

    def autocast(self):
        """The forward pass's precision context (FSDP2 casts by itself)."""
        if self.config.precision == "bf16" and not self.sharded:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def build(
    make_model: Callable[[], nn.Module],
    config: ParallelConfig,
    topo: Topology,
    device: torch.device,
    seed: int,
    initialize: Callable[[nn.Module], None] = lambda model: None,
) -> Parallel:
    """`make_model()` built, wrapped for `config.parallelism` and placed on `device`.

    `initialize(model)` runs on every model built with real parameters (pretrained
    weights, say): on every rank under DDP, on rank 0 only under FSDP2.
    """
    if config.parallelism == "ddp":
        torch.manual_seed(seed)
        model = make_model()
        initialize(model)
        model = model.to(device)
        _checkpoint_blocks(model, config)
        ids = [device.index] if device.type == "cuda" else None
        return Parallel(DistributedDataParallel(model, device_ids=ids), config, device)
    shape = mesh_shape(topo.world_size, topo.local_world_size)
    model = _fully_shard(make_model, initialize, config, shape, topo.rank, device, seed)
    return Parallel(model, config, device, shape)


def _checkpoint_blocks(model: nn.Module, config: ParallelConfig) -> None:
    if config.activation_checkpointing:
        from torch.distributed._composable import checkpoint

        for block in blocks_of(model):
            checkpoint(block)


def _fully_shard(
    make_model: Callable[[], nn.Module],
    initialize: Callable[[nn.Module], None],
    config: ParallelConfig,
    shape: tuple[int, ...],
    rank: int,
    device: torch.device,
    seed: int,
) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
    torch.manual_seed(seed)
    if rank == 0:
        model = make_model()
        initialize(model)
        full_state = model.state_dict()
    else:
        with torch.device("meta"):
            model = make_model()
        full_state = {}
    _checkpoint_blocks(model, config)
    if config.precision == "bf16":
        block_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        root_policy = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.float32
        )
    else:
        block_policy = root_policy = MixedPrecisionPolicy()
    for block in blocks_of(model):
        fully_shard(block, mesh=mesh, mp_policy=block_policy)
    fully_shard(model, mesh=mesh, mp_policy=root_policy)
    if rank == 0:
        model.to(device)
    else:
        model.to_empty(device=device)
    # Rank 0's parameters, each rank keeping its shard; then every buffer, which
    # FSDP2 does not shard and a state dict may not hold (non-persistent ones).
    set_model_state_dict(
        model,
        full_state,
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
    )
    del full_state
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)
    return model


def param_groups(model: nn.Module, config: OptimConfig, lr: float) -> list[dict]:
    """The model's parameters in two groups: decayed, and not (biases, norms, embeddings)."""
    decay, no_decay, seen = [], [], set()
    for module in model.modules():
        for param in module.parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            exempt = param.ndim < 2 or isinstance(module, nn.Embedding)
            (no_decay if exempt else decay).append(param)
    return [
        {"params": params, "lr": lr, "weight_decay": wd}
        for params, wd in ((decay, config.weight_decay), (no_decay, 0.0))
        if params
    ]


def adamw(groups: list[dict]) -> torch.optim.Optimizer:
    """AdamW over `groups`; the fused implementation when the parameters are on CUDA."""
    on_cuda = groups[0]["params"][0].device.type == "cuda"
    return torch.optim.AdamW(groups, fused=True if on_cuda else None)


def clip_gradients(parameters: Iterable[torch.Tensor], max_norm: float) -> float:
    """Clip to `max_norm` (inf: only measure); the total norm, the same on every rank."""
    parameters = [p for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in parameters])
    if isinstance(total, DTensor):  # FSDP2: each rank holds a partial norm
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
    return float(total)


def local_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes this rank holds of parameters, gradients and optimizer state."""

    def local(tensor: torch.Tensor) -> int:
        if isinstance(tensor, DTensor):
            tensor = tensor.to_local()
        return tensor.numel() * tensor.element_size()

    total = 0
    for param in model.parameters():
        total += local(param)
        if param.grad is not None:
            total += local(param.grad)
    for state in optimizer.state.values():
        total += sum(local(v) for v in state.values() if isinstance(v, torch.Tensor))
    return total


def peak_memory_bytes(device: torch.device) -> int:
    """The most memory this rank has used: the GPU's allocator, else the process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
