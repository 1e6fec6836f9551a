"""Prometheus endpoint, MPI-style launch and the preflight bandwidth job."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from tests.trainer.conftest import RUN_LIMIT, launch, trainer_env, unused_port
from trainer.config import MetricsConfig
from trainer.metrics import Identity, Metrics, peak_flops_for
from trainer.preflight import bus_bandwidth


def test_prometheus_endpoint_serves_the_latest_step(tmp_path, capsys):
    identity = Identity("demo", rank=0, local_rank=0, node_rank=0)
    metrics = Metrics(MetricsConfig(port=unused_port(), file=tmp_path / "m.jsonl"), identity)
    try:
        metrics.emit("step", step=7, loss=float("nan"), ettr=0.9, mfu=None)
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics").read().decode()
    finally:
        metrics.close()
    labels = 'node_rank="0",rank="0",training_job="demo"'
    assert f"trainer_step{{{labels}}} 7.0" in body
    assert f"trainer_ettr{{{labels}}} 0.9" in body
    line = json.loads(capsys.readouterr().out)
    assert line["loss"] == "nan"  # JSON has no NaN
    assert json.loads((tmp_path / "m.jsonl").read_text()) == line


def test_other_ranks_emit_nothing(capsys):
    Metrics(MetricsConfig(port=0), Identity("demo", 1, 1, 0)).emit("step", step=1)
    assert capsys.readouterr().out == ""


def test_peak_flops_table():
    assert peak_flops_for("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops_for("NVIDIA H100 PCIe") == 756e12
    assert peak_flops_for("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops_for("Tesla T4") is None


def test_mpi_ranks_meet_in_the_checkpoint_directory_without_mpirun(tmp_path):
    # No mpirun here: start the ranks with the variables Open MPI gives each one.
    processes = []
    for rank in range(2):
        env = trainer_env(
            OMPI_COMM_WORLD_RANK=str(rank),
            OMPI_COMM_WORLD_SIZE="2",
            OMPI_COMM_WORLD_LOCAL_RANK=str(rank),
            PMIX_NAMESPACE="prterun-a-7@1",
        )
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainer",
                    "--max-steps",
                    "4",
                    "--log-interval",
                    "2",
                    "--checkpoint-dir",
                    str(tmp_path),
                    "--checkpoint-interval",
                    "2",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        # The bound only turns a rendezvous that never completes into a failure.
        outputs = [process.communicate(timeout=RUN_LIMIT) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [process.returncode for process in processes] == [0, 0], outputs[1][1]
    start = json.loads(outputs[0][0].splitlines()[0])
    assert start["launcher"] == "mpirun" and start["world_size"] == 2
    assert outputs[1][0] == ""  # rank 1 prints no metrics
    assert (tmp_path / "step-4").is_dir()


def test_mpi_ranks_without_a_rendezvous_get_a_clear_error():
    env = trainer_env(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="2")
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "--max-steps", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT,
        check=False,
    )
    assert done.returncode == 2
    assert "mpirun ranks need a rendezvous" in done.stderr


def test_preflight_reports_bus_bandwidth_over_two_ranks():
    run = launch("--size-mb", "4", "--iterations", "3", "--warmup", "1", module="trainer.preflight")
    assert run.code == 0, run.stderr
    (result,) = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert result["world_size"] == 2 and result["size_bytes"] == 4 << 20
    assert result["busbw_gbps"] == pytest.approx(bus_bandwidth(result["algbw_gbps"], 2))
    assert [pod["rank"] for pod in result["pods"]] == [0, 1]
    assert "lo" in result["pods"][1]["interfaces"]  # what each rank's pod sees


def test_preflight_bandwidth_floor_fails_the_job():
    run = launch(
        "--size-mb", "1", "--iterations", "2", "--min-busbw", "100000", module="trainer.preflight"
    )
    assert run.code == 4
    assert "is below --min-busbw 100000 GB/s" in run.stderr


def test_bus_bandwidth_is_the_ring_traffic():
    assert bus_bandwidth(10.0, 8) == pytest.approx(17.5)
    assert bus_bandwidth(10.0, 1) == 0.0
