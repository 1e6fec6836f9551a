"""`trainops plan`: capacity, fabric and checkpoint planning for a training run."""

from __future__ import annotations

import json
import math

import click

from trainops.errors import InputError
from trainops.plan import (
    CHECKPOINT_BYTES_PER_PARAM,
    FAILURE_RATES,
    PEAK_FLOPS,
    Plan,
    PlanInputs,
    default_failure_rates,
    make_plan,
    parse_amount,
)


def _amount(option: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = parse_amount(value)
    except ValueError as error:
        raise InputError(f"{option}: {error}") from None
    if number <= 0:
        raise InputError(f"{option}: must be positive, not {value!r}")
    return number


def _rates(estimate: str, overrides: tuple[str, ...]) -> dict[str, float]:
    rates = default_failure_rates(estimate)
    for item in overrides:
        name, eq, value = item.partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = -1.0
        if not eq or not name or rate < 0:
            raise InputError(
                f"--failure-rate {item!r}: expected NAME=RATE (failures per 1000 "
                f"GPU-hours), e.g. nic=0.3; known names: {', '.join(FAILURE_RATES)}"
            )
        rates[name] = rate
    return rates


@click.command("plan")
@click.option("--params", help="Model parameters, e.g. 70B.")
@click.option("--tokens", help="Training tokens, e.g. 2T (FLOPs = 6 x params x tokens).")
@click.option("--flops", help="Total training FLOPs instead of params x tokens, e.g. 6.4e23.")
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="GPUs in the job.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--gpu", type=click.Choice(list(PEAK_FLOPS)), help="GPU model: sets the peak dense BF16 FLOP/s."
)
@click.option("--peak-flops", help="Peak FLOP/s of one GPU instead of --gpu, e.g. 300e12.")
@click.option(
    "--mfu",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=0.4,
    show_default=True,
    help="Expected model FLOPs utilisation (0-1).",
)
@click.option(
    "--batch-tokens",
    help="Global batch in tokens per step, e.g. 4M: enables the per-step communication check.",
)
@click.option(
    "--grad-bytes",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Bytes per gradient value (2 for BF16).",
)
@click.option(
    "--node-bandwidth",
    type=click.FloatRange(min=0, min_open=True),
    help="Training fabric per node in Gbit/s, e.g. 3200 for 8 x 400G.",
)
@click.option(
    "--checkpoint-size",
    help="Checkpoint bytes, e.g. 980G [default: "
    f"{CHECKPOINT_BYTES_PER_PARAM} bytes per parameter].",
)
@click.option(
    "--storage-bandwidth",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Checkpoint write bandwidth in GB/s.",
)
@click.option(
    "--restart-minutes",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Time from a failure to training again.",
)
@click.option(
    "--failure-estimate",
    type=click.Choice(["low", "mid", "high"]),
    default="mid",
    show_default=True,
    help="Which end of the reference failure-rate ranges to use.",
)
@click.option(
    "--failure-rate",
    multiple=True,
    metavar="NAME=RATE",
    help="Override one failure class (per 1000 GPU-hours); repeatable.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def plan(
    params,
    tokens,
    flops,
    gpus,
    gpus_per_node,
    gpu,
    peak_flops,
    mfu,
    batch_tokens,
    grad_bytes,
    node_bandwidth,
    checkpoint_size,
    storage_bandwidth,
    restart_minutes,
    failure_estimate,
    failure_rate,
    fmt,
):
    """Estimate a run: wall-clock days, fabric load per step, MTBF, checkpoint
    interval (Young/Daly), expected ETTR and the restart budget.

    \b
    Examples:
      trainops plan --flops 6.4e23 --gpus 2048 --peak-flops 300e12 --mfu 0.5
      trainops plan --params 70B --tokens 2T --gpus 1024 --gpu H100-SXM \\
        --batch-tokens 4M --node-bandwidth 3200 --storage-bandwidth 40

    The failure rates default to the reference table (per 1000 GPU-hours:
    recoverable Xid 2-5, Xid 79 0.5-1, NIC 0.2-0.5, OOM 1-3, kernel panic
    0.1-0.3, disk 0.05-0.1); replace them with your fleet's with --failure-rate.
    Formulas: docs/runbook.md#planning.
    """
    if (gpu is None) == (peak_flops is None):
        raise InputError("give exactly one of --gpu and --peak-flops")
    inputs = PlanInputs(
        gpus=gpus,
        peak_flops=PEAK_FLOPS[gpu] if gpu else _amount("--peak-flops", peak_flops),
        mfu=mfu,
        params=_amount("--params", params),
        tokens=_amount("--tokens", tokens),
        flops=_amount("--flops", flops),
        gpus_per_node=gpus_per_node,
        batch_tokens=_amount("--batch-tokens", batch_tokens),
        grad_bytes=grad_bytes,
        node_bandwidth_gbps=node_bandwidth,
        checkpoint_bytes=_amount("--checkpoint-size", checkpoint_size),
        storage_gbytes_per_s=storage_bandwidth,
        restart_seconds=restart_minutes * 60,
        failure_rates=_rates(failure_estimate, failure_rate),
    )
    if inputs.flops is not None and inputs.tokens is not None:
        raise InputError("--flops replaces --params x --tokens: give one or the other")
    try:
        result = make_plan(inputs)
    except ValueError as error:
        raise InputError(str(error)) from None
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2, default=_json_number))
    else:
        click.echo(render_text(result), nl=False)


def _json_number(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _bytes(value: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "never (no progress)"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.1f} minutes"
    return f"{seconds:.1f} s"


def render_text(plan: Plan) -> str:
    c, m, r, p = plan.compute, plan.communication, plan.reliability, plan.inputs
    lines = [
        "compute",
        f"  training FLOPs             {c['training_flops']:.3g}",
        f"  GPUs x peak x MFU          {c['gpus']} x {c['peak_flops_per_gpu'] / 1e12:g} TFLOP/s "
        f"x {c['mfu']:.0%}",
        f"  wall clock (no failures)   {c['days']:.1f} days, {c['gpu_hours']:,.0f} GPU-hours",
        f"  one GPU at peak            {c['single_gpu_years_at_peak']:.1f} years",
    ]
    if m:
        lines += [
            "communication (data parallel, ring all-reduce)",
            f"  gradient per step          {_bytes(m['gradient_bytes'])}",
            f"  all-reduce per rank        {_bytes(m['ring_allreduce_bytes_per_rank'])}"
            f"  (2(N-1)/N x gradient, N={p.gpus})",
            f"  across nodes, per node     {_bytes(m['internode_bytes_per_node'])}"
            f"  ({m['nodes']} nodes)",
        ]
        if "steps" in m:
            lines += [
                f"  steps                      {m['steps']:,.0f}",
                f"  compute per step           {_duration(m['compute_seconds_per_step'])}",
                f"  fabric to keep up          {m['node_bandwidth_needed_gbps']:,.0f} Gbit/s"
                " per node",
            ]
        if "comm_seconds_per_step" in m:
            lines.append(
                f"  all-reduce per step        {_duration(m['comm_seconds_per_step'])}"
                f" at {p.node_bandwidth_gbps:g} Gbit/s per node"
            )
    rates = ", ".join(f"{k} {v:g}" for k, v in r["failure_rates_per_1000_gpu_hours"].items())
    lines += [
        "reliability",
        f"  failure rates              {rates} (per 1000 GPU-hours)",
        f"  job MTBF                   {_duration(r['mtbf_hours'] * 3600)}",
    ]
    if "checkpoint_bytes" in r:
        lines += [
            f"  checkpoint                 {_bytes(r['checkpoint_bytes'])}, written in "
            f"{_duration(r['checkpoint_write_seconds'])} at {p.storage_gbytes_per_s:g} GB/s",
            f"  checkpoint every           {_duration(r['checkpoint_interval_seconds'])}"
            "  (Young/Daly: sqrt(2 x write time x MTBF))",
            f"  expected ETTR              {r['expected_ettr']:.0%}",
            f"  wall clock with failures   {_duration(r['wall_clock_days'] * 86400)}",
            f"  expected failures          {r['expected_failures']:,.1f}",
        ]
        if r["restart_budget"] is not None:
            lines.append(
                f"  restart budget             backoffLimit (or elasticPolicy.maxRestarts)"
                f" >= {r['restart_budget']}"
            )
    if plan.warnings:
        lines += ["warnings", *(f"  - {w}" for w in plan.warnings)]
    return "\n".join(lines) + "\n"
