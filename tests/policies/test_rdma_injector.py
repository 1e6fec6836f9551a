"""rdma-resource-missing's severity follows who can add a network's RDMA request: an error
when nothing does, a warning when the render cannot say whether the network-resources-
injector runs, quiet when the render's SriovOperatorConfig enables it."""

from __future__ import annotations

import pytest

from tests.policies.areas.rdma import without_rdma_request
from tests.policies.test_rules import findings


@pytest.mark.parametrize(
    ("build", "severities"),
    [
        (without_rdma_request(), {"warning"}),
        (without_rdma_request(injector=False), {"error"}),
        (without_rdma_request(injector=True), set()),
        (without_rdma_request(annotated=False), {"error"}),
    ],
    ids=["injector-unknown", "injector-off", "injector-on", "no-resource-named"],
)
def test_rdma_request_severity_follows_the_injector(build, severities):
    found = {f.severity for f in findings(build()) if f.rule == "rdma-resource-missing"}
    assert found == severities
