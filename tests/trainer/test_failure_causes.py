"""The failure classifier shared by trainer-launch and the trainer: causes, exit codes and
the most-specific-cause rule, on the lines real workers write (gloo, NCCL, CUDA, torchrun)."""

from __future__ import annotations

import itertools
import signal

import pytest
import torch
import torch.distributed as dist
from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError

from tests.support import REPO
from trainer import failures
from trainer.errors import ExitCode
from trainer.failures import (
    BUG,
    DEVICE_FAULT,
    HANG,
    NCCL_FAULT,
    OUT_OF_MEMORY,
    PEER_LOST,
    RENDEZVOUS,
    TERMINATED,
    TRANSIENT,
    Ending,
    PatternError,
    classify_exception,
    classify_exit,
    classify_output,
    classify_text,
    decide,
    oom_kills,
    run_patterns,
)
from trainer.retries import BudgetError, RetryBudget, budget_from, progress_mark

# What a worker's stderr holds when the failure reaches it; PyTorch prefixes an uncaught
# exception's lines with [rankN]:, torchrun's console copy with [defaultN]:.
GLOO_RESET = (
    "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "pair.cc:537] Read error [127.0.0.1]:17028: Connection reset by peer. This is typically "
    "caused by a remote worker hanging or bugs in the application."
)
LINES = {
    "RuntimeError: CUDA error: an illegal memory access was encountered": DEVICE_FAULT,
    "torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered": DEVICE_FAULT,
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.": DEVICE_FAULT,
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1971, unhandled "
    "cuda error (run with NCCL_DEBUG=INFO for details)": DEVICE_FAULT,
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1971, unhandled "
    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5": NCCL_FAULT,
    "ncclInternalError: Internal check failed.": NCCL_FAULT,
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB": OUT_OF_MEMORY,
    "RuntimeError: CUDA error: out of memory": OUT_OF_MEMORY,
    "RuntimeError: CUDA error: device-side assert triggered": BUG,
    "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
    "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds": HANG,
    "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError:": RENDEZVOUS,
    "torch.distributed.DistNetworkError: The client socket has timed out after 900000ms "
    "while trying to connect to (master-0, 29500).": RENDEZVOUS,
    GLOO_RESET: PEER_LOST,
    "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:38323.": PEER_LOST,
    "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.": PEER_LOST,
    "KeyboardInterrupt": TERMINATED,
}


@pytest.mark.parametrize("line", LINES, ids=lambda line: line[:48])
def test_a_line_a_worker_wrote_names_its_cause(line):
    cause, evidence = classify_text([line])
    assert cause is LINES[line]
    assert evidence == failures.clean(line)


def test_an_unexplained_uncaught_exception_is_a_bug_and_only_the_last_one_counts():
    handled = ["Traceback (most recent call last):", '  File "x.py", line 3', "KeyError: 'a'"]
    final = ["Traceback (most recent call last):", '  File "x.py", line 9', GLOO_RESET]
    # A KeyError logged and handled earlier does not make the survivor of a lost peer a bug.
    assert classify_text([*handled, "retrying", *final])[0] is PEER_LOST
    assert classify_text([*final, "[rank0]: Traceback (most recent call last):",
                          '[rank0]:   File "train.py", line 12, in <module>',
                          '[rank0]:     raise ValueError("bad value")',
                          "[rank0]: ValueError: bad value"])[0] is BUG  # fmt: skip
    # The frames' source lines are not exceptions, even unprefixed.
    assert classify_text(["Traceback (most recent call last):", "  raise X", "OSError: x"]) == (
        BUG,
        "OSError: x",
    )
    assert classify_text(["all good", "step 10 loss 0.3"]) is None


@pytest.mark.parametrize(
    ("status", "lines", "cause", "code"),
    [
        (
            1,
            ["RuntimeError: CUDA error: an illegal memory access was encountered"],
            DEVICE_FAULT,
            203,
        ),
        (1, ["ValueError: bad value"], BUG, 1),  # no traceback header: the status says bug
        (-signal.SIGABRT, ["Traceback (most recent call last):", "ValueError: bad"], BUG, 1),
        (-signal.SIGABRT, [], None, 134),  # nothing written: killed by SIGABRT, retried
        (
            -signal.SIGTERM,
            ["Traceback (most recent call last):", "ValueError: bad"],
            TERMINATED,
            143,
        ),
        # Its own CUDA error was still unwinding when torchrun stopped it: a peer it
        # took down exited first.
        (
            -signal.SIGTERM,
            [
                "[rank1]: Traceback (most recent call last):",
                "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
            ],
            DEVICE_FAULT,
            203,
        ),
        (-signal.SIGTERM, [GLOO_RESET], PEER_LOST, 201),
        (-signal.SIGKILL, [], None, 137),
        (3, ["RuntimeError: CUDA error: misaligned address"], None, 3),  # the program's verdict
        (201, [], PEER_LOST, 201),
        (200, [], HANG, 200),
        (143, [], TERMINATED, 143),
        (137, [], None, 137),  # a shell's report of a child killed by SIGKILL
        (202, ["RuntimeError: CUDA error: misaligned address"], None, 202),  # no signal: a code
    ],
)
def test_exit_status_and_last_lines_give_one_cause(status, lines, cause, code):
    ending = classify_exit(0, status, lines)
    assert ending.cause.code == code
    if cause is not None:
        assert ending.cause is cause
    assert ending.cause.retryable == (code >= 128)


def test_a_sigkill_while_the_memory_limit_killed_a_process_is_out_of_memory():
    assert classify_exit(1, -signal.SIGKILL, [], oom_killed=True).cause is OUT_OF_MEMORY
    assert classify_exit(1, -signal.SIGKILL, [], oom_killed=False).cause.code == 137
    summary = ["  traceback : Signal 9 (SIGKILL) received by PID 2067"]
    assert classify_output(1, summary, oom_killed=True).cause is OUT_OF_MEMORY
    assert classify_output(1, summary, oom_killed=False).cause.code == 137
    assert OUT_OF_MEMORY.code == ExitCode.OUT_OF_MEMORY and not OUT_OF_MEMORY.retryable


def _endings(*causes):
    return [Ending(rank, cause, cause.id) for rank, cause in enumerate(causes)]


def test_the_most_specific_cause_decides_whatever_order_the_ranks_ended_in():
    cases = [
        ((PEER_LOST, DEVICE_FAULT, TERMINATED), 1),  # rank 1's CUDA error caused the rest
        ((BUG, PEER_LOST), 0),
        ((TERMINATED, PEER_LOST), 0),  # a SIGTERMed rank and the peer that lost it
        ((NCCL_FAULT, BUG), 1),  # survivors of a crash report NCCL system errors
        ((HANG, TERMINATED, TERMINATED), 0),
        ((TRANSIENT, BUG), 1),
        ((OUT_OF_MEMORY, DEVICE_FAULT), 0),
        ((failures.program_verdict(2), OUT_OF_MEMORY), 0),
        ((failures.killed_by(signal.SIGKILL), PEER_LOST), 0),
        ((failures.killed_by(signal.SIGKILL), BUG), 1),
    ]
    for causes, expected in cases:
        endings = _endings(*causes)
        for order in itertools.permutations(endings):
            assert decide(order).rank == expected, causes


def test_ties_go_to_the_lowest_rank():
    endings = [Ending(3, BUG, "a"), Ending(1, BUG, "b"), Ending(None, BUG, "c")]
    assert decide(endings).rank == 1
    assert decide(reversed(endings)).rank == 1


def test_a_launchers_output_is_read_per_rank():
    # torchrun's own output: rank 1 raised, rank 0 lost its peer afterwards and printed
    # its traceback last, torchrun SIGTERMed what was left.
    output = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 12, in <module>',
        "[rank1]: ValueError: bad value",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 15, in <module>',
        GLOO_RESET,
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "  traceback : Signal 15 (SIGTERM) received by PID 3101",
    ]
    ending = classify_output(1, output)
    assert (ending.rank, ending.cause) == (1, BUG)
    sigterm = ["[rank0]: Traceback (most recent call last):", GLOO_RESET, output[-1]]
    assert classify_output(1, sigterm).cause is TERMINATED
    assert classify_output(2, output).cause.code == 2  # the launcher's own verdict


def test_exceptions_in_the_trainer_use_the_same_causes():
    assert (
        classify_exception(RuntimeError("CUDA error: an illegal memory access"))[0] is DEVICE_FAULT
    )
    assert classify_exception(ValueError("bad"))[0] is BUG
    assert classify_exception(dist.DistNetworkError("refused"))[0] is RENDEZVOUS
    assert classify_exception(dist.DistBackendError("gloo: something"))[0] is PEER_LOST
    assert classify_exception(RendezvousTimeoutError())[0] is RENDEZVOUS
    assert classify_exception(torch.OutOfMemoryError("CUDA out of memory."))[0] is OUT_OF_MEMORY
    try:
        try:
            raise RuntimeError("CUDA error: unspecified launch failure")
        except RuntimeError as inner:
            raise ValueError("training step failed") from inner
    except ValueError as chained:
        assert classify_exception(chained)[0] is DEVICE_FAULT  # the cause is in the chain


def test_run_patterns_come_first_and_are_checked():
    patterns = run_patterns(
        {"TRAINER_FAILURE_PATTERNS": "transient=S3 SlowDown\n\nbug=CUDA error: misaligned"}
    )
    table = [*patterns, *failures.BUILTIN_PATTERNS]
    assert classify_text(["botocore.exceptions.ClientError: S3 SlowDown"], table)[0] is TRANSIENT
    assert classify_text(["RuntimeError: CUDA error: misaligned address"], table)[0] is BUG
    assert classify_text(["RuntimeError: CUDA error: misaligned address"])[0] is DEVICE_FAULT
    for bad, message in (
        ("retry=x", "unknown cause 'retry'"),
        ("transient", "is not CAUSE=TEXT"),
        ("bug=" + "x" * 300, "longer than"),
    ):
        with pytest.raises(PatternError, match=message):
            run_patterns({"TRAINER_FAILURE_PATTERNS": f"hang=a\n{bad}"})
    with pytest.raises(PatternError, match="line 2"):
        run_patterns({"TRAINER_FAILURE_PATTERNS": "hang=a\nnope"})


def test_lines_are_bounded():
    long = "x" * 1_000_000 + "CUDA error: far away"
    assert classify_text([long]) is None  # only the first MAX_LINE characters are read
    assert len(failures.clean(long)) == failures.MAX_LINE


def test_oom_kills_read_cgroup_v2_and_v1_counters(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n")
    assert oom_kills(v2) == 2
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
    )
    assert oom_kills(v1) == 5
    assert oom_kills(tmp_path / "none") is None


def test_retry_budget_counts_failures_without_progress_and_resets_on_a_new_checkpoint(tmp_path):
    budget = RetryBudget(tmp_path, "0", budget=2)
    assert [budget.count_failure(203, "device-fault").exhausted for _ in range(2)] == [False] * 2
    assert budget.count_failure(203, "device-fault").exhausted  # the third in a row
    (tmp_path / "step-10.123-save.tmp").mkdir()  # a partial save is no progress
    (tmp_path / ".faults").mkdir()
    assert budget.count_failure(203, "device-fault").failures == 4
    (tmp_path / "step-10").mkdir()  # a new checkpoint is
    assert budget.count_failure(203, "device-fault").failures == 1
    other = RetryBudget(tmp_path, "1", budget=2)  # another node counts its own
    assert other.count_failure(201, "peer-lost").failures == 1
    budget.succeeded()
    assert budget.count_failure(203, "device-fault").failures == 1
    assert progress_mark(tmp_path / "missing") == ""


def test_retry_budget_setting_is_checked():
    assert budget_from({}) == 5 and budget_from({"TRAINER_RETRY_BUDGET": "9"}) == 9
    for bad in ("0", "-1", "many"):
        with pytest.raises(BudgetError, match="TRAINER_RETRY_BUDGET"):
            budget_from({"TRAINER_RETRY_BUDGET": bad})


def _restart_table() -> dict[str, tuple[str, str]]:
    """The runbook's restart table: cause cell -> (exit code cell, ExitCode policy cell)."""
    text = (REPO / "docs" / "runbook.md").read_text()
    section = text.split("### What is retried: the restart table", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("Cause", "---"):
            rows[cells[0].strip("`")] = (cells[2], cells[3])
    return rows


def test_the_runbooks_restart_table_matches_the_classifier():
    table = _restart_table()
    for cause in failures.NAMED.values():
        code, policy = table[cause.id]
        assert code == str(cause.code), cause.id
        assert policy.startswith("recreated" if cause.retryable else "fails"), cause.id
    code, policy = table["retry budget spent"]
    assert code == str(int(ExitCode.RETRIES_EXHAUSTED)) and policy.startswith("fails")
    assert table["killed by a signal"][0] == "128+N" and table["the program's own"][0] == "2-127"
    assert len(table) == len(failures.NAMED) + 3


class _Exited(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def test_a_peer_lost_before_training_is_one_line_not_a_traceback(monkeypatch, capfd):
    """A rank that fails while the ranks still connect makes its peers' connect fail:
    their stderr must not read like the cause (the failing rank's own line does)."""
    from trainer import train
    from trainer.cli import read_command_line

    def connecting(self):
        raise RuntimeError(
            "Gloo connectFullMesh failed with [pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:18328. This is typically caused by a remote worker crashing."
        )

    def hard_exit(code):
        raise _Exited(int(code))

    monkeypatch.setattr(train.Trainer, "setup", connecting)
    monkeypatch.setattr(train, "_hard_exit", hard_exit)
    config, _ = read_command_line(["--model", "mlp", "--max-steps", "1"], env={})
    with pytest.raises(_Exited) as exited:
        train.run(config)
    assert exited.value.code == ExitCode.PEER_LOST
    err = capfd.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "another rank went away" in line]
    assert line == (
        "trainer[rank 0] another rank went away before training began (builtins.RuntimeError: "
        "Gloo connectFullMesh failed with [pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:18328): exiting 201"
    )
