"""Warm starts: the reference trainer's workers forked from a process that imported it.

Every worker of `python -m trainer` imports torch, torch.distributed.checkpoint and the
trainer before its first step, and TorchDynamo when it wraps its model (DDP and FSDP
import it on first use): about 2.8 CPU-seconds a worker on a CPU node, paid by each
rank on every (re)start. `trainer-launch` has imported the same modules already
(torch's elastic agent is torch), so it forks one process, the zygote, before it
starts any thread, and the zygote forks each worker torchrun asks for. A worker then
begins where a fresh interpreter would be once `import trainer.train` and
`import torch._dynamo` returned.

What torchrun sees does not change: the worker is a child of the launcher (the zygote
forks it through an intermediate process that exits at once, and the launcher is a
child subreaper), in a session of its own, with the stdout and stderr torchrun opened
for it, the environment torchrun gave it, and exit codes and signals as usual
(`WarmProcess` is the `Popen` torchrun polls, waits for and signals). The worker's
interpreter state is a fresh one's: argv and the command line `ps` shows, `__main__`
(`runpy`, as `-m` does), unbuffered standard streams (`-u`), the signal dispositions a
process the launcher started now would have,
reseeded `random` and numpy generators, and at its end the non-daemon threads are
joined and atexit handlers run, as at exit.

A worker starts warm only when that is indistinguishable from starting it fresh:
- the launcher is one thread when it forks the zygote (a fork copies only the calling
  thread: a lock another thread held would stay locked forever), and has not started
  CUDA (a process forked after that cannot use it);
- the command is `python -u -m trainer` of this interpreter, nothing wrapping it;
- every environment variable that a process reads while starting or importing torch
  (`PYTHON*`, `LD_*`, `OMP_*`, `MKL_*`, `OPENBLAS_*`, `KMP_*`, `GOMP_*`, `MALLOC_*`,
  `TORCH*`, `PYTORCH_*`, `TRITON_*`, `CUDA_*` but CUDA_VISIBLE_DEVICES, which CUDA
  reads when it starts, later) has the value the launcher had when it imported them.
  (torchrun adds RANK and the rest for each worker: nothing imported before the fork
  reads them at import.)
Otherwise torchrun starts the worker as a new process (`subprocess.Popen`), as it
always did. `TRAINER_WARM_START=0` turns warm starts off.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping

import setproctitle

from trainer import startup

ENV = "TRAINER_WARM_START"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_HEADER = 8
# Read by a process as it starts or imports torch: a warm worker has the values the
# launcher had then, so they must be the worker's own.
_IMPORT_TIME_PREFIXES = (
    "PYTHON",
    "LD_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "GOMP_",
    "MALLOC_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "CUDA_",
)
# Set by torchrun for each worker and read only once the worker runs.
_RUNTIME = frozenset({"CUDA_VISIBLE_DEVICES", "TORCH_NCCL_ASYNC_ERROR_HANDLING"})
_RUNTIME_PREFIXES = ("TORCHELASTIC_",)


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that a process reads while it starts."""
    return {
        name: value
        for name, value in env.items()
        if name.startswith(_IMPORT_TIME_PREFIXES)
        and name not in _RUNTIME
        and not name.startswith(_RUNTIME_PREFIXES)
    }


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0  # not Linux: unknown, so never one


def _cuda_started() -> bool:
    """Whether this process has loaded the CUDA driver (any CUDA call loads it)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libcuda.so" in line for line in maps)
    except OSError:
        return True


def forkable() -> bool:
    """One thread and no CUDA: what forking a process that is to use torch needs."""
    return _threads() == 1 and not _cuda_started()


class Zygote:
    """The forked process that forks warm workers; `start` one, `stop` it at the end."""

    def __init__(self, pid: int, channel: socket.socket, env: dict[str, str]):
        self.pid = pid
        self._channel = channel
        self._env = env  # the import-time variables the zygote has
        self._lock = threading.Lock()

    @classmethod
    def fork(cls) -> Zygote | None:
        """The zygote, forked now; None where a warm start could differ from a fresh one."""
        if os.environ.get(ENV, "1") == "0" or not hasattr(os, "pidfd_open") or not forkable():
            return None
        # What `python -m trainer` imports: the command line, then torch, DCP, the loop,
        import trainer.cli
        import trainer.train  # noqa: F401

        # and, in that order, TorchDynamo, which DDP and FSDP import as they wrap the
        # model (about 0.5 CPU-s of the 2.8 a worker spends importing).
        importlib.import_module("torch._dynamo")

        if not forkable():
            return None
        if _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return None
        launcher_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the zygote
            launcher_end.close()
            try:
                # Also readies setproctitle for the workers, before they replace environ.
                setproctitle.setproctitle(f"trainer-launch warm-start zygote (launcher {parent})")
                _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != parent:  # the launcher died before the line above
                    os._exit(0)
                _serve(zygote_end)
            finally:
                os._exit(0)
        zygote_end.close()
        return cls(pid, launcher_end, import_time_env(os.environ))

    def can_start(self, args: tuple, env: Mapping[str, str]) -> bool:
        return (
            len(args) >= 4
            and args[0] == sys.executable
            and tuple(args[1:4]) == ("-u", "-m", "trainer")
            and import_time_env(env) == self._env
        )

    def start(self, args: tuple, env: Mapping[str, str], stdout, stderr) -> WarmProcess:
        """Fork a worker running `python -u -m trainer ARGS`; its stdout and stderr are
        the given files (None: the launcher's own)."""
        streams = [f for f in (stdout, stderr) if f is not None]
        request = {
            "argv": [str(a) for a in args[4:]],
            "env": dict(env),
            "cwd": os.getcwd(),
            "stdout": stdout is not None,
            "stderr": stderr is not None,
            # A new process keeps the signals its parent ignores when it starts it
            # (nohup's SIGHUP, a shell's SIGQUIT), not the ones ignored at the fork.
            "ignored": [int(s) for s in signal.valid_signals() if _ignored(s)],
        }
        body = json.dumps(request).encode()
        with self._lock:
            socket.send_fds(
                self._channel, [len(body).to_bytes(_HEADER, "big")], [f.fileno() for f in streams]
            )
            self._channel.sendall(body)
            reply = _receive(self._channel, _HEADER)
        if len(reply) != _HEADER:
            raise OSError("the warm-start zygote is gone")
        pid = int.from_bytes(reply, "big")
        if pid == 0:
            raise OSError("the warm-start zygote could not fork a worker")
        return WarmProcess(pid, list(args))

    def stop(self) -> None:
        """End the zygote (it exits when its channel closes) and collect it."""
        self._channel.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


class WarmProcess:
    """A warm-started worker, as the `subprocess.Popen` torchrun keeps for each worker."""

    def __init__(self, pid: int, args: list):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # collected elsewhere, as Popen reports it
                self.returncode = 0
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is not None:
            return self.returncode  # type: ignore[return-value]
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            handle = os.pidfd_open(self.pid)
        except ProcessLookupError:  # exited (a zombie has no pidfd): collect it
            handle = None
        try:
            while self.poll() is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
                if handle is not None:
                    select.select([handle], [], [], left)
                else:
                    time.sleep(0.01)
        finally:
            if handle is not None:
                os.close(handle)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@contextlib.contextmanager
def warm_workers(zygote: Zygote | None) -> Iterator[None]:
    """While inside, torchrun starts the workers `zygote` can start by forking them."""
    if zygote is None:
        yield
        return
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler

    class WarmHandler(SubprocessHandler):
        def _popen(self, args, env):
            if zygote.can_start(args, env):
                try:
                    return zygote.start(args, env, self._stdout, self._stderr)
                except OSError:
                    pass  # the zygote is gone: start this worker fresh
            return super()._popen(args, env)

    def handler(**kwargs):
        return WarmHandler(**kwargs)

    original = api.get_subprocess_handler
    api.get_subprocess_handler = handler
    try:
        yield
    finally:
        api.get_subprocess_handler = original
        zygote.stop()


# -- the zygote ----------------------------------------------------------------------


def _receive(channel: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = channel.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _serve(channel: socket.socket) -> None:
    """Fork a worker for each request until the launcher closes the channel."""
    while True:
        header, fds, _, _ = socket.recv_fds(channel, _HEADER, 2)
        if len(header) < _HEADER:
            return
        body = _receive(channel, int.from_bytes(header, "big"))
        try:
            request = json.loads(body)
        except ValueError:
            return
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.close(read_end)
            worker = os.fork()
            if worker == 0:
                os.close(write_end)
                _become_worker(request, fds, channel)
            os.write(write_end, worker.to_bytes(_HEADER, "big"))
            os._exit(0)
        os.close(write_end)
        for fd in fds:
            os.close(fd)
        pid = _read_pid(read_end)
        os.close(read_end)
        os.waitpid(middle, 0)  # the worker is the launcher's child from here on
        channel.sendall(pid.to_bytes(_HEADER, "big"))


def _read_pid(fd: int) -> int:
    data = b""
    while len(data) < _HEADER:
        chunk = os.read(fd, _HEADER - len(data))
        if not chunk:
            return 0
        data += chunk
    return int.from_bytes(data, "big")


def _become_worker(request: dict, fds: list[int], channel: socket.socket) -> None:
    """In the forked worker: the state `python -u -m trainer ARGV` starts in, then run."""
    code = 1
    try:
        channel.close()
        os.setsid()
        streams = iter(fds)
        if request["stdout"]:
            os.dup2(next(streams), 1)
        if request["stderr"]:
            os.dup2(next(streams), 2)
        for fd in fds:
            os.close(fd)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
        _fresh_signals(set(request["ignored"]))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        encoding = sys.__stdout__.encoding if sys.__stdout__ else "utf-8"
        sys.stdout = sys.__stdout__ = _unbuffered(1, encoding, "strict")
        sys.stderr = sys.__stderr__ = _unbuffered(2, encoding, "backslashreplace")
        sys.path[0] = os.getcwd()
        command = [sys.executable, "-u", "-m", "trainer", *request["argv"]]
        sys.argv = ["-m", *request["argv"]]  # runpy puts the module's path first
        sys.orig_argv = command
        setproctitle.setproctitle(" ".join(command))
        if "numpy.random" in sys.modules:  # seeded from entropy at import, as `random` is
            sys.modules["numpy.random"].seed()
        startup.STARTED_WARM = True
        code = _run_module()
        threading._shutdown()  # type: ignore[attr-defined]  # as at exit: join threads
        atexit._run_exitfuncs()
    except BaseException:  # the worker ends here, whatever happened
        with contextlib.suppress(BaseException):
            sys.excepthook(*sys.exc_info())
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _ignored(sig: int) -> bool:
    try:
        return signal.getsignal(sig) == signal.SIG_IGN
    except (OSError, ValueError):
        return False


def _fresh_signals(ignored: set[int]) -> None:
    """The dispositions a new `python` started by the launcher now would have: the
    launcher's ignored signals still ignored, its handlers back to the default (exec
    drops them), a handler installed by a C library while importing kept; then what
    Python does as it starts: SIGPIPE and SIGXFSZ ignored, SIGINT raises
    KeyboardInterrupt unless it is ignored."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            current = signal.getsignal(sig)
            if sig in ignored:
                signal.signal(sig, signal.SIG_IGN)
            elif current == signal.SIG_IGN or callable(current):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if signal.SIGINT not in ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _run_module() -> int:
    """Run the trainer's `__main__` as `-m` does; the exit code an interpreter gives."""
    try:
        runpy.run_module("trainer", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        status = done.code
        if status is None:
            return 0
        if isinstance(status, int):
            return status & 0xFF
        print(status, file=sys.stderr)
        return 1
    except BaseException:  # uncaught: its traceback, exit 1
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _unbuffered(fd: int, encoding: str, errors: str) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=True)
