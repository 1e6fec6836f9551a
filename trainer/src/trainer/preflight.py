"""`python -m trainer.preflight`: all-reduce bandwidth and transport check.

Run by the preflight job (base/training/preflight) after every sync of a cluster's
platform: it starts the same rendezvous as a training job, times all-reduces of a
large buffer, reports algorithm and bus bandwidth, and fails when NCCL uses another
transport than the cluster promises or the bandwidth is below a floor.

Each rank also lists the network interfaces and RDMA devices its pod sees, so one job
shows whether Multus attached the training network (net1) and whether the device
plugin exposed the HCA.

Bus bandwidth = algorithm bandwidth x 2(n-1)/n, the traffic a ring all-reduce puts on
each rank's link; it is comparable across job sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

from trainer.cli import env_choice, env_flag
from trainer.config import TRANSPORTS, TransportConfig
from trainer.errors import ConfigError, ExitCode, TrainerError, TransportError, report_error


def bus_bandwidth(algorithm_bandwidth: float, world_size: int) -> float:
    if world_size < 2:
        return 0.0
    return algorithm_bandwidth * 2 * (world_size - 1) / world_size


def _listing(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def build_parser() -> argparse.ArgumentParser:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="python -m trainer.preflight",
        description="Time all-reduces across the job and check the NCCL transport.",
    )
    parser.add_argument(
        "--size-mb", type=float, default=256.0, help="buffer size in MiB (default 256)"
    )
    parser.add_argument("--iterations", type=int, default=20, help="timed all-reduces")
    parser.add_argument("--warmup", type=int, default=5, help="untimed all-reduces first")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--min-busbw",
        type=float,
        default=0.0,
        metavar="GB/S",
        help="fail when bus bandwidth is below this (default: no floor)",
    )
    parser.add_argument(
        "--expect-transport",
        choices=TRANSPORTS,
        default=env_choice(env, "TRAINER_EXPECT_TRANSPORT", TRANSPORTS),
    )
    parser.add_argument(
        "--expect-gdr", action="store_true", default=env_flag(env, "TRAINER_EXPECT_GDR")
    )
    return parser


def measure(args: argparse.Namespace) -> dict:
    import torch
    import torch.distributed as dist

    from trainer import distributed, transport

    if args.size_mb <= 0 or args.iterations < 1 or args.warmup < 0:
        raise ConfigError("--size-mb must be > 0, --iterations >= 1 and --warmup >= 0")
    expectation = TransportConfig(args.expect_transport, args.expect_gdr)
    nccl_log = transport.prepare(os.environ) if expectation.expect else None
    topo = distributed.initialize(args.device, 600.0, None)
    if nccl_log is not None:
        transport.confirm(nccl_log, expectation, topo)
    elements = int(args.size_mb * (1 << 20)) // 4
    buffer = torch.ones(elements, dtype=torch.float32, device=topo.device)

    def sync():
        if topo.backend == "nccl":
            torch.cuda.synchronize(topo.device)

    for _ in range(args.warmup):
        dist.all_reduce(buffer)
    sync()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(args.iterations):
        dist.all_reduce(buffer)
    sync()
    seconds = (time.perf_counter() - started) / args.iterations
    slowest = torch.tensor([seconds], dtype=torch.float64, device=topo.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    seconds = slowest.item()
    algbw = elements * 4 / seconds / 1e9
    result = {
        "event": "preflight",
        "world_size": topo.world_size,
        "backend": topo.backend,
        "size_bytes": elements * 4,
        "iterations": args.iterations,
        "seconds_per_allreduce": seconds,
        "algbw_gbps": algbw,
        "busbw_gbps": bus_bandwidth(algbw, topo.world_size),
        "expected_transport": args.expect_transport,
        "rank": topo.rank,
    }
    local = {
        "rank": topo.rank,
        "host": socket.gethostname(),
        "interfaces": _listing("/sys/class/net"),
        "rdma_devices": _listing("/sys/class/infiniband"),
    }
    pods = [None] * topo.world_size
    dist.all_gather_object(pods, local)
    result["pods"] = pods
    distributed.shutdown()
    return result


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        result = measure(args)
    except TrainerError as error:
        report_error(error)
        return int(error.code)
    if result["rank"] == 0:
        print(json.dumps(result), flush=True)
    if args.min_busbw and result["world_size"] > 1 and result["busbw_gbps"] < args.min_busbw:
        if result["rank"] == 0:
            report_error(
                TransportError(
                    f"bus bandwidth {result['busbw_gbps']:.2f} GB/s is below --min-busbw "
                    f"{args.min_busbw:g} GB/s"
                )
            )
        return int(ExitCode.TRANSPORT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
