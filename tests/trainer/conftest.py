"""Real trainer runs: two CPU ranks with gloo, launched by torchrun (via trainer-launch,
which is torchrun with meaningful exit codes), writing real checkpoints to disk."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from trainer.inspect import main as inspect_main

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


# Upper bound of one trainer run: only turns a hang into a failure, never decides a
# pass. Runs take seconds; a loaded two-core machine can make that a minute.
RUN_LIMIT = 300


def launch_command(*args: str, nproc: int = 2, module: str = "trainer") -> list[str]:
    return [
        sys.executable,
        "-m",
        "trainer.launch",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--module",
        module,
        *args,
    ]


def launch(
    *args: str,
    nproc: int = 2,
    timeout: float = RUN_LIMIT,
    env: dict | None = None,
    module: str = "trainer",
) -> TrainerRun:
    # A session of its own: on a timeout the launcher and every rank are killed together.
    process = subprocess.Popen(
        launch_command(*args, nproc=nproc, module=module),
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


@contextmanager
def running(
    command: list[str],
    stderr_file: Path,
    limit: float = RUN_LIMIT,
    cwd: Path | None = None,
    env: dict | None = None,
) -> Iterator:
    """A process group to talk to while it runs (stdout piped, stderr to a file).

    Past `limit` seconds the group is killed, which ends any read of its stdout; on
    leaving, whatever is still running is killed too.
    """
    with (
        stderr_file.open("w") as stderr,
        subprocess.Popen(
            command,
            cwd=cwd,
            env=env or trainer_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        ) as process,
    ):
        killer = threading.Timer(limit, kill_group, (process,))
        killer.start()
        try:
            yield process
        finally:
            killer.cancel()
            kill_group(process)


def wait_for(condition: Callable[[], bool], what: str, limit: float = RUN_LIMIT) -> None:
    """Poll `condition` (a file appearing, say) until it holds; past `limit` s, fail."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {limit}s")
        time.sleep(0.05)


def unused_port() -> int:
    """A port that is free now and below the kernel's ephemeral range.

    A process under test binds it a few seconds later. A port from `bind(0)` comes from
    the ephemeral range, where any process's outgoing connection may take it meanwhile;
    below that range only an explicit bind to this very port could.
    """
    try:
        lowest = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        lowest = 32768
    # Test processes running side by side (pytest-xdist workers gw0, gw1...) draw from
    # disjoint sets of ports, so two of them never pick the same one.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker) if worker.isdigit() else 0
    candidates = [p for p in range(10000, max(10000, lowest)) if p % workers == index]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail("no free port below the ephemeral range")


def kill_group(process: subprocess.Popen) -> None:
    """Kill a process started with `start_new_session` and everything it started."""
    if process.poll() is None:
        with suppress(ProcessLookupError):  # exited meanwhile
            os.killpg(process.pid, signal.SIGKILL)


# Float32 round-off between two orders of summing the same gradients, compounded over
# a run: each tensor within NORM_RTOL of the other in norm, and each element within
# ELEMENT_ATOL, 10% of one AdamW update at lr 1e-3 (an element whose gradient is mostly
# round-off gets AdamW's normalised step either way). A different sample, or a
# gradient scaled wrongly under clipping, moves whole tensors by far more.
NORM_RTOL, ELEMENT_ATOL = 1e-4, 1e-4


def comparable(name: str, tensor):
    """The parameter without the attention's key bias, if it has one.

    The key bias has no gradient in exact arithmetic (softmax ignores a shift shared
    by all keys): it gets only round-off, which AdamW turns into updates of a full
    learning rate, so it differs between any two reduction orders and tells nothing.
    """
    if name.endswith("qkv.bias"):
        query, _key, value = tensor.chunk(3)
        return torch.cat([query, value])
    return tensor


def assert_params_close(actual: dict, expected: dict) -> None:
    assert sorted(actual) == sorted(expected)
    for name in expected:
        mine, theirs = comparable(name, actual[name]), comparable(name, expected[name])
        distance = torch.linalg.vector_norm(mine - theirs).item()
        size = torch.linalg.vector_norm(theirs).item()
        assert distance <= NORM_RTOL * size, f"{name}: {distance:.3g} apart, norm {size:.3g}"
        torch.testing.assert_close(
            mine, theirs, rtol=0, atol=ELEMENT_ATOL, msg=lambda text, n=name: f"{n}: {text}"
        )


def inspect(directory: Path, *extra: str) -> dict:
    """`python -m trainer.inspect DIR` run in this process: a process of its own would
    import torch again (about two CPU-seconds a call). The command's own process is
    tested in test_checkpoint_failures and test_checkpoint_security."""
    printed = io.StringIO()
    with redirect_stdout(printed):
        code = inspect_main([str(directory), *extra])
    assert code == 0, printed.getvalue()
    return json.loads(printed.getvalue())


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
