"""The blind set is well formed: every case has a bad and a good manifest that parse, and metadata.

Detection is not asserted here; `tests/blind/measure.py` reports it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.blind.measure import HERE, case_dirs

FAMILIES = {
    "launcher-command-line",
    "environment-variables",
    "operator-semantics",
    "scheduler-queues",
    "argocd-lifecycle",
    "storage",
    "cluster-configuration",
}
OUTCOMES = {"error", "hang", "silent slowdown", "lost data", "wasted resources"}
FIELDS = {"source", "component", "version", "family", "what_happens", "expected", "why"}
CASES = case_dirs()


def load_case(case: Path) -> dict:
    return yaml.safe_load((case / "case.yaml").read_text())


def load_documents(path: Path) -> list:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def test_set_has_at_least_seventy_numbered_cases():
    assert len(CASES) >= 70
    numbers = [case.name.split("-", 1)[0] for case in CASES]
    assert all(re.fullmatch(r"\d{3}", n) for n in numbers), numbers
    assert len(set(numbers)) == len(numbers)


def test_every_case_directory_has_its_three_files():
    for case in sorted(p for p in HERE.iterdir() if p.is_dir() and p.name[:3].isdigit()):
        missing = {"bad.yaml", "good.yaml", "case.yaml"} - {p.name for p in case.iterdir()}
        assert not missing, f"{case.name} lacks {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_manifests_parse_as_kubernetes_objects(case: Path):
    parsed = {}
    for name in ("bad.yaml", "good.yaml"):
        docs = load_documents(case / name)
        assert docs, f"{case.name}/{name} has no document"
        for doc in docs:
            assert isinstance(doc, dict), f"{case.name}/{name}: a document is not a mapping"
            assert doc.get("apiVersion") and doc.get("kind"), f"{case.name}/{name}: {doc}"
            assert doc.get("metadata", {}).get("name"), f"{case.name}/{name}: unnamed {doc['kind']}"
        parsed[name] = docs
    assert parsed["bad.yaml"] != parsed["good.yaml"], f"{case.name}: bad and good are the same"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_metadata_is_complete(case: Path):
    meta = load_case(case)
    assert set(meta) == FIELDS, f"{case.name}: fields {sorted(set(meta) ^ FIELDS)}"
    source = urlparse(meta["source"])
    assert source.scheme == "https" and source.netloc, f"{case.name}: source {meta['source']!r}"
    assert meta["family"] in FAMILIES
    assert meta["what_happens"] in OUTCOMES
    assert meta["expected"] in {"error", "warning"}
    if meta["what_happens"] == "error":
        assert meta["expected"] == "error", f"{case.name}: the harm is an error"
    assert all(str(meta[key]).strip() for key in ("component", "version"))
    assert len(meta["why"].split()) >= 30, f"{case.name}: why is too short"


def test_no_family_exceeds_a_fifth_of_the_set():
    families = Counter(load_case(case)["family"] for case in CASES)
    cap = math.ceil(0.2 * len(CASES))
    assert set(families) == FAMILIES, f"families without a case: {FAMILIES - set(families)}"
    assert max(families.values()) <= cap, families
