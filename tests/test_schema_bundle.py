"""The core Kubernetes schemas trainops ships (trainops.schema.bundle)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import write
from trainops.schema import bundle

PRIORITY_CLASS = """\
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: training-high
value: 100000
description: Multi-node training jobs that must not wait behind batch work.
"""


def test_the_bundle_matches_kubernetes_validate():
    """Rebuilt from the installed kubernetes-validate, the bundle is byte for byte the
    committed one (stale otherwise: run python -m trainops.schema.bundle)."""
    assert bundle.main(["--check"]) == 0


def test_every_minor_from_1_25_to_1_37_in_both_strictnesses():
    assert bundle.versions() == [f"1.{minor}" for minor in range(25, 38)]
    for version in bundle.versions():
        for strict in (False, True):
            schemas = bundle.load(version, strict)
            assert "_definitions.json" in schemas and "deployment-apps-v1.json" in schemas


def test_descriptions_go_but_a_field_named_description_stays(trainops, tmp_path: Path):
    schema = bundle.load("1.35", True)["priorityclass-scheduling-v1.json"]
    assert "description" not in schema and "description" in schema["properties"]
    priority = write(tmp_path / "priority.yaml", PRIORITY_CLASS)
    run = trainops("validate", "--no-policies", "--format", "json", str(priority))
    assert run.code == 0 and json.loads(run.out)["findings"] == []
    typo = write(tmp_path / "typo.yaml", PRIORITY_CLASS.replace("description:", "descripton:"))
    assert trainops("validate", "--no-policies", str(typo)).code == 1
