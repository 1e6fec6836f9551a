"""kubeconform's own acceptance suite, run with bats against `trainops kubeconform`.

The suite (tests/peer/kubeconform, see its SOURCE) calls `bin/kubeconform`; here that
is a link to the trainops executable, which behaves as kubeconform under that name.
Every case runs except those in EXCLUDED, each with its reason. bats is required, not
optional: CI installs it (.ci/run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

SUITE = REPO / "tests" / "peer" / "kubeconform"
TRAINOPS = Path(sys.executable).parent / "trainops"

NEEDS_NETWORK = "downloads schemas from raw.githubusercontent.com; CI has no network"
EXCLUDED = {
    "acceptance.bats": {
        "Pass when using a valid HTTP -schema-location": NEEDS_NETWORK,
        "Pass when using schemas with HTTP references": NEEDS_NETWORK,
        "Pass with a valid input when validating against openshift manifests": NEEDS_NETWORK,
        "HTTP references should be cached": NEEDS_NETWORK,
        "Fail when using HTTPS_PROXY with a failing proxy": (
            "expects Go's proxy error text from a network connection attempt"
        ),
        "passes when trying to use a CRD that does not have the JSONSchema set": NEEDS_NETWORK,
    },
    "acceptance-nonetwork.bats": {
        "Fail when parsing a valid Kubernetes config YAML file without network access": (
            "deliberate difference: the default location is served offline from the "
            "bundled core schemas, so it passes without network"
        ),
    },
}


def _test_names(bats_file: Path) -> list[str]:
    return re.findall(r'^@test "(.*)" \{$', bats_file.read_text(), re.MULTILINE)


def _only(names: list[str]) -> str:
    """A bats --filter (POSIX extended regex) matching exactly these test names."""
    escaped = (re.sub(r"([][.^$*+?(){}|\\/])", r"\\\1", name) for name in names)
    return "^(" + "|".join(escaped) + ")$"


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    bats = shutil.which("bats")
    assert bats, "bats is missing: .ci/run installs it (apt-get install -y bats)"
    assert shutil.which("xmllint"), "xmllint is missing: apt-get install -y libxml2-utils"
    work = tmp_path_factory.mktemp("kubeconform-suite") / "suite"
    shutil.copytree(SUITE, work)
    (work / "bin").mkdir()
    (work / "bin" / "kubeconform").symlink_to(TRAINOPS)
    valid = (work / "fixtures" / "valid.yaml").read_text()
    (work / "fixtures" / "valid_large.yaml").write_text(("---\n" + valid) * 100_000)
    return work


@pytest.mark.slow
@pytest.mark.parametrize("bats_file", sorted(EXCLUDED))
def test_kubeconform_acceptance_suite_passes(suite: Path, bats_file: str):
    names = _test_names(suite / bats_file)
    excluded = EXCLUDED[bats_file]
    assert set(excluded) <= set(names), "an excluded case no longer exists in the suite"
    included = [name for name in names if name not in excluded]
    env = dict(os.environ, TRAINOPS_KUBECONFORM="builtin")
    done = subprocess.run(
        ["bats", "--tap", "--filter", _only(included), bats_file],
        cwd=suite,
        env=env,
        stdin=subprocess.DEVNULL,  # as in CI; the suite's stdin cases rely on it
        capture_output=True,
        text=True,
        check=False,
    )
    passed = re.findall(r"^ok \d+ (.*)$", done.stdout, re.MULTILINE)
    failed = re.findall(r"^not ok \d+ (.*)$", done.stdout, re.MULTILINE)
    assert not failed, done.stdout
    assert sorted(passed) == sorted(included), done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
