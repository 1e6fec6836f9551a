"""The doctor reads what real collection produces: NCCL 2.2 to 2.2x formats, PyTorch's
messages, the prefixes launchers and kubectl add, Flight Recorder dumps, attempts, and
inputs from gzip, stdin, FIFOs, process substitution and /dev/null."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doctor.nccl_logs import job, write_per_pod
from tests.support import REPO
from trainops.doctor.analysis import Diagnosis, diagnose
from trainops.doctor.expectation import Expectation
from trainops.doctor.sources import memory_stream


def diag(*lines: str, expect: Expectation | None = None, name: str = "log") -> Diagnosis:
    return diagnose([memory_stream(name, list(lines))], expect or Expectation())


def rules(diagnosis: Diagnosis) -> dict[str, object]:
    return {f.rule: f for f in diagnosis.findings}


COMM = (
    "comm 0x55d3 rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId 1000 commId 0x9 "
    "- Init {phase}"
)


@pytest.mark.parametrize(
    "prefix",
    [
        "[pod/llama-worker-0/pytorch] 2024-05-01T10:00:00.123456789Z ",
        "2024-05-01T10:00:00.123456789Z [pod/llama-worker-0/pytorch] ",
        "  3: ",
        "[1,3]<stdout>:",
        "\x1b[32m",
        "[0m ",
        "> ",
        "[2025-05-10 23:09:41] ",
        "2025-05-10 23:09:41,123 ",
        "2025-05-10 23:09:41.123 UTC | ",
        "[2025-05-10T23:09:41.123] ",
        "1746918581.123 ",
        "23:09:41.123 ",
        "(RayTrainWorker pid=4012, ip=10.0.0.3) ",
        '{pod="llama-worker-0", container="pytorch"} ',
        "`",
    ],
    ids=[
        "kubectl-prefix-ts",
        "kubectl-ts-prefix",
        "srun",
        "mpirun",
        "ansi",
        "ansi-remnant",
        "quote",
        "nccl-ts",
        "python-logging-ts",
        "ts-with-zone-and-bar",
        "bracketed-iso",
        "epoch",
        "time-of-day",
        "ray",
        "loki-labels",
        "markdown-backticks",
    ],
)
def test_collection_prefixes_do_not_hide_nccl(prefix):
    suffix = "`" if prefix == "`" else ""
    lines = [
        f"{prefix}llama-worker-0:1:7 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; "
        "OOB net1:10.0.0.3<0>",
        f"{prefix}llama-worker-0:1:7 [0] NCCL INFO Using network IB",
        f"{prefix}llama-worker-0:1:7 [0] NCCL INFO " + COMM.format(rank=3, nranks=4, phase="START"),
        f"{prefix}llama-worker-0:1:7 [0] misc/shmutils.cc:132 NCCL WARN Error while creating "
        "shared memory segment /dev/shm/nccl-x (size 9637888), error: No space left on device (28)",
    ]
    result = diag(*[line + suffix for line in lines])
    [record] = result.records
    assert (record.rank, record.nranks, record.transport, record.devices) == (
        3,
        4,
        "RoCE",
        ["mlx5_0:1"],
    )
    assert rules(result)["shm-exhausted"].ranks == [3]


def test_launcher_rank_tags_name_the_rank():
    result = diag(
        "[rank5]:[E1121 02:07:08.408 ProcessGroupNCCL.cpp:632] Some NCCL operations have failed",
        "  2: RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    assert rules(result)["cuda-fatal"].ranks == [2]


def test_legacy_nccl_without_the_nccl_keyword():
    result = diag(
        "gpu-a:18553:18553 [0] INFO NET : Using interface enp3s0:192.168.144.103<0>",
        "NCCL version 2.2.13+cuda9.0",
        "gpu-a:18553:18612 [0] INFO comm 0x7fa42c00a3b0 rank 0 nranks 2",
        "gpu-a:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : "
        "Connection timed out",
        "gpu-a:18553:18611 [0] INFO transport/net_socket.cu:118 -> 2",
    )
    [record] = result.records
    assert (record.rank, record.interfaces, record.version) == (0, ["enp3s0"], "2.2.13+cuda9.0")
    assert "Connection timed out" in rules(result)["bootstrap-connect-failed"].message


def test_old_bootstrap_lists_do_not_fake_an_interface_mismatch():
    result = diag(
        "h:7:7 [0] NCCL INFO Bootstrap : Using [0]eth0:10.0.0.1<0> [1]eth1:10.1.0.1<0>",
        "h:7:7 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth",
        "h:7:9 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.1.0.1<0>",
        "h:7:9 [0] NCCL INFO Using network Socket",
        "h:7:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="COMPLETE"),
    )
    assert result.records[0].interfaces == ["eth0", "eth1"]
    assert "interface-mismatch" not in rules(result) and "unroutable-interface" not in rules(result)


def test_merged_nics_and_mixed_link_layers():
    merged = diag(
        "h:7:9 [0] NCCL INFO NET/IB : Using [0]mlx5_0+mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
        "h:7:9 [0] NCCL INFO Using network IB",
    )
    assert merged.records[0].devices == ["mlx5_0:1", "mlx5_1:1"]
    assert merged.records[0].transport == "RoCE"
    mixed = diag(
        "h:7:9 [0] NCCL INFO NET/IB : Using [0]mlx5_3:1/IB [1]mlx5_2:1/RoCE ; OOB eth0:10.0.0.1<0>",
        "h:7:9 [0] NCCL INFO Using network IB",
    )
    assert mixed.records[0].transport == "IB"


def test_nccl_version_inside_a_pytorch_error_is_not_a_version_line():
    result = diag(
        "h:7:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="START"),
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1691, unhandled system error, "
        "NCCL version 2.19.3",
    )
    assert result.records[0].version is None
    assert result.failed


@pytest.mark.parametrize(
    "line",
    [
        "[rank3]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=5, "
        "NumelOut=6, Timeout(ms)=600000) ran for 600089 milliseconds before timing out.",
        "[E ProcessGroupNCCL.cpp:458] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, Timeout(ms)=600000) ran for 600089 "
        "milliseconds before timing out.",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread "
        "terminated with exception: [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7753, "
        "OpType=_REDUCE_SCATTER_BASE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600058 "
        "milliseconds before timing out.",
    ],
    ids=["current", "no-numel", "terminate"],
)
def test_watchdog_variants(line):
    finding = rules(diag(line))["collective-timeout"]
    assert finding.ranks == [3]
    assert "600s in _REDUCE_SCATTER_BASE (SeqNum 7753)" in finding.message


def test_watchdog_without_sequence_numbers():
    line = (
        "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1806877 milliseconds before "
        "timing out."
    )
    assert "1800s in BROADCAST" in rules(diag(line))["collective-timeout"].message


def test_a_watchdog_paste_without_its_first_clause_wrapped_after_the_work():
    finding = rules(
        diag(
            "WorkNCCL(SeqNum=12, OpType=ALLGATHER, NumelIn=4, NumelOut=8, Timeout(ms)=600000)",
            "  ran for 721595 milliseconds before timing out",
        )
    )["collective-timeout"]
    assert "600s in ALLGATHER (SeqNum 12)" in finding.message
    assert "barrier()" not in finding.message


def test_a_first_one_element_all_reduce_timing_out_points_at_unbound_devices():
    # ProcessGroupNCCL runs barrier() as a one-element all-reduce on a guessed device.
    finding = rules(
        diag(
            "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 721595 "
            "milliseconds before timing out."
        )
    )["collective-timeout"]
    assert "the form barrier() takes" in finding.message
    assert "torch.cuda.set_device(local_rank)" in finding.fix


@pytest.mark.parametrize(
    "line, rule",
    [
        (
            '    raise RuntimeError("Distributed package doesn\'t have NCCL " "built in")',
            "torch-no-cuda-build",
        ),
        ('    raise _env_error("MASTER_ADDR")', "launch-config-invalid"),
        (
            "RuntimeError: use_libuv was requested but PyTorch was build without libuv support",
            "launch-config-invalid",
        ),
    ],
    ids=["raise-literals", "raise-env-error", "older-wording"],
)
def test_a_traceback_that_shows_only_the_raising_line_or_an_older_wording(line, rule):
    lines = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', line]
    assert rule in rules(diag(*lines))


def test_a_raise_line_that_builds_its_message_is_not_read_as_one():
    from trainops.doctor.parse import raised

    assert raised('raise RuntimeError(f"rank {rank} failed")') is None
    assert raised("raise RuntimeError('a' + detail)") is None
    assert raised("raise RuntimeError('a' 'b')") == "RuntimeError: ab"


def test_the_lines_of_one_mpirun_message_make_one_finding():
    found = diag(
        "There are not enough slots available in the system to satisfy the 2 slots",
        "that were requested by the application:",
        "  python",
        "",
        "Either request fewer slots for your application, or make more slots available",
        "for use.",
    ).findings
    assert [f.rule for f in found if f.severity == "error"] == ["mpirun-slots"]
    assert "slots=N" in found[0].message


def test_the_silent_rank_and_its_last_line(tmp_path):
    ranks = job(nodes=2, gpus=2)
    for rank in ranks[:3]:
        rank.timeout_seq = 1580
    result = diagnose(
        [
            memory_stream(p.name, p.read_text().splitlines())
            for p in sorted(write_per_pod(tmp_path, ranks).iterdir())
        ],
        Expectation(),
    )
    message = rules(result)["collective-timeout"].message
    assert "rank 3 reported no timeout" in message and "its last line:" in message


def test_a_restarted_container_is_a_new_attempt_not_the_same_process():
    first = [
        "llama-master-0:1:1 [0] NCCL INFO cudaDriverVersion 12040",
        "llama-master-0:1:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=4, phase="START"),
        "llama-master-0:1:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=4, phase="COMPLETE"),
        "[rank0]:[E ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 milliseconds",
    ]
    second = [
        "llama-master-0:1:1 [0] NCCL INFO cudaDriverVersion 12040",
        "llama-master-0:1:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="START"),
        "llama-master-0:1:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="COMPLETE"),
    ]
    result = diag(*first, *second)
    assert result.attempts == [1, 2]
    assert [(r.attempt, r.nranks) for r in result.records] == [(1, 4), (2, 2)]
    assert "nranks-mismatch" not in rules(result)
    assert [f.attempt for f in result.findings if f.rule == "collective-timeout"] == [1]


def test_a_previous_log_is_an_earlier_attempt():
    previous = memory_stream(
        "llama-master-0/pytorch (previous)",
        ["llama-master-0:1:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=4, phase="START")],
    )
    current = memory_stream(
        "llama-master-0/pytorch",
        ["llama-master-0:1:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=4, phase="COMPLETE")],
    )
    result = diagnose([previous, current], Expectation())
    assert [(r.attempt, r.init_complete) for r in result.records] == [(0, False), (1, True)]


def test_torchrun_restarting_workers_starts_an_attempt():
    result = diag(
        "h:10:10 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="START"),
        "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
        "h:20:20 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="COMPLETE"),
    )
    assert result.attempts == [1, 2]


def _dump(rank_entries):
    return {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": rank_entries}


def _entry(seq, op, state, pg="0"):
    return {
        "collective_seq_id": seq,
        "profiling_name": f"nccl:{op}",
        "state": state,
        "process_group": [pg, "default_pg"],
        "is_p2p": False,
    }


def test_flight_recorder_json_names_the_straggler(trainops, tmp_path):
    for rank in range(3):
        entries = [
            _entry(40, "all_reduce", "completed"),
            _entry(41, "all_reduce", "completed"),
            _entry(42, "all_reduce", "started"),
        ]
        (tmp_path / f"nccl_trace_rank_{rank}").write_text(json.dumps(_dump(entries)))
    (tmp_path / "nccl_trace_rank_3").write_text(
        json.dumps(_dump([_entry(40, "all_reduce", "completed")]))
    )
    run = trainops("doctor", "nccl", "--format", "json", str(tmp_path))
    assert run.code == 1, run.err
    [straggler] = [
        f for f in json.loads(run.out)["findings"] if f["rule"] == "collective-straggler"
    ]
    assert straggler["ranks"] == [3]
    assert "rank 3 never reached collective #42 (ALL_REDUCE)" in straggler["message"]


def test_flight_recorder_json_shows_mismatched_collectives(tmp_path):
    from trainops.doctor.sources import open_sources

    (tmp_path / "trace_0").write_text(json.dumps(_dump([_entry(7, "all_reduce", "started")])))
    (tmp_path / "trace_1").write_text(json.dumps(_dump([_entry(7, "broadcast", "started")])))
    result = diagnose(open_sources((str(tmp_path),)), Expectation())
    assert "#7" in rules(result)["collective-mismatch"].message


def test_a_pickled_dump_is_refused_not_unpickled(trainops, tmp_path):
    marker = tmp_path / "ran"
    payload = b"\x80\x04\x95" + f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    (tmp_path / "nccl_trace_rank_0").write_bytes(payload)
    run = trainops("doctor", "nccl", str(tmp_path / "nccl_trace_rank_0"))
    assert run.code == 2 and "never unpickles" in run.err
    assert len(run.err.strip().splitlines()) == 1 and not marker.exists()


def test_gzip_stdin_and_files_agree(trainops, tmp_path):
    directory = write_per_pod(tmp_path / "logs", job())
    text = "".join(p.read_text() for p in sorted(directory.iterdir()))
    (tmp_path / "all.log.gz").write_bytes(gzip.compress(text.encode()))
    seen = []
    for args, stdin in (
        ([str(tmp_path / "all.log.gz")], ""),
        (["-"], text),
        ([str(directory)], ""),
    ):
        run = trainops("doctor", "nccl", "--format", "json", *args, stdin=stdin)
        assert run.code == 0, run.err
        seen.append([r["rank"] for r in json.loads(run.out)["ranks"]])
    assert seen == [[0, 1, 2, 3]] * 3


def _shell(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "PYTHONPATH": str(REPO / "tools"),
            "HOME": str(tmp_path),
        },
        check=False,
    )


def test_fifo_and_process_substitution(tmp_path):
    log = write_per_pod(tmp_path / "logs", job()) / "llama-master-0.log"
    doctor = f"{sys.executable} -m trainops doctor nccl --format json"
    fifo = _shell(
        f"mkfifo pipe; cat {log} > pipe & {doctor} pipe; status=$?; wait; exit $status", tmp_path
    )
    assert fifo.returncode == 0, fifo.stderr
    substituted = _shell(f"{doctor} <(cat {log})", tmp_path)
    assert substituted.returncode == 0, substituted.stderr
    seen = [
        [(r["rank"], r["transport"], r["init_complete"]) for r in json.loads(run.stdout)["ranks"]]
        for run in (fifo, substituted)
    ]
    assert seen[0] == seen[1] == [(0, "IB", True), (1, "IB", True)]


def test_dev_null_has_no_evidence(trainops):
    run = trainops("doctor", "nccl", "/dev/null")
    assert run.code == 2 and "NCCL_DEBUG=INFO" in run.err and run.out == ""


def test_json_format_on_error_prints_json(trainops, tmp_path):
    run = trainops("doctor", "nccl", "--format", "json", str(tmp_path / "missing.log"))
    assert run.code == 2 and len(run.err.strip().splitlines()) == 1
    assert "missing.log" in json.loads(run.out)["error"]


def test_xid_79_in_a_node_log_is_a_gpu_fault(trainops):
    kernel_log = (
        "Feb 14 05:03:41 gpu-node-7 kernel: NVRM: Xid (PCI:0000:44:00): 79, pid=1911, "
        "name=python3, GPU has fallen off the bus.\n"
    )
    run = trainops("doctor", "nccl", "--format", "json", "-", stdin=kernel_log)
    assert run.code == 1, run.err
    [fault] = json.loads(run.out)["findings"]
    assert (
        fault["rule"] == "gpu-fault" and "Xid 79 (GPU has fallen off the bus)" in fault["message"]
    )
    assert "cordon" in fault["fix"].lower() and "checkpoint" in fault["fix"]
    assert fault["evidence"] == ["-:1: " + kernel_log.strip()]


def test_an_unknown_failure_is_never_no_problems(trainops):
    run = trainops(
        "doctor",
        "nccl",
        "-",
        stdin=(
            "h:7:9 [0] misc/newthing.cc:12 NCCL WARN Something nobody has seen before\n"
            "h:7:9 [0] NCCL INFO misc/newthing.cc:13 -> 3\n"
        ),
    )
    assert run.code == 1 and "no problems found" not in run.out
    assert "[failure-unrecognised]" in run.out and "Something nobody has seen before" in run.out


@pytest.mark.parametrize("key", ["log", "message", "msg", "line", "textPayload"])
def test_json_lines_of_log_collectors_are_unwrapped(key):
    """Docker/fluentd (`log`), CloudWatch (`message`), Loki (`line`), GCP (`textPayload`)."""
    lines = [
        "llama-worker-0:1:7 [0] NCCL INFO " + COMM.format(rank=3, nranks=4, phase="START"),
        "llama-worker-0:1:7 [0] misc/shmutils.cc:132 NCCL WARN Error while creating shared "
        "memory segment /dev/shm/nccl-x (size 9637888), error: No space left on device (28)",
    ]
    wrapped = [
        json.dumps({key: line + "\n", "stream": "stderr", "kubernetes": {"pod_name": "p-0"}})
        for line in lines
    ]
    result = diag(*wrapped)
    assert rules(result)["shm-exhausted"].ranks == [3]


def test_a_json_line_that_is_not_a_log_record_is_read_as_text():
    from trainops.doctor.lines import clean

    for text in ('{"loss": 2.1, "step": 10}', "{not json at all}", "[1, 2]"):
        assert clean(text).text == text


def test_nccl_2_28_headers_with_the_function_after_file_and_line():
    result = diag(
        "node-3:4211:4388 [5] NCCL INFO " + COMM.format(rank=5, nranks=8, phase="START"),
        "node-3:4211:4388 [5] misc/shmutils.cc:132 (ncclShmOpen) NCCL WARN Error while creating "
        "shared memory segment /dev/shm/nccl-x (size 9637888), error: No space left on device (28)",
    )
    finding = rules(result)["shm-exhausted"]
    assert finding.ranks == [5]


def test_a_warning_wrapped_onto_the_next_line_is_rejoined():
    result = diag(
        "h:7:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="START"),
        "h:7:9 [0] transport/net_ib.cc:92 NCCL WARN NET/IB : mlx5_2:1 Got async event",
        ": port error",
        "h:7:9 [0] NCCL INFO transport/net_ib.cc:1108 -> 6",
    )
    assert "ib-async-event" in rules(result)


def test_a_line_after_a_warning_that_does_not_continue_it_is_read_on_its_own():
    result = diag(
        "h:7:9 [0] NCCL INFO " + COMM.format(rank=0, nranks=2, phase="START"),
        "h:7:9 [0] foo.cc:1 NCCL WARN a warning nobody knows",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    )
    assert "gpu-arch-unsupported" in rules(result)


def test_an_interface_list_wrapped_one_interface_a_line_is_read_whole():
    """NCCL prints `NET/Socket : Using [0]eth0:... [1]...` on one line (src/misc/socket.cc);
    a paste that wrapped it, and cut the prefix up to the level, still names the bridge."""
    result = diag(
        "INFO NET/Socket : Using",
        "[0]bond0:192.168.1.161<0>",
        "[1]br-05ab815fa14e:172.19.0.1<0>",
        "[2]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0>",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error",
    )
    found = rules(result)["unroutable-interface"]
    assert "br-05ab815fa14e" in found.message and "veth6163fba" in found.message
    assert "bond0" not in found.message


def test_a_line_after_an_interface_list_that_is_not_one_is_read_on_its_own():
    result = diag(
        "h:7:9 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    )
    assert "gpu-arch-unsupported" in rules(result)
    assert "unroutable-interface" not in rules(result)


def test_a_destroyed_communicator_counts_as_initialised():
    """A log that kept only the end of an nccl-tests run: `- Destroy COMPLETE` follows a
    completed init, so no init is reported hanging."""
    result = diag(
        "swat1-04:17:17 [2] NCCL INFO comm 0x8dd01c0 rank 2 nranks 2 cudaDev 2 busId 48000 "
        "- Destroy COMPLETE",
        "swat1-04:17:17 [1] NCCL INFO comm 0x8d93f80 rank 1 nranks 2 cudaDev 1 busId b000 "
        "- Destroy COMPLETE",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 33.3227",
    )
    assert "init-incomplete" not in rules(result)


def test_one_file_per_rank_names_the_rank_when_lines_do_not():
    result = diagnose(
        [
            memory_stream(
                "logs/rank7.log",
                ["RuntimeError: CUDA error: an illegal memory access was encountered"],
            )
        ],
        Expectation(),
    )
    assert rules(result)["cuda-fatal"].ranks == [7]


def test_a_large_jobs_rank_table_folds_ranks_that_look_alike(trainops, tmp_path):
    """128 ranks on 16 nodes, one of them on sockets: a row per node, the odd rank on a
    row of its own between the runs of its neighbours."""
    from tests.doctor.nccl_logs import job

    ranks = job(nodes=16, gpus=8)
    ranks[42].transport = "Socket"
    log = tmp_path / "job.log"
    log.write_text("\n".join(line for r in ranks for line in r.lines()) + "\n")
    run = trainops("doctor", "nccl", str(log))
    table = run.out.split("\n\n")[0].splitlines()
    assert [row.split()[0] for row in table[1:]] == [
        "0-7", "8-15", "16-23", "24-31", "32-39", "40-41", "42", "43-47",
        *(f"{8 * n}-{8 * n + 7}" for n in range(6, 16)),
    ]  # fmt: skip
    assert table[7].split()[4] == "Socket", table
