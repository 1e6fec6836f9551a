"""One job per checkpoint directory: a live job's lock refuses a second job, a resume
refuses another job's checkpoints, a later launch of the same job waits for the
earlier one to let go. Real two-rank runs."""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from tests.trainer.conftest import (
    BASE_ARGS,
    launch,
    launch_command,
    running,
    trainer_env,
    wait_for,
)
from trainer.config import JobIdentity
from trainer.ownership import LOCK_FILE

SHORT = (*BASE_ARGS, "--max-steps", "10")


def assert_one_line_refusal(run, *words: str) -> None:
    """Exit 2 (permanent), the reason said once, no traceback."""
    assert run.code == 2, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("trainer: error: ")]
    assert len(errors) == 1, run.stderr
    for word in words:
        assert word in errors[0], errors[0]


def test_a_second_job_on_a_live_jobs_directory_is_refused(tmp_path):
    directory = tmp_path / "ckpt"
    first = launch_command(
        "--max-steps",
        "100000",
        "--checkpoint-interval",
        "1000",
        "--log-interval",
        "1",
        "--checkpoint-dir",
        str(directory),
    )
    stderr = tmp_path / "first.stderr"
    with running(first, stderr, env=trainer_env(TRAINER_JOB_NAME="run-a")) as process:
        # The lock is taken before the first step: a step record means it is held.
        while '"event": "step"' not in (line := process.stdout.readline()):
            assert line, stderr.read_text()
        second = launch(
            *SHORT,
            "--checkpoint-dir",
            str(directory),
            env=trainer_env(TRAINER_JOB_NAME="run-b"),
        )
        assert process.poll() is None, "the first job must be unharmed"
    assert_one_line_refusal(second, "is in use by job 'run-a'", "this is job 'run-b'")
    assert not second.events("start")


def test_a_resume_refuses_another_jobs_checkpoints(tmp_path):
    directory = tmp_path / "ckpt"
    first = launch(*SHORT, "--checkpoint-dir", str(directory), "--job-name", "run-a")
    assert first.code == 0, first.stderr
    (start,) = first.events("start")
    assert start["resumed_from"] is None

    other = launch(*SHORT, "--checkpoint-dir", str(directory), "--job-name", "run-b")
    assert_one_line_refusal(other, "step-10, written by job 'run-a'", "this is job 'run-b'")
    # Nothing of run-a's was touched; --no-resume is no way around it either.
    assert (directory / "step-10").is_dir()
    fresh = launch(*SHORT, "--checkpoint-dir", str(directory), "--job-name", "run-b", "--no-resume")
    assert_one_line_refusal(fresh, "written by job 'run-a'")
    assert (directory / "step-10").is_dir()

    adopted = launch(
        *BASE_ARGS,
        "--max-steps",
        "15",
        "--checkpoint-dir",
        str(directory),
        "--job-name",
        "run-b",
        "--adopt-checkpoints",
    )
    assert adopted.code == 0, adopted.stderr
    assert adopted.events("start")[0]["resumed_from"] == 10
    manifest = json.loads((directory / "step-15" / ".trainer-manifest.json").read_text())
    assert manifest["job"] == {"name": "run-b", "uid": None}


def test_a_job_recreated_under_the_same_name_is_another_job(tmp_path):
    directory = tmp_path / "ckpt"
    env = trainer_env(TRAINER_JOB_NAME="run-a", TRAINER_JOB_UID="uid-1")
    first = launch(*SHORT, "--checkpoint-dir", str(directory), env=env)
    assert first.code == 0, first.stderr
    manifest = json.loads((directory / "step-10" / ".trainer-manifest.json").read_text())
    assert manifest["job"] == {"name": "run-a", "uid": "uid-1"}

    recreated = trainer_env(TRAINER_JOB_NAME="run-a", TRAINER_JOB_UID="uid-2")
    refused = launch(*SHORT, "--checkpoint-dir", str(directory), env=recreated)
    assert_one_line_refusal(refused, "job 'run-a' (uid uid-1)", "this is job 'run-a' (uid uid-2)")


def test_a_later_launch_of_the_same_job_waits_for_the_earlier_one(tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    # The earlier launch, still in its grace period: it holds the lock.
    holder = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    record = {"job": {"name": "run-a", "uid": None}, "host": "old-pod", "pid": 1}
    os.write(holder, json.dumps(record).encode())
    stderr = tmp_path / "stderr"
    env = trainer_env(TRAINER_JOB_NAME="run-a")
    with running(
        launch_command(*SHORT, "--checkpoint-dir", str(directory)), stderr, env=env
    ) as process:
        wait_for(
            lambda: "waiting for an earlier launch of this job" in stderr.read_text(),
            "the new launch says it waits",
        )
        assert "old-pod" in stderr.read_text()
        os.close(holder)  # the earlier launch exits
        process.communicate()
    assert process.returncode == 0, stderr.read_text()
    assert (directory / "step-10").is_dir()


@pytest.mark.parametrize(
    ("recorded", "this", "same"),
    [
        (JobIdentity("a", "1"), JobIdentity("a", "1"), True),
        (JobIdentity("a", None), JobIdentity("a", "2"), True),  # uid unknown on one side
        (JobIdentity("a", "1"), JobIdentity("a", "2"), False),
        (JobIdentity("a", "1"), JobIdentity("b", "1"), False),
        (JobIdentity("a", None), JobIdentity(None, None), False),
    ],
)
def test_job_identity(recorded, this, same):
    assert recorded.same_job(this) is same
