"""Interrupted runs resume to exactly the parameters of an uninterrupted one."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

from tests.trainer.conftest import (
    BASE_ARGS,
    assert_params_close,
    inspect,
    launch,
    launch_command,
    running,
)
from trainer.checkpoint import load_offline


def test_uninterrupted_run_trains_and_keeps_the_last_checkpoints(baseline):
    directory, run = baseline
    steps = run.events("step")
    assert [s["step"] for s in steps] == [5, 10, 15, 20, 25, 30]
    assert steps[-1]["loss"] < steps[0]["loss"]
    report = inspect(directory)
    assert report["step"] == 30
    assert report["complete"] == [20, 25, 30]  # --checkpoint-keep 3
    assert report["consumed_samples"] == 30 * 32
    assert report["world_size"] == 2
    assert report["params_sha256"] == run.end["params_sha256"]


def test_sigkill_on_one_rank_then_relaunch_matches_uninterrupted(baseline, tmp_path):
    directory = tmp_path / "ckpt"
    killed = launch(
        *BASE_ARGS, "--checkpoint-dir", str(directory), "--inject-fault", "sigkill@12:rank=1"
    )
    assert killed.code >= 128, killed.stderr  # retryable for the ExitCode policy
    assert not killed.events("end")
    interrupted_at = inspect(directory, "--no-params")["step"]
    assert interrupted_at is not None and interrupted_at <= 12
    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(directory))
    assert resumed.code == 0, resumed.stderr
    (start,) = resumed.events("start")
    assert start["resumed_from"] == interrupted_at
    assert start["launches"] == 2
    assert resumed.end["params_sha256"] == baseline[1].end["params_sha256"]
    assert inspect(directory)["params_sha256"] == baseline[1].end["params_sha256"]


def test_sigkill_at_four_ranks_then_relaunch_matches_to_round_off(baseline, tmp_path):
    """Four ranks of 8 samples resume to what four uninterrupted ranks reach, on the
    baseline's samples: its global batch of 32, summed in another order.

    The parameters are compared with the uninterrupted four-rank run, not with the
    two-rank baseline: over 30 steps AdamW turns the round-off of another summing order
    into normalised updates of elements whose gradient is mostly round-off (layers.4.weight
    ended 1.3e-4 apart in norm), so only the losses carry the comparison with the baseline.
    """
    args = (*BASE_ARGS, "--batch-size", "8")
    uninterrupted = launch(*args, "--checkpoint-dir", str(tmp_path / "whole"), nproc=4)
    assert uninterrupted.code == 0, uninterrupted.stderr
    directory = tmp_path / "ckpt"
    killed = launch(
        *args, "--checkpoint-dir", str(directory), "--inject-fault", "sigkill@12:rank=1", nproc=4
    )
    assert killed.code >= 128, killed.stderr
    resumed = launch(*args, "--checkpoint-dir", str(directory), nproc=4)
    assert resumed.code == 0, resumed.stderr
    resumed_from = resumed.events("start")[0]["resumed_from"]
    assert resumed_from <= 12
    assert resumed.end["consumed_samples"] == 30 * 32
    assert_params_close(
        load_offline(directory / "step-30")["model"],
        load_offline(tmp_path / "whole" / "step-30")["model"],
    )
    # The same samples as the baseline: each logged loss (the mean of the 5 steps up to
    # it) within 1e-5 of its own; float32 round-off left them under 1e-6 apart, another
    # seed's samples move them by 1e-2. A resumed run's first window is partial.
    expected = {s["step"]: s["loss"] for s in baseline[1].events("step")}
    for run, after in ((uninterrupted, 0), (resumed, resumed_from + 5)):
        losses = {s["step"]: s["loss"] for s in run.events("step") if s["step"] >= after}
        assert 30 in losses and set(losses) <= set(expected)
        for step, loss in losses.items():
            assert loss == pytest.approx(expected[step], rel=1e-5), f"step {step}"


def test_sigterm_saves_the_current_step_and_resumes_identically(baseline, tmp_path):
    directory = tmp_path / "ckpt"
    # Rank 0, the one that saves, gets the signal after step 13's update. (Were rank 1
    # to get it too, its exit could bring torchrun's SIGTERM to rank 0 before rank 0
    # finished step 13, and step 12 would be saved: correct, but not what this checks.)
    terminated = launch(
        *BASE_ARGS, "--checkpoint-dir", str(directory), "--inject-fault", "sigterm@13:rank=0"
    )
    assert terminated.code == 143, terminated.stderr
    assert "saved step-13 without collectives" in terminated.stderr
    report = inspect(directory)
    assert report["step"] == 13  # 13 is not a checkpoint-interval step
    assert report["consumed_samples"] == 13 * 32
    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(directory))
    assert resumed.code == 0, resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == 13
    assert resumed.end["params_sha256"] == baseline[1].end["params_sha256"]


def test_eviction_sigterm_to_the_launcher_exits_143_with_a_checkpoint(tmp_path):
    directory = tmp_path / "ckpt"
    command = launch_command(
        "--max-steps",
        "100000",
        "--checkpoint-interval",
        "1000",
        "--checkpoint-dir",
        str(directory),
        "--log-interval",
        "1",
    )
    stderr = tmp_path / "stderr"
    with running(command, stderr) as process:
        # Wait until training is under way (20 step records), then evict.
        lines = 0
        while lines < 20:
            line = process.stdout.readline()
            assert line, stderr.read_text()
            lines += '"event": "step"' in line
        process.send_signal(signal.SIGTERM)
        process.communicate()
    assert process.returncode == 143, stderr.read_text()
    report = inspect(directory, "--no-params")
    assert report["step"] is not None and report["step"] >= 20
    assert report["step"] % 1000 != 0  # the emergency save, not a periodic one


def test_a_sigterm_storm_to_the_launcher_still_exits_143_with_a_checkpoint(tmp_path):
    """SIGTERM every 5 ms from the eviction until the launcher is gone: the kubelet's,
    a wrapper's and a preStop hook's signals. The launcher must end with its own code,
    never by one of them (before, a signal during Python's finalisation did: -15)."""
    directory = tmp_path / "ckpt"
    command = launch_command(
        "--max-steps",
        "100000",
        "--checkpoint-interval",
        "1000",
        "--checkpoint-dir",
        str(directory),
        "--log-interval",
        "1",
    )
    stderr = tmp_path / "stderr"
    signals = 0
    with running(command, stderr) as process:
        lines = 0
        while lines < 10:
            line = process.stdout.readline()
            assert line, stderr.read_text()
            lines += '"event": "step"' in line
        while process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it left meanwhile
                process.send_signal(signal.SIGTERM)
                signals += 1
            time.sleep(0.005)
        process.communicate()
    assert signals > 1
    assert process.returncode == 143, stderr.read_text()
    report = inspect(directory, "--no-params")
    assert report["step"] is not None and report["step"] >= 10
    assert report["step"] % 1000 != 0  # the emergency save, not a periodic one


def test_corrupted_newest_checkpoint_falls_back_to_the_previous(baseline, baseline_copy):
    shard = baseline_copy / "step-30" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the CRC can tell
    shard.write_bytes(bytes(data))
    before = inspect(baseline_copy, "--no-params")
    assert before["step"] == 25
    assert [entry["step"] for entry in before["corrupt"]] == [30]

    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(baseline_copy))
    assert resumed.code == 0, resumed.stderr
    assert "step-30 is unusable" in resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == 25
    assert resumed.end["params_sha256"] == baseline[1].end["params_sha256"]
    after = inspect(baseline_copy)
    assert after["step"] == 30 and after["params_sha256"] == baseline[1].end["params_sha256"]
    assert any(entry["path"] == "step-30.corrupt" for entry in after["corrupt"])


def test_truncated_checkpoint_and_partial_directory_are_never_loaded(baseline, baseline_copy):
    shard = baseline_copy / "step-30" / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    partial = baseline_copy / "step-35.123-save.tmp"
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"half written")
    report = inspect(baseline_copy, "--verify", "size", "--no-params")
    assert report["step"] == 25
    assert report["partial"] == [35]
    assert "__1_0.distcp has 100 bytes" in report["corrupt"][0]["problem"]


def test_no_resume_starts_from_scratch(baseline, baseline_copy):
    run = launch(
        *BASE_ARGS, "--checkpoint-dir", str(baseline_copy), "--no-resume", "--max-steps", "5"
    )
    assert run.code == 0, run.stderr
    assert run.events("start")[0]["resumed_from"] is None
    assert run.end["step"] == 5


def test_sync_checkpoints_resume_like_async_ones(baseline, tmp_path):
    directory = tmp_path / "ckpt"
    # On rank 0 only: an exception on rank 1 first could bring torchrun's SIGTERM to
    # rank 0 while it is still on step 17, and its emergency save would be step 17.
    first = launch(
        *BASE_ARGS,
        "--checkpoint-dir",
        str(directory),
        "--checkpoint-mode",
        "sync",
        "--inject-fault",
        "exception@18:rank=0",
    )
    assert first.code == 1  # an unexpected exception is permanent
    assert "injected exception at step 18" in first.stderr
    assert inspect(directory, "--no-params")["step"] == 15
    # launch() fails the test if this run gets stuck (on a dead save, say).
    second = launch(*BASE_ARGS, "--checkpoint-dir", str(directory), "--checkpoint-mode", "sync")
    assert second.code == 0, second.stderr
    assert second.end["params_sha256"] == baseline[1].end["params_sha256"]
