"""`trainer-acceptance`: the fabric acceptance test the preflight MPIJob runs (nccl-tests).

It runs on the MPIJob's launcher and reads the hostfile the operator wrote, then:

1. runs nccl-tests' `all_reduce_perf` across every node (one rank per GPU slot);
2. with `--pairwise`, runs it on every pair of nodes as well, in rounds of disjoint pairs
   that run at the same time (N-1 rounds for N nodes), so that a slow node (slow with
   every partner) can be told from a slow link (slow with one partner);
3. checks every run: it completed, returned no wrong values, and its bus bandwidth at
   the largest message reaches `--min-busbw` (the profile's `preflight.busbwFloor`).

Every run's output goes to stdout one after another, unchanged (and to `--output DIR`),
so `kubectl logs <launcher> | trainops doctor nccl-tests -` names the slow nodes and
links. `-x NAME` forwards a variable to the ranks as with mpirun (the cluster's MPIJob
patch inserts one per NCCL variable it sets); NCCL_* variables are forwarded anyway.

The exit code is 0 when every run passes and 4 (as the trainer's transport check)
when one does not.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import ExitCode

DEFAULT_TEST_ARGS = ("-b", "8", "-e", "8G", "-f", "2", "-g", "1")
ALWAYS_FORWARDED = ("PATH", "LD_LIBRARY_PATH")


@dataclass(frozen=True)
class Node:
    host: str
    slots: int


@dataclass
class Result:
    name: str
    nodes: list[str]
    output: str
    busbw: float | None = None  # at the largest message
    wrong: int = 0
    failed: str | None = None

    def problems(self, floor: float) -> list[str]:
        found = []
        if self.failed:
            found.append(self.failed)
        if self.wrong:
            found.append(f"{self.wrong} wrong values")
        if self.busbw is None and not self.failed:
            found.append("no result rows")
        if floor and self.busbw is not None and self.busbw < floor:
            found.append(f"bus bandwidth {self.busbw:g} GB/s is below the floor of {floor:g}")
        return found


def read_hostfile(text: str) -> list[Node]:
    """`host slots=N` lines, as the MPI Operator and the Training Operator write them."""
    nodes = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        slots = 1
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key in ("slots", "max_slots") and value.isdigit():
                slots = int(value)
        nodes.append(Node(words[0], slots))
    return nodes


def pair_rounds(count: int) -> list[list[tuple[int, int]]]:
    """Every pair of `count` nodes exactly once, in rounds where no node is in two pairs
    (the circle method: one node stays, the others rotate; an odd count adds a rest)."""
    ids: list[int | None] = list(range(count))
    if count % 2:
        ids.append(None)
    rounds = []
    for _ in range(len(ids) - 1):
        half = len(ids) // 2
        pairs = [(ids[i], ids[-1 - i]) for i in range(half)]
        rounds.append(sorted((min(a, b), max(a, b)) for a, b in pairs if None not in (a, b)))
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return rounds


def forwarded(names: list[str], env: dict[str, str]) -> list[str]:
    """Variables the ranks get: the named ones, NCCL_*, PATH and LD_LIBRARY_PATH."""
    wanted = [*ALWAYS_FORWARDED, *names, *sorted(k for k in env if k.startswith("NCCL_"))]
    return [name for name in dict.fromkeys(wanted) if name in env]


def mpirun_command(
    nodes: list[Node], variables: list[str], binary: str, test_args: list[str]
) -> list[str]:
    hosts = ",".join(f"{node.host}:{node.slots}" for node in nodes)
    command = ["mpirun", "--allow-run-as-root", "--bind-to", "none", "--map-by", "slot"]
    command += ["-np", str(sum(node.slots for node in nodes)), "--host", hosts]
    for name in variables:
        command += ["-x", name]
    return [*command, binary, *test_args]


def _row(line: str) -> tuple[int, float, int] | None:
    """(size, busbw, wrong) of a result row: size count type redop root, then time,
    algbw, busbw, #wrong out of place and the same in place."""
    words = line.split()
    if len(words) < 13 or not words[0].isdigit():
        return None
    try:
        busbw = max(float(words[-6]), float(words[-2]))
    except ValueError:
        return None
    wrong = sum(int(w) for w in (words[-5], words[-1]) if w.isdigit())
    return int(words[0]), busbw, wrong


def judge(result: Result, code: int) -> Result:
    largest = -1
    for line in result.output.splitlines():
        if (row := _row(line)) is not None:
            size, busbw, wrong = row
            result.wrong += wrong
            if size >= largest:
                largest, result.busbw = size, busbw
        elif "Test NCCL failure" in line or "Test CUDA failure" in line:
            result.failed = result.failed or line.strip()
    if code and not result.failed:
        result.failed = f"exited with {code}"
    return result


def run_all(
    runs: list[tuple[str, list[Node]]],
    variables: list[str],
    binary: str,
    test_args: list[str],
    output: Path,
    timeout: float,
) -> list[Result]:
    """Start every run at once (they use disjoint nodes) and collect their verdicts."""
    started = []
    for name, nodes in runs:
        log = output / f"{name}.log"
        with log.open("w") as handle:
            process = subprocess.Popen(
                mpirun_command(nodes, variables, binary, test_args),
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        started.append((name, nodes, log, process))
    results = []
    for name, nodes, log, process in started:
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = -9
        result = Result(name, [n.host for n in nodes], log.read_text(errors="replace"))
        judge(result, code)
        if code == -9:
            result.failed = f"did not finish within {timeout:g}s"
        results.append(result)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainer-acceptance",
        description="Fabric acceptance with nccl-tests: all_reduce_perf across the MPIJob's "
        "nodes, optionally every pair of them, against a bus bandwidth floor.",
        epilog="Arguments after -- go to all_reduce_perf (default: "
        + " ".join(DEFAULT_TEST_ARGS)
        + ").",
    )
    parser.add_argument(
        "-x",
        dest="forward",
        action="append",
        default=[],
        metavar="NAME",
        help="forward this variable to the ranks (as mpirun -x); repeatable",
    )
    parser.add_argument(
        "--hostfile",
        type=Path,
        default=Path("/etc/mpi/hostfile"),
        help="the operator's MPI hostfile (default /etc/mpi/hostfile)",
    )
    parser.add_argument(
        "--pairwise",
        action="store_true",
        help="also run every pair of nodes, to find a slow node or link",
    )
    parser.add_argument(
        "--min-busbw",
        type=float,
        default=0.0,
        metavar="GB/S",
        help="bus bandwidth every run must reach at its largest message (default 0: no floor)",
    )
    parser.add_argument(
        "--binary",
        default="all_reduce_perf",
        help="the nccl-tests binary (default all_reduce_perf)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("/tmp/nccl-acceptance"),
        help="directory for each run's log (default /tmp/nccl-acceptance)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=1200.0,
        metavar="SECONDS",
        help="a run still going after this fails (default 1200)",
    )
    return parser


def _say(message: str) -> None:
    print(f"# trainer-acceptance: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    test_args = list(DEFAULT_TEST_ARGS)
    if "--" in argv:
        at = argv.index("--")
        argv, test_args = argv[:at], argv[at + 1 :] or test_args
    args = build_parser().parse_args(argv)
    try:
        nodes = read_hostfile(args.hostfile.read_text())
    except OSError as error:
        print(f"trainer-acceptance: {args.hostfile}: {error.strerror}", file=sys.stderr)
        return int(ExitCode.CONFIG)
    needed = 3 if args.pairwise else 1
    if len(nodes) < needed:
        print(
            f"trainer-acceptance: {args.hostfile}: {len(nodes)} nodes; the test needs "
            f"at least {needed}",
            file=sys.stderr,
        )
        return int(ExitCode.CONFIG)
    args.output.mkdir(parents=True, exist_ok=True)
    variables = forwarded(args.forward, dict(os.environ))
    rounds = [[("all-nodes", nodes)]]
    if args.pairwise:
        for pairs in pair_rounds(len(nodes)):
            rounds.append(
                [(f"pair-{nodes[a].host}-{nodes[b].host}", [nodes[a], nodes[b]]) for a, b in pairs]
            )
    results = []
    for number, runs in enumerate(rounds):
        _say(f"round {number + 1}/{len(rounds)}: {', '.join(name for name, _ in runs)}")
        results += run_all(runs, variables, args.binary, test_args, args.output, args.run_timeout)
    failing = 0
    for result in results:
        sys.stdout.write(result.output if result.output.endswith("\n") else result.output + "\n")
        problems = result.problems(args.min_busbw)
        failing += bool(problems)
        verdict = "; ".join(problems) if problems else "pass"
        busbw = "-" if result.busbw is None else f"{result.busbw:g} GB/s"
        _say(f"{result.name} on {' '.join(result.nodes)}: {busbw}: {verdict}")
    _say(
        f"{len(results) - failing} of {len(results)} runs passed; "
        "`trainops doctor nccl-tests` on this log names slow nodes and links"
    )
    return int(ExitCode.TRANSPORT) if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
