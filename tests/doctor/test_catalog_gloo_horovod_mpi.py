"""Gloo's tcp transport, Horovod (its stall inspector, coordinator, shutdown status and
horovodrun) and Open MPI's TCP BTL, BML and out-of-band channel: each catalogued message,
printed as its component prints it, is recognised and raises its finding, on its own and
in a log the doctor reads."""

from __future__ import annotations

import re

import pytest

from tests.doctor.test_message_catalog import _same_text, printed
from trainops.doctor import analysis, catalog
from trainops.doctor.expectation import Expectation
from trainops.doctor.lines import clean
from trainops.doctor.sources import memory_stream
from trainops.model import ERROR, WARNING
from trainops.rules import DOCTOR
from trainops.rules import catalog as rules

GLOO = [e for e in catalog.entries() if e.component == "gloo"]
HOROVOD = [e for e in catalog.entries() if e.component == "horovod"]
# Open MPI's TCP BTL, BML and out-of-band messages (the launch messages came before them).
MPI_TCP = [
    e
    for e in catalog.entries()
    if e.component == "openmpi" and re.search(r"/(btl/tcp|bml/r2|oob/tcp)/", e.source)
]
NEW = GLOO + HOROVOD + MPI_TCP


def test_the_three_components_are_catalogued():
    assert len(GLOO) >= 12 and len(HOROVOD) >= 25 and len(MPI_TCP) >= 12


@pytest.mark.parametrize("entry", NEW, ids=[f"{e.component}:{e.key[:50]}" for e in NEW])
def test_each_message_as_printed_is_recognised_and_names_its_finding(entry):
    assert entry not in catalog.index().unanchored
    for line in (
        printed(entry.key),
        "RuntimeError: " + printed(entry.key),
        "[1,3]<stderr>:" + printed(entry.key),
    ):
        found = catalog.lookup(clean(line).text)
        assert found is not None, line
        assert found == entry or _same_text(entry, found), (line, found.key)
        assert found.finding == entry.finding


def test_each_entry_is_sourced_at_a_pinned_release_and_names_a_doctor_finding():
    known = rules()
    for entry in NEW:
        assert re.search(r"/blob/(v[\d.]+|[0-9a-f]{40})/", entry.source), entry
        assert entry.severity in ("error", "warning"), entry
        assert entry.meaning.strip() and entry.fix.strip(), entry
        assert entry.finding in known and known[entry.finding].category == DOCTOR, entry


def _by_rule(*lines: str) -> dict:
    findings = analysis.diagnose([memory_stream("log", list(lines))], Expectation()).findings
    return {f.rule: f for f in findings}


# Whole lines as the component prints them (with the prefixes of the source named) and what
# the doctor says of each.
LOGS = [
    # Gloo: GLOO_ERROR_MSG's `[file:line] ` prefix, raised by torch as RuntimeError.
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:535] Read error "
        "[10.0.0.2]:41234: Connection reset by peer",
        "nccl-remote-error",
        ERROR,
    ),
    (
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:339] writev "
        "[10.0.0.2]:41234: Broken pipe",
        "nccl-remote-error",
        ERROR,
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:201] Socket "
        "unexpectedly closed [10.0.0.2]:41234",
        "nccl-remote-error",
        ERROR,
    ),
    (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:786] "
        "state_ >= CONNECTED. 1 vs 2. Pair is not connected ([10.0.0.1]:5000 <--> "
        "[10.0.0.2]:5001)",
        "gloo-connect-failed",
        ERROR,
    ),
    (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/socket.cc:142] "
        "rv != -1. -1 vs -1. connect: Network is unreachable",
        "gloo-connect-failed",
        ERROR,
    ),
    (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:127] "
        "bind_rv == 0. Unable to find address for worker-1; bind(2) for [10.0.0.9] failed "
        "with: Cannot assign requested address",
        "socket-ifname-unmatched",
        ERROR,
    ),
    (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:211] "
        "ifa != nullptr. Unable to find interface for: [10.0.0.9]",
        "socket-ifname-unmatched",
        ERROR,
    ),
    # Horovod: its log header (horovod/common/logging.cc), its status texts in exceptions.
    (
        "[2023-06-12 11:21:57.123456: W /tmp/pip-req-build-1/horovod/common/"
        "stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered "
        "or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
        "than 60 seconds. This may indicate that different ranks are trying to submit "
        "different tensors or that only subset of ranks is submitting tensors, which will "
        "cause deadlock. ",
        "collective-straggler",
        WARNING,
    ),
    (
        "[2023-06-12 11:31:57.123456: E /tmp/pip-req-build-1/horovod/common/"
        "stall_inspector.cc:105] One or more tensors were submitted to be reduced, gathered "
        "or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
        "than 60 seconds. This may indicate that different ranks are trying to submit "
        "different tensors or that only subset of ranks is submitting tensors, which will "
        "cause deadlock. ",
        "collective-straggler",
        ERROR,
    ),
    (
        "horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This was "
        "caused by an exception on one of the ranks or an attempt to allreduce, allgather or "
        "broadcast a tensor after one of the ranks finished execution. If the shutdown was "
        "caused by an exception, you should see the exception in the log before the first "
        "shutdown message.",
        "nccl-remote-error",
        ERROR,
    ),
    (
        "horovod.common.exceptions.HorovodInternalError: Mismatched ALLREDUCE tensor shapes: "
        "One rank sent a tensor of shape [4, 5], but another rank sent a tensor of shape "
        "[4, 6].",
        "collective-mismatch",
        ERROR,
    ),
    (
        "RuntimeError: Mismatched operations: One rank did an ALLREDUCE, but another rank did "
        "an ALLGATHER.",
        "collective-mismatch",
        ERROR,
    ),
    ("RuntimeError: could not connect to some hosts via ssh", "horovod-launch-failed", ERROR),
    ("ssh not successful for host worker-1:", "horovod-launch-failed", ERROR),
    (
        "Exception: Unable to find a set of common task-to-task communication interfaces: "
        "[(0, {'lo': [('127.0.0.1', 41235)]}), (1, {})]",
        "horovod-launch-failed",
        ERROR,
    ),
    (
        "horovod.runner.common.util.timeout.TimeoutException: Timed out waiting for tasks to "
        "start. Please check connectivity between servers. You may need to increase the "
        "--start-timeout parameter if you have too many servers. Timeout after 30 seconds.",
        "horovod-launch-failed",
        ERROR,
    ),
    (
        "Exception: horovod does not find an installed MPI.",
        "horovod-launch-failed",
        ERROR,
    ),
    # Open MPI: the first line of each help message (printed between rows of dashes).
    (
        "At least one pair of MPI processes are unable to reach each other for",
        "mpi-peer-unreachable",
        ERROR,
    ),
    (
        "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This",
        "mpi-peer-unreachable",
        WARNING,
    ),
    (
        "An MPI communication peer process has unexpectedly disconnected.  This",
        "nccl-remote-error",
        ERROR,
    ),
    (
        "[node-1][[4321,1],3][btl_tcp_frag.c:242:mca_btl_tcp_frag_recv] "
        "mca_btl_tcp_frag_recv: readv failed: Connection reset by peer (104)",
        "nccl-remote-error",
        ERROR,
    ),
    # Open MPI up to 3.0: a failed connect was one BTL_ERROR line.
    (
        "[u10-1][[38971,1],2][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] "
        "connect() to 172.17.0.1 failed: Connection refused (111)",
        "mpi-peer-unreachable",
        WARNING,
    ),
    # An address several hosts hold (docker0): the process that answered is another one.
    (
        "[u10-1][[39817,1],2][btl_tcp_endpoint.c:638:mca_btl_tcp_endpoint_recv_connect_ack] "
        "received unexpected process identifier [[39817,1],3]",
        "mpi-peer-unreachable",
        WARNING,
    ),
    (
        "[[39817,1],2][btl_tcp_endpoint.c:667:mca_btl_tcp_endpoint_recv_connect_ack] from "
        "node-1 to: node-2 received unexpected process identifier: got [[39817,1],2] "
        "expected [[39817,1],3]",
        "mpi-peer-unreachable",
        WARNING,
    ),
    (
        "WARNING: An invalid value was given for btl_tcp_if_include.  This",
        "mpi-interface-invalid",
        WARNING,
    ),
    (
        "None of the TCP networks specified to be included for out-of-band communications",
        "mpi-interface-invalid",
        ERROR,
    ),
]


@pytest.mark.parametrize("line, rule, severity", LOGS, ids=[r for _, r, _ in LOGS])
def test_a_log_line_of_each_component_raises_its_finding(line, rule, severity):
    found = _by_rule(line)
    assert rule in found, sorted(found)
    assert found[rule].severity == severity


def test_the_stall_inspector_at_warning_level_is_not_an_error():
    found = _by_rule(LOGS[7][0])
    assert found["collective-straggler"].severity == WARNING
    assert not any(f.severity == ERROR for f in found.values() if f.rule != "outcome-unproven")


@pytest.mark.parametrize(
    "line",
    [
        # v0.21 and later: the timeout and the variable that sets it.
        "  what():  [horovod/common/gloo/http_store.cc:57] Wait timeout after 30 seconds for "
        "key(s): 0. You may want to increase the timeout via HOROVOD_GLOO_TIMEOUT_SECONDS",
        # v0.20 and before.
        "  what():  [horovod/common/gloo/http_store.cc:53] [horovod/common/gloo/http_store.cc:53] "
        "Wait timeout for key(s): 0",
    ],
    ids=["v0.28", "v0.20"],
)
def test_horovods_rendezvous_timeout_says_which_timeout_to_raise(line):
    # torch's own Gloo store says "Wait timeout" too; Horovod's HTTP store is the one whose
    # fix is horovodrun's --gloo-timeout-seconds.
    found = _by_rule(line)["store-timeout"]
    assert "--gloo-timeout-seconds" in found.fix
    assert "horovod/common/gloo/http_store.cc" in found.message
