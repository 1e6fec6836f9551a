"""The policy pass is linear in the size of the render: counted, not timed.

Every Python and C function call made while evaluating the pack is counted on a
synthetic render of 1,000 and of 10,000 resources (tests/scale.py). A rule that
rescans the render for each resource makes the count grow a hundredfold; a
linear pass grows it tenfold. Counting keeps the test exact on a busy machine.

Over every rule's fixtures (tests/scale.py's `every_fixture_render`), the lines executed
are counted per rule, so a rule whose loop compares each object with all others is seen
even where it makes no call and where its share of the whole pass is small.
"""

from __future__ import annotations

import sys
from collections import Counter

from tests.scale import every_fixture_render, synthetic_render
from tests.support import REPO
from trainops.model import Document, Target
from trainops.policy import Context, engine
from trainops.policy.engine import evaluate
from trainops.policy.settings import PolicySettings, load_pack

load_pack(REPO / "policies")


def _calls_to_evaluate(resources: int, target: str = "render") -> tuple[int, int, list]:
    documents = [Document(obj=o, source=target) for o in synthetic_render(resources)]
    calls, found = _counted(documents, target)
    return calls, len(documents), found


def _counted(documents: list[Document], target: str) -> tuple[int, list]:
    """The Python and C calls the pack makes on `documents`, and what it found."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        found = evaluate(Context(Target("kustomization", target), documents), PolicySettings())
    finally:
        sys.setprofile(None)
    return calls, found


def test_policy_calls_grow_linearly_with_the_render():
    small, small_docs, small_found = _calls_to_evaluate(1_000)
    large, large_docs, large_found = _calls_to_evaluate(10_000)
    assert large_docs >= 9 * small_docs
    # The renders are clean, so the count measures the rules' work, not their findings.
    assert [f for f in small_found + large_found if f.severity != "info"] == []
    assert large / small <= 11 * large_docs / small_docs / 10, (small, large)


def test_a_runs_checks_grow_linearly_too():
    # In a run, the run rules (run-kind-synced, posture, the platform-first lookups) see
    # every object; most of a synthetic platform's kinds are findings there.
    run = "overlays/lab/runs/big"
    small, small_docs, small_found = _calls_to_evaluate(1_000, run)
    large, large_docs, _ = _calls_to_evaluate(10_000, run)
    assert [f for f in small_found if f.rule == "run-kind-synced"]
    assert large / small <= 11 * large_docs / small_docs / 10, (small, large)


def _pod_with_volumes(count: int) -> dict:
    """A Job whose one container mounts each of `count` volumes."""
    volumes = [{"name": f"v{i}", "emptyDir": {}} for i in range(count)]
    mounts = [{"name": f"v{i}", "mountPath": f"/data/{i}"} for i in range(count)]
    container = {"name": "main", "image": "busybox:1.36", "volumeMounts": mounts}
    spec = {"restartPolicy": "Never", "containers": [container], "volumes": volumes}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "wide", "namespace": "training"},
        "spec": {"template": {"spec": spec}},
    }


def _calls_for_one_pod(volumes: int) -> int:
    return _counted([Document(obj=_pod_with_volumes(volumes), source="render")], "render")[0]


def test_a_pods_checks_grow_linearly_with_its_volumes():
    """Attack round 14 F3: two rules looked a mount's volume up by scanning the pod's
    volumes, so 60,000 mounted volumes (4.8 MB) took 247 CPU-s."""
    small, large = _calls_for_one_pod(500), _calls_for_one_pod(5_000)
    assert large / small <= 11, (small, large)


def _pool_configs(count: int) -> list[Document]:
    """SR-IOV pool configs of distinct racks, and one selector for two labels of rack 0."""
    pools = [{"rack": f"r{i}", "pool": "gpu"} for i in range(count)]
    docs = [
        {
            "apiVersion": "sriovnetwork.openshift.io/v1",
            "kind": "SriovNetworkPoolConfig",
            "metadata": {"name": f"pool-{i}", "namespace": "sriov-network-operator"},
            "spec": {"maxUnavailable": 1, "nodeSelector": {"matchLabels": labels}},
        }
        for i, labels in enumerate(pools)
    ]
    return [Document(obj=d, source="render") for d in docs]


def test_overlapping_pool_configs_are_found_in_linear_work():
    # A pass that compares every pair of pools grows a hundredfold here.
    small, small_found = _counted(_pool_configs(1_000), "render")
    large, large_found = _counted(_pool_configs(10_000), "render")
    assert not [f for f in small_found + large_found if f.rule == "sriov-pool-config-overlap"]
    assert large / small <= 11, (small, large)


def _lines_per_rule(copies: int, monkeypatch) -> Counter:
    """Lines executed while evaluating the pack on `copies` copies of every fixture, by
    the rule whose check was running ("" for the engine, render rules included)."""
    documents = [Document(obj=o, source="fixture.yaml") for o in every_fixture_render(copies)]
    lines: Counter = Counter()
    running = [""]
    kept = engine._first_violations

    def attributed(rule, violations):
        found = kept(rule, violations)
        while True:
            running[0] = rule.id
            try:
                violation = next(found)
            except StopIteration:
                return
            finally:
                running[0] = ""
            yield violation

    def local(frame, event, arg):
        lines[running[0]] += 1
        return local

    with monkeypatch.context() as patch:
        patch.setattr(engine, "_first_violations", attributed)
        sys.settrace(lambda frame, event, arg: local)
        try:
            evaluate(Context(Target("file", "fixture.yaml"), documents), PolicySettings())
        finally:
            sys.settrace(None)
    return lines


def test_every_rule_grows_linearly_over_every_fixture(monkeypatch):
    small = _lines_per_rule(1, monkeypatch)
    large = _lines_per_rule(3, monkeypatch)
    assert len(small) > 200  # the rules ran, each counted apart
    # Three copies cost three times one; a rule that pairs objects costs nine times. The
    # slack covers rules whose work is a few thousand lines of fixed cost.
    grown = {
        rule: (small[rule], large[rule])
        for rule in large
        if large[rule] > 3.3 * small[rule] + 5_000
    }
    assert grown == {}
