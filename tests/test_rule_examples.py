"""policies/examples.yaml: each rule fires on the manifest it names and is quiet on the other.

docs/policies.md shows these examples; this test keeps them true.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import yaml

from tests.support import REPO, SHARED
from trainops.policy import SECURITY, registered
from trainops.policy.settings import load_pack

EXAMPLES = yaml.safe_load((REPO / "policies" / "examples.yaml").read_text())
HELDOUT = "tests/heldout/cases"


def _target(path: str) -> str | None:
    """Where a path of examples.yaml lives on disk (None: ../shared is not here)."""
    if path.startswith("upstream/"):
        return str(SHARED / path) if SHARED is not None else None
    return path  # relative to the repository, where the CLI runs


def _cases(kind: str) -> dict[str, str]:
    """rule -> the held-out variant (bad or good) named by `case` or `quiet_case`."""
    key, variant = ("case", "bad.yaml") if kind == "fires" else ("quiet_case", "good.yaml")
    return {r: f"{HELDOUT}/{e[key]}/{variant}" for r, e in EXAMPLES.items() if key in e}


@pytest.fixture
def rules_by_target(trainops) -> dict[str, set[str]]:
    paths = {e.get(k) for e in EXAMPLES.values() for k in ("fires", "quiet") if e.get(k)}
    targets = sorted({t for p in paths if (t := _target(p)) is not None})
    targets += sorted({*_cases("fires").values(), *_cases("quiet").values()})
    run = trainops("validate", "--show-info", "--format", "json", *targets)
    assert run.code in (0, 1) and "Traceback" not in run.err, run.err
    found: dict[str, set[str]] = defaultdict(set)
    for finding in json.loads(run.out)["findings"]:
        source = finding.get("target") or finding["source"]
        for target in targets:
            if source == target or source.startswith((target + ":", target + "/")):
                found[target].add(finding["rule"])
    return found


def test_every_policy_rule_has_examples():
    load_pack(REPO / "policies")
    policy_rules = {i for i, r in registered().items() if r.info.category in ("policy", SECURITY)}
    assert set(EXAMPLES) == policy_rules
    for rule, entry in EXAMPLES.items():
        assert {"fires", "case", "fixture"} & set(entry), rule
        assert {"quiet", "quiet_case"} & set(entry), rule


def test_rules_fire_on_their_example_and_stay_quiet_on_the_other(rules_by_target):
    wrong = []
    for rule, entry in EXAMPLES.items():
        fires = _target(entry["fires"]) if "fires" in entry else _cases("fires").get(rule)
        quiet = _target(entry["quiet"]) if "quiet" in entry else _cases("quiet").get(rule)
        if fires is not None and rule not in rules_by_target[fires]:
            wrong.append(f"{rule} does not fire on {fires}")
        if quiet is not None and rule in rules_by_target[quiet]:
            wrong.append(f"{rule} fires on {quiet}")
    assert wrong == []
