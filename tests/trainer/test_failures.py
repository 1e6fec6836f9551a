"""NaN/Inf guard, rollback, divergence and the hang watchdog, on real two-rank runs."""

from __future__ import annotations

import math

from tests.trainer.conftest import inspect, launch

ARGS = (
    "--model",
    "mlp",
    "--max-steps",
    "20",
    "--checkpoint-interval",
    "5",
    "--log-interval",
    "5",
    "--seed",
    "7",
)


def test_injected_nan_is_skipped_on_every_rank(tmp_path):
    run = launch(*ARGS, "--checkpoint-dir", str(tmp_path / "ckpt"), "--inject-fault", "nan@7")
    assert run.code == 0, run.stderr
    assert run.stderr.count("step 7: non-finite gradient norm") == 2  # both ranks agree
    steps = {record["step"]: record for record in run.events("step")}
    assert steps[10]["skipped_steps"] == 1 and steps[10]["rollbacks"] == 0
    assert all(math.isfinite(record["loss"]) for record in steps.values())
    assert inspect(tmp_path / "ckpt")["step"] == 20


def test_repeated_nan_rolls_back_to_the_last_checkpoint(tmp_path):
    faults = [arg for step in (11, 12, 13) for arg in ("--inject-fault", f"nan@{step}")]
    run = launch(*ARGS, "--checkpoint-dir", str(tmp_path / "ckpt"), "--max-bad-steps", "3", *faults)
    assert run.code == 0, run.stderr
    assert "rolled back from step 13 to step 10" in run.stderr
    assert run.events("step")[-1]["rollbacks"] == 1
    assert run.end["step"] == 20
    # The bad window's samples are skipped, not replayed: 3 extra batches consumed.
    assert run.end["consumed_samples"] == (20 + 3) * 32


def test_nan_that_outlasts_every_rollback_exits_as_diverged(tmp_path):
    faults = [arg for step in (6, 7, 9, 10) for arg in ("--inject-fault", f"nan@{step}")]
    run = launch(
        *ARGS,
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--max-bad-steps",
        "2",
        "--max-rollbacks",
        "1",
        *faults,
    )
    assert run.code == 3, run.stderr  # permanent: retrying would diverge again
    assert "consecutive non-finite steps after 1 rollback(s)" in run.stderr


def test_hang_ends_within_the_watchdog_timeout(tmp_path):
    # A generous collective timeout: only the 3-second watchdog can end this in time,
    # and launch() fails the test if the run outlives its 60 s budget.
    run = launch(
        *ARGS,
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--watchdog-timeout",
        "3",
        "--collective-timeout",
        "600",
        "--inject-fault",
        "hang@4:rank=1",
        timeout=60,
    )
    assert run.code == 200, run.stderr  # retryable
    assert "step 4 exceeded the watchdog timeout of 3s" in run.stderr
    assert "in during_step" in run.stderr  # the stack of the hung thread is in the log
