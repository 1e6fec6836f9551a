"""`trainops preflight`: check a live cluster against an overlay, or emit the in-cluster job."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import click

from trainops.cli.common import (
    cluster_options,
    emit,
    make_renderer,
    open_cluster,
    project_config,
    save_session,
)
from trainops.doctor.report import table
from trainops.errors import InputError
from trainops.model import Target
from trainops.preflight import FAIL, PASS, WARN, run_checks
from trainops.preflight.fabric import checkpoint_probe, gpudirect_probe
from trainops.profile import tenancy
from trainops.profile.model import load_profile
from trainops.render.discover import display_path, kustomization_file
from trainops.yamlio import dump

PREFLIGHT_TEMPLATE = Path("training") / "preflight"


@click.command("preflight")
@click.argument("overlay", type=click.Path(file_okay=False, exists=True, path_type=Path))
@cluster_options
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--emit-job",
    is_flag=True,
    help="Print the in-cluster preflight job instead of checking: the fabric acceptance "
    "test (nccl-tests all_reduce_perf across the profile's preflight.nodes, every pair of "
    "them with preflight.mode pairwise, against preflight.busbwFloor) where the cluster "
    "runs MPIJobs, else the trainer's all-reduce and NCCL transport check. Pipe it to "
    "kubectl create -f -; read the launcher's log with `trainops doctor nccl-tests -`.",
)
@click.option("--name", help="Job name for --emit-job [default: nccl-preflight-<UTC time>].")
@click.option(
    "--emit-checkpoint-probe",
    is_flag=True,
    help="Print the checkpoint probe instead of checking: a DaemonSet on the GPU nodes that "
    "writes a file per node into the checkpoint claim (kubectl apply -f -; preflight then "
    "checks that every node wrote; delete it afterwards).",
)
@click.option(
    "--emit-gpudirect-probe",
    is_flag=True,
    help="Print the GPUDirect probe instead of checking, for clusters whose hosts carry the "
    "GPU driver (installed: gpu-driver): a DaemonSet on the GPU nodes, Ready on each node "
    "with nvidia_peermem loaded (gpudirect peermem) or the open kernel modules (dmabuf), "
    "which the GPU Operator then does not provide (kubectl apply -f -; preflight then checks "
    "every node; delete it afterwards).",
)
def preflight(
    overlay,
    context,
    recording,
    save_recording,
    fmt,
    emit_job,
    name,
    emit_checkpoint_probe,
    emit_gpudirect_probe,
):
    """Check that a live cluster provides what OVERLAY (overlays/<cluster>) expects.

    Read-only. Checks: namespaces; Multus running; every CRD the overlay and its
    jobs need Established; its NetworkAttachmentDefinitions present (and as in
    Git); the checkpoint claim Bound and ReadWriteMany; enough schedulable nodes
    with the profile's GPU product label, GPUs and RDMA devices allocatable; the
    GPU nodes Ready with every topology label; the RDMA resource advertised; net1
    addresses inside ipRange; a checkpoint write from every GPU node (the probe);
    the UFM secret for a partition key; on hosts that carry the GPU driver,
    nvidia_peermem or the open kernel modules on every GPU node (the GPUDirect
    probe); Kueue/Volcano queues present; the GPU Operator's ClusterPolicy ready.

    Exit codes: 0 every check passed (warnings allowed), 1 a check failed,
    2 unreadable input or no cluster.

    \b
    Examples:
      trainops preflight overlays/prod-roce --context prod-roce
      trainops preflight overlays/prod-roce --emit-job | kubectl create -f -
    """
    if kustomization_file(overlay) is None or not (overlay / "cluster.yaml").is_file():
        raise InputError(
            "not a cluster overlay (needs cluster.yaml and a kustomization)", str(overlay)
        )
    if emit_checkpoint_probe:
        emit(dump(checkpoint_probe(load_profile(overlay / "cluster.yaml"))), None)
        return
    if emit_gpudirect_probe:
        profile = load_profile(overlay / "cluster.yaml")
        probe = gpudirect_probe(profile)
        if probe is None:
            raise InputError(
                "nothing to probe: GPUDirect needs nothing of the hosts here (the GPU "
                "Operator's driver container provides its modules, or gpudirect is none)",
                str(overlay / "cluster.yaml"),
            )
        emit(dump(probe), None)
        return
    renderer, _ = make_renderer(project_config())
    if emit_job:
        emit(_job_yaml(renderer, overlay, name), None)
        return
    cluster = open_cluster(context, recording, save_recording)
    profile = load_profile(overlay / "cluster.yaml")
    [platform] = renderer.render([Target("kustomization", str(overlay))])
    checks = run_checks(cluster, profile, platform.documents)
    save_session(cluster, save_recording)
    counts = {status: sum(c.status == status for c in checks) for status in (PASS, WARN, FAIL)}
    if fmt == "json":
        data = {
            "overlay": display_path(overlay),
            "summary": counts,
            "checks": [asdict(c) for c in checks],
        }
        click.echo(json.dumps(data, indent=2))
    else:
        rows = [("check", "status", "detail")]
        rows += [(c.check, c.status.upper(), c.detail) for c in checks]
        click.echo("\n".join(table(rows)))
        fixes = [c for c in checks if c.status != PASS and c.fix]
        if fixes:
            click.echo("")
            for c in fixes:
                click.echo(f"{c.check}: {c.fix}")
        click.echo(f"\n{counts[PASS]} passed, {counts[WARN]} warnings, {counts[FAIL]} failed")
    if counts[FAIL]:
        raise SystemExit(1)


def _job_yaml(renderer, overlay: Path, name: str | None) -> str:
    template = overlay / PREFLIGHT_TEMPLATE
    if kustomization_file(template) is None:
        raise InputError(f"the overlay has no {PREFLIGHT_TEMPLATE} job template", str(overlay))
    [result] = renderer.render([Target("kustomization", str(template))])
    jobs = [d for d in result.documents if d.kind in ("MPIJob", "PyTorchJob", "TrainJob")]
    if not jobs:
        raise InputError(
            f"{PREFLIGHT_TEMPLATE} renders no MPIJob, PyTorchJob or TrainJob", str(overlay)
        )
    job = jobs[0].obj
    job["metadata"]["name"] = name or time.strftime("nccl-preflight-%Y%m%d%H%M%S", time.gmtime())
    annotations = job["metadata"].get("annotations") or {}
    for key in [k for k in annotations if k.startswith("argocd.argoproj.io/")]:
        del annotations[key]  # a job created by hand is not a sync hook
    # The namespace admits nothing between pods but what a job's own policy opens.
    policy = tenancy.job_network_policy(
        jobs[0].kind, job["metadata"]["name"], job["metadata"].get("namespace")
    )
    return dump(job) + "---\n" + dump(policy)
