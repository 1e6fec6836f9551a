"""torchtitan's step metrics as the trainer's Prometheus gauges.

torchtitan (docs/torchtitan.md) hands each logging step's metrics, a dict keyed by its
own names, to a metric logger (`log(metrics, step)`, `close()`). `TitanGauges` is one:
it passes them on to torchtitan's own loggers (TensorBoard, W&B) and sets the gauges
`trainer.metrics` serves from every node's local rank 0 on TRAINER_METRICS_PORT, so the
platform's PodMonitor, alerts and dashboard read a torchtitan run as a trainer run.
`trainer.titan` plugs it into torchtitan; this module needs no torchtitan.

torchtitan reports tokens per second per device and MFU in percent; the gauges hold the
whole job's tokens per second and MFU as a fraction, as the trainer's do. The last
checkpoint's time is that of the newest complete `step-N` (its DCP `.metadata`) in
torchtitan's checkpoint folder, or the start when that is older: what a failure loses.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.config import MetricsConfig
from trainer.metrics import Identity, Metrics

# torchtitan's names (torchtitan.components.metrics.MetricsProcessor.log, 0.3.0).
LOSS = "loss_metrics/global_avg_loss"
TOKENS_PER_DEVICE = "throughput(tps)"
STEP_SECONDS = "time_metrics/end_to_end(s)"
DATA_SECONDS = "time_metrics/data_loading(s)"
MFU_PERCENT = "mfu(%)"
_STEP = re.compile(r"step-\d+")
MAX_ENTRIES = 10_000  # entries of the checkpoint folder read per logging step


class TitanGauges:
    """A torchtitan metric logger that also sets the node's Prometheus gauges."""

    def __init__(
        self,
        inner: Any,
        metrics: Metrics,
        world_size: int,
        seq_len: int | None = None,
        checkpoint_interval: int | None = None,
        checkpoint_folder: Path | None = None,
    ):
        self.inner = inner
        self.metrics = metrics
        self.world_size = world_size
        self.seq_len = seq_len
        self.checkpoint_folder = checkpoint_folder
        self.started = time.time()
        metrics.update(world_size=world_size, checkpoint_interval_steps=checkpoint_interval)

    def log(self, values: Mapping[str, Any], step: int) -> None:
        self.inner.log(values, step)
        tokens = _number(values.get(TOKENS_PER_DEVICE))
        job_tokens = tokens * self.world_size if tokens is not None else None
        mfu = _number(values.get(MFU_PERCENT))
        self.metrics.update(
            step=step,
            last_step_timestamp_seconds=time.time(),
            loss=_number(values.get(LOSS)),
            step_seconds=_number(values.get(STEP_SECONDS)),
            data_wait_seconds=_number(values.get(DATA_SECONDS)),
            tokens_per_second=job_tokens,
            samples_per_second=job_tokens / self.seq_len
            if job_tokens is not None and self.seq_len
            else None,
            mfu=mfu / 100 if mfu is not None else None,
        )
        if self.checkpoint_folder is not None:
            saved = newest_checkpoint_time(self.checkpoint_folder)
            self.metrics.update(last_checkpoint_timestamp_seconds=max(self.started, saved or 0))

    def close(self) -> None:
        self.inner.close()
        self.metrics.close()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def newest_checkpoint_time(folder: Path) -> float | None:
    """When the newest complete `step-N` of `folder` was written (its `.metadata`, which
    DCP writes last and torchtitan requires to load it)."""
    newest = None
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    break
                if not _STEP.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
                    continue
                try:
                    written = os.stat(Path(entry.path, ".metadata")).st_mtime
                except OSError:
                    continue  # being written, or abandoned
                newest = written if newest is None else max(newest, written)
    except OSError:
        return None
    return newest


def from_env(
    inner: Any, job_config: Mapping[str, Any] | None, env: Mapping[str, str] = os.environ
) -> TitanGauges:
    """Gauges for this process as torchrun placed it (RANK, LOCAL_RANK, WORLD_SIZE,
    GROUP_RANK) and the pod configured it (TRAINER_METRICS_PORT, JOB_NAME); the job's
    sequence length and checkpoint interval from torchtitan's resolved config."""
    job_config = job_config or {}
    port = env.get("TRAINER_METRICS_PORT", "")
    checkpoint_dir = env.get("TRAINER_CHECKPOINT_DIR")
    identity = Identity.from_env(
        int(env.get("RANK", "0")),
        int(env.get("LOCAL_RANK", "0")),
        env,
        Path(checkpoint_dir) if checkpoint_dir else None,
    )
    metrics = Metrics(MetricsConfig(port=int(port) if port.isdigit() else 0), identity)
    training = job_config.get("training") or {}
    checkpoint = job_config.get("checkpoint") or {}
    enabled = bool(checkpoint.get("enable"))
    folder = None
    if enabled and isinstance(checkpoint.get("folder"), str):
        # As torchtitan joins them: an absolute folder stands alone.
        folder = Path(str(job_config.get("dump_folder", "./outputs")), checkpoint["folder"])
    return TitanGauges(
        inner,
        metrics,
        int(env.get("WORLD_SIZE", "1")),
        seq_len=training.get("seq_len"),
        checkpoint_interval=checkpoint.get("interval") if enabled else None,
        checkpoint_folder=folder,
    )
