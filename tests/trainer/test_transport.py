"""NCCL transport evidence, parsed from NCCL's own debug lines.

No GPU or NCCL exists here, so the logs below are written in NCCL's INFO format (as in
domain-facts.md); the check that runs them after the first collective is exercised
on real GPUs by the preflight job.
"""

from __future__ import annotations

import os

import pytest

from trainer.errors import TransportError
from trainer.transport import memlock_problem, parse_nccl_log, prepare, problems, verify

ROCE_GDR = """\
node-a:41:41 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to =net1
node-a:41:41 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB net1:10.10.0.5<0>
node-a:41:41 [0] NCCL INFO Using network IB
node-a:41:58 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
node-a:41:58 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
node-a:41:41 [0] NCCL INFO comm 0x5581 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE
"""

IB_WITHOUT_GDR = ROCE_GDR.replace("/GDRDMA", "")

SOCKET_FALLBACK = """\
node-a:41:41 [0] NCCL INFO NET/IB : No device found.
node-a:41:41 [0] NCCL INFO NET/Socket : Using [0]eth0:10.244.1.7<0>
node-a:41:41 [0] NCCL INFO Using network Socket
node-a:41:58 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
node-a:41:41 [0] NCCL WARN NET/Socket : message truncated
"""


def test_roce_with_gpudirect_keeps_the_promise():
    evidence = parse_nccl_log(ROCE_GDR)
    assert evidence.kind == "ib"
    assert evidence.devices == ["[0]mlx5_0:1/RoCE"]
    assert (evidence.net_channels, evidence.gdr_channels) == (2, 2)
    assert problems(evidence, "ib", expect_gdr=True) == []
    assert "GPUDirect RDMA on 2/2" in evidence.summary()


def test_socket_fallback_is_reported_with_its_cause():
    evidence = parse_nccl_log(SOCKET_FALLBACK)
    assert evidence.kind == "socket" and evidence.ib_missing
    assert evidence.warnings == ["NET/Socket : message truncated"]
    (problem,) = problems(evidence, "ib", expect_gdr=False)
    assert "fell back to TCP sockets (NET/IB: no device found)" in problem
    assert "eth0" in problem
    assert problems(evidence, "socket", expect_gdr=False) == []


def test_rdma_without_gpudirect_fails_only_when_gdr_is_expected():
    evidence = parse_nccl_log(IB_WITHOUT_GDR)
    assert problems(evidence, "ib", expect_gdr=False) == []
    (problem,) = problems(evidence, "ib", expect_gdr=True)
    assert "0 of 2 network channels use GPUDirect RDMA" in problem


def test_missing_evidence_is_a_problem_not_a_pass():
    assert "no 'Using network' line" in problems(parse_nccl_log(""), "ib", False)[0]


def test_prepare_routes_init_and_net_output_to_a_per_process_file(monkeypatch, tmp_path):
    env = {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "COLL"}
    path = prepare(env)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_SUBSYS"] == "COLL,INIT,NET"
    assert str(os.getpid()) in path.name
    env = {"NCCL_DEBUG_FILE": str(tmp_path / "nccl.%p.log")}
    assert prepare(env) == tmp_path / f"nccl.{os.getpid()}.log"


def test_verify_reads_the_file(tmp_path):
    log = tmp_path / "nccl.log"
    log.write_text(SOCKET_FALLBACK)
    with pytest.raises(TransportError, match="fell back to TCP sockets"):
        verify(log, "ib", False)
    log.write_text(ROCE_GDR)
    assert verify(log, "ib", True).kind == "ib"
    with pytest.raises(TransportError, match="wrote no debug file"):
        verify(tmp_path / "absent.log", "ib", False)


def test_rdma_needs_ipc_lock_in_effect_or_unlimited_memlock():
    unlimited = -1
    with_ipc_lock = f"{1 << 14:016x}"
    assert memlock_problem(with_ipc_lock, 65536, unlimited) is None
    assert memlock_problem("0000000000000000", unlimited, unlimited) is None
    problem = memlock_problem("00000000a80405fb", 65536, unlimited)  # root, no IPC_LOCK
    assert "locked-memory limit is 65536 bytes" in problem


def test_nvidia_ib_plugin_counts_as_infiniband():
    evidence = parse_nccl_log(ROCE_GDR.replace("Using network IB", "Using network IBext"))
    assert evidence.kind == "ib" and problems(evidence, "ib", True) == []


def test_prepare_raises_the_soft_memlock_limit_to_the_hard_one():
    """A non-root process may raise its soft limit up to the hard one the runtime gives."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    lowered = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (lowered, hard))
    try:
        prepare({})
        assert resource.getrlimit(resource.RLIMIT_MEMLOCK) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))
