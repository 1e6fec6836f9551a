"""`trainops plan` figures against hand calculations, including the reference articles'
worked examples."""

from __future__ import annotations

import json
import math

import pytest

from trainops.plan import PlanInputs, make_plan, parse_amount


def plan_json(trainops, *args: str) -> dict:
    run = trainops("plan", "--format", "json", *args)
    assert run.code == 0, run.err
    return json.loads(run.out)


def test_the_articles_6_4e23_flops_on_2048_gpus_at_half_efficiency_take_24_days(trainops):
    result = plan_json(
        trainops, "--flops", "6.4e23", "--gpus", "2048", "--peak-flops", "300e12", "--mfu", "0.5"
    )
    compute = result["compute"]
    # 6.4e23 / 300e12 = 2.133e9 s = 67.6 years on one GPU; / (2048 x 0.5) = 24.1 days
    assert compute["single_gpu_years_at_peak"] == pytest.approx(67.6, abs=0.05)
    assert compute["days"] == pytest.approx(24.1, abs=0.05)
    assert compute["days"] == pytest.approx(6.4e23 / (2048 * 300e12 * 0.5) / 86400)


def test_the_articles_70b_gradients_are_140_gb_and_280_gb_per_ring_all_reduce(trainops):
    result = plan_json(
        trainops, "--params", "70B", "--tokens", "1T", "--gpus", "2048", "--gpu", "A100"
    )
    comm = result["communication"]
    assert comm["gradient_bytes"] == pytest.approx(140e9)
    # 2 x 140 GB x (N-1)/N with N = 2048: 279.86 GB, "about 280 GB"
    assert comm["ring_allreduce_bytes_per_rank"] == pytest.approx(2 * 140e9 * 2047 / 2048)
    assert round(comm["ring_allreduce_bytes_per_rank"] / 1e9) == 280
    # 256 nodes of 8: every node sends 2 x 140 GB x 255/256 over its NICs
    assert comm["internode_bytes_per_node"] == pytest.approx(2 * 140e9 * 255 / 256)


def test_flops_from_parameters_and_tokens_and_the_step_budget():
    p = PlanInputs(
        gpus=64,
        peak_flops=989e12,
        mfu=0.4,
        params=8e9,
        tokens=1e12,
        batch_tokens=2**22,
        node_bandwidth_gbps=25,
    )
    result = make_plan(p)
    flops = 6 * 8e9 * 1e12
    assert result.compute["training_flops"] == flops
    comm = result.communication
    step = 6 * 8e9 * 2**22 / (64 * 989e12 * 0.4)
    assert comm["compute_seconds_per_step"] == pytest.approx(step)
    assert comm["steps"] == pytest.approx(1e12 / 2**22)
    per_node = 2 * 7 / 8 * 16e9  # 8 nodes, BF16 gradients of 8e9 parameters
    assert comm["internode_bytes_per_node"] == pytest.approx(per_node)
    assert comm["comm_seconds_per_step"] == pytest.approx(per_node / (25e9 / 8))  # 8.96 s > 7.95 s
    assert comm["node_bandwidth_needed_gbps"] == pytest.approx(per_node / step * 8 / 1e9)
    assert any(w.startswith("communication-bound") for w in result.warnings)


def test_young_daly_interval_ettr_and_restart_budget_by_hand():
    # 1000 GPUs at 1 failure per 1000 GPU-hours: one failure per hour.
    p = PlanInputs(
        gpus=1000,
        peak_flops=1e15,
        mfu=0.5,
        flops=1.8e21 * 1000,
        checkpoint_bytes=600e9,
        storage_gbytes_per_s=10,
        restart_seconds=600,
        failure_rates={"everything": 1.0},
    )
    r = make_plan(p).reliability
    assert r["mtbf_hours"] == pytest.approx(1.0)
    assert r["checkpoint_write_seconds"] == pytest.approx(60.0)
    interval = math.sqrt(2 * 60 * 3600)  # 657.3 s
    assert r["checkpoint_interval_seconds"] == pytest.approx(interval)
    ettr = 1 - 60 / interval - (interval / 2 + 600) / 3600
    assert r["expected_ettr"] == pytest.approx(ettr)  # about 65%
    compute_seconds = 1.8e24 / (1000 * 1e15 * 0.5)  # 3600 s
    assert r["wall_clock_days"] == pytest.approx(compute_seconds / ettr / 86400)
    failures = compute_seconds / ettr / 3600
    assert r["expected_failures"] == pytest.approx(failures)
    assert r["restart_budget"] == max(3, math.ceil(2 * failures))


def test_the_reference_failure_table_is_the_default(trainops):
    result = plan_json(trainops, "--flops", "1e21", "--gpus", "100", "--gpu", "H100-SXM")
    rates = result["reliability"]["failure_rates_per_1000_gpu_hours"]
    assert rates["gpu-off-bus-xid79"] == 0.75 and rates["oom-kill"] == 2.0
    assert result["reliability"]["failures_per_hour"] == pytest.approx(100 * 6.875 / 1000)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "8", "--gpu", "A100"], "give --flops, or --params and --tokens"),
        (["--flops", "1e20", "--gpus", "8"], "exactly one of --gpu and --peak-flops"),
        (["--flops", "lots", "--gpus", "8", "--gpu", "A100"], "--flops: 'lots' is not a number"),
        (
            ["--flops", "1e20", "--gpus", "8", "--gpu", "A100", "--failure-rate", "nic"],
            "--failure-rate 'nic': expected NAME=RATE",
        ),
    ],
)
def test_bad_input_is_one_line(trainops, args, message):
    run = trainops("plan", *args)
    assert run.code == 2 and message in run.err
    assert len(run.err.strip().splitlines()) == 1


def test_amounts():
    assert parse_amount("70B") == 70e9
    assert parse_amount("2T") == 2e12
    assert parse_amount("4M") == 4e6
    assert parse_amount("6.4e23") == 6.4e23
