"""The torchtitan template's container command line, as a run renders it, run here
under trainer-launch with torchrun's settings from PET_* (two CPU ranks, gloo).

torchtitan 0.3.0 (the pinned release) cannot run on a CPU: its trainer selects
`torch.cuda` whenever no accelerator is found and calls `torch.cuda.set_device`, and its
package imports triton. So `python -m torchtitan.train` here is a stand-in package,
written below, that reads the options the template passes as torchtitan 0.3.0 reads
them (`--module`/`--config` required, dotted `--section.key` options, the last value of
a flag wins, `--checkpoint.folder` absolute or relative to `--dump_folder`, checkpoints
as DCP directories `step-N` resumed from the newest with a `.metadata`, TensorBoard
under `<dump_folder>/tb`) and trains a small DDP model. What is under test is the
platform's half: the command line, trainer-launch's exit codes and retry budget, and
where the checkpoints land.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.trainer.test_user_code import containers, pod_env, run_pod_command, trainops
from tests.workspace import make_workspace

STANDIN = '''\
"""Stand-in for torchtitan.train (see the test module's docstring)."""
import json
import os
import re
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.nn.parallel import DistributedDataParallel

FLAGS = {"--checkpoint.enable", "--metrics.enable_tensorboard"}


def parse(argv):
    options, index = {}, 0
    while index < len(argv):
        name = argv[index]
        if not name.startswith("--"):
            sys.exit(f"unexpected argument {name!r}")
        if "=" in name:
            name, value = name.split("=", 1)
        elif name in FLAGS:
            value = "true"
        else:
            index += 1
            value = argv[index]
        options[name[2:].replace("-", "_")] = value  # the last value of a flag wins
        index += 1
    return options


def newest_step(folder):
    steps = [
        int(m.group(1))
        for p in folder.glob("step-*")
        if (m := re.fullmatch(r"step-(\\d+)", p.name)) and (p / ".metadata").exists()
    ]
    return max(steps, default=0)


def main():
    options = parse(sys.argv[1:])
    if "module" not in options or "config" not in options:
        raise ValueError("--module is required. Example: --module llama3 --config ...")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dump = Path(options.get("dump_folder", "./outputs"))
    folder = dump / options.get("checkpoint.folder", "checkpoint")  # an absolute one wins
    steps = int(options.get("training.steps", "10"))
    interval = int(options.get("checkpoint.interval", "500"))
    if rank == 0:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"argv-{time.time_ns()}.json").write_text(json.dumps(sys.argv[1:]))
        if options.get("metrics.enable_tensorboard") == "true":
            (dump / "tb").mkdir(exist_ok=True)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
    start = newest_step(folder) if options.get("checkpoint.enable") == "true" else 0
    if start:
        dcp.load(state, checkpoint_id=str(folder / f"step-{start}"))
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        print(f"[titan] rank {rank}: loaded checkpoint step-{start}", flush=True)
    fault_step = int(os.environ.get("FAULT_STEP", "0"))
    for step in range(start + 1, steps + 1):
        generator = torch.Generator().manual_seed(step * 100 + rank)
        loss = model(torch.randn(16, 8, generator=generator)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == fault_step and str(rank) == os.environ.get("FAULT_RANK"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if options.get("checkpoint.enable") == "true" and (step % interval == 0 or step == steps):
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
            dcp.save(state, checkpoint_id=str(folder / f"step-{step}"))
        print(f"[titan] rank {rank}: step {step} loss {loss.item():.5f}", flush=True)
    dist.barrier()
    # Leave without tearing gloo down: after DCP's collectives its destructor can wait
    # forever for a peer that has already exited (seen here about one run in four).
    sys.stdout.flush()
    os._exit(0)


main()
'''

TITAN_ARGS = ["--module", "llama3", "--config", "llama3_debugmodel", "--training.steps", "6"]
VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def kubelet_expand(words: list[str], env: dict[str, str]) -> list[str]:
    """$(VAR) in a container's command and args, as the kubelet expands them."""
    return [VARIABLE.sub(lambda m: env.get(m.group(1), m.group(0)), word) for word in words]


@pytest.fixture(scope="module")
def titan_run(tmp_path_factory) -> tuple[list[str], Path]:
    """The pod's command line from a torchtitan run made and rendered as the docs show."""
    repo = make_workspace(tmp_path_factory.mktemp("repo"))
    made = trainops(
        "new-run",
        "prod-roce",
        "titan-1",
        "--template",
        "torchtitan",
        "--nodes",
        "2",
        "--",
        *TITAN_ARGS,
        "--checkpoint.interval",
        "2",
        cwd=repo,
    )
    assert made.returncode == 0, made.stderr
    rendered = trainops("render", "--format", "json", "overlays/prod-roce/runs/titan-1", cwd=repo)
    assert rendered.returncode == 0, rendered.stderr
    pods = containers(json.loads(rendered.stdout), "PyTorchJob")
    assert pods[0]["command"] == pods[1]["command"] and pods[0]["args"] == pods[1]["args"]
    workdir = tmp_path_factory.mktemp("image")
    (workdir / "torchtitan").mkdir()
    (workdir / "torchtitan" / "__init__.py").write_text("")
    (workdir / "torchtitan" / "train.py").write_text(STANDIN)
    return [*pods[0]["command"], *pods[0]["args"]], workdir


def run_titan(command: list[str], workdir: Path, env: dict) -> subprocess.CompletedProcess:
    return run_pod_command(kubelet_expand(command, env), workdir, env)


def steps_saved(directory: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("step-")) for p in directory.glob("step-*"))


def test_torchtitan_pod_command_trains_under_trainer_launch_onto_the_checkpoint_volume(
    titan_run, tmp_path
):
    command, workdir = titan_run
    assert command[:5] == ["trainer-launch", "--", "python", "-m", "torchtitan.train"]
    env = pod_env(tmp_path, PET_NODE_RANK="0")
    done = run_titan(command, workdir, env)
    assert done.returncode == 0, done.stderr
    checkpoints = tmp_path / "ckpt"
    # Straight into the run's directory, where a new step-N is progress for the budget.
    assert steps_saved(checkpoints) == [2, 4, 6]
    assert all((checkpoints / f"step-{n}" / ".metadata").is_file() for n in (2, 4, 6))
    assert (checkpoints / "outputs" / "tb").is_dir()
    (argv_file,) = (checkpoints / "outputs").glob("argv-*.json")
    argv = json.loads(argv_file.read_text())
    assert argv[argv.index("--checkpoint.folder") + 1] == str(checkpoints)
    assert argv[-len(TITAN_ARGS) - 2 :] == [*TITAN_ARGS, "--checkpoint.interval", "2"]
    assert "rank 1: step 6" in done.stdout


def test_torchtitan_device_fault_is_retried_and_the_restart_resumes_from_the_volume(
    titan_run, tmp_path
):
    command, workdir = titan_run
    faulty = pod_env(tmp_path, PET_NODE_RANK="0", FAULT_STEP="3", FAULT_RANK="1")
    failed = run_titan(command, workdir, faulty)
    assert failed.returncode == 203, failed.stderr  # device-fault: the operator retries
    assert "rank 1: device-fault (RuntimeError: CUDA error" in failed.stderr
    assert steps_saved(tmp_path / "ckpt") == [2]
    record = tmp_path / "ckpt" / ".trainer-launch" / "retries-0.json"
    assert json.loads(record.read_text())["cause"] == "device-fault"
    # The operator's new pod: same command, same directory of the volume.
    resumed = run_titan(command, workdir, pod_env(tmp_path, PET_NODE_RANK="0"))
    assert resumed.returncode == 0, resumed.stderr
    assert "rank 0: loaded checkpoint step-2" in resumed.stdout
    assert "step 1 " not in resumed.stdout and "rank 0: step 3 " in resumed.stdout
    assert steps_saved(tmp_path / "ckpt") == [2, 4, 6]
    assert not record.exists()  # a finished run clears its retry record


def test_torchtitan_fault_without_progress_stops_at_the_retry_budget(titan_run, tmp_path):
    command, workdir = titan_run
    faulty = pod_env(
        tmp_path, PET_NODE_RANK="0", FAULT_STEP="1", FAULT_RANK="0", TRAINER_RETRY_BUDGET="1"
    )
    assert run_titan(command, workdir, faulty).returncode == 203
    # No step-N was written since: the second failure spends the budget.
    second = run_titan(command, workdir, faulty)
    assert second.returncode == 6, second.stderr
    assert "without a new checkpoint" in second.stderr
