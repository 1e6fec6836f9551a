"""The severity contract (docs/policies.md): every error cites a pinned source.

`error` is a claim that the cluster refuses the object or that the workload fails, hangs,
loses data or runs silently wrong; a rule that can report it cites the pinned upstream
code line or versioned document that shows it. A rule reporting several severities says
when it reports each, and what the fixtures make it report stays within what it says.
"""

from __future__ import annotations

import copy

import pytest

from tests.policies import catalog_fixtures, fixtures
from tests.support import REPO
from trainops.model import ERROR, WARNING, Document, Target
from trainops.policy import Context, registered
from trainops.policy.engine import evaluate
from trainops.policy.settings import PolicySettings, load_all
from trainops.rules import DOCTOR, RuleInfo, catalog, pinned

load_all(REPO / "policies")
# validate's checks; the doctor's findings diagnose logs and are held to their own catalog.
RULES = sorted(i for i, r in catalog().items() if r.category != DOCTOR)
RENDERS = [
    fixtures.baseline,
    *(render for pair in fixtures.FIXTURES.values() for render in pair),
    *(render for pair in catalog_fixtures.FIXTURES.values() for render in pair),
    *(render for pairs in catalog_fixtures.MORE.values() for pair in pairs for render in pair),
]


@pytest.mark.parametrize("rule_id", RULES)
def test_every_rule_keeps_the_severity_contract(rule_id):
    assert catalog()[rule_id].problems() == []


def test_an_error_without_a_source_breaks_the_contract():
    info = RuleInfo(id="x", severity=ERROR, title="t", why="w", fix="f")
    assert info.problems() == ["reports error but cites no source"]
    graded = RuleInfo(
        id="y", severity=WARNING, title="t", why="w", fix="f", when=(("error", "in a run"),)
    )
    assert "reports error but cites no source" in graded.problems()
    assert "`when` does not say when it reports its default warning" in graded.problems()


@pytest.mark.parametrize(
    ("url", "is_pinned"),
    [
        (
            "https://github.com/kubernetes/kubernetes/blob/v1.35.0/pkg/apis/core/validation/validation.go#L42",
            True,
        ),
        (
            "https://github.com/NVIDIA/nccl/blob/3000e3c797b4b236221188c07aa09c1f3a0170d4/src/misc/param.cc",
            True,
        ),
        ("https://github.com/NVIDIA/nccl/blob/master/src/misc/param.cc", False),
        ("https://github.com/kubeflow/trainer/tree/main/pkg", False),
        ("https://kubernetes.io/docs/concepts/storage/", False),
        (
            "https://docs.nvidia.com/deeplearning/nccl/archives/nccl_2283/user-guide/docs/env.html",
            False,
        ),
        (
            "https://docs.nvidia.com/deeplearning/nccl/archives/nccl_2.28.3/user-guide/env.html",
            True,
        ),
        ("https://v1-35.docs.kubernetes.io/docs/concepts/security/pod-security-standards/", True),
        ("docs/security.md#threat-model", True),
        ("docs/../etc/passwd.md", False),
        ("http://github.com/a/b/blob/v1.0/x", False),
    ],
)
def test_pinned_sources_name_one_release(url, is_pinned):
    assert pinned(url) is is_pinned


def test_fixtures_report_only_the_severities_their_rules_declare():
    rules = registered()
    wrong = set()
    for render in RENDERS:
        documents = [Document(obj=copy.deepcopy(d), source="fixture.yaml") for d in render()]
        ctx = Context(Target("file", "fixture.yaml"), documents)
        for finding in evaluate(ctx, PolicySettings()):
            rule = rules.get(finding.rule)
            if rule is None:
                continue
            declared = {rule.info.severity, *(level for level, _ in rule.info.when)}
            if finding.severity not in declared:
                wrong.add((finding.rule, finding.severity))
    assert sorted(wrong) == []
