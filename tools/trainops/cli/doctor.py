"""`trainops doctor`: diagnose a slow or hanging training job from its evidence."""

from __future__ import annotations

from pathlib import Path

import click

from trainops.cli.common import (
    cluster_options,
    make_renderer,
    open_cluster,
    project_config,
    save_session,
)
from trainops.doctor import report
from trainops.doctor.analysis import DoctorFinding, Expectation, analyse, records
from trainops.doctor.expectation import from_overlay
from trainops.doctor.job import gather, pod_findings
from trainops.doctor.nccl_log import parse
from trainops.doctor.sources import log_streams
from trainops.errors import InputError
from trainops.model import ERROR, INFO

NO_EVIDENCE = (
    "no NCCL or PyTorch distributed lines in the logs: run the job with "
    "NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET"
)


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


def build_expectation(overlay: Path | None, expect: str | None) -> Expectation:
    expectation = Expectation()
    if overlay is not None:
        renderer, _ = make_renderer(project_config())
        expectation = from_overlay(overlay, renderer)
    if expect:
        expectation.transport = expect
    return expectation


def diagnose(streams, expectation: Expectation):
    processes = parse(streams)
    if not processes:
        raise InputError(NO_EVIDENCE)
    recs = records(processes)
    return recs, analyse(recs, expectation)


@click.group()
def doctor() -> None:
    """Diagnose a slow or hanging training job from its evidence.

    Exit codes: 0 no error found, 1 error findings, 2 unreadable input.
    """


@doctor.command("nccl")
@click.argument("logs", nargs=-1, required=True)
@expectation_options
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def nccl(logs, overlay, expect, fmt):
    """Read NCCL and PyTorch logs of every rank and say what is wrong.

    LOGS are files, directories (every file below) or - for stdin; ranks may be
    one per file or interleaved (NCCL's host:pid prefixes tell them apart). Per
    rank: rank and nranks, init started/completed, transport (IB, RoCE, Socket
    or a plugin), GPUDirect RDMA (/GDRDMA channels), interfaces, NCCL variables
    echoed from the environment, warnings and watchdog timeouts. Across ranks:
    socket fallback on some ranks, ranks that never completed init, world-size
    disagreement, missing ranks, init stragglers, collective timeouts (and the
    ranks that did not time out), HCA and interface mismatches.

    \b
    Example:
      kubectl logs -n training -l training.kubeflow.org/job-name=llama --prefix \\
        --tail=-1 > llama.log
      trainops doctor nccl llama.log --overlay overlays/prod-roce
    """
    recs, findings = diagnose(log_streams(logs), build_expectation(overlay, expect))
    if fmt == "json":
        click.echo(report.to_json(recs, findings), nl=False)
    else:
        click.echo(report.text(recs, findings), nl=False)
    if any(f.severity == ERROR for f in findings):
        raise SystemExit(1)


@doctor.command("job")
@click.argument("name")
@click.option("-n", "--namespace", default="training", show_default=True)
@cluster_options
@expectation_options
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def job(name, namespace, context, recording, save_recording, overlay, expect, fmt):
    """Gather a training job's pods, events and logs, then diagnose them.

    Finds the pods by the training operator's job-name label; reports OOM kills,
    evictions, unschedulable GPU or RDMA requests, image pull errors, crash loops
    (with what the trainer's exit code means) and restarts; then reads every
    container's log (and the previous run's, after a restart) with the NCCL
    analysis of `trainops doctor nccl`. Read-only.

    \b
    Example:
      trainops doctor job llama-sft-0412 -n training --overlay overlays/prod-roce
    """
    cluster = open_cluster(context, recording, save_recording)
    evidence = gather(cluster, name, namespace)
    save_session(cluster, save_recording)
    expectation = build_expectation(overlay, expect)
    rdma = expectation.profile.get("rdmaResource") or None
    findings = pod_findings(evidence, rdma)
    processes = parse(evidence.logs)
    recs = records(processes)
    if processes:
        findings += analyse(recs, expectation)
    else:
        findings.append(
            DoctorFinding(
                "no-nccl-evidence",
                INFO,
                NO_EVIDENCE[0].upper() + NO_EVIDENCE[1:],
                "Set NCCL_DEBUG=INFO in the job template (it is by default).",
            )
        )
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
        click.echo(report.to_json(recs, findings, extra), nl=False)
    else:
        header = [
            f"job {namespace}/{name}: {evidence.condition or 'no training-operator job found'}",
            *report.table(
                [("pod", "role", "phase", "node", "restarts", "state")]
                + [
                    tuple(str(p[k]) for k in ("name", "role", "phase", "node", "restarts", "state"))
                    for p in pods
                ]
            ),
            "",
        ]
        click.echo(report.text(recs, findings, header), nl=False)
    if any(f.severity == ERROR for f in findings):
        raise SystemExit(1)
