"""`applies` predicates that state a rule's precondition only save work.

Some predicates say which pods a rule is about (`gpu_trainer`: checkpoints matter for
GPU trainers); others only keep a rule from input it cannot find anything in (no env,
no command, no queue label). Every fixture (failing and passing, the catalog's extra
cases, the baseline) must give the same findings with the latter removed. A predicate
that raises lets its rules run.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import replace

import pytest

from tests.policies import catalog_fixtures, fixtures
from tests.policies.test_engine import NO_SHM, run
from tests.support import REPO
from trainops.model import Document, Target
from trainops.policy import engine
from trainops.policy.engine import Context, PolicySettings, evaluate, registered
from trainops.policy.settings import PACK_MODULE, load_pack

load_pack(REPO / "policies")
common, gitops, nccl, placement, scheduling, mpi = (
    importlib.import_module(f"{PACK_MODULE}.{name}")
    for name in ("common", "gitops", "nccl", "placement", "scheduling", "mpi")
)

PRECONDITIONS = {
    common.has_env,
    common.has_command,
    common.has_command_or_env,
    common.mounts_volumes,
    common.mounts_claims,
    common.requests_rdma,
    common.attaches_networks,
    common.runs_torchrun,
    common.torch_rendezvous,
    common.queued,
    common.queued_pod,
    placement.names_queue,
    scheduling._may_misplace_queue_label,
    nccl._may_pick_interface,
    gitops._unnamed,
    mpi._mpijob_owner,
    engine.exemption_annotations_present,
}
RENDERS = [
    fixtures.baseline,
    *(render for pair in fixtures.FIXTURES.values() for render in pair),
    *(render for pair in catalog_fixtures.FIXTURES.values() for render in pair),
    *(render for pairs in catalog_fixtures.MORE.values() for pair in pairs for render in pair),
]


def _findings(docs: list[dict]) -> list[tuple]:
    documents = [Document(obj=copy.deepcopy(d), source="fixture.yaml") for d in docs]
    found = evaluate(Context(Target("file", "fixture.yaml"), documents), PolicySettings())
    return sorted((f.rule, f.resource, f.path, f.severity, f.message) for f in found)


def test_the_pack_gates_rules_with_preconditions():
    gated = [r for r in registered().values() if r.applies in PRECONDITIONS]
    assert {r.scope for r in gated} == {"resource", "pod"}
    assert {r.applies for r in gated} == PRECONDITIONS


def test_no_predicate_hides_a_finding_on_any_fixture(monkeypatch):
    renders = [render() for render in RENDERS]
    gated = [_findings(docs) for docs in renders]
    for rule in registered().values():
        if rule.applies in PRECONDITIONS:
            monkeypatch.setitem(engine._RULES, rule.id, replace(rule, applies=None))
    ungated = [_findings(docs) for docs in renders]
    assert sum(map(len, gated)) > len(renders)  # the fixtures do fire
    for index, (with_predicates, without) in enumerate(zip(gated, ungated, strict=True)):
        assert with_predicates == without, f"render {index} ({RENDERS[index].__name__})"


def _broken(subject) -> bool:
    raise TypeError("unhashable")


@pytest.mark.parametrize("rule_id", ["dev-shm-missing", "policy-exemption"])
def test_a_predicate_that_raises_lets_its_rules_run(monkeypatch, rule_id):
    rule = registered()[rule_id]
    assert rule.applies is not None
    docs = NO_SHM()
    docs[-1]["metadata"].setdefault("annotations", {})["trainops.dev/exempt-no-such-rule"] = "x"
    monkeypatch.setitem(engine._RULES, rule_id, replace(rule, applies=_broken))
    assert rule_id in {f.rule for f in run(docs)}


def test_a_predicate_that_fails_keeps_its_rule_away(monkeypatch):
    rule = registered()["policy-exemption"]
    docs = fixtures.baseline()
    docs[-1]["metadata"].setdefault("annotations", {})["trainops.dev/exempt-no-such-rule"] = "x"
    assert "policy-exemption" in {f.rule for f in run(docs)}
    monkeypatch.setitem(engine._RULES, rule.id, replace(rule, applies=lambda doc: False))
    assert "policy-exemption" not in {f.rule for f in run(docs)}
