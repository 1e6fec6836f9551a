"""The profile's observability keys: alert thresholds, the fabric acceptance test and the
GPU health check (`alerts`, `preflight`, `gpuHealth` in cluster.yaml).

Each is a map whose entries have defaults, so a profile names only what it changes.
Entries may be written as numbers or, as `trainops set alerts.ettrTarget=0.85` writes
them, as strings; this module checks them and returns typed settings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Expected NCCL network per fabric, as the trainer reports it (TransportEvidence.kind).
FABRIC_TRANSPORT = {"tcp": "socket", "roce": "ib", "ib": "ib"}
PREFLIGHT_MODES = ("allreduce", "pairwise")
DIAG_LEVELS = (1, 2, 3, 4)
_CRON = re.compile(r"^(@(hourly|daily|weekly|monthly)|(\S+\s+){4}\S+)$")
_TRANSPORT = re.compile(r"^[A-Za-z0-9_. -]+$")

# key: (type, default, documentation); a default of None is derived from the profile.
ALERT_KEYS: dict[str, tuple[type, Any, str]] = {
    "stallMinutes": (int, 15, "minutes without a completed step before TrainingStalled"),
    "throughputFraction": (
        float,
        0.7,
        "TrainingThroughputDrop below this fraction of the run's own recent baseline",
    ),
    "stragglerRatio": (
        float,
        1.2,
        "TrainingStraggler when a node's work time per step exceeds the job's median by this",
    ),
    "checkpointAgeFactor": (
        float,
        2.0,
        "CheckpointTooOld when the last checkpoint is older than this many intervals",
    ),
    "ettrTarget": (float, 0.9, "ETTRBelowTarget under this effective training time ratio"),
    "gpuUtilisationPercent": (
        float,
        10.0,
        "GPUUtilisationLow when a training pod's GPUs average less utilisation (%) than this "
        "over 30 minutes",
    ),
    "expectedTransport": (
        str,
        None,
        "NCCL network every node must use (default: ib for roce and ib, socket for tcp)",
    ),
    "runbookUrl": (
        str,
        "https://github.com/example-org/trainops/blob/main/docs/runbook.md",
        "runbook the alerts link to (an anchor per alert is appended)",
    ),
}
PREFLIGHT_KEYS: dict[str, tuple[type, Any, str]] = {
    "nodes": (int, 2, "nodes the acceptance test runs all_reduce_perf across (at most nodes)"),
    "mode": (
        str,
        "allreduce",
        "allreduce (one run across all its nodes) or pairwise (also every pair of nodes, "
        "to find a slow node or link)",
    ),
    "busbwFloor": (
        float,
        0.0,
        "bus bandwidth (GB/s) every run must reach at its largest message; 0: no floor",
    ),
}
GPU_HEALTH_KEYS: dict[str, tuple[type, Any, str]] = {
    "level": (int, 2, "DCGM diagnostics level (dcgmi diag -r): 1 quick, 2 medium, 3-4 long"),
    "schedule": (str, "0 3 * * 0", "cron schedule of the GPU health check"),
    "enabled": (bool, True, "run the GPU health check at all"),
}
SECTIONS = {"alerts": ALERT_KEYS, "preflight": PREFLIGHT_KEYS, "gpuHealth": GPU_HEALTH_KEYS}
SECTION_DOCS = {
    "alerts": "thresholds of the generated alerting rules (PrometheusRule)",
    "preflight": "fabric acceptance test (nccl-tests), run on demand: `trainops preflight "
    "OVERLAY --emit-job`",
    "gpuHealth": "per-node GPU health check (DCGM diagnostics) as a CronJob",
}


@dataclass(frozen=True)
class Alerts:
    stallMinutes: int
    throughputFraction: float
    stragglerRatio: float
    checkpointAgeFactor: float
    ettrTarget: float
    gpuUtilisationPercent: float
    expectedTransport: str
    runbookUrl: str


@dataclass(frozen=True)
class Preflight:
    nodes: int
    mode: str
    busbwFloor: float


@dataclass(frozen=True)
class GpuHealth:
    level: int
    schedule: str
    enabled: bool


Fail = Callable[[str, str], Exception]


def _typed(section: str, key: str, kind: type, value: Any, fail: Fail) -> Any:
    where = f"{section}.{key}"
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise fail(where, f"must be true or false, not {value!r}")
    if kind is str:
        if not isinstance(value, str) or not value:
            raise fail(where, f"must be a non-empty string, not {value!r}")
        return value
    if isinstance(value, bool):
        raise fail(where, f"must be a number, not {value!r}")
    try:
        number = kind(value) if isinstance(value, int | float | str) else None
    except ValueError:
        number = None
    if number is None or (kind is int and isinstance(value, float)):
        raise fail(where, f"must be {'an integer' if kind is int else 'a number'}, not {value!r}")
    return number


def _section(section: str, raw: dict, derived: dict[str, Any], fail: Fail) -> dict[str, Any]:
    keys = SECTIONS[section]
    for key in raw:
        if key not in keys:
            raise fail(f"{section}.{key}", f"unknown key (known: {', '.join(keys)})")
    values = {}
    for key, (kind, default, _) in keys.items():
        if key in raw and raw[key] is not None:
            values[key] = _typed(section, key, kind, raw[key], fail)
        else:
            values[key] = derived.get(key, default)
    return values


def parse(
    alerts: dict, preflight: dict, gpu_health: dict, fabric: str, nodes: int, fail: Fail
) -> tuple[Alerts, Preflight, GpuHealth]:
    """Typed, checked settings; `fail(key, message)` makes the error to raise."""
    a = _section("alerts", alerts, {"expectedTransport": FABRIC_TRANSPORT[fabric]}, fail)
    if a["stallMinutes"] < 1:
        raise fail("alerts.stallMinutes", "must be at least 1")
    for key in ("throughputFraction", "ettrTarget"):
        if not 0 < a[key] <= 1:
            raise fail(f"alerts.{key}", "must be above 0 and at most 1")
    if a["stragglerRatio"] <= 1:
        raise fail("alerts.stragglerRatio", "must be above 1 (1 is the median node)")
    if a["checkpointAgeFactor"] < 1:
        raise fail("alerts.checkpointAgeFactor", "must be at least 1")
    if not 0 < a["gpuUtilisationPercent"] < 100:
        raise fail("alerts.gpuUtilisationPercent", "must be above 0 and below 100")
    if not _TRANSPORT.match(a["expectedTransport"]):
        raise fail("alerts.expectedTransport", "must be a network name such as ib or socket")
    if not a["runbookUrl"].startswith(("https://", "http://")):
        raise fail("alerts.runbookUrl", "must be an http(s) URL")
    p = _section("preflight", preflight, {"nodes": min(2, nodes)}, fail)
    if not 1 <= p["nodes"] <= nodes:
        raise fail("preflight.nodes", f"must be between 1 and the cluster's {nodes} nodes")
    if p["mode"] not in PREFLIGHT_MODES:
        raise fail("preflight.mode", f"must be one of {', '.join(PREFLIGHT_MODES)}")
    if p["mode"] == "pairwise" and p["nodes"] < 3:
        raise fail("preflight.mode", "pairwise needs at least 3 nodes to tell a node from a link")
    if p["busbwFloor"] < 0:
        raise fail("preflight.busbwFloor", "must not be negative")
    g = _section("gpuHealth", gpu_health, {}, fail)
    if g["level"] not in DIAG_LEVELS:
        raise fail("gpuHealth.level", f"must be one of {', '.join(map(str, DIAG_LEVELS))}")
    if not _CRON.match(g["schedule"].strip()):
        raise fail("gpuHealth.schedule", f"{g['schedule']!r} is not a cron schedule")
    return Alerts(**a), Preflight(**p), GpuHealth(**g)
