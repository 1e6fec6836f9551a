"""Cost of the checks beyond schemas (CEL, built-in API validation, webhooks).

Whole-process `trainops validate` of one file of 10,000 Deployments (and a second
file mixing the training kinds), with the checks on and with `--skip-cel
--skip-api-checks`, both from an empty cache, best of three each, alternating.
The scale goal is at least 5,000 resources per second on one core with the
checks on; the ratio shows what they cost.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import REPO

VENV_BIN = Path(sys.executable).parent
COUNT = 10_000

DEPLOYMENT = """\
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-{i}
  namespace: team-{team}
  labels: {{app: web-{i}, tier: frontend}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web-{i}}}
  template:
    metadata:
      labels: {{app: web-{i}, tier: frontend}}
    spec:
      containers:
      - name: web
        image: ghcr.io/example/web:1.{i}
        ports:
        - {{name: http, containerPort: 8080}}
        env:
        - {{name: MODE, value: production}}
        resources:
          requests: {{cpu: 250m, memory: 256Mi}}
          limits: {{cpu: "1", memory: 256Mi}}
        readinessProbe:
          httpGet: {{path: /healthz, port: 8080}}
        volumeMounts:
        - {{name: cache, mountPath: /cache}}
      volumes:
      - {{name: cache, emptyDir: {{}}}}
"""

TRAINJOB = """\
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: run-{i}
  namespace: team-{team}
spec:
  runtimeRef: {{name: torch-distributed}}
  trainer: {{numNodes: 2, image: "ghcr.io/example/trainer:1.{i}"}}
"""


def _time(work: Path, file: str, *flags: str) -> float:
    cache = Path(tempfile.mkdtemp(prefix="trainops-bench-cache-"))
    env = dict(os.environ, TRAINOPS_CACHE_DIR=str(cache))
    start = time.perf_counter()
    done = subprocess.run(
        [str(VENV_BIN / "trainops"), "validate", "--no-policies", "--format", "json", file, *flags],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(cache, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return seconds


def run() -> dict:
    work = Path(tempfile.mkdtemp(prefix="trainops-bench-admission-"))
    try:
        shutil.copytree(REPO / "schemas", work / "schemas")
        shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")
        (work / "deployments.yaml").write_text(
            "".join(DEPLOYMENT.format(i=i, team=i % 20) for i in range(COUNT))
        )
        (work / "trainjobs.yaml").write_text(
            "".join(TRAINJOB.format(i=i, team=i % 20) for i in range(COUNT))
        )
        figures: dict = {"resources": COUNT}
        print(f"\n== checks beyond schemas: whole `trainops validate` of {COUNT} resources")
        for label, file in (("deployments", "deployments.yaml"), ("trainjobs", "trainjobs.yaml")):
            times: dict[str, list[float]] = {"on": [], "off": []}
            for _ in range(3):
                times["off"].append(_time(work, file, "--skip-cel", "--skip-api-checks"))
                times["on"].append(_time(work, file))
            on, off = min(times["on"]), min(times["off"])
            figures[label] = {
                "with_checks_s": round(on, 2),
                "without_checks_s": round(off, 2),
                "with_checks_per_s": round(COUNT / on),
                "ratio": round(on / off, 2),
            }
            print(
                f"  {label}: with the checks {on:6.2f} s ({COUNT / on:6.0f}/s), without "
                f"{off:6.2f} s ({COUNT / off:6.0f}/s) -> {on / off:.2f}x"
            )
        return {"admission": figures}
    finally:
        shutil.rmtree(work, ignore_errors=True)
