"""Causes read across ranks: the version or driver that differs, the store host that never
listened, the rank that alone entered a collective."""

from __future__ import annotations

from trainops.doctor.analysis import diagnose
from trainops.doctor.expectation import Expectation
from trainops.doctor.sources import memory_stream


def findings(**files: list[str]) -> dict:
    diagnosis = diagnose(
        [memory_stream(name, lines) for name, lines in files.items()], Expectation()
    )
    return {f.rule: f for f in diagnosis.findings}


def test_nccl_versions_that_differ_between_files_without_prefixes():
    found = findings(
        **{
            "node-a.log": ["NCCL version 2.21.5+cuda12.4", "RuntimeError: NCCL error: remote"],
            "node-b.log": ["NCCL version 2.19.3+cuda12.2"],
        }
    )
    message = found["nccl-version-mismatch"].message
    assert "2.19.3 on node-b.log" in message and "2.21.5 on node-a.log" in message


def test_the_node_with_another_driver_is_named():
    lines_a = [f"a:1:{n} [{n}] NCCL INFO cudaDriverVersion 12040" for n in range(2)]
    lines_b = ["b:1:1 [0] NCCL INFO cudaDriverVersion 12020"]
    found = findings(**{"a.log": lines_a, "b.log": lines_b})
    message = found["nccl-version-mismatch"].message
    assert "12020 on b:1" in message and "nodes run different NVIDIA drivers" in message


def test_a_refused_store_connection_says_the_store_never_listened():
    refused = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to "
        "[llama-master-0]:23456 (errno: 111 - Connection refused)."
    )
    found = findings(**{"worker-1.log": [f"[rank{r}]:{refused}" for r in (1, 2, 3)]})
    message = found["rendezvous-unreachable"].message
    assert "nothing listens on that port" in message and "no line of rank 0" in message


def test_a_refused_connection_with_rank_0_in_the_logs_does_not_ask_for_its_log():
    refused = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to "
        "[llama-master-0]:23456 (errno: 111 - Connection refused)."
    )
    found = findings(
        **{
            "master.log": ["[rank0]:RuntimeError: CUDA error: out of memory"],
            "worker.log": [f"[rank1]:{refused}"],
        }
    )
    assert "no line of rank 0" not in found["rendezvous-unreachable"].message


def _timeout(rank: int, op: str = "BARRIER") -> str:
    return (
        f"[rank{rank}]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog "
        f"caught collective operation timeout: WorkNCCL(SeqNum=41, OpType={op}, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
    )


def test_the_rank_that_alone_entered_a_collective():
    """The others log steps after rank 0 entered (one interleaved log: line order is time)."""
    found = findings(
        **{
            "job.log": [
                _timeout(0),
                "[rank1]: step 900 | loss 1.71",
                "[rank2]: step 900 | loss 1.69",
            ]
        }
    )
    message = found["collective-timeout"].message
    assert "rank 0 alone entered it" in message and "BARRIER" in message


def test_other_ranks_that_finished_show_the_one_left_alone():
    finished = "[I1201 10:00:00 api.py:933] [default] worker group successfully finished."
    found = findings(**{"rank0.log": [_timeout(0)], "rank1.log": [f"[rank1]: {finished}"]})
    assert "rank 0 alone entered it" in found["collective-timeout"].message


def test_progress_in_other_files_is_not_taken_as_later():
    found = findings(**{"rank0.log": [_timeout(0)], "rank1.log": ["step 900 | loss 1.71"]})
    assert "alone" not in found["collective-timeout"].message


def test_the_rank_a_message_states_wins_over_a_collection_prefix():
    found = findings(**{"job.log": ["  0: " + _timeout(6)[len("[rank6]:") :]]})
    assert found["collective-timeout"].ranks == [6]


def test_ranks_that_all_time_out_are_not_called_alone():
    found = findings(**{"all.log": [_timeout(r, "ALLREDUCE") for r in range(4)]})
    assert "alone" not in found["collective-timeout"].message
