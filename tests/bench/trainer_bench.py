"""The trainer against a bare DDP loop, and async against sync checkpoints.

Both measurements run two CPU ranks with gloo under torchrun, alternating the two
sides round by round so that machine noise hits both; medians are compared.
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


def _torchrun(*args: str) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
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
        }
    }
