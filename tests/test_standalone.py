"""The toolkit as a user installs it: a wheel built from this repository, installed
into a fresh virtual environment outside it, run from a directory that is no checkout.

The wheel carries the policy pack, the imported CRD schemas and the core Kubernetes
schemas; it brings neither torch nor the Kubernetes client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support import PYTORCHJOB, REPO, Run, copy_sources, write

NCCL_LOG = REPO / "tests" / "doctor" / "corpus" / "easyr1-579-no-p2p.txt"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = copy_sources(tmp_path_factory.mktemp("source"))
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    command = [*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", dist, source]
    subprocess.run(command, check=True, capture_output=True)
    [built] = dist.glob("trainops-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """bin/ of a fresh virtual environment holding the wheel and its dependencies."""
    environment = tmp_path_factory.mktemp("venv")
    # Installed by the development environment's pip (--python): the same result,
    # without seeding the new environment with a pip of its own first.
    venv.create(environment)
    python = str(environment / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]
    subprocess.run([*pip, "install", "--quiet", str(wheel)], check=True, capture_output=True)
    return environment / "bin"


@pytest.fixture
def outside(tmp_path: Path, installed: Path):
    """Run the installed `trainops` in a directory with no checkout above it."""
    home = tmp_path / "elsewhere"
    home.mkdir()
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("TRAINOPS_")
    }
    environment["TRAINOPS_CACHE_DIR"] = str(tmp_path / "cache")

    def call(*args: str, cwd: Path | None = None) -> Run:
        done = subprocess.run(
            [str(installed / "trainops"), *args],
            cwd=cwd or home,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    call.home = home
    return call


def test_wheel_carries_policies_and_schemas(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "trainops/bundled/policies/__init__.py" in names
    assert "trainops/bundled/policies/config.yaml" in names
    assert "trainops/bundled/schemas/kubeflow.org/pytorchjob_v1-strict.json" in names
    assert "trainops/schema/core/v1.35-strict.json.gz" in names
    metadata = zipfile.ZipFile(wheel).read("trainops-0.1.0.dist-info/METADATA").decode()
    required = [ln for ln in metadata.splitlines() if ln.startswith("Requires-Dist:")]
    plain = [ln for ln in required if "extra ==" not in ln]
    assert not any(name in " ".join(plain) for name in ("torch", "kubernetes", "rich")), plain


def test_installed_cli_validates_a_pytorchjob_with_the_policy_pack(outside):
    job = write(outside.home / "job.yaml", PYTORCHJOB.format(replicas_key="replicas"))
    run = outside("validate", "--format", "json", str(job))
    report = json.loads(run.out)
    rules = {finding["rule"] for finding in report["findings"]}
    assert "schema" not in rules, report  # the PyTorchJob schema was found
    assert "resources-set" in rules, rules  # the policy pack ran
    assert run.code == 0  # a warning
    typo = write(outside.home / "typo.yaml", PYTORCHJOB.format(replicas_key="replica"))
    checked = json.loads(outside("validate", "--no-policies", "--format", "json", str(typo)).out)
    assert [f["message"] for f in checked["findings"]] == ['unknown field "replica"']


def test_installed_cli_lists_and_explains_policies(outside):
    listing = outside("policies", "list")
    assert listing.code == 0 and "dev-shm-missing" in listing.out
    assert "memory-backed" in outside("policies", "explain", "dev-shm-missing").out


def test_installed_cli_reads_nccl_logs(outside):
    run = outside("doctor", "nccl", str(NCCL_LOG))
    assert "[p2p-unsupported]" in run.out, run.out + run.err


def test_installed_cli_diffs_a_gitops_checkout(outside, workspace: Path):
    run_file = workspace / "overlays" / "lab-tcp" / "runs" / "mlp-smoke-1121" / "kustomization.yaml"
    run_file.write_text(run_file.read_text().replace("'200'", "'300'"))
    run = outside("diff", "--format", "markdown", "overlays/lab-tcp/runs", cwd=workspace)
    assert run.code == 0, run.err
    assert "mlp-smoke-1121" in run.out and '"300"' in run.out


def test_cluster_commands_name_the_extra_they_need(outside):
    run = outside("doctor", "job", "some-job", "-n", "training")
    assert run.code == 2
    assert "pip install 'trainops[cluster]'" in run.err
    assert "Traceback" not in run.err
