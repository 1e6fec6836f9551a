"""How long a run takes, whether the fabric keeps up, how often to save, how much time
failures cost and how many spare nodes hold it at its ETTR target.

Plain arithmetic, shown so it can be checked by hand:

- training FLOPs = 6 x parameters x tokens (dense transformer), or given directly;
- wall clock = FLOPs / (GPUs x peak FLOP/s x MFU);
- ring all-reduce moves 2(N-1)/N x gradient bytes per rank and step; across nodes, after
  reduction inside each node, every node sends 2(n-1)/n x gradient bytes over its NICs;
- job failure rate = GPUs x (failures per 1000 GPU-hours) / 1000, MTBF its inverse;
- Young/Daly checkpoint interval = sqrt(2 x C x MTBF) for a checkpoint write time C;
- expected ETTR = 1 - C/interval - (interval/2 + restart time)/MTBF: time spent saving,
  the half interval of work lost per failure on average, and the restart itself;
- failure rates from published fleet data (`planning.failures`), spares from
  `planning.spares`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from trainops.planning.failures import LLAMA3, FailureModel
from trainops.planning.spares import ettr_with, spares_needed

# Peak dense BF16 FLOP/s per GPU.
PEAK_FLOPS = {
    "A100": 312e12,
    "H100-SXM": 989e12,
    "H100-PCIe": 756e12,
    "H200": 989e12,
    "B200": 2.25e15,
}

# Bytes per parameter in a checkpoint: BF16 weights, FP32 master weights, Adam's two moments.
CHECKPOINT_BYTES_PER_PARAM = 2 + 4 + 4 + 4
SECONDS_PER_DAY = 86400.0
_SUFFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([KMBGTP]?)\s*$", re.IGNORECASE)


def parse_amount(text: str) -> float:
    """'70B' -> 7e10, '2T' -> 2e12, '6.4e23' -> 6.4e23 (decimal suffixes)."""
    match = _NUMBER.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a number like 70B, 2T or 6.4e23")
    return float(match[1]) * _SUFFIXES[match[2].upper()]


@dataclass
class PlanInputs:
    gpus: int
    peak_flops: float
    mfu: float = 0.4
    params: float | None = None
    tokens: float | None = None
    flops: float | None = None
    gpus_per_node: int = 8
    batch_tokens: float | None = None
    grad_bytes: float = 2.0
    node_bandwidth_gbps: float | None = None  # Gbit/s of training fabric per node
    checkpoint_bytes: float | None = None
    storage_gbytes_per_s: float = 10.0
    restart_seconds: float = 600.0
    failures: FailureModel = LLAMA3
    # Assumed, not published: a GPU board or host replaced under warranty in about three
    # days. Set the fleet's own.
    repair_hours: float = 72.0
    ettr_target: float = 0.9
    spare_nodes: int | None = None  # the cluster profile's, to compare with what is needed


@dataclass
class Plan:
    inputs: PlanInputs
    compute: dict
    communication: dict | None
    reliability: dict
    warnings: list[str]

    def to_dict(self) -> dict:
        return {
            "compute": self.compute,
            "communication": self.communication,
            "reliability": self.reliability,
            "warnings": self.warnings,
        }


def make_plan(p: PlanInputs) -> Plan:
    warnings: list[str] = []
    if p.flops is not None:
        flops = p.flops
    elif p.params is not None and p.tokens is not None:
        flops = 6.0 * p.params * p.tokens
    else:
        raise ValueError("give --flops, or --params and --tokens")
    rate = p.gpus * p.peak_flops * p.mfu
    seconds = flops / rate
    if not math.isfinite(seconds) or not math.isfinite(flops) or seconds * p.gpus == math.inf:
        raise ValueError(
            f"these inputs give {flops:g} FLOPs at {rate:g} FLOP/s, beyond the range of a "
            "float: check the units of --params, --tokens, --flops and --peak-flops"
        )
    compute = {
        "training_flops": flops,
        "gpus": p.gpus,
        "peak_flops_per_gpu": p.peak_flops,
        "mfu": p.mfu,
        "days": seconds / SECONDS_PER_DAY,
        "gpu_hours": seconds * p.gpus / 3600,
        "single_gpu_years_at_peak": flops / p.peak_flops / (365 * SECONDS_PER_DAY),
    }
    communication = None
    nodes = max(1, math.ceil(p.gpus / p.gpus_per_node))
    if p.params is not None:
        gradient = p.params * p.grad_bytes
        communication = {
            "gradient_bytes": gradient,
            "ring_allreduce_bytes_per_rank": 2 * (p.gpus - 1) / p.gpus * gradient,
            "nodes": nodes,
            "internode_bytes_per_node": 2 * (nodes - 1) / nodes * gradient,
        }
        if p.batch_tokens:
            steps = (p.tokens or flops / (6.0 * p.params)) / p.batch_tokens
            step_seconds = 6.0 * p.params * p.batch_tokens / rate
            communication.update(steps=steps, compute_seconds_per_step=step_seconds)
            needed = communication["internode_bytes_per_node"] / step_seconds
            communication["node_bandwidth_needed_gbps"] = needed * 8 / 1e9
            if p.node_bandwidth_gbps:
                comm_seconds = communication["internode_bytes_per_node"] / (
                    p.node_bandwidth_gbps * 1e9 / 8
                )
                communication["comm_seconds_per_step"] = comm_seconds
                if comm_seconds > step_seconds:
                    warnings.append(
                        f"communication-bound: the all-reduce takes {comm_seconds:.2f}s per step "
                        f"against {step_seconds:.2f}s of compute; the fabric needs "
                        f"{communication['node_bandwidth_needed_gbps']:.0f} Gbit/s per node "
                        f"({p.node_bandwidth_gbps:g} given), or larger batches, or sharding"
                    )
    reliability = _reliability(p, seconds, warnings)
    return Plan(p, compute, communication, reliability, warnings)


def _reliability(p: PlanInputs, compute_seconds: float, warnings: list[str]) -> dict:
    model = p.failures
    per_hour = p.gpus * model.rate / 1000.0
    mtbf = 3600.0 / per_hour if per_hour > 0 else math.inf
    size = p.checkpoint_bytes
    if size is None and p.params is not None:
        size = p.params * CHECKPOINT_BYTES_PER_PARAM
    result: dict = {
        "failure_model": {
            "name": model.name,
            "source": model.source,
            "classes": [
                {
                    "name": c.name,
                    "per_1000_gpu_hours": c.rate,
                    "takes_node_out": c.replaces_node,
                    "counts": c.counts,
                }
                for c in model.classes
            ],
        },
        "failure_rates_per_1000_gpu_hours": {c.name: c.rate for c in model.classes},
        "failures_per_hour": per_hour,
        "mtbf_hours": mtbf / 3600.0,
        "restart_seconds": p.restart_seconds,
    }
    if size is None:
        warnings.append(
            "no checkpoint size: give --params or --checkpoint-size for the "
            "checkpoint interval, ETTR and spares"
        )
        return result
    write = size / (p.storage_gbytes_per_s * 1e9)
    interval = math.sqrt(2.0 * write * mtbf)
    ettr = max(0.0, 1.0 - write / interval - (interval / 2.0 + p.restart_seconds) / mtbf)
    wall = compute_seconds / ettr if ettr > 0 else math.inf
    failures = wall / mtbf
    result.update(
        checkpoint_bytes=size,
        checkpoint_write_seconds=write,
        checkpoint_interval_seconds=interval,
        expected_ettr=ettr,
        wall_clock_days=wall / SECONDS_PER_DAY,
        expected_failures=failures,
        restart_budget=max(3, math.ceil(2 * failures)) if math.isfinite(failures) else None,
    )
    result["spares"] = _spares(p, ettr, warnings)
    if write > mtbf / 2:
        warnings.append(
            f"a checkpoint takes {write:.0f}s but the job fails every {mtbf:.0f}s on average: "
            "it cannot make progress; write faster (more storage bandwidth, async, sharded "
            "saves) or shrink the failure domain"
        )
    elif ettr < 0.8:
        warnings.append(
            f"expected ETTR is {ettr:.0%}: failures and restarts eat more than a "
            "fifth of the run; shorten restarts or checkpoint faster"
        )
    return result


def _spares(p: PlanInputs, ettr: float, warnings: list[str]) -> dict:
    node_failures = p.gpus * p.failures.node_rate / 1000.0
    plan = spares_needed(node_failures, p.repair_hours, ettr, p.ettr_target)
    out = {
        "ettr_target": p.ettr_target,
        "repair_hours": p.repair_hours,
        "node_failures_per_hour": node_failures,
        "nodes_out_mean": plan.nodes_out_mean,
        "needed": plan.needed,
        "ettr_with_spares": plan.ettr,
    }
    if plan.needed is None:
        warnings.append(
            f"the run's ETTR ({ettr:.1%}) is below the target ({p.ettr_target:.0%}) before any "
            "node waits for repair: spares cannot reach it; checkpoint faster or restart faster"
        )
    if p.spare_nodes is not None:
        have = ettr_with(p.spare_nodes, node_failures, p.repair_hours, ettr)
        out.update(profile_spare_nodes=p.spare_nodes, ettr_with_profile_spares=have)
        if plan.needed is not None and p.spare_nodes < plan.needed:
            warnings.append(
                f"the cluster keeps {p.spare_nodes} spare nodes; this run needs {plan.needed} "
                f"to hold {p.ettr_target:.0%} ETTR (spareNodes in cluster.yaml)"
            )
    return out
