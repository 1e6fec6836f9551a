"""Every bad variant gets an error its good variant does not; every good one is error-free."""

from __future__ import annotations

import pytest

from tests.apicheck.pairs import PAIRS, Pair
from tests.support import REPO
from trainops.model import ERROR, Document
from trainops.schema.check import check_document
from trainops.schema.registry import SchemaRegistry, crd_location

REGISTRY = SchemaRegistry(["default", crd_location(REPO / "schemas")], "1.35", strict=True)


def errors(obj: dict) -> set[tuple[str, str, str]]:
    _, findings = check_document(Document(obj, "pairs"), REGISTRY, missing="error")
    return {(f.rule, f.path, f.message) for f in findings if f.severity == ERROR}


def test_the_corpus_is_broad():
    assert len(PAIRS) >= 40
    assert len({p.name for p in PAIRS}) == len(PAIRS)
    kinds = {p.good["kind"] for p in PAIRS}
    assert {"Deployment", "Job", "PyTorchJob", "MPIJob", "TrainJob", "JobSet"} <= kinds
    assert {"ClusterTrainingRuntime", "ClusterQueue", "ResourceFlavor"} <= kinds
    assert all(p.source for p in PAIRS)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)
def test_good_is_error_free_and_bad_gets_its_own_error(pair: Pair):
    good = errors(pair.good)
    assert good == set(), good
    bad = errors(pair.bad)
    new = {e for e in bad if e not in good and e[0] == pair.rule}
    assert new, f"expected a {pair.rule} error, got {bad}"
