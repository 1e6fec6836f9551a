"""torchtitan's step metrics as the trainer's gauges (`trainer.titan_gauges`), served on
a real port and read back over HTTP in Prometheus' text format.

The torchtitan glue (`trainer.titan`: an override of torchtitan's metrics processor)
needs torchtitan, which cannot be installed for CPU tests (docs/torchtitan.md); it was
checked against torchtitan 0.3.0 by hand. What it hands over is tested here: the dict
torchtitan 0.3.0's `MetricsProcessor.log` builds, and its resolved job config.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

from tests.trainer.conftest import unused_port
from trainer import titan_gauges

# The keys and units of torchtitan 0.3.0's MetricsProcessor.log.
STEP_METRICS = {
    "loss_metrics/global_avg_loss": 2.5,
    "loss_metrics/global_max_loss": 2.7,
    "grad_norm": 1.1,
    "throughput(tps)": 1000.0,  # tokens per second per device
    "tflops": 3.0,
    "mfu(%)": 41.0,
    "time_metrics/end_to_end(s)": 0.5,
    "time_metrics/data_loading(s)": 0.01,
    "memory/max_reserved(GiB)": 10.0,
}


class Recorder:
    """torchtitan's own loggers (TensorBoard, W&B) as the wrapper sees them."""

    def __init__(self):
        self.logged: list[tuple[dict, int]] = []
        self.closed = False

    def log(self, metrics: dict, step: int) -> None:
        self.logged.append((dict(metrics), step))

    def close(self) -> None:
        self.closed = True


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("trainer_"):
            series, value = line.rsplit(" ", 1)
            assert 'training_job="tt-7"' in series and 'node_rank="1"' in series, series
            values[series.split("{", 1)[0]] = float(value)
    return values


def pod_env(port: int, checkpoints: Path, local_rank: str = "0") -> dict[str, str]:
    """What torchrun and the torchtitan template give rank 8 of 16, on node 1."""
    return {
        "RANK": "8",
        "LOCAL_RANK": local_rank,
        "WORLD_SIZE": "16",
        "GROUP_RANK": "1",
        "JOB_NAME": "tt-7",
        "TRAINER_METRICS_PORT": str(port),
        "TRAINER_CHECKPOINT_DIR": str(checkpoints),
    }


def job_config(checkpoints: Path) -> dict:
    """The parts of torchtitan's `config.to_dict()` the gauges read."""
    return {
        "dump_folder": str(checkpoints / "outputs"),
        "training": {"seq_len": 2048},
        "checkpoint": {"enable": True, "folder": str(checkpoints), "interval": 250},
    }


def test_step_metrics_reach_the_gauges_as_the_whole_jobs_and_pass_through(tmp_path):
    port = unused_port()
    inner = Recorder()
    gauges = titan_gauges.from_env(inner, job_config(tmp_path), pod_env(port, tmp_path))
    try:
        before = scrape(port)
        assert before["trainer_world_size"] == 16
        assert before["trainer_checkpoint_interval_steps"] == 250
        assert "trainer_step" not in before and "trainer_loss" not in before
        gauges.log(STEP_METRICS, 40)
        after = scrape(port)
    finally:
        gauges.close()
    assert inner.logged == [(STEP_METRICS, 40)] and inner.closed
    assert after["trainer_step"] == 40
    assert after["trainer_loss"] == 2.5
    assert after["trainer_step_seconds"] == 0.5
    assert after["trainer_data_wait_seconds"] == 0.01
    assert after["trainer_tokens_per_second"] == 16_000  # per device x 16 ranks
    assert after["trainer_samples_per_second"] == 16_000 / 2048
    assert after["trainer_mfu"] == 0.41
    assert (
        after["trainer_last_step_timestamp_seconds"]
        >= before["trainer_last_step_timestamp_seconds"]
    )


def test_last_checkpoint_is_the_newest_complete_step_or_the_start(tmp_path):
    port = unused_port()
    gauges = titan_gauges.from_env(Recorder(), job_config(tmp_path), pod_env(port, tmp_path))
    try:
        gauges.log(STEP_METRICS, 10)
        started = scrape(port)["trainer_last_checkpoint_timestamp_seconds"]
        assert started == gauges.started  # nothing saved since the start
        later = gauges.started + 100
        for name, metadata in (("step-20", True), ("step-30", False), ("step-9.tmp", True)):
            (tmp_path / name).mkdir()
            if metadata:
                (tmp_path / name / ".metadata").write_bytes(b"")
                os.utime(tmp_path / name / ".metadata", (later, later))
        os.utime(tmp_path / "step-9.tmp" / ".metadata", (later + 50, later + 50))
        gauges.log(STEP_METRICS, 20)
        # step-30 has no .metadata (being written); step-9.tmp is no checkpoint's name.
        assert scrape(port)["trainer_last_checkpoint_timestamp_seconds"] == later
    finally:
        gauges.close()


def test_only_local_rank_0_serves_and_no_port_serves_nothing(tmp_path):
    port = unused_port()
    inner = Recorder()
    quiet = titan_gauges.from_env(inner, {}, pod_env(port, tmp_path, local_rank="3"))
    quiet.log(STEP_METRICS, 1)  # sets nothing, fails nothing
    quiet.close()
    assert inner.logged == [(STEP_METRICS, 1)] and quiet.metrics.port is None
    env = {k: v for k, v in pod_env(port, tmp_path).items() if k != "TRAINER_METRICS_PORT"}
    unserved = titan_gauges.from_env(Recorder(), None, env)
    assert unserved.metrics.port is None
    unserved.close()


def test_a_full_checkpoint_folder_is_read_within_its_bound(tmp_path, monkeypatch):
    for step in range(1, 7):
        (tmp_path / f"step-{step}").mkdir()
        (tmp_path / f"step-{step}" / ".metadata").write_bytes(b"")
    stat, probed = os.stat, []

    def counting_stat(path, *args, **kwargs):
        probed.append(path)
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(titan_gauges, "MAX_ENTRIES", 3)
    monkeypatch.setattr(titan_gauges.os, "stat", counting_stat)
    found = titan_gauges.newest_checkpoint_time(tmp_path)
    monkeypatch.undo()
    assert found is not None and found <= time.time()
    assert len([p for p in probed if str(p).endswith(".metadata")]) == 3
    assert titan_gauges.newest_checkpoint_time(tmp_path / "absent") is None
