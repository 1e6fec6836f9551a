"""Training metrics: JSON lines on stdout (rank 0) and a Prometheus endpoint.

Every record is one JSON object per line, so `kubectl logs` stays greppable and a file
copy (`--metrics-file`) can be loaded by anything. The Prometheus gauges mirror the
latest step record; the templates' ServiceMonitor scrapes them on TRAINER_METRICS_PORT.

MFU is achieved model FLOP/s over the peak of the devices; the peak comes from the GPU
model (dense BF16) or `--peak-flops`. ETTR (effective training time ratio) is the time
spent on steps that the job kept, over the wall time since the job first started: work
lost to a restart and time spent restarting count against it.
"""

from __future__ import annotations

import json
import math
import sys
import time
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

_GAUGES = {
    "step": "Optimizer steps completed by the job",
    "loss": "Training loss, mean over ranks and the last logging window",
    "step_seconds": "Wall time of one step, mean over the last logging window",
    "samples_per_second": "Samples trained per second by the whole job",
    "tokens_per_second": "Tokens trained per second by the whole job",
    "mfu": "Model FLOPs utilisation (0-1)",
    "checkpoint_save_seconds": "Duration of the last completed checkpoint save",
    "checkpoint_blocking_seconds": "Time the last checkpoint save blocked training",
    "failed_checkpoints": "Checkpoint saves that failed (full or read-only volume, ...)",
    "ettr": "Effective training time ratio since the job first started (0-1)",
    "skipped_steps": "Updates skipped because of non-finite gradients",
    "rollbacks": "Rollbacks to a checkpoint after repeated non-finite gradients",
}


def peak_flops_for(device_name: str | None) -> float | None:
    if not device_name:
        return None
    for marker, flops in PEAK_FLOPS:
        if marker.lower() in device_name.lower():
            return flops
    return None


class Metrics:
    """Rank 0 writes; every other rank's calls are no-ops."""

    def __init__(self, config: MetricsConfig, rank: int, labels: dict[str, str] | None = None):
        self.enabled = rank == 0
        self.file = config.file
        self._gauges = {}
        self.port = None
        if not self.enabled:
            return
        if self.file:
            Path(self.file).parent.mkdir(parents=True, exist_ok=True)
        if config.port:
            self._serve(config.port, labels or {})

    def _serve(self, port: int, labels: dict[str, str]) -> None:
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        registry = CollectorRegistry()
        names = sorted(labels)
        for key, doc in _GAUGES.items():
            gauge = Gauge(f"trainer_{key}", doc, names, registry=registry)
            self._gauges[key] = gauge.labels(**labels) if names else gauge
        self.server, self.thread = start_http_server(port, registry=registry)
        self.port = self.server.server_port

    def emit(self, event: str, **fields) -> None:
        if not self.enabled:
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
        for key, gauge in self._gauges.items():
            value = fields.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                gauge.set(value)

    def close(self) -> None:
        if self._gauges:
            self.server.shutdown()
