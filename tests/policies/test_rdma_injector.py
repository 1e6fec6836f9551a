"""rdma-resource-missing's severity follows who can add a network's RDMA request and what
NCCL does without it: quiet when the render's SriovOperatorConfig enables the network-
resources-injector, a warning when nothing adds it or the render cannot say (NCCL falls back
to sockets), an error when NCCL_NET=IB leaves NCCL no fallback (its init fails)."""

from __future__ import annotations

import pytest

from tests.policies.areas.rdma import without_rdma_request
from tests.policies.test_rules import findings


@pytest.mark.parametrize(
    ("build", "severities"),
    [
        (without_rdma_request(), {"warning"}),
        (without_rdma_request(injector=False), {"warning"}),
        (without_rdma_request(injector=True), set()),
        (without_rdma_request(annotated=False), {"warning"}),
        (without_rdma_request(injector=False, ib_only=True), {"error"}),
        (without_rdma_request(annotated=False, ib_only=True), {"error"}),
        (without_rdma_request(injector=True, ib_only=True), set()),
    ],
    ids=[
        "injector-unknown",
        "injector-off",
        "injector-on",
        "no-resource-named",
        "ib-only-injector-off",
        "ib-only-no-resource-named",
        "ib-only-injector-on",
    ],
)
def test_rdma_request_severity_follows_the_injector(build, severities):
    found = {f.severity for f in findings(build()) if f.rule == "rdma-resource-missing"}
    assert found == severities
