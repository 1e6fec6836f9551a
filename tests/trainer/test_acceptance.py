"""`trainer-acceptance`, the preflight MPIJob's nccl-tests run, and what `trainops doctor
nccl-tests` makes of its log.

There is no GPU, no MPI and no nccl-tests here: the end-to-end tests put a stand-in
`mpirun` first on PATH that records how it was called and prints all_reduce_perf's
output (the layout of nccl-tests 2.19) for the hosts it was given, at bandwidths the
test chooses. Everything else (hostfile, rounds, forwarding, verdicts, the log and the
doctor reading it) is the real code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest

from tests.support import REPO
from trainer.acceptance import Node, forwarded, mpirun_command, pair_rounds, read_hostfile


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 9])
def test_rounds_cover_every_pair_once_and_no_node_twice_a_round(count):
    rounds = pair_rounds(count)
    seen = [pair for pairs in rounds for pair in pairs]
    assert sorted(seen) == list(combinations(range(count), 2))
    for pairs in rounds:
        nodes = [node for pair in pairs for node in pair]
        assert len(nodes) == len(set(nodes))
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)


def test_hostfile_of_the_mpi_operator():
    text = "job-worker-0.job.training.svc slots=8\n# comment\n\n"
    text += "job-worker-1.job.training.svc slots=8\n"
    assert read_hostfile(text) == [
        Node("job-worker-0.job.training.svc", 8),
        Node("job-worker-1.job.training.svc", 8),
    ]
    assert read_hostfile("a\n") == [Node("a", 1)]


def test_command_forwards_nccl_variables_and_the_named_ones():
    env = {"PATH": "/bin", "NCCL_IB_HCA": "=mlx5_0", "JOB": "x", "OTHER": "y"}
    variables = forwarded(["JOB"], env)
    assert variables == ["PATH", "JOB", "NCCL_IB_HCA"]
    command = mpirun_command(
        [Node("a", 8), Node("b", 8)], variables, "all_reduce_perf", ["-g", "1"]
    )
    assert command[command.index("-np") + 1] == "16"
    assert command[command.index("--host") + 1] == "a:8,b:8"
    assert command[-3:] == ["all_reduce_perf", "-g", "1"]


STAND_IN = """#!{python}
# Stand-in for mpirun + all_reduce_perf (no MPI or GPUs here): records its arguments and
# prints nccl-tests output for the hosts of --host at the bandwidth the test chose.
import json, os, sys
sys.path.insert(0, {repo!r})
from tests.doctor.test_nccl_tests import output
args = sys.argv[1:]
hosts = [h.split(":")[0] for h in args[args.index("--host") + 1].split(",")]
with open(os.environ["STAND_IN_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
speeds = json.loads(os.environ["STAND_IN_SPEEDS"])
key = ",".join(sorted(hosts))
sys.stdout.write(output(hosts, speeds.get(key, speeds["default"])))
"""


def _acceptance(tmp_path: Path, hosts: list[str], speeds: dict, *args: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "mpirun"
    stand_in.write_text(STAND_IN.format(python=sys.executable, repo=str(REPO)))
    stand_in.chmod(0o755)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{h} slots=8\n" for h in hosts))
    calls = tmp_path / "calls.jsonl"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STAND_IN_CALLS": str(calls),
        "STAND_IN_SPEEDS": json.dumps(speeds),
        "NCCL_IB_HCA": "=mlx5_0,mlx5_1",
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "trainer-acceptance"),
            "-x",
            "TRAINER_EXPECT_TRANSPORT",
            "--hostfile",
            str(hostfile),
            "--output",
            str(tmp_path / "runs"),
            *args,
        ],
        env={**env, "TRAINER_EXPECT_TRANSPORT": "ib"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    recorded = (
        [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    )
    return done, recorded


def _doctor(log: Path, *args: str) -> dict:
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "trainops"),
            "doctor",
            "nccl-tests",
            str(log),
            "--format",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return json.loads(done.stdout)


def test_pairwise_sweep_finds_the_slow_link_through_the_doctor_no_gpus_here(tmp_path):
    hosts = ["n1", "n2", "n3", "n4"]
    # The n1-n2 link is slow; every node is fast with its other partners.
    speeds = {"default": 180.0, "n1,n2": 90.0}
    done, calls = _acceptance(tmp_path, hosts, speeds, "--pairwise", "--", "-b", "8", "-e", "1G")
    assert done.returncode == 0, done.stderr  # no floor: a slow link alone does not fail
    assert len(calls) == 1 + 6  # all nodes, then every pair once
    assert calls[0][calls[0].index("--host") + 1] == "n1:8,n2:8,n3:8,n4:8"
    for call in calls:
        forwarded_names = [call[i + 1] for i, word in enumerate(call) if word == "-x"]
        assert {"NCCL_IB_HCA", "TRAINER_EXPECT_TRANSPORT", "PATH"} <= set(forwarded_names)
        assert call[-4:] == ["-b", "8", "-e", "1G"]
    pairs = {
        tuple(sorted(h.split(":")[0] for h in c[c.index("--host") + 1].split(",")))
        for c in calls[1:]
    }
    assert pairs == set(combinations(hosts, 2))
    log = tmp_path / "launcher.log"
    log.write_text(done.stdout)
    report = _doctor(log)
    slow = [f for f in report["findings"] if f["rule"] == "nccl-tests-slow-pair"]
    assert [f["nodes"] for f in slow] == [["n1", "n2"]], report
    assert not [f for f in report["findings"] if f["rule"] == "nccl-tests-slow-node"]
    assert (tmp_path / "runs" / "pair-n1-n2.log").is_file()


def test_a_run_below_the_floor_fails_the_preflight_no_gpus_here(tmp_path):
    done, calls = _acceptance(tmp_path, ["a", "b"], {"default": 40.0}, "--min-busbw", "100")
    assert done.returncode == 4
    assert len(calls) == 1
    assert (
        "all-nodes on a b: 40 GB/s: bus bandwidth 40 GB/s is below the floor of 100" in done.stdout
    )
    report = _doctor(tmp_path / "runs" / "all-nodes.log", "--min-busbw", "100")
    assert [f["rule"] for f in report["findings"]] == ["nccl-tests-below-floor"]


def test_too_few_nodes_is_a_configuration_error(tmp_path):
    done, calls = _acceptance(tmp_path, ["a", "b"], {"default": 1.0}, "--pairwise")
    assert done.returncode == 2 and "needs at least 3" in done.stderr
    assert calls == []
