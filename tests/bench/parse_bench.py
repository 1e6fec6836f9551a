"""YAML parse throughput on a stream of 10,000 Deployments, against the old parser.

Peers in the same run: ryaml alone (the parser before the cluster's reading, YAML 1.2,
through the same document split) and PyYAML's pure-Python SafeLoader. Ours is measured
twice: on plain Deployments (ryaml's result is proven equal and kept) and on
Deployments carrying one `enabled: yes` each, which every document sends through the
libyaml event reader. The last figure is the whole `trainops validate` process on the
plain stream, resources per second on one core.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-{i}
  namespace: team-{team}
  labels:
    app.kubernetes.io/name: web-{i}
    app.kubernetes.io/part-of: shop
spec:
  replicas: 3
  selector:
    matchLabels:
      app.kubernetes.io/name: web-{i}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 0
  template:
    metadata:
      labels:
        app.kubernetes.io/name: web-{i}
      annotations:
        example.com/flag: "{flag}"
    spec:
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000
      containers:
      - name: app
        image: ghcr.io/example/web:1.{i}.0
        args: ["--port=8080", "--log-level=info"]
        ports:
        - name: http
          containerPort: 8080
        env:
        - name: WORKERS
          value: "4"
        resources:
          requests:
            cpu: 250m
            memory: 256Mi
          limits:
            cpu: "1"
            memory: 512Mi
        readinessProbe:
          httpGet:
            path: /healthz
            port: http
          periodSeconds: 10
"""
COUNT = 10_000
PYYAML_SAMPLE = 1_000  # the pure-Python loader is slow: time a tenth and scale


def stream(count: int, flag: str = "true") -> str:
    return "".join("---\n" + DEPLOYMENT.format(i=i, team=i % 7, flag=flag) for i in range(count))


def _per_second(count: int, action) -> float:
    best = min(_timed(action) for _ in range(3))
    return count / best


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def run() -> dict:
    import ryaml
    import yaml

    from trainops.yamlio import load_documents, split_documents

    plain = stream(COUNT)
    risky = plain.replace('example.com/flag: "true"', "example.com/flag: yes")
    assert len(load_documents(plain, source="bench")) == COUNT

    def old_parser() -> list:  # the parse loop before: split, then ryaml, results kept
        return [ryaml.loads(chunk) for _, chunk in split_documents(plain)]

    sample = stream(PYYAML_SAMPLE)
    results = {
        "documents": COUNT,
        "ours_per_s": _per_second(COUNT, lambda: load_documents(plain, source="bench")),
        "ours_reader_path_per_s": _per_second(COUNT, lambda: load_documents(risky, source="bench")),
        "old_ryaml_per_s": _per_second(COUNT, old_parser),
        "pyyaml_python_per_s": _per_second(
            PYYAML_SAMPLE, lambda: list(yaml.load_all(sample, Loader=yaml.SafeLoader))
        ),
    }
    results["validate_process_per_s"] = _validate_process(plain)
    old, ours, reader = (
        results["old_ryaml_per_s"],
        results["ours_per_s"],
        results["ours_reader_path_per_s"],
    )
    python = results["pyyaml_python_per_s"]
    print(f"\nparse: {COUNT} Deployments into Documents, per second on one core")
    print(f"  old parser (ryaml, YAML 1.2)          {old:8.0f}")
    print(f"  ours, ryaml result proven and kept    {ours:8.0f}  ({ours / old:.2f}x the old)")
    print(f"  ours, every document read by libyaml  {reader:8.0f}  ({reader / old:.2f}x)")
    print(f"  PyYAML pure-Python SafeLoader         {python:8.0f}  (ours {ours / python:.0f}x)")
    print(f"  trainops validate, whole process      {results['validate_process_per_s']:8.0f}")
    return {"parse": results}


def _validate_process(text: str) -> float:
    with tempfile.TemporaryDirectory(prefix="trainops-parse-bench-") as work:
        manifest = Path(work) / "deployments.yaml"
        manifest.write_text(text)
        env = dict(os.environ, TRAINOPS_CACHE_DIR=str(Path(work) / "cache"))
        command = [
            str(Path(sys.executable).parent / "trainops"),
            "validate",
            "--no-cache",
            "--format",
            "json",
            str(manifest),
        ]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
    assert done.returncode in (0, 1), done.stderr
    return COUNT / elapsed
