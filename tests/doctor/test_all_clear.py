"""The all-clear contract: "no problems found" only on evidence that the job worked; a log
without that evidence gets `outcome-unproven` naming what is missing, and exit 1; a line
that reports an error nobody knows is `failure-unrecognised`, never info."""

from __future__ import annotations

from tests.doctor.nccl_logs import job, write_per_pod

NCCL_INIT = [
    "node-0:41:58 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 18000 - Init START",
    "node-0:41:58 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE",
    "node-1:41:58 [0] NCCL INFO comm 0x5 rank 1 nranks 2 cudaDev 0 busId 18000 - Init START",
    "node-1:41:58 [0] NCCL INFO comm 0x5 rank 1 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE",
]


def doctor(trainops, tmp_path, lines: list[str]):
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    return trainops("doctor", "nccl", str(log))


def test_a_healthy_job_with_progress_is_all_clear(trainops, tmp_path):
    run = trainops("doctor", "nccl", str(write_per_pod(tmp_path, job(nodes=2, gpus=2))))
    assert run.code == 0 and run.out.rstrip().endswith("no problems found")


def test_each_kind_of_evidence_that_the_job_worked_is_enough(trainops, tmp_path):
    for proof in (
        "[I1201 10:00:00 api.py:933] [default] worker group successfully finished. Waiting "
        "300 seconds for other agents to finish.",
        "node-0:41:58 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 18000 - Destroy "
        "COMPLETE",
        "{'loss': 1.9312, 'grad_norm': 0.52, 'learning_rate': 2e-05, 'epoch': 0.4}",
        "# Avg bus bandwidth    : 182.35",
    ):
        run = doctor(trainops, tmp_path, [*NCCL_INIT, proof])
        assert run.code == 0 and "no problems found" in run.out, (proof, run.out)


def test_init_that_completes_without_anything_after_it_is_not_an_all_clear(trainops, tmp_path):
    run = doctor(trainops, tmp_path, NCCL_INIT)
    assert run.code == 1 and "no problems found" not in run.out
    assert "[outcome-unproven]" in run.out and "hangs after init" in run.out


def test_logs_that_do_not_show_the_job_working_are_a_warning_with_exit_1(trainops, tmp_path):
    # The finding says evidence is missing, not that the job failed (the severity
    # contract), and the exit code still refuses an all-clear.
    run = doctor(trainops, tmp_path, NCCL_INIT)
    assert run.code == 1
    assert "warning: nothing in the logs shows the job worked" in run.out
    assert "error:" not in run.out


def test_init_that_never_completes_says_so(trainops, tmp_path):
    run = doctor(trainops, tmp_path, NCCL_INIT[::2])
    assert run.code == 1 and "no problems found" not in run.out
    assert "never" in run.out or "none logged its completion" in run.out


def test_a_traceback_alone_is_read_not_refused(trainops, tmp_path):
    run = doctor(
        trainops,
        tmp_path,
        [
            "Traceback (most recent call last):",
            '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/c10d.py", line 9',
            "SomeLibraryError: the frobnicator rejected rank 3",
        ],
    )
    assert run.code == 1 and "no problems found" not in run.out
    assert "[failure-unrecognised]" in run.out and "frobnicator" in run.out


def test_an_unknown_nccl_warning_is_unrecognised_never_info(trainops, tmp_path):
    run = doctor(
        trainops,
        tmp_path,
        [*NCCL_INIT, "node-1:41:60 [0] foo.cc:12 NCCL WARN the flux capacitor is discharged"],
    )
    assert run.code == 1
    assert "[failure-unrecognised]" in run.out and "flux capacitor" in run.out


def test_plain_application_output_is_still_refused(trainops, tmp_path):
    run = doctor(trainops, tmp_path, ["epoch 1 loss 2.3", "saving to /ckpt/step-100"])
    assert run.code == 2 and "NCCL_DEBUG=INFO" in run.err


def test_nccl_tests_that_never_print_a_result_is_a_hang(trainops, tmp_path):
    log = tmp_path / "allreduce.log"
    log.write_text(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5\n"
        "#\n# Using devices\n"
        "#  Rank  0 Group  0 Pid  41 on     node-0 device  0 [0x18] NVIDIA H100 80GB HBM3\n"
        "#  Rank  1 Group  0 Pid  41 on     node-1 device  0 [0x18] NVIDIA H100 80GB HBM3\n"
        "#\n#                                                              out-of-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
    )
    run = trainops("doctor", "nccl-tests", str(log))
    assert run.code == 1 and "no problems found" not in run.out
    assert "[nccl-tests-no-results]" in run.out and "node-0, node-1" in run.out


def test_nccl_tests_output_without_results_read_by_doctor_nccl_is_a_hang(trainops, tmp_path):
    run = doctor(
        trainops,
        tmp_path,
        [
            "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5",
            "# Using devices",
            "#  Rank  0 Group  0 Pid  41 on     node-0 device  0 [0x18] NVIDIA A100-SXM4-80GB",
        ],
    )
    assert run.code == 1 and "[outcome-unproven]" in run.out
    assert "printed no result line" in run.out
