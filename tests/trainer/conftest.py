"""Real trainer runs: two CPU ranks with gloo, launched by torchrun (via trainer-launch,
which is torchrun with meaningful exit codes), writing real checkpoints to disk."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# Small and quick, but every component is in play: checkpoints every 5 steps, async.
BASE_ARGS = (
    "--model",
    "mlp",
    "--dataset",
    "synthetic",
    "--max-steps",
    "30",
    "--checkpoint-interval",
    "5",
    "--seed",
    "7",
    "--log-interval",
    "5",
)


@dataclass
class TrainerRun:
    code: int
    stdout: str
    stderr: str

    def events(self, name: str) -> list[dict]:
        records = [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]
        return [record for record in records if record["event"] == name]

    @property
    def end(self) -> dict:
        (end,) = self.events("end")
        return end


def trainer_env(**extra: str) -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TRAINER_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK"))
    }
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def launch(
    *args: str,
    nproc: int = 2,
    timeout: float = 180,
    env: dict | None = None,
    module: str = "trainer",
) -> TrainerRun:
    command = [
        sys.executable,
        "-m",
        "trainer.launch",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--module",
        module,
        *args,
    ]
    # A session of its own: on a timeout the launcher and every rank are killed together.
    process = subprocess.Popen(
        command,
        env=env or trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"trainer did not finish within {timeout}s:\n{stderr[-3000:]}")
    return TrainerRun(process.returncode, stdout, stderr)


def inspect(directory: Path, *extra: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "trainer.inspect", str(directory), *extra],
        capture_output=True,
        text=True,
        check=True,
        env=trainer_env(),
    )
    return json.loads(done.stdout)


@pytest.fixture(scope="session")
def baseline(tmp_path_factory) -> tuple[Path, TrainerRun]:
    """An uninterrupted 30-step run: the reference every interrupted run must match."""
    directory = tmp_path_factory.mktemp("baseline") / "ckpt"
    run = launch(*BASE_ARGS, "--checkpoint-dir", str(directory))
    assert run.code == 0, run.stderr
    return directory, run


@pytest.fixture
def baseline_copy(baseline, tmp_path) -> Path:
    target = tmp_path / "ckpt"
    shutil.copytree(baseline[0], target)
    return target
