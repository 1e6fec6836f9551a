"""The trainer against a bare DDP loop, async against sync checkpoints, the memory
of a rank under DDP and FSDP2, and the step-time cost of activation checkpointing.

The measurements run CPU ranks with gloo under torchrun (two unless said), alternating
the sides round by round so that machine noise hits both; medians are compared.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import REPO


def _torchrun(*args: str, nproc: int = 2) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        *args,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode:
        raise SystemExit(f"benchmark run failed:\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _trainer(width: int, steps: int, log_interval: int, *extra: str) -> list[dict]:
    return _torchrun(
        "--module",
        "trainer",
        "--model",
        "mlp",
        "--width",
        str(width),
        "--max-steps",
        str(steps),
        "--log-interval",
        str(log_interval),
        *extra,
    )


def trainer_step_seconds(steps: int, warmup: int, width: int, checkpoints: bool) -> float:
    with tempfile.TemporaryDirectory() as directory:
        extra = ("--checkpoint-dir", directory, "--checkpoint-interval", "100")
        records = _trainer(width, steps, warmup, *(extra if checkpoints else ()))
    windows = [r for r in records if r["event"] == "step"][1:]  # first window is warm-up
    return sum(r["step_seconds"] for r in windows) / len(windows)


def bare_step_seconds(steps: int, warmup: int, width: int) -> float:
    (record,) = _torchrun(
        str(Path(__file__).with_name("bare_ddp.py")),
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--width",
        str(width),
    )
    return record["step_seconds"]


def checkpoint_blocking(mode: str, width: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        records = _trainer(
            width,
            60,
            60,
            "--checkpoint-dir",
            directory,
            "--checkpoint-interval",
            "10",
            "--checkpoint-mode",
            mode,
        )
    saves = [r["blocking_seconds"] for r in records if r["event"] == "checkpoint"]
    return statistics.median(saves)


# A GPT large enough that its state dominates a rank's memory next to torch itself
# (about 25M parameters: ~400 MB of fp32 parameters, gradients and AdamW state).
GPT_ARGS = (
    "--module",
    "trainer",
    "--model",
    "gpt",
    "--width",
    "512",
    "--depth",
    "8",
    "--seq-len",
    "64",
    "--batch-size",
    "4",
    "--max-steps",
    "20",
    "--log-interval",
    "5",
)


def _gpt(nproc: int, *extra: str) -> tuple[dict, float]:
    """The end record and the mean step time after the first (warm-up) window."""
    records = _torchrun(*GPT_ARGS, *extra, nproc=nproc)
    windows = [r for r in records if r["event"] == "step"][1:]
    (end,) = [r for r in records if r["event"] == "end"]
    return end, sum(r["step_seconds"] for r in windows) / len(windows)


def memory_per_rank() -> dict:
    """State bytes (parameters, gradients, AdamW) and peak RSS per rank.

    The state is what a GPU would hold for good; on CPUs the peak RSS also holds torch
    itself (~400 MiB) and what the CPU allocator keeps of freed buffers (FSDP2 gathers
    and frees each block's parameters and gradients every step), so it need not follow
    the state: on a GPU the allocator's peak (`torch.cuda.max_memory_allocated`, which
    the trainer reports there) is the figure to compare.
    """
    sides = {
        "ddp_2_ranks": (2, "ddp"),
        "fsdp_1_rank": (1, "fsdp"),
        "fsdp_2_ranks": (2, "fsdp"),
        "fsdp_4_ranks": (4, "fsdp"),
    }
    found = {}
    for name, (nproc, parallelism) in sides.items():
        end, _ = _gpt(nproc, "--parallelism", parallelism)
        # Under FSDP2 rank 0 also builds the whole model on its CPU, once, to broadcast
        # its shards; the other ranks build it on the meta device.
        found[name] = {
            "state_bytes": max(end["state_bytes_per_rank"]),
            "peak_rss_bytes": max(end["peak_memory_bytes_per_rank"]),
            "peak_rss_bytes_smallest_rank": min(end["peak_memory_bytes_per_rank"]),
        }
    ddp = found["ddp_2_ranks"]
    print("memory of one rank (gpt width 512, depth 8; peak RSS includes torch itself):")
    for name, values in found.items():
        state, smallest = values["state_bytes"], values["peak_rss_bytes_smallest_rank"]
        print(
            f"  {name:<13} state {state / 2**20:7.1f} MiB "
            f"({state / ddp['state_bytes']:.2f}x DDP), peak RSS "
            f"{values['peak_rss_bytes'] / 2**20:6.1f} MiB, smallest rank "
            f"{smallest / 2**20:6.1f} MiB "
            f"({smallest / ddp['peak_rss_bytes_smallest_rank']:.2f}x DDP)"
        )
    return found


def activation_checkpointing_cost(rounds: int) -> dict:
    """FSDP2 at 2 ranks with and without per-block activation checkpointing."""
    plain, recomputed, plain_rss, recomputed_rss = [], [], [], []
    for _ in range(rounds):
        end, seconds = _gpt(2, "--parallelism", "fsdp")
        plain.append(seconds)
        plain_rss.append(max(end["peak_memory_bytes_per_rank"]))
        end, seconds = _gpt(2, "--parallelism", "fsdp", "--activation-checkpointing")
        recomputed.append(seconds)
        recomputed_rss.append(max(end["peak_memory_bytes_per_rank"]))
    time_ratio = statistics.median(recomputed) / statistics.median(plain)
    rss_ratio = statistics.median(recomputed_rss) / statistics.median(plain_rss)
    print(
        f"activation checkpointing (fsdp, 2 ranks): step time {time_ratio:.3f}x "
        f"({statistics.median(recomputed) * 1e3:.1f} ms vs "
        f"{statistics.median(plain) * 1e3:.1f} ms), peak RSS {rss_ratio:.3f}x"
    )
    return {
        "step_seconds": statistics.median(plain),
        "step_seconds_with_activation_checkpointing": statistics.median(recomputed),
        "step_time_ratio": time_ratio,
        "peak_rss_ratio": rss_ratio,
    }


def run(rounds: int = 3) -> dict:
    steps, warmup, width = 400, 50, 1024
    trainer, bare, with_ckpt = [], [], []
    for _ in range(rounds):
        bare.append(bare_step_seconds(steps, warmup, width))
        trainer.append(trainer_step_seconds(steps, warmup, width, checkpoints=False))
        with_ckpt.append(trainer_step_seconds(steps, warmup, width, checkpoints=True))
    step_ratio = statistics.median(trainer) / statistics.median(bare)
    ckpt_ratio = statistics.median(with_ckpt) / statistics.median(bare)
    print(
        f"trainer step time: {statistics.median(trainer) * 1e3:.2f} ms vs bare DDP loop "
        f"{statistics.median(bare) * 1e3:.2f} ms: {step_ratio:.3f}x "
        f"(target <= 1.05; mlp width {width}, 2 ranks, gloo)"
    )
    print(
        f"  with async checkpoints every 100 steps: {ckpt_ratio:.3f}x (the background "
        "writer shares this machine's cores with the ranks)"
    )

    ckpt_width = 2048
    sync, asynchronous = [], []
    for _ in range(rounds):
        sync.append(checkpoint_blocking("sync", ckpt_width))
        asynchronous.append(checkpoint_blocking("async", ckpt_width))
    block_ratio = statistics.median(asynchronous) / statistics.median(sync)
    print(
        f"checkpoint blocking: async {statistics.median(asynchronous) * 1e3:.1f} ms vs sync "
        f"{statistics.median(sync) * 1e3:.1f} ms: {block_ratio:.1%} (target < 25%)"
    )
    return {
        "trainer": {
            "step_seconds": statistics.median(trainer),
            "bare_ddp_step_seconds": statistics.median(bare),
            "step_time_ratio": step_ratio,
            "step_seconds_with_checkpoints": statistics.median(with_ckpt),
            "step_time_ratio_with_checkpoints": ckpt_ratio,
            "async_blocking_seconds": statistics.median(asynchronous),
            "sync_blocking_seconds": statistics.median(sync),
            "async_over_sync_blocking": block_ratio,
            "memory_per_rank": memory_per_rank(),
            "activation_checkpointing": activation_checkpointing_cost(rounds),
        }
    }
