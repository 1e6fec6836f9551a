"""Per-node metrics: who serves, their labels, the straggler arithmetic, and that the
endpoint serves exactly the names `exported_metrics()` lists (the dashboard and alert
tests trust that list)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from tests.trainer.conftest import unused_port
from trainer.config import MetricsConfig
from trainer.metrics import GAUGES, Identity, Metrics, exported_metrics, node_times


def test_node_times_take_each_nodes_slowest_rank_against_the_median_node():
    rows = [(0, 0.10, 0.01), (0, 0.12, 0.02), (1, 0.11, 0.0), (1, 0.10, 0.0), (2, 0.40, 0.3)]
    times = node_times(rows, node=2)
    assert (times.work_seconds, times.data_wait_seconds) == (0.40, 0.3)
    # Nodes' work: 0.12, 0.11, 0.40; the median node does 0.12.
    assert times.straggler_ratio == pytest.approx(0.40 / 0.12)
    assert (times.slowest_node, times.slowest_ratio) == (2, pytest.approx(0.40 / 0.12))
    assert node_times(rows, node=1).straggler_ratio == pytest.approx(0.11 / 0.12)


def test_a_single_node_is_its_own_median_and_zero_work_has_no_ratio():
    assert node_times([(0, 0.2, 0.0), (0, 0.1, 0.0)], node=0).straggler_ratio == 1.0
    assert node_times([(0, 0.0, 0.0)], node=0).straggler_ratio is None


@pytest.mark.parametrize(
    ("env", "rank", "expected"),
    [
        ({"JOB_NAME": "llm", "GROUP_RANK": "3"}, 25, ("llm", 3)),
        # Open MPI: ranks are placed node by node.
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, 17, ("ckpt-job", 2)),
        ({"LOCAL_WORLD_SIZE": "4"}, 5, ("ckpt-job", 1)),
        ({}, 0, ("ckpt-job", 0)),
    ],
)
def test_identity_from_the_launchers_variables(env, rank, expected):
    identity = Identity.from_env(rank, 0, env, Path("/checkpoints/ckpt-job"))
    assert (identity.job, identity.node_rank) == expected
    assert identity.labels()["rank"] == str(rank)


def test_only_the_first_process_of_a_node_serves():
    config = MetricsConfig(port=unused_port())
    other = Metrics(config, Identity("j", rank=1, local_rank=1, node_rank=0))
    assert other.port is None
    other.step(5)  # a no-op, not an error


def _families(port: int) -> tuple[set[str], str]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return set(re.findall(r"^# HELP (\S+) ", body, re.M)), body


def test_the_endpoint_serves_exactly_the_listed_metrics_with_the_node_labels():
    metrics = Metrics(MetricsConfig(port=unused_port()), Identity("j", 9, 0, node_rank=1))
    try:
        metrics.update(**dict.fromkeys(GAUGES, 1.0))
        metrics.info("nccl_transport", "socket")
        metrics.info("nccl_transport", "ib")  # replaces, never two at once
        families, body = _families(metrics.port)
    finally:
        metrics.close()
    assert families == set(exported_metrics())
    assert (
        'trainer_nccl_transport{node_rank="1",rank="9",training_job="j",transport="ib"} 1.0' in body
    )
    assert 'transport="socket"' not in body


def test_a_series_appears_once_it_has_a_value():
    metrics = Metrics(MetricsConfig(port=unused_port()), Identity("j", 0, 0, 0))
    try:
        metrics.update(mfu=None, loss=float("nan"))
        _, body = _families(metrics.port)
    finally:
        metrics.close()
    assert "trainer_mfu{" not in body  # no peak FLOP/s, no MFU series
    assert 'trainer_loss{node_rank="0",rank="0",training_job="j"} NaN' in body
    assert "trainer_last_step_timestamp_seconds{" in body  # set at start: no false stall
