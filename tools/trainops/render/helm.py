"""Renders a Helm chart directory with the real `helm template`, when helm is installed.

Without helm, a chart is refused with one line that says how to render it and pipe
the result in, rather than reading its templates as manifests.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from trainops.errors import InputError
from trainops.render.kustomize import BUILD_TIMEOUT_SECONDS, clean_error

CHART_FILE = "Chart.yaml"


def is_chart(directory: Path) -> bool:
    return (directory / CHART_FILE).is_file()


def template(directory: Path, shown: str) -> str:
    """`helm template RELEASE CHART` with the chart's own values; release = directory name."""
    helm = shutil.which("helm")
    if helm is None:
        raise InputError(
            "is a Helm chart and helm is not on PATH: install helm, or render it and pipe "
            f"it in: helm template {directory.name} {shown} | trainops validate -",
            shown,
        )
    try:
        done = subprocess.run(
            [helm, "template", directory.name, str(directory)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InputError(f"helm template timed out after {BUILD_TIMEOUT_SECONDS}s", shown) from None
    if done.returncode != 0:
        raise InputError(f"helm template failed: {clean_error(done.stderr)}", shown)
    return done.stdout
