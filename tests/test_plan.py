"""`trainops plan` figures against hand calculations, including the reference articles'
worked examples."""

from __future__ import annotations

import json
import math

import pytest

from trainops.planning.estimate import PlanInputs, make_plan, parse_amount
from trainops.planning.failures import LLAMA3, FailureClass, FailureModel
from trainops.planning.spares import poisson_cdf, spares_needed


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
        failures=FailureModel("test", "by hand", (FailureClass("all", 1.0, True, "all"),)),
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


def test_the_default_failure_rates_are_the_llama_3_record_with_its_source(trainops):
    result = plan_json(trainops, "--flops", "1e21", "--gpus", "100", "--gpu", "H100-SXM")
    model = result["reliability"]["failure_model"]
    assert model["name"] == "llama3" and "arXiv:2407.21783" in model["source"]
    counts = {c["name"]: c for c in model["classes"]}
    # Table 5: 466 interruptions in 54 days on 16,384 GPUs, by class.
    gpu_hours = 16384 * 54 * 24
    assert counts["gpu"]["per_1000_gpu_hours"] == pytest.approx(268 / gpu_hours * 1000)
    assert "faulty GPU 148" in counts["gpu"]["counts"]
    assert sum(c["per_1000_gpu_hours"] for c in counts.values()) == pytest.approx(
        466 / gpu_hours * 1000
    )
    assert result["reliability"]["failures_per_hour"] == pytest.approx(100 * 466 / gpu_hours)


def test_a_1024_gpu_run_gets_an_ettr_and_a_spare_count_with_the_sources_of_its_rates(trainops):
    """The issue's case: the reference table gave "MTBF 8.5 min, ETTR 0%" here."""
    args = ["--params", "70B", "--tokens", "2T", "--gpus", "1024", "--gpu", "H100-SXM"]
    result = plan_json(trainops, *args, "--storage-bandwidth", "40")
    r = result["reliability"]
    mtbf = 3600 / (1024 * LLAMA3.rate / 1000)
    assert r["mtbf_hours"] * 3600 == pytest.approx(mtbf)  # about 44.5 hours
    write = 70e9 * 14 / 40e9
    interval = math.sqrt(2 * write * mtbf)
    ettr = 1 - write / interval - (interval / 2 + 600) / mtbf
    assert r["expected_ettr"] == pytest.approx(ettr)
    assert 0.95 < ettr < 0.99
    spares = r["spares"]
    node_failures = 1024 * LLAMA3.node_rate / 1000
    mean = node_failures * 72
    assert spares["nodes_out_mean"] == pytest.approx(mean)
    # The fewest spares s with ETTR x P(Poisson(mean) <= s) >= 90%, by hand.
    needed = next(s for s in range(20) if ettr * poisson_cdf(s, mean) >= 0.9)
    assert spares["needed"] == needed == 3
    assert ettr * poisson_cdf(needed - 1, mean) < 0.9
    text = trainops("plan", *args, "--storage-bandwidth", "40").out
    assert "arXiv:2407.21783" in text and "spare nodes needed         3" in text
    assert "faulty GPU 148" in text


def test_spares_cannot_lift_a_run_whose_own_ettr_misses_the_target():
    plan = spares_needed(0.1, 72, run_ettr=0.85, target=0.9)
    assert plan.needed is None
    assert spares_needed(0.0, 72, run_ettr=0.95, target=0.9).needed == 0


def test_the_profile_overrides_rates_and_its_spares_are_checked(trainops, workspace):
    profile = workspace / "overlays/prod-roce/cluster.yaml"
    profile.write_text(profile.read_text() + "failureRates:\n  gpu: 0.5\n")
    run = trainops(
        "plan", "--params", "7B", "--tokens", "100B", "--gpus", "64", "--overlay",
        "overlays/prod-roce", "--format", "json", cwd=workspace,
    )  # fmt: skip
    assert run.code == 0, run.err
    result = json.loads(run.out)
    classes = {c["name"]: c for c in result["reliability"]["failure_model"]["classes"]}
    assert classes["gpu"]["per_1000_gpu_hours"] == 0.5
    assert "overridden" in classes["gpu"]["counts"]
    spares = result["reliability"]["spares"]
    assert spares["profile_spare_nodes"] == 1
    assert result["compute"]["peak_flops_per_gpu"] == 989e12  # NVIDIA-H100-80GB-HBM3
    unknown = trainops(
        "plan", "--flops", "1e21", "--gpus", "8", "--gpu", "A100", "--failure-rate", "cosmic=1"
    )
    assert unknown.code == 2 and "no failure class 'cosmic' in model llama3" in unknown.err


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
        (
            ["--params", "1e400", "--tokens", "2T", "--gpus", "8", "--gpu", "A100"],
            "--params: '1e400' is beyond the range of a float",
        ),
        (
            ["--params", "70B", "--tokens", "2T", "--gpus", "8", "--peak-flops", "1e-300"],
            "beyond the range of a float: check the units",
        ),
        (
            ["--flops", "1e20", "--gpus", "8", "--gpu", "A100", "--failure-rate", "gpu=inf"],
            "--failure-rate 'gpu=inf': expected NAME=RATE",
        ),
    ],
)
def test_bad_input_is_one_line(trainops, args, message):
    run = trainops("plan", *args)
    assert run.code == 2 and message in run.err
    assert len(run.err.strip().splitlines()) == 1


@pytest.mark.parametrize("option", ["--mfu", "--grad-bytes", "--node-bandwidth", "--repair-hours"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_float_option_refuses_nan_and_inf_rather_than_printing_them(trainops, option, value):
    run = trainops("plan", "--params", "70B", "--tokens", "2T", "--gpus", "8", "--gpu", "A100",
                   option, value)  # fmt: skip
    assert run.code == 2 and f"Invalid value for '{option}'" in run.err
    assert "nan" not in run.out and "inf" not in run.out


def test_amounts():
    assert parse_amount("70B") == 70e9
    assert parse_amount("2T") == 2e12
    assert parse_amount("4M") == 4e6
    assert parse_amount("6.4e23") == 6.4e23
