"""Bad checkpoints, failed saves and hostile checkpoint directories, on real two-rank
runs: a bad checkpoint is set aside at once and its step saved again; a job whose
checkpoints are all bad stops (exit 2) instead of starting over; a save that finds
the volume full is counted and training goes on; links, FIFOs, huge or hostile
manifests and a --checkpoint-dir that is no directory end in one line, never a
traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import (
    BASE_ARGS,
    RUN_LIMIT,
    inspect,
    launch,
    launch_command,
    trainer_env,
)
from trainer.checkpoint import MANIFEST, MAX_MANIFEST_BYTES, verify


def truncate(shard: Path) -> None:
    shard.write_bytes(shard.read_bytes()[:100])


def test_a_truncated_newest_checkpoint_is_set_aside_and_its_step_saved_again(
    baseline, baseline_copy
):
    truncate(baseline_copy / "step-30" / "__1_0.distcp")
    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(baseline_copy))
    assert resumed.code == 0, resumed.stderr
    assert "checkpoint step-30 is unusable (__1_0.distcp has 100 bytes" in resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == 25
    # Step 30 is trained again and its save is not in the way of the bad one.
    assert resumed.end["failed_checkpoints"] == 0
    assert verify(baseline_copy / "step-30") is None
    assert (baseline_copy / "step-30.corrupt" / "__1_0.distcp").stat().st_size == 100
    assert resumed.end["params_sha256"] == baseline[1].end["params_sha256"]


def test_a_job_whose_checkpoints_are_all_bad_stops_until_told_to_start_over(baseline_copy):
    for step in (20, 25, 30):
        truncate(baseline_copy / f"step-{step}" / "__0_0.distcp")
    for _attempt in range(2):  # the operator's retry (were it to retry) meets the same
        stopped = launch(*BASE_ARGS, "--checkpoint-dir", str(baseline_copy))
        assert stopped.code == 2, stopped.stderr  # permanent: not retried
        assert "Traceback" not in stopped.stderr
        (error,) = [line for line in stopped.stderr.splitlines() if "trainer: error:" in line]
        assert "no usable checkpoint in" in error and "--no-resume" in error
        assert not stopped.events("step")
    assert sorted(path.name for path in baseline_copy.glob("step-*")) == [
        "step-20.corrupt",
        "step-25.corrupt",
        "step-30.corrupt",
    ]
    fresh = launch(*BASE_ARGS, "--checkpoint-dir", str(baseline_copy), "--no-resume")
    assert fresh.code == 0, fresh.stderr
    assert fresh.events("start")[0]["resumed_from"] is None
    assert inspect(baseline_copy, "--no-params")["complete"] == [20, 25, 30]


def test_a_checkpoint_of_another_model_stops_the_run_and_is_kept(baseline_copy):
    # --width changed between launches: the checkpoints are intact, the configuration is
    # wrong. Setting them aside as corrupt would lose every step of the job.
    before = inspect(baseline_copy, "--no-params")["complete"]
    stopped = launch(*BASE_ARGS, "--width", "48", "--checkpoint-dir", str(baseline_copy))
    assert stopped.code == 2, stopped.stderr
    assert "Traceback" not in stopped.stderr
    (error,) = {line for line in stopped.stderr.splitlines() if "trainer: error:" in line}
    assert "checkpoint step-30" in error and "saved by another model" in error, error
    assert "another shape" in error and "--no-resume" in error
    assert not list(baseline_copy.glob("*.corrupt*"))
    assert inspect(baseline_copy, "--no-params")["complete"] == before == [20, 25, 30]
    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(baseline_copy))
    assert resumed.code == 0 and resumed.events("start")[0]["resumed_from"] == 30


def _plant_hostile_entries(checkpoints: Path, outside: Path) -> dict[int, str]:
    """Entries no trainer writes, each under a step-N name newer than the real ones;
    returns the problem each must be reported with."""
    (checkpoints / "step-40").symlink_to("step-40")  # a loop
    shutil.copytree(checkpoints / "step-30", outside)
    (checkpoints / "step-45").symlink_to(outside)  # a good checkpoint, elsewhere
    fifo = checkpoints / "step-50"
    shutil.copytree(checkpoints / "step-30", fifo)
    (fifo / ".metadata").unlink()
    os.mkfifo(fifo / ".metadata")  # reading it would block forever
    huge = checkpoints / "step-55"
    huge.mkdir()
    with (huge / MANIFEST).open("wb") as handle:
        handle.truncate(MAX_MANIFEST_BYTES + 1)
    deep = checkpoints / "step-60"
    deep.mkdir()
    (deep / MANIFEST).write_text("[" * 100_000)
    escaping = checkpoints / "step-65"
    shutil.copytree(checkpoints / "step-30", escaping)
    manifest = json.loads((escaping / MANIFEST).read_text())
    manifest["files"]["../../../../../../etc/passwd"] = {"size": 1, "crc32": "00000000"}
    (escaping / MANIFEST).write_text(json.dumps(manifest))
    return {
        40: "a symbolic link",
        45: "a symbolic link",
        50: ".metadata is not a regular file",
        55: "is larger than",
        60: "unreadable",
        65: "not a file of this checkpoint",
    }


def test_hostile_entries_in_the_checkpoint_directory_are_set_aside(baseline_copy, tmp_path):
    problems = _plant_hostile_entries(baseline_copy, tmp_path / "outside")
    report = inspect(baseline_copy, "--no-params")
    assert report["step"] == 30
    reported = {entry["step"]: entry["problem"] for entry in report["corrupt"]}
    for step, problem in problems.items():
        assert problem in reported[step], (step, reported[step])

    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(baseline_copy))
    assert resumed.code == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == 30
    for step, problem in problems.items():
        (line,) = [
            line for line in resumed.stderr.splitlines() if f"step-{step} is unusable" in line
        ]
        assert problem in line and f"set aside as step-{step}.corrupt" in line
        assert os.path.lexists(baseline_copy / f"step-{step}.corrupt")
        assert not os.path.lexists(baseline_copy / f"step-{step}")
    assert verify(tmp_path / "outside") is None  # a link is renamed, never followed


def _not_a_directory(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("")
    return tmp_path / "file"


def _a_symlink_loop(tmp_path: Path) -> Path:
    (tmp_path / "loop").symlink_to("loop")
    return tmp_path / "loop"


def _under_a_file(tmp_path: Path) -> Path:
    return _not_a_directory(tmp_path) / "ckpt"


BAD_DIRECTORIES = {
    "a file": (_not_a_directory, "not a directory"),
    "a symlink loop": (_a_symlink_loop, "Too many levels of symbolic links"),
    "under a file": (_under_a_file, "Not a directory"),
}


@pytest.mark.parametrize("case", BAD_DIRECTORIES.values(), ids=BAD_DIRECTORIES.keys())
def test_a_checkpoint_dir_that_is_no_directory_is_one_line_exit_2(tmp_path, case):
    make, message = case
    path = make(tmp_path)
    for command, prefix in (
        (["-m", "trainer", "--max-steps", "3", "--checkpoint-dir", str(path)], "trainer"),
        (["-m", "trainer.inspect", str(path)], "trainer.inspect"),
    ):
        done = subprocess.run(
            [sys.executable, *command],
            capture_output=True,
            text=True,
            env=trainer_env(),
            timeout=RUN_LIMIT,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [done.stderr.strip()]
        assert done.stderr.startswith(f"{prefix}: error: ") and message in done.stderr
        assert str(path) in done.stderr and done.stdout == ""


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_save_that_finds_the_volume_full_is_counted_and_training_goes_on(
    baseline, tmp_path, mode
):
    directory = tmp_path / "ckpt"
    # Rank 1's DCP writer fails with ENOSPC inside DCP's own write path, so DCP raises
    # its CheckpointException (a BaseException) on every rank, as on a real full volume.
    run = launch(
        *BASE_ARGS,
        "--checkpoint-dir",
        str(directory),
        "--checkpoint-mode",
        mode,
        "--inject-fault",
        "nospace@10:rank=1",
    )
    assert run.code == 0, run.stderr
    assert "checkpoint of step 10 failed (1 so far), training goes on" in run.stderr
    (failed,) = run.events("checkpoint_failed")
    assert failed["step"] == 10 and "No space left on device" in failed["reason"]
    assert [record["step"] for record in run.events("checkpoint")] == [5, 15, 20, 25, 30]
    assert run.end["failed_checkpoints"] == 1
    assert run.end["params_sha256"] == baseline[1].end["params_sha256"]
    assert inspect(directory, "--no-params")["complete"] == [20, 25, 30]


@pytest.fixture
def full_volume(tmp_path):
    """A real tmpfs with room for the lock file and nothing more (needs CAP_SYS_ADMIN)."""
    mount = tmp_path / "volume"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"no tmpfs to fill here ({done.stderr.strip()}); the nospace fault covers it")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_real_full_volume_fails_every_save_and_the_run_says_so(full_volume):
    run = launch(*BASE_ARGS, "--max-steps", "10", "--checkpoint-dir", str(full_volume))
    assert run.code == 206, run.stderr  # retried: not "finished" with nothing saved
    assert "there is no checkpoint: a retry starts over" in run.stderr
    assert [failed["step"] for failed in run.events("checkpoint_failed")] == [5, 10]
    assert all("No space left on device" in f["reason"] for f in run.events("checkpoint_failed"))
    assert run.end["failed_checkpoints"] == 2 and run.end["step"] == 10


def test_a_failed_save_of_the_last_step_is_not_a_finished_run(tmp_path):
    """Training goes on past a failed periodic save, but the last step's save is the
    result: without it the run exits 206 (retried) and names what a resume gets."""
    directory = tmp_path / "ckpt"
    run = launch(*BASE_ARGS, "--checkpoint-dir", str(directory), "--inject-fault", "nospace@30")
    assert run.code == 206, run.stderr
    assert "training ended at step 30, but no checkpoint of it could be written" in run.stderr
    assert "a retry resumes from step-25" in run.stderr
    assert "exiting 206 (training ended but its last step could not be saved" in run.stderr
    assert inspect(directory, "--no-params")["step"] == 25
    resumed = launch(*BASE_ARGS, "--checkpoint-dir", str(directory))
    assert resumed.code == 0, resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == 25
    assert inspect(directory, "--no-params")["step"] == 30


def test_a_file_size_limit_on_the_last_save_is_not_a_finished_run(tmp_path):
    """A real RLIMIT_FSIZE (prlimit), below a shard's size: every write past it fails
    (Python ignores SIGXFSZ, so the write returns EFBIG), as under a per-file limit."""
    directory = tmp_path / "ckpt"
    command = [
        "prlimit",
        f"--fsize={64 << 10}",
        *launch_command(*BASE_ARGS, "--max-steps", "5", "--checkpoint-dir", str(directory)),
    ]
    done = subprocess.run(
        command, env=trainer_env(), capture_output=True, text=True, timeout=RUN_LIMIT, check=False
    )
    assert done.returncode == 206, done.stderr
    # torch's writer reports the short write in its own words ("unexpected pos").
    assert "checkpoint of step 5 failed (1 so far)" in done.stderr
    assert "Traceback" not in done.stderr
