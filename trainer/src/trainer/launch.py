"""`trainer-launch`: torchrun whose exit code is the failed worker's.

torchrun itself exits 1 whenever a worker fails, whatever the reason, and 1 whenever
it is told to stop. The training operator's `ExitCode` restart policy then sees a
permanent failure every time, and a preempted job is never restarted. This wrapper
takes exactly torchrun's arguments, runs torchrun in-process, and exits with the exit
code of the worker that failed first (128 + N for a worker killed by signal N, and
128 + N when the agent itself got signal N), so retryable failures stay retryable.
"""

from __future__ import annotations

import sys

from trainer.errors import EXIT_CODE_DOCS, ExitCode


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


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        code = exit_code_for(failure.exitcode)
        print(
            f"trainer-launch: rank {rank} failed first with exit code {failure.exitcode}; "
            f"exiting {code} ({_meaning(code)})",
            file=sys.stderr,
            flush=True,
        )
        return code
    except SignalException as error:
        code = exit_code_for(-int(error.sigval))
        print(
            f"trainer-launch: stopped by signal {int(error.sigval)}; exiting {code}",
            file=sys.stderr,
            flush=True,
        )
        return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
