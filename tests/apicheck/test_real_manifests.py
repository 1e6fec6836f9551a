"""No new error on real manifests: the repository's render, pinned upstream installs and the
corpus of others' manifests. A finding here would be either an upstream problem (listed with
its reason) or a bug in the checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO

OURS = {"cel", "api-validation", "webhook"}
SHARED = next(
    (p for p in (REPO.parent / "shared", REPO.parents[1] / "shared") if (p / "upstream").is_dir()),
    None,
)
UPSTREAM = [
    "kubeflow-training-operator-v1.9.0/manifests",
    "kubeflow-mpi-operator-v0.8.0/manifests/overlays/standalone",
    "kubeflow-trainer-v2.3.0/manifests",
    "kubernetes-sigs-jobset-v0.12.0/config/default",
    "multus-cni-v4.3.0/deployments",
]
# (path of the finding, start of its message): why upstream ships it. Empty: none found.
GENUINE: dict[tuple[str, str], str] = {}
needs_shared = pytest.mark.skipif(SHARED is None, reason="shared/ is not next to the repository")


def our_findings(run) -> set[tuple[str, str]]:
    report = json.loads(run.out)
    assert "Traceback" not in run.err
    assert report["summary"]["resources"] > 0
    return {(f["path"], f["message"][:60]) for f in report["findings"] if f["rule"] in OURS}


@pytest.mark.slow
def test_the_repositorys_own_render_gets_no_new_error(trainops):
    run = trainops("validate", "--no-policies", "--format", "json", "overlays", "argocd")
    assert run.code == 0, run.out[-2000:]
    assert our_findings(run) == set()


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("path", UPSTREAM)
def test_pinned_upstream_installs_get_no_new_error(trainops, path: str):
    run = trainops(
        "validate",
        "--no-policies",
        "--ignore-missing-schemas",
        "--format",
        "json",
        str(SHARED / "upstream" / path),
    )
    assert set(our_findings(run)) <= set(GENUINE)


@needs_shared
@pytest.mark.parametrize(
    "corpus",
    ["kubeflow-training-operator-v1.9.0-examples", "kubeflow-mpi-operator-v0.8.0-examples"],
)
def test_the_corpus_gets_no_new_error(trainops, corpus: str):
    run = trainops(
        "validate", "--no-policies", "--format", "json", str(Path(SHARED, "corpus", corpus))
    )
    assert set(our_findings(run)) <= set(GENUINE)
