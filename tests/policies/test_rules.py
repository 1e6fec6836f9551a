"""Every policy rule fires on its failing fixture and stays quiet on its passing one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.policies import catalog_fixtures, fixtures
from tests.policies.fixtures import RENDER_FIXTURES, baseline
from tests.support import REPO, write
from trainops.model import Document, Target
from trainops.policy import Context, registered
from trainops.policy.engine import evaluate
from trainops.policy.settings import PolicySettings, load_pack
from trainops.render.engine import Renderer, RenderOptions

load_pack(REPO / "policies")


# The pack's fixtures, those of the rules written from the failure-mode catalog, and further
# cases of either (MORE).
FIXTURES = {**fixtures.FIXTURES, **catalog_fixtures.FIXTURES}
assert not set(fixtures.FIXTURES) & set(catalog_fixtures.FIXTURES)
assert not set(fixtures.MORE) & set(catalog_fixtures.MORE)
MORE = [
    (rule, pair)
    for rule, pairs in {**fixtures.MORE, **catalog_fixtures.MORE}.items()
    for pair in pairs
]


def findings(docs: list[dict], target: str = "fixture.yaml") -> list:
    documents = [Document(obj=copy.deepcopy(d), source=target) for d in docs]
    return evaluate(Context(Target("file", target), documents), PolicySettings())


def test_every_rule_has_fixtures():
    policy_rules = {rule_id for rule_id, rule in registered().items()}
    assert policy_rules == set(FIXTURES) | RENDER_FIXTURES


def test_the_baseline_render_is_clean():
    problems = [f for f in findings(baseline()) if f.severity != "info"]
    assert problems == []


@pytest.mark.parametrize("rule_id", sorted(FIXTURES))
def test_rule_fires_on_its_failing_fixture(rule_id):
    failing, _ = FIXTURES[rule_id]
    hits = [f for f in findings(failing()) if f.rule == rule_id]
    assert hits, f"{rule_id} did not fire"
    for hit in hits:
        assert hit.message and hit.fix and hit.resource


@pytest.mark.parametrize("rule_id", sorted(FIXTURES))
def test_rule_is_quiet_on_its_passing_fixture(rule_id):
    _, passing = FIXTURES[rule_id]
    assert [f.message for f in findings(passing()) if f.rule == rule_id] == []


@pytest.mark.parametrize(
    ("rule_id", "pair"), MORE, ids=[f"{rule}-{index}" for index, (rule, _) in enumerate(MORE)]
)
def test_further_cases_of_a_rule(rule_id, pair):
    failing, passing = pair
    assert [f for f in findings(failing()) if f.rule == rule_id], f"{rule_id} did not fire"
    assert [f.message for f in findings(passing()) if f.rule == rule_id] == []


def _remote_kustomization(tmp_path: Path, ref: str) -> list:
    overlay = tmp_path / "overlay"
    write(
        overlay / "kustomization.yaml",
        f"resources:\n- https://github.com/acme/widgets//deploy{ref}\n",
    )
    mirror = tmp_path / "mirror"
    for name in ("acme-widgets-v1.2.3", "acme-widgets-main"):
        write(mirror / name / "deploy" / "kustomization.yaml", "resources:\n- cm.yaml\n")
        write(
            mirror / name / "deploy" / "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
        )
    [result] = Renderer(RenderOptions(mirror=mirror)).render(
        [Target("kustomization", str(overlay))]
    )
    ctx = Context(result.target, result.documents, inputs=result.inputs)
    return [f for f in evaluate(ctx, PolicySettings()) if f.rule == "remote-base-pinned"]


def test_remote_base_pinned_fires_on_a_branch(tmp_path: Path):
    [finding] = _remote_kustomization(tmp_path, "?ref=main")
    assert "ref 'main' is a branch" in finding.message and finding.path == "resources[0]"


def test_remote_base_pinned_is_quiet_on_a_tag(tmp_path: Path):
    assert _remote_kustomization(tmp_path, "?ref=v1.2.3") == []
