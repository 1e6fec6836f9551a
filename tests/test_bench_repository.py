"""The synthetic platform repository `make bench` measures is a valid repository.

The scale benchmark builds 50 clusters with 40 runs each from every run template; when
a template gained required arguments (torchtitan's --module and --config) the build
raised before anything was timed. Three clusters (one per fabric and scheduler) with
six runs each, every template among them, must build and validate without an error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.bench.platform_repo import FABRICS, build, kustomizations, run_templates
from trainops.profile.runs import TEMPLATES

TRAINOPS = Path(sys.executable).parent / "trainops"


def test_every_template_builds_into_a_repository_that_validates(tmp_path):
    root = build(len(FABRICS), len(TEMPLATES))
    try:
        runs = [d for d in kustomizations(root) if d.parent.name == "runs"]
        assert len(runs) == len(FABRICS) * len(TEMPLATES)
        clusters = sorted(p.name for p in (root / "overlays").iterdir())
        offered = {t for cluster in clusters for t in run_templates(root, cluster)}
        assert offered == set(TEMPLATES)  # each template is in the benchmark
        run = subprocess.run(
            [str(TRAINOPS), "validate", "overlays", "--format", "json", "-j", "2"],
            cwd=root,
            env={"TRAINOPS_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        errors = [f for f in json.loads(run.stdout)["findings"] if f["severity"] == "error"]
        assert errors == []
    finally:
        shutil.rmtree(root)
