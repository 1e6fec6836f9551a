"""NaN/Inf guard, rollback, divergence and the hang watchdog, on real two-rank runs."""

from __future__ import annotations

import json
import math

import pytest

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


# Rank 1 hangs at step 4. Which rank's watchdog fires first is chosen by fault
# injection, not left to the scheduler: the stuck rank itself, or rank 0, which waits
# for it in the gradient all-reduce (`watchdog@4` fires there only once rank 1's hang
# has begun). Both watchdog timeouts are far beyond the run's time: only the injected
# watchdog can fire.
FIRST_TO_NOTICE = {"stuck-rank-notices": 1, "waiting-rank-notices": 0}


@pytest.mark.parametrize("noticer", FIRST_TO_NOTICE.values(), ids=FIRST_TO_NOTICE.keys())
def test_hang_ends_within_the_watchdog_timeout(tmp_path, noticer, trainops):
    run = launch(
        *ARGS,
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--watchdog-timeout",
        "600",
        "--collective-timeout",
        "600",
        "--inject-fault",
        "hang@4:rank=1",
        "--inject-fault",
        f"watchdog@4:rank={noticer}",
    )
    assert run.code == 200, run.stderr  # retryable
    assert "step 4 exceeded the watchdog timeout of 600s" in run.stderr
    assert f"the watchdog of rank {noticer} fired first, at step 4" in run.stderr
    assert "culprit: rank 1," in run.stderr
    stacks = stacks_by_rank(run.stderr)
    assert set(stacks) == {0, 1}, run.stderr  # every rank joined the report
    assert "rank 1: step 4, outside any collective" in stacks[1]
    assert "in during_step" in stacks[1]  # the stack of the hung thread
    if noticer == 0:
        assert "rank 0: step 4, in the gradient all-reduce (ended by: its watchdog)" in stacks[0]
    # The doctor reads the report from the pod's log and names the same rank.
    (tmp_path / "pod.log").write_text(run.stderr)
    doctor = trainops("doctor", "nccl", "--format", "json", str(tmp_path / "pod.log"))
    findings = json.loads(doctor.out)["findings"]
    assert [f["ranks"] for f in findings if f["rule"] == "hang-culprit"] == [[1]], doctor.out


def stacks_by_rank(stderr: str) -> dict[int, str]:
    """The stack sections of trainer-launch's hang report, by rank (header included)."""
    sections: dict[int, list[str]] = {}
    current = None
    for line in stderr.splitlines():
        text = line.removeprefix("trainer-launch: ")
        if text.startswith("stacks of rank "):
            current = sections.setdefault(int(text.split()[3].rstrip(":")), [])
        if current is not None and line.startswith("trainer-launch: "):
            current.append(text)
    return {rank: "\n".join(lines) for rank, lines in sections.items()}
