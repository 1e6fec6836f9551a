"""`trainer-launch`: any training command, with an exit code the operator can act on.

    trainer-launch [TORCHRUN OPTIONS] SCRIPT [ARGS]          torchrun a Python script
    trainer-launch [TORCHRUN OPTIONS] --module MODULE [ARGS] torchrun a module (the trainer)
    trainer-launch [TORCHRUN OPTIONS] -- COMMAND [ARGS]      torchrun any command per worker
    trainer-launch -- torchrun|accelerate|deepspeed|mpirun ...
    trainer-launch --supervise -- COMMAND [ARGS]             a command that starts its workers

torchrun exits 1 whenever a worker fails, whatever the reason, so under the training
operator's `ExitCode` restart policy (1-127 permanent, 128-255 retried) a preempted or
faulted job would never restart and a bug would. `trainer-launch` runs torchrun in
process with torchrun's options (read from the operator's `PET_*` variables like
torchrun's own), passes every worker's stderr through while keeping its last lines
(`trainer.workerlogs`), and when workers fail gives each failed rank a cause from its
exit status and those lines (`trainer.failures`). The most specific cause decides the
exit code, whichever rank exited first. A command that is itself a launcher runs once
under `trainer.supervise` instead.

The pod's SIGTERM goes to the workers, and the launcher exits only once they have
finished (their emergency checkpoints written) or torchrun's shutdown timeout
(`--shutdown-timeout`, `TORCH_ELASTIC_SHUTDOWN_TIMEOUT`, default 30 s) has passed,
however many more signals arrive meanwhile: set the timeout below the pod's
`terminationGracePeriodSeconds`. When a watchdog fired, the hang report the workers
wrote (`trainer.hangreport`) is printed. Retryable failures are bounded per node by
`trainer.retries`.

The reference trainer's workers start warm (`trainer.warmstart`): forked from a
process that has imported torch and the trainer already, where that makes no
difference but the time.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import tempfile
import time
import traceback
from argparse import Namespace
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainer import hangreport, progress, warmstart
from trainer.errors import ExitCode
from trainer.failures import (
    BUILTIN_PATTERNS,
    HANG,
    TERMINATED,
    WAITED_IN_A_COLLECTIVE,
    Ending,
    Pattern,
    PatternError,
    classify_exception,
    classify_exit,
    decide,
    killed_by,
    oom_kills,
    run_patterns,
)
from trainer.retries import BudgetError, RetryBudget, budget_for
from trainer.supervise import FORWARDED, starts_its_own_workers, supervise

if TYPE_CHECKING:
    from trainer.workerlogs import LineTail

WAIT_FOR_ENV = "TRAINER_WAIT_FOR_FILE"  # written last by the run's data preparation
SHARED_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
LOGS_SPECS = "trainer-launch"  # the name of trainer.workerlogs.WorkerStderr for torchrun
_DEFAULT_SHUTDOWN_TIMEOUT = 30
_TAIL_WAIT = 10.0  # seconds for a dead worker's children to close the stderr it left them


class UsageError(ValueError):
    pass


@dataclass
class Plan:
    torchrun: Namespace | None  # torchrun's arguments; None: run `command` once, supervised
    command: list[str]


def plan(argv: Sequence[str]) -> Plan:
    """What to run: torchrun workers (a script, a module, a command), or one launcher."""
    from torch.distributed.run import parse_args

    argv = list(argv)
    if argv[:1] == ["--supervise"]:
        if argv[1:2] != ["--"] or len(argv) < 3:
            raise UsageError("--supervise takes `-- COMMAND [ARGS]` and nothing else")
        return Plan(None, argv[2:])
    if "--" in argv:
        split = argv.index("--")
        options, command = argv[:split], argv[split + 1 :]
        if not command:
            raise UsageError("nothing to run after `--`")
        if command[0].startswith("-"):
            raise UsageError(f"`--` must be followed by a command, not the option {command[0]}")
        if starts_its_own_workers(command):
            if options:
                raise UsageError(
                    f"{command[0]} starts its own workers: give it its options, not "
                    f"trainer-launch ({' '.join(options)})"
                )
            return Plan(None, command)
        args = parse_args([*options, "--no-python", *command])
    else:
        args = parse_args(argv)
    _check_log_options(args)
    return Plan(args, [args.training_script, *args.training_script_args])


def _check_log_options(args: Namespace) -> None:
    given = [
        flag
        for flag, value, default in (
            ("--log-dir", args.log_dir, None),
            ("--redirects", args.redirects, "0"),
            ("--tee", args.tee, "0"),
            ("--logs-specs", args.logs_specs, None),
            ("--duplicate-stdout-filters", args.duplicate_stdout_filters, []),
            ("--duplicate-stderr-filters", args.duplicate_stderr_filters, []),
        )
        if value != default
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)}: trainer-launch passes the workers' stderr through and "
            "reads it itself; leave torchrun's log options out"
        )


def _say(message: str) -> None:
    print(f"trainer-launch: {message}", file=sys.stderr, flush=True)


def _report_hangs(report_dir: Path) -> None:
    """Print the hang report of every attempt in which a watchdog fired."""
    for attempt in hangreport.collect(report_dir):
        for line in hangreport.render(attempt):
            _say(line)


# -- stopping ------------------------------------------------------------------------


def shutdown_timeout(given: str | int | None = None) -> int:
    """torchrun's time between SIGTERM and SIGKILL for its workers, as torchrun reads it
    (`given`: its --shutdown-timeout)."""
    if given is not None:
        return int(given)
    value = os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "")
    return int(value) if value.isdigit() else _DEFAULT_SHUTDOWN_TIMEOUT


class Stopping:
    """The pod's signals: noted, never fatal, but for the first one while torchrun runs.

    That one raises torchrun's SignalException, on which torchrun sends its workers
    SIGTERM and waits for them up to its shutdown timeout. Every later one is noted
    only: a storm of signals (the kubelet's, a wrapper's, a preStop hook's) raising
    again would cut torchrun short before it signalled the workers, or while it
    waited for their emergency checkpoints, or escape as a traceback while the
    launcher read how they ended.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._raises: type[Exception] | None = None

    def install(self) -> None:
        for sig in FORWARDED:
            signal.signal(sig, self._note)

    @contextlib.contextmanager
    def raising_first(self) -> Iterator[None]:
        """While torchrun runs; torchrun's own handler is this one meanwhile."""
        from torch.distributed.elastic.multiprocessing import api

        self._raises = api.SignalException
        torchrun_handler = api._terminate_process_handler
        # torchrun installs its handler by this name once its workers start.
        api._terminate_process_handler = self._note
        self.install()
        try:
            yield
        finally:
            self._raises = None
            api._terminate_process_handler = torchrun_handler

    def _note(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if len(self.received) == 1 and self._raises is not None:
            raise self._raises(f"trainer-launch got signal {signum}", sigval=signal.Signals(signum))
        if len(self.received) == 2:
            # os.write: a handler may run while the main code is inside a print.
            os.write(2, f"trainer-launch: signal {signum} again: noted only\n".encode())


class _Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped(signum)


def wait_for_file(path: Path, interval: float = 2.0) -> int | None:
    """Until the run's data preparation has written `path`; an exit code if stopped first.

    The launcher is the pod's PID 1, which the kernel gives no default action for
    SIGTERM: without a handler of its own the pod would ignore its eviction.
    """
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in FORWARDED}
    try:
        next_announcement = time.monotonic()  # at once, then every 5 minutes
        while not path.exists():
            if time.monotonic() >= next_announcement:
                _say(f"waiting for {path} (written when the run's data preparation is done)")
                next_announcement = time.monotonic() + 300
            time.sleep(interval)
    except _Stopped as stopped:
        _say(f"stopped by signal {stopped.signum} while waiting for {path}")
        return 128 + stopped.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return None


def _live_children() -> list[int]:
    """This process's children that have not exited (Linux; elsewhere none are known)."""
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            stat = Path("/proc", name, "stat").read_text()
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if int(parent) == me and state != "Z":
            found.append(int(name))
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def wait_for_workers(deadline: float) -> bool:
    """Let workers still running (an emergency checkpoint being written) finish.

    torchrun may return with workers still running (its agent failed while they ran);
    the launcher leaving then would end the pod, and the checkpoint with it. Past
    `deadline` (monotonic) whatever is left is killed. True when none was left.
    """
    children = _live_children()
    if not children:
        _reap()
        return True
    _say(
        f"{len(children)} worker(s) still finishing: waiting up to "
        f"{max(0, round(deadline - time.monotonic()))}s"
    )
    while children and time.monotonic() < deadline:
        _reap()
        time.sleep(0.1)
        children = _live_children()
    if children:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                os.kill(pid, signal.SIGKILL)
        _say(f"killed {len(children)} worker(s) still running at the shutdown timeout")
        # A process stuck in the kernel (a wedged GPU) may never die: do not wait forever.
        reaped_by = time.monotonic() + 5
        while _live_children() and time.monotonic() < reaped_by:
            time.sleep(0.05)
    _reap()
    return False


# -- torchrun workers -----------------------------------------------------------------


def run_workers(
    args: Namespace,
    patterns: Sequence[Pattern],
    stopping: Stopping,
    hang_timeout: float | None = None,
) -> Ending | None:
    """torchrun in process; how the workers ended (None: they all succeeded).

    `stopping` holds the signals that came while torch was imported: one of them
    stops the launch before torchrun starts a worker. With `hang_timeout` the workers'
    progress beats are watched (`trainer.progress`).
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException

    # By default torchrun's rendezvous shares one TCP store with the workers' process
    # groups for every round: after a restart (--max-restarts, an elastic job's
    # maxRestarts) a worker can read the address its predecessor published and fail to
    # connect, or wait forever (pytorch/pytorch#135712, #167288). A store per round
    # does not; set it to 0 to share anyway.
    os.environ.setdefault(SHARED_STORE_ENV, "1")
    # Forked now, while this process has one thread: torchrun starts threads of its own.
    zygote = warmstart.Zygote.fork() if _runs_the_trainer(args) else None

    with tempfile.TemporaryDirectory(prefix="trainer-launch-") as scratch:
        report_dir = Path(scratch, "hang")
        # The workers inherit the launcher's environment.
        os.environ[hangreport.ENV] = str(report_dir)
        args.logs_specs = LOGS_SPECS
        args.log_dir = str(Path(scratch, "logs"))
        oom_before = oom_kills()
        grace = shutdown_timeout(args.shutdown_timeout)
        try:
            # Also before torchrun installs its handler (in rendezvous): the launcher,
            # the pod's PID 1, would otherwise ignore SIGTERM.
            with stopping.raising_first(), _watching(scratch, hang_timeout, grace) as watch:
                ending, failures = _torchrun(args, zygote, stopping, patterns)
        except SignalException as error:
            # The first signal, while the launcher read how the workers ended.
            ending, failures = _terminated(int(error.sigval)), None
        finally:
            wait_for_workers(time.monotonic() + grace)
        # torchrun's process context keeps the write end of a worker's stderr open
        # until the context is freed (it closes only the streams of workers it had to
        # stop): while an exception's traceback held the context, the stream of the
        # first worker to fail never ended. Collected in case of a cycle.
        gc.collect()
        tails = _drain_worker_stderr()
        if failures is not None:
            ending = _failed_workers(failures, tails, oom_before, patterns)
        _report_hangs(report_dir)
    return _hung(ending, watch, hang_timeout)


@contextlib.contextmanager
def _watching(
    scratch: str, timeout: float | None, grace: float
) -> Iterator[progress.ProgressWatch | None]:
    """The progress watch over the workers while they run; None without a timeout."""
    if timeout is None:
        yield None
        return
    directory = Path(scratch, "progress")
    os.environ[progress.DIR_ENV] = str(directory)  # the workers inherit it
    with progress.ProgressWatch(directory, timeout, grace, _say) as watch:
        yield watch


def _hung(
    ending: Ending | None, watch: progress.ProgressWatch | None, timeout: float | None
) -> Ending | None:
    """A failure that followed a hang the watch stopped is that hang: what the stopped
    ranks and their peers said as they went down is its consequence."""
    stall = watch.last_stall() if watch is not None and ending is not None else None
    if stall is None or timeout is None:
        return ending
    rank = stall.culprits[0] if stall.culprits else None
    return Ending(rank, HANG, stall.evidence(timeout))


def _torchrun(
    args: Namespace,
    zygote: warmstart.Zygote | None,
    stopping: Stopping,
    patterns: Sequence[Pattern],
) -> tuple[Ending | None, dict | None]:
    """torchrun's run: how it ended, or the failed workers' records to classify."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import run

    try:
        with warmstart.warm_workers(zygote):
            if stopping.received:
                signum = stopping.received[0]
                raise SignalException(
                    f"signal {signum} before the workers started", sigval=signal.Signals(signum)
                )
            run(args)
        return None, None
    except ChildFailedError as error:
        return None, error.failures
    except SignalException as error:
        return _terminated(int(error.sigval)), None
    except Exception as error:
        # The agent itself failed: its rendezvous or c10d store (a lost master), or a
        # bad option.
        cause, evidence = classify_exception(error, patterns)
        if not cause.retryable:
            traceback.print_exc()
        return Ending(None, cause, f"torchrun: {evidence}"), None


def _terminated(signum: int) -> Ending:
    return Ending(None, killed_by(signum), f"the launcher received signal {signum}")


def _runs_the_trainer(args: Namespace) -> bool:
    """Whether torchrun runs `python -u -m trainer` of this interpreter (warm-startable)."""
    return (
        bool(args.module)
        and not args.no_python
        and not getattr(args, "run_path", False)
        and args.training_script == "trainer"
        and os.environ.get("PYTHON_EXEC", sys.executable) == sys.executable
    )


def _drain_worker_stderr() -> dict[int, LineTail]:
    """Until every worker's stderr has ended, bounded: on every way out (success, a
    failure, a signal to the launcher), a worker's last lines are passed on before the
    launcher says anything more or exits; the tails by local rank."""
    from trainer.workerlogs import WorkerStderr

    logs = WorkerStderr.active
    tails = logs.tails if logs is not None else {}
    deadline = time.monotonic() + _TAIL_WAIT
    for local_rank, tail in sorted(tails.items()):
        tail.wait(deadline)
        if not tail.ended():
            _say(
                f"  local rank {local_rank}: its stderr is still open {_TAIL_WAIT:.0f}s after "
                "the workers ended (a process it started holds it): its last lines may be missing"
            )
    return tails


def _failed_workers(
    failures, tails: dict[int, LineTail], oom_before: int | None, patterns: Sequence[Pattern]
) -> Ending:
    oom_after = oom_kills()
    oom = oom_before is not None and oom_after is not None and oom_after > oom_before
    endings = []
    for rank, failure in sorted(failures.items()):
        tail = tails.get(failure.local_rank)
        lines = tail.lines() if tail is not None else []
        endings.append(classify_exit(rank, failure.exitcode, lines, oom, patterns))
    for ending in endings:
        _say(f"  {ending.describe()}")
    return _not_the_waiting_rank(decide(endings), endings)


def _not_the_waiting_rank(decided: Ending, endings: Sequence[Ending]) -> Ending:
    """A hang seen as a process group's timeout is not the waiting rank's own: the
    verdict names no rank, says which ranks timed out waiting and which did not."""
    if decided.cause is not HANG or not any(w in decided.evidence for w in WAITED_IN_A_COLLECTIVE):
        return decided
    waited = [e.rank for e in endings if e.cause is HANG]
    others = [e.rank for e in endings if e.cause is not HANG]
    did_not = f"; {_ranks(others)} did not" if others else ""
    return Ending(
        None,
        HANG,
        f"{_ranks(waited)} timed out waiting in a collective{did_not}: the rank waited for is "
        f"stuck (its own code, or on another node); {decided.evidence}",
    )


def _ranks(ranks: Sequence[int | None]) -> str:
    numbers = ", ".join(str(rank) for rank in ranks)
    return f"rank {numbers}" if len(ranks) == 1 else f"ranks {numbers}"


# -- the exit code --------------------------------------------------------------------


def exit_code(ending: Ending | None, budget: RetryBudget | None) -> int:
    """The launcher's exit code for how the workers ended, within the retry budget."""
    if ending is None:
        if budget is not None:
            _record(budget.succeeded)
        return 0
    cause = ending.cause
    code = cause.code
    who = f"rank {ending.rank}: " if ending.rank is not None else ""
    _say(f"{who}{cause.id} ({ending.evidence}); exiting {code} ({cause.describe()})")
    if budget is None or not cause.retryable or cause is TERMINATED:
        return code
    verdict = _record(lambda: budget.count_failure(code, cause.id))
    if verdict is not None and verdict.exhausted:
        final = int(ExitCode.RETRIES_EXHAUSTED)
        _say(
            f"that is retryable failure {verdict.failures} in a row without a new checkpoint "
            f"in {budget.checkpoint_dir} (budget {budget.budget}, TRAINER_RETRY_BUDGET): "
            f"exiting {final} (not retried)"
        )
        return final
    return code


def _record(action):
    try:
        return action()
    except OSError as error:
        _say(f"warning: the retry record in the checkpoint directory: {error}")
        return None


def one_thread_per_worker(argv: Sequence[str], environ: dict) -> None:
    """Set OMP_NUM_THREADS=1 where torchrun would set it for the workers anyway.

    torchrun does so when it starts more than one worker per node and the variable is
    unset, but only after torch is imported; set before, it also keeps this process to
    one thread (OpenMP and BLAS start no pools), which warm starts need. Only a count
    given as a number is read here (`--nproc-per-node N`, PET_NPROC_PER_NODE).
    """
    if "OMP_NUM_THREADS" in environ:
        return
    given = environ.get("PET_NPROC_PER_NODE")
    for index, token in enumerate(argv):
        if token == "--":
            break
        name, equals, value = token.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            given = value if equals else (argv[index + 1] if index + 1 < len(argv) else None)
    if given is not None and given.isdigit() and int(given) > 1:
        environ["OMP_NUM_THREADS"] = "1"


def main(argv: list[str] | None = None) -> int:
    """The launcher's exit code; from here on the pod's signals are ignored.

    Once the code is decided only Python's finalisation is left, and it gives every
    signal with a Python handler its default action back: a late SIGTERM of a storm
    (the kubelet, then a wrapper, then a preStop hook) would end the launcher by
    signal instead of with its code. Ignored signals stay ignored.
    """
    code = _launch(sys.argv[1:] if argv is None else argv)
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN)
    return code


def _launch(argv: list[str]) -> int:
    one_thread_per_worker(argv, os.environ)
    # From the start: the pod's signals are noted, never fatal, until torchrun's own
    # handling takes over (the launcher is the pod's PID 1, or a wrapper's child).
    stopping = Stopping()
    stopping.install()
    try:
        patterns = [*run_patterns(os.environ), *BUILTIN_PATTERNS]
        budget = budget_for(os.environ)
        hang_timeout = progress.hang_timeout(os.environ)
        what = plan(argv)
    except (PatternError, BudgetError, UsageError, progress.ProgressError) as error:
        _say(f"error: {error}")
        return int(ExitCode.CONFIG)
    ready = os.environ.get(WAIT_FOR_ENV)
    if ready and not stopping.received:
        stopped = wait_for_file(Path(ready))
        if stopped is not None:
            return stopped
    if what.torchrun is not None:
        ending = run_workers(what.torchrun, patterns, stopping, hang_timeout)
    elif stopping.received:
        signum = stopping.received[0]
        _say(f"stopped by signal {signum} before {what.command[0]} started")
        return 128 + signum
    else:
        try:
            with tempfile.TemporaryDirectory(prefix="trainer-launch-") as scratch:
                with _watching(scratch, hang_timeout, shutdown_timeout()) as watch:
                    ending = supervise(what.command, patterns).ending
                ending = _hung(ending, watch, hang_timeout)
        except OSError as error:
            _say(f"error: cannot start {what.command[0]}: {error.strerror}")
            return int(ExitCode.CONFIG)
    return exit_code(ending, budget)


if __name__ == "__main__":
    raise SystemExit(main())
