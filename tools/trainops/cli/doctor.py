"""`trainops doctor`: diagnose a slow, hanging or failed training job from its evidence."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from trainops.cli.common import (
    FiniteFloatRange,
    cluster_options,
    make_renderer,
    open_cluster,
    project_config,
    save_session,
)
from trainops.doctor import nccl_tests, report
from trainops.doctor.analysis import NO_EVIDENCE, UNPROVEN, Diagnosis, diagnose
from trainops.doctor.expectation import Expectation, from_overlay
from trainops.doctor.findings import DoctorFinding
from trainops.doctor.job import NO_NCCL_EVIDENCE, gather, pod_findings
from trainops.doctor.sources import LogStream, memory_stream, open_sources
from trainops.errors import InputError
from trainops.model import ERROR


def expectation_options(command):
    command = click.option(
        "--overlay",
        type=click.Path(file_okay=False, exists=True, path_type=Path),
        help="The cluster overlay the job ran on: expectations come from its profile and "
        "job template, and fixes name the profile key to change.",
    )(command)
    return click.option(
        "--expect",
        type=click.Choice(["ib", "socket"]),
        help="The transport NCCL should use (default: from --overlay, else not checked).",
    )(command)


def format_option(command):
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help='json prints a JSON document, also on errors ({"error": ...}).',
    )(command)


def json_errors(command):
    """With --format json, unreadable input still prints JSON (and exits 2)."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            if kwargs.get("fmt") == "json":
                click.echo(report.error_json(str(exc)), nl=False)
            raise

    return run


def build_expectation(overlay: Path | None, expect: str | None) -> Expectation:
    expectation = Expectation()
    if overlay is not None:
        renderer, _ = make_renderer(project_config())
        expectation = from_overlay(overlay, renderer)
    if expect:
        expectation.transport = expect
    return expectation


def _exit(findings: list) -> None:
    if any(f.severity == ERROR or f.rule == UNPROVEN.id for f in findings):
        raise SystemExit(1)


@click.group()
def doctor() -> None:
    """Diagnose a slow, hanging or failed training job from its evidence.

    Exit codes: 0 no error found (and, for `nccl`, the logs show the job worked),
    1 error findings or (`outcome-unproven`, a warning) logs that do not show the job
    worked, 2 unreadable input.
    """


@doctor.command("nccl")
@click.argument("logs", nargs=-1, required=True)
@expectation_options
@format_option
@json_errors
def nccl(logs, overlay, expect, fmt):
    """Read every rank's NCCL, PyTorch and node logs and say what is wrong.

    LOGS are files, directories (every file below), gzip files, FIFOs and process
    substitution (<(kubectl logs ...)), or - for stdin; ranks may be one per file or
    interleaved. Understood: NCCL output from 2.4 to 2.30 (with or without
    host:pid:tid, file:line, timestamps), aws-ofi-nccl, PyTorch's ProcessGroupNCCL,
    c10d store, torchrun and Gloo errors, CUDA errors, nccl-tests output, the NVIDIA
    driver's kernel log (Xid), PyTorch Flight Recorder dumps in JSON, and what
    collection adds (kubectl --prefix/--timestamps, JSON lines of Docker, fluentd,
    CloudWatch and Loki, srun -l, mpirun --tag-output, [rankN]:, Ray's prefixes,
    timestamps, ANSI colour, Markdown, lines wrapped in a paste). A restart (a new
    torchrun attempt, a process starting again, a '(previous)' log) starts a new
    attempt; findings say which.

    Each finding names the cause with its evidence lines and a fix; messages the
    checks do not read in depth are named from the message catalog
    (docs/doctor-messages.md). A job that failed without a recognised cause, or a
    line that reports an error nobody knows, gets `failure-unrecognised` pointing at
    it. "no problems found" only when the logs show the job worked (NCCL init
    completed and training progressing, torchrun's group finishing, NCCL destroying
    its communicators, nccl-tests' summary); otherwise `outcome-unproven` says what
    the logs lack, with exit code 1. `trainops policies explain ID` explains any
    finding id.

    \b
    Example:
      kubectl logs -n training -l training.kubeflow.org/job-name=llama --prefix \\
        --tail=-1 > llama.log
      trainops doctor nccl llama.log --overlay overlays/prod-roce
    """
    diagnosis = diagnose(open_sources(logs), build_expectation(overlay, expect))
    if fmt == "json":
        click.echo(report.to_json(diagnosis), nl=False)
    else:
        click.echo(report.text(diagnosis), nl=False)
    _exit(diagnosis.findings)


@doctor.command("nccl-tests")
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "--min-busbw",
    type=FiniteFloatRange(min=0),
    help="Bus bandwidth floor in GB/s (the largest message of each run must reach it).",
)
@click.option(
    "--slow-fraction",
    type=FiniteFloatRange(0, 1, min_open=True),
    default=0.8,
    show_default=True,
    help="A sweep's run is slow below this fraction of the sweep's reference bandwidth "
    "(the median of its better half).",
)
@format_option
@json_errors
def nccl_tests_command(logs, min_busbw, slow_fraction, fmt):
    """Read nccl-tests output (all_reduce_perf ...) and name slow or failing nodes and links.

    LOGS are nccl-tests outputs: one run per file or several in one, or a pairwise
    sweep's summary (`nodeA,nodeB  busbw` lines). Per run: its nodes, the bus
    bandwidth of its largest message, wrong values and failures. Across a sweep of
    three or more runs: a node slow in every run with it (slow node), two nodes fast
    elsewhere but slow together (slow link). NCCL lines in the output are diagnosed
    as by `doctor nccl`, so a failed run's cause is named too.

    \b
    Example:
      trainops doctor nccl-tests sweep/*.log --min-busbw 180
    """
    sources = [
        memory_stream(s.name, list(s.open_lines())) if isinstance(s, LogStream) else s
        for s in open_sources(logs)
    ]
    runs = nccl_tests.read_runs(sources)
    try:
        causes = diagnose(sources, Expectation()).findings
    except InputError:
        causes = []
    if not runs and not causes:
        raise InputError("no nccl-tests results or NCCL lines in the input")
    found = nccl_tests.analyse(runs, min_busbw, slow_fraction)
    all_findings = found + [c for c in causes if c.rule != "failure-unrecognised" or not found]
    if fmt == "json":
        click.echo(
            report.json_document(
                {
                    "runs": [r.to_dict() for r in runs],
                    "findings": [report.finding_dict(f) for f in all_findings],
                }
            ),
            nl=False,
        )
    else:
        rows = [("run", "nodes", "ranks", "size", "busbw GB/s", "wrong", "failed")]
        for run in runs:
            rows.append(
                (
                    run.source,
                    ",".join(run.nodes) or "-",
                    str(run.ranks or "-"),
                    str(run.size or "-"),
                    "-" if run.busbw is None else f"{run.busbw:g}",
                    str(run.wrong),
                    "yes" if run.failures else "no",
                )
            )
        lines = [*report.table(rows), "", *report.plain_findings(all_findings)]
        click.echo("\n".join(lines) + "\n", nl=False)
    _exit(all_findings)


def _job_diagnosis(logs, expectation: Expectation) -> Diagnosis | None:
    try:
        return diagnose([memory_stream(name, lines) for name, lines in logs], expectation)
    except InputError as exc:
        if str(exc) != NO_EVIDENCE:
            raise
        return None


NO_JOB = "no PyTorchJob, MPIJob, TFJob, TrainJob or JobSet of that name (its pods alone)"


@doctor.command("job")
@click.argument("name")
@click.option("-n", "--namespace", default="training", show_default=True)
@cluster_options
@expectation_options
@format_option
@json_errors
def job(name, namespace, context, recording, save_recording, overlay, expect, fmt):
    """Gather a training job's pods, events and logs, then diagnose them.

    Finds the pods by their controller's job label (PyTorchJob, MPIJob, TrainJob
    through its JobSet, JobSet); reports OOM kills,
    evictions, unschedulable GPU or RDMA requests, image pull errors, crash loops
    (with what the trainer's exit code means) and restarts; then reads every
    container's log (and the previous run's, after a restart, as an earlier
    attempt) with the analysis of `trainops doctor nccl`. Read-only.

    \b
    Example:
      trainops doctor job llama-sft-0412 -n training --overlay overlays/prod-roce
    """
    cluster = open_cluster(context, recording, save_recording)
    evidence = gather(cluster, name, namespace)
    save_session(cluster, save_recording)
    expectation = build_expectation(overlay, expect)
    rdma = expectation.profile.get("rdmaResource") or None
    findings: list[DoctorFinding] = pod_findings(evidence, rdma)
    diagnosis = _job_diagnosis(evidence.logs, expectation)
    if diagnosis is None:
        findings.append(
            DoctorFinding(
                NO_NCCL_EVIDENCE.id,
                NO_NCCL_EVIDENCE.severity,
                NO_EVIDENCE[0].upper() + NO_EVIDENCE[1:],
                NO_NCCL_EVIDENCE.fix,
            )
        )
        diagnosis = Diagnosis([], [], False, [])
    diagnosis.findings = findings + diagnosis.findings
    pods = [
        {
            "name": p.name,
            "role": p.role,
            "phase": p.phase,
            "node": p.node,
            "restarts": p.restarts,
            "state": p.state,
        }
        for p in evidence.pods
    ]
    if fmt == "json":
        extra = {
            "job": {"name": name, "namespace": namespace, "condition": evidence.condition},
            "pods": pods,
        }
        click.echo(report.to_json(diagnosis, extra), nl=False)
    else:
        header = [
            f"job {namespace}/{name}: {evidence.condition or NO_JOB}",
            *report.table(
                [("pod", "role", "phase", "node", "restarts", "state")]
                + [
                    tuple(str(p[k]) for k in ("name", "role", "phase", "node", "restarts", "state"))
                    for p in pods
                ]
            ),
            "",
        ]
        click.echo(report.text(diagnosis, header), nl=False)
    _exit(diagnosis.findings)
