"""Real trainer runs: two CPU ranks with gloo, launched by torchrun (via trainer-launch,
which is torchrun with meaningful exit codes), writing real checkpoints to disk."""

from __future__ import annotations

import ctypes
import io
import json
import os
import random
import select
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


def launch_command(
    *args: str, nproc: int = 2, module: str = "trainer", torchrun: tuple[str, ...] = ()
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trainer.launch",
        "--standalone",
        f"--nproc_per_node={nproc}",
        *torchrun,
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
    torchrun: tuple[str, ...] = (),
) -> TrainerRun:
    # A session of its own: on a timeout the launcher and every rank are killed together.
    process = subprocess.Popen(
        launch_command(*args, nproc=nproc, module=module, torchrun=torchrun),
        env=env or trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(process)
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
        killer = threading.Timer(limit, kill_tree, (process,))
        killer.start()
        try:
            yield process
        finally:
            killer.cancel()
            kill_tree(process)


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


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (any of its threads), from /proc.

    Read from each process's stat, not from /proc/PID/task/*/children: the kernel
    walks that list by position, so a child can be skipped while others come and go
    (proc(5): reliable only when the children are stopped); a scan of /proc by pid
    misses no process that lives throughout it.
    """
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields and int(fields[1]) == pid:  # fields[1]: the parent's pid
                found.append(int(entry.name))
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first, then the
    parent's pid...), or None once the process is gone. The name is cut at the last
    parenthesis: it may hold spaces and parentheses of its own."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()


def kill_tree(process: subprocess.Popen | int) -> None:
    """SIGKILL a process and every process below it, and return once they are all gone.

    Killing the launcher's process group is not enough: torch's elastic agent starts
    each rank in a session of its own, so ranks outlive a killed launcher and go on
    training with each other. Each process is stopped before its children are listed,
    so none can start another unseen; then all are killed and waited for.
    """
    if isinstance(process, subprocess.Popen):
        if process.poll() is not None:  # exited and reaped: its pid may be another's now
            return
        root = process.pid
    else:
        root = process
    stopped: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        stopped.append(pid)
        pending += child_pids(pid)
    handles = []
    for pid in stopped:
        with suppress(ProcessLookupError):
            handles.append(os.pidfd_open(pid))
            os.kill(pid, signal.SIGKILL)
    for handle in handles:
        exited = select.poll()
        exited.register(handle, select.POLLIN)
        exited.poll()  # a process's pidfd turns readable once it has exited
        os.close(handle)
    # Every process of the tree has exited, its children passed on to this one (the
    # subreaper): collect the killed ones, and no other child some Popen may wait for.
    for pid in stopped:
        if pid != root or not isinstance(process, subprocess.Popen):
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    if isinstance(process, subprocess.Popen):
        process.wait()


def reap_orphans() -> None:
    """Collect the exit status of this process's children that have exited (the ranks
    of a launcher that ended without them end up here: see the fixture below)."""
    for pid in child_pids(os.getpid()):
        if process_state(pid) == "Z":
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def process_state(pid: int) -> str:
    """The state letter /proc gives a process (R, S, D, Z...; X when it is gone)."""
    fields = _stat_fields(pid)
    return fields[0] if fields else "X"


# A test's processes that its own process tree loses (the ranks of a launcher killed
# without them) become children of the pytest process, not of init, so that the
# fixture below finds them.
PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@pytest.fixture(autouse=True)
def no_process_outlives_its_test():
    """Fail a test that leaves a process running, and kill what it left.

    A leftover rank of one test trains on in the background and slows every test
    after it; on a loaded machine that is how timeouts turn into random failures.
    """
    before = set(child_pids(os.getpid()))
    yield
    reap_orphans()
    new = [pid for pid in child_pids(os.getpid()) if pid not in before]
    left = [pid for pid in new if process_state(pid) != "Z"]
    if left:
        commands = [_command(pid) for pid in left]
        for pid in left:
            kill_tree(pid)
        pytest.fail("processes outlived the test:\n" + "\n".join(commands))


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        # The command line reads empty while the kernel cannot reach the process's memory
        # (seen once on a loaded CI machine); its name stays readable.
        name = Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
    except OSError:
        return f"{pid} (gone)"
    shown = " ".join(a.decode(errors="replace") for a in argv if a)[:300]
    return f"{pid}: {shown or f'[{name}]'}"


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
