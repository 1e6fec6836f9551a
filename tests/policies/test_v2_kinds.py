"""MPI rules on MPIJob v2beta1 and Trainer v2 runtimes, the Trainer v2 rules, and TrainJob
findings reported at the TrainJob's own paths (fixtures: tests/policies/fixtures.py)."""

from __future__ import annotations

import pytest

from tests.policies.fixtures import (
    MORE_FIXTURES,
    V2BETA1_FIXTURES,
    baseline_v2,
    edit_v2,
    named,
)
from tests.policies.test_rules import findings
from tests.support import REPO
from trainops.model import Document, Target
from trainops.policy import Context
from trainops.policy.engine import evaluate
from trainops.policy.settings import PolicySettings
from trainops.profile.model import load_profile

PAIRS = list(V2BETA1_FIXTURES.items()) + [
    (rule, pair) for rule, pairs in MORE_FIXTURES.items() for pair in pairs
]


def test_the_v2_baseline_render_is_clean():
    problems = [f for f in findings(baseline_v2()) if f.severity != "info"]
    assert problems == []


@pytest.mark.parametrize(
    ("rule_id", "pair"), PAIRS, ids=[f"{rule}-{i}" for i, (rule, _) in enumerate(PAIRS)]
)
def test_rule_fires_on_its_failing_fixture_and_not_on_its_passing_one(rule_id, pair):
    failing, passing = pair
    hits = [f for f in findings(failing()) if f.rule == rule_id]
    assert hits, f"{rule_id} did not fire"
    for hit in hits:
        assert hit.message and hit.fix and hit.resource
    assert [f.message for f in findings(passing()) if f.rule == rule_id] == []


def _on(docs, rule_id):
    return [f for f in findings(docs) if f.rule == rule_id]


def test_a_trainjob_inherits_its_runtimes_mpi_finding_at_spec_runtime_ref():
    def forward_less(docs):
        runtime = named(docs, "ClusterTrainingRuntime", "mpi-distributed-roce")
        job = runtime["spec"]["template"]["spec"]["replicatedJobs"][1]
        command = job["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
        index = command.index("NCCL_IB_GID_INDEX")
        del command[index - 1 : index + 1]

    hits = _on(edit_v2(forward_less)(), "mpi-forwards-nccl")
    by_resource = {f.resource: f for f in hits}
    runtime = by_resource["ClusterTrainingRuntime//mpi-distributed-roce"]
    assert runtime.path.startswith("spec.template.spec.replicatedJobs[1]")
    assert "NCCL_IB_GID_INDEX" in runtime.message
    on_job = by_resource["TrainJob/training/llama-mpi"]
    assert on_job.path == "spec.runtimeRef"
    assert "from ClusterTrainingRuntime mpi-distributed-roce" in on_job.message


def test_a_trainjobs_broken_override_is_reported_at_its_own_path():
    """The issue's acceptance case: NCCL_SOCKET_IFNAME naming an interface the runtime's
    network does not give the pod, set through trainer.env."""

    def override(docs):
        trainer = named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]
        trainer["env"] = [{"name": "NCCL_SOCKET_IFNAME", "value": "=ib0"}]

    [hit] = _on(edit_v2(override)(), "nccl-socket-ifname")
    assert hit.resource == "TrainJob/training/llama-v2"
    assert hit.path == "spec.trainer.env[0].value"


def _dshm_patch(volume):
    pod = {"spec": {"volumes": [volume]}}
    job = {"name": "node", "template": {"spec": {"template": pod}}}
    return {
        "manager": "trainops.dev/run",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


def test_a_runtime_patch_that_puts_dev_shm_on_disk_is_reported_at_the_patch():
    def patch(docs):
        named(docs, "TrainJob", "llama-v2")["spec"]["runtimePatches"] = [
            _dshm_patch({"name": "dshm", "emptyDir": {"medium": ""}})
        ]

    [hit] = [f for f in findings(edit_v2(patch)()) if f.rule == "dev-shm-not-memory"]
    assert hit.resource == "TrainJob/training/llama-v2"
    assert hit.path.startswith("spec.runtimePatches[0].trainingRuntimeSpec.template")


def _with_profile(docs, profile):
    documents = [Document(obj=d, source="fixture.yaml") for d in docs]
    ctx = Context(Target("file", "fixture.yaml"), documents, profile=profile)
    return [f for f in evaluate(ctx, PolicySettings()) if f.rule == "trainjob-num-nodes"]


def test_more_nodes_than_the_cluster_has_never_schedule():
    profile = load_profile(REPO / "overlays/prod-b200/cluster.yaml")

    def nodes(count):
        def change(docs):
            named(docs, "TrainJob", "llama-v2")["spec"]["trainer"]["numNodes"] = count

        return edit_v2(change)()

    [too_many] = _with_profile(nodes(profile.nodes + 1), profile)
    assert too_many.path == "spec.trainer.numNodes"
    assert f"has {profile.nodes} GPU nodes" in too_many.message
    assert _with_profile(nodes(profile.nodes), profile) == []
