"""`trainops doctor nccl-tests`: runs, a pairwise sweep's slow node and slow link, wrong
results, a bandwidth floor, and failed runs with their cause."""

from __future__ import annotations

import json
from pathlib import Path

from trainops.doctor import nccl_tests
from trainops.doctor.sources import memory_stream

SIZES = (8, 1048576, 134217728, 1073741824)


def output(hosts: list[str], busbw: float, wrong: int = 0, old: bool = False) -> str:
    """nccl-tests all_reduce_perf output, 8 GPUs per host; `old` is the pre-2.10 layout."""
    lines = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for index, host in enumerate(h for h in hosts for _ in range(8)):
        group = "" if old else "Group  0 "
        lines.append(
            f"#  Rank {index:2d} {group}Pid {1000 + index:6d} on {host:>10} device {index % 8:2d} "
            "[0x1b] NVIDIA H100 80GB HBM3"
        )
    lines += [
        "#",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    ]
    for size in SIZES:
        bus = busbw * size / SIZES[-1]
        count = size // 4
        root = "" if old else "      -1"
        bad = "2e-07" if old else str(wrong if size == SIZES[-1] else 0)
        lines.append(
            f"{size:12d} {count:13d}     float     sum{root}"
            + f"    100.0  {bus:6.2f}  {bus:6.2f}  {bad:>5}" * 2
        )
    status = f"{wrong} FAILED" if wrong else "0 OK"
    lines += [
        f"# Out of bounds values : {status}",
        f"# Avg bus bandwidth    : {busbw / 3:.4f}",
        "#",
    ]
    return "\n".join(lines) + "\n"


def sweep(directory: Path) -> Path:
    """Four nodes, every pair: n3 is slow with everyone, the n1-n2 link is slow."""
    directory.mkdir()
    speeds = {
        ("n1", "n2"): 92.0,
        ("n1", "n3"): 90.5,
        ("n2", "n3"): 91.2,
        ("n3", "n4"): 89.9,
        ("n1", "n4"): 181.0,
        ("n2", "n4"): 180.2,
    }
    for (a, b), speed in speeds.items():
        (directory / f"{a}-{b}.log").write_text(output([a, b], speed))
    return directory


def test_reads_a_run():
    [run] = nccl_tests.read_runs([memory_stream("run.log", output(["a", "b"], 180.5).splitlines())])
    assert (run.nodes, run.ranks, run.size, run.busbw, run.wrong) == (
        ["a", "b"],
        16,
        SIZES[-1],
        180.5,
        0,
    )


def test_reads_the_old_layout():
    [run] = nccl_tests.read_runs(
        [memory_stream("old.log", output(["a"], 40.0, old=True).splitlines())]
    )
    assert (run.nodes, run.busbw, run.wrong) == (["a"], 40.0, 0)


def test_a_sweep_names_the_slow_node_and_the_slow_link(trainops, tmp_path):
    run = trainops("doctor", "nccl-tests", "--format", "json", str(sweep(tmp_path / "sweep")))
    assert run.code == 1, run.err
    report = json.loads(run.out)
    assert len(report["runs"]) == 6
    found = {(f["rule"], tuple(f["nodes"])) for f in report["findings"]}
    assert found == {("nccl-tests-slow-node", ("n3",)), ("nccl-tests-slow-pair", ("n1", "n2"))}
    message = {f["rule"]: f["message"] for f in report["findings"]}
    assert message["nccl-tests-slow-pair"].startswith("the link between n1 and n2 is slow: 92 GB/s")


def test_healthy_sweep_and_floor(trainops, tmp_path):
    directory = tmp_path / "ok"
    directory.mkdir()
    for a, b in (("n1", "n2"), ("n3", "n4"), ("n1", "n3")):
        (directory / f"{a}{b}.log").write_text(output([a, b], 180.0))
    clean = trainops("doctor", "nccl-tests", str(directory))
    assert clean.code == 0 and clean.out.rstrip().endswith("no problems found")
    floor = trainops(
        "doctor", "nccl-tests", "--min-busbw", "190", "--format", "json", str(directory)
    )
    assert floor.code == 1
    assert {f["rule"] for f in json.loads(floor.out)["findings"]} == {"nccl-tests-below-floor"}


def test_wrong_results_are_corruption(trainops, tmp_path):
    log = tmp_path / "bad.log"
    log.write_text(output(["n1", "n2"], 180.0, wrong=3))
    run = trainops("doctor", "nccl-tests", "--format", "json", str(log))
    assert run.code == 1
    [finding] = json.loads(run.out)["findings"]
    assert finding["rule"] == "nccl-tests-wrong-results" and "6 wrong values" in finding["message"]


def test_a_failed_run_gets_its_cause(trainops, tmp_path):
    log = tmp_path / "failed.log"
    log.write_text(
        output(["n1"], 0.0).split("#       size")[0]
        + "n1:11:12 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment "
        "/dev/shm/nccl-KWfVyt (size 5967872)\n"
        "n1:11:12 [3] NCCL INFO transport/shm.cc:114 -> 2\n"
        "n1: Test NCCL failure common.cu:958 'internal error - please report this issue to the "
        "NCCL developers / '\n"
        " .. n1 pid 11: Test failure common.cu:844\n"
    )
    run = trainops("doctor", "nccl-tests", str(log))
    assert run.code == 1, run.err
    assert "[nccl-tests-failed]" in run.out and "[shm-exhausted]" in run.out


def test_no_results_is_an_input_error(trainops, tmp_path):
    log = tmp_path / "nothing.log"
    log.write_text("hello\n")
    run = trainops("doctor", "nccl-tests", "--format", "json", str(log))
    assert run.code == 2 and json.loads(run.out) == {
        "error": "no nccl-tests results or NCCL lines in the input"
    }
