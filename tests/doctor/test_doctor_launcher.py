"""`trainops doctor` reads what trainer-launch concluded: the hang report's culprit and the
verdict on how the workers ended. The lines are made by the trainer's own code
(`trainer.hangreport.render`, `trainer.launch.exit_code`), so a change of wording there
fails here."""

from __future__ import annotations

import json

import pytest

from trainer import hangreport
from trainer.failures import DEVICE_FAULT, Ending, program_verdict
from trainer.hangreport import FIRED, Attempt, RankState
from trainer.launch import exit_code
from trainer.retries import RetryBudget


def report_lines(states, silent=(), first=None) -> list[str]:
    attempt = Attempt("0", first or {"rank": 0, "step": 4}, states, list(silent), {})
    return [f"trainer-launch: {line}" for line in hangreport.render(attempt)]


def verdict_lines(capsys, ending: Ending) -> list[str]:
    exit_code(ending, None)
    return capsys.readouterr().err.splitlines()


def doctor(trainops, tmp_path, lines: list[str]) -> tuple[int, dict]:
    log = tmp_path / "pod.log"
    log.write_text("\n".join(lines) + "\n")
    run = trainops("doctor", "nccl", "--format", "json", str(log))
    assert run.code in (0, 1), run.err
    return run.code, json.loads(run.out)


def finding(report: dict, rule: str) -> dict:
    (found,) = [f for f in report["findings"] if f["rule"] == rule]
    return found


def test_the_hang_reports_culprit_is_named(trainops, tmp_path):
    lines = report_lines(
        [
            RankState(0, 4, "gradient all-reduce", FIRED),
            RankState(1, 4, None, "SIGTERM"),
            RankState(2, 4, "gradient all-reduce", "SIGTERM"),
        ]
    )
    code, report = doctor(trainops, tmp_path, lines)
    found = finding(report, "hang-culprit")
    assert code == 1 and found["ranks"] == [1]
    assert found["message"] == (
        "the hang report names the culprit: rank 1, outside any collective, while ranks 0, 2 "
        "wait for it in one; the watchdog of rank 0 fired first, at step 4"
    )


@pytest.mark.parametrize(
    ("states", "silent", "ranks", "words"),
    [
        # Stuck in native code holding the GIL: it wrote no report.
        ([RankState(0, 9, "gradient all-reduce", FIRED)], [1], [1], "wrote no report"),
        # Its own watchdog fired outside any collective: stuck in its own work.
        ([RankState(1, 9, None, FIRED)], [], [1], "stuck in its own work"),
        # Everyone here waits: the culprit runs on another node.
        ([RankState(0, 9, "metrics all-reduce", FIRED)], [], [], "not on this node"),
    ],
)
def test_every_form_of_the_reports_verdict_is_read(
    trainops, tmp_path, states, silent, ranks, words
):
    _, report = doctor(trainops, tmp_path, report_lines(states, silent))
    found = finding(report, "hang-culprit")
    assert found["ranks"] == ranks and words in found["message"]


def test_the_launchers_verdict_is_a_finding(trainops, tmp_path, capsys):
    evidence = "RuntimeError: CUDA error: an illegal memory access was encountered"
    lines = verdict_lines(capsys, Ending(1, DEVICE_FAULT, evidence))
    _, report = doctor(trainops, tmp_path, lines)
    found = finding(report, "launcher-exit")
    assert found["severity"] == "warning" and found["ranks"] == [1]  # retried
    assert found["message"] == (
        f"trainer-launch exited 203 (GPU, driver or NCCL fault: retried): rank 1: "
        f"device-fault ({evidence})"
    )
    lines = verdict_lines(capsys, Ending(0, program_verdict(2), "exit code 2"))
    code, report = doctor(trainops, tmp_path, lines)
    found = finding(report, "launcher-exit")
    assert code == 1 and found["severity"] == "error"
    assert "exited 2 (bad arguments, data or environment: not retried)" in found["message"]
    # The quoted CUDA error is the launcher's verdict, not a second CUDA error.
    assert not any(f["rule"] == "cuda-fatal" for f in report["findings"])


def test_a_spent_retry_budget_is_read_as_the_failure_it_is(trainops, tmp_path, capsys):
    """A retryable verdict followed by the budget's line: the launcher exited 6 and the job
    fails, so the finding is an error with exit 6, not a retried fault (a warning)."""
    evidence = "RuntimeError: CUDA error: an illegal memory access was encountered"
    (tmp_path / "ckpt").mkdir()
    budget = RetryBudget(tmp_path / "ckpt", "0", 1)
    ending = Ending(1, DEVICE_FAULT, evidence)
    assert exit_code(ending, budget) == 203  # the first failure is retried
    capsys.readouterr()
    assert exit_code(ending, budget) == 6
    lines = capsys.readouterr().err.splitlines()
    code, report = doctor(trainops, tmp_path, lines)
    found = finding(report, "launcher-exit")
    assert code == 1 and found["severity"] == "error" and found["ranks"] == [1], found
    assert found["message"].startswith(
        "trainer-launch exited 6 (not retried): rank 1: device-fault (" + evidence + ") was "
        "retryable failure 2 in a row without a new checkpoint in "
    ), found
