"""Issue 11's defects: the pre-fix shapes of the repository's own content
(tests/gitops_defects/, rendered at commit 3d03f88) are each reported by `trainops
validate`, and the fixed overlays and the README's new clusters have none of them."""

from __future__ import annotations

import json

import pytest

# file -> the rules each pre-fix shape must trip
EXPECTED = {
    "gpu-platform.yaml": {"argocd-single-owner"},
    "operators.yaml": {"image-pinned", "multus-memory-limit"},
    "prod-roce.yaml": {
        "kueue-covers-requests",
        "queue-label-unmanaged-kind",
        "nccl-ib-hca-exact-vf",
        "mpi-idle-workers-kept",
        "backoff-limit-exitcode",
        "shutdown-timeout-grace",
        "fsgroup-change-policy",
    },
    "prod-ib.yaml": {"sriov-vfs-attached", "nccl-ib-hca-exact-vf"},
    "prod-b200-mpijob.yaml": {"rdma-ipc-lock", "mpi-idle-workers-kept"},
    "argocd.yaml": {
        "appproject-chart-namespaces",
        "appproject-namespaced-kinds",
        "applicationset-preserve-resources",
    },
}
DEFECT_RULES = set().union(*EXPECTED.values())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_validate_reports_each_pre_fix_defect(trainops, name):
    run = trainops("validate", "--format", "json", f"tests/gitops_defects/{name}")
    assert run.code in (0, 1), run.err
    found = {f["rule"] for f in json.loads(run.out)["findings"]}
    missing = EXPECTED[name] - found
    assert not missing, f"{name}: not reported: {sorted(missing)}"


def test_the_fixed_overlays_and_argocd_have_none_of_them(trainops):
    run = trainops("validate", "--format", "json", "--show-info", "overlays", "argocd")
    found = {f["rule"] for f in json.loads(run.out)["findings"]}
    assert run.code == 0 and not found & DEFECT_RULES, sorted(found & DEFECT_RULES)
