"""Configuration of the trainer, one dataclass per component.

Each component (data, model, optimizer, checkpointer, guard, watchdog, metrics,
transport check, fault injection) reads only its own config; `TrainConfig` composes
them for the training loop. `trainer.cli` builds these from flags and environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MODELS = ("mlp", "cnn", "gpt", "llama")
LANGUAGE_MODELS = ("gpt", "llama")
DATASETS = ("synthetic", "npz", "tokens")
LOSSES = ("cross-entropy",)
OPTIMIZERS = ("adamw",)
LR_SCALING = ("linear", "sqrt", "none")
LR_SCHEDULES = ("cosine", "constant")
CHECKPOINT_MODES = ("async", "sync")
CHECKPOINT_VERIFY = ("crc32", "size")
TRANSPORTS = ("ib", "socket")
FAULT_KINDS = ("sigkill", "sigterm", "nan", "hang", "exception", "watchdog", "nospace", "slow")


@dataclass(frozen=True)
class DataConfig:
    dataset: str = "synthetic"
    path: Path | None = None
    batch_size: int = 16  # samples per rank per step
    seq_len: int = 32  # tokens per sample for the GPT model
    num_samples: int = 4096  # size of the synthetic dataset
    vocab_size: int | None = None  # token datasets: inferred from the file when unset
    seed: int = 0
    tokenizer: Path | None = None  # tokenizer.json, or a directory holding one
    prefetch: int = 2  # batches assembled ahead on a background thread; 0: none


@dataclass(frozen=True)
class ModelConfig:
    name: str = "mlp"  # a built-in name, or a plug-in's module:attr (trainer.plugins)
    width: int | None = None  # hidden size; each model has its own default
    depth: int = 2  # transformer blocks (gpt, llama)
    heads: int = 4  # attention heads (gpt, llama)
    kv_heads: int | None = None  # llama: key/value heads (grouped-query); None: heads
    ffn_dim: int | None = None  # llama: SwiGLU hidden size; None: from the width
    rope_theta: float = 10000.0  # llama
    norm_eps: float = 1e-5  # llama
    weights: Path | None = None  # safetensors file or directory to start from


@dataclass(frozen=True)
class OptimConfig:
    name: str = "adamw"  # or a plug-in's module:attr (trainer.plugins)
    lr: float = 1e-3  # peak learning rate; scaled by `lr_scaling` with the world size
    lr_scaling: str = "none"
    schedule: str = "cosine"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # 0 disables clipping (the norm is still checked)


# -- parallelism, precision and batch (issue 23) --------------------------------------
PARALLELISMS = ("ddp", "fsdp")
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class ParallelConfig:
    """How the model is spread over the ranks, in what precision, over how many samples."""

    parallelism: str = "ddp"  # ddp: a replica per rank; fsdp: FSDP2, sharded per block
    precision: str = "fp32"  # bf16: FSDP2 mixed precision (fp32 reduce), autocast under DDP
    activation_checkpointing: bool = False  # recompute each block's activations in backward
    global_batch: int | None = None  # samples per optimizer step; None: batch size x world


@dataclass(frozen=True)
class JobIdentity:
    """The job a process belongs to, as the operators name it; unknown parts are None."""

    name: str | None = None
    uid: str | None = None

    @property
    def known(self) -> bool:
        return self.name is not None

    def same_job(self, other: JobIdentity) -> bool:
        """Same name, and the same uid unless one side does not know it."""
        uids_differ = self.uid is not None and other.uid is not None and self.uid != other.uid
        return self.name == other.name and not uids_differ

    def __str__(self) -> str:
        if not self.known:
            return "a job with no name"
        return f"job {self.name!r}" + (f" (uid {self.uid})" if self.uid else "")


@dataclass(frozen=True)
class CheckpointConfig:
    directory: Path | None = None
    interval: int = 100  # steps between saves
    keep: int = 3  # complete checkpoints kept
    mode: str = "async"
    verify: str = "crc32"
    resume: bool = True
    job: JobIdentity = field(default_factory=JobIdentity)
    adopt: bool = False  # resume from checkpoints another job wrote
    lock_wait: float = 300.0  # seconds to wait for an earlier launch of this job


@dataclass(frozen=True)
class GuardConfig:
    max_bad_steps: int = 3  # consecutive NaN/Inf steps before a rollback
    max_rollbacks: int = 2  # rollbacks before giving up as diverged


@dataclass(frozen=True)
class WatchdogConfig:
    timeout: float = 600.0  # seconds one training step may take; 0 disables


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 0  # Prometheus endpoint on rank 0; 0 disables
    file: Path | None = None  # JSON lines copy of what rank 0 prints
    log_interval: int = 10
    peak_flops: float | None = None  # per device; default from the GPU model


@dataclass(frozen=True)
class TransportConfig:
    expect: str | None = None  # "ib" or "socket"
    expect_gdr: bool = False


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int
    rank: int | None = None  # None: every rank

    def __str__(self) -> str:
        suffix = "" if self.rank is None else f":rank={self.rank}"
        return f"{self.kind}@{self.step}{suffix}"


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int
    seed: int = 0
    device: str = "auto"
    collective_timeout: float = 1800.0
    record_samples: Path | None = None
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    transport: TransportConfig = field(default_factory=TransportConfig)
    faults: tuple[Fault, ...] = ()
    loss: str = "cross-entropy"  # or a plug-in's module:attr (trainer.plugins)
    # Every flag's value as `--print-config` prints it and checkpoints record it.
    resolved: dict = field(default_factory=dict, compare=False)
