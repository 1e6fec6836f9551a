"""`trainops plan`: capacity, fabric and checkpoint planning for a training run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from trainops.cli.common import FiniteFloatRange
from trainops.errors import InputError
from trainops.planning.estimate import (
    CHECKPOINT_BYTES_PER_PARAM,
    PEAK_FLOPS,
    Plan,
    PlanInputs,
    make_plan,
    parse_amount,
)
from trainops.planning.failures import MODELS, FailureModel


def _amount(option: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = parse_amount(value)
    except ValueError as error:
        raise InputError(f"{option}: {error}") from None
    if number <= 0:
        raise InputError(f"{option}: must be positive, not {value!r}")
    if not math.isfinite(number):
        raise InputError(f"{option}: {value!r} is beyond the range of a float")
    return number


def _rates(overrides: tuple[str, ...]) -> dict[str, float]:
    rates = {}
    for item in overrides:
        name, eq, value = item.partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = -1.0
        if not eq or not name or not 0 <= rate < math.inf:
            raise InputError(
                f"--failure-rate {item!r}: expected NAME=RATE (failures per 1000 "
                "GPU-hours), e.g. gpu=0.02"
            )
        rates[name] = rate
    return rates


def _failures(
    name: str, profile_rates: dict[str, float], overrides: dict[str, float]
) -> FailureModel:
    try:
        return MODELS[name].with_rates({**profile_rates, **overrides})
    except ValueError as error:
        raise InputError(str(error)) from None


# GPU models by the product label a profile names (nvidia.com/gpu.product values).
_PRODUCTS = (("H100", "PCIE", "H100-PCIe"), ("H100", "", "H100-SXM"), ("H200", "", "H200"),
             ("B200", "", "B200"), ("A100", "", "A100"))  # fmt: skip


def _gpu_of(product: str) -> str | None:
    upper = product.upper()
    for name, qualifier, model in _PRODUCTS:
        if name in upper and qualifier in upper:
            return model
    return None


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
    type=FiniteFloatRange(min=0, max=1, min_open=True),
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
    type=FiniteFloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Bytes per gradient value (2 for BF16).",
)
@click.option(
    "--node-bandwidth",
    type=FiniteFloatRange(min=0, min_open=True),
    help="Training fabric per node in Gbit/s, e.g. 3200 for 8 x 400G.",
)
@click.option(
    "--checkpoint-size",
    help="Checkpoint bytes, e.g. 980G [default: "
    f"{CHECKPOINT_BYTES_PER_PARAM} bytes per parameter].",
)
@click.option(
    "--storage-bandwidth",
    type=FiniteFloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Checkpoint write bandwidth in GB/s.",
)
@click.option(
    "--restart-minutes",
    type=FiniteFloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Time from a failure to training again.",
)
@click.option(
    "--failure-model",
    type=click.Choice(sorted(MODELS)),
    default="llama3",
    show_default=True,
    help="Published fleet data the failure rates come from: llama3 (Meta's Llama 3 405B "
    "run, 16,384 H100s, 54 days) or opt175b (992 A100s, 2021).",
)
@click.option(
    "--failure-rate",
    multiple=True,
    metavar="CLASS=RATE",
    help="Your fleet's rate of one failure class (per 1000 GPU-hours), over the model's and "
    "the profile's failureRates; repeatable.",
)
@click.option(
    "--ettr-target",
    type=FiniteFloatRange(min=0, max=1, min_open=True),
    default=0.9,
    show_default=True,
    help="The effective-training-time ratio the run must hold: sizes the spares.",
)
@click.option(
    "--repair-hours",
    type=FiniteFloatRange(min=0),
    default=72.0,
    show_default=True,
    help="Time until a failed node is back in service (an assumption: set your fleet's).",
)
@click.option(
    "--overlay",
    type=click.Path(file_okay=False, path_type=Path),
    help="A cluster overlay: its profile gives GPUs per node, the GPU model, failureRates and "
    "the spare nodes to check.",
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
    failure_model,
    failure_rate,
    ettr_target,
    repair_hours,
    overlay,
    fmt,
):
    """Estimate a run: wall-clock days, fabric load per step, MTBF, checkpoint
    interval (Young/Daly), expected ETTR, restart budget and the spare nodes that
    hold the ETTR target while failed nodes are repaired.

    \b
    Examples:
      trainops plan --flops 6.4e23 --gpus 2048 --peak-flops 300e12 --mfu 0.5
      trainops plan --params 70B --tokens 2T --gpus 1024 --gpu H100-SXM \\
        --batch-tokens 4M --node-bandwidth 3200 --storage-bandwidth 40
      trainops plan --params 70B --tokens 2T --gpus 1024 --overlay overlays/prod-roce

    Failure rates come from published fleet data, class by class, each with its
    source (--failure-model; default: Meta's Llama 3 405B run, 466 interruptions in
    54 days on 16,384 H100s); replace a class with your fleet's rate with
    --failure-rate or the profile's failureRates. Formulas and sources:
    docs/runbook.md#planning.
    """
    profile = _profile(overlay) if overlay is not None else None
    if profile is not None and gpu is None and peak_flops is None:
        gpu = _gpu_of(profile.gpuProduct)
    if (gpu is None) == (peak_flops is None):
        raise InputError("give exactly one of --gpu and --peak-flops")
    if profile is not None and gpus_per_node == 8:
        gpus_per_node = profile.gpusPerNode
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
        failures=_failures(
            failure_model, profile.failureRates if profile else {}, _rates(failure_rate)
        ),
        repair_hours=repair_hours,
        ettr_target=ettr_target,
        spare_nodes=profile.spareNodes if profile else None,
    )
    if inputs.flops is not None and inputs.tokens is not None:
        raise InputError("--flops replaces --params x --tokens: give one or the other")
    try:
        result = make_plan(inputs)
    except ValueError as error:
        raise InputError(str(error)) from None
    if profile is not None and gpus > profile.usable_nodes * profile.gpusPerNode:
        result.warnings.append(
            f"cluster {profile.name} has {profile.usable_nodes * profile.gpusPerNode} GPUs "
            f"outside its spares, fewer than the run's {gpus}"
        )
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2, default=_json_number))
    else:
        click.echo(render_text(result), nl=False)


def _profile(overlay: Path):
    from trainops.profile.model import load_profile

    path = overlay / "cluster.yaml"
    if not path.is_file():
        raise InputError(f"--overlay {overlay}: no cluster.yaml (a cluster overlay has one)")
    return load_profile(path)


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
    model = r["failure_model"]
    lines += [
        "reliability",
        f"  failure rates              per 1000 GPU-hours, from {model['name']}: {model['source']}",
    ]
    for c in model["classes"]:
        out = ", takes the node out" if c["takes_node_out"] else ""
        lines.append(f"    {c['name']:<24} {c['per_1000_gpu_hours']:.5f}  ({c['counts']}{out})")
    lines += [
        f"  failures per hour          {r['failures_per_hour']:.4f} over {p.gpus} GPUs",
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
        lines += _spares_text(r["spares"])
    if plan.warnings:
        lines += ["warnings", *(f"  - {w}" for w in plan.warnings)]
    return "\n".join(lines) + "\n"


def _spares_text(spares: dict) -> list[str]:
    needed = spares["needed"]
    lines = [
        "spares",
        f"  nodes out for repair       {spares['nodes_out_mean']:.2f} on average "
        f"({spares['node_failures_per_hour']:.4f} node failures per hour x "
        f"{spares['repair_hours']:g} h repair)",
    ]
    if needed is None:
        lines.append(f"  spare nodes needed         none reach {spares['ettr_target']:.0%} ETTR")
    else:
        lines.append(
            f"  spare nodes needed         {needed} (ETTR {spares['ettr_with_spares']:.1%} "
            f">= target {spares['ettr_target']:.0%})"
        )
    if "profile_spare_nodes" in spares:
        lines.append(
            f"  the cluster's spares       {spares['profile_spare_nodes']} (ETTR "
            f"{spares['ettr_with_profile_spares']:.1%})"
        )
    return lines
