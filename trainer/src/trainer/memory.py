"""Memory per GPU of a model's training state, estimated before the first step.

Parameters, gradients and optimizer state, in the dtypes the model holds them: DDP
keeps a full replica of each on every rank; sharded data parallelism (fsdp) keeps
1/world_size of each. Activations, the CUDA context, communication buffers and the
allocator's slack come on top, so this is a floor: a run whose floor does not fit
cannot fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

# Optimizer state per parameter, in multiples of the parameter's own size.
OPTIMIZER_STATE = {"adamw": 2}  # exp_avg and exp_avg_sq
SHARDED = ("fsdp",)
REPLICATED = ("ddp",)


def human_bytes(count: float) -> str:
    units = ("B", "KiB", "MiB", "GiB")
    power = min(len(units) - 1, int(math.log(max(count, 1), 1024)))
    return f"{count / 1024**power:.1f} {units[power]}"


@dataclass(frozen=True)
class MemoryEstimate:
    parallelism: str
    world_size: int
    params: int  # bytes per rank
    grads: int
    optimizer: int | None  # None: a plug-in optimizer, whose state is unknown

    @property
    def total(self) -> int:
        return self.params + self.grads + (self.optimizer or 0)

    def describe(self) -> str:
        optimizer = "unknown" if self.optimizer is None else human_bytes(self.optimizer)
        return (
            f"{self.parallelism} at world size {self.world_size}: per GPU "
            f"{human_bytes(self.params)} params + {human_bytes(self.grads)} grads + "
            f"{optimizer} optimizer state = {human_bytes(self.total)} before activations"
        )


def estimate_memory(
    model: nn.Module, optimizer: str, parallelism: str, world_size: int
) -> MemoryEstimate:
    """The training state per rank of `model` under `parallelism` ('ddp' or 'fsdp')."""
    if parallelism not in SHARDED + REPLICATED:
        raise ValueError(f"unknown parallelism {parallelism!r}")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    factor = OPTIMIZER_STATE.get(optimizer)
    state = None if factor is None else factor * grads
    if parallelism in SHARDED:
        params, grads = math.ceil(params / world_size), math.ceil(grads / world_size)
        state = None if state is None else math.ceil(state / world_size)
    return MemoryEstimate(parallelism, world_size, params, grads, state)
