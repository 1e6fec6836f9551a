"""Training metrics: JSON lines on stdout (rank 0) and a Prometheus endpoint on every node.

Every record is one JSON object per line, so `kubectl logs` stays greppable and a file
copy (`--metrics-file`) can be loaded by anything. Global rank 0 prints them.

The Prometheus gauges are served by the first process of each node (local rank 0) on
TRAINER_METRICS_PORT, labelled with the job, the node rank and the rank, so the
cluster's PodMonitor finds one live target per pod. Job-wide values (step, loss,
throughput, MFU, ETTR) are the same on every node; node values (data wait, work time,
straggler ratio, NCCL transport) are the node's own.

A straggler is found without an extra collective: the metrics reduction that every
log interval already does gathers each rank's own work time per step (waiting for its
batch plus the forward pass, the part of a step no peer waits in; `DeviceClock` times
the forward pass on the GPU itself), so every node knows
the whole job's times. A node's work time is its slowest rank's; its straggler ratio is
that over the median of all nodes'. (A slow network link shows in nccl-tests sweeps,
not here: a ring all-reduce is as slow for every rank.)

MFU is achieved model FLOP/s over the peak of the devices; the peak comes from the GPU
model (dense BF16) or `--peak-flops`. ETTR (effective training time ratio) is the time
spent on steps that the job kept, over the wall time since the job first started: work
lost to a restart and time spent restarting count against it.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainer.config import MetricsConfig

# Peak dense BF16 FLOP/s per device; the first matching name wins.
PEAK_FLOPS = (
    ("B200", 2.25e15),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("A100", 312e12),
)

PREFIX = "trainer_"
# Gauges set from the fields of the records of the same name (without the prefix).
GAUGES = {
    "step": "Optimizer steps completed by the job",
    "last_step_timestamp_seconds": "Unix time this node last completed a step (or started)",
    "loss": "Training loss, mean over ranks and the last logging window",
    "step_seconds": "Wall time of one step, mean over the last logging window",
    "samples_per_second": "Samples trained per second by the whole job",
    "tokens_per_second": "Tokens trained per second by the whole job",
    "mfu": "Model FLOPs utilisation (0-1)",
    "ettr": "Effective training time ratio since the job first started (0-1)",
    "data_wait_seconds": "Time per step this node's slowest rank waited for its batch",
    "work_seconds": "Time per step this node's slowest rank spent on its own work "
    "(batch and forward pass), not waiting for peers",
    "straggler_ratio": "This node's work seconds over the median of all nodes' (1: typical)",
    "checkpoint_save_seconds": "Duration of the last completed checkpoint save",
    "checkpoint_blocking_seconds": "Time the last checkpoint save blocked training",
    "failed_checkpoints": "Checkpoint saves that failed (full or read-only volume, ...)",
    "checkpoint_interval_steps": "Steps between checkpoints",
    "last_checkpoint_timestamp_seconds": "Unix time the training state was last saved, or "
    "loaded at start: the work since then is what a failure loses",
    "restarts": "Launches of the job after its first one (resumes from a checkpoint)",
    "world_size": "Processes in the job",
    "skipped_steps": "Updates skipped because of non-finite gradients",
    "rollbacks": "Rollbacks to a checkpoint after repeated non-finite gradients",
}
# Gauges whose value is always 1 and whose label carries the information.
INFO_GAUGES = {
    "nccl_transport": (
        "transport",
        "The network NCCL uses on this node: ib, socket or a plugin's name; unchecked "
        "when no transport was expected, gloo without NCCL",
    ),
}
LABELS = ("training_job", "node_rank", "rank")


def exported_metrics() -> list[str]:
    """Every metric name the endpoint can serve."""
    return sorted(PREFIX + name for name in (*GAUGES, *INFO_GAUGES))


def peak_flops_for(device_name: str | None) -> float | None:
    if not device_name:
        return None
    for marker, flops in PEAK_FLOPS:
        if marker.lower() in device_name.lower():
            return flops
    return None


@dataclass(frozen=True)
class Identity:
    """Where this process sits: its job, node and rank."""

    job: str
    rank: int
    local_rank: int
    node_rank: int

    @classmethod
    def from_env(
        cls, rank: int, local_rank: int, env: Mapping[str, str], checkpoint_dir: Path | None
    ) -> Identity:
        """torchrun sets GROUP_RANK (the node's rank); MPI launchers place ranks node by
        node, so the node is the rank over the processes per node."""
        job = env.get("JOB_NAME") or (checkpoint_dir.name if checkpoint_dir else "") or "local"
        node = env.get("GROUP_RANK", "")
        if not node.isdigit():
            per_node = env.get("LOCAL_WORLD_SIZE") or env.get("OMPI_COMM_WORLD_LOCAL_SIZE") or ""
            node = str(rank // int(per_node)) if per_node.isdigit() and int(per_node) else "0"
        return cls(job, rank, local_rank, int(node))

    def labels(self) -> dict[str, str]:
        return {"training_job": self.job, "node_rank": str(self.node_rank), "rank": str(self.rank)}


@dataclass(frozen=True)
class NodeTimes:
    """A node's share of a logging window, from every rank's (node, work, data wait)."""

    work_seconds: float
    data_wait_seconds: float
    straggler_ratio: float | None
    slowest_node: int
    slowest_ratio: float | None


def node_times(rows: Iterable[tuple[int, float, float]], node: int) -> NodeTimes:
    """`rows` holds one (node rank, work seconds, data wait seconds) per rank."""
    work: dict[int, float] = {}
    wait: dict[int, float] = {}
    for rank_node, rank_work, rank_wait in rows:
        work[rank_node] = max(work.get(rank_node, 0.0), rank_work)
        wait[rank_node] = max(wait.get(rank_node, 0.0), rank_wait)
    median = statistics.median(work.values())
    slowest = max(work, key=lambda n: (work[n], -n))

    def ratio(value: float) -> float | None:
        return value / median if median > 0 else None

    return NodeTimes(work[node], wait[node], ratio(work[node]), slowest, ratio(work[slowest]))


class DeviceClock:
    """Times device work: CUDA events on a GPU, where kernels run after the host has
    moved on, the host clock on a CPU. `seconds(start, end)` is valid once the device
    has passed `end` (after any call that waits for it)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1000 if self.cuda else end - start


class Metrics:
    """Rank 0 prints records; local rank 0 of each node serves the gauges."""

    def __init__(self, config: MetricsConfig, identity: Identity):
        self.prints = identity.rank == 0
        self.file = config.file if self.prints else None
        self._gauges = {}
        self._info = {}
        self.port = None
        self._labels = identity.labels()
        if self.file:
            Path(self.file).parent.mkdir(parents=True, exist_ok=True)
        if config.port and identity.local_rank == 0:
            self._serve(config.port)

    def _serve(self, port: int) -> None:
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        registry = CollectorRegistry()
        # A series appears once it has a value: no MFU on CPUs, no tokens for images.
        for key, doc in GAUGES.items():
            self._gauges[key] = Gauge(PREFIX + key, doc, LABELS, registry=registry)
        for key, (label, doc) in INFO_GAUGES.items():
            self._info[key] = Gauge(PREFIX + key, doc, (*LABELS, label), registry=registry)
        now = time.time()
        self.update(last_step_timestamp_seconds=now, last_checkpoint_timestamp_seconds=now)
        self.server, self.thread = start_http_server(port, registry=registry)
        self.port = self.server.server_port

    def emit(self, event: str, **fields) -> None:
        """Print a record (rank 0) and set the gauges named by its fields (node servers)."""
        self.record(event, **fields)
        self.update(**fields)

    def record(self, event: str, **fields) -> None:
        """Print a record on rank 0 (and append it to the metrics file)."""
        if not self.prints:
            return
        record = {"event": event, "time": round(time.time(), 3)}
        for key, value in fields.items():
            # JSON has no NaN or Infinity: a diverging loss is written as a string.
            finite = not isinstance(value, float) or math.isfinite(value)
            record[key] = value if finite else str(value)
        line = json.dumps(record, allow_nan=False, default=str)
        print(line, file=sys.stdout, flush=True)
        if self.file:
            with open(self.file, "a") as handle:
                handle.write(line + "\n")

    def update(self, **fields) -> None:
        """Set the gauges named by `fields`; None and non-numbers leave a gauge as it is."""
        for key, value in fields.items():
            gauge = self._gauges.get(key)
            if gauge is not None and isinstance(value, int | float) and not isinstance(value, bool):
                gauge.labels(**self._labels).set(value)

    def step(self, step: int) -> None:
        """Every step: progress is visible between logging windows."""
        if self._gauges:
            self.update(step=step, last_step_timestamp_seconds=time.time())

    def info(self, key: str, value: str) -> None:
        """Set an info gauge to `value`, replacing the one it had."""
        gauge = self._info.get(key)
        if gauge is None:
            return
        gauge.clear()
        gauge.labels(**self._labels, **{INFO_GAUGES[key][0]: value}).set(1)

    def close(self) -> None:
        if self._gauges:
            self.server.shutdown()
