"""The generated monitoring: alerting rules checked and unit-tested with the real promtool
(Debian package `prometheus`), the runbook entry of every alert, and a dashboard whose
every query parses and names only metrics the trainer or the DCGM exporter serve."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import promql_parser
import pytest
import yaml

from tests.support import REPO
from trainer.metrics import exported_metrics
from trainops.profile import observability
from trainops.profile.model import ProfileError, load_profile, parse_profile

CLUSTERS = sorted(p.parent.name for p in (REPO / "overlays").glob("*/cluster.yaml"))
DCGM_DEFAULTS = (
    REPO / "base/operators/mirror/dcgm-exporter-4.4.2-4.7.0/etc/dcp-metrics-included.csv"
)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: `apt-get install prometheus` (.ci/run does)"
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def profile(name: str = "prod-roce"):
    return load_profile(REPO / "overlays" / name / "cluster.yaml")


def _rule_file(cluster: str, directory: Path) -> Path:
    """The committed PrometheusRule's groups, as Prometheus reads a rule file."""
    text = (REPO / "overlays" / cluster / "monitoring/rules.yaml").read_text()
    path = directory / f"{cluster}.rules.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(text)["spec"]))
    return path


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_promtool_accepts_every_clusters_rules(cluster, tmp_path):
    done = promtool("check", "rules", str(_rule_file(cluster, tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    count = len(observability.training_alerts(profile(cluster)))
    assert f"SUCCESS: {count} rules found" in done.stdout


def test_promtool_rejects_a_broken_rule(tmp_path):
    """The check above can fail: a rule promtool cannot parse is an error."""
    rule = yaml.safe_load(_rule_file("lab-tcp", tmp_path).read_text())
    rule["groups"][0]["rules"][0]["expr"] = "max by (training_job (trainer_step"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(rule))
    assert promtool("check", "rules", str(broken), cwd=tmp_path).returncode == 1


JOB = 'namespace="training",training_job="{job}",node_rank="0",rank="0",pod="{job}-master-0"'
GPU = 'Hostname="{node}",gpu="3",UUID="GPU-{node}",namespace="gpu-operator"'


def _job(job: str) -> str:
    return JOB.format(job=job)


def _gpu(node: str) -> str:
    return GPU.format(node=node)


def _labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


# Per alert: input series (name{labels} -> values, one sample a minute), when to look,
# and the labels of the alerts expected then. "bad" series must fire, "good" must not.
CASES = {
    "TrainingStalled": (
        {
            f"trainer_last_step_timestamp_seconds{{{_job('bad')}}}": "0x30",
            f"trainer_last_step_timestamp_seconds{{{_job('good')}}}": "0+60x30",
        },
        "20m",
        [{"namespace": "training", "training_job": "bad"}],
    ),
    "TrainingThroughputDrop": (
        {
            f"trainer_samples_per_second{{{_job('bad')}}}": "100x180 50x40",
            f"trainer_samples_per_second{{{_job('good')}}}": "100x220",
        },
        "220m",
        [{"namespace": "training", "training_job": "bad"}],
    ),
    "TrainingStraggler": (
        {
            f"trainer_straggler_ratio{{{_job('bad')}}}": "1.5x30",
            f"trainer_straggler_ratio{{{_job('good')}}}": "1.05x30",
        },
        "20m",
        [_labels(_job("bad"))],
    ),
    "NCCLTransportUnexpected": (
        {
            f'trainer_nccl_transport{{{_job("bad")},transport="socket"}}': "1x20",
            f'trainer_nccl_transport{{{_job("good")},transport="ib"}}': "1x20",
            f'trainer_nccl_transport{{{_job("unknown")},transport="unchecked"}}': "1x20",
        },
        "10m",
        [{**_labels(_job("bad")), "transport": "socket"}],
    ),
    "CheckpointTooOld": (
        {
            f"trainer_last_checkpoint_timestamp_seconds{{{_job('bad')}}}": "0x20",
            f"trainer_last_checkpoint_timestamp_seconds{{{_job('good')}}}": "0+60x20",
            f"trainer_checkpoint_interval_steps{{{_job('bad')}}}": "100x20",
            f"trainer_checkpoint_interval_steps{{{_job('good')}}}": "100x20",
            f"trainer_step_seconds{{{_job('bad')}}}": "1x20",
            f"trainer_step_seconds{{{_job('good')}}}": "1x20",
        },
        "10m",
        [{"namespace": "training", "training_job": "bad"}],
    ),
    "ETTRBelowTarget": (
        {
            f"trainer_ettr{{{_job('bad')}}}": "0.5x120",
            f"trainer_ettr{{{_job('good')}}}": "0.95x120",
        },
        "90m",
        [{"namespace": "training", "training_job": "bad"}],
    ),
    "TrainingWorldShrunk": (
        {
            # Four processes, then three after a node left; the other job keeps its four.
            f"trainer_world_size{{{_job('bad')}}}": "4x30 3x30",
            f"trainer_world_size{{{_job('good')}}}": "4x60",
        },
        "50m",
        [{"namespace": "training", "training_job": "bad"}],
    ),
    "GPUUtilisationLow": (
        {
            f'DCGM_FI_DEV_GPU_UTIL{{{_gpu("bad")},exported_pod="idle-0",'
            'exported_namespace="training"}': "2x70",
            f'DCGM_FI_DEV_GPU_UTIL{{{_gpu("good")},exported_pod="busy-0",'
            'exported_namespace="training"}': "95x70",
            # A GPU no pod uses is not a training pod's idle GPU.
            f"DCGM_FI_DEV_GPU_UTIL{{{_gpu('free')}}}": "0x70",
        },
        "65m",
        [{"exported_namespace": "training", "exported_pod": "idle-0"}],
    ),
    "GPUXidCritical": (
        {
            f"DCGM_FI_DEV_XID_ERRORS{{{_gpu('bad')}}}": "0 0 79x5",
            f"DCGM_FI_DEV_XID_ERRORS{{{_gpu('good')}}}": "0 0 13x5",
        },
        "5m",
        [_labels(_gpu("bad"))],
    ),
    "GPUXidError": (
        {
            f"DCGM_FI_DEV_XID_ERRORS{{{_gpu('bad')}}}": "0 0 13x5",
            f"DCGM_FI_DEV_XID_ERRORS{{{_gpu('good')}}}": "0 0 79x5",
            f"DCGM_FI_DEV_XID_ERRORS{{{_gpu('quiet')}}}": "0x7",
        },
        "5m",
        [_labels(_gpu("bad"))],
    ),
    "GPUUncorrectableECC": (
        {
            f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{_gpu('bad')}}}": "0 0 0 2x5",
            f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{_gpu('good')}}}": "5x8",
        },
        "5m",
        [_labels(_gpu("bad"))],
    ),
    "GPURowRemapFailure": (
        {
            f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{_gpu('bad')}}}": "0 1x5",
            f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{_gpu('good')}}}": "0x6",
        },
        "5m",
        [_labels(_gpu("bad"))],
    ),
    "GPUThermalThrottling": (
        {
            f"DCGM_FI_DEV_THERMAL_VIOLATION{{{_gpu('bad')}}}": "0+1000x30",
            f"DCGM_FI_DEV_THERMAL_VIOLATION{{{_gpu('good')}}}": "7000x30",
        },
        "20m",
        [_labels(_gpu("bad"))],
    ),
    "GPUPowerThrottling": (
        {
            f"DCGM_FI_DEV_POWER_VIOLATION{{{_gpu('bad')}}}": "0+1000x60",
            f"DCGM_FI_DEV_POWER_VIOLATION{{{_gpu('good')}}}": "7000x60",
        },
        "45m",
        [_labels(_gpu("bad"))],
    ),
}


def test_every_alert_has_a_promtool_case():
    names = [alert.name for alert in observability.training_alerts(profile())]
    assert sorted(names) == sorted(CASES)


def _unit_tests(cluster: str, rule_file: Path) -> dict:
    """promtool's test file: per alert, its series, and at its time exactly the bad alerts.

    Annotations are templates whose text promtool would compare too; the unit tests run
    on a copy of the rules without them (`promtool check rules` checks the templates)."""
    severities = {a.name: a.severity for a in observability.training_alerts(profile(cluster))}
    tests = []
    for name, (series, at, expected) in CASES.items():
        tests.append(
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": name,
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    **labels,
                                    "severity": severities[name],
                                    "cluster": cluster,
                                }
                            }
                            for labels in expected
                        ],
                    }
                ],
            }
        )
    return {"rule_files": [rule_file.name], "evaluation_interval": "1m", "tests": tests}


def test_promtool_unit_tests_every_alert_on_synthetic_series(tmp_path):
    cluster = "prod-roce"  # expects NCCL over ib
    rules = yaml.safe_load(_rule_file(cluster, tmp_path).read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(rules))
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump(_unit_tests(cluster, rule_file)))
    done = promtool("test", "rules", tests.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_can_fail(tmp_path):
    """A rule that never fires fails its unit test: the cases above are not vacuous."""
    rules = yaml.safe_load(_rule_file("prod-roce", tmp_path).read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
            if rule["alert"] == "TrainingStraggler":
                rule["expr"] = "trainer_straggler_ratio > 100"
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(rules))
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump(_unit_tests("prod-roce", rule_file)))
    done = promtool("test", "rules", tests.name, cwd=tmp_path)
    assert done.returncode == 1 and "TrainingStraggler" in done.stdout + done.stderr


def test_thresholds_come_from_the_profile():
    base = yaml.safe_load((REPO / "overlays/lab-tcp/cluster.yaml").read_text())
    base["alerts"] = {
        "stallMinutes": "30",
        "stragglerRatio": 1.5,
        "expectedTransport": "ib",
        "gpuUtilisationPercent": 25,
    }
    tuned = parse_profile(base, "lab-tcp")
    exprs = {a.name: a.expr for a in observability.training_alerts(tuned)}
    assert exprs["GPUUtilisationLow"].endswith("< 25")
    assert exprs["TrainingStalled"].endswith("> 1800")
    assert exprs["TrainingStraggler"] == "trainer_straggler_ratio > 1.5"
    assert 'transport!~"ib|unchecked"' in exprs["NCCLTransportUnexpected"]
    default = {a.name: a.expr for a in observability.training_alerts(profile("lab-tcp"))}
    assert 'transport!~"socket|unchecked"' in default["NCCLTransportUnexpected"]


@pytest.mark.parametrize("value", [0, 100, "busy"])
def test_a_gpu_utilisation_threshold_outside_0_to_100_is_refused(value):
    base = yaml.safe_load((REPO / "overlays/lab-tcp/cluster.yaml").read_text())
    base["alerts"] = {"gpuUtilisationPercent": value}
    with pytest.raises(ProfileError, match=r"alerts\.gpuUtilisationPercent"):
        parse_profile(base, "lab-tcp")


def test_every_alert_links_to_its_runbook_entry():
    runbook = (REPO / "docs/runbook.md").read_text()
    sections = dict(re.findall(r"^### (\S+)\n(.*?)(?=^##)", runbook, re.M | re.S))
    rule = yaml.safe_load((REPO / "overlays/prod-roce/monitoring/rules.yaml").read_text())
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            name = alert["alert"]
            assert alert["annotations"]["runbook_url"].endswith(f"docs/runbook.md#{name.lower()}")
            assert name in sections, f"docs/runbook.md has no '### {name}'"
            assert "**Meaning**" in sections[name] and "**Fix**" in sections[name], name


# -- the dashboard -----------------------------------------------------------------


def _selectors(node) -> list[str]:
    """Metric names of every vector and matrix selector in a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        return [node.name] if node.name else []
    names = []
    for attribute in ("expr", "lhs", "rhs", "vector_selector", "param"):
        child = getattr(node, attribute, None)
        if child is not None and not isinstance(child, str | int | float):
            names += _selectors(child)
    for child in getattr(node, "args", None) or []:
        names += _selectors(child)
    return names


def test_selector_walk_finds_every_metric():
    parsed = promql_parser.parse(
        "max by (a) (rate(x_total[5m])) / on (a) (y offset 5m) - quantile_over_time(0.9, z[1h])"
    )
    assert sorted(_selectors(parsed)) == ["x_total", "y", "z"]


def _csv_fields(text: str, commented: bool) -> set[str]:
    fields = set()
    for row in csv.reader(text.splitlines()):
        name = row[0].strip() if row else ""
        if commented:
            name = name.lstrip("# ")
        if name.startswith("DCGM_"):
            fields.add(name)
    return fields


def dcgm_enabled_fields(cluster: str = "prod-roce") -> set[str]:
    """DCGM fields the cluster's exporter serves: the counters its gpu-operator values
    give the chart (each must be a field the exporter knows, enabled by default or not)."""
    known = _csv_fields(DCGM_DEFAULTS.read_text(), commented=True)
    values = yaml.safe_load((REPO / "overlays" / cluster / "addons/gpu-operator.yaml").read_text())
    config = values["dcgmExporter"]["config"]
    assert config["create"] and config["name"]
    data = config["data"]
    rows = [row for row in csv.reader(data.splitlines()) if row and not row[0].startswith("#")]
    assert all(len(row) == 3 for row in rows), "field, type, help: three columns a line"
    enabled = _csv_fields(data, commented=False)
    assert enabled <= known, f"not DCGM exporter fields: {sorted(enabled - known)}"
    # Nothing the exporter serves by default is lost.
    assert _csv_fields(DCGM_DEFAULTS.read_text(), commented=False) <= enabled
    return enabled


def _dashboard_queries(cluster: str) -> list[str]:
    board = json.loads((REPO / "overlays" / cluster / "monitoring/dashboard.json").read_text())
    queries = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            # Grafana's label_values(SELECTOR, LABEL): the selector is PromQL.
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["query"])
            assert match, variable["query"]
            queries.append(match.group(1))
    return queries


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_dashboard_queries_parse_and_use_served_metrics(cluster, tmp_path):
    queries = _dashboard_queries(cluster)
    served = set(exported_metrics()) | dcgm_enabled_fields(cluster)
    used = set()
    for query in queries:
        used.update(_selectors(promql_parser.parse(query)))
    assert used <= served, f"not served by the trainer or DCGM: {sorted(used - served)}"
    assert {"trainer_step_seconds", "trainer_mfu", "trainer_ettr", "DCGM_FI_DEV_XID_ERRORS"} <= used
    # Prometheus's own parser too: every query as a recording rule.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query{i}", "expr": q.replace("$job", ".*")}
                    for i, q in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = promtool("check", "rules", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_use_only_served_metrics():
    served = set(exported_metrics()) | dcgm_enabled_fields()
    for alert in observability.training_alerts(profile()):
        used = set(_selectors(promql_parser.parse(alert.expr)))
        assert used and used <= served, (alert.name, sorted(used - served))


def test_a_metric_nobody_serves_is_caught():
    used = set(_selectors(promql_parser.parse("rate(DCGM_FI_DEV_NOT_A_FIELD[5m])")))
    assert not used <= set(exported_metrics()) | dcgm_enabled_fields()


def _containers(node):
    if isinstance(node, dict):
        yield from node.get("containers") or []
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def test_every_gpu_container_of_the_templates_names_its_metrics_port():
    """The PodMonitor scrapes the port named `metrics`; a container that holds GPUs runs the
    ranks (the v1 MPIJob's Worker too, where mpirun execs them), so it must declare it."""
    checked = []
    for path in sorted((REPO / "base/training").glob("*/*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            served = {
                e["value"]
                for c in _containers(document)
                for e in c.get("env") or []
                if e.get("name") == "TRAINER_METRICS_PORT"
            }
            for container in _containers(document):
                if "nvidia.com/gpu" not in (container.get("resources") or {}).get("limits", {}):
                    continue
                ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
                where = f"{path.relative_to(REPO)} container {container['name']}"
                assert ports.get("metrics") is not None, where
                assert {str(ports["metrics"])} == served, where
                checked.append(where)
    assert any("mpijob/mpijob.yaml" in c for c in checked) and len(checked) >= 6, checked
