"""A cluster's monitoring, generated from its profile: alerting rules, a Grafana dashboard
and the per-node GPU health check.

The rules read what the trainer serves on every node (`trainer.metrics`) and what the
GPU Operator's DCGM exporter serves (the counters `argocd/applicationsets/addons.yaml`
enables); thresholds come from the profile's `alerts` keys, the health check's level
and schedule from `gpuHealth`. Output goes to `overlays/<cluster>/monitoring/`, which the
platform kustomization includes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trainops.profile import observability_settings
from trainops.profile.model import ClusterProfile, ProfileError
from trainops.yamlio import dump

DIRECTORY = "monitoring"
BASE = "../../../base"  # from overlays/<cluster>/monitoring/
HEADER = (
    "# Generated from cluster.yaml by trainops. Change the profile instead\n"
    "# (`trainops set {name} KEY=VALUE`): regeneration overwrites this file.\n"
)
JOB = "namespace, training_job"  # what identifies a training job in the rules
# Xid codes that take a GPU out of service (NVIDIA's Xid catalogue): uncorrectable ECC
# (48), NVLink error (74), fallen off the bus (79), contained / uncontained ECC (94, 95).
CRITICAL_XIDS = (48, 74, 79, 94, 95)


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    expr: str
    wait: str  # the rule's `for`
    summary: str
    description: str

    @property
    def anchor(self) -> str:
        """The runbook heading's GitHub anchor."""
        return self.name.lower()


def settings(p: ClusterProfile) -> tuple[Any, Any, Any]:
    def fail(key: str, message: str) -> ProfileError:
        return ProfileError(f"{key}: {message}", f"overlays/{p.name}/cluster.yaml")

    return observability_settings.parse(
        p.alerts, p.preflight, p.gpuHealth, p.fabric, p.nodes, fail
    )


def training_alerts(p: ClusterProfile) -> list[Alert]:
    a = settings(p)[0]
    xids = " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {code}" for code in CRITICAL_XIDS)
    return [
        Alert(
            "TrainingStalled",
            "critical",
            f"time() - max by ({JOB}) (trainer_last_step_timestamp_seconds)"
            f" > {a.stallMinutes * 60}",
            "2m",
            "Training job {{ $labels.training_job }} completed no step for "
            f"{a.stallMinutes} minutes",
            "No node of the job finished a step since {{ $value | humanizeDuration }} ago, "
            "yet its processes still serve metrics: a hang (collective, data, I/O).",
        ),
        Alert(
            "TrainingThroughputDrop",
            "warning",
            f"max by ({JOB}) (avg_over_time(trainer_samples_per_second[10m]))"
            f" < {a.throughputFraction:g}"
            f" * max by ({JOB}) (quantile_over_time(0.9, trainer_samples_per_second[3h]))",
            "15m",
            "Training job {{ $labels.training_job }} runs below "
            f"{a.throughputFraction:.0%} of its recent throughput",
            "Samples per second over the last 10 minutes fell below the job's own 3-hour "
            "baseline (90th percentile): a straggler, throttled GPUs, a degraded link.",
        ),
        Alert(
            "TrainingStraggler",
            "warning",
            f"trainer_straggler_ratio > {a.stragglerRatio:g}",
            "10m",
            "Node {{ $labels.node_rank }} of {{ $labels.training_job }} is a straggler",
            "Its work per step takes {{ $value | humanize }}x the median node's; every step "
            "of the job waits for it.",
        ),
        Alert(
            "NCCLTransportUnexpected",
            "critical",
            f'trainer_nccl_transport{{transport!~"{a.expectedTransport}|unchecked"}} == 1',
            "5m",
            "Node {{ $labels.node_rank }} of {{ $labels.training_job }} uses NCCL over "
            "{{ $labels.transport }}",
            f"The cluster's fabric ({p.fabric}) should give NCCL the {a.expectedTransport} "
            "network; this node uses another, typically TCP sockets after RDMA was not found.",
        ),
        Alert(
            "CheckpointTooOld",
            "warning",
            f"min by ({JOB}) (time() - trainer_last_checkpoint_timestamp_seconds)"
            f" > {a.checkpointAgeFactor:g}"
            f" * max by ({JOB}) (trainer_checkpoint_interval_steps * trainer_step_seconds)",
            "5m",
            "Training job {{ $labels.training_job }} has not checkpointed for "
            "{{ $value | humanizeDuration }}",
            f"The last checkpoint is older than {a.checkpointAgeFactor:g} checkpoint "
            "intervals at the current step time: a failure now loses that much work.",
        ),
        Alert(
            "ETTRBelowTarget",
            "warning",
            f"max by ({JOB}) (trainer_ettr) < {a.ettrTarget:g}",
            "1h",
            "Training job {{ $labels.training_job }} keeps {{ $value | humanizePercentage }} "
            "of its wall time",
            f"Effective training time ratio below the target {a.ettrTarget:g}: restarts, lost "
            "work and slow recovery eat the schedule.",
        ),
        Alert(
            "GPUXidCritical",
            "critical",
            xids,
            "0m",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported Xid {{ $value }}",
            "An Xid that takes the GPU out of service (48 ECC, 74 NVLink, 79 off the bus, "
            "94/95 ECC containment).",
        ),
        Alert(
            "GPUXidError",
            "warning",
            f"DCGM_FI_DEV_XID_ERRORS > 0 unless ({xids})",
            "0m",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported Xid {{ $value }}",
            "The driver logged an Xid error for this GPU; most are application faults, "
            "repeated ones point at the GPU.",
        ),
        Alert(
            "GPUUncorrectableECC",
            "critical",
            "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0",
            "0m",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} had uncorrectable ECC errors",
            "Double-bit ECC errors corrupt what the GPU computes; the job on it must restart "
            "from a checkpoint.",
        ),
        Alert(
            "GPURowRemapFailure",
            "critical",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
            "0m",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} failed to remap a memory row",
            "The GPU ran out of spare memory rows: it cannot repair further errors.",
        ),
        Alert(
            "GPUThermalThrottling",
            "warning",
            "rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m]) > 0",
            "10m",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is throttled by temperature",
            "Its clocks are held down for heat: it slows every step of the job it serves.",
        ),
        Alert(
            "GPUPowerThrottling",
            "warning",
            "rate(DCGM_FI_DEV_POWER_VIOLATION[5m]) > 0",
            "30m",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is throttled by its power limit",
            "Its clocks have been held down by the power cap for half an hour.",
        ),
    ]


def prometheus_rule(p: ClusterProfile) -> dict[str, Any]:
    a = settings(p)[0]
    groups: dict[str, list[dict[str, Any]]] = {"trainops-training": [], "trainops-gpu": []}
    for alert in training_alerts(p):
        group = "trainops-gpu" if alert.name.startswith("GPU") else "trainops-training"
        groups[group].append(
            {
                "alert": alert.name,
                "expr": alert.expr,
                "for": alert.wait,
                "labels": {"severity": alert.severity, "cluster": p.name},
                "annotations": {
                    "summary": alert.summary,
                    "description": alert.description,
                    "runbook_url": f"{a.runbookUrl}#{alert.anchor}",
                },
            }
        )
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "trainops",
            "namespace": "training",
            "labels": {"app.kubernetes.io/part-of": "trainops"},
            "annotations": {
                # The CRD belongs to the cluster's Prometheus Operator.
                "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"
            },
        },
        "spec": {"groups": [{"name": name, "rules": rules} for name, rules in groups.items()]},
    }


# Dashboard panels: title, unit, and (query, legend) pairs. `$job` is the template
# variable holding the selected training jobs.
_JOB = 'training_job=~"$job"'
PANELS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Step time per node",
        "s",
        (
            (f"trainer_step_seconds{{{_JOB}}}", "{{training_job}} node {{node_rank}} step"),
            (f"trainer_work_seconds{{{_JOB}}}", "{{training_job}} node {{node_rank}} work"),
        ),
    ),
    (
        "Straggler ratio per node",
        "none",
        ((f"trainer_straggler_ratio{{{_JOB}}}", "{{training_job}} node {{node_rank}}"),),
    ),
    (
        "Throughput",
        "short",
        (
            (f"max by (training_job) (trainer_samples_per_second{{{_JOB}}})", "{{training_job}} samples/s"),
            (f"max by (training_job) (trainer_tokens_per_second{{{_JOB}}})", "{{training_job}} tokens/s"),
        ),
    ),
    ("MFU", "percentunit", ((f"max by (training_job) (trainer_mfu{{{_JOB}}})", "{{training_job}}"),)),
    ("ETTR", "percentunit", ((f"max by (training_job) (trainer_ettr{{{_JOB}}})", "{{training_job}}"),)),
    (
        "Checkpoint age",
        "s",
        (
            (
                f"time() - max by (training_job) (trainer_last_checkpoint_timestamp_seconds{{{_JOB}}})",
                "{{training_job}}",
            ),
        ),
    ),
    ("Restarts", "short", ((f"max by (training_job) (trainer_restarts{{{_JOB}}})", "{{training_job}}"),)),
    (
        "Data wait per node",
        "s",
        ((f"trainer_data_wait_seconds{{{_JOB}}}", "{{training_job}} node {{node_rank}}"),),
    ),
    (
        "NCCL transport per node",
        "none",
        ((f"trainer_nccl_transport{{{_JOB}}}", "{{training_job}} node {{node_rank}}: {{transport}}"),),
    ),
    (
        "GPU Xid errors (last code)",
        "none",
        (("DCGM_FI_DEV_XID_ERRORS > 0", "{{Hostname}} GPU {{gpu}}"),),
    ),
    (
        "GPU uncorrectable ECC errors (1h)",
        "short",
        (("increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[1h]) > 0", "{{Hostname}} GPU {{gpu}}"),),
    ),
    (
        "GPU throttling (share of time)",
        "none",
        (
            ("rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m]) > 0", "{{Hostname}} GPU {{gpu}} thermal"),
            ("rate(DCGM_FI_DEV_POWER_VIOLATION[5m]) > 0", "{{Hostname}} GPU {{gpu}} power"),
        ),
    ),
    ("GPU temperature", "celsius", (("max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)", "{{Hostname}}"),)),
    ("GPU utilisation", "percent", (("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}}"),)),
)


def dashboard(p: ClusterProfile) -> dict[str, Any]:
    panels = []
    for index, (title, unit, queries) in enumerate(PANELS):
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
                    for i, (expr, legend) in enumerate(queries)
                ],
            }
        )
    return {
        "uid": f"trainops-{p.name}"[:40],
        "title": f"Training runs: {p.name}",
        "tags": ["trainops", p.name],
        "schemaVersion": 39,
        "editable": False,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                {
                    "name": "job",
                    "label": "training job",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(trainer_step, training_job)",
                    "multi": True,
                    "includeAll": True,
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def _gpu_health_patch(p: ClusterProfile) -> dict[str, Any]:
    health = settings(p)[2]
    pod: dict[str, Any] = {
        "containers": [
            {
                "name": "dcgm-diag",
                "env": [{"name": "DIAG_LEVEL", "value": str(health.level)}],
                "resources": {"limits": {"nvidia.com/gpu": p.gpusPerNode}},
            }
        ]
    }
    if p.gpuProduct:
        pod["nodeSelector"] = {"nvidia.com/gpu.product": p.gpuProduct}
    spec: dict[str, Any] = {
        "schedule": health.schedule,
        "jobTemplate": {
            "spec": {
                "completions": p.nodes,
                "parallelism": p.nodes,
                "maxFailedIndexes": p.nodes,
                "template": {"spec": pod},
            }
        },
    }
    if not health.enabled:
        spec["suspend"] = True
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "gpu-health", "namespace": "training"},
        "spec": spec,
    }


def _kustomization(p: ClusterProfile) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{BASE}/monitoring/gpu-health", "rules.yaml"],
        "patches": [{"path": "gpu-health.yaml"}],
        "configMapGenerator": [
            {
                "name": "trainops-dashboard",
                "namespace": "training",
                "files": [f"trainops-{p.name}.json=dashboard.json"],
                "options": {
                    # Grafana's dashboard sidecar loads ConfigMaps with this label.
                    "labels": {"grafana_dashboard": "1"},
                    "disableNameSuffixHash": True,
                },
            }
        ],
    }


def generate(p: ClusterProfile) -> dict[str, str]:
    """Files of overlays/<cluster>/monitoring/, by path relative to the overlay."""
    header = HEADER.format(name=p.name)
    comment = (
        f"# Monitoring of cluster {p.name}: alerting rules, the Grafana dashboard\n"
        "# (a ConfigMap for Grafana's sidecar) and the per-node GPU health check.\n"
    )
    return {
        f"{DIRECTORY}/kustomization.yaml": header + comment + dump(_kustomization(p)),
        f"{DIRECTORY}/rules.yaml": header + dump(prometheus_rule(p)),
        f"{DIRECTORY}/gpu-health.yaml": header + dump(_gpu_health_patch(p)),
        f"{DIRECTORY}/dashboard.json": json.dumps(dashboard(p), indent=2) + "\n",
    }
