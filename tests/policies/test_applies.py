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
from tests.support import REPO, SHARED
from trainops.errors import InputError
from trainops.model import Document, Target
from trainops.policy import Context, engine, registered, registry, sets_any
from trainops.policy.engine import evaluate
from trainops.policy.settings import PACK_MODULE, PolicySettings, load_pack
from trainops.yamlio import load_documents, read_text

load_pack(REPO / "policies")
common, gitops, nccl, placement, scheduling, mpi, exemptions = (
    importlib.import_module(f"{PACK_MODULE}.{name}")
    for name in ("common", "gitops", "nccl", "placement", "scheduling", "mpi", "exemptions")
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
    exemptions.exemption_annotations_present,
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
            monkeypatch.setitem(registry._RULES, rule.id, replace(rule, applies=None))
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
    monkeypatch.setitem(registry._RULES, rule_id, replace(rule, applies=_broken))
    assert rule_id in {f.rule for f in run(docs)}


def test_a_predicate_that_fails_keeps_its_rule_away(monkeypatch):
    rule = registered()["policy-exemption"]
    docs = fixtures.baseline()
    docs[-1]["metadata"].setdefault("annotations", {})["trainops.dev/exempt-no-such-rule"] = "x"
    assert "policy-exemption" in {f.rule for f in run(docs)}
    monkeypatch.setitem(registry._RULES, rule.id, replace(rule, applies=lambda doc: False))
    assert "policy-exemption" not in {f.rule for f in run(docs)}


# -- what predicates need (engine.needs, engine.sets_any) --------------------------------

MANIFEST_ROOTS = [
    REPO / "tests" / "corpus",
    REPO / "tests" / "heldout",
    REPO / "tests" / "blind",
    REPO / "base",
    *([SHARED / "corpus", SHARED / "upstream"] if SHARED is not None else []),
]


def _manifests() -> list[tuple[str, list[Document]]]:
    """Every YAML file of the repository's and upstream's manifests that parses."""
    found = []
    for root in MANIFEST_ROOTS:
        for path in sorted(root.rglob("*.y*ml")):
            if path.stat().st_size > 2_000_000:
                continue
            try:
                documents = load_documents(read_text(path), str(path))
            except InputError:
                continue  # hostile or templated input: not a render
            if documents:
                found.append((str(path.relative_to(root.parent)), documents))
    return found


# Containers that set only one of two names most real pods set together: a declaration
# that names the wrong one of them shows only on such pods.
STRIPPED = (("command", "args"), ("env",))


def _stripped(obj: object, names: tuple[str, ...]) -> object:
    """A copy of `obj` whose containers, at any depth, set none of `names`."""
    if isinstance(obj, list):
        return [_stripped(item, names) for item in obj]
    if not isinstance(obj, dict):
        return obj
    copied = {key: _stripped(value, names) for key, value in obj.items()}
    for key in ("containers", "initContainers"):
        if isinstance(copied.get(key), list):
            copied[key] = [
                {k: v for k, v in c.items() if k not in names} if isinstance(c, dict) else c
                for c in copied[key]
            ]
    return copied


def _variants(cases: list[tuple[str, list[Document]]]) -> list[tuple[str, list[Document]]]:
    found = []
    for name, documents in cases:
        for names in STRIPPED:
            objs = [_stripped(d.obj, names) for d in documents]
            if objs != [d.obj for d in documents]:
                variant = [
                    Document(obj=obj, source=d.source)
                    for obj, d in zip(objs, documents, strict=True)
                ]
                found.append((f"{name} without {'/'.join(names)}", variant))
    return found


def _evaluate(documents: list[Document]) -> list[tuple]:
    copies = [Document(obj=copy.deepcopy(d.obj), source=d.source) for d in documents]
    found = evaluate(Context(Target("file", "render.yaml"), copies), PolicySettings())
    return sorted((f.rule, f.resource, f.path, f.severity, f.message) for f in found)


def _without_needs(self, kind, features):
    """Every pod rule of the kind, each predicate called: as if nothing declared needs."""
    return [(applies, rules) for applies, _, rules in self.pod.get(kind, ())]


def _without_render_needs(monkeypatch) -> None:
    """Every rule runs on every render: as if no rule declared `render_needs`."""
    for rule in registered().values():
        if rule.render_needs:
            monkeypatch.setitem(registry._RULES, rule.id, replace(rule, render_needs=frozenset()))


def test_what_rules_need_never_hides_a_finding(monkeypatch):
    cases = [
        (render.__name__, [Document(obj=d, source="fixture.yaml") for d in render()])
        for render in RENDERS
    ]
    cases += _manifests()
    assert len(cases) > 300  # the fixtures and several hundred real files
    cases += _variants(cases)
    selected = []
    original = engine._Dispatch.pod_groups

    def counting(self, kind, features):
        groups = original(self, kind, features)
        selected.append(sum(len(rules) for _, rules in groups))
        return groups

    monkeypatch.setattr(engine._Dispatch, "pod_groups", counting)
    with_needs = [_evaluate(documents) for _, documents in cases]
    monkeypatch.setattr(engine._Dispatch, "pod_groups", _without_needs)
    _without_render_needs(monkeypatch)
    without = [_evaluate(documents) for _, documents in cases]
    assert sum(map(len, with_needs)) > len(cases)  # the cases do fire
    for (name, _), gated, ungated in zip(cases, with_needs, without, strict=True):
        assert gated == ungated, name
    every_rule = len(registered())
    assert selected and sum(selected) < len(selected) * every_rule // 2  # needs skip work


def test_a_wrong_need_is_caught(monkeypatch):
    """What the test above relies on: a rule gated on the wrong field misses its finding."""
    pod = {"hostNetwork": True, "containers": [{"name": "c", "image": "registry/c:1.0"}]}
    docs = [
        Document(
            obj={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod},
            source="fixture.yaml",
        )
    ]
    assert "host-network" in {f[0] for f in _evaluate(docs)}
    rule = registered()["host-network"]
    monkeypatch.setitem(registry._RULES, rule.id, replace(rule, applies=sets_any("hostPID")))
    assert "host-network" not in {f[0] for f in _evaluate(docs)}
    monkeypatch.setattr(engine._Dispatch, "pod_groups", _without_needs)
    assert "host-network" in {f[0] for f in _evaluate(docs)}


def test_a_wrong_render_need_is_caught(monkeypatch):
    """A rule that names the wrong kinds in `render_needs` misses its finding."""
    docs = [
        Document(obj=d, source="fixture.yaml")
        for d in catalog_fixtures.FIXTURES["priority-class-exists"][0]()
    ]
    assert "priority-class-exists" in {f[0] for f in _evaluate(docs)}
    rule = registered()["priority-class-exists"]
    wrong = replace(rule, render_needs=frozenset({"NoSuchKind"}))
    monkeypatch.setitem(registry._RULES, rule.id, wrong)
    assert "priority-class-exists" not in {f[0] for f in _evaluate(docs)}
    _without_render_needs(monkeypatch)
    assert "priority-class-exists" in {f[0] for f in _evaluate(docs)}


def test_pods_of_many_shapes_keep_the_selection_bounded_and_still_meet_their_rules(monkeypatch):
    """Hostile input with different fields on every pod cannot grow what the engine keeps,
    and a pod met after the limit still gets the rules its fields call for."""
    monkeypatch.setattr(engine, "SELECTIONS_KEPT", 10)
    docs = []
    for index in range(40):
        spec = {f"x-field-{index}": 1, "containers": [{"name": "c", "image": "registry/c:1.0"}]}
        if index == 39:
            spec["hostNetwork"] = True
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{index}"}})
        docs[-1]["spec"] = spec
    documents = [Document(obj=d, source="fixture.yaml") for d in docs]
    in_force = engine.in_force(Context(Target("file", "render.yaml"), documents), PolicySettings())
    dispatch = engine._dispatch(in_force)
    dispatch._selected.clear()
    found = _evaluate(documents)
    assert len(dispatch._selected) == 10
    assert ("host-network", "Pod//p39") in {(f[0], f[1]) for f in found}
