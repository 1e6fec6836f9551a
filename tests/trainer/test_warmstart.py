"""Warm starts: workers forked from the launcher's zygote train and look as fresh ones do.

Every other trainer test runs warm too (their launcher has OMP_NUM_THREADS=1 and one
thread); these compare a warm run with a cold one (TRAINER_WARM_START=0) and check
what a worker looks like from outside: its command line, parent, session, signals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import (
    BASE_ARGS,
    child_pids,
    kill_tree,
    launch,
    launch_command,
    process_state,
    running,
    trainer_env,
    wait_for,
)
from trainer import warmstart
from trainer.launch import one_thread_per_worker

LONG = (*BASE_ARGS, "--max-steps", "100000", "--checkpoint-interval", "1000")


def test_a_warm_run_trains_exactly_as_a_cold_one(baseline, tmp_path):
    _, warm = baseline
    cold = launch(
        *BASE_ARGS,
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        env=trainer_env(TRAINER_WARM_START="0"),
    )
    assert cold.code == 0, cold.stderr
    assert warm.events("start")[0]["warm_start"] is True
    assert cold.events("start")[0]["warm_start"] is False
    assert cold.end["params_sha256"] == warm.end["params_sha256"]
    assert [e["event"] for e in cold.events("step")] == [e["event"] for e in warm.events("step")]


# Loaded by every Python process of a run: at its end, a process writes what it
# imported after its last fork (for a warm worker: after the zygote forked it).
IMPORTS_AFTER_FORK = """
import atexit, json, os, sys
_seen = set(sys.modules)
def _forked():
    global _seen
    _seen = set(sys.modules)
os.register_at_fork(after_in_child=_forked)
def _write():
    out = os.path.join(os.environ["IMPORT_LOG"], str(os.getpid()))
    with open(out, "w") as log:
        json.dump({"argv": sys.argv, "imported": sorted(set(sys.modules) - _seen)}, log)
atexit.register(_write)
_exit = os._exit
def _exit_writing(code):
    _write()
    _exit(code)
os._exit = _exit_writing
"""


DYNAMO_AND_ITS_IMPORTS = ("torch._dynamo", "torch._inductor", "torch._numpy", "torch.onnx")


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _command_line(pid: int) -> str:
    """/proc's command line, its arguments joined by spaces: a warm worker's title is
    one string (setproctitle), a fresh one's is NUL-separated; ps shows both alike."""
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return raw.replace(b"\0", b" ").decode().strip()


def _workers(launcher: int) -> list[int]:
    return sorted(p for p in child_pids(launcher) if " -u -m trainer " in _command_line(p))


# Starts the rest of its arguments with SIGHUP and SIGQUIT ignored, as nohup or a
# non-interactive shell's background job would.
IGNORING = (
    "import os, signal, sys\n"
    "for sig in (signal.SIGHUP, signal.SIGQUIT):\n"
    "    signal.signal(sig, signal.SIG_IGN)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)
# glibc's own signals (32, 33), which Python cannot see or set.
_VALID = sum(1 << (int(sig) - 1) for sig in signal.valid_signals())


def _mask(text: str) -> int:
    return int(text, 16) & _VALID


def _look_at_running_workers(tmp_path: Path, env: dict, ignoring: bool) -> list[dict]:
    """Start a long run, and once it trains, what /proc says of its two workers."""
    tmp_path.mkdir()
    stderr = tmp_path / "stderr"
    command = launch_command(*LONG, "--checkpoint-dir", str(tmp_path / "ckpt"))
    if ignoring:
        command = [sys.executable, "-c", IGNORING, *command]
    with running(command, stderr, env=env) as process:
        while '"event": "step"' not in (line := process.stdout.readline()):
            assert line, stderr.read_text()
        wait_for(lambda: len(_workers(process.pid)) == 2, "both workers are the launcher's")
        seen = []
        for pid in _workers(process.pid):
            status = _status(pid)
            seen.append(
                {
                    "command": _command_line(pid),
                    "own session": os.getsid(pid) == pid,
                    # Signals the worker ignores and catches: its handlers, as installed.
                    "ignored": _mask(status["SigIgn"]),
                    "caught": _mask(status["SigCgt"]),
                    "blocked": _mask(status["SigBlk"]),
                    "umask": status.get("Umask"),
                }
            )
            assert int(status["PPid"]) == process.pid
        return seen


@pytest.mark.parametrize("ignoring", [False, True], ids=["plain", "signals-ignored"])
def test_a_warm_worker_looks_like_a_fresh_one_from_outside(tmp_path, ignoring):
    """Signals a launcher was started ignoring stay ignored in a fresh worker unless
    torchrun handles them (exec drops a handler): a warm worker's must be the same."""
    warm = _look_at_running_workers(tmp_path / "warm", trainer_env(), ignoring)
    cold = _look_at_running_workers(
        tmp_path / "cold", trainer_env(TRAINER_WARM_START="0"), ignoring
    )
    for worker in warm + cold:
        assert worker["own session"]
    for worker in warm:  # the same command, up to the checkpoint directory of each run
        worker["command"] = worker["command"].replace(str(tmp_path / "warm"), "RUN")
    for worker in cold:
        worker["command"] = worker["command"].replace(str(tmp_path / "cold"), "RUN")
    assert warm == cold
    assert warm[0]["command"].startswith(f"{sys.executable} -u -m trainer --model mlp")


def test_restarted_workers_start_warm_too_and_import_no_dynamo_after_the_fork(tmp_path):
    """What a worker imports on its way to its first step (DDP and FSDP import
    TorchDynamo as they wrap the model) the zygote has imported already: half a
    CPU-second a worker, on every start and restart, if not."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(IMPORTS_AFTER_FORK)
    (tmp_path / "log").mkdir()
    env = trainer_env(PYTHONPATH=str(tmp_path / "site"), IMPORT_LOG=str(tmp_path / "log"))
    run = launch(
        *BASE_ARGS,
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--inject-fault",
        "sigkill@12:rank=1",
        env=env,
        torchrun=("--max-restarts", "1"),
    )
    assert run.code == 0, run.stderr
    starts = run.events("start")
    # The restart resumes from step 10, or from 12 when rank 0 saved that step alone.
    assert starts[0]["resumed_from"] is None and starts[1]["resumed_from"] in (10, 12)
    assert [s["warm_start"] for s in starts] == [True, True]
    assert run.end["step"] == 30
    # Every worker but the one SIGKILLed wrote what it imported after its fork.
    logs = [json.loads(path.read_text()) for path in (tmp_path / "log").iterdir()]
    main = os.path.join("trainer", "__main__.py")
    workers = [log for log in logs if log["argv"][0].endswith(main)]
    assert len(workers) == 3, [log["argv"][:3] for log in logs]
    for worker in workers:
        # A few small modules of torch stay (the profiler's, torch.save's settings).
        late = [name for name in worker["imported"] if name.startswith(DYNAMO_AND_ITS_IMPORTS)]
        assert not late, worker


def test_the_zygote_dies_with_its_launcher(tmp_path):
    stderr = tmp_path / "stderr"
    command = launch_command(*LONG, "--checkpoint-dir", str(tmp_path / "ckpt"))
    with running(command, stderr) as process:
        while '"event": "step"' not in (line := process.stdout.readline()):
            assert line, stderr.read_text()
        workers = _workers(process.pid)
        (zygote,) = [pid for pid in child_pids(process.pid) if pid not in workers]
        process.kill()  # the launcher alone, as the kernel's OOM killer might
        process.wait()
        wait_for(lambda: process_state(zygote) in ("Z", "X"), "the zygote exits")
        for worker in workers:  # as torchrun's own: whatever the launcher's end did to them
            kill_tree(worker)


def test_importing_the_launcher_imports_no_torch():
    """trainer-launch sets the workers' thread default before torch loads (see below)."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, trainer.launch; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--nproc_per_node=2", "--module", "trainer"], {}, "1"),
        (["--nproc-per-node", "8", "--module", "trainer"], {}, "1"),
        (["--module", "trainer"], {"PET_NPROC_PER_NODE": "4"}, "1"),
        (["--nproc_per_node=1", "--module", "trainer"], {"PET_NPROC_PER_NODE": "4"}, None),
        (["--nproc_per_node=gpu", "--module", "trainer"], {}, None),  # torch needed to count
        (["--nproc_per_node=2", "--module", "trainer"], {"OMP_NUM_THREADS": "6"}, "6"),
        (["--", "python", "train.py", "--nproc-per-node", "2"], {}, None),
    ],
)
def test_one_thread_per_worker_where_torchrun_would_set_it(argv, environ, expected):
    environ = dict(environ)
    one_thread_per_worker(argv, environ)
    assert environ.get("OMP_NUM_THREADS") == expected


def test_only_a_worker_a_fresh_start_would_equal_starts_warm():
    zygote = warmstart.Zygote(0, None, {"OMP_NUM_THREADS": "1", "PYTHONPATH": "/x"})
    trainer = (sys.executable, "-u", "-m", "trainer", "--model", "mlp")
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": "/x", "RANK": "1", "NCCL_DEBUG": "INFO"}
    torchrun = {"TORCHELASTIC_RESTART_COUNT": "1", "CUDA_VISIBLE_DEVICES": "1"}
    assert zygote.can_start(trainer, {**env, **torchrun})
    assert not zygote.can_start(trainer, {**env, "OMP_NUM_THREADS": "4"})
    assert not zygote.can_start(trainer, {**env, "LD_PRELOAD": "/lib/x.so"})
    assert not zygote.can_start(trainer, {**env, "TORCH_LOGS": "+dynamo"})
    assert not zygote.can_start(("numactl", "-N", "0", *trainer), env)
    assert not zygote.can_start(("/usr/bin/python3", *trainer[1:]), env)
    assert not zygote.can_start((sys.executable, "-u", "train.py"), env)


def test_a_launcher_with_threads_starts_its_workers_cold(tmp_path):
    """With OMP_NUM_THREADS unset and one worker, numpy's BLAS starts a thread pool in the
    launcher as torch loads: forking it could copy a held lock, so nothing is forked."""
    env = {k: v for k, v in trainer_env().items() if k != "OMP_NUM_THREADS"}
    run = launch(
        *BASE_ARGS, "--max-steps", "2", "--checkpoint-dir", str(tmp_path / "c"), nproc=1, env=env
    )
    assert run.code == 0, run.stderr
    if os.cpu_count() and os.cpu_count() > 1:  # one core: BLAS starts no pool at all
        assert run.events("start")[0]["warm_start"] is False
