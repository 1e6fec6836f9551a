"""A real Prometheus scrapes a real two-node training run.

Two "nodes" on this machine (two trainer-launch agents, one CPU rank each, gloo) serve
their metrics on distinct ports as two pods would; Prometheus (the Debian package's
binary) scrapes both with a static configuration made from the cluster's PodMonitor
and evaluates the alerting rules generated for a cluster. Node 1 is made a straggler
(`slow@1:rank=1`). The test polls Prometheus's API until what it expects holds; the
upper bound only turns a hang into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from tests.support import REPO
from tests.trainer.conftest import RUN_LIMIT, kill_tree, trainer_env, unused_port, wait_for
from trainops.profile.model import load_profile
from trainops.profile.observability import prometheus_rule

JOB = "scrape-test"


def _pod_monitor() -> dict:
    text = (REPO / "base/training/platform/metrics.yaml").read_text()
    [monitor] = [d for d in yaml.safe_load_all(text) if d["kind"] == "PodMonitor"]
    return monitor


def scrape_config(monitor: dict, ports: list[int], rule_file: Path) -> dict:
    """What the Prometheus Operator makes of the PodMonitor, with this machine's ports
    standing in for the pods' `metrics` ports."""
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    namespace, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [
            {
                "job_name": f"{namespace}/{name}",
                "metrics_path": endpoint.get("path", "/metrics"),
                "static_configs": [{"targets": [f"127.0.0.1:{port}" for port in ports]}],
            }
        ],
    }


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    assert found, "prometheus is not installed: `apt-get install prometheus` (.ci/run does)"
    return found


def _get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.loads(response.read())


def query(port: int, expression: str) -> list[dict]:
    answer = _get(port, "/api/v1/query?" + urllib.parse.urlencode({"query": expression}))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _node(
    stack: ExitStack, node_rank: int, master_port: int, metrics_port: int, tmp: Path
) -> subprocess.Popen:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = trainer_env(
        PATH=path,
        JOB_NAME=JOB,
        TRAINER_METRICS_PORT=str(metrics_port),
        PET_NNODES="2",
        PET_NPROC_PER_NODE="1",
        PET_NODE_RANK=str(node_rank),
        PET_MASTER_ADDR="127.0.0.1",
        PET_MASTER_PORT=str(master_port),
    )
    # Long enough never to finish first: the test ends the run once it has seen enough.
    args = ["--model", "mlp", "--max-steps", "100000", "--log-interval", "2"]
    args += ["--checkpoint-dir", str(tmp / "checkpoints"), "--checkpoint-interval", "50"]
    args += ["--inject-fault", "slow@1:rank=1"]
    log = stack.enter_context((tmp / f"node{node_rank}.log").open("w"))
    process = subprocess.Popen(
        ["trainer-launch", "--module", "trainer", *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    stack.callback(kill_tree, process)
    return process


def _by_node(results: list[dict]) -> dict[str, float]:
    return {r["metric"]["node_rank"]: float(r["value"][1]) for r in results}


def test_prometheus_scrapes_both_nodes_and_sees_the_straggler(tmp_path: Path):
    binary = _prometheus_binary()
    profile = load_profile(REPO / "overlays/lab-tcp/cluster.yaml")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus_rule(profile)["spec"]))
    ports = [unused_port(), unused_port()]
    prometheus_port = unused_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(_pod_monitor(), ports, rules)))
    with ExitStack() as stack:
        master = unused_port()
        nodes = [_node(stack, rank, master, ports[rank], tmp_path) for rank in (0, 1)]
        prometheus_log = stack.enter_context((tmp_path / "prometheus.log").open("w"))
        prometheus = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
            ],
            stdout=prometheus_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack.callback(kill_tree, prometheus)

        def logs() -> str:
            return "\n".join(
                f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(tmp_path.glob("*.log"))
            )

        def running() -> None:
            for process in [*nodes, prometheus]:
                if process.poll() is not None:
                    pytest.fail(f"{process.args[0]} exited with {process.returncode}\n{logs()}")

        def holds(expression: str, expected: int = 2) -> bool:
            running()
            return _ready(prometheus_port) and len(query(prometheus_port, expression)) == expected

        wait_for(lambda: holds('up{job="training/trainer"} == 1'), "both targets up", RUN_LIMIT)
        # Two scrapes of each node saw different steps.
        wait_for(lambda: holds("changes(trainer_step[1m]) > 0"), "the step advances", RUN_LIMIT)
        wait_for(
            lambda: holds("trainer_straggler_ratio > 1", expected=1),
            "a straggler ratio above 1",
            RUN_LIMIT,
        )
        [slow] = query(prometheus_port, "trainer_straggler_ratio > 1")
        assert slow["metric"]["node_rank"] == "1" and slow["metric"]["rank"] == "1", logs()
        assert _by_node(query(prometheus_port, "trainer_straggler_ratio"))["0"] < 1
        steps = query(prometheus_port, "trainer_step")
        assert {r["metric"]["training_job"] for r in steps} == {JOB}
        assert set(_by_node(steps)) == {"0", "1"}
        transports = query(prometheus_port, 'trainer_nccl_transport{transport="gloo"} == 1')
        assert len(transports) == 2
        # The cluster's straggler rule sees node 1 (pending: it waits out its `for`).
        wait_for(
            lambda: holds('ALERTS{alertname="TrainingStraggler"}', expected=1),
            "the straggler alert",
            RUN_LIMIT,
        )
        [alert] = query(prometheus_port, 'ALERTS{alertname="TrainingStraggler"}')
        assert alert["metric"]["node_rank"] == "1"
