"""FSDP2, mixed precision and gradient accumulation in real runs: torchrun, gloo, CPU.

Every run trains the same tiny GPT on a global batch of 8 samples per optimizer step
in micro-batches of 2 (each rank accumulates 4 of them at 1 rank, 2 at 2 ranks, 1 at
4 ranks), so runs at different world sizes see the same samples in the same steps.

What holds bitwise and what to round-off (docs/trainer.md says the same):
- a resume at the world size the run had is bitwise at 2 ranks (sums of two
  commute); at 4 ranks the reduction may group the sums differently, and one at
  another world size accumulates micro-batches where the peers were: both agree with
  the uninterrupted run to round-off as `assert_params_close` (conftest) defines it;
- accumulation 4 x 1 agrees with the baseline's 2 x 2 to the same tolerance;
- bf16 tracks fp32 to BF16_LOSS_TOLERANCE of the loss.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import (
    RUN_LIMIT,
    assert_params_close,
    inspect,
    kill_tree,
    launch,
    launch_command,
    running,
    trainer_env,
    unused_port,
)
from trainer.checkpoint import load_offline

STEPS = 16
FSDP_ARGS = (
    "--model",
    "gpt",
    "--width",
    "32",
    "--depth",
    "2",
    "--seq-len",
    "16",
    "--batch-size",
    "2",
    "--global-batch",
    "8",
    "--max-steps",
    str(STEPS),
    "--checkpoint-interval",
    "5",
    "--log-interval",
    "4",
    "--seed",
    "5",
    "--parallelism",
    "fsdp",
)
BF16_LOSS_TOLERANCE = 0.02  # relative, per logged window


def final_params(directory: Path) -> dict[str, torch.Tensor]:
    return load_offline(directory / f"step-{STEPS}")["model"]


@pytest.fixture(scope="session")
def fsdp_baseline(tmp_path_factory):
    """An uninterrupted FSDP2 run at 2 ranks: what every interrupted one must match."""
    directory = tmp_path_factory.mktemp("fsdp-baseline") / "ckpt"
    run = launch(*FSDP_ARGS, "--checkpoint-dir", str(directory))
    assert run.code == 0, run.stderr
    start = run.events("start")[0]
    assert (start["parallelism"], start["mesh"], start["accumulation_steps"]) == ("fsdp", [2], 2)
    return run, final_params(directory)


def sigkill_at_step_12(directory: Path, nproc: int) -> int:
    """Kill rank 1 after step 12; the step a resume gets (10, or 5 if the save of 10 was
    in flight and could not finish without rank 1)."""
    killed = launch(
        *FSDP_ARGS,
        "--checkpoint-dir",
        str(directory),
        "--inject-fault",
        "sigkill@12:rank=1",
        nproc=nproc,
    )
    assert killed.code == 137, killed.stderr
    # Rank 0 cannot save its shards without rank 1: it says so, and what is left.
    assert "no collective save (peers are gone: " in killed.stderr
    # The log names what is on disk, whichever way the save of step 10 went.
    relied_on = inspect(directory, "--no-params")["step"]
    assert relied_on in (5, 10)
    assert f"relying on step-{relied_on}, the last periodic checkpoint, saved" in killed.stderr
    return relied_on


@pytest.fixture(scope="module")
def killed_at_two_ranks(tmp_path_factory) -> tuple[Path, int]:
    """A run of 2 ranks whose rank 1 was SIGKILLed in step 12: resumed at 2 and at 1."""
    directory = tmp_path_factory.mktemp("fsdp-killed") / "ckpt"
    return directory, sigkill_at_step_12(directory, nproc=2)


@pytest.mark.parametrize(
    ("killed_at", "resumed_at"), [(2, 2), (2, 1), (4, 4)], ids=["2-to-2", "2-to-1", "4-to-4"]
)
def test_fsdp_sigkill_then_resume_continues_as_uninterrupted(
    fsdp_baseline, request, tmp_path, killed_at, resumed_at
):
    baseline, expected = fsdp_baseline
    directory = tmp_path / "ckpt"
    if killed_at == 2:
        killed, relied_on = request.getfixturevalue("killed_at_two_ranks")
        shutil.copytree(killed, directory)
    else:
        relied_on = sigkill_at_step_12(directory, nproc=killed_at)

    resumed = launch(*FSDP_ARGS, "--checkpoint-dir", str(directory), nproc=resumed_at)
    assert resumed.code == 0, resumed.stderr
    start = resumed.events("start")[0]
    assert start["resumed_from"] == relied_on
    assert start["global_batch"] == 8 and start["accumulation_steps"] == 8 // (2 * resumed_at)
    assert resumed.end["consumed_samples"] == STEPS * 8
    if (killed_at, resumed_at) == (2, 2):
        assert resumed.end["params_sha256"] == baseline.end["params_sha256"]
    else:
        assert_params_close(final_params(directory), expected)


def test_fsdp_sigterm_saves_every_ranks_shards_and_resumes_identically(fsdp_baseline, tmp_path):
    baseline, _ = fsdp_baseline
    directory = tmp_path / "ckpt"
    # On rank 1 only, after step 13: the ranks agree at the end of step 14 to stop
    # there, and both write their shards of it.
    terminated = launch(
        *FSDP_ARGS, "--checkpoint-dir", str(directory), "--inject-fault", "sigterm@13:rank=1"
    )
    assert terminated.code == 143, terminated.stderr
    assert terminated.stderr.count("every rank saved its shards of step-14") == 2
    shards = sorted(p.name for p in (directory / "step-14").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]
    report = inspect(directory)
    assert report["step"] == 14 and report["consumed_samples"] == 14 * 8

    resumed = launch(*FSDP_ARGS, "--checkpoint-dir", str(directory))
    assert resumed.code == 0, resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == 14
    assert resumed.end["params_sha256"] == baseline.end["params_sha256"]


def test_fsdp_eviction_sigterm_to_the_launcher_saves_one_step_on_every_rank(tmp_path):
    """torchrun passes the SIGTERM to both ranks, each at its own point of a step."""
    directory = tmp_path / "ckpt"
    args = [*FSDP_ARGS, "--max-steps", "100000", "--checkpoint-interval", "1000"]
    command = launch_command(*args, "--log-interval", "1", "--checkpoint-dir", str(directory))
    stderr = tmp_path / "stderr"
    with running(command, stderr) as process:
        lines = 0
        while lines < 20:  # training is under way
            line = process.stdout.readline()
            assert line, stderr.read_text()
            lines += '"event": "step"' in line
        process.send_signal(signal.SIGTERM)
        process.communicate()
    log = stderr.read_text()
    assert process.returncode == 143, log
    report = inspect(directory, "--no-params")
    step = report["step"]
    assert step is not None and step >= 20
    assert log.count(f"every rank saved its shards of step-{step} ") == 2, log
    resumed = launch(*args, "--max-steps", str(step + 2), "--checkpoint-dir", str(directory))
    assert resumed.code == 0, resumed.stderr
    assert resumed.events("start")[0]["resumed_from"] == step


def test_hsdp_across_two_nodes_trains_as_fsdp_on_one(fsdp_baseline, tmp_path):
    """Two torchrun agents of two ranks each: a (2 nodes, 2 ranks) mesh, the same run."""
    _, expected = fsdp_baseline
    directory = tmp_path / "ckpt"
    port = unused_port()
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainer.launch",
                "--nnodes=2",
                f"--node-rank={node}",
                "--nproc-per-node=2",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                "--module",
                "trainer",
                *FSDP_ARGS,
                "--checkpoint-dir",
                str(directory),
            ],
            env=trainer_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for node in (0, 1)
    ]
    try:
        outputs = [node.communicate(timeout=RUN_LIMIT) for node in nodes]
    finally:
        for node in nodes:
            kill_tree(node)
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][1][-3000:]
    start = next(line for line in outputs[0][0].splitlines() if '"event": "start"' in line)
    assert '"mesh": [2, 2]' in start and '"world_size": 4' in start
    assert_params_close(final_params(directory), expected)


def test_fsdp_starts_from_the_seeds_parameters_and_trains_as_ddp(fsdp_baseline, tmp_path):
    """Meta-device init on ranks > 0 plus rank 0's broadcast gives DDP's parameters."""
    _, expected = fsdp_baseline
    directory = tmp_path / "ckpt"
    ddp = launch(*FSDP_ARGS, "--parallelism", "ddp", "--checkpoint-dir", str(directory))
    assert ddp.code == 0, ddp.stderr
    assert_params_close(final_params(directory), expected)


def test_activation_checkpointing_changes_memory_not_results(fsdp_baseline, tmp_path):
    baseline, _ = fsdp_baseline
    run = launch(*FSDP_ARGS, "--activation-checkpointing")
    assert run.code == 0, run.stderr
    assert run.events("start")[0]["activation_checkpointing"] is True
    assert run.end["params_sha256"] == baseline.end["params_sha256"]


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_gradient_accumulation_4x1_matches_2x2(fsdp_baseline, tmp_path, parallelism):
    """Micro-batches of 1 accumulated 4 times train as the baseline's micro-batches of 2
    accumulated twice. Runs at 4 ranks accumulate nothing (one micro-batch of 2 a rank)
    and match the baseline too: test_fsdp_sigkill_then_resume_continues_as_uninterrupted."""
    _, expected = fsdp_baseline
    directory = tmp_path / "ckpt"
    run = launch(
        *FSDP_ARGS,
        "--parallelism",
        parallelism,
        "--batch-size",
        "1",
        "--checkpoint-dir",
        str(directory),
    )
    assert run.code == 0, run.stderr
    assert run.events("start")[0]["accumulation_steps"] == 4
    assert_params_close(final_params(directory), expected)


def test_bf16_loss_tracks_fp32():
    """bf16 under FSDP2 (MixedPrecisionPolicy) and under DDP (autocast) against fp32."""
    # A vocabulary of 16 makes the progressions learnable within 24 steps.
    args = (*FSDP_ARGS, "--max-steps", "24", "--lr", "1e-2", "--vocab-size", "16")
    losses = {}
    for parallelism, precision in (("fsdp", "fp32"), ("fsdp", "bf16"), ("ddp", "bf16")):
        run = launch(*args, "--parallelism", parallelism, "--precision", precision)
        assert run.code == 0, run.stderr
        losses[parallelism, precision] = [step["loss"] for step in run.events("step")]
    fp32 = losses.pop(("fsdp", "fp32"))
    assert fp32[-1] < 0.85 * fp32[0]  # it learns, so there is a curve to track
    for bf16 in losses.values():
        assert bf16 != fp32  # computed in bf16 indeed
        for low, full in zip(bf16, fp32, strict=True):
            assert abs(low - full) <= BF16_LOSS_TOLERANCE * full, (losses, fp32)


def test_global_batch_that_does_not_divide_is_refused_in_one_line():
    run = launch(*FSDP_ARGS, "--global-batch", "10", "--max-steps", "1")
    assert run.code == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("trainer: error:")]
    assert errors == [
        "trainer: error: --global-batch 10 is not a multiple of --batch-size 2 x 2 ranks = 4: "
        "choose a batch size that divides global-batch / world size"
    ]
    assert "Traceback" not in run.stderr
