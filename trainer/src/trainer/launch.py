"""`trainer-launch`: torchrun whose exit code is the failed worker's.

torchrun itself exits 1 whenever a worker fails, whatever the reason, and 1 whenever
it is told to stop. The training operator's `ExitCode` restart policy then sees a
permanent failure every time, and a preempted job is never restarted. This wrapper
takes exactly torchrun's arguments, runs torchrun in-process, and exits with the exit
code of the worker that failed first (128 + N for a worker killed by signal N, and
128 + N when the agent itself got signal N), so retryable failures stay retryable.
A worker that only lost a peer (201) is not the cause when another worker failed too.

When a watchdog fired, the launcher prints the hang report its workers wrote
(`trainer.hangreport`) once they have all exited, and exits 200.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from trainer import hangreport
from trainer.errors import EXIT_CODE_DOCS, ExitCode

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure


def exit_code_for(worker_exit: int) -> int:
    """A worker's exit status as a shell would report it."""
    if worker_exit < 0:
        return min(255, 128 - worker_exit)
    return min(255, worker_exit)


def _meaning(code: int) -> str:
    try:
        return EXIT_CODE_DOCS[ExitCode(code)]
    except ValueError:
        if code > 128:
            return f"killed by signal {code - 128}: retried"
        return "failed: not retried"


def root_failure(failures: dict[int, ProcessFailure]) -> tuple[int, ProcessFailure]:
    """The rank whose failure caused the others, and its failure.

    The earliest failure, not counting ranks that exited 201 because a peer went away
    while another failure is known: they often exit before the launcher notices the
    peer, within the same second (torchrun's failure timestamps have whole seconds).
    """
    causes = {
        rank: failure
        for rank, failure in failures.items()
        if failure.exitcode != ExitCode.PEER_LOST
    }
    candidates = causes or failures
    # Ties keep torchrun's order, which is the order it saw the failures in.
    rank = min(candidates, key=lambda candidate: candidates[candidate].timestamp)
    return rank, candidates[rank]


def _say(message: str) -> None:
    print(f"trainer-launch: {message}", file=sys.stderr, flush=True)


def _report_hangs(report_dir: Path) -> bool:
    """Print the hang report of every attempt in which a watchdog fired."""
    attempts = hangreport.collect(report_dir)
    for attempt in attempts:
        for line in hangreport.render(attempt):
            _say(line)
    return bool(attempts)


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="trainer-hang-") as report_dir:
        # The workers inherit the launcher's environment.
        os.environ[hangreport.ENV] = report_dir
        try:
            run(args)
        except ChildFailedError as error:
            # run() returns once every worker has exited: their reports are complete.
            if _report_hangs(Path(report_dir)):
                code = ExitCode.HANG
                _say(f"a watchdog fired (hang report above); exiting {code} ({_meaning(code)})")
                return int(code)
            rank, failure = root_failure(error.failures)
            code = exit_code_for(failure.exitcode)
            _say(
                f"rank {rank} failed first with exit code {failure.exitcode}; "
                f"exiting {code} ({_meaning(code)})"
            )
            return code
        except SignalException as error:
            _report_hangs(Path(report_dir))
            code = exit_code_for(-int(error.sigval))
            _say(f"stopped by signal {int(error.sigval)}; exiting {code}")
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
